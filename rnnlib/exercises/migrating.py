"""The migration chapter's helpers and the checker of its exercise.

``findings`` runs ``python -m rnnlib.migrate`` in this process and returns what it found as data
(its ``--format json`` report), so the chapter's checks read codes and lines, not sentences;
``diff`` shows two versions of a file as a highlighted unified diff. ``check_rename`` checks the
exercise on carrying a checkpoint across the ``Scan<Cell>_<i>`` rename.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import json
import re

import numpy as np

from rnnlib.exercises._check import Feedback, compare, run_cases


def findings(*args: str) -> tuple[int, list[dict]]:
    """``python -m rnnlib.migrate *args --format json``, run in this process.

    Returns the exit status and the findings, each a dict with at least ``line``, ``code``,
    ``severity`` and ``fixed``. With ``--fix`` among ``args`` the files are rewritten, as on the
    command line.
    """
    from rnnlib.migrate import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main([*args, "--format", "json"])
    return status, json.loads(out.getvalue())["findings"]


def diff(before: str, after: str, before_name: str, after_name: str):
    """A unified diff of two texts, as an IPython ``Code`` object highlighted as a diff."""
    from IPython.display import Code

    lines = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True), before_name, after_name
    )
    return Code("".join(lines), language="diff")


def diff_files(before: str, after: str):
    """``diff`` of two files, each labelled with its name."""
    with open(before) as old, open(after) as new:
        return diff(old.read(), new.read(), before, after)


# nn.scan(nn.LSTMCell) was auto-named ScanLSTMCell_0; nn.RNN(nn.LSTMCell(...)) keeps its cell
# under LSTMCell_0. Only names of a Scan-prefixed *cell class* move.
_CELLS = "LSTMCell|OptimizedLSTMCell|GRUCell|MGUCell|SimpleCell|ConvLSTMCell"
_SCANNED = re.compile(rf"^Scan({_CELLS})_(\d+)$")


def _leaf(seed, shape):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def _cases():
    lstm = {
        "hi": {"kernel": _leaf(0, (4, 4)), "bias": _leaf(1, (4,))},
        "ii": {"kernel": _leaf(2, (3, 4))},
    }
    gru = {"hn": {"kernel": _leaf(3, (2, 2)), "bias": _leaf(4, (2,))}}
    return [
        ("one scanned LSTM at the top", {"params": {"ScanLSTMCell_0": lstm}}),
        (
            "a GRU scanned inside a submodule, next to a Dense",
            {
                "params": {
                    "Encoder_0": {"ScanGRUCell_0": gru, "Dense_0": {"kernel": _leaf(5, (2, 1))}}
                }
            },
        ),
        (
            "two scanned cells and a module that only looks similar",
            {
                "params": {
                    "ScanLSTMCell_0": lstm,
                    "ScanLSTMCell_1": lstm,
                    "ScanHelper_0": {"kernel": _leaf(6, (1, 1))},
                }
            },
        ),
    ]


def _renamed(tree):
    if not isinstance(tree, dict):
        return tree
    out = {}
    for key, value in tree.items():
        match = _SCANNED.match(key)
        out[f"{match[1]}_{match[2]}" if match else key] = _renamed(value)
    return out


def check_rename(rename) -> Feedback:
    """Check ``rename(variables)`` on saved variable trees from 0.6-era ``nn.scan`` code.

    Every key ``Scan<Cell>_<i>`` of a Flax cell class, at any depth, must become ``<Cell>_<i>``,
    the name ``nn.RNN`` gives the same cell; every other key and every array stays as it was.
    """
    cases = [(name, (tree,), _renamed(tree)) for name, tree in _cases()]
    return run_cases("check_rename", rename, cases, _judge)


def _judge(got, tree, want) -> str | None:
    return compare("the variables", got, want, explain=lambda: _diagnosis(got, tree))


def _diagnosis(got, tree) -> str:
    if not isinstance(got, dict):
        return ""
    left = sorted(key for key in _keys(got) if _SCANNED.match(key))
    if left:
        return (
            f" ({left[0]} is left: every Scan<Cell>_<i> key becomes <Cell>_<i>, at every depth"
            " of the tree, not only the top)"
        )
    if "Helper_0" in _keys(got):
        return " (ScanHelper_0 is not a scanned cell: rename only Scan followed by a cell class)"
    return ""


def _keys(tree) -> set[str]:
    if not isinstance(tree, dict):
        return set()
    return set(tree) | {k for value in tree.values() for k in _keys(value)}
