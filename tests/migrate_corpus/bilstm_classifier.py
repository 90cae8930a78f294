"""A bidirectional-LSTM sentence classifier in the Flax 0.6 style (test data for rnnlib.migrate).

The LSTM is an `nn.scan` over `nn.OptimizedLSTMCell`, wrapped in a module whose carry comes
from a static `initialize_carry`, as in the 0.6-era SST-2 example.
"""

import jax
import jax.numpy as jnp
import flax.linen as nn

VOCAB_SIZE, EMBED_SIZE, HIDDEN_SIZE, NUM_CLASSES = 20, 8, 16, 3


class SimpleLSTM(nn.Module):
    """Runs an LSTM over axis 1 (time) of a batch of embedded sentences."""

    @nn.compact
    def __call__(self, carry, x):
        ScanLSTM = nn.scan(
            nn.OptimizedLSTMCell,
            variable_broadcast="params",
            split_rngs={"params": False},
            in_axes=1,
            out_axes=1,
        )
        return ScanLSTM()(carry, x)

    @staticmethod
    def initialize_carry(batch_dims, hidden_size):
        # The carry starts at zeros, so a fixed key is fine.
        return nn.OptimizedLSTMCell.initialize_carry(
            jax.random.PRNGKey(0), batch_dims, hidden_size
        )


class BiLSTMClassifier(nn.Module):
    """Embeds tokens, reads them in both directions and classifies the sentence."""

    @nn.compact
    def __call__(self, tokens):
        x = nn.Embed(VOCAB_SIZE, EMBED_SIZE)(tokens)
        batch = (x.shape[0],)
        _, forward = SimpleLSTM(name="forward")(SimpleLSTM.initialize_carry(batch, HIDDEN_SIZE), x)
        _, backward = SimpleLSTM(name="backward")(
            SimpleLSTM.initialize_carry(batch, HIDDEN_SIZE), jnp.flip(x, axis=1)
        )
        both = jnp.concatenate([forward[:, -1], backward[:, -1]], axis=-1)
        return nn.Dense(NUM_CLASSES)(both)


tokens = jax.random.randint(jax.random.PRNGKey(1), (4, 6), 0, VOCAB_SIZE)
model = BiLSTMClassifier()
variables = model.init(jax.random.PRNGKey(2), tokens)
logits = model.apply(variables, tokens)
assert logits.shape == (4, NUM_CLASSES), logits.shape
print("logits", logits.shape)
