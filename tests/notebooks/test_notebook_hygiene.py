"""The notebook hygiene check: over every chapter, and on small notebooks with one flaw each.

Notebooks are built as plain JSON here (no nbformat), so these tests run in both environments.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests import book_hygiene as hygiene

BOOK = hygiene.REPO_ROOT / "book"
CHAPTERS = list(hygiene.find_notebooks([BOOK]))
TEMPLATE = BOOK / "_template.ipynb"
URL = "https://github.com/example-org/example-book"


# The template is always there, so this never collapses to an empty (skipped) parameter set.
@pytest.mark.parametrize(
    "notebook", [*CHAPTERS, TEMPLATE], ids=[nb.name for nb in [*CHAPTERS, TEMPLATE]]
)
def test_notebook_passes_hygiene_check(notebook):
    assert hygiene.check_notebook(notebook) == []


def test_every_notebook_in_the_table_of_contents_is_checked():
    toc = yaml.safe_load((hygiene.REPO_ROOT / "_toc.yml").read_text())
    files = []
    for part in toc.get("parts", []):
        files += [chapter["file"] for chapter in part.get("chapters", []) if "file" in chapter]
    notebooks = [hygiene.REPO_ROOT / (f if f.endswith(".ipynb") else f + ".ipynb") for f in files]
    assert [nb for nb in notebooks if nb.exists() and nb not in CHAPTERS] == []


def test_template_passes_hygiene_check_when_named_explicitly():
    assert TEMPLATE.exists()
    assert list(hygiene.find_notebooks([TEMPLATE])) == [TEMPLATE]
    assert hygiene.check_notebook(TEMPLATE) == []


def test_folder_search_skips_template_build_checkpoints_and_hidden_folders(tmp_path):
    hidden = [".ipynb_checkpoints/ch1.ipynb", ".venv/share/demo.ipynb"]
    for name in ["ch1.ipynb", "_template.ipynb", "_build/x.ipynb", *hidden]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{}")
    assert list(hygiene.find_notebooks([tmp_path])) == [tmp_path / "ch1.ipynb"]


# --- the checker itself, on synthetic notebooks built in tmp_path ---------------------------------


@pytest.fixture
def root(tmp_path):
    (tmp_path / "_config.yml").write_text(f"repository:\n  url: {URL}\n  branch: trunk\n")
    (tmp_path / "book").mkdir()
    return tmp_path


def new_markdown_cell(source):
    return {"cell_type": "markdown", "metadata": {}, "source": source}


def new_code_cell(source, execution_count=None, outputs=(), metadata=None):
    return {
        "cell_type": "code",
        "execution_count": execution_count,
        "metadata": metadata or {},
        "outputs": list(outputs),
        "source": source,
    }


def new_output(output_type, **fields):
    return {"output_type": output_type, **fields}


def good_notebook(path, root):
    """A notebook as `make notebooks` leaves it: badge, setup cell, executed cells."""
    cells = [
        new_markdown_cell(f"# A chapter\n\n{hygiene.badge_markdown(path, root)}"),
        new_code_cell(
            hygiene.setup_cell_source(root),
            execution_count=1,
            metadata={"tags": ["hide-input"]},
        ),
        new_markdown_cell("Some prose."),
        new_code_cell(
            "import rnnlib\n\nprint(1 + 1)",  # a chapter uses rnnlib
            execution_count=2,
            outputs=[new_output("stream", name="stdout", text="2\n")],
        ),
        new_code_cell("", execution_count=None),  # an empty cell is never executed; that's fine
        new_code_cell("x = 3\nassert x == 3", execution_count=3),
    ]
    return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def write(notebook, path):
    path.write_text(json.dumps(notebook, indent=1))
    return path


@pytest.fixture
def path(root):
    return root / "book" / "ch1.ipynb"


def check(notebook, path, root):
    return hygiene.check_notebook(write(notebook, path), root)


def one_problem(problems, *words):
    assert len(problems) == 1, problems
    for word in words:
        assert word in problems[0], problems[0]


def test_good_notebook_passes(path, root):
    assert check(good_notebook(path, root), path, root) == []


def test_never_executed_cell_is_caught(path, root):
    notebook = good_notebook(path, root)
    notebook["cells"][3]["execution_count"] = None
    notebook["cells"][3]["outputs"] = []
    problems = check(notebook, path, root)
    # The unexecuted cell, and the next one whose count no longer follows on.
    assert any("code cell 3 has no execution_count" in p for p in problems), problems


def test_several_never_executed_cells_are_listed_together(path, root):
    notebook = good_notebook(path, root)
    for index in (3, 5):
        notebook["cells"][index]["execution_count"] = None
    problems = check(notebook, path, root)
    one_problem(problems, "code cells 3, 5 have no execution_count")


def test_out_of_order_execution_counts_are_caught(path, root):
    notebook = good_notebook(path, root)
    notebook["cells"][3]["execution_count"], notebook["cells"][5]["execution_count"] = 3, 2
    problems = check(notebook, path, root)
    assert len(problems) == 2, problems
    assert "code cell 3 has execution_count 3, expected 2" in problems[0]
    assert "code cell 5 has execution_count 2, expected 3" in problems[1]


def test_stored_stderr_is_caught(path, root):
    notebook = good_notebook(path, root)
    warning = new_output("stream", name="stderr", text="UserWarning: something odd\n")
    notebook["cells"][5]["outputs"].append(warning)
    one_problem(check(notebook, path, root), "code cell 5", "stderr", "UserWarning")


def error_output():
    return new_output("error", ename="ValueError", evalue="bad shape", traceback=["..."])


def test_stored_error_is_caught(path, root):
    notebook = good_notebook(path, root)
    notebook["cells"][5]["outputs"].append(error_output())
    one_problem(check(notebook, path, root), "code cell 5", "ValueError: bad shape")


@pytest.mark.parametrize(
    "mark",
    [
        {"metadata": {"tags": ["raises-exception"]}},
        {"metadata": {"tags": ["nbval-raises-exception"]}},
        {"source": "# NBVAL_RAISES_EXCEPTION\nraise ValueError('bad shape')"},
    ],
    ids=["tag", "nbval-tag", "comment-marker"],
)
def test_error_in_cell_marked_as_raising_is_accepted(path, root, mark):
    notebook = good_notebook(path, root)
    notebook["cells"][5]["outputs"].append(error_output())
    notebook["cells"][5].update(mark)
    assert check(notebook, path, root) == []


def test_notebook_over_two_megabytes_is_caught(path, root):
    notebook = good_notebook(path, root)
    big = {"image/png": "A" * (hygiene.MAX_BYTES + 1000), "text/plain": "<Figure>"}
    notebook["cells"][5]["outputs"].append(new_output("display_data", data=big))
    one_problem(check(notebook, path, root), "bytes", f"{hygiene.MAX_BYTES:,}")


def test_missing_setup_cell_is_caught(path, root):
    notebook = good_notebook(path, root)
    cells = notebook["cells"]
    del cells[1]
    cells[2]["execution_count"], cells[4]["execution_count"] = 1, 2
    one_problem(check(notebook, path, root), "setup cell is missing")


def test_setup_cell_that_is_not_first_is_caught(path, root):
    notebook = good_notebook(path, root)
    notebook["cells"][1]["source"], notebook["cells"][3]["source"] = (
        notebook["cells"][3]["source"],
        notebook["cells"][1]["source"],
    )
    assert any("setup cell is missing" in p for p in check(notebook, path, root))


@pytest.mark.parametrize(
    ("old", "new", "complaint"),
    [
        # "-q" keeps the pinned line within the 88 characters the line-length check allows.
        ('"--quiet", RNNLIB]', '"-q", RNNLIB, "jax==0.4.30"]', "must not install or pin jax"),
        ('"--quiet", RNNLIB]', '"-q", RNNLIB, "flax>=0.8"]', "must not install or pin flax"),
        ('if "google.colab" in sys.modules:', "if True:", "install only in Colab"),
        (URL, "https://github.com/someone-else/fork", f"git+{URL}"),
    ],
    ids=["pins-jax", "pins-flax", "no-colab-guard", "wrong-repository"],
)
def test_wrong_setup_cell_is_caught(path, root, old, new, complaint):
    notebook = good_notebook(path, root)
    assert old in notebook["cells"][1]["source"]
    notebook["cells"][1]["source"] = notebook["cells"][1]["source"].replace(old, new)
    one_problem(check(notebook, path, root), "setup cell is wrong", complaint)


def test_code_line_longer_than_the_page_is_caught(path, root):
    notebook = good_notebook(path, root)
    longest = "x = 3  # " + "a" * (hygiene.MAX_LINE_LENGTH - 9)
    assert len(longest) == hygiene.MAX_LINE_LENGTH
    notebook["cells"][5]["source"] = f"{longest}\nassert x == 3"
    assert check(notebook, path, root) == []  # exactly at the limit: fine
    notebook["cells"][5]["source"] = f"{longest}a\nassert x == 3"
    one_problem(check(notebook, path, root), "code cell 5, line 1", "89 characters", "88")


def test_long_lines_in_markdown_cells_are_not_code(path, root):
    notebook = good_notebook(path, root)
    notebook["cells"][2]["source"] = "Prose wraps on the page. " * 10
    assert check(notebook, path, root) == []


def test_line_length_limit_is_the_one_ruff_formats_the_book_to():
    config = (BOOK / "ruff.toml").read_text()
    assert re.search(r"^line-length = (\d+)$", config, re.M)[1] == str(hygiene.MAX_LINE_LENGTH)
    assert re.search(r'^extend = "\.\./pyproject\.toml"$', config, re.M)


def test_every_setup_cell_is_the_canonical_one():
    # The pattern check accepts variations; the chapters all use the exact text, which is what
    # CONTRIBUTING tells authors to keep and what test_repo_checks shows ruff leaves unchanged.
    without_rnnlib = []
    for notebook in [*CHAPTERS, TEMPLATE]:
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        setup = next(c for c in cells if c["cell_type"] == "code")
        if hygiene.uses_rnnlib(cells) or notebook == TEMPLATE:
            assert hygiene._source(setup) == hygiene.setup_cell_source(), notebook.name
        else:
            without_rnnlib.append(notebook.name)
    # One page imports nothing of rnnlib: the appendix, whose setup cell checks the tools it
    # teaches (tests/notebooks/test_appendix_workflow.py runs it without jax, flax or rnnlib).
    assert without_rnnlib == ["appendix_testing_notebooks.ipynb"]


TOOLS_SETUP = (
    "import subprocess\nimport sys\n\n"
    'if "google.colab" in sys.modules:\n'
    '    subprocess.run([sys.executable, "-m", "pip", "install", "nbval"], check=True)\n'
)


def test_a_chapter_without_rnnlib_may_install_other_tools_in_colab(path, root):
    notebook = good_notebook(path, root)
    notebook["cells"][3]["source"] = "print(1 + 1)"  # no rnnlib left
    notebook["cells"][1]["source"] = TOOLS_SETUP
    assert check(notebook, path, root) == []
    # Still only in Colab, and still never jax or flax.
    notebook["cells"][1]["source"] = TOOLS_SETUP.replace('"google.colab" in sys.modules', "True")
    one_problem(check(notebook, path, root), "install only in Colab")
    notebook["cells"][1]["source"] = TOOLS_SETUP.replace('"nbval"]', '"nbval", "jax"]')
    one_problem(check(notebook, path, root), "must not install or pin jax")


def test_a_chapter_that_imports_rnnlib_must_install_it_in_colab(path, root):
    notebook = good_notebook(path, root)
    notebook["cells"][3]["source"] = "from rnnlib import LSTMCell\n\nprint(1 + 1)"
    notebook["cells"][1]["source"] = TOOLS_SETUP
    one_problem(check(notebook, path, root), "setup cell is wrong", f"rnnlib from git+{URL}")


def test_setup_cell_comment_mentioning_jax_is_fine(path, root):
    notebook = good_notebook(path, root)
    assert "jax" in notebook["cells"][1]["source"]  # the canonical comment says Colab ships jax
    assert check(notebook, path, root) == []


@pytest.mark.parametrize(
    "wrong",
    [
        f"{URL}/blob/main/book/ch1.ipynb",  # not a Colab address at all
        "https://colab.research.google.com/github/example-org/example-book/blob/main/book/ch1.ipynb",
        "https://colab.research.google.com/github/example-org/example-book/blob/trunk/book/ch2.ipynb",
        "https://colab.research.google.com/github/other/example-book/blob/trunk/book/ch1.ipynb",
    ],
    ids=["github-link", "wrong-branch", "wrong-path", "wrong-owner"],
)
def test_wrong_badge_url_is_caught(path, root, wrong):
    notebook = good_notebook(path, root)
    notebook["cells"][0]["source"] = (
        f"# A chapter\n\n[![Open In Colab]({hygiene.COLAB_BADGE_IMAGE})]({wrong})"
    )
    problems = check(notebook, path, root)
    assert len(problems) == 1, problems
    assert hygiene.colab_url(path, root) in problems[0]


def test_badge_url_is_built_from_config(path, root):
    assert hygiene.colab_url(path, root) == (
        "https://colab.research.google.com/github/example-org/example-book/blob/trunk/book/ch1.ipynb"
    )
    assert f"({hygiene.colab_url(path, root)})" in hygiene.badge_markdown(path, root)
    assert f"git+{URL}@trunk" in hygiene.setup_cell_source(root)


def test_a_setup_cell_shown_open_is_reported(root):
    path = root / "book" / "ch1.ipynb"
    cells = good_notebook(path, root)["cells"]
    setup = next(c for c in cells if c["cell_type"] == "code")
    setup["metadata"]["tags"] = []
    problems = hygiene.book_problems(path, cells, root)
    assert problems == [
        "the Colab setup cell must be tagged hide-input, so the book shows it collapsed"
    ]


@pytest.mark.parametrize("tags", [[], ["remove-output"]])
def test_a_cell_of_asserts_only_shown_open_is_reported(path, root, tags):
    notebook = good_notebook(path, root)
    notebook["cells"][5]["source"] = "assert x == 3\nassert x > 0  # a comment"
    notebook["cells"][5]["metadata"] = {"tags": tags}
    one_problem(check(notebook, path, root), "cell 5 only asserts", "hide-input")


@pytest.mark.parametrize("tag", sorted(hygiene.COLLAPSED_TAGS))
def test_a_collapsed_cell_of_asserts_only_is_fine(path, root, tag):
    notebook = good_notebook(path, root)
    notebook["cells"][5]["source"] = "assert x == 3"
    notebook["cells"][5]["metadata"] = {"tags": [tag]}
    assert check(notebook, path, root) == []


def test_asserts_next_to_the_code_that_prints_are_fine(path, root):
    notebook = good_notebook(path, root)
    notebook["cells"][5]["source"] = "x = 3\nprint(x)\nassert x == 3"
    assert check(notebook, path, root) == []


def test_repository_url_must_be_on_github(root):
    (root / "_config.yml").write_text("repository:\n  url: https://gitlab.com/a/b\n")
    with pytest.raises(ValueError, match="https://github.com/OWNER/NAME.*gitlab"):
        _ = hygiene.load_repository(root).slug


def test_command_line_exit_status(path, root, capsys, monkeypatch):
    monkeypatch.setattr(hygiene, "REPO_ROOT", root)
    bad = good_notebook(path, root)
    bad["cells"][5]["execution_count"] = None
    write(bad, path)
    assert hygiene.main([str(path)]) == 1
    assert "no execution_count" in capsys.readouterr().out
    write(good_notebook(path, root), path)
    assert hygiene.main([str(path)]) == 0


# --- the generic rules, for any notebook anywhere ------------------------------------------------


def generic_notebook():
    """A notebook of someone else's: executed in order, no badge, no Colab setup cell."""
    cells = [
        new_markdown_cell("# Someone else's notebook"),
        new_code_cell("x = 41", execution_count=1),
        new_code_cell(
            "print(x + 1)",
            execution_count=2,
            outputs=[new_output("stream", name="stdout", text="42\n")],
        ),
    ]
    return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


