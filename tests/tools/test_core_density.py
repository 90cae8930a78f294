"""tests/core_density.py measures what it says: the core's modules and its code lines."""

from __future__ import annotations

from tests.core_density import ENTRY_MODULES, code_lines, core_modules, misses


def test_the_core_is_found_from_rnn_and_the_cells():
    modules = core_modules()
    assert set(ENTRY_MODULES) <= set(modules)
    # What RNN needs to run a cell: the module base, the cell base, the plan of the scan.
    assert {"module", "cell_base", "plan", "flip"} <= set(modules)
    # The wrappers and tools around it are not the core.
    assert not {"legacy", "interop", "migrate", "stacked", "linen"} & set(modules)


def test_code_lines_leave_out_docstrings_comments_and_blank_lines(tmp_path):
    path = tmp_path / "example.py"
    path.write_text(
        '"""Module docstring,\nover two lines."""\n\n# a comment\n'
        'def f(x):\n    """One line."""\n    return x  # kept: code before it\n'
    )
    assert code_lines(path) == [(5, "def f(x):"), (7, "    return x  # kept: code before it")]


def test_the_report_names_each_part_of_the_bar_that_is_missed():
    assert misses(["x = 1"] * 10, []) == []
    too_wide = ["y" * 95] * 10
    found = misses(too_wide, [f"rnnlib/a.py:{n}" for n in range(10)])
    assert [miss.split(",")[0] for miss in found] == [
        "95.0 characters a line on average",
        "100.0% of lines at 90+ columns",
    ]
    assert misses(["z"] * 1101, []) == ["1101 code lines, above 1100"]
