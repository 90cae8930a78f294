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


def test_findings_reads_the_tools_json_report_and_fix_rewrites_the_file(tmp_path):
    from rnnlib.exercises.migrating import findings

    source = tmp_path / "old.py"
    source.write_text(
        "import jax\nimport flax.linen as nn\n\n"
        "carry = nn.LSTMCell.initialize_carry(jax.random.PRNGKey(0), (2,), 4)\n"
    )
    status, found = findings(str(source))
    assert status == 1
    assert [(f["line"], f["code"], f["severity"], f["fixed"]) for f in found] == [
        (4, "MIG001", "error", False)
    ]
    status, found = findings(str(source), "--fix")
    assert status == 0 and [f["fixed"] for f in found] == [True]
    assert "nn.LSTMCell(features=4, parent=None).initialize_carry(" in source.read_text()
    assert findings(str(source)) == (0, [])


def test_diff_is_a_unified_diff_highlighted_as_a_diff():
    from rnnlib.exercises.migrating import diff

    shown = diff("a = 1\nb = 2\n", "a = 1\nb = 3\n", "old.py", "new.py")
    assert shown.data.splitlines() == [
        "--- old.py", "+++ new.py", "@@ -1,2 +1,2 @@", " a = 1", "-b = 2", "+b = 3",
    ]  # fmt: skip
    assert shown.language == "diff"


def test_diff_files_labels_each_side_with_its_file_name(tmp_path):
    from rnnlib.exercises.migrating import diff_files

    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "b.py").write_text("x = 2\n")
    shown = diff_files(str(tmp_path / "a.py"), str(tmp_path / "b.py"))
    assert shown.data.splitlines()[:2] == [f"--- {tmp_path / 'a.py'}", f"+++ {tmp_path / 'b.py'}"]
    assert shown.data.splitlines()[-2:] == ["-x = 1", "+x = 2"]