@pytest.fixture
def elsewhere(tmp_path):
    """A notebook in a folder that is not this book: no _config.yml above it."""
    (tmp_path / "notebooks").mkdir()
    return tmp_path / "notebooks" / "analysis.ipynb"


def test_book_rules_apply_exactly_to_the_books_chapters(root, path, elsewhere):
    assert hygiene.is_book_notebook(path, root)
    assert hygiene.is_book_notebook(BOOK / "the_carry.ipynb")
    assert not hygiene.is_book_notebook(root / "elsewhere" / "x.ipynb", root)  # not in book/
    assert not hygiene.is_book_notebook(elsewhere, elsewhere.parents[1])  # no _config.yml
    (root / "_config.yml").unlink()
    assert not hygiene.is_book_notebook(path, root)


def test_notebook_outside_the_book_gets_only_the_generic_rules(elsewhere):
    assert check(generic_notebook(), elsewhere, hygiene.REPO_ROOT) == []
    # The same notebook as a chapter of a book misses the badge and the setup cell.
    book_problems = hygiene.check_notebook(elsewhere, hygiene.REPO_ROOT, book_rules=True)
    assert any("setup cell is missing" in p for p in book_problems), book_problems
    assert any("not inside the repository" in p for p in book_problems), book_problems


@pytest.mark.parametrize(
    ("fault", "complaint"),
    [
        ("never-executed", "code cell 2 has no execution_count"),
        ("out-of-order", "code cell 2 has execution_count 5, expected 2"),
        ("stderr", "code cell 2 stores stderr output: 'UserWarning: careful'"),
        ("error", "code cell 2 stores an error (NameError: name 'x' is not defined)"),
        ("long-line", "code cell 2, line 1 is 89 characters long"),
    ],
)
def test_generic_rules_catch_each_fault_outside_the_book(elsewhere, fault, complaint):
    notebook = generic_notebook()
    cell = notebook["cells"][2]
    if fault == "never-executed":
        cell["execution_count"], cell["outputs"] = None, []
    elif fault == "out-of-order":
        cell["execution_count"] = 5
    elif fault == "stderr":
        cell["outputs"].append(new_output("stream", name="stderr", text="UserWarning: careful"))
    elif fault == "error":
        cell["outputs"] = [new_output("error", ename="NameError", evalue="name 'x' is not defined")]
    elif fault == "long-line":
        cell["source"] = "print(x + 1)  # " + "a" * (hygiene.MAX_LINE_LENGTH - 15)
    one_problem(check(notebook, elsewhere, hygiene.REPO_ROOT), complaint)


