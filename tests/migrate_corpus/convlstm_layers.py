"""A stack of ConvLSTM layers built in ``setup`` as a list, Flax 0.6 style (test data for
rnnlib.migrate): the old three-argument ``initialize_carry`` on ``self.lstm[i]``, whose size
carries the signal dims.
"""

import jax
import jax.numpy as jnp
import flax.linen as nn

from _report import fill, inputs, save

BATCH, TIME, SIDE, CHANNELS, FEATURES, LAYERS = 2, 3, 5, 2, 4, 2


class VideoEncoder(nn.Module):
    features: int
    num_layers: int

    def setup(self):
        self.lstm = [
            nn.ConvLSTMCell(features=self.features, kernel_size=(3, 3))
            for _ in range(self.num_layers)
        ]

    def __call__(self, frames):
        x = frames
        for i in range(self.num_layers):
            carry = self.lstm[i].initialize_carry(
                jax.random.PRNGKey(0), x.shape[:1], x.shape[2:4] + (self.features,)
            )
            ys = []
            for t in range(x.shape[1]):
                carry, y = self.lstm[i](carry, x[:, t])
                ys.append(y)
            x = jnp.stack(ys, axis=1)
        return x


model = VideoEncoder(features=FEATURES, num_layers=LAYERS)
frames = inputs(BATCH, TIME, SIDE, SIDE, CHANNELS)
variables = fill(model.init(jax.random.PRNGKey(1), frames))
out = model.apply(variables, frames)
assert out.shape == (BATCH, TIME, SIDE, SIDE, FEATURES)
save(variables, out=out)
print("out", out.shape)
