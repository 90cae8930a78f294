"""An LSTM encoder that stores a scanned cell class on ``self`` in ``setup``, Flax 0.6 style
(test data for rnnlib.migrate). The scanned class is built there without features; the carry is
made in ``__call__`` with the static ``initialize_carry`` and the module's ``hidden_size``.
"""

import functools

import jax
import flax.linen as nn

from _report import fill, inputs, save

BATCH, TIME, FEATURES_IN = 2, 4, 3

ScanLSTM = nn.scan(
    nn.LSTMCell, variable_broadcast="params", split_rngs={"params": False}, in_axes=1, out_axes=1
)


class Encoder(nn.Module):
    hidden_size: int

    def setup(self):
        self.lstm = ScanLSTM()
        self.head = nn.Dense(2)

    def __call__(self, xs):
        carry = nn.LSTMCell.initialize_carry(
            jax.random.PRNGKey(0), xs.shape[:1], self.hidden_size
        )
        carry, ys = self.lstm(carry, xs)
        return carry, self.head(ys)


model = Encoder(hidden_size=5)
xs = inputs(BATCH, TIME, FEATURES_IN)
variables = fill(model.init(jax.random.PRNGKey(1), xs))
run = functools.partial(model.apply, variables)
(c, h), ys = run(xs)
assert ys.shape == (BATCH, TIME, 2) and h.shape == (BATCH, 5)
save(variables, c=c, h=h, ys=ys)
print("ys", ys.shape)
