"""tests/execute_notebooks.py: what `make notebooks` stores, and when it refuses to store anything."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from tests.book_hygiene import REPO_ROOT

# nbformat and nbclient exist only in the pinned env. They are imported inside the tests, so the
# lowest env (-m "not pinned_env") deselects this module instead of failing to collect it.
pytestmark = pytest.mark.pinned_env


@pytest.fixture
def execute_notebooks():
    from tests import execute_notebooks

    return execute_notebooks


def new_markdown_cell(source):
    from nbformat.v4 import new_markdown_cell

    return new_markdown_cell(source)


def new_code_cell(source, **fields):
    from nbformat.v4 import new_code_cell

    return new_code_cell(source, **fields)


def write(tmp_path, *cells):
    import nbformat
    from nbformat.v4 import new_notebook

    path = tmp_path / "nb.ipynb"
    nbformat.write(new_notebook(cells=list(cells)), path)
    return path


def test_executes_top_to_bottom_with_clean_counts_and_no_timestamps(
    tmp_path, monkeypatch, execute_notebooks
):
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    (tmp_path / "data.txt").write_text("from the notebook's folder")
    stale = new_code_cell("print('old')", execution_count=41, metadata={"ExecuteTime": {"x": 1}})
    path = write(
        tmp_path,
        new_markdown_cell("# Title"),
        stale,
        new_code_cell(""),
        new_code_cell("# NBVAL_RAISES_EXCEPTION\nraise ValueError('on purpose')"),
        new_code_cell("print(open('data.txt').read())"),
    )
    notebook = execute_notebooks.execute(path)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert [cell.execution_count for cell in code] == [1, None, 2, 3]
    assert code[0].outputs[0].text == "old\n"
    assert code[2].outputs[0].ename == "ValueError"
    assert code[3].outputs[0].text == "from the notebook's folder\n"  # cwd is the notebook's folder
    for cell in code:
        assert "execution" not in cell.metadata and "ExecuteTime" not in cell.metadata
        assert "tags" not in cell.metadata  # the temporary raises-exception tag is gone again


def test_unexpected_error_fails_and_leaves_the_notebook_untouched(tmp_path, execute_notebooks):
    path = write(tmp_path, new_code_cell("1 / 0"))
    before = path.read_bytes()
    assert execute_notebooks.main([str(path)]) == 1
    assert path.read_bytes() == before


def test_cell_marked_as_raising_that_does_not_raise_fails(tmp_path, execute_notebooks):
    path = write(tmp_path, new_code_cell("x = 1", metadata={"tags": ["raises-exception"]}))
    with pytest.raises(RuntimeError, match="code cell 0 is marked as raising"):
        execute_notebooks.execute(path)


# --- notebooks paired with a Markdown file (book/NAME.ipynb and book/md/NAME.md) -----------------


def git(repo, *args):
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", "-c", "commit.gpgsign=false"]
        + list(args),
        cwd=repo,
        check=True,
        capture_output=True,
    )


def paired(tmp_path, execute_notebooks, *cells):
    """A paired notebook tmp_path/book/ch.ipynb, its book/md/ch.md written from it."""
    import nbformat
    from nbformat.v4 import new_notebook

    (tmp_path / "book").mkdir()
    path = tmp_path / "book" / "ch.ipynb"
    metadata = {
        "jupytext": dict(execute_notebooks.PAIR_METADATA),
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
    }
    notebook = new_notebook(cells=list(cells), metadata=metadata)
    execute_notebooks.write_pair(notebook, path)
    return nbformat.read(path, as_version=4), path, tmp_path / "book" / "md" / "ch.md"


def committed(tmp_path):
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "pair")


def age(path, seconds):
    """Set path's modification time `seconds` into the past (a fresh clone's times are arbitrary)."""
    stamp = time.time() - seconds
    os.utime(path, (stamp, stamp))


def code_sources(notebook):
    return [cell.source for cell in notebook.cells if cell.cell_type == "code"]


def test_an_edit_made_in_the_markdown_reaches_the_notebook_and_is_executed(
    tmp_path, monkeypatch, execute_notebooks
):
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    # The hygiene check (its own tests) wants a chapter of the repository; this is a bare notebook.
    monkeypatch.setattr(execute_notebooks, "check_notebook", lambda path: [])
    _, path, md = paired(
        tmp_path,
        execute_notebooks,
        new_markdown_cell("# A chapter\n\nThe answer is printed below."),
        new_code_cell("print(6 * 7)"),
    )
    committed(tmp_path)
    text = md.read_text()
    md.write_text(text.replace("print(6 * 7)", "print(6 * 9)").replace("below.", "below!"))
    age(md, 3600)  # the edited .md is the *older* file: no decision may rest on timestamps
    assert execute_notebooks.main([str(path)]) == 0
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    assert code_sources(notebook) == ["print(6 * 9)"]
    assert notebook.cells[0].source.endswith("below!")
    assert notebook.cells[1].outputs[0].text == "54\n"  # executed after the text came in
    assert execute_notebooks.pair_problems(path) == []  # and the .md written back from it


def test_an_edit_made_in_the_notebook_is_kept_and_reaches_the_markdown(tmp_path, execute_notebooks):
    import nbformat

    notebook, path, md = paired(tmp_path, execute_notebooks, new_code_cell("x = 1"))
    committed(tmp_path)
    notebook.cells[0].source = "x = 2"
    nbformat.write(notebook, path)
    age(path, 3600)  # the edited notebook is the older file
    assert code_sources(execute_notebooks.read_inputs(path)) == ["x = 2"]
    assert execute_notebooks.edited_side(path, md) == "ipynb"


def test_a_pair_in_sync_is_read_as_it_is_whatever_its_timestamps(tmp_path, execute_notebooks):
    notebook, path, md = paired(tmp_path, execute_notebooks, new_code_cell("x = 1"))
    committed(tmp_path)
    for older in (path, md):
        age(older, 3600)
        assert execute_notebooks.read_inputs(path) == notebook


def test_both_sides_edited_since_the_commit_is_refused_until_one_is_chosen(
    tmp_path, execute_notebooks
):
    import nbformat

    notebook, path, md = paired(tmp_path, execute_notebooks, new_code_cell("x = 1"))
    committed(tmp_path)
    notebook.cells[0].source = "x = 2"
    nbformat.write(notebook, path)
    md.write_text(md.read_text().replace("x = 1", "x = 3"))
    before = path.read_bytes(), md.read_bytes()
    with pytest.raises(execute_notebooks.PairConflict, match="both edited"):
        execute_notebooks.read_inputs(path)
    assert execute_notebooks.main([str(path)]) == 1
    assert (path.read_bytes(), md.read_bytes()) == before  # nothing was written
    assert code_sources(execute_notebooks.read_inputs(path, "md")) == ["x = 3"]
    assert code_sources(execute_notebooks.read_inputs(path, "ipynb")) == ["x = 2"]


def test_a_pair_committed_out_of_sync_takes_the_markdown(tmp_path, execute_notebooks):
    _, path, md = paired(tmp_path, execute_notebooks, new_code_cell("x = 1"))
    md.write_text(md.read_text().replace("x = 1", "x = 3"))
    committed(tmp_path)
    age(md, 3600)
    assert code_sources(execute_notebooks.read_inputs(path)) == ["x = 3"]


def test_a_new_chapter_gets_its_markdown_and_git_unknown_pairs_go_by_time(
    tmp_path, monkeypatch, execute_notebooks
):
    import nbformat

    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # no repository here
    notebook, path, md = paired(tmp_path, execute_notebooks, new_code_cell("x = 1"))
    md.unlink()
    assert execute_notebooks.read_inputs(path) == notebook  # nothing to take from
    execute_notebooks.write_pair(notebook, path)
    assert md.exists() and execute_notebooks.pair_problems(path) == []
    # Files git does not know were written here, so the one written last holds the edits.
    md.write_text(md.read_text().replace("x = 1", "x = 3"))
    age(path, 3600)
    assert code_sources(execute_notebooks.read_inputs(path)) == ["x = 3"]
    notebook.cells[0].source = "x = 2"
    nbformat.write(notebook, path)
    age(md, 7200)
    assert code_sources(execute_notebooks.read_inputs(path)) == ["x = 2"]


def test_the_markdown_pair_can_be_named_instead_of_the_notebook(tmp_path, execute_notebooks):
    _, path, md = paired(tmp_path, execute_notebooks, new_code_cell("x = 1"))
    assert execute_notebooks.find_notebooks([str(md)]) == [path]
    with pytest.raises(SystemExit, match="expected a notebook"):
        execute_notebooks.find_notebooks([str(REPO_ROOT / "book" / "intro.md")])
