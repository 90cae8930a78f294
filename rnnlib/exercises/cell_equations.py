"""Checkers for the chapter "The cells from their equations" (``book/cell_equations.ipynb``).

Each checker calls the reader's step function on a few cases (several batch shapes, random
parameters and carries from fixed keys) and compares the new ``h`` with ``flax.linen``'s cell
given the same parameters (so the checks need flax, as the chapter does; it is imported only
when a check runs). When the values are wrong, it also runs the usual wrong versions of
the equations (the reset gate before the hidden matmul, ``z`` and ``1 - z`` swapped, a bias
left out) and, if the attempt matches one of them, says which::

    from rnnlib.exercises.cell_equations import check_gru_step
    check_gru_step(gru_step)   # ✘ check_gru_step: ... applies the reset gate before ...
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rnnlib.exercises._check import Feedback, case_problems, compare

CHANNELS = 3
FEATURES = 4
# (name, batch shape): one row, several rows, and two batch axes.
CASES = (("batch 1", (1,)), ("batch 5", (5,)), ("batch (2, 3)", (2, 3)))
_DRAW = 256  # random numbers per case: enough for x, h and a GRU's parameters


def _cases(cell, seed: int):
    """``(name, params, h, x)`` per case, all drawn at random from ``seed``.

    The parameters have the names and shapes the cell's ``init`` makes, and random values
    everywhere, biases included: a zero bias in the wrong place would go unnoticed. ``h`` is
    random too, so the hidden side counts.
    """
    for index, (name, batch) in enumerate(CASES):
        x = jax.ShapeDtypeStruct((*batch, CHANNELS), jnp.float32)
        h = jax.ShapeDtypeStruct((*batch, FEATURES), jnp.float32)
        layout = jax.eval_shape(cell.init, jax.random.key(0), h, x)["params"]
        leaves, tree = jax.tree_util.tree_flatten((h, x, layout))
        sizes = [math.prod(leaf.shape) for leaf in leaves]
        # One draw of a fixed length for every case: jax compiles a draw once per shape.
        values = np.asarray(jax.random.normal(jax.random.key(seed + index), (_DRAW,)))
        pieces = np.split(values[: sum(sizes)], np.cumsum(sizes)[:-1])
        arrays = [jnp.asarray(v.reshape(leaf.shape)) for v, leaf in zip(pieces, leaves)]
        h, x, params = jax.tree_util.tree_unflatten(tree, arrays)
        params = jax.tree_util.tree_map(lambda leaf: 0.5 * leaf, params)
        yield name, params, h, x


def _dense(p: dict, name: str, v, bias: bool = True):
    out = v @ p[name]["kernel"]
    if bias and "bias" in p[name]:
        out = out + p[name]["bias"]
    return out


def _gru(p, h, x, *, reset_after=True, swap=False, hn_bias=True):
    """A GRU step in flax.linen's layout, or one of its usual wrong versions."""
    r = jax.nn.sigmoid(_dense(p, "ir", x) + _dense(p, "hr", h))
    z = jax.nn.sigmoid(_dense(p, "iz", x) + _dense(p, "hz", h))
    if reset_after:
        hidden = r * _dense(p, "hn", h, bias=hn_bias)
    else:
        hidden = _dense(p, "hn", r * h, bias=hn_bias)
    n = jnp.tanh(_dense(p, "in", x) + hidden)
    keep = 1.0 - z if swap else z
    return keep * h + (1.0 - keep) * n


def _mgu(p, h, x, *, reset="after", swap=False, hn_bias=True):
    """An MGU step in flax.linen's layout, or one of its usual wrong versions."""
    f = jax.nn.sigmoid(_dense(p, "if", x) + _dense(p, "hf", h))
    if reset == "after":
        hidden = f * _dense(p, "hn", h, bias=hn_bias)
    elif reset == "before":
        hidden = _dense(p, "hn", f * h, bias=hn_bias)
    else:  # no reset at all
        hidden = _dense(p, "hn", h, bias=hn_bias)
    n = jnp.tanh(_dense(p, "in", x) + hidden)
    keep = 1.0 - f if swap else f
    return keep * h + (1.0 - keep) * n


