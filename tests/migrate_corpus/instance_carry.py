"""Old three-argument ``initialize_carry`` calls on cell instances, Flax 0.6 style (test data for
rnnlib.migrate): on a cell built once and stepped by hand, and on ``rnn.cell`` of an ``nn.RNN``.
"""

import jax
import jax.numpy as jnp
import flax.linen as nn

from _report import fill, inputs, save

BATCH, TIME, FEATURES_IN, HIDDEN = 2, 4, 3, 5

xs = inputs(BATCH, TIME, FEATURES_IN)
key = jax.random.PRNGKey(0)

cell = nn.LSTMCell()
carry = cell.initialize_carry(key, (BATCH,), HIDDEN)
cell_vars = fill(cell.init(key, carry, xs[:, 0]))
ys = []
for t in range(TIME):
    carry, y = cell.apply(cell_vars, carry, xs[:, t])
    ys.append(y)
ys = jnp.stack(ys, axis=1)

rnn = nn.RNN(nn.GRUCell(), HIDDEN, return_carry=True)
rnn_vars = fill(rnn.init(key, xs))
h0 = rnn.cell.initialize_carry(key, (BATCH,), HIDDEN)
h, zs = rnn.apply(rnn_vars, xs, initial_carry=h0)
assert ys.shape == zs.shape == (BATCH, TIME, HIDDEN)
save({"cell": cell_vars, "rnn": rnn_vars}, c=carry[0], h=carry[1], ys=ys, last=h, zs=zs)
print("ys", ys.shape)