# nbval reads a marker only in its exact spelling and ignores every other one silently: the cell
# is then compared (or run) as if it carried no marker. Each of these is one nbval ignores.
@pytest.mark.pinned_env  # nbval is the judge of what it reads
@pytest.mark.parametrize(
    ("tag", "line", "meant"),
    [
        ("nbval_skip", None, "'nbval-skip'"),
        ("nbval-ignore_output", None, "'nbval-ignore-output'"),
        ("NBVAL-SKIP", None, "'nbval-skip'"),
        ("raises_exception", None, "'raises-exception'"),
        (None, "# NBVAL-SKIP", "`# NBVAL_SKIP`"),
        (None, "# nbval_skip", "`# NBVAL_SKIP`"),
        (None, "# NBVAL IGNORE OUTPUT", "`# NBVAL_IGNORE_OUTPUT`"),
        (None, "  # NBVAL_SKIP because it downloads", "`# NBVAL_SKIP`"),
        (None, "# nbval-raises-exception", "`# NBVAL_RAISES_EXCEPTION`"),
    ],
)
def test_a_misspelt_nbval_marker_is_caught(elsewhere, tag, line, meant):
    from nbval.plugin import comment_markers, find_comment_markers, metadata_tags

    notebook = generic_notebook()
    cell = notebook["cells"][2]
    if tag:
        cell["metadata"]["tags"] = ["hide-input", tag]
        assert tag not in metadata_tags  # nbval does ignore it
        complaint = f"code cell 2 has the tag {tag!r}, which nbval ignores: it reads {meant}."
    else:
        cell["source"] = f"{line}\n{cell['source']}"
        assert list(find_comment_markers(cell["source"])) == []  # nbval does ignore it
        complaint = (
            f"code cell 2, line 1 is {line.strip()!r}, which nbval ignores: it reads {meant}"
        )
    # The marker it suggests is one nbval reads.
    assert meant.strip("`'# ") in {**comment_markers, **metadata_tags}
    one_problem(check(notebook, elsewhere, hygiene.REPO_ROOT), complaint)


