"""Checkers for the chapter "Linear recurrences and parallel scans" (``book/linear_recurrences``).

The chapter's recurrence is ``h_t = a_t * h_{t-1} + b_t``, with ``a_t`` and ``b_t`` computed from
the inputs alone. ``check_combine`` runs the reader's associative operator on the pairs ``(a, b)``
of two stretches of steps, ``check_min_lstm_parallel`` the reader's log-space parallel form of
minLSTM (Feng et al. 2024, arXiv 2410.01201), and ``check_parity_coefficients`` the coefficients of
one linear unit that computes parity from the sign of its state. Each compares with a reference
written here in NumPy, step by step, and when the values are wrong tries the usual mistakes and
names the one the attempt matches::

    from rnnlib.exercises.linear_recurrences import check_combine
    check_combine(my_combine)   # ✘ check_combine: ... composes the stretches in the wrong order
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rnnlib.exercises._check import Feedback, attempt, compare

# --- the references, in NumPy float64, one step after another ------------------------------------


def _recurrence(a, b, h0, axis: int = -2) -> np.ndarray:
    """Every ``h_t = a_t * h_{t-1} + b_t`` along ``axis`` of ``a`` and ``b``, from ``h0``."""
    a, b = np.moveaxis(np.asarray(a, np.float64), axis, 0), np.moveaxis(np.asarray(b), axis, 0)
    h, hs = np.asarray(h0, np.float64), []
    for a_t, b_t in zip(a, b):
        h = a_t * h + b_t
        hs.append(h)
    return np.moveaxis(np.stack(hs), 0, axis)


def _run(fn: Callable[..., Any], *args: Any) -> tuple[Any, str | None]:
    """``attempt(fn, *args)``, jitted first: one compilation instead of one per operation.

    An attempt that ``jax.jit`` cannot trace (Python control flow on values, a print of a
    value) or that raises is run again as it is, so that what it raises is reported as written.
    """
    try:
        return jax.jit(fn)(*args), None
    except Exception:  # the reader's code may raise anything; run it plainly to report it
        return attempt(fn, *args)


def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def _g(v):
    """minGRU's and minLSTM's positive candidate: v + 1/2 from 0 up, sigmoid(v) below 0."""
    return np.where(v >= 0, v + 0.5, _sigmoid(np.minimum(v, 0.0)))


# --- Exercise 1: the associative operator -------------------------------------------------------

_RNG = np.random.default_rng(41)
# Two steps of 3 features, a starting carry, and a third step for associativity. The values are
# drawn so that every wrong operator below gives different numbers from the right one.
_P, _Q, _R = (
    (_RNG.uniform(0.2, 1.5, 3), _RNG.uniform(-2.0, 2.0, 3)) for _ in range(3)
)  # fmt: skip
_H = _RNG.uniform(-2.0, 2.0, 3)
_SCAN_A, _SCAN_B = _RNG.uniform(0.3, 1.2, (9, 2)), _RNG.standard_normal((9, 2))
_SCAN_H0 = _RNG.standard_normal(2)


def _right(first, second):
    (a1, b1), (a2, b2) = first, second
    return a1 * a2, a2 * b1 + b2


_COMBINE_MISTAKES = (
    (
        lambda p, q: (p[0] * q[0], p[0] * q[1] + p[1]),
        "the stretches are composed in the wrong order: first acts on the carry before "
        "second, so b1 goes through second's a2 (a2 * b1 + b2), not b2 through a1",
    ),
    (
        lambda p, q: (p[0] * q[0], p[1] + q[1]),
        "b1 is added without going through the second stretch: the second stretch multiplies "
        "everything before it by a2, so the pair's b is a2 * b1 + b2",
    ),
    (
        lambda p, q: (p[0] * q[0], p[0] * p[1] + q[1]),
        "b1 is multiplied by a1, its own stretch's coefficient; it must be multiplied by a2, "
        "the coefficient of the stretch that comes after it",
    ),
    (
        lambda p, q: (p[0] + q[0], q[0] * p[1] + q[1]),
        "the coefficients are added: the carry is multiplied by a1 and then by a2, so the "
        "pair's a is a1 * a2 (sums belong to the log-space operator)",
    ),
    (
        lambda p, q: (q[0] * p[1] + q[1], p[0] * q[0]),
        "the pair is returned as (b, a); return (a, b), as the inputs are",
    ),
)


def _pair(name: str, got) -> tuple[tuple | None, str | None]:
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        what = f"a {type(got).__name__}" + (
            f" of {len(got)}" if isinstance(got, (tuple, list)) else ""
        )
        return None, f"{name} should be a pair (a, b); got {what}"
    try:
        return (np.asarray(got[0], np.float64), np.asarray(got[1], np.float64)), None
    except Exception:  # the reader's result may hold anything
        return None, f"{name} should hold two arrays; got {type(got[0]).__name__}"


def check_combine(combine: Callable[..., Any]) -> Feedback:
    """Check ``combine(first, second) -> (a, b)`` for ``h_t = a_t * h_{t-1} + b_t``.

    ``first`` and ``second`` are pairs ``(a, b)`` of arrays, the pairs of two stretches of steps
    with ``first`` the earlier; the result is the pair of both stretches together, so that
    ``a * h + b`` is what running ``first`` and then ``second`` does to a carry ``h``. Three
    cases: two single steps, associativity on three steps, and the operator inside
    ``jax.lax.associative_scan`` over 9 steps, compared with a loop.
    """
    problems, diagnoses = [], []

    got, problem = attempt(combine, _P, _Q)
    if problem is None:
        pair, problem = _pair("combine(p, q)", got)
    if problem is None:
        a, b = pair
        want = _right(_P, _Q)
        problem = compare("h after the pair", a * _H + b, want[0] * _H + want[1])
        if problem:
            problem += " (running step p, then step q, gives the expected value)"
            for mistake, diagnosis in _COMBINE_MISTAKES:
                wrong = mistake(_P, _Q)
                if all(np.shape(w) == np.shape(g) for w, g in zip(wrong, pair)) and all(
                    np.allclose(w, g, rtol=1e-5) for w, g in zip(wrong, pair)
                ):
                    diagnoses.append(diagnosis)
                    break
    if problem:
        problems.append(f"case 'two steps, one pair': {problem}")

    left, problem = attempt(lambda: combine(combine(_P, _Q), _R))
    right = None
    if problem is None:
        right, problem = attempt(lambda: combine(_P, combine(_Q, _R)))
    if problem is None:
        (left, problem) = _pair("combine(combine(p, q), r)", left)
    if problem is None:
        (right, problem) = _pair("combine(p, combine(q, r))", right)
    if problem is None:
        problem = compare("combine(combine(p, q), r)", left, right)
        if problem:
            problem += " (against combine(p, combine(q, r)): the operator is not associative)"
    if problem:
        problems.append(f"case 'associativity, three steps': {problem}")

    scanned, problem = _run(
        lambda a, b: jax.lax.associative_scan(combine, (a, b)),
        jnp.asarray(_SCAN_A),
        jnp.asarray(_SCAN_B),
    )
    if problem is None:
        pair, problem = _pair("associative_scan's result", scanned)
    if problem is None:
        h = pair[0] * _SCAN_H0 + pair[1]
        problem = compare("h = A * h0 + B", h, _recurrence(_SCAN_A, _SCAN_B, _SCAN_H0, axis=0))
    if problem:
        problems.append(f"case 'jax.lax.associative_scan over 9 steps': {problem}")

    problems += [f"the values match a known mistake: {d}." for d in diagnoses]
    return Feedback("check_combine", 3, tuple(problems))


# --- Exercise 2: minLSTM's parallel form ---------------------------------------------------------


def _min_lstm_coefficients(k_f, k_i, v, *, normalise=True, swap=False):
    """minLSTM's (a, b): a = f', b = i' * g(v); or one of the usual wrong versions."""
    f, i = _sigmoid(k_f), _sigmoid(k_i)
    if normalise:
        f, i = f / (f + i), i / (f + i)
    if swap:
        f, i = i, f
    return f, i * _g(v)


