"""rnnlib.migrate on the cases issue 42 found it getting wrong, each as a user would meet it.

* A wrapper's own ``initialize_carry(self, rng, batch_dims, size, init_fn=...)`` that hands the
  old arguments on to its cells (``stacked_cells.py``) is reported, and following the tool's
  suggestions never ends in a clean run while the program still fails.
* An ``nn.RNNCellBase`` subclass is an error only where the file hands it to ``nn.RNN``
  (``scan_custom_cell.py`` scans one with ``nn.scan``, which runs unchanged).
* Cells whose type ``setup`` shows (a list of them, a ``@property``) are errors, not reviews
  (``convlstm_layers.py``).
* A width is read from the carry a cell is called with, ``hidden[i]`` included
  (``gru_layers.py``, whose fix tests/tools/test_migrate_idioms.py runs against Flax 0.6.11).

The programs run under the real Flax 0.6.11 (.venv-flax06) and, fixed, under the pinned Flax;
both sides fill their parameters with the same NumPy draws (tests/migrate_corpus/_report.py).
"""

from __future__ import annotations

import shutil
import sys

import pytest

from tests.parity.test_legacy_oracle import ORACLE_PYTHON, require_oracle_python
from tests.tools.test_migrate_idioms import (
    CORPUS,
    assert_same_numbers,
    migrate_json,
    run,
    run_snippet,
)


def old_and_new(name, tmp_path):
    """A copy of the corpus for the old program and one to migrate; the old one's run under
    Flax 0.6.11 saved to old.npz."""
    old_dir, new_dir = tmp_path / "old", tmp_path / "new"
    shutil.copytree(CORPUS, old_dir)
    shutil.copytree(CORPUS, new_dir)
    old = run(require_oracle_python(ORACLE_PYTHON), old_dir / name, old_dir, tmp_path / "old.npz")
    assert old.returncode == 0, old.stderr[-3000:]
    return new_dir / name


def assert_same_run(path, tmp_path, terms):
    """`path` runs under the pinned Flax with the old program's parameters and outputs."""
    new = run(sys.executable, path, path.parent, tmp_path / "new.npz")
    assert new.returncode == 0, new.stderr[-3000:]
    assert_same_numbers(tmp_path / "old.npz", tmp_path / "new.npz", terms=terms)


def edit(path, old, new):
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new), encoding="utf-8")


# --------------------------------------------------------------------------- the wrapper's method


def test_wrapper_handing_old_arguments_to_its_cells_is_reported(capsys):
    code, report = migrate_json(CORPUS / "stacked_cells.py")
    assert code == 1
    by_code = {f["code"]: f for f in report["findings"]}
    assert sorted(by_code) == ["MIG003", "MIG008"]
    review = by_code["MIG008"]
    assert review["severity"] == "review" and not review["fixable"]
    assert "inside StackedCells.initialize_carry" in review["message"]
    assert "carry_init=init_fn" in review["suggestion"]


@pytest.mark.pinned_env
def test_following_the_suggestions_never_ends_clean_while_the_program_fails(tmp_path):
    path = old_and_new("stacked_cells.py", tmp_path)
    # The one suggestion with a width to fill in: the cells get their features.
    edit(path, 'nn.LSTMCell(name=f"layer_{i}")', 'nn.LSTMCell(features=HIDDEN, name=f"layer_{i}")')
    code, report = migrate_json(path)
    assert code == 1 and [f["code"] for f in report["findings"]] == ["MIG008"]
    broken = run(sys.executable, path, path.parent)
    assert broken.returncode != 0
    assert "unexpected keyword argument 'init_fn'" in broken.stderr
    # The review's suggestion, done by hand: the current call, and init_fn as carry_init.
    edit(path, "features=HIDDEN, name", "features=HIDDEN, carry_init=nn.initializers.ones, name")
    edit(
        path,
        "cell.initialize_carry(key, batch_dims, size, init_fn=init_fn)",
        "cell.initialize_carry(key, tuple(batch_dims) + (1,))",
    )
    code, report = migrate_json(path)
    assert (code, report["findings"]) == (0, [])
    assert_same_run(path, tmp_path, terms=4 * ((3 + 5 + 1) + (5 + 5 + 1)))


@pytest.mark.parametrize(
    "call, reported",
    [
        ("cell.initialize_carry(rng, batch_dims, size)", True),
        ("self.initialize_carry(rng, batch_dims, size)", False),
    ],
    ids=["hands-on", "recursion-on-self"],
)
def test_a_method_is_evidence_only_for_calls_on_its_own_receiver(call, reported, tmp_path, capsys):
    source = (
        "import flax.linen as nn\n\n\nclass Wrapper(nn.Module):\n    cell: nn.Module\n\n"
        "    def initialize_carry(self, rng, batch_dims, size):\n"
        f"        return {call}\n"
    )
    code, report, _ = run_snippet(tmp_path, capsys, source)
    assert [f["code"] for f in report["findings"]] == (["MIG008"] if reported else [])
    assert code == (1 if reported else 0)


