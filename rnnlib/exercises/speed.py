"""Checker for the speed chapter's exercise: an Elman RNN with its input side hoisted.

The reference is Flax itself, ``flax.linen.RNN(flax.linen.SimpleCell(features))``, run on the
same parameters; the matmuls are counted in the program JAX traces for the reader's function.
Nothing here depends on how rnnlib runs its own cells.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from rnnlib.exercises._check import Feedback, attempt, compare, run_cases

_LOOPS = ("scan", "while")


def _sub_jaxprs(eqn):
    """The jaxprs an equation calls: a jit's, a custom rule's, a loop's body, a cond's branches."""
    for value in eqn.params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            sub = getattr(item, "jaxpr", item)  # a ClosedJaxpr holds its Jaxpr
            if hasattr(sub, "eqns"):
                yield sub


def matmuls(fn, *args) -> tuple[int, int]:
    """(matmuls in the first loop, matmuls outside every loop) in the jaxpr of ``fn(*args)``.

    A matmul is a ``dot_general`` equation; nested calls are followed. The first loop is the
    first ``scan`` or ``while`` met in the program's order, and what its body runs (calls and
    loops nested in it too) runs once per step; in a training step that is the forward loop.
    """
    loops: list[int] = []
    outside = 0

    def walk(jaxpr, loop):
        nonlocal outside
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "dot_general":
                if loop is None:
                    outside += 1
                else:
                    loops[loop] += 1
            if loop is None and eqn.primitive.name in _LOOPS:
                loops.append(0)
                inner = len(loops) - 1
            else:
                inner = loop
            for sub in _sub_jaxprs(eqn):
                walk(sub, inner)

    walk(jax.make_jaxpr(fn)(*args).jaxpr, None)
    return (loops[0] if loops else 0), outside


def _normal(rng, shape, scale=1.0):
    return jnp.asarray(scale * rng.standard_normal(shape), jnp.float32)


@functools.cache
def _case_arrays():
    """Three cases' inputs, parameters and Flax's outputs, made once per process.

    The inputs and parameters come from NumPy; Flax's ``SimpleCell`` runs under ``jax.jit``, so
    that a checker called from a notebook spends little time on its own set-up.
    """
    import flax.linen as nn

    shapes = [((2, 5, 3), 4), ((3, 7, 2), 5), ((1, 1, 4), 3)]
    cases = []
    for index, (x_shape, features) in enumerate(shapes):
        rng = np.random.default_rng(index)
        channels = x_shape[-1]
        x = _normal(rng, x_shape)
        w_i = _normal(rng, (channels, features), scale=channels**-0.5)
        w_h = _normal(rng, (features, features), scale=features**-0.5)
        # A zero bias would let a forgotten bias pass: make it count.
        bias = jnp.asarray(rng.uniform(-0.5, 0.5, features), jnp.float32)
        params = {"i": {"kernel": w_i, "bias": bias}, "h": {"kernel": w_h}}
        flax_rnn = nn.RNN(nn.SimpleCell(features=features))
        want = jax.jit(flax_rnn.apply)({"params": {"cell": params}}, x)
        cases.append((f"x {x_shape}, features={features}", x, w_i, bias, w_h, want))
    return tuple(cases)


def _cases():
    """The cases as ``run_cases`` takes them, with parameter dicts of their own each call."""
    return [
        (name, ({"i": {"kernel": w_i, "bias": bias}, "h": {"kernel": w_h}}, x), want)
        for name, x, w_i, bias, w_h, want in _case_arrays()
    ]


def check_hoisted_elman(elman_hoisted) -> Feedback:
    """Check ``elman_hoisted(p, x)``: Flax's outputs, one matmul per step and one before the loop.

    ``p`` holds the parameters of ``flax.linen.SimpleCell`` (``{"i": {"kernel", "bias"}, "h":
    {"kernel"}}``), ``x`` is ``(batch, time, channels)``, the initial carry is zeros, and the
    outputs are ``(batch, time, features)``, as ``flax.linen.RNN(SimpleCell(features))``
    returns them.
    """

    def judge(got, params, x, want) -> str | None:
        problem = compare("the outputs", got, want)
        if problem:
            return problem
        counted, error = attempt(matmuls, elman_hoisted, params, x)
        if error:
            return f"tracing it to count the matmuls failed: {error}"
        if counted != (1, 1):
            inside, outside = counted
            return (
                f"the outputs are right, but there are {inside} matmul(s) per step and"
                f" {outside} before the loop; hoisting leaves 1 and 1"
                + (" (the input side is still inside the loop)" if inside >= 2 else "")
            )
        return None

    return run_cases("check_hoisted_elman", elman_hoisted, _cases(), judge)