@pytest.mark.pinned_env  # nbval is the judge of what it reads
@pytest.mark.parametrize(
    ("tags", "lines"),
    [
        (["nbval-skip"], ["# NBVAL_SKIP"]),
        (["nbval-ignore-output", "raises-exception"], ["#NBVAL_IGNORE_OUTPUT"]),
        (["pytest-validate-ignore-output"], ["## NBVAL_RAISES_EXCEPTION", "# NBVAL_CHECK_OUTPUT"]),
        (["hide-input"], ["# nbval compares this output", "# skip the slow part"]),
        (["nbval", "ignore"], []),  # tags of a reader's own, not like one of nbval's
    ],
)
def test_nbvals_own_markers_and_unrelated_comments_are_fine(elsewhere, tags, lines):
    from nbval.plugin import find_comment_markers

    notebook = generic_notebook()
    cell = notebook["cells"][2]
    cell["metadata"]["tags"] = tags
    cell["source"] = "\n".join([*lines, cell["source"]])
    markers = list(find_comment_markers(cell["source"]))
    assert len(markers) == sum(line.lstrip("#").strip().startswith("NBVAL") for line in lines)
    if "raises-exception" in tags:
        cell["outputs"] = [new_output("error", ename="ValueError", evalue="expected")]
    assert check(notebook, elsewhere, hygiene.REPO_ROOT) == []