def test_the_wrapper_s_own_method_called_from_outside_is_its_api(tmp_path, capsys):
    source = (CORPUS / "stacked_cells.py").read_text(encoding="utf-8")
    _, report, _ = run_snippet(tmp_path, capsys, source)
    lines = [f["line"] for f in report["findings"]]
    # stack.initialize_carry(...) at module level is the wrapper's API, not reported.
    call_line = source.splitlines().index("carry = stack.initialize_carry(") + 1
    assert call_line not in lines


# --------------------------------------------------------------------------- RNNCellBase subclasses

CELL = """import flax.linen as nn


class Cell(nn.RNNCellBase):
    features: int

    @nn.compact
    def __call__(self, h, x):
        return h, h
{use}
"""


@pytest.mark.parametrize(
    "use, severity",
    [
        ("", "advice"),
        (
            "\n\nScan = nn.scan(Cell, variable_broadcast='params', split_rngs={'params': False})",
            "advice",
        ),
        ("\n\nrnn = nn.RNN(Cell(4))", "error"),
        ("\n\ncell = Cell(4)\nrnn = nn.RNN(cell)", "error"),
        ("\n\nrnn = nn.Bidirectional(nn.RNN(Cell(4)), nn.RNN(Cell(4)))", "error"),
        (
            "\n\nclass M(nn.Module):\n    cell_type: type = Cell\n\n    @nn.compact\n"
            "    def __call__(self, xs):\n        return nn.RNN(self.cell_type(4))(xs)",
            "error",
        ),
        ("\n\ndef build(cell):\n    return nn.RNN(cell)", "review"),
        ("\n\nrnn = nn.RNN(nn.GRUCell(4))", "advice"),
    ],
    ids=[
        "unused",
        "nn-scan",
        "rnn",
        "rnn-variable",
        "bidirectional",
        "field-default",
        "rnn-of-a-parameter",
        "rnn-of-another-cell",
    ],
)
def test_cell_subclass_is_an_error_only_where_it_reaches_nn_rnn(use, severity, tmp_path, capsys):
    code, report, _ = run_snippet(tmp_path, capsys, CELL.format(use=use))
    [finding] = report["findings"]
    assert finding["code"] == "MIG006" and finding["severity"] == severity
    assert code == (0 if severity == "advice" else 1)
    assert main_strict(tmp_path / "snippet.py") == 1  # --strict still fails on advice


def main_strict(path):
    code, _ = migrate_json(path, "--strict")
    return code


