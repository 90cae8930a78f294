"""A scanned GRU class returned from a helper method and built later, Flax 0.6 style (test data
for rnnlib.migrate); the scanned ``__call__`` of a second, decorated scan builds its
``nn.OptimizedLSTMCell()`` from the carry it is given.
"""

import functools

import jax
import flax.linen as nn

from _report import fill, inputs, save

BATCH, TIME, FEATURES_IN, HIDDEN = 2, 4, 3, 6


class Step(nn.Module):
    @functools.partial(
        nn.scan, variable_broadcast="params", split_rngs={"params": False}, in_axes=1, out_axes=1
    )
    @nn.compact
    def __call__(self, carry, x):
        return nn.OptimizedLSTMCell()(carry, x)


class Stack(nn.Module):
    def scanned_gru(self):
        return nn.scan(
            nn.GRUCell,
            variable_broadcast="params",
            split_rngs={"params": False},
            in_axes=1,
            out_axes=1,
        )

    @nn.compact
    def __call__(self, xs):
        key = jax.random.PRNGKey(0)
        h = nn.GRUCell.initialize_carry(key, (xs.shape[0],), HIDDEN)
        h, ys = self.scanned_gru()(name="gru")(h, xs)
        carry = nn.OptimizedLSTMCell.initialize_carry(key, (xs.shape[0],), HIDDEN)
        carry, zs = Step()(carry, ys)
        return h, carry, zs


xs = inputs(BATCH, TIME, FEATURES_IN)
variables = fill(Stack().init(jax.random.PRNGKey(1), xs))
h, (c, h2), zs = Stack().apply(variables, xs)
assert zs.shape == (BATCH, TIME, HIDDEN)
save(variables, h=h, c=c, h2=h2, zs=zs)
print("zs", zs.shape)
