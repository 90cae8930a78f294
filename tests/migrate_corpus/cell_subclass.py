"""A decoder cell that subclasses ``nn.RNNCellBase``, Flax 0.6 style (test data for
rnnlib.migrate): no ``num_feature_axes``, a GRU built without features inside, stepped by a
hand-written loop from a carry made with the static ``nn.GRUCell.initialize_carry``.
"""

import jax
import jax.numpy as jnp
import flax.linen as nn

from _report import fill, inputs, save

BATCH, TIME, FEATURES_IN, HIDDEN, VOCAB = 2, 4, 3, 5, 7


class DecoderCell(nn.RNNCellBase):
    vocab_size: int

    @nn.compact
    def __call__(self, carry, x):
        carry, y = nn.GRUCell()(carry, x)
        return carry, nn.Dense(self.vocab_size)(y)


xs = inputs(BATCH, TIME, FEATURES_IN)
cell = DecoderCell(vocab_size=VOCAB)
carry = nn.GRUCell.initialize_carry(jax.random.PRNGKey(0), (BATCH,), HIDDEN)
variables = fill(cell.init(jax.random.PRNGKey(1), carry, xs[:, 0]))
logits = []
for t in range(TIME):
    carry, y = cell.apply(variables, carry, xs[:, t])
    logits.append(y)
logits = jnp.stack(logits, axis=1)
assert logits.shape == (BATCH, TIME, VOCAB)
save(variables, carry=carry, logits=logits)
print("logits", logits.shape)
