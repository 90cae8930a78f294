"""The pieces every checker is made of: run an attempt, compare a result, report in words."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

# An attempt written another way than the reference (a different order of sums, a fused
# matmul) rounds differently in float32; a wrong attempt is off by far more than this.
RELATIVE_TOLERANCE = 1e-5


@dataclasses.dataclass(frozen=True)
class Feedback:
    """What a checker found: the exercise's name, the cases tried, and each problem in words."""

    exercise: str
    cases: int
    problems: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        if not self.problems:
            plural = "case" if self.cases == 1 else "cases"
            return f"✔ {self.exercise}: all {self.cases} {plural} match the reference."
        lines = [f"✘ {self.exercise}: {len(self.problems)} problem(s)."]
        lines += [f"  - {problem}" for problem in self.problems]
        return "\n".join(lines)

    __repr__ = __str__


def attempt(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, str | None]:
    """Call the reader's ``fn``; return ``(result, None)``, or ``(None, what it raised)``."""
    try:
        return fn(*args, **kwargs), None
    except Exception as error:  # the reader's code may raise anything; report it, do not crash
        return None, f"calling it raised {type(error).__name__}: {error}"


def case_problems(
    fn: Callable[..., Any],
    cases: Iterable[tuple[Any, ...]],
    judge: Callable[..., str | None],
) -> list[str]:
    """Run the reader's ``fn`` on every case and judge each result; return what is wrong.

    Each case is ``(name, args, *extra)``: the attempt is called as ``fn(*args)``. When that
    raises, the case's problem is what it raised; otherwise it is ``judge(result, *args,
    *extra)``, a sentence, or None when the result is right (``extra`` carries what the judge
    needs besides the arguments, such as the reference's answer). Every problem starts with
    ``case '<name>': ``.
    """
    problems = []
    for name, args, *extra in cases:
        got, problem = attempt(fn, *args)
        if problem is None:
            problem = judge(got, *args, *extra)
        if problem:
            problems.append(f"case '{name}': {problem}")
    return problems


def run_cases(
    exercise: str,
    fn: Callable[..., Any],
    cases: Iterable[tuple[Any, ...]],
    judge: Callable[..., str | None],
) -> Feedback:
    """A whole checker: ``case_problems(fn, cases, judge)`` as the ``Feedback`` of ``exercise``.

    A checker that adds something after the cases (one more case of another kind, a mistake
    that several cases point to) calls ``case_problems`` and builds its ``Feedback`` itself.
    """
    cases = list(cases)
    return Feedback(exercise, len(cases), tuple(case_problems(fn, cases, judge)))


def compare(name: str, got: Any, want: Any, explain: Callable[[], str] | None = None) -> str | None:
    """Compare one result (an array, or a tuple/list/dict of them) with the reference.

    Returns None when they match, else one sentence naming what differs: the structure, the
    shape, the dtype, or the largest difference and where it is, followed by ``explain()``
    (a checker's guess at the mistake behind it, or ``""``), called only when they differ.
    """
    problem = _difference(name, got, want)
    if problem and explain is not None:
        return f"{problem}{explain()}"
    return problem


def _difference(name: str, got: Any, want: Any) -> str | None:
    if isinstance(want, dict):
        if not isinstance(got, dict) or set(got) != set(want):
            keys = sorted(got) if isinstance(got, dict) else type(got).__name__
            return f"{name} should be a dict with keys {sorted(want)}; got {keys}"
        for key in want:
            problem = _difference(f"{name}[{key!r}]", got[key], want[key])
            if problem:
                return problem
        return None
    if isinstance(want, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(want):
            what = f"length {len(got)}" if isinstance(got, (tuple, list)) else type(got).__name__
            return f"{name} should be a tuple of {len(want)}; got {what}"
        for index, (g, w) in enumerate(zip(got, want)):
            problem = _difference(f"{name}[{index}]", g, w)
            if problem:
                return problem
        return None
    want = np.asarray(want)
    try:
        got = np.asarray(got)
    except Exception:  # a value NumPy cannot read as an array
        return f"{name} should be an array of shape {want.shape}; got {type(got).__name__}"
    if got.shape != want.shape:
        return f"{name} has shape {got.shape}; expected {want.shape}"
    if got.dtype != want.dtype:
        return f"{name} has dtype {got.dtype}; expected {want.dtype}"
    if not np.issubdtype(want.dtype, np.floating):
        if np.array_equal(got, want):
            return None
        index = tuple(int(i) for i in np.argwhere(got != want)[0]) if want.ndim else ()
        where = f"{name}{list(index)}" if index else name
        return f"{where} is {got[index]}; expected {want[index]}"
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    error = np.abs(got.astype(np.float64) - want.astype(np.float64))
    if want.size == 0 or float(np.nanmax(np.where(np.isnan(error), np.inf, error))) <= (
        RELATIVE_TOLERANCE * scale
    ):
        return None
    index = np.unravel_index(int(np.argmax(np.where(np.isnan(error), np.inf, error))), want.shape)
    index = tuple(int(i) for i in index)
    where = f"{name}{list(index)}" if index else name
    return (
        f"{where} is {float(got[index]):.4g}; expected {float(want[index]):.4g}"
        f" (largest difference {float(error[index]):.3g}, allowed {RELATIVE_TOLERANCE * scale:.2g})"
    )