@pytest.mark.pinned_env  # nbval is the judge of what it reads
def test_the_tool_knows_exactly_the_markers_nbval_reads():
    from nbval.plugin import comment_markers, metadata_tags

    assert set(hygiene.generic.COMMENT_MARKERS) == set(comment_markers)
    assert set(hygiene.generic.MARKER_TAGS) == set(metadata_tags)


def test_generic_advice_names_a_command_outside_the_book_and_make_inside(path, root, elsewhere):
    notebook = generic_notebook()
    notebook["cells"][2]["execution_count"] = None
    (outside,) = check(notebook, elsewhere, hygiene.REPO_ROOT)
    assert "make notebooks" not in outside
    # The command to copy: this notebook's path, and the kernel it names (python3 when none).
    command = f"`jupyter execute --inplace --kernel_name=python3 {elsewhere}`"
    assert outside.endswith(f"Restart & Run All in Jupyter, or {command}."), outside
    inside = check(notebook, path, root)
    assert "make notebooks" in inside[0] and "jupyter execute" not in inside[0]


@pytest.mark.parametrize(
    ("kernelspec", "override", "expected"),
    [
        (
            {"name": "my-project-env", "display_name": "Mine", "language": "python"},
            None,
            "my-project-env",
        ),
        ({"name": "ir", "display_name": "R", "language": "R"}, None, "ir"),
        (None, None, "python3"),
        ({"display_name": "no name"}, None, "python3"),
        ({"name": "my-project-env"}, "python3", "python3"),
    ],
    ids=["own-kernel", "another-language", "no-kernelspec", "no-name", "overridden"],
)
def test_every_hint_names_the_kernel_and_the_notebook(tmp_path, kernelspec, override, expected):
    notebook = generic_notebook()
    if kernelspec is not None:
        notebook["metadata"]["kernelspec"] = kernelspec
    cells = notebook["cells"]
    cells[1]["execution_count"], cells[2]["execution_count"] = 4, None  # both hints appear
    path = write(notebook, tmp_path / "my notebook.ipynb")  # a space: the path is quoted
    problems = hygiene.check_notebook(path, book_rules=False, kernel=override)
    command = f"jupyter execute --inplace --kernel_name={expected} '{path}'"
    assert len(problems) == 2 and all(f"`{command}`" in p for p in problems), problems