_RESET_BEFORE = (
    "it applies the reset gate before the hidden matmul, (r * h) @ W_hn; flax.linen's "
    "GRUCell applies it after: r * (h @ W_hn + b_hn)"
)
_SWAPPED = (
    "it swaps z and 1 - z; in flax.linen, z is the share of the old state that is kept: "
    "h_new = (1 - z) * n + z * h"
)
_NO_HN_BIAS = (
    "it leaves out params['hn']['bias'], the bias inside the reset gate's product: "
    "r * (h @ W_hn + b_hn)"
)
GRU_MISTAKES = (
    (dict(reset_after=False), _RESET_BEFORE),
    (dict(reset_after=False, hn_bias=False), _RESET_BEFORE),
    (dict(swap=True), _SWAPPED),
    (dict(reset_after=False, swap=True), f"{_RESET_BEFORE}; and {_SWAPPED}"),
    (dict(hn_bias=False), _NO_HN_BIAS),
)
MGU_MISTAKES = (
    (
        dict(reset="before"),
        "it applies f before the hidden matmul, (f * h) @ W_hn; flax.linen's MGUCell "
        "applies it after: f * (h @ W_hn + b_hn)",
    ),
    (
        dict(reset="before", hn_bias=False),
        "it applies f before the hidden matmul, (f * h) @ W_hn; flax.linen's MGUCell "
        "applies it after: f * (h @ W_hn + b_hn)",
    ),
    (
        dict(reset="none"),
        "it does not multiply the candidate's hidden term by f; flax.linen's MGUCell "
        "(reset_gate=True) uses f * (h @ W_hn + b_hn)",
    ),
    (
        dict(swap=True),
        "it swaps f and 1 - f; in flax.linen, f is the share of the old state that is "
        "kept: h_new = (1 - f) * n + f * h",
    ),
    (
        dict(hn_bias=False),
        "it leaves out params['hn']['bias'], the bias inside the gate's product: "
        "f * (h @ W_hn + b_hn)",
    ),
)


def _largest_difference(got, want) -> str:
    """Where the values differ most, to 3 digits: a float32 result's last digits vary by CPU."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    error = np.where(np.isnan(got), np.inf, np.abs(got - want))
    index = tuple(int(i) for i in np.unravel_index(int(np.argmax(error)), want.shape))
    return (
        f"h_new{list(index)} is {got[index]:.3g}; expected {want[index]:.3g}"
        f" (largest difference {error[index]:.2g})"
    )


def _check_step(
    exercise: str,
    fn: Callable[..., Any],
    cell,
    variant: Callable[..., Any],
    mistakes,
    seed: int,
) -> Feedback:
    diagnoses = []

    def judge(got, params, h, x, want) -> str | None:
        if isinstance(got, (tuple, list)):
            return (
                f"it returned a {type(got).__name__} of {len(got)}; return only the new h, an"
                " array shaped like h (the cell's (carry, output) pair is not asked for here)"
            )
        problem = compare("h_new", got, want)
        if problem is None:
            return None
        shape = getattr(got, "shape", None)
        if shape is not None and tuple(shape) != want.shape:
            problem += f" (h_new must have the shape of h, (*batch, features) = {want.shape})"
        elif getattr(got, "dtype", None) == want.dtype:
            problem = _largest_difference(got, want)
        for kwargs, diagnosis in mistakes:
            if compare("h_new", got, variant(params, h, x, **kwargs)) is None:
                if diagnosis not in diagnoses:
                    diagnoses.append(diagnosis)
                break
        return problem

    cases = [
        (name, (params, h, x), cell.apply({"params": params}, h, x)[0])
        for name, params, h, x in _cases(cell, seed)
    ]
    problems = case_problems(fn, cases, judge)
    problems += [f"the values match a known mistake: {d}." for d in diagnoses]
    return Feedback(exercise, len(CASES), tuple(problems))


def check_gru_step(fn: Callable[..., Any]) -> Feedback:
    """Check ``fn(params, h, x) -> h_new``, one step of flax.linen's GRU in ``jax.numpy``.

    ``params`` is the dict a GRUCell's ``init`` makes under ``"params"`` (layers ``ir, iz,
    in`` with biases, ``hr, hz`` without, ``hn`` with); ``h`` is ``(*batch, 4)`` and ``x``
    is ``(*batch, 3)``. The reference is ``flax.linen.GRUCell``.
    """
    import flax.linen as nn

    cell = nn.GRUCell(features=FEATURES)
    return _check_step("check_gru_step", fn, cell, _gru, GRU_MISTAKES, 10)


def check_mgu_step(fn: Callable[..., Any]) -> Feedback:
    """Check ``fn(params, h, x) -> h_new``, one step of flax.linen's MGU in ``jax.numpy``.

    ``params`` is the dict an MGUCell's ``init`` makes under ``"params"`` (layers ``if``
    and ``in`` with biases, ``hf`` without, ``hn`` with); ``h`` is ``(*batch, 4)`` and
    ``x`` is ``(*batch, 3)``. The reference is ``flax.linen.MGUCell``.
    """
    import flax.linen as nn

    cell = nn.MGUCell(features=FEATURES)
    return _check_step("check_mgu_step", fn, cell, _mgu, MGU_MISTAKES, 20)
