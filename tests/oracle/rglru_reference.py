"""Reference results from recurrentgemma's own RG-LRU layer, for tests/parity/test_rglru_oracle.py.

This script runs in the side environment .venv-recurrentgemma (recurrentgemma 1.0.1, Google
DeepMind's package for Griffin and RecurrentGemma; see requirements-recurrentgemma.txt), never
in the book's environment::

    .venv-recurrentgemma/bin/python tests/oracle/rglru_reference.py OUT.npz

For every case it builds ``recurrentgemma.jax.layers.RGLRU(width, num_heads)``, initialises it,
moves every parameter by random numbers (so the gates' biases are not zero and the decays leave
their ring), and runs it on a random sequence from a random carry (its ``cache``), with
``segment_pos`` counting from 1: no step is the start of a document, where the layer resets its
state. It runs both of the layer's scans (a sequential ``lax.scan`` and an associative scan)
and takes the gradient of a loss of the outputs with respect to the parameters, the input and
the carry. Inputs, variables, outputs and gradients go into one ``.npz``, under keys such as
``w8_h2/linear/grad/params/a_gate/w``. Inputs come from NumPy, so they do not depend on the JAX
version.

The cases, by name, are mirrored in tests/parity/test_rglru_oracle.py, and so is the loss.
"""

from __future__ import annotations

import argparse
from importlib.metadata import version

import jax
import jax.numpy as jnp
import numpy as np
from recurrentgemma import common
from recurrentgemma.jax import layers

# name: (width, num_heads, batch, time)
CASES = {"w8_h2": (8, 2, 3, 16), "w16_h4": (16, 4, 2, 64), "w6_h1": (6, 1, 2, 5)}
SCANS = {"linear": common.ScanType.LINEAR_NATIVE, "associative": common.ScanType.ASSOCIATIVE_NATIVE}


def loss(outputs, carry):
    """The scalar whose gradient is compared: every output and the final carry count."""
    return jnp.sum(jnp.sin(3.0 * outputs)) + jnp.sum(jnp.cos(2.0 * carry))


def flatten(tree, prefix, out):
    """Stores the leaves of ``tree`` (nested dicts) in ``out`` under ``prefix/key/...`` keys."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            flatten(value, f"{prefix}/{key}", out)
    else:
        out[prefix] = np.asarray(tree)


def case(name, width, heads, batch, time, rs, out):
    x = jnp.asarray(rs.normal(size=(batch, time, width)), jnp.float32)
    h0 = jnp.asarray(rs.normal(size=(batch, width)), jnp.float32)
    segment_pos = jnp.broadcast_to(jnp.arange(1, time + 1, dtype=jnp.int32), (batch, time))
    params = None
    for scan, scan_type in SCANS.items():
        layer = layers.RGLRU(width=width, num_heads=heads, scan_type=scan_type)
        if params is None:
            initial = layer.init(jax.random.PRNGKey(0), x, segment_pos, h0)["params"]
            params = jax.tree_util.tree_map(
                lambda p: jnp.asarray(p + 0.5 * rs.normal(size=p.shape), jnp.float32), initial
            )
            flatten({"x": x, "h0": h0, "params": params}, name, out)

        def apply(p, x, h0, layer=layer):
            return layer.apply({"params": p}, x, segment_pos, h0)

        outputs, carry = jax.jit(apply)(params, x, h0)
        grads = jax.jit(jax.grad(lambda *a, apply=apply: loss(*apply(*a)), argnums=(0, 1, 2)))(
            params, x, h0
        )
        grads = {"params": jax.device_get(grads[0]), "x": grads[1], "h0": grads[2]}
        flatten({"outputs": outputs, "carry": carry, "grad": grads}, f"{name}/{scan}", out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="the .npz file to write")
    args = parser.parse_args()
    out = {
        "versions/recurrentgemma": np.array(version("recurrentgemma")),
        "versions/jax": np.array(jax.__version__),
    }
    rs = np.random.RandomState(0)
    for name, (width, heads, batch, time) in CASES.items():
        case(name, width, heads, batch, time, rs, out)
    np.savez(args.out, **out)


if __name__ == "__main__":
    main()