def test_max_line_length_can_be_changed(elsewhere):
    notebook = generic_notebook()
    notebook["cells"][2]["source"] = "print(x + 1)  # " + "a" * 84  # 100 characters
    write(notebook, elsewhere)
    assert len(hygiene.check_notebook(elsewhere)) == 1
    assert hygiene.check_notebook(elsewhere, max_line_length=100) == []
    assert hygiene.check_notebook(elsewhere, max_line_length=99)[0].startswith(
        "code cell 2, line 1 is 100 characters long; the limit is 99"
    )


def test_command_line_generic_flag_leaves_out_the_book_rules(path, root, capsys, monkeypatch):
    monkeypatch.setattr(hygiene, "REPO_ROOT", root)
    write(generic_notebook(), path)  # in root/book/: a chapter, without badge or setup cell
    assert hygiene.main([str(path)]) == 1
    assert "setup cell is missing" in capsys.readouterr().out
    assert hygiene.main(["--generic", str(path)]) == 0
    assert capsys.readouterr().out == "notebook hygiene: 1 checked, 0 with problems\n"


def test_command_line_max_line_length(elsewhere, capsys):
    notebook = generic_notebook()
    notebook["cells"][2]["source"] = "print(x + 1)  # " + "a" * 84  # 100 characters
    write(notebook, elsewhere)
    assert hygiene.main([str(elsewhere)]) == 1
    assert "100 characters long; the limit is 88" in capsys.readouterr().out
    assert hygiene.main(["--max-line-length", "100", str(elsewhere)]) == 0