def _min_lstm_cases():
    rng = np.random.default_rng(2410)
    batch = tuple(2.0 * rng.standard_normal((2, 7, 3)) for _ in range(3))
    no_batch = tuple(2.0 * rng.standard_normal((5, 4)) for _ in range(3))
    return (
        ("batch 2, 7 steps, 3 features, h0 > 0", batch, rng.uniform(0.1, 1.5, (2, 3))),
        ("no batch axes, 5 steps, 4 features, h0 = 0", no_batch, np.zeros(4)),
    )


def check_min_lstm_parallel(fn: Callable[..., Any]) -> Feedback:
    """Check ``fn(k_f, k_i, v, h0) -> hs``, minLSTM over a whole sequence.

    ``k_f``, ``k_i`` and ``v`` are the pre-activations of the forget gate, the input gate and the
    candidate, each ``(*batch, time, features)``; ``h0 >= 0`` is ``(*batch, features)``. The
    result holds every ``h_t = f'_t * h_{t-1} + i'_t * g(v_t)`` for t = 1..T, shaped like
    ``v``, with ``f' = f / (f + i)``, ``i' = i / (f + i)``, ``f = sigmoid(k_f)`` and
    ``i = sigmoid(k_i)``. It is compared with those equations run step by step.
    """
    problems, diagnoses = [], []
    cases = _min_lstm_cases()
    for name, (k_f, k_i, v), h0 in cases:
        args = [jnp.asarray(x, jnp.float32) for x in (k_f, k_i, v, h0)]
        got, problem = _run(fn, *args)
        want = _recurrence(*_min_lstm_coefficients(k_f, k_i, v), h0)
        if problem is None:
            try:
                got = np.asarray(got, np.float64)
            except Exception:  # the reader's result may hold anything
                problem = f"return an array of every h_t; got {type(got).__name__}"
        if problem is None and got.shape == want.shape and np.isnan(got).any():
            problem = "the result contains NaN"
            diagnoses[:] = [d for d in diagnoses if not d.startswith("a logarithm")]
            diagnoses.append(
                "a logarithm of a negative number gives NaN: take the candidate's log as "
                "log_g(v) (g(v) > 0), never log(v), and the carry's as log(h0) with h0 >= 0"
            )
        if problem is None:
            problem = compare("h", got, want.astype(np.float32).astype(np.float64))
        if problem and problem != "the result contains NaN" and got is not None:
            diagnosis = _min_lstm_mistake(got, k_f, k_i, v, h0)
            if diagnosis and diagnosis not in diagnoses:
                diagnoses.append(diagnosis)
        if problem:
            problems.append(f"case '{name}': {problem}")
    problems += [f"the values match a known mistake: {d}." for d in diagnoses]
    return Feedback("check_min_lstm_parallel", len(cases), tuple(problems))


