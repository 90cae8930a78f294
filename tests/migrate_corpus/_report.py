"""Shared by the idiom programs here (test data for rnnlib.migrate; not old-API code itself).

``fill`` replaces every variable by numbers NumPy draws in the order of the sorted paths, so a
program gets the same parameters under Flax 0.6.11 and under current Flax, whatever their random
number generators do. ``save`` writes the variables and the outputs to the ``.npz`` file named by
the ``MIGRATE_REPORT`` environment variable (nothing when it is not set), with keys such as
``param/params/ScanGRUCell_0/ir/kernel`` and ``out/ys``.
"""

import os

import jax.numpy as jnp
import numpy as np


def fill(variables):
    rng = np.random.RandomState(0)

    def draw(tree):
        if hasattr(tree, "items"):
            return {key: draw(tree[key]) for key in sorted(tree)}
        return jnp.asarray(rng.normal(0.0, 0.5, np.shape(tree)).astype(np.float32))

    return draw(variables)


def inputs(*shape, seed=1):
    return jnp.asarray(np.random.RandomState(seed).normal(size=shape).astype(np.float32))


def flat(tree, prefix):
    if hasattr(tree, "items"):
        out = {}
        for key in sorted(tree):
            out.update(flat(tree[key], f"{prefix}/{key}"))
        return out
    if isinstance(tree, (tuple, list)):
        out = {}
        for i, leaf in enumerate(tree):
            out.update(flat(leaf, f"{prefix}/{i}"))
        return out
    return {prefix: np.asarray(tree)}


def save(variables, **outputs):
    path = os.environ.get("MIGRATE_REPORT")
    if path:
        np.savez(path, **flat(variables, "param"), **flat(outputs, "out"))