# --- the file readers copy in: tools/notebook_hygiene.py, as a command and as the hook ----------

SCRIPT = hygiene.REPO_ROOT / "tools" / "notebook_hygiene.py"
HOOKS = hygiene.REPO_ROOT / ".pre-commit-hooks.yaml"


def run_standalone(command, cwd):
    # -S: no site-packages, so the generic rules must need nothing outside the standard library;
    # -I: nothing from the current folder or the environment either.
    return subprocess.run(
        [sys.executable, "-S", "-I", *command], cwd=cwd, capture_output=True, text=True, timeout=60
    )


def copied_in(tmp_path):
    """The file alone, as a reader copies it into a repository of theirs."""
    (tmp_path / "tools").mkdir(parents=True)
    copy = tmp_path / "tools" / "notebook_hygiene.py"
    copy.write_bytes(SCRIPT.read_bytes())
    return copy


def test_the_file_runs_on_its_own_with_the_standard_library_only(elsewhere):
    reader = elsewhere.parents[1]
    copy = copied_in(reader)
    write(generic_notebook(), elsewhere)
    result = run_standalone([str(copy), "notebooks"], reader)
    assert (result.returncode, result.stdout) == (
        0,
        "notebook hygiene: 1 checked, 0 with problems\n",
    )
    notebook = generic_notebook()
    notebook["cells"][2]["outputs"].append(new_output("stream", name="stderr", text="oops\n"))
    write(notebook, elsewhere)
    result = run_standalone([str(copy), "notebooks"], reader)
    assert result.returncode == 1, result.stderr
    assert (
        "notebooks/analysis.ipynb:\n  - code cell 2 stores stderr output: 'oops'" in result.stdout
    )
    # With no path it searches the current folder, subfolders included.
    assert run_standalone([str(copy)], reader).stdout == result.stdout


