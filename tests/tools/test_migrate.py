"""Tests for `python -m rnnlib.migrate`, the checker and fixer for Flax 0.6 recurrent-API code.

The corpus in tests/migrate_corpus/ holds small old-style programs written for these tests.
Expected locations are found by searching the corpus text for the old-API call, so each test
pins an exact line and column without copying numbers out of the checker's own output.
"""

import inspect
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import flax.linen as nn
import jax
import numpy as np
import pytest

import rnnlib
from rnnlib import legacy
from rnnlib.migrate import main
from tests.tolerance import assert_identical

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "migrate_corpus"
RUN_TIMEOUT_S = 600  # each program needs seconds; the margin is for a loaded CI machine

BILSTM = "bilstm_classifier.py"
GRU_LM = "gru_language_model.py"
CONVLSTM = "convlstm_video.py"
NOTEBOOK = "lstm_warmup.ipynb"
NEW_API = "new_api_reference.py"


def run_main(args, capsys):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(args, capsys):
    code, out, _ = run_main(list(args) + ["--format", "json"], capsys)
    return code, json.loads(out)


def locate(text, snippet, occurrence=0):
    """1-based (line, col) of `snippet` in `text`, searching after any module docstring."""
    index = max(text.find("\nimport "), 0) - 1
    for _ in range(occurrence + 1):
        index = text.index(snippet, index + 1)
    line = text.count("\n", 0, index) + 1
    col = index - (text.rfind("\n", 0, index) + 1) + 1
    return line, col


def code_cells(path):
    """{cell number counted over all cells from 1: source} for the code cells of a notebook."""
    cells = json.loads(Path(path).read_text(encoding="utf-8"))["cells"]
    return {i: "".join(c["source"]) for i, c in enumerate(cells, 1) if c["cell_type"] == "code"}


def write(path, text, encoding="utf-8"):
    path = Path(path)
    path.write_bytes(text.encode(encoding))
    return path


def scan_snippet(tmp_path, capsys, source, name="snippet.py"):
    path = write(tmp_path / name, source)
    code, report = run_json([path], capsys)
    return code, report["findings"]


# Expected findings: (cell or None, code, snippet that starts at the finding, occurrence, fixable)
EXPECTED = {
    BILSTM: [
        (None, "MIG004", "class SimpleLSTM", 0, False),
        (None, "MIG003", "ScanLSTM()", 0, True),
        (None, "MIG001", "nn.OptimizedLSTMCell.initialize_carry(", 0, True),
    ],
    GRU_LM: [
        (None, "MIG002", "nn.RNN(nn.GRUCell(), cell_size", 0, True),
        (None, "MIG003", "nn.GRUCell(), cell_size", 0, True),
        (None, "MIG001", "nn.GRUCell.initialize_carry(", 0, True),
    ],
    CONVLSTM: [
        (None, "MIG002", "nn.RNN(\n", 0, True),
        (None, "MIG001", "nn.ConvLSTMCell.initialize_carry(", 0, False),
    ],
    NOTEBOOK: [
        (4, "MIG001", "nn.LSTMCell.initialize_carry(", 0, True),
        (4, "MIG002", "nn.RNN(nn.LSTMCell()", 0, True),
        (4, "MIG003", "nn.LSTMCell()", 0, True),
        (6, "MIG001", "nn.OptimizedLSTMCell.initialize_carry(", 0, True),
        (6, "MIG001", "nn.GRUCell.initialize_carry(", 0, True),
    ],
    NEW_API: [],
    # A current-API scan wrapper shaped like JaxMARL's ScannedRNN: no advice either.
    "scan_current_api.py": [],
    # One program per idiom real code used (tests/tools/test_migrate_idioms.py runs them).
    "scan_inline.py": [
        (None, "MIG001", "nn.GRUCell.initialize_carry(", 0, True),
        (None, "MIG003", "nn.scan(", 0, True),
    ],
    "scan_setup.py": [
        (None, "MIG003", "ScanLSTM()", 0, True),
        (None, "MIG001", "nn.LSTMCell.initialize_carry(", 0, True),
    ],
    "scan_helper.py": [
        (None, "MIG003", "nn.OptimizedLSTMCell()(carry", 0, True),
        (None, "MIG001", "nn.GRUCell.initialize_carry(", 0, True),
        (None, "MIG003", "self.scanned_gru()(name", 0, True),
        (None, "MIG001", "nn.OptimizedLSTMCell.initialize_carry(", 0, True),
    ],
    "instance_carry.py": [
        (None, "MIG003", "nn.LSTMCell()", 0, True),
        (None, "MIG007", "cell.initialize_carry(", 0, True),
        (None, "MIG002", "nn.RNN(nn.GRUCell()", 0, True),
        (None, "MIG003", "nn.GRUCell(), HIDDEN", 0, True),
        (None, "MIG007", "rnn.cell.initialize_carry(", 0, True),
    ],
    "held_class.py": [
        (None, "MIG001", "self.cell_type.initialize_carry(", 0, False),
        (None, "MIG003", "scan()(carry", 0, True),
    ],
    "cell_subclass.py": [
        (None, "MIG006", "class DecoderCell", 0, True),
        (None, "MIG003", "nn.GRUCell()(carry", 0, True),
        (None, "MIG001", "nn.GRUCell.initialize_carry(", 0, True),
    ],
    "convlstm_renamed.py": [(None, "MIG005", "nn.ConvLSTM(", 0, True)],
    # vmc_jax's case: a carry under jax_enable_x64 (fixed with param_dtype=jnp.float64).
    "lstm_x64.py": [
        (None, "MIG001", "nn.LSTMCell.initialize_carry(", 0, True),
        (None, "MIG003", "scan(name", 0, True),
        (None, "MIG001", "nn.LSTMCell.initialize_carry(", 1, True),
    ],
    # Issue 42's cases (tests/tools/test_migrate_cases.py runs them).
    "stacked_cells.py": [
        (None, "MIG003", "nn.LSTMCell(name", 0, False),
        (None, "MIG008", "cell.initialize_carry(key", 0, False),
    ],
    "scan_custom_cell.py": [
        (None, "MIG006", "class LeakyCell", 0, True),
        (None, "MIG006", "def initialize_carry", 0, False),
    ],
    "convlstm_layers.py": [(None, "MIG007", "self.lstm[i].initialize_carry(", 0, False)],
    "gru_layers.py": [(None, "MIG003", "fnn.GRUCell()", 0, True)],
}


# Findings that are not errors: every MIG004 (a scan wrapper that still runs, advice), the
# MIG006 of the cells that are never handed to nn.RNN (advice), and the old-shaped call on a
# cell whose type the file does not show (review).
SEVERITY = {(name, "MIG004"): "advice" for name in EXPECTED} | {
    ("cell_subclass.py", "MIG006"): "advice",
    ("scan_custom_cell.py", "MIG006"): "advice",
    ("stacked_cells.py", "MIG008"): "review",
}


