"""A cell of its own, subclassing ``nn.RNNCellBase`` Flax 0.6 style (no ``num_feature_axes``, a
static three-argument ``initialize_carry``), scanned over time with ``nn.scan`` (test data for
rnnlib.migrate). Nothing here reaches ``nn.RNN``, so it runs unchanged under current Flax.
"""

import jax
import jax.numpy as jnp
import flax.linen as nn

from _report import fill, inputs, save

BATCH, TIME, FEATURES_IN, HIDDEN = 2, 4, 3, 5


class LeakyCell(nn.RNNCellBase):
    features: int

    @nn.compact
    def __call__(self, h, x):
        hx = jnp.concatenate([h, x], axis=-1)
        gate = nn.sigmoid(nn.Dense(self.features, name="gate")(hx))
        candidate = jnp.tanh(nn.Dense(self.features, name="candidate")(hx))
        h = (1.0 - gate) * h + gate * candidate
        return h, h

    @staticmethod
    def initialize_carry(rng, batch_dims, size, init_fn=nn.initializers.zeros):
        return init_fn(rng, tuple(batch_dims) + (size,))


class Encoder(nn.Module):
    features: int

    @nn.compact
    def __call__(self, xs):
        carry = LeakyCell.initialize_carry(jax.random.PRNGKey(0), xs.shape[:1], self.features)
        scan = nn.scan(
            LeakyCell,
            variable_broadcast="params",
            split_rngs={"params": False},
            in_axes=1,
            out_axes=1,
        )
        return scan(features=self.features, name="leaky")(carry, xs)


model = Encoder(features=HIDDEN)
xs = inputs(BATCH, TIME, FEATURES_IN)
variables = fill(model.init(jax.random.PRNGKey(1), xs))
h, ys = model.apply(variables, xs)
assert ys.shape == (BATCH, TIME, HIDDEN) and h.shape == (BATCH, HIDDEN)
save(variables, h=h, ys=ys)
print("ys", ys.shape)
