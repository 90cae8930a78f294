"""Every chapter notebook and its MyST Markdown pair (book/md/NAME.md) say the same thing.

Contributors edit and review the .md; the .ipynb keeps the executed outputs that the book renders
and nbval checks. These tests fail when a pair is out of sync: a notebook without its .md, an .md
without its notebook, or an .md whose text is not what jupytext writes from the notebook. They
compare contents only, never file modification times, which a fresh clone sets arbitrarily.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from tests.book_hygiene import REPO_ROOT, SKIPPED_DIRS

# jupytext, nbformat and nbclient exist only in the pinned env; tests.execute_notebooks imports
# them, so it is imported inside the tests and the lowest env deselects this module.
pytestmark = pytest.mark.pinned_env

BOOK = REPO_ROOT / "book"
NOTEBOOKS = sorted(
    nb for nb in BOOK.rglob("*.ipynb") if SKIPPED_DIRS.isdisjoint(nb.relative_to(BOOK).parts)
)
TEMPLATE = BOOK / "_template.ipynb"


@pytest.fixture(scope="module")
def pairs():
    from tests import execute_notebooks

    return execute_notebooks


def test_the_template_and_the_appendix_are_among_the_paired_notebooks():
    assert TEMPLATE in NOTEBOOKS and BOOK / "appendix_testing_notebooks.ipynb" in NOTEBOOKS


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[nb.name for nb in NOTEBOOKS])
def test_notebook_and_its_markdown_pair_are_in_sync(pairs, notebook):
    problems = pairs.pair_problems(notebook)
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[nb.name for nb in NOTEBOOKS])
def test_notebook_is_paired_with_book_md_the_same_way(pairs, notebook):
    metadata = json.loads(notebook.read_text(encoding="utf-8"))["metadata"]
    assert pairs.PAIR_METADATA.items() <= metadata.get("jupytext", {}).items()
    assert pairs.paired_markdown(notebook) == BOOK / "md" / f"{notebook.stem}.md"


def test_every_markdown_pair_has_its_notebook(pairs):
    problems = pairs.orphan_problems(BOOK)
    assert problems == [], "\n".join(problems)
    assert sorted((BOOK / "md").glob("*.md")) == [BOOK / "md" / f"{nb.stem}.md" for nb in NOTEBOOKS]


def test_the_book_and_the_tests_leave_the_markdown_pairs_alone():
    config = yaml.safe_load((REPO_ROOT / "_config.yml").read_text())
    assert config["only_build_toc_files"] is True
    assert "book/md" in config["exclude_patterns"]
    toc = (REPO_ROOT / "_toc.yml").read_text()
    assert "book/md" not in toc
    # pytest collects nothing there, with or without nbval (exit status 5: no tests).
    for extra in ([], ["--nbval"]):
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
            + extra
            + ["book/md"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 5, result.stdout + result.stderr


# --- the check itself, on a copy of the template in tmp_path -------------------------------------


@pytest.fixture
def copy(tmp_path):
    """book/_template.ipynb and book/md/_template.md, copied as tmp_path/book/ch.{ipynb,md}."""
    (tmp_path / "book" / "md").mkdir(parents=True)
    notebook = tmp_path / "book" / "ch.ipynb"
    shutil.copy(TEMPLATE, notebook)
    shutil.copy(BOOK / "md" / "_template.md", tmp_path / "book" / "md" / "ch.md")
    return notebook


def only_problem(problems, *words):
    assert len(problems) == 1, problems
    for word in words:
        assert word in problems[0], problems[0]


def test_a_faithful_copy_is_in_sync_whatever_the_modification_times(pairs, copy):
    md = copy.parent / "md" / "ch.md"
    assert pairs.pair_problems(copy) == []
    for notebook_time, md_time in [(1_000_000, 2_000_000), (2_000_000, 1_000_000)]:
        os.utime(copy, (notebook_time, notebook_time))
        os.utime(md, (md_time, md_time))
        assert pairs.pair_problems(copy) == []


def test_an_edited_markdown_pair_is_caught(pairs, copy):
    md = copy.parent / "md" / "ch.md"
    text = md.read_text()
    sentence = "After one input the count is 1"
    assert sentence in text
    md.write_text(text.replace(sentence, "After one input the count is one"))
    problem = pairs.pair_problems(copy)
    only_problem(problem, "ch.md is out of sync with", "ch.ipynb", "tests.execute_notebooks")
    assert "+After one input the count is one" in problem[0]  # the diff says what differs
    # Newer or older, the .md is still out of sync: no verdict comes from timestamps.
    for stamp in (1_000_000, 3_000_000):
        os.utime(md, (stamp, stamp))
        assert len(pairs.pair_problems(copy)) == 1


def test_an_edited_notebook_is_caught(pairs, copy):
    notebook = json.loads(copy.read_text())
    code = next(cell for cell in notebook["cells"] if cell["cell_type"] == "code")
    code["source"] = [*code["source"], "\nprint('edited')"]
    copy.write_text(json.dumps(notebook))
    only_problem(pairs.pair_problems(copy), "out of sync")


def test_a_notebook_without_its_markdown_pair_is_caught(pairs, copy):
    (copy.parent / "md" / "ch.md").unlink()
    only_problem(pairs.pair_problems(copy), "ch.md", "is missing", "tests.execute_notebooks")


def test_a_markdown_pair_without_its_notebook_is_caught(pairs, copy):
    book = copy.parent
    assert pairs.orphan_problems(book) == []
    copy.unlink()
    only_problem(pairs.orphan_problems(book), "md/ch.md has no notebook", "ch.ipynb is missing")


def test_a_notebook_that_is_not_paired_is_caught(pairs, copy):
    notebook = json.loads(copy.read_text())
    del notebook["metadata"]["jupytext"]
    copy.write_text(json.dumps(notebook))
    only_problem(pairs.pair_problems(copy), "not paired", "--set-formats ipynb,md//md:myst")
    only_problem(pairs.orphan_problems(copy.parent), "not paired with it")


def test_pages_of_the_book_are_not_taken_for_markdown_pairs(pairs, copy):
    shutil.copy(BOOK / "intro.md", copy.parent / "intro.md")
    assert pairs.orphan_problems(copy.parent) == []
