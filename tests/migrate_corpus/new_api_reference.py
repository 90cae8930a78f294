"""The same ideas written in the current Flax API: rnnlib.migrate must find nothing here.

Instance calls such as `nn.LSTMCell(features=4).initialize_carry(key, x.shape)` and
`cell.initialize_carry(key, shape)` are the current API.
"""

import jax
import jax.numpy as jnp
import flax.linen as nn

x = jnp.ones((2, 5, 3))
key = jax.random.PRNGKey(0)
carry = nn.LSTMCell(features=4).initialize_carry(key, x[:, 0].shape)
cell = nn.GRUCell(features=6)
h = cell.initialize_carry(key, x[:, 0].shape)
rnn = nn.RNN(nn.OptimizedLSTMCell(features=4), return_carry=True)
variables = rnn.init(key, x, initial_carry=carry)
(c, h_last), y = rnn.apply(variables, x, initial_carry=carry)
assert y.shape == (2, 5, 4) and h.shape == (2, 6) and c.shape == (2, 4)
print("outputs", y.shape)
