"""A ConvLSTM next-frame model in the Flax 0.6 style (test data for rnnlib.migrate).

The hand-written loop builds its carry with the static
`nn.ConvLSTMCell.initialize_carry(key, (batch,), (height, width, features))`; the encoder uses
`nn.RNN(..., cell_size=(height, width, features))`.
"""

import jax
import jax.numpy as jnp
import flax.linen as nn

BATCH, TIME, HEIGHT, WIDTH, CHANNELS, FEATURES = 2, 3, 8, 8, 3, 4


class NextFramePredictor(nn.Module):
    """Encodes a clip with one ConvLSTM, rolls a second one by hand, predicts the next frame."""

    @nn.compact
    def __call__(self, frames):
        encoder = nn.RNN(
            nn.ConvLSTMCell(features=FEATURES, kernel_size=(3, 3)),
            cell_size=(HEIGHT, WIDTH, FEATURES),
        )
        encoded = encoder(frames)
        carry = nn.ConvLSTMCell.initialize_carry(
            jax.random.PRNGKey(0), (frames.shape[0],), (HEIGHT, WIDTH, FEATURES)
        )
        cell = nn.ConvLSTMCell(features=FEATURES, kernel_size=(3, 3))
        for t in range(encoded.shape[1]):
            carry, y = cell(carry, encoded[:, t])
        return nn.Conv(CHANNELS, kernel_size=(1, 1))(y)


frames = jax.random.normal(jax.random.PRNGKey(1), (BATCH, TIME, HEIGHT, WIDTH, CHANNELS))
model = NextFramePredictor()
variables = model.init(jax.random.PRNGKey(2), frames)
prediction = model.apply(variables, frames)
assert prediction.shape == (BATCH, HEIGHT, WIDTH, CHANNELS), prediction.shape
print("next frame", prediction.shape)
