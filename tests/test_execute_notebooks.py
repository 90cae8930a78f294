"""tests/execute_notebooks.py: what `make notebooks` stores, and when it refuses to store anything."""

from __future__ import annotations

import pytest

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
