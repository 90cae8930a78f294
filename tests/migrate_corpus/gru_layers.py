"""A session model that steps one GRU cell per layer over a hidden state the caller keeps,
Flax 0.6 style (test data for rnnlib.migrate): each ``fnn.GRUCell()`` is built without features
and called right away on its layer's carry, ``hidden[i]``.
"""

import jax
import jax.numpy as jnp
import flax.linen as fnn

from _report import fill, inputs, save

BATCH, TIME, FEATURES_IN, HIDDEN, LAYERS = 2, 4, 3, 5, 2


class SessionGRU(fnn.Module):
    num_layers: int

    @fnn.compact
    def __call__(self, x, hidden):
        new_hidden = []
        for i in range(self.num_layers):
            h, x = fnn.GRUCell()(hidden[i], x)
            new_hidden.append(h)
        return fnn.Dense(FEATURES_IN)(x), jnp.stack(new_hidden, axis=0)


model = SessionGRU(num_layers=LAYERS)
xs = inputs(BATCH, TIME, FEATURES_IN)
hidden = jnp.zeros((LAYERS, BATCH, HIDDEN))
variables = fill(model.init(jax.random.PRNGKey(1), xs[:, 0], hidden))
ys = []
for t in range(TIME):
    y, hidden = model.apply(variables, xs[:, t], hidden)
    ys.append(y)
ys = jnp.stack(ys, axis=1)
assert ys.shape == (BATCH, TIME, FEATURES_IN)
save(variables, hidden=hidden, ys=ys)
print("ys", ys.shape)
