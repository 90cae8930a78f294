"""What a reader of the book sees carries none of the test suite's own machinery (issue 53).

Every chapter's cells that the book renders (all but those tagged ``remove-cell`` or
``remove-input``; the appendix on testing notebooks is left out, since testing is its subject)
have no nbval comment markers, no version gate outside the setup cell, no prose about what is
tested, and no assert that pins printed digits. A ``remove-cell`` stores no outputs and comes
right after a code cell. One test per chapter, so a failure names the chapter.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nbval import plugin as nbval_plugin

from tests.book_hygiene import (
    READER_VIEW_EXEMPT,
    REPO_ROOT,
    pinned_digit_asserts,
    reader_view_problems,
    version_gates,
)

BOOK = REPO_ROOT / "book"
CHAPTERS = sorted(path for path in BOOK.glob("*.ipynb") if path.stem not in READER_VIEW_EXEMPT)


def code(source: str, *tags: str, outputs: list | None = None) -> dict:
    metadata = {"tags": list(tags)} if tags else {}
    return {
        "cell_type": "code",
        "metadata": metadata,
        "source": source,
        "outputs": outputs or [],
        "execution_count": 1,
    }


def markdown(source: str, *tags: str) -> dict:
    metadata = {"tags": list(tags)} if tags else {}
    return {"cell_type": "markdown", "metadata": metadata, "source": source}


SETUP = code('import sys\nif _release(_installed("flax")) < (0, 12, 1):\n    raise SystemExit')


def test_the_book_has_chapters_to_check():
    assert len(CHAPTERS) >= 19
    assert not any(path.stem.startswith("appendix") for path in CHAPTERS)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[path.stem for path in CHAPTERS])
def test_reader_view_of_chapter(chapter: Path):
    cells = json.loads(chapter.read_text(encoding="utf-8"))["cells"]
    assert reader_view_problems(cells) == []


@pytest.mark.parametrize(
    "source",
    [
        "assert unit_peaks == [42, 46, 59, 55]",
        'assert f"{h_max:.2f} {c_max:.2f}" == "0.65 1.44"',
        'assert conv_gaps == {"igfo": "< 1e-6", "ifgo": "0.97"}',
        'assert f"{difference:.2f}" == "0.10"',
        "assert round(changed, 1) == 1.1",
        "assert x.shape == (2, 3) and peaks == [1, 2]",
        "assert counts == {'Simple': 32, 'LSTM': 128}",
        "for u in units:\n    assert u.tolist() != [0, 1]",
    ],
)
def test_asserts_that_pin_printed_digits_are_found(source):
    assert len(pinned_digit_asserts(source)) == 1


@pytest.mark.parametrize(
    "source",
    [
        "assert x.shape == (2, 3)",
        "assert gap(ours, flaxs) == '< 1e-6'",
        "assert jnp.allclose(a, b, atol" + "=1e-6)",
        "assert n_arrays == 12 + 2",
        "assert '(3, 7, 3), (3, 7, 2)' in str(error)",
        "assert list(params) == ['layers_0', 'layers_1']",
        "assert seq.tolist() == list(range(5))[::-1]",
        "print([1, 2] == [1, 2])",
        "assert (",  # not Python: nothing to find, no crash
    ],
)
def test_asserts_that_teach_are_left_alone(source):
    assert pinned_digit_asserts(source) == []


def test_a_version_comparison_is_a_gate_and_printing_a_version_is_not():
    gate = 'if _release(_installed("flax")) >= (0, 12, 8):\n    pass'
    assert version_gates(gate) == ['_release(_installed("flax")) >= (0, 12, 8)']
    assert version_gates("assert jax.__version__ >= '0.8'") != []
    assert version_gates("print(f\"flax {version('flax')}\")") == []


def test_each_rule_reports_the_cell_it_found():
    cells = [
        SETUP,  # the setup cell may gate on versions
        markdown("The solutions run like every other cell, so they are tested too."),
        code("# NBVAL_IGNORE_OUTPUT\nprint(seconds)"),
        code('if version("flax") >= "0.12":\n    print("new")'),
        code("print(peaks)\nassert peaks == [3, 4]"),
        code("assert peaks == [3, 4]", "remove-cell", outputs=[{"output_type": "stream"}]),
        markdown("Some prose."),
        code("assert peaks == [3, 4]", "remove-cell"),
    ]
    problems = reader_view_problems(cells)
    assert [p.split(" ", 2)[1] for p in problems] == ["1", "2", "3", "4", "5", "7"]
    assert "what is tested ('are tested too')" in problems[0]
    assert "'# NBVAL_IGNORE_OUTPUT'" in problems[1] and "nbval-ignore-output" in problems[1]
    assert 'version("flax") >= "0.12"' in problems[2]
    assert "`assert peaks == [3, 4]`" in problems[3]
    assert "stores outputs" in problems[4]
    assert "follows no code cell" in problems[5]


def test_hidden_cells_are_not_what_the_reader_sees():
    cells = [
        SETUP,
        code("print(peaks)"),
        code("assert peaks == [3, 4]  # NBVAL_SKIP", "remove-cell"),
        markdown("Checked by nbval.", "remove-cell"),
        code("if version('flax') > '1':\n    pass", "remove-input"),
    ]
    assert reader_view_problems(cells) == []


def test_prose_that_teaches_testing_your_own_code_is_allowed():
    cells = [
        SETUP,
        markdown("A test suite that only checks fresh models would pass."),
        markdown("Calling `check_cell_contract` in a pytest test fails like an `assert`."),
    ]
    assert reader_view_problems(cells) == []


def test_the_nbval_tag_the_book_uses_is_the_one_nbval_reads():
    # nbval 0.11 turns its comment markers into metadata tags: lower case, '_' -> '-'.
    assert nbval_plugin.metadata_tags["nbval-ignore-output"] == ("check", False)
    cell_metadata = {"tags": ["hide-input", "nbval-ignore-output"]}
    assert dict(nbval_plugin.find_metadata_tags(cell_metadata)) == {"check": False}


def test_cells_the_book_tags_nbval_ignore_output_carry_no_comment_marker_too():
    for chapter in CHAPTERS:
        for cell in json.loads(chapter.read_text(encoding="utf-8"))["cells"]:
            if "nbval-ignore-output" in cell.get("metadata", {}).get("tags", []):
                assert cell["cell_type"] == "code", chapter.stem
                assert "NBVAL" not in "".join(cell["source"]), chapter.stem
