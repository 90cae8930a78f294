"""A stack of LSTM cells behind a wrapper whose own ``initialize_carry`` takes Flax 0.6's
arguments and hands them on to every cell, ``init_fn`` included (test data for rnnlib.migrate).

The cells are built by a helper and passed in as a field, so nothing in the file says what
``cell`` is where the wrapper calls ``cell.initialize_carry(key, batch_dims, size, init_fn=...)``;
that the wrapper's method has the same name and arguments says nothing about ``cell`` either.
"""

from typing import Any, List

import jax
import jax.numpy as jnp
import flax.linen as nn

from _report import fill, inputs, save

BATCH, TIME, FEATURES_IN, HIDDEN, LAYERS = 2, 4, 3, 5, 2


def make_cells(n):
    return [nn.LSTMCell(name=f"layer_{i}") for i in range(n)]


class StackedCells(nn.Module):
    cells: List[Any]

    def __call__(self, carry, x):
        new_carry = []
        for c, cell in zip(carry, self.cells):
            c, x = cell(c, x)
            new_carry.append(c)
        return new_carry, x

    def initialize_carry(self, rng, batch_dims, size, init_fn=nn.initializers.zeros):
        keys = jax.random.split(rng, len(self.cells))
        return [
            cell.initialize_carry(key, batch_dims, size, init_fn=init_fn)
            for key, cell in zip(keys, self.cells)
        ]


stack = StackedCells(cells=make_cells(LAYERS))
xs = inputs(BATCH, TIME, FEATURES_IN)
carry = stack.initialize_carry(
    jax.random.PRNGKey(0), (BATCH,), HIDDEN, init_fn=nn.initializers.ones
)
variables = fill(stack.init(jax.random.PRNGKey(1), carry, xs[:, 0]))
ys = []
for t in range(TIME):
    carry, y = stack.apply(variables, carry, xs[:, t])
    ys.append(y)
ys = jnp.stack(ys, axis=1)
assert ys.shape == (BATCH, TIME, HIDDEN)
save(variables, carry=carry, ys=ys)
print("ys", ys.shape)
