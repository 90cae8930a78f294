"""Checker for the speed chapter's exercise: an Elman RNN with its input side hoisted."""

from __future__ import annotations

import jax

from rnnlib.exercises._check import Feedback, attempt, compare, run_cases
from rnnlib.rnn import RNN
from rnnlib.simple import SimpleCell


def _count_dots(jaxpr) -> int:
    """dot_general equations in a jaxpr and the calls nested in it, not inside scans."""
    count = 0
    for eqn in jaxpr.eqns:
        count += eqn.primitive.name == "dot_general"
        if eqn.primitive.name != "scan":
            for value in eqn.params.values():
                sub = getattr(value, "jaxpr", value)
                count += _count_dots(sub) if hasattr(sub, "eqns") else 0
    return count


def matmuls(fn, *args) -> tuple[int, int]:
    """(matmuls inside the first scan's body, matmuls outside any scan) of ``fn(*args)``."""
    jaxpr = jax.make_jaxpr(fn)(*args).jaxpr
    scans = [eqn for eqn in jaxpr.eqns if eqn.primitive.name == "scan"]
    inside = _count_dots(scans[0].params["jaxpr"].jaxpr) if scans else 0
    return inside, _count_dots(jaxpr)


def _cases():
    shapes = [((2, 5, 3), 4), ((3, 7, 2), 5), ((1, 1, 4), 3)]
    cases = []
    for index, (x_shape, features) in enumerate(shapes):
        key_x, key_p = jax.random.split(jax.random.key(index))
        x = jax.random.normal(key_x, x_shape)
        params = RNN(SimpleCell(features=features)).init(key_p, x)["params"]["cell"]
        # A fresh cell's bias is zero, which would let a forgotten bias pass: make it count.
        bias = jax.random.uniform(
            jax.random.fold_in(key_p, 1), (features,), minval=-0.5, maxval=0.5
        )
        params = {"i": {**params["i"], "bias": bias}, "h": params["h"]}
        want = RNN(SimpleCell(features=features)).apply({"params": {"cell": params}}, x)
        cases.append((f"x {x_shape}, features={features}", (params, x), want))
    return cases


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
