"""A GRU language model in the Flax 0.6 style (test data for rnnlib.migrate).

It builds its carry with the static `nn.GRUCell.initialize_carry(key, (batch,), hidden)` and
runs the cell with `nn.RNN(nn.GRUCell(), cell_size=...)`, then takes one SGD step.
"""

import jax
import jax.numpy as jnp
import flax.linen as nn

VOCAB_SIZE, EMBED_SIZE, HIDDEN_SIZE = 24, 8, 16
BATCH, TIME = 2, 5


class GRULanguageModel(nn.Module):
    """Predicts the next token at every step."""

    @nn.compact
    def __call__(self, tokens, carry):
        x = nn.Embed(VOCAB_SIZE, EMBED_SIZE)(tokens)
        rnn = nn.RNN(nn.GRUCell(), cell_size=HIDDEN_SIZE, return_carry=True)
        carry, hidden = rnn(x, initial_carry=carry)
        return carry, nn.Dense(VOCAB_SIZE)(hidden)


def loss_fn(params, tokens, carry):
    _, logits = GRULanguageModel().apply(params, tokens[:, :-1], carry)
    log_probs = jax.nn.log_softmax(logits)
    targets = jax.nn.one_hot(tokens[:, 1:], VOCAB_SIZE)
    return -jnp.mean(jnp.sum(targets * log_probs, axis=-1))


key = jax.random.PRNGKey(0)
tokens = jax.random.randint(key, (BATCH, TIME + 1), 0, VOCAB_SIZE)
carry = nn.GRUCell.initialize_carry(jax.random.PRNGKey(1), (BATCH,), HIDDEN_SIZE)
params = GRULanguageModel().init(key, tokens[:, :-1], carry)
loss, grads = jax.value_and_grad(loss_fn)(params, tokens, carry)
params = jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)
new_loss = loss_fn(params, tokens, carry)

final_carry, logits = GRULanguageModel().apply(params, tokens[:, :-1], carry)
assert logits.shape == (BATCH, TIME, VOCAB_SIZE), logits.shape
assert final_carry.shape == (BATCH, HIDDEN_SIZE), final_carry.shape
assert jnp.isfinite(new_loss)
print("loss", float(loss), "->", float(new_loss))
