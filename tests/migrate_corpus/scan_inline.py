"""A GRU scanned over time by lifting the cell class directly, Flax 0.6 style (test data for
rnnlib.migrate): ``nn.scan(nn.GRUCell, ...)()`` built inline without features, its carry from
the static ``nn.GRUCell.initialize_carry(key, (batch,), size)``.
"""

import jax
import flax.linen as nn

from _report import fill, inputs, save

BATCH, TIME, FEATURES_IN, HIDDEN = 2, 4, 3, 5


class Encoder(nn.Module):
    @nn.compact
    def __call__(self, xs):
        carry = nn.GRUCell.initialize_carry(jax.random.PRNGKey(0), (xs.shape[0],), HIDDEN)
        carry, ys = nn.scan(
            nn.GRUCell,
            variable_broadcast="params",
            split_rngs={"params": False},
            in_axes=1,
            out_axes=1,
        )()(carry, xs)
        return carry, nn.Dense(2)(ys)


xs = inputs(BATCH, TIME, FEATURES_IN)
variables = fill(Encoder().init(jax.random.PRNGKey(1), xs))
carry, ys = Encoder().apply(variables, xs)
assert ys.shape == (BATCH, TIME, 2) and carry.shape == (BATCH, HIDDEN)
save(variables, carry=carry, ys=ys)
print("ys", ys.shape)
