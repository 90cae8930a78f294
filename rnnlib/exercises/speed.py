"""Checker for the speed chapter's exercise: an Elman RNN with its input side hoisted."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from rnnlib.exercises._check import Feedback, attempt, compare, run_cases
from rnnlib.rnn import RNN
from rnnlib.simple import SimpleCell


def _nested_jaxprs(eqn):
    """The jaxprs an equation calls: a ``jit``'s, a ``custom_jvp``'s, a scan's body."""
    for value in eqn.params.values():
        sub = getattr(value, "jaxpr", value)  # a ClosedJaxpr holds its Jaxpr
        if hasattr(sub, "eqns"):
            yield sub


def _count_dots(jaxpr) -> int:
    """dot_general equations in a jaxpr and the calls nested in it, not inside scans."""
    count = 0
    for eqn in jaxpr.eqns:
        count += eqn.primitive.name == "dot_general"
        if eqn.primitive.name != "scan":
            count += sum(_count_dots(sub) for sub in _nested_jaxprs(eqn))
    return count


def _first_scan(jaxpr):
    """The first scan equation in a jaxpr or the calls nested in it, or None."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "scan":
            return eqn
        for sub in _nested_jaxprs(eqn):
            found = _first_scan(sub)
            if found is not None:
                return found
    return None


def matmuls(fn, *args) -> tuple[int, int]:
    """(matmuls inside the first scan's body, matmuls outside any scan) of ``fn(*args)``;
    the first scan may sit inside nested calls, as an LSTM's loop does under its
    derivative rule."""
    jaxpr = jax.make_jaxpr(fn)(*args).jaxpr
    scan = _first_scan(jaxpr)
    inside = _count_dots(scan.params["jaxpr"].jaxpr) if scan is not None else 0
    return inside, _count_dots(jaxpr)


def _normal(rng, shape, scale=1.0):
    return jnp.asarray(scale * rng.standard_normal(shape), jnp.float32)


@functools.cache
def _case_arrays():
    """Three cases' inputs, parameters and reference outputs as arrays, made once per process.

    The inputs and parameters come from NumPy, and the reference runs under ``jax.jit``: a
    checker called from a notebook should not spend its time compiling its own set-up.
    """
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
        want = jax.jit(RNN(SimpleCell(features=features)).apply)({"params": {"cell": params}}, x)
        cases.append((f"x {x_shape}, features={features}", x, w_i, bias, w_h, want))
    return tuple(cases)


def _cases():
    """The cases as ``run_cases`` takes them, with parameter dicts of their own each call."""
    return [
        (name, ({"i": {"kernel": w_i, "bias": bias}, "h": {"kernel": w_h}}, x), want)
        for name, x, w_i, bias, w_h, want in _case_arrays()
    ]


def check_hoisted_elman(elman_hoisted) -> Feedback:
    """Check ``elman_hoisted(p, x)``: outputs, and one matmul per step with one before the loop.

    ``p`` is a ``SimpleCell`` parameter dict (``{"i": {"kernel", "bias"}, "h": {"kernel"}}``),
    ``x`` is ``(batch, time, channels)``, the initial carry is zeros, and the outputs are
    ``(batch, time, features)`` as ``RNN(SimpleCell(features))`` returns them.
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