def expected_findings(name):
    path = CORPUS / name
    rows = []
    for cell, code, snippet, occurrence, fixable in EXPECTED[name]:
        text = code_cells(path)[cell] if cell else path.read_text(encoding="utf-8")
        line, col = locate(text, snippet, occurrence)
        rows.append((cell, line, col, code, fixable))
    return sorted(rows, key=lambda r: (r[0] or 0, r[1], r[2], r[3]))


def copy_corpus(tmp_path):
    target = tmp_path / "corpus"
    shutil.copytree(CORPUS, target)
    return target


def run_program(path, tmp_path):
    """Run a fixed corpus program (a notebook runs as its code cells in order)."""
    path = Path(path)
    if path.suffix == ".ipynb":
        script = tmp_path / f"{path.stem}_cells.py"
        script.write_text("\n".join(code_cells(path).values()) + "\n", encoding="utf-8")
        path = script
    return subprocess.run(
        [sys.executable, str(path)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        cwd=tmp_path,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )


# --------------------------------------------------------------------------- finding


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_file_produces_exactly_the_expected_findings(name, capsys):
    code, report = run_json([CORPUS / name], capsys)
    got = [(f["cell"], f["line"], f["col"], f["code"], f["fixable"]) for f in report["findings"]]
    assert sorted(got, key=lambda r: (r[0] or 0, r[1], r[2], r[3])) == expected_findings(name)
    assert report["errors"] == []
    blocking = [f for f in report["findings"] if f["severity"] != "advice"]
    assert code == (1 if blocking else 0)
    for finding in report["findings"]:
        assert finding["severity"] == SEVERITY.get((name, finding["code"]), "error")


def test_text_output_reports_path_line_col_code_and_suggestion(capsys):
    code, out, err = run_main([CORPUS / GRU_LM], capsys)
    line, col = locate((CORPUS / GRU_LM).read_text(), "nn.GRUCell.initialize_carry(")
    assert code == 1 and err == ""
    assert f"{CORPUS / GRU_LM}:{line}:{col}: MIG001 " in out
    assert (
        "suggestion: nn.GRUCell(features=HIDDEN_SIZE, parent=None).initialize_carry("
        "jax.random.PRNGKey(1), "
        "(BATCH, <input channels>))" in out
    )


def test_notebook_findings_are_located_by_cell_number_and_line_within_the_cell(capsys):
    _, out, _ = run_main([CORPUS / NOTEBOOK], capsys)
    line, col = locate(code_cells(CORPUS / NOTEBOOK)[6], "nn.GRUCell.initialize_carry(")
    assert f"{CORPUS / NOTEBOOK}:cell6:{line}:{col}: MIG001 " in out


def test_json_output_lists_findings_and_errors_with_the_documented_fields():
    proc = subprocess.run(
        [sys.executable, "-m", "rnnlib.migrate", "tests/migrate_corpus", "--format", "json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert set(report) == {"findings", "errors", "fixed_files", "fully_fixed_files"}
    fields = {
        "path",
        "cell",
        "line",
        "col",
        "code",
        "message",
        "suggestion",
        "fixable",
        "severity",
        "reason",
        "fixed",
    }
    assert len(report["findings"]) == sum(len(v) for v in EXPECTED.values())
    for finding in report["findings"]:
        assert set(finding) == fields
        assert isinstance(finding["line"], int) and isinstance(finding["col"], int)
        assert finding["code"] in {f"MIG00{i}" for i in range(1, 9)}
        assert finding["fixable"] == (finding["reason"] is None)
        assert finding["fixed"] is False
        assert finding["suggestion"] and finding["message"]
        assert Path(REPO / finding["path"]).parent == CORPUS
    assert report["errors"] == [] and report["fixed_files"] == []


def test_directory_scan_recurses_and_skips_hidden_directories(tmp_path, capsys):
    old = "import flax.linen as nn\ncell = nn.LSTMCell()\n"
    (tmp_path / "a" / "b").mkdir(parents=True)
    write(tmp_path / "a" / "b" / "deep.py", old)
    (tmp_path / ".venv").mkdir()
    write(tmp_path / ".venv" / "hidden.py", old)
    write(tmp_path / "notes.txt", old)
    code, report = run_json([tmp_path], capsys)
    assert code == 1
    assert [Path(f["path"]).name for f in report["findings"]] == ["deep.py"]


# --------------------------------------------------------------------------- what counts


@pytest.mark.parametrize(
    "imports, owner",
    [
        ("import flax.linen as nn", "nn.LSTMCell"),
        ("from flax import linen as nn", "nn.OptimizedLSTMCell"),
        ("from flax import linen", "linen.GRUCell"),
        ("import flax", "flax.linen.OptimizedLSTMCell"),
        ("import flax.linen", "flax.linen.LSTMCell"),
        ("from flax.linen import LSTMCell", "LSTMCell"),
        ("from flax.linen import GRUCell as Cell", "Cell"),
        ("from flax.linen.recurrent import GRUCell", "GRUCell"),
        ("from flax.linen import *", "LSTMCell"),
        ("import flax.linen as nn\nCell = nn.GRUCell", "Cell"),
        ("", "nn.LSTMCell"),  # `nn` never bound: read as flax.linen
        ("from rnnlib import legacy", "legacy.LSTMCell"),
        ("import rnnlib.legacy", "rnnlib.legacy.GRUCell"),
        ("from rnnlib.legacy import OptimizedLSTMCell", "OptimizedLSTMCell"),
    ],
)
def test_static_initialize_carry_is_found_for_every_import_spelling(
    imports, owner, tmp_path, capsys
):
    source = f"{imports}\ncarry = {owner}.initialize_carry(rng, (16,), 64)\n"
    code, findings = scan_snippet(tmp_path, capsys, source)
    line, col = locate(source, f"{owner}.initialize_carry")
    assert code == 1
    assert [(f["code"], f["line"], f["col"]) for f in findings] == [("MIG001", line, col)]
    assert findings[0]["fixable"] == ("legacy" not in imports)


@pytest.mark.parametrize(
    "source",
    [
        "import flax.linen as nn\ncarry = nn.LSTMCell(features=4).initialize_carry(rng, x.shape)\n",
        "import flax.linen as nn\ncell = nn.GRUCell(features=4)\n"
        "h = cell.initialize_carry(rng, s)\n",
        "import flax.linen as nn\nh = self.cell.initialize_carry(rng, s)\n",
        "import flax.linen as nn\nlstm = nn.RNN(nn.LSTMCell(64), return_carry=True)\n",
        "import flax.linen as nn\nlstm = nn.RNN(nn.LSTMCell(features=64))\n",
        "import torch.nn as nn\ncell = nn.LSTMCell()\n"
        "h = nn.LSTMCell.initialize_carry(r, (1,), 2)\n",
        "class LSTMCell:\n    pass\n\ncell = LSTMCell()\n",
        "import flax.linen as nn\nconv = nn.ConvLSTMCell(features=4, kernel_size=(3, 3))\n",
        "import flax.linen as nn\nScan = nn.scan(nn.LSTMCell, variable_broadcast='params')\n",
    ],
    ids=[
        "instance-call",
        "instance-variable",
        "attribute",
        "positional-features",
        "keyword-features",
        "torch-nn",
        "own-class",
        "convlstm-with-features",
        "bare-scan",
    ],
)
def test_current_api_and_non_flax_code_is_not_reported(source, tmp_path, capsys):
    code, findings = scan_snippet(tmp_path, capsys, source)
    assert (code, findings) == (0, [])


@pytest.mark.parametrize("cell", ["LSTMCell", "GRUCell", "OptimizedLSTMCell"])
def test_cell_built_without_features_is_reported_and_not_fixable_on_its_own(cell, tmp_path, capsys):
    source = f"import flax.linen as nn\nc = nn.{cell}(name='rnn')\n"
    code, findings = scan_snippet(tmp_path, capsys, source)
    assert [(f["code"], f["line"], f["col"], f["fixable"]) for f in findings] == [
        ("MIG003", 2, 5, False)
    ]
    assert f"nn.{cell}(features=<hidden size>, name='rnn')" in findings[0]["suggestion"]


def test_positional_cell_size_is_reported_because_it_would_now_be_time_major(tmp_path, capsys):
    source = "import flax.linen as nn\nrnn = nn.RNN(nn.GRUCell(), 32)\n"
    code, findings = scan_snippet(tmp_path, capsys, source)
    assert [f["code"] for f in findings] == ["MIG002", "MIG003"]
    assert "time_major" in findings[0]["message"]
    assert findings[0]["suggestion"] == "nn.RNN(nn.GRUCell(features=32))"


SST2_STYLE = """import functools

import jax
import flax.linen as nn


class SimpleLSTM(nn.Module):
    @functools.partial(
        nn.transforms.scan,
        variable_broadcast="params",
        in_axes=0,
        out_axes=0,
        split_rngs={"params": False},
    )
    @nn.compact
    def __call__(self, carry, x):
        return nn.OptimizedLSTMCell()(carry, x)

    @staticmethod
    def initialize_carry(batch_dims, hidden_size):
        return nn.OptimizedLSTMCell.initialize_carry(
            jax.random.PRNGKey(0), batch_dims, hidden_size)
"""


def test_scan_decorator_idiom_with_static_initialize_carry_is_reported(tmp_path, capsys):
    code, findings = scan_snippet(tmp_path, capsys, SST2_STYLE)
    got = [(f["code"], f["line"], f["col"]) for f in findings]
    assert got == [
        ("MIG004", *locate(SST2_STYLE, "class SimpleLSTM")),
        ("MIG003", *locate(SST2_STYLE, "nn.OptimizedLSTMCell()")),
        ("MIG001", *locate(SST2_STYLE, "nn.OptimizedLSTMCell.initialize_carry")),
    ]
    # in_axes=0 scans over the leading axis, which nn.RNN calls time_major.
    assert "time_major=True" in findings[0]["suggestion"]


def test_scan_idiom_suggestion_builds_the_carry_cell_as_the_fix_does(tmp_path, capsys):
    path = write(tmp_path / "sst2.py", SST2_STYLE)
    _, report = run_json([path, "--fix"], capsys)
    idiom, _, static_call = report["findings"]
    assert (idiom["code"], static_call["code"]) == ("MIG004", "MIG001") and static_call["fixed"]
    # The fixer builds the class's carry cell with parent=None ...
    assert "nn.OptimizedLSTMCell(features=hidden_size, parent=None).initialize_carry(" in (
        path.read_text()
    )
    # ... so the idiom's suggestion for building a carry says the same, and why.
    suggestion = idiom["suggestion"]
    # The width is named as the wrapper names it: the size its initialize_carry is given.
    width = "<the hidden_size given to SimpleLSTM.initialize_carry>"
    assert f"call nn.OptimizedLSTMCell(features={width}, parent=None).initialize_carry(" in (
        suggestion
    )
    why = suggestion.split("parent=None keeps", 1)[1]
    assert "submodule" in why and "parameter names" in why
    # The cell nn.RNN scans must stay a submodule (its parameters live there): no parent=None.
    assert suggestion.startswith(
        f"nn.RNN(nn.OptimizedLSTMCell(features={width}), time_major=True) scans"
    )
    # nn.RNN is no drop-in replacement for a step that resets the carry: the advice says so.
    assert "resets" in suggestion and idiom["severity"] == "advice"


def test_scan_over_cell_without_class_level_initialize_carry_is_not_the_idiom(tmp_path, capsys):
    source = SST2_STYLE.replace("    @staticmethod\n", "")
    _, findings = scan_snippet(tmp_path, capsys, source)
    assert "MIG004" not in [f["code"] for f in findings]


# --------------------------------------------------------------------------- exit codes, errors


def test_exit_code_is_zero_for_clean_input(capsys):
    assert run_main([CORPUS / NEW_API], capsys)[0] == 0


def test_exit_code_is_one_when_old_api_is_found(capsys):
    assert run_main([CORPUS / GRU_LM], capsys)[0] == 1


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("broken.py", "import flax.linen as nn\ndef f(:\n", "cannot parse"),
        ("broken.ipynb", '{"cells": [', "invalid JSON"),
        ("old.ipynb", '{"worksheets": [], "nbformat": 3}', "nbformat 4"),
        ("latin.py", None, "cannot read"),
    ],
)
def test_unreadable_input_exits_2_and_the_other_files_are_still_scanned(
    name, content, message, tmp_path, capsys
):
    bad = tmp_path / name
    if content is None:
        bad.write_bytes(b"x = '\xe9'\n")  # Latin-1 bytes without a coding declaration
    else:
        write(bad, content)
    shutil.copy(CORPUS / GRU_LM, tmp_path / "z_old.py")
    code, report = run_json([bad, tmp_path / "z_old.py"], capsys)
    assert code == 2
    assert [e["path"] for e in report["errors"]] == [str(bad)]
    assert message in report["errors"][0]["message"]
    assert {f["path"] for f in report["findings"]} == {str(tmp_path / "z_old.py")}


def test_missing_path_is_reported_on_stderr_and_exits_2(tmp_path, capsys):
    code, out, err = run_main([tmp_path / "nope.py", CORPUS / NEW_API], capsys)
    assert code == 2
    assert f"{tmp_path / 'nope.py'}: error: no such file or directory" in err


def test_syntax_error_is_reported_with_its_line(tmp_path, capsys):
    bad = write(tmp_path / "bad.py", "x = 1\ny = (\n")
    code, report = run_json([bad], capsys)
    assert code == 2 and report["errors"][0]["line"] == 2


def test_notebook_cell_that_does_not_parse_is_an_error_naming_the_cell(tmp_path, capsys):
    nb = json.loads((CORPUS / NOTEBOOK).read_text())
    nb["cells"][1]["source"] = ["def broken(:\n"]
    path = write(tmp_path / "nb.ipynb", json.dumps(nb, indent=1, sort_keys=True) + "\n")
    code, report = run_json([path], capsys)
    assert code == 2
    assert [(e["cell"], e["line"]) for e in report["errors"]] == [(2, 1)]
    assert len(report["findings"]) == len(EXPECTED[NOTEBOOK])  # the other cells still count


# --------------------------------------------------------------------------- --fix


def without_migrate_comments(text):
    return "".join(
        line for line in text.splitlines(True) if not line.lstrip().startswith("# rnnlib.migrate:")
    )


def test_fix_rewrites_the_gru_model_and_leaves_every_other_byte_alone(tmp_path, capsys):
    corpus = copy_corpus(tmp_path)
    path = corpus / GRU_LM
    original = path.read_text()
    code, report = run_json([path, "--fix"], capsys)
    assert code == 0 and report["fully_fixed_files"] == [str(path)]
    assert all(f["fixed"] for f in report["findings"])
    fixed = path.read_text()
    expected = original.replace(
        "nn.RNN(nn.GRUCell(), cell_size=HIDDEN_SIZE, return_carry=True)",
        "nn.RNN(nn.GRUCell(features=HIDDEN_SIZE), return_carry=True)",
    ).replace(
        "nn.GRUCell.initialize_carry(jax.random.PRNGKey(1), (BATCH,), HIDDEN_SIZE)",
        "nn.GRUCell(features=HIDDEN_SIZE, parent=None)"
        ".initialize_carry(jax.random.PRNGKey(1), (BATCH, 1))",
    )
    assert expected != original
    assert without_migrate_comments(fixed) == expected
    # The placeholder is explained right above the rewritten statement.
    lines = fixed.splitlines()
    at = next(
        i for i, line in enumerate(lines) if "nn.GRUCell(features=HIDDEN_SIZE, parent" in line
    )
    assert lines[at - 1].startswith("# rnnlib.migrate:") and "input channels" in lines[at - 1]


def test_fix_of_multiline_static_call_keeps_its_layout(tmp_path, capsys):
    corpus = copy_corpus(tmp_path)
    path = corpus / BILSTM
    original = path.read_text()
    code, report = run_json([path, "--fix"], capsys)
    # Nothing is left: the scan wrapper's advice goes with the old carry it was about.
    assert code == 0 and report["fully_fixed_files"] == [str(path)]
    assert [f["code"] for f in report["findings"] if not f["fixed"]] == []
    assert [f["code"] for f in report["findings"] if f["code"] == "MIG004"] == ["MIG004"]
    expected = original.replace(
        "nn.OptimizedLSTMCell.initialize_carry(\n"
        "            jax.random.PRNGKey(0), batch_dims, hidden_size\n",
        "nn.OptimizedLSTMCell(features=hidden_size, parent=None).initialize_carry(\n"
        "            jax.random.PRNGKey(0), batch_dims + (1,)\n",
    ).replace(
        # The scanned class is given the width of the carry it is called with.
        "return ScanLSTM()(carry, x)",
        "return ScanLSTM(features=carry[0].shape[-1])(carry, x)",
    )
    assert expected != original
    assert without_migrate_comments(path.read_text()) == expected
    # The fixed file runs on the current API, so even --strict passes on it.
    assert run_json([path, "--strict"], capsys)[0] == 0


def test_fix_lists_what_it_could_not_fix_and_why(tmp_path, capsys):
    corpus = copy_corpus(tmp_path)
    code, out, _ = run_main([corpus, "--fix"], capsys)
    assert code == 1
    conv = corpus / CONVLSTM
    line, col = locate((CORPUS / CONVLSTM).read_text(), "nn.ConvLSTMCell.initialize_carry(")
    report = out.split(f"{conv}:{line}:{col}: MIG001 ", 1)[1]
    assert report.splitlines()[0].endswith("[not fixed]")
    assert "not automatic:" in report and "kernel_size" in report.split("\n", 3)[2]
    # The ConvLSTM RNN's cell_size was dropped; the static ConvLSTM call is untouched.
    text = conv.read_text()
    code_part = text[text.index("\nimport ") :]
    assert "cell_size" not in code_part and "nn.ConvLSTMCell.initialize_carry(" in code_part
    unfixed = [(Path(f["path"]).name, f["code"]) for f in run_json([corpus], capsys)[1]["findings"]]
    assert sorted(unfixed) == [
        ("convlstm_layers.py", "MIG007"),
        (CONVLSTM, "MIG001"),
        ("held_class.py", "MIG001"),
        ("scan_custom_cell.py", "MIG006"),  # its old initialize_carry, advice
        ("stacked_cells.py", "MIG003"),
        ("stacked_cells.py", "MIG008"),
    ]


@pytest.mark.parametrize(
    "source, reason_part",
    [
        (
            "from rnnlib import legacy\nc = legacy.LSTMCell.initialize_carry(k, (2,), 3)\n",
            "rnnlib.legacy",
        ),
        (  # a carry that may be float64 (jax_enable_x64 set by a flag)
            "import flax.linen as nn\njax.config.update('jax_enable_x64', FLAGS.x64)\n"
            "c = nn.LSTMCell.initialize_carry(k, (2,), 3)\n",
            "jax_enable_x64 on",
        ),
        ("import flax.linen as nn\nc = nn.GRUCell.initialize_carry(k, (2,), (3,))\n", "not an int"),
        (
            "import flax.linen as nn\nc = nn.GRUCell.initialize_carry(k, x.shape)\n",
            "old (rng, batch_dims, size)",
        ),
        (
            "import flax.linen as nn\nc = nn.GRUCell.initialize_carry(*args)\n",
            "old (rng, batch_dims, size)",
        ),
        ("import flax.linen as nn\nr = nn.RNN(cell, cell_size=8)\n", "built elsewhere"),
        ("import flax.linen as nn\nr = nn.RNN(nn.LSTMCell(), 8, True)\n", "positional"),
        ("import flax.linen as nn\nr = nn.RNN(nn.LSTMCell(features=H), cell_size=8)\n", "agrees"),
        (
            "import flax.linen as nn\nr = nn.RNN(nn.LSTMCell(),  # the cell\n  cell_size=8)\n",
            "comment",
        ),
    ],
    ids=[
        "legacy",
        "x64-by-a-flag",
        "tuple-size",
        "new-style-on-class",
        "star-args",
        "cell-variable",
        "positional-after-cell-size",
        "features-not-a-literal",
        "comment",
    ],
)
def test_ambiguous_cases_are_left_alone_with_a_reason(source, reason_part, tmp_path, capsys):
    path = write(tmp_path / "case.py", source)
    code, report = run_json([path, "--fix"], capsys)
    assert code == 1 and report["fixed_files"] == []
    assert path.read_text() == source
    first = report["findings"][0]
    assert first["fixable"] is False and first["fixed"] is False
    assert reason_part in first["reason"]


@pytest.mark.parametrize(
    "rnn, size, features",
    [
        ("nn.RNN(nn.GRUCell(features=8), cell_size=16)", "16", "8"),
        ("nn.RNN(nn.LSTMCell(4), 12)", "12", "4"),
        ("nn.RNN(cell=nn.GRUCell(features=32), cell_size=(64))", "64", "32"),
    ],
    ids=["keyword", "positional", "cell-keyword"],
)
def test_literal_cell_size_that_disagrees_with_features_is_named_and_left_alone(
    rnn, size, features, tmp_path, capsys
):
    source = f"import flax.linen as nn\nr = {rnn}\n"
    path = write(tmp_path / "case.py", source)
    code, report = run_json([path, "--fix"], capsys)
    assert code == 1 and path.read_text() == source
    [finding] = report["findings"]
    assert finding["code"] == "MIG002" and not finding["fixable"] and not finding["fixed"]
    reason = finding["reason"]
    # Both widths are literals, so the reason says they differ (not that it "cannot tell").
    assert f"cell_size is {size}," in reason and f"features is {features};" in reason
    assert "will not choose between them" in reason and "cannot tell" not in reason


def test_fix_never_touches_a_file_that_does_not_parse(tmp_path, capsys):
    source = "import flax.linen as nn\nc = nn.LSTMCell.initialize_carry(k, (2,), 3)\nif:\n"
    path = write(tmp_path / "broken.py", source)
    stat = path.stat()
    code, report = run_json([path, "--fix"], capsys)
    assert code == 2 and report["findings"] == [] and report["fixed_files"] == []
    assert path.read_bytes() == source.encode() and path.stat().st_mtime_ns == stat.st_mtime_ns


def test_fix_keeps_crlf_line_endings_encoding_and_unicode_bytes(tmp_path, capsys):
    source = (
        "# -*- coding: latin-1 -*-\r\nimport flax.linen as nn\r\n"
        "label = 'caf\u00e9'\r\n"
        "carry = nn.LSTMCell.initialize_carry(key, (2,), 3)  # \u00e9t\u00e9\r\n"
        "rnn = nn.RNN(nn.LSTMCell(), cell_size=3)\r\n"
    )
    path = write(tmp_path / "crlf.py", source, encoding="latin-1")
    code, _ = run_json([path, "--fix"], capsys)
    assert code == 0
    fixed = path.read_bytes().decode("latin-1")
    lines = fixed.split("\r\n")
    assert "\n" not in "".join(lines)  # every line still ends in CRLF
    expected = source.replace(
        "nn.LSTMCell.initialize_carry(key, (2,), 3)",
        "nn.LSTMCell(features=3, parent=None).initialize_carry(key, (2, 1))",
    ).replace("nn.RNN(nn.LSTMCell(), cell_size=3)", "nn.RNN(nn.LSTMCell(features=3))")
    assert (
        "".join(line + "\r\n" for line in lines[:-1] if not line.startswith("# rnnlib.migrate:"))
        == expected
    )


@pytest.mark.parametrize(
    "old, new",
    [
        (
            "nn.LSTMCell.initialize_carry(k, (4,), 8)",
            "nn.LSTMCell(features=8, parent=None).initialize_carry(k, (4, 1))",
        ),
        (
            "nn.LSTMCell.initialize_carry(k, (), 8)",
            "nn.LSTMCell(features=8, parent=None).initialize_carry(k, (1,))",
        ),
        (
            "nn.GRUCell.initialize_carry(k, x.shape[:-1], 8)",
            "nn.GRUCell(features=8, parent=None).initialize_carry(k, x.shape[:-1] + (1,))",
        ),
        (
            "nn.GRUCell.initialize_carry(k, a + b, 8)",
            "nn.GRUCell(features=8, parent=None).initialize_carry(k, a + b + (1,))",
        ),
        (
            "nn.GRUCell.initialize_carry(k, (*b,), h * 2)",
            "nn.GRUCell(features=h * 2, parent=None).initialize_carry(k, (*b, 1))",
        ),
        (
            "nn.LSTMCell.initialize_carry(rng=k, size=8, batch_dims=(2,))",
            "nn.LSTMCell(features=8, parent=None).initialize_carry(rng=k, input_shape=(2, 1))",
        ),
        (
            "nn.LSTMCell.initialize_carry(k, (2,), 8, nn.initializers.normal(0.1))",
            "nn.LSTMCell(features=8, carry_init=nn.initializers.normal(0.1), parent=None)"
            ".initialize_carry(k, (2, 1))",
        ),
        ("nn.RNN(nn.GRUCell(), cell_size=8)", "nn.RNN(nn.GRUCell(features=8))"),
        ("nn.RNN(cell_size=8, cell=nn.GRUCell())", "nn.RNN(cell=nn.GRUCell(features=8))"),
        ("nn.RNN(nn.GRUCell(), cell_size=(8))", "nn.RNN(nn.GRUCell(features=8))"),
        ("nn.RNN(nn.GRUCell(), 8)", "nn.RNN(nn.GRUCell(features=8))"),
        ("nn.RNN(nn.LSTMCell(features=8), cell_size=8)", "nn.RNN(nn.LSTMCell(features=8))"),
        (
            "nn.RNN(\n    nn.LSTMCell(),\n    cell_size=8,\n)",
            "nn.RNN(\n    nn.LSTMCell(features=8),\n)",
        ),
    ],
)
def test_fix_rewrites_each_unambiguous_spelling(old, new, tmp_path, capsys):
    source = f"import flax.linen as nn\n\ny = {old}\n"
    path = write(tmp_path / "case.py", source)
    code, report = run_json([path, "--fix"], capsys)
    assert code == 0, report
    assert without_migrate_comments(path.read_text()) == f"import flax.linen as nn\n\ny = {new}\n"


def test_fix_is_idempotent(tmp_path, capsys):
    corpus = copy_corpus(tmp_path)
    run_main([corpus, "--fix"], capsys)
    before = {p: p.read_bytes() for p in corpus.iterdir()}
    code, report = run_json([corpus, "--fix"], capsys)
    assert report["fixed_files"] == [] and code == 1
    assert {p: p.read_bytes() for p in corpus.iterdir()} == before


# --------------------------------------------------------------------------- notebooks


def notebook(cells_source, dumps=lambda nb: json.dumps(nb, indent=1, sort_keys=True) + "\n"):
    cells = [{"cell_type": "markdown", "metadata": {}, "source": ["# Title \u2014 old API\n"]}]
    for src in cells_source:
        cells.append(
            {
                "cell_type": "code",
                "execution_count": None,
                "metadata": {},
                "outputs": [],
                "source": src.splitlines(True),
            }
        )
    nb = {
        "cells": cells,
        "metadata": {"language_info": {"name": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return dumps(nb)


def test_notebook_fix_keeps_valid_json_and_changes_only_the_code_cells(tmp_path, capsys):
    corpus = copy_corpus(tmp_path)
    path = corpus / NOTEBOOK
    before = json.loads(path.read_text())
    code, report = run_json([path, "--fix"], capsys)
    assert code == 0 and report["fully_fixed_files"] == [str(path)]
    after = json.loads(path.read_text())
    assert len(after["cells"]) == len(before["cells"])
    for old, new in zip(before["cells"], after["cells"]):
        if old["cell_type"] != "code" or "".join(old["source"]) == "".join(new["source"]):
            assert new == old
        else:
            assert {k: v for k, v in new.items() if k != "source"} == {
                k: v for k, v in old.items() if k != "source"
            }
            assert all(line.endswith("\n") for line in new["source"][:-1])
    # Written back in nbformat's own layout, so the diff is only the edited source lines.
    assert (
        path.read_text() == json.dumps(after, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    )


@pytest.mark.pinned_env
def test_fixed_notebook_is_still_valid_nbformat(tmp_path, capsys):
    nbformat = pytest.importorskip("nbformat")
    corpus = copy_corpus(tmp_path)
    run_main([corpus / NOTEBOOK, "--fix"], capsys)
    nbformat.validate(nbformat.read(str(corpus / NOTEBOOK), as_version=4))


def test_notebook_magics_are_skipped_and_kept_by_the_fixer(tmp_path, capsys):
    cell = "%matplotlib inline\n!echo hi\nc = nn.LSTMCell.initialize_carry(k, (2,), 3)\n"
    path = write(tmp_path / "m.ipynb", notebook(["from flax import linen as nn\n", cell]))
    code, report = run_json([path], capsys)
    assert code == 1 and [(f["cell"], f["line"]) for f in report["findings"]] == [(3, 3)]
    code, _ = run_json([path, "--fix"], capsys)
    source = "".join(json.loads(path.read_text())["cells"][2]["source"])
    assert source.startswith("%matplotlib inline\n!echo hi\n")
    assert "nn.LSTMCell(features=3, parent=None).initialize_carry(k, (2, 1))" in source


@pytest.mark.parametrize(
    "dumps",
    [lambda nb: json.dumps(nb, indent=2), lambda nb: json.dumps(nb, indent=4, sort_keys=True)],
    ids=["indent-2-unsorted", "indent-4-no-newline"],
)
def test_notebook_fix_keeps_the_json_layout_it_read(dumps, tmp_path, capsys):
    path = write(
        tmp_path / "n.ipynb",
        notebook(["import flax.linen as nn\nh = nn.GRUCell.initialize_carry(k, (2,), 3)\n"], dumps),
    )
    code, _ = run_json([path, "--fix"], capsys)
    assert code == 0
    assert path.read_text() == dumps(json.loads(path.read_text()))


def test_notebook_with_a_layout_it_cannot_reproduce_is_not_rewritten(tmp_path, capsys):
    text = notebook(["import flax.linen as nn\nh = nn.GRUCell.initialize_carry(k, (2,), 3)\n"])
    text = text.replace('"nbformat": 4', '"nbformat":   4')
    path = write(tmp_path / "odd.ipynb", text)
    code, report = run_json([path, "--fix"], capsys)
    assert code == 1 and path.read_text() == text
    assert "layout" in report["findings"][0]["reason"]


# --------------------------------------------------------------------------- running the result


CARRY_IN_COMPACT = """import jax
import jax.numpy as jnp
import flax.linen as nn


class Model(nn.Module):
    @staticmethod
    def initialize_carry(batch_dims, size):
        return nn.{cell}.initialize_carry(jax.random.PRNGKey(0), batch_dims, size)

    @nn.compact
    def __call__(self, x):
        carry = Model.initialize_carry(x.shape[:1], 4)
        y = nn.RNN(nn.{cell}(features=4))(x, initial_carry=carry)
        return nn.Dense(2)(y)
"""

NO_CARRY_CELL = """import jax.numpy as jnp
import flax.linen as nn


class Model(nn.Module):
    @nn.compact
    def __call__(self, x):
        y = nn.RNN(nn.{cell}(features=4))(x)  # RNN's own zero carry: no cell built for it
        return nn.Dense(2)(y)
"""


def param_paths(source):
    """The parameter paths (with shapes) of `Model` in `source`, traced under current Flax."""
    namespace = {}
    exec(compile(source, "<model>", "exec"), namespace)
    x = jax.numpy.zeros((3, 5, 2))
    shapes = jax.eval_shape(namespace["Model"]().init, jax.random.PRNGKey(0), x)["params"]
    flat = jax.tree_util.tree_flatten_with_path(shapes)[0]
    return {jax.tree_util.keystr(path): leaf.shape for path, leaf in flat}


@pytest.mark.parametrize("cell", ["LSTMCell", "OptimizedLSTMCell", "GRUCell"])
def test_rewrite_inside_a_compact_method_adds_no_submodule_and_keeps_auto_names(
    cell, tmp_path, capsys
):
    path = write(tmp_path / "model.py", CARRY_IN_COMPACT.format(cell=cell))
    code, report = run_json([path, "--fix"], capsys)
    assert code == 0 and report["fully_fixed_files"] == [str(path)]
    fixed = path.read_text()
    assert f"nn.{cell}(features=size, parent=None).initialize_carry(" in fixed
    reference = param_paths(NO_CARRY_CELL.format(cell=cell))
    assert any(f"['{cell}_0']" in p for p in reference)  # the RNN's cell is auto-named
    # The rewritten carry call builds a cell but adds nothing to the tree: the RNN's cell
    # keeps the name it has when no carry cell is built at all.
    assert param_paths(fixed) == reference
    # Without parent=None the carry cell would bind to Model and take `{cell}_0` first,
    # moving the RNN's parameters to `{cell}_1`: an old checkpoint would no longer load.
    bound = param_paths(fixed.replace(", parent=None", ""))
    assert bound != reference and any(f"['{cell}_1']" in p for p in bound)


def test_suggestion_says_why_flax_cells_get_parent_none_and_legacy_ones_do_not(tmp_path, capsys):
    source = (
        "import flax.linen as nn\nfrom rnnlib import legacy\n"
        "a = nn.GRUCell.initialize_carry(k, (2,), 3)\n"
        "b = legacy.GRUCell.initialize_carry(k, (2,), 3)\n"
        "c = nn.ConvLSTMCell.initialize_carry(k, (2,), (5, 3))\n"
    )
    _, findings = scan_snippet(tmp_path, capsys, source)
    flax_dense, legacy_dense, conv = (f["suggestion"] for f in findings)
    assert "nn.GRUCell(features=3, parent=None).initialize_carry(k, (2, <input channels>))" in (
        flax_dense
    )
    assert "parent=None" not in legacy_dense and not findings[1]["fixable"]
    assert "nn.ConvLSTMCell(features=3, kernel_size=(<k>,), parent=None)" in conv
    for suggestion in (flax_dense, conv):
        why = suggestion.split("parent=None keeps", 1)[1]
        assert "submodule" in why and "parameter names" in why


@pytest.mark.parametrize(
    "imports, old, new",
    [
        (
            "from rnnlib import legacy",
            "legacy.LSTMCell.initialize_carry(k, (2,), 3)",
            "rnnlib.LSTMCell(features=3).initialize_carry(k, (2, <input channels>))",
        ),
        (
            "import rnnlib.legacy",
            "rnnlib.legacy.GRUCell.initialize_carry(k, (2,), 3)",
            "rnnlib.GRUCell(features=3).initialize_carry(k, (2, <input channels>))",
        ),
        (
            "from rnnlib.legacy import OptimizedLSTMCell",
            "OptimizedLSTMCell.initialize_carry(k, (2,), 3)",
            "rnnlib.OptimizedLSTMCell(features=3).initialize_carry(k, (2, <input channels>))",
        ),
        (
            "import rnnlib.legacy as old",
            "old.GRUCell.initialize_carry(k, x.shape)",
            "rnnlib.GRUCell(features=<features>).initialize_carry(rng, <input shape>)",
        ),
        (
            "from rnnlib import legacy",
            "legacy.ConvLSTMCell.initialize_carry(k, (2,), (5, 3))",
            "rnnlib.ConvLSTMCell(features=3, kernel_size=(<k>,)).initialize_carry("
            "k, (2, 5, <input channels>))",
        ),
    ],
    ids=["legacy-attribute", "rnnlib-legacy-attribute", "from-import", "alias-bad-args", "conv"],
)
def test_legacy_static_call_is_pointed_at_the_current_rnnlib_cell(
    imports, old, new, tmp_path, capsys
):
    source = f"{imports}\ncarry = {old}\n"
    _, findings = scan_snippet(tmp_path, capsys, source)
    [finding] = findings
    assert finding["code"] == "MIG001" and not finding["fixable"]
    # The new call is rnnlib's current API, never a legacy class (which takes no features),
    # and rnnlib's cells are plain dataclasses, with no linen parent to set.
    assert finding["suggestion"].startswith(new)
    assert "legacy" not in finding["suggestion"] and "parent=None" not in finding["suggestion"]
    # The fixer never edits legacy code, so the suggestion does not say what --fix writes.
    assert "--fix" not in finding["suggestion"]


@pytest.mark.parametrize("cell", ["LSTMCell", "OptimizedLSTMCell", "GRUCell"])
def test_legacy_suggestion_runs_and_gives_the_legacy_carry(cell, tmp_path, capsys):
    source = (
        "import jax\nfrom rnnlib import legacy\n"
        f"carry = legacy.{cell}.initialize_carry(k, (2, 3), 5, jax.nn.initializers.normal(0.5))\n"
    )
    _, findings = scan_snippet(tmp_path, capsys, source)
    [finding] = findings
    suggested = finding["suggestion"].split("  #", 1)[0].replace("<input channels>", "7")
    key = jax.random.PRNGKey(3)
    new = eval(suggested, {"rnnlib": rnnlib, "jax": jax, "k": key})
    with pytest.warns(DeprecationWarning):
        old = getattr(legacy, cell).initialize_carry(key, (2, 3), 5, nn.initializers.normal(0.5))
    # The same initializer drawn with the same key: the same computation, the same bits.
    assert_identical(new, old)


@pytest.mark.parametrize(
    "imports, rnn, cell",
    [
        ("from rnnlib import legacy", "legacy.RNN", "legacy.LSTMCell"),
        ("import rnnlib.legacy", "rnnlib.legacy.RNN", "rnnlib.legacy.GRUCell"),
        ("from rnnlib.legacy import RNN, OptimizedLSTMCell", "RNN", "OptimizedLSTMCell"),
        ("import rnnlib.legacy as old", "old.RNN", "old.GRUCell"),
    ],
    ids=["legacy-attribute", "rnnlib-legacy-attribute", "from-import", "alias"],
)
@pytest.mark.parametrize("size", ["cell_size=4", "4"], ids=["keyword", "positional"])
def test_legacy_rnn_and_cell_suggestions_name_rnnlib_classes(
    imports, rnn, cell, size, tmp_path, capsys
):
    source = f"{imports}\nlayer = {rnn}({cell}(), {size}, return_carry=True)\n"
    _, findings = scan_snippet(tmp_path, capsys, source)
    rnn_finding, cell_finding = findings
    assert (rnn_finding["code"], cell_finding["code"]) == ("MIG002", "MIG003")
    assert not rnn_finding["fixable"] and not cell_finding["fixable"]
    cell_name = cell.rsplit(".", 1)[-1]
    # A legacy class takes no features, so the new call is on rnnlib's own classes.
    for finding in findings:
        assert "legacy" not in finding["suggestion"]
    assert rnn_finding["suggestion"] == (
        f"rnnlib.RNN(rnnlib.{cell_name}(features=4), return_carry=True)"
    )
    assert cell_finding["suggestion"].startswith(f"rnnlib.{cell_name}(features=")
    # The suggested RNN builds, and is rnnlib's current RNN over a cell of width 4.
    layer = eval(rnn_finding["suggestion"], {"rnnlib": rnnlib})
    assert isinstance(layer, rnnlib.RNN) and layer.return_carry
    assert type(layer.cell) is getattr(rnnlib, cell_name) and layer.cell.features == 4
    with pytest.raises(TypeError):
        getattr(legacy, cell_name)(features=4)


def test_legacy_rnn_over_a_cell_built_elsewhere_points_at_rnnlib(tmp_path, capsys):
    source = "from rnnlib import legacy\nlayer = legacy.RNN(cell, cell_size=4)\n"
    _, [finding] = scan_snippet(tmp_path, capsys, source)
    assert finding["code"] == "MIG002"
    assert finding["suggestion"].startswith("rnnlib.RNN(cell)")
    assert "legacy" not in finding["suggestion"] and "features=4" in finding["suggestion"]


SCAN_WRAPPER = """import jax
import flax.linen as nn


class Encoder(nn.Module):
    @nn.compact
    def __call__(self, carry, x):
        Scan = nn.scan(
            nn.LSTMCell, variable_broadcast="params", split_rngs={{"params": False}}{axes}
        )
        return Scan()(carry, x)

    @staticmethod
    def initialize_carry(batch_dims, size):
        return nn.LSTMCell.initialize_carry(jax.random.PRNGKey(0), batch_dims, size)
"""

SCAN_DECORATOR = """import functools
import flax.linen as nn


class Encoder(nn.Module):
    @functools.partial(
        nn.scan, variable_broadcast="params", split_rngs={{"params": False}}{axes}
    )
    @nn.compact
    def __call__(self, carry, x):
        return nn.GRUCell()(carry, x)

    @classmethod
    def initialize_carry(cls, batch_dims, size):
        return nn.GRUCell.initialize_carry(None, batch_dims, size)
"""


@pytest.mark.parametrize("template", [SCAN_WRAPPER, SCAN_DECORATOR], ids=["call", "decorator"])
@pytest.mark.parametrize("in_axes", [None, 0, 1], ids=["default", "axis0", "axis1"])
def test_scan_idiom_suggestion_takes_one_input_step_along_the_scanned_axis(
    template, in_axes, tmp_path, capsys
):
    axes = "" if in_axes is None else f", in_axes={in_axes}"
    _, findings = scan_snippet(tmp_path, capsys, template.format(axes=axes))
    [suggestion] = [f["suggestion"] for f in findings if f["code"] == "MIG004"]
    # The axis nn.scan walks when in_axes is not written is Flax's own default.
    axis = inspect.signature(nn.scan).parameters["in_axes"].default if in_axes is None else in_axes
    # The carry is built from one input step: the input with the scanned axis taken away.
    x = np.zeros([(2, 3, 4)[i] for i in ((0, 1, 2) if axis == 0 else (1, 0, 2))])
    step = suggestion.split(".initialize_carry(key, ", 1)[1].split(".shape)", 1)[0]
    assert eval(step, {"x": x}).shape == np.take(x, 0, axis=axis).shape == (3, 4)
    # ... and nn.RNN is told the same layout: time_major exactly when time is axis 0.
    assert ("time_major=True" in suggestion) == (axis == 0)


def test_scan_idiom_with_unreadable_in_axes_says_both_layouts(tmp_path, capsys):
    source = SCAN_WRAPPER.format(axes=", in_axes=axes")
    _, findings = scan_snippet(tmp_path, capsys, source)
    [suggestion] = [f["suggestion"] for f in findings if f["code"] == "MIG004"]
    assert "time_major=<True if time is axis 0>" in suggestion
    assert "x[0] if time is axis 0" in suggestion and "x[:, 0] if axis 1" in suggestion


def test_fixer_claims_fully_fixed_exactly_the_files_it_leaves_without_errors(tmp_path, capsys):
    corpus = copy_corpus(tmp_path)
    _, report = run_json([corpus, "--fix"], capsys)
    # Not the ConvLSTM programs (their carries need the input's shape), the held class (a
    # caller may set another class) nor the stacked cells (their type is not in the file);
    # the scan wrapper's advice does not count.
    assert sorted(Path(p).name for p in report["fully_fixed_files"]) == sorted(
        {p.name for p in CORPUS.iterdir() if p.name in EXPECTED and EXPECTED[p.name]}
        - {CONVLSTM, "held_class.py", "stacked_cells.py", "convlstm_layers.py"}
    )


@pytest.mark.parametrize("name, shape_line", [(GRU_LM, "loss "), (NOTEBOOK, "(4, 6, 8) (2, 3, 5)")])
def test_program_claimed_fully_fixed_runs_under_current_flax(name, shape_line, tmp_path, capsys):
    corpus = copy_corpus(tmp_path)
    _, report = run_json([corpus / name, "--fix"], capsys)
    assert report["fully_fixed_files"] == [str(corpus / name)]
    proc = run_program(corpus / name, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert shape_line in proc.stdout


@pytest.mark.parametrize("name", [GRU_LM, NOTEBOOK])
def test_unfixed_corpus_program_fails_under_current_flax(name, tmp_path):
    """The corpus really is old-API code: before the fix, current Flax rejects it."""
    proc = run_program(CORPUS / name, tmp_path)
    assert proc.returncode != 0
    assert "TypeError" in proc.stderr


# --------------------------------------------------------------------------- the rewrite is exact


def old_initialize_carry(cell, rng, batch_dims, size, init_fn):
    """Flax 0.6.11's static initialize_carry, written out: LSTMs split the key, GRU does not."""
    shape = batch_dims + (size,)
    if cell == "GRUCell":
        return init_fn(rng, shape)
    key1, key2 = jax.random.split(rng)
    return init_fn(key1, shape), init_fn(key2, shape)


@pytest.mark.parametrize("cell", ["LSTMCell", "OptimizedLSTMCell", "GRUCell"])
@pytest.mark.parametrize("placeholder", [1, 7])
def test_rewritten_call_gives_the_old_carry_whatever_the_placeholder(cell, placeholder):
    rng = jax.random.PRNGKey(3)
    init = nn.initializers.normal(0.5)
    old = old_initialize_carry(cell, rng, (2, 3), 5, init)
    new = getattr(nn, cell)(features=5, carry_init=init).initialize_carry(rng, (2, 3, placeholder))
    # The same initializer drawn with the same key: the same computation, the same bits.
    assert_identical(new, old)


def test_a_flax_rnn_around_a_legacy_cell_is_shown_the_current_cell_and_left_unfixed(
    tmp_path, capsys
):
    """A legacy cell takes no features, so ``--fix`` cannot move cell_size into it: the
    suggestion builds rnnlib's current cell, and the file is left as it was."""
    source = (
        "import flax.linen as nn\nfrom rnnlib import legacy\n"
        "rnn = nn.RNN(legacy.LSTMCell(), cell_size=4)\n"
    )
    path = write(tmp_path / "mixed.py", source)
    code, report = run_json([path, "--fix"], capsys)
    findings = {f["code"]: f for f in report["findings"]}
    assert code == 1 and sorted(findings) == ["MIG002", "MIG003"]
    assert not findings["MIG002"]["fixable"] and not findings["MIG003"]["fixable"]
    assert "takes no features" in findings["MIG002"]["reason"]
    assert "rnnlib.LSTMCell(features=4)" in findings["MIG002"]["suggestion"]
    assert "cell_size" not in findings["MIG002"]["suggestion"].split("#")[0]
    assert findings["MIG003"]["suggestion"] == "rnnlib.LSTMCell(features=4)"
    assert path.read_text() == source
