"""An LSTM over a chain of spins in 64-bit floats, in the shape of vmc_jax's
``jVMC/nets/lstm.py`` (test data for rnnlib.migrate, written for these tests): the file turns on
``jax_enable_x64``, builds its carry with the static ``initialize_carry`` and steps the cell in an
``nn.scan``. Under x64 that carry is float64, and the scan needs the carry it returns to
keep that dtype, so a rewrite that made a float32 carry would stop it.
"""

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import flax.linen as nn  # noqa: E402

from _report import fill, save  # noqa: E402

L, HIDDEN = 6, 5


class SpinLSTM(nn.Module):
    hiddenSize: int = HIDDEN

    @nn.compact
    def __call__(self, spins):
        carry = nn.LSTMCell.initialize_carry(jax.random.PRNGKey(0), (1,), self.hiddenSize)
        xs = spins[:, None, None] * jnp.ones((1, 1, 2), jnp.float64)
        scan = nn.scan(
            nn.LSTMCell, variable_broadcast="params", split_rngs={"params": False}
        )
        carry, ys = scan(name="cell")(carry, xs)
        head = nn.Dense(2, name="head", param_dtype=jnp.float64)
        return carry, head(ys).sum()

spins = jnp.asarray([1.0, -1.0, 1.0, 1.0, -1.0, 1.0])
model = SpinLSTM()
carry = nn.LSTMCell.initialize_carry(jax.random.PRNGKey(0), (1,), HIDDEN)
variables = fill(model.init(jax.random.PRNGKey(1), spins))
(c, h), logit = model.apply(variables, spins)
assert c.dtype == jnp.float64 and h.shape == (1, HIDDEN)
save(variables, c=c, h=h, logit=logit)
print("carry", c.dtype, "logit", logit.dtype)
