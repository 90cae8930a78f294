"""A cell class held in a dataclass field, scanned and asked for a static carry, Flax 0.6
style (test data for rnnlib.migrate). The checker reports both uses; a caller may set another
class in the field, so it does not rewrite the carry call.
"""

from typing import Any

import jax
import flax.linen as nn

from _report import fill, inputs, save


class Encoder(nn.Module):
    hidden: int = 5
    cell_type: Any = nn.GRUCell

    @nn.compact
    def __call__(self, xs):
        carry = self.cell_type.initialize_carry(jax.random.PRNGKey(0), xs.shape[:1], self.hidden)
        scan = nn.scan(
            self.cell_type,
            variable_broadcast="params",
            split_rngs={"params": False},
            in_axes=1,
            out_axes=1,
        )
        return scan()(carry, xs)


xs = inputs(2, 4, 3)
variables = fill(Encoder().init(jax.random.PRNGKey(1), xs))
carry, ys = Encoder().apply(variables, xs)
save(variables, carry=carry, ys=ys)
print("ys", ys.shape)
