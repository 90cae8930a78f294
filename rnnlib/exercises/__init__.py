"""Checkers for the book's exercises: each runs a reader's attempt and answers in words.

Every chapter that has exercises has a module here (``rnnlib.exercises.<chapter>``) with one
``check_*`` function per exercise. A checker calls the attempt on a few cases, compares what
comes back with a reference written in rnnlib or Flax, and returns a ``Feedback``, which a
notebook shows as text::

    from rnnlib.exercises.the_carry import check_scan
    check_scan(my_scan)   # ✘ check_scan: case 'an Elman step, carry (2, 4)': the final carry ...

``bool(feedback)`` is True when every case matched, so a solution cell can ``assert`` it.
This package is the book's, not part of rnnlib's modelling API; it ships with rnnlib so that
the one-line install a Colab reader runs brings the checkers too.
"""

from rnnlib.exercises._check import Feedback, attempt, case_problems, compare, run_cases

__all__ = ["Feedback", "attempt", "case_problems", "compare", "run_cases"]
