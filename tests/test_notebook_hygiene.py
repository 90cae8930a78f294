"""The notebook hygiene check: over every chapter, and on small notebooks with one flaw each.

Notebooks are built as plain JSON here (no nbformat), so these tests run in both environments.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml

from tests import notebook_hygiene as hygiene

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


def test_folder_search_skips_template_build_and_checkpoints(tmp_path):
    for name in ["ch1.ipynb", "_template.ipynb", "_build/x.ipynb", ".ipynb_checkpoints/ch1.ipynb"]:
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


def new_code_cell(source, execution_count=None, outputs=()):
    return {
        "cell_type": "code",
        "execution_count": execution_count,
        "metadata": {},
        "outputs": list(outputs),
        "source": source,
    }


def new_output(output_type, **fields):
    return {"output_type": output_type, **fields}


def good_notebook(path, root):
    """A notebook as `make notebooks` leaves it: badge, setup cell, executed cells."""
    cells = [
        new_markdown_cell(f"# A chapter\n\n{hygiene.badge_markdown(path, root)}"),
        new_code_cell(hygiene.setup_cell_source(root), execution_count=1),
        new_markdown_cell("Some prose."),
        new_code_cell(
            "print(1 + 1)",
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
    for notebook in [*CHAPTERS, TEMPLATE]:
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        setup = next(c for c in cells if c["cell_type"] == "code")
        assert hygiene._source(setup) == hygiene.setup_cell_source(), notebook.name


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