def _min_lstm_mistake(got, k_f, k_i, v, h0) -> str | None:
    if not isinstance(got, np.ndarray) or got.shape != v.shape:
        return None
    right = _recurrence(*_min_lstm_coefficients(k_f, k_i, v), h0)
    min_gru = _recurrence(1.0 - _sigmoid(k_f), _sigmoid(k_f) * _g(v), h0)
    candidates = (
        (
            _recurrence(*_min_lstm_coefficients(k_f, k_i, v, normalise=False), h0),
            "the gates are not normalised: divide f and i by f + i, which in logs subtracts "
            "log(f + i): log f' = -softplus(log i - log f), log i' = -softplus(log f - log i)",
        ),
        (
            _recurrence(*_min_lstm_coefficients(k_f, k_i, v, swap=True), h0),
            "f' and i' are swapped: the forget gate f' multiplies h_{t-1}, the input gate i' "
            "the candidate g(v_t)",
        ),
        (
            _recurrence(*_min_lstm_coefficients(k_f, k_i, v), np.zeros_like(h0)),
            "the initial carry is ignored: every h_t gets A_t * h0 added, in logs "
            "logaddexp(log_A + log(h0), log_B)",
        ),
        (
            np.concatenate(
                [np.broadcast_to(h0[..., None, :], right[..., :1, :].shape), right[..., :-1, :]], -2
            ),
            "the outputs are one step late: the first output is h_1, the carry after the "
            "first input, not h0",
        ),
        (
            min_gru,
            "this is minGRU's update (a = 1 - sigmoid(k_f), b = sigmoid(k_f) * g(v)): minLSTM "
            "has two gates, normalised by their sum",
        ),
    )
    if v.ndim > 2:  # prefixes along the batch axis, then h0 added as along time
        a, b = _min_lstm_coefficients(k_f, k_i, v)
        along_batch = np.cumprod(a, axis=0) * h0[..., None, :] + _recurrence(
            a, b, np.zeros(a.shape[1:]), axis=0
        )
        candidates += (
            (
                along_batch,
                "the scan runs along axis 0, the batch: the time axis is the one before the "
                "features, v.ndim - 2",
            ),
        )
    for values, diagnosis in candidates:
        if np.allclose(got, values, rtol=1e-4, atol=1e-5):
            return diagnosis
    return None