def test_rnn_in_another_notebook_cell_counts(tmp_path, capsys):
    import json

    cells = [CELL.format(use=""), "rnn = nn.RNN(Cell(4))\n"]
    notebook = {
        "cells": [
            {"cell_type": "code", "metadata": {}, "source": c, "outputs": [], "execution_count": 1}
            for c in cells
        ],
        "metadata": {"language_info": {"name": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path = tmp_path / "cells.ipynb"
    path.write_text(json.dumps(notebook, indent=1) + "\n", encoding="utf-8")
    code, report = migrate_json(path)
    assert code == 1 and [f["severity"] for f in report["findings"]] == ["error"]


@pytest.mark.pinned_env
def test_custom_cell_scanned_with_nn_scan_runs_unchanged_and_is_only_advice(tmp_path):
    path = old_and_new("scan_custom_cell.py", tmp_path)
    code, report = migrate_json(path)
    assert code == 0 and {f["severity"] for f in report["findings"]} == {"advice"}
    # It runs under current Flax as it is, with the old program's numbers ...
    assert_same_run(path, tmp_path, terms=4 * (5 + 3 + 1))
    # ... and still after --fix adds num_feature_axes (so nn.RNN could read it).
    code, report = migrate_json(path, "--fix")
    assert code == 0 and "def num_feature_axes" in path.read_text(encoding="utf-8")
    assert_same_run(path, tmp_path, terms=4 * (5 + 3 + 1))


# --------------------------------------------------------------------------- types known from setup


@pytest.mark.pinned_env
def test_cells_in_a_setup_list_are_errors_and_the_suggestion_runs(tmp_path):
    path = old_and_new("convlstm_layers.py", tmp_path)
    code, report = migrate_json(path, "--fix")
    [finding] = report["findings"]
    assert code == 1 and finding["code"] == "MIG007" and finding["severity"] == "error"
    assert "ConvLSTMCell instance" in finding["message"]
    assert "needs the input's shape" in finding["reason"]
    assert "<one input step>.shape" in finding["suggestion"]
    # The suggestion, by hand: one input step's shape.
    edit(
        path,
        "jax.random.PRNGKey(0), x.shape[:1], x.shape[2:4] + (self.features,)",
        "jax.random.PRNGKey(0), x[:, 0].shape",
    )
    code, report = migrate_json(path)
    assert (code, report["findings"]) == (0, [])
    # A 3 x 3 kernel over 2 then 4 channels plus the hidden 4, over 3 steps and 2 layers.
    assert_same_run(path, tmp_path, terms=2 * 3 * (9 * (2 + 4) + 9 * (4 + 4) + 1))


@pytest.mark.parametrize(
    "setup, receiver",
    [
        ("self.cells = [nn.LSTMCell(features=4) for _ in range(2)]", "self.cells[0]"),
        ("self.cells = (nn.LSTMCell(features=4), nn.LSTMCell(features=4))", "self.cells[-1]"),
        ("self.cells = [nn.LSTMCell(features=4)] * 2", "self.cells[1]"),
        ("self.cells = list(nn.LSTMCell(features=4) for _ in range(2))", "self.cells[0]"),
    ],
    ids=["comprehension", "tuple", "repeated", "list-call"],
)
def test_an_element_of_a_cell_list_from_setup_is_a_cell(setup, receiver, tmp_path, capsys):
    source = (
        "import flax.linen as nn\n\n\nclass M(nn.Module):\n    def setup(self):\n"
        f"        {setup}\n\n    def __call__(self, k):\n"
        f"        return {receiver}.initialize_carry(k, (2,), 4)\n"
    )
    code, report, path = run_snippet(tmp_path, capsys, source, "--fix")
    [finding] = report["findings"]
    assert finding["code"] == "MIG007" and finding["fixed"], finding
    assert code == 0 and f"{receiver}.initialize_carry(k, (2, 1))" in path.read_text()


@pytest.mark.parametrize(
    "loop",
    [
        "for cell in self.cells",
        "for key, cell in zip(keys, self.cells)",
        "for i, cell in enumerate(self.cells)",
    ],
)
def test_a_cell_taken_from_a_setup_list_by_a_loop_is_a_cell(loop, tmp_path, capsys):
    source = (
        "import flax.linen as nn\n\n\nclass M(nn.Module):\n    def setup(self):\n"
        "        self.cells = [nn.GRUCell(features=4) for _ in range(2)]\n\n"
        "    def __call__(self, k, keys):\n        out = []\n"
        f"        {loop}:\n            out.append(cell.initialize_carry(k, (2,), 4))\n"
        "        return out\n"
    )
    code, report, _ = run_snippet(tmp_path, capsys, source)
    [finding] = report["findings"]
    assert code == 1 and finding["code"] == "MIG007" and finding["severity"] == "error"


def test_a_cell_a_property_builds_is_a_cell(tmp_path, capsys):
    source = (
        "from flax.linen import recurrent as flax_module\n\n\nclass GRU:\n    units = 4\n\n"
        "    @property\n    def module(self):\n        return flax_module.GRUCell()\n\n"
        "    def initial_state(self, key, batch):\n"
        "        return self.module.initialize_carry(key, batch, self.units)\n"
    )
    code, report, _ = run_snippet(tmp_path, capsys, source)
    codes = [(f["code"], f["severity"]) for f in report["findings"]]
    assert code == 1 and codes == [("MIG003", "error"), ("MIG007", "error")]


@pytest.mark.parametrize(
    "source, reported",
    [
        ("import flax.linen as nn\nkw = {}\ncell = nn.LSTMCell(**kw)\n", "nn.LSTMCell(**kw)"),
        (
            "import flax.linen as nn\n\n\nclass M(nn.Module):\n"
            "    cell_type: type[nn.RNNCellBase]\n    cell_kwargs: dict\n\n"
            "    def setup(self):\n        self.cell = self.cell_type(**self.cell_kwargs)\n",
            "self.cell_type(**self.cell_kwargs)",
        ),
    ],
    ids=["flax-cell", "cell-field"],
)
def test_a_cell_built_only_from_kwargs_needs_review(source, reported, tmp_path, capsys):
    code, report, _ = run_snippet(tmp_path, capsys, source)
    [finding] = report["findings"]
    assert code == 1 and finding["code"] == "MIG008" and finding["severity"] == "review"
    assert reported in finding["message"] and "features" in finding["message"]


# --------------------------------------------------------------------------- widths from the carry


@pytest.mark.parametrize(
    "carry, width",
    [
        ("hidden[i]", "hidden[i].shape[-1]"),
        ("self.state[layer + 1]", "self.state[layer + 1].shape[-1]"),
        ("(h, c)", "h.shape[-1]"),
    ],
)
def test_width_is_read_from_a_carry_at_hand(carry, width, tmp_path, capsys):
    source = (
        "import flax.linen as fnn\n\n\ndef step(self, hidden, h, c, x, i, layer):\n"
        f"    return fnn.GRUCell()({carry}, x)\n"
    )
    code, report, path = run_snippet(tmp_path, capsys, source, "--fix")
    assert code == 0 and report["findings"][0]["fixed"]
    assert f"fnn.GRUCell(features={width})({carry}, x)" in path.read_text()
    code, report = migrate_json(path)
    assert (code, report["findings"]) == (0, [])  # nothing left after --fix


@pytest.mark.parametrize("carry", ["carries[f(i)]", "next(it)", "(h := g(x))"])
def test_a_carry_with_effects_of_its_own_is_not_read_twice(carry, tmp_path, capsys):
    source = (
        "import flax.linen as nn\n\n\ndef step(carries, it, f, g, i, x):\n"
        f"    return nn.GRUCell()({carry}, x)\n"
    )
    code, report, path = run_snippet(tmp_path, capsys, source, "--fix")
    assert code == 1 and not report["findings"][0]["fixable"]
    assert path.read_text() == source
