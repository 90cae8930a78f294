"""The migration chapter's checker: a checkpoint's scanned-cell names carried across."""

import re

from rnnlib.exercises.migrating import check_rename

CELL = r"Scan((?:Optimized)?LSTMCell|GRUCell|MGUCell|SimpleCell|ConvLSTMCell)_(\d+)"


def solution(tree):
    if not isinstance(tree, dict):
        return tree
    return {re.sub(rf"^{CELL}$", r"\1_\2", key): solution(value) for key, value in tree.items()}


def test_the_solution_passes():
    feedback = check_rename(solution)
    assert feedback and "all 3 cases" in str(feedback)


def test_renaming_only_the_top_level_is_told_to_go_deeper():
    def top_only(tree):
        params = tree["params"]
        return {"params": {re.sub(rf"^{CELL}$", r"\1_\2", k): v for k, v in params.items()}}

    feedback = check_rename(top_only)
    assert not feedback
    assert "ScanGRUCell_0 is left" in str(feedback) and "at every depth" in str(feedback)


def test_stripping_every_scan_prefix_is_told_which_key_is_not_a_cell():
    def every_scan(tree):
        if not isinstance(tree, dict):
            return tree
        return {k.removeprefix("Scan"): every_scan(v) for k, v in tree.items()}

    feedback = check_rename(every_scan)
    assert not feedback
    assert "ScanHelper_0 is not a scanned cell" in str(feedback)


def test_an_untouched_tree_is_told_which_key_to_rename():
    feedback = check_rename(lambda tree: tree)
    assert not feedback
    assert "ScanLSTMCell_0 is left: every Scan<Cell>_<i> key becomes <Cell>_<i>" in str(feedback)