# --- Exercise 3: parity from the sign of one linear unit -----------------------------------------


def _parity_cases():
    rng = np.random.default_rng(2411)
    return (
        ("batch 3, 10 bits", rng.integers(0, 2, (3, 10))),
        ("no batch axes, 12 bits", rng.integers(0, 2, 12)),
        ("all ones, 5 bits", np.ones(5, np.int64)),
        ("all zeros, 4 bits", np.zeros(4, np.int64)),
    )


def check_parity_coefficients(fn: Callable[..., Any]) -> Feedback:
    """Check ``fn(bits) -> (a, b)``, a linear unit whose sign is the running parity.

    ``bits`` is an int array ``(*batch, time)`` of zeros and ones. ``a`` and ``b`` have its shape;
    the checker runs ``h_t = a_t * h_{t-1} + b_t`` from ``h_0 = 1`` along the time axis (the
    last) and reads the parity as ``h_t < 0``: it must be odd exactly when an odd number of ones
    has been seen up to t.
    """
    problems, diagnoses, signs_kept = [], [], []
    cases = _parity_cases()
    for name, bits in cases:
        got, problem = attempt(fn, jnp.asarray(bits, jnp.int32))
        pair = None
        if problem is None:
            pair, problem = _pair("the result", got)
        if problem is None and any(np.shape(x) != bits.shape for x in pair):
            shapes = tuple(np.shape(x) for x in pair)
            problem = f"a and b should each have the bits' shape {bits.shape}; got {shapes}"
        if problem is None:
            h = _recurrence(*pair, np.ones(bits.shape[:-1]), axis=-1)  # from h_0 = 1
            problem, diagnosis = _parity_problem(h, bits)
            signs_kept.append(bool((pair[0] >= 0).all()))
            if diagnosis and diagnosis not in diagnoses:
                diagnoses.append(diagnosis)
        if problem:
            problems.append(f"case '{name}': {problem}")
    if problems and signs_kept and all(signs_kept) and not diagnoses:
        diagnoses.append(
            "every a_t is >= 0, so the carry's sign never flips through a_t, and b_t cannot "
            "know which sign to push towards: let a_t be negative (-1) on a one"
        )
    problems += [f"the values show a known mistake: {d}." for d in diagnoses]
    return Feedback("check_parity_coefficients", len(cases), tuple(problems))


def _parity_problem(h, bits) -> tuple[str | None, str | None]:
    if not np.isfinite(h).all():
        return "h_t is not finite at some step", "keep |a_t| <= 1 and b_t finite"
    zero = h == 0
    if zero.any():
        where = [int(i) for i in np.argwhere(zero)[0]]
        return (
            f"h{where} is 0, which has no sign",
            "h_t becomes 0 where some a_t is 0: a zero coefficient forgets the parity so far",
        )
    odd = np.cumsum(bits, axis=-1) % 2 == 1
    if np.array_equal(h < 0, odd):
        return None, None
    where = tuple(int(i) for i in np.argwhere((h < 0) != odd)[0])
    parity = "odd" if odd[where] else "even"
    problem = f"h{list(where)} = {h[where]:.3g}, but the number of ones so far is {parity}"
    if np.array_equal(h < 0, ~odd):
        return problem, "the sign is the wrong way round: h_t must be negative when it is odd"
    if np.array_equal(h < 0, np.cumsum(1 - bits, axis=-1) % 2 == 1):
        return problem, "the sign flips on every zero: it must flip on every one (a_t = -1)"
    return problem, None
