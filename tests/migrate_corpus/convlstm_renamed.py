"""A ConvLSTM under its early linen name, ``nn.ConvLSTM`` (test data for rnnlib.migrate; Flax
0.6.11 no longer has that name either, so this one runs on no Flax without the rename).
"""

import jax
import flax.linen as nn

from _report import fill, inputs

cell = nn.ConvLSTM(features=4, kernel_size=(3, 3))
x = inputs(2, 6, 6, 3)
carry = (inputs(2, 6, 6, 4, seed=2), inputs(2, 6, 6, 4, seed=3))
variables = fill(cell.init(jax.random.PRNGKey(0), carry, x))
carry, y = cell.apply(variables, carry, x)
assert y.shape == (2, 6, 6, 4)
print("y", y.shape)
