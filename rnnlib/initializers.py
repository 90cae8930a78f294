"""Initializers rnnlib adds to ``jax.nn.initializers``: the cells' defaults that differ."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def orthogonal(scale: float = 1.0):
    """``jax.nn.initializers.orthogonal`` that also works for 16-bit floats: it draws in float32
    and casts, as XLA:CPU's QR has no half-precision kernel (Flax's linen cells fail there)."""
    draw = jax.nn.initializers.orthogonal(scale)

    def init(key, shape, dtype=jnp.float32):
        if jnp.issubdtype(dtype, jnp.floating) and jnp.finfo(dtype).bits < 32:
            return draw(key, shape, jnp.float32).astype(dtype)
        return draw(key, shape, dtype)

    return init