def test_the_file_imports_nothing_but_the_standard_library():
    tree = ast.parse(SCRIPT.read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    imported |= {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert imported - {"__future__"} <= set(sys.stdlib_module_names), imported


def bad_notebooks(folder):
    """A clean notebook and one notebook for each fault the generic rules catch."""
    faults = {
        "clean": lambda cells: None,
        "never": lambda cells: cells[2].update(execution_count=None, outputs=[]),
        "order": lambda cells: cells[2].update(execution_count=5),
        "stderr": lambda cells: cells[2]["outputs"].append(
            new_output("stream", name="stderr", text=["Warning: a\n", "b\n"])
        ),
        "error": lambda cells: cells[2].update(
            outputs=[new_output("error", ename="KeyError", evalue="'x'", traceback=[])]
        ),
        "raises": lambda cells: cells[2].update(
            outputs=[new_output("error", ename="KeyError", evalue="'x'", traceback=[])],
            metadata={"tags": ["raises-exception"]},
        ),
        "long": lambda cells: cells[2].update(source="x = 1  # " + "a" * 90),
    }
    (folder / "sub").mkdir(parents=True)
    for name, fault in faults.items():
        notebook = generic_notebook()
        notebook["metadata"]["kernelspec"] = {"name": f"kernel-{name}", "language": "python"}
        fault(notebook["cells"])
        write(notebook, folder / "sub" / f"{name}.ipynb")
    (folder / "big.ipynb").write_text(json.dumps(generic_notebook()) + " " * hygiene.MAX_BYTES)
    (folder / "broken.ipynb").write_text('{"cells": [')
    (folder / "latin1.ipynb").write_bytes(b"\xff\xfe")
    (folder / "list.ipynb").write_text("[]")
    (folder / "folder.ipynb").mkdir()
    (folder / ".ipynb_checkpoints").mkdir()
    (folder / ".ipynb_checkpoints" / "never-checkpoint.ipynb").write_text("{}")


def test_the_copied_in_file_and_the_books_generic_mode_agree(tmp_path):
    reader = tmp_path / "reader"
    copy = copied_in(reader)
    bad_notebooks(reader / "notebooks")
    for args in [[], ["--max-line-length=100"], ["--kernel-name=python3"]]:
        alone = run_standalone([str(copy), *args, "notebooks"], reader)
        book = subprocess.run(
            [sys.executable, "-m", "tests.book_hygiene", "--generic", *args, "notebooks"],
            cwd=reader,
            env={**os.environ, "PYTHONPATH": str(hygiene.REPO_ROOT)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (alone.returncode, alone.stdout, alone.stderr) == (1, book.stdout, ""), book.stderr
        assert book.returncode == 1
    # What the copy found, file by file: one line for each unreadable file, no traceback, and
    # every fault caught exactly where it is.
    found = {}
    for line in run_standalone([str(copy), "notebooks"], reader).stdout.splitlines():
        if line.endswith(".ipynb:"):
            current = Path(line[:-1]).name
        elif line.startswith("  - "):
            found.setdefault(current, []).append(line[4:])
    assert sorted(found) == sorted(
        ["never.ipynb", "order.ipynb", "stderr.ipynb", "error.ipynb", "long.ipynb"]
        + ["big.ipynb", "broken.ipynb", "latin1.ipynb", "list.ipynb", "folder.ipynb"]
    )
    assert all(len(problems) == 1 for problems in found.values()), found
    assert "--kernel_name=kernel-never notebooks/sub/never.ipynb" in found["never.ipynb"][0]
    assert "--kernel_name=kernel-order notebooks/sub/order.ipynb" in found["order.ipynb"][0]
    assert found["stderr.ipynb"] == ["code cell 2 stores stderr output: 'Warning: a'"]
    assert found["long.ipynb"][0].startswith("code cell 2, line 1 is 99 characters long")
    assert found["big.ipynb"][0].startswith("the file is 2,000,")
    assert found["broken.ipynb"][0].startswith("it is not a readable notebook (invalid JSON")
    assert found["latin1.ipynb"][0].startswith("it is not a readable notebook (not UTF-8")
    assert found["list.ipynb"] == ["it is not a notebook: no list of cells at its top level"]
    assert found["folder.ipynb"] == ["it is not a regular file"]
    no_limit = run_standalone([str(copy), "--max-line-length=0", "notebooks/sub"], reader)
    assert "long.ipynb" not in no_limit.stdout and "order.ipynb" in no_limit.stdout


def test_the_hook_runs_the_copy_in_file_as_pre_commit_runs_it_from_another_repository(elsewhere):
    (hook,) = yaml.safe_load(HOOKS.read_text())
    assert hook["id"] == "notebook-hygiene"
    # unsupported_script (pre-commit 4.4's name for `script`) runs `entry` from pre-commit's copy
    # of this repository, installs nothing, and appends the staged files that match `types`.
    assert hook["language"] == "unsupported_script" and hook["types"] == ["jupyter"]
    assert hook["minimum_pre_commit_version"] == "4.4.0"
    # Jupyter's checkpoint copies are no one's notebooks: pre-commit passes none of them.
    exclude = re.compile(hook["exclude"])
    for copy in [".ipynb_checkpoints/a-checkpoint.ipynb", "docs/x/.ipynb_checkpoints/b.ipynb"]:
        assert exclude.search(copy), copy
    for notebook in ["notebooks/a.ipynb", "docs/examples/ipynb_checkpoints.ipynb"]:
        assert not exclude.search(notebook), notebook
    entry = hook["entry"].split()
    assert entry == ["tools/notebook_hygiene.py"]
    script = hygiene.REPO_ROOT / entry[0]
    assert script == SCRIPT
    assert script.read_text().startswith("#!/usr/bin/env python3\n")
    assert os.access(script, os.X_OK)
    tracked = subprocess.run(
        ["git", "ls-files", "--stage", entry[0]],
        cwd=hygiene.REPO_ROOT,
        capture_output=True,
        text=True,
    )
    if tracked.returncode == 0 and tracked.stdout:  # in a git checkout, as pre-commit clones it
        assert tracked.stdout.startswith("100755 "), tracked.stdout
    # Run it as pre-commit does: the entry, then the files, in the reader's repository.
    reader = elsewhere.parents[1]
    write(generic_notebook(), elsewhere)
    result = subprocess.run(
        [str(script), *entry[1:], "notebooks/analysis.ipynb"],
        cwd=reader,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stdout) == (
        0,
        "notebook hygiene: 1 checked, 0 with problems\n",
    )
