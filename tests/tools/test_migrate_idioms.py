"""rnnlib.migrate on the idioms real 0.6-era code used, and on its own rule table.

Each program in tests/migrate_corpus/ named in IDIOMS runs under the real Flax 0.6.11 (the side
environment .venv-flax06, as tests/parity/test_legacy_oracle.py uses it). ``--fix`` rewrites a copy,
which must then run under the pinned current Flax and give the same parameter tree (paths and
shapes) and the same outputs from the same parameters (the programs fill every parameter with
NumPy numbers in path order, tests/migrate_corpus/_report.py, so both Flax versions start from
the same values). The snippet tests pin what each new rule reports, fixes and leaves, and that a
run exits 0 only when nothing that breaks or needs review is left.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rnnlib import migrate
from rnnlib.migrate import main
from rnnlib.migrate.rules import RULES, SEVERITIES
from tests import side_env
from tests.parity.test_legacy_oracle import ORACLE_PYTHON, require_oracle_python
from tests.tolerance import assert_close, assert_identical

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "migrate_corpus"
RUN_TIMEOUT_S = 600  # each program needs seconds; the margin is for a loaded CI machine

# Program: rounded terms per output element (tests/tolerance.py), the longest chain of sums:
# TIME steps of a dense cell (input + hidden + 1 terms) and the Dense layers after it.
IDIOMS = {
    "scan_inline.py": 4 * (3 + 5 + 1) + 6,
    "scan_setup.py": 4 * (3 + 5 + 1) + 6,
    "scan_helper.py": 4 * (3 + 6 + 1) + 4 * (6 + 6 + 1),
    "instance_carry.py": 4 * (3 + 5 + 1),
    "cell_subclass.py": 4 * (3 + 5 + 1) + 6,
    # Two GRU layers a step (3 then 5 inputs, 5 hidden) and the Dense head.
    "gru_layers.py": 4 * ((3 + 5 + 1) + (5 + 5 + 1)) + 6,
    # Six LSTM steps (2 inputs, 5 hidden), the Dense head and the sum of its 12 outputs.
    "lstm_x64.py": 6 * (2 + 5 + 1) + 6 + 12,
}


def run(python, script, cwd, report=None):
    env = side_env.environment()
    if report is not None:
        env["MIGRATE_REPORT"] = str(report)
    return subprocess.run(
        [str(python), str(script)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        cwd=cwd,
        env=env,
    )


def migrate_json(*args):
    """The command line's exit status and JSON report, run in this process (a subprocess
    would import jax again for each call; tests/tools/test_migrate.py runs the real command)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([*map(str, args), "--format", "json"])
    return code, json.loads(out.getvalue())


def run_snippet(tmp_path, capsys, source, *args, name="snippet.py"):
    path = tmp_path / name
    path.write_text(source, encoding="utf-8")
    code = main([str(path), "--format", "json", *args])
    return code, json.loads(capsys.readouterr().out), path


# --------------------------------------------------------------------------- the oracle


@pytest.mark.pinned_env
@pytest.mark.parametrize("name", sorted(IDIOMS))
def test_fixed_idiom_program_matches_the_old_program_under_flax_0_6(name, tmp_path):
    python = require_oracle_python(ORACLE_PYTHON)
    old_dir, new_dir = tmp_path / "old", tmp_path / "new"
    shutil.copytree(CORPUS, old_dir)
    shutil.copytree(CORPUS, new_dir)
    old = run(python, old_dir / name, old_dir, tmp_path / "old.npz")
    assert old.returncode == 0, old.stderr[-3000:]
    # Under current Flax the old program fails ...
    broken = run(sys.executable, old_dir / name, old_dir)
    assert broken.returncode != 0 and "Error" in broken.stderr
    # ... and the checker says it would, before fixing it completely.
    code, report = migrate_json(new_dir / name, "--fix")
    assert code == 0 and report["fully_fixed_files"] == [str(new_dir / name)], report
    new = run(sys.executable, new_dir / name, new_dir, tmp_path / "new.npz")
    assert new.returncode == 0, new.stderr[-3000:]
    assert_same_numbers(tmp_path / "old.npz", tmp_path / "new.npz", terms=IDIOMS[name])


@pytest.mark.pinned_env
def test_an_x64_carry_keeps_its_dtype_through_the_fix(tmp_path):
    """vmc_jax's case: under jax_enable_x64 the old static carry was float64 (its init_fn
    follows JAX's default float) and the scan needs it to stay so. The rewrite passes
    param_dtype=jnp.float64 to the cell that only builds the carry."""
    python = require_oracle_python(ORACLE_PYTHON)
    name = "lstm_x64.py"
    work = tmp_path / "new"
    shutil.copytree(CORPUS, work)
    old = run(python, CORPUS / name, CORPUS, tmp_path / "old.npz")
    assert old.returncode == 0 and "carry float64" in old.stdout, old.stderr[-3000:]
    code, report = migrate_json(work / name, "--fix")
    assert code == 0 and report["fully_fixed_files"] == [str(work / name)], report
    text = (work / name).read_text()
    assert text.count("param_dtype=jnp.float64, parent=None).initialize_carry(") == 2
    new = run(sys.executable, work / name, work, tmp_path / "new.npz")
    assert new.returncode == 0 and "carry float64" in new.stdout, new.stderr[-3000:]
    want, got = np.load(tmp_path / "old.npz"), np.load(tmp_path / "new.npz")
    assert {k: got[k].dtype for k in got.files} == {k: want[k].dtype for k in want.files}
    # Without param_dtype (the rewrite before issue 57) the scan stops on the carry's dtype.
    (work / name).write_text(text.replace(", param_dtype=jnp.float64", ""))
    broken = run(sys.executable, work / name, work)
    assert broken.returncode != 0 and "float32" in broken.stderr, broken.stderr[-3000:]


INIT_FN = """import functools
import jax
import jax.numpy as jnp
import flax.linen as nn

half = functools.partial(nn.initializers.constant(0.5), dtype=jnp.float32)
carry = nn.LSTMCell.initialize_carry(jax.random.PRNGKey(0), (2,), 4, init_fn=half)
ones = nn.GRUCell.initialize_carry(jax.random.PRNGKey(0), (2,), 3, lambda k, s: jnp.ones(s))
zeros = nn.LSTMCell.initialize_carry(jax.random.PRNGKey(0), (2,), 3, nn.initializers.zeros)
print("carry", carry[0].shape, carry[0].dtype, float(carry[1].sum()), float(ones.sum()))
print("zeros", zeros[0].shape, zeros[0].dtype, float(zeros[1].sum()))
"""


@pytest.mark.pinned_env
def test_init_fn_is_rewritten_so_that_it_runs_and_gives_the_old_carry(tmp_path, capsys):
    """fitvid's case: a suggestion that passed init_fn on as carry_init raised "zeros() got
    multiple values for argument 'dtype'", since the current API calls it with a dtype more.
    An init_fn that is not a Flax/JAX initializer is wrapped to be called as 0.6 called it."""
    python = require_oracle_python(ORACLE_PYTHON)
    old_path = tmp_path / "old.py"
    old_path.write_text(INIT_FN)
    old = run(python, old_path, tmp_path)
    assert old.returncode == 0, old.stderr[-3000:]
    code, report, path = run_snippet(tmp_path, capsys, INIT_FN, "--fix")
    assert code == 0 and [f["fixed"] for f in report["findings"]] == [True] * 3
    text = path.read_text()
    assert "carry_init=lambda key, shape, dtype, init_fn=half: init_fn(key, shape)" in text
    assert "carry_init=nn.initializers.zeros, parent=None" in text
    new = run(sys.executable, path, tmp_path)
    assert new.returncode == 0, new.stderr[-3000:]
    assert new.stdout == old.stdout and "carry (2, 4) float32 4.0 6.0" in new.stdout
    # What the suggestion used to say, carry_init=half, fails as the issue saw it.
    path.write_text(
        text.replace("lambda key, shape, dtype, init_fn=half: init_fn(key, shape)", "half")
    )
    broken = run(sys.executable, path, tmp_path)
    assert "multiple values for argument 'dtype'" in broken.stderr, broken.stderr[-3000:]


X64_CARRY = (
    "import jax\nimport flax.linen as nn\n{x64}\n"
    "carry = nn.LSTMCell.initialize_carry(jax.random.PRNGKey(0), (2,), 4)\n"
)


@pytest.mark.parametrize(
    "x64",
    [
        "if USE_X64:\n    jax.config.update('jax_enable_x64', True)\n",
        "jax.config.update('jax_enable_x64', FLAGS.x64)\n",
        "import os\nos.environ['JAX_ENABLE_X64'] = '1'\n",
        "import jax.numpy as jnp\nx = jnp.zeros(3, jnp.float64)\n",
    ],
    ids=["conditional", "flag", "environment", "float64"],
)
def test_a_file_that_may_run_under_x64_is_left_failing_with_the_edit(x64, tmp_path, capsys):
    source = X64_CARRY.format(x64=x64)
    code, report, path = run_snippet(tmp_path, capsys, source, "--fix")
    [finding] = report["findings"]
    assert (code, finding["code"], finding["fixed"]) == (1, "MIG001", False)
    assert "jax_enable_x64" in finding["reason"]
    # The edit to make, spelt with the file's own name for jax.numpy where it has one.
    wide = "jnp" if "import jax.numpy as jnp" in source else "jax.numpy"
    edit = f"nn.LSTMCell(features=4, param_dtype={wide}.float64, parent=None).initialize_carry("
    assert edit in finding["reason"] and "without param_dtype" in finding["reason"]
    assert path.read_text() == source
    assert run_snippet(tmp_path, capsys, source, "--strict")[0] == 1


def test_x64_turned_on_is_fixed_through_the_file_s_own_names(tmp_path, capsys):
    source = X64_CARRY.format(x64="jax.config.update('jax_enable_x64', True)\n")
    code, report, path = run_snippet(tmp_path, capsys, source, "--fix")
    assert code == 0 and [f["fixed"] for f in report["findings"]] == [True]
    assert "nn.LSTMCell(features=4, param_dtype=jax.numpy.float64, parent=None)" in (
        path.read_text()
    )
    # Without x64 in the file the rewrite stays as it was: float32, as the old carry was.
    code, report, path = run_snippet(tmp_path, capsys, X64_CARRY.format(x64=""), "--fix")
    assert code == 0 and "param_dtype" not in path.read_text()


@pytest.mark.parametrize(
    "cell, last", [("LSTMCell", "carry[0].shape[-1]"), ("GRUCell", "carry.shape[-1]")]
)
def test_a_width_the_fixer_cannot_read_gets_the_edit_to_write(cell, last, tmp_path, capsys):
    source = (
        "import flax.linen as nn\n\n"
        "class Net(nn.Module):\n"
        "    @nn.compact\n"
        "    def __call__(self, carry, x):\n"
        f"        step = nn.{cell}(name='cell')\n"
        "        return run_steps(step, carry, x)\n"
    )
    code, report, _ = run_snippet(tmp_path, capsys, source)
    [finding] = report["findings"]
    assert (code, finding["code"], finding["fixable"]) == (1, "MIG003", False)
    assert f"write nn.{cell}(features=<hidden size>, name='cell') at line 6" in finding["reason"]
    assert last in finding["reason"]


INSTANCE_X64 = (
    "import jax\nimport flax.linen as nn\n\n"
    "jax.config.update('jax_enable_x64', True)\n"
    "cell = nn.LSTMCell()\n"
    "carry = cell.initialize_carry(jax.random.PRNGKey(0), (2,), 4)\n"
    "print(carry[0].dtype, carry[0].shape)\n"
)


@pytest.mark.pinned_env
def test_an_instance_carry_under_x64_names_the_edit_that_keeps_its_dtype(tmp_path, capsys):
    # Giving the instance param_dtype=float64 would change its parameters too: the carry
    # comes from a cell of its own, and the edit says so, ready to paste.
    code, report, path = run_snippet(tmp_path, capsys, INSTANCE_X64, "--fix")
    carry = next(f for f in report["findings"] if f["code"] == "MIG007")
    assert code == 1 and not carry["fixed"] and "jax_enable_x64" in carry["reason"]
    edit = carry["reason"].rsplit("instead, ", 1)[1]
    assert edit.startswith("nn.LSTMCell(features=4, param_dtype=jax.numpy.float64, parent")
    old_line = "cell.initialize_carry(jax.random.PRNGKey(0), (2,), 4)"
    path.write_text(path.read_text().replace(old_line, edit))
    ran = run(sys.executable, path, tmp_path)
    assert ran.stdout == "float64 (2, 4)\n", ran.stderr[-3000:]
    assert migrate_json(path, "--strict")[0] == 0


@pytest.mark.pinned_env
def test_a_current_api_scan_wrapper_passes_strict_and_runs(tmp_path):
    """JaxMARL's case: an nn.scan wrapper with a static initialize_carry, written against the
    current API, got MIG004 ("the Flax 0.6 idiom") and failed --strict with nothing to change."""
    name = "scan_current_api.py"
    code, report = migrate_json(CORPUS / name, "--strict")
    assert (code, report["findings"], report["errors"]) == (0, [], [])
    ran = run(sys.executable, CORPUS / name, CORPUS)
    assert ran.returncode == 0 and "q (4, 2, 2)" in ran.stdout, ran.stderr[-3000:]


def test_the_scan_wrapper_advice_names_the_old_carry_and_goes_once_it_is_fixed(tmp_path, capsys):
    source = (
        "import flax.linen as nn\nimport jax\n\n"
        "class Wrapper(nn.Module):\n"
        "    @nn.compact\n"
        "    def __call__(self, carry, xs):\n"
        "        scan = nn.scan(nn.GRUCell, variable_broadcast='params',\n"
        "                       split_rngs={'params': False})\n"
        "        return scan(features=4)(carry, xs)\n\n"
        "    @staticmethod\n"
        "    def initialize_carry(batch):\n"
        "        return nn.GRUCell.initialize_carry(jax.random.PRNGKey(0), (batch,), 4)\n"
    )
    code, report, path = run_snippet(tmp_path, capsys, source, "--fix")
    codes = sorted((f["code"], f["fixed"]) for f in report["findings"])
    assert codes == [("MIG001", True), ("MIG004", True)]
    # The fixed file builds its carry from a configured cell: the advice is not made again.
    code, report, _ = run_snippet(tmp_path, capsys, path.read_text(), "--strict")
    assert (code, report["findings"]) == (0, [])


def assert_same_numbers(old_npz, new_npz, terms):
    """The migrated program saved the old one's parameters and, to rounding, its outputs."""
    want, got = np.load(old_npz), np.load(new_npz)
    # The fixes add no module and rename none: the same parameter paths and shapes.
    assert sorted(got.files) == sorted(want.files)
    params = sorted(k for k in want.files if k.startswith("param/"))
    assert params and any("/params/" in k for k in params)
    # Both sides filled them from the same NumPy draws: the same numbers, copied.
    assert_identical([got[k] for k in params], [want[k] for k in params])
    outputs = sorted(k for k in want.files if k.startswith("out/"))
    assert_close([got[k] for k in outputs], [want[k] for k in outputs], terms=terms)


def test_held_class_is_reported_and_its_carry_call_left_with_a_reason(tmp_path):
    shutil.copytree(CORPUS, tmp_path / "c")
    path = tmp_path / "c" / "held_class.py"
    code, report = migrate_json(path, "--fix")
    assert code == 1 and report["fully_fixed_files"] == []
    [left] = [f for f in report["findings"] if not f["fixed"]]
    assert left["code"] == "MIG001" and "self.cell_type" in left["message"]
    assert "another cell class" in left["reason"]
    # The scanned class it builds was given the width its carry was made with.
    assert "scan(features=self.hidden)(carry, xs)" in path.read_text()


def test_convlstm_rename_runs_under_current_flax(tmp_path):
    shutil.copytree(CORPUS, tmp_path / "c")
    path = tmp_path / "c" / "convlstm_renamed.py"
    assert run(sys.executable, path, path.parent).returncode != 0  # AttributeError today
    code, _ = migrate_json(path, "--fix")
    assert code == 0 and "nn.ConvLSTMCell(features=4" in path.read_text()
    proc = run(sys.executable, path, path.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "y (2, 6, 6, 4)" in proc.stdout


def test_fixed_cell_subclass_runs_inside_current_nn_rnn(tmp_path):
    """The num_feature_axes the fixer adds is what nn.RNN needs to drive the cell."""
    shutil.copytree(CORPUS, tmp_path / "c")
    path = tmp_path / "c" / "cell_subclass.py"
    migrate_json(path, "--fix")
    script = tmp_path / "c" / "drive.py"
    script.write_text(
        path.read_text() + "\nimport flax.linen as nn\n"
        "rnn = nn.RNN(DecoderCell(vocab_size=VOCAB))\n"
        "rnn_vars = rnn.init(jax.random.PRNGKey(1), xs, initial_carry=carry)\n"
        "out = rnn.apply(rnn_vars, xs, initial_carry=carry)\n"
        "print('rnn', out.shape)\n",
        encoding="utf-8",
    )
    proc = run(sys.executable, script, script.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rnn (2, 4, 7)" in proc.stdout


# --------------------------------------------------------------------------- the rules, one by one


@pytest.mark.parametrize(
    "source, new",
    [
        ("import flax.linen as nn\nc = nn.ConvLSTM(4, (3, 3))\n", "nn.ConvLSTMCell(4, (3, 3))"),
        (
            "from flax.linen import ConvLSTM\nc = ConvLSTM(4, (3, 3))\n",
            "from flax.linen import ConvLSTMCell as ConvLSTM\n",
        ),
        (
            "from flax.linen import ConvLSTM as C\nc = C(4, (3, 3))\n",
            "from flax.linen import ConvLSTMCell as C\n",
        ),
    ],
    ids=["attribute", "import", "import-as"],
)
def test_convlstm_name_is_an_error_and_renamed(source, new, tmp_path, capsys):
    code, report, path = run_snippet(tmp_path, capsys, source, "--fix")
    assert code == 0 and [f["code"] for f in report["findings"]] == ["MIG005"]
    assert report["findings"][0]["severity"] == "error" and new in path.read_text()


SUBCLASS = """import flax.linen as nn


class Cell(nn.RNNCellBase):
{body}


rnn = nn.RNN(Cell())
"""


def test_cell_subclass_with_a_convolution_is_reported_not_fixed(tmp_path, capsys):
    body = "    @nn.compact\n    def __call__(self, c, x):\n        return nn.Conv(4, (3, 3))(x)"
    code, report, _ = run_snippet(tmp_path, capsys, SUBCLASS.format(body=body), "--fix")
    [finding] = report["findings"]
    assert code == 1 and finding["code"] == "MIG006" and not finding["fixable"]
    assert finding["severity"] == "error" and "nn.RNN is built with it" in finding["message"]
    assert "Conv" in finding["reason"] and "feature axes" in finding["reason"]


def test_cell_subclass_with_num_feature_axes_is_clean(tmp_path, capsys):
    body = "    @property\n    def num_feature_axes(self):\n        return 1"
    code, report, _ = run_snippet(tmp_path, capsys, SUBCLASS.format(body=body))
    assert (code, report["findings"]) == (0, [])


def test_cell_subclass_with_the_old_static_initialize_carry_is_reported(tmp_path, capsys):
    body = (
        "    num_feature_axes = 1\n\n    @staticmethod\n"
        "    def initialize_carry(rng, batch_dims, size):\n        return None"
    )
    code, report, _ = run_snippet(tmp_path, capsys, SUBCLASS.format(body=body))
    [finding] = report["findings"]
    assert code == 1 and finding["code"] == "MIG006" and not finding["fixable"]
    assert finding["severity"] == "error" and "rng, batch_dims, size" in finding["message"]


@pytest.mark.parametrize(
    "source",
    [
        "def f(model, k):\n    return model.initialize_carry(k, (2,), 3)\n",
        "import flax.linen as nn\n\n\nclass M(nn.Module):\n    cell: nn.Module\n\n"
        "    def __call__(self, k):\n        return self.cell.initialize_carry(k, (2,), 3)\n",
    ],
    ids=["parameter", "field-without-default"],
)
def test_old_shaped_call_on_an_unknown_object_needs_review(source, tmp_path, capsys):
    code, report, _ = run_snippet(tmp_path, capsys, source)
    [finding] = report["findings"]
    assert code == 1 and finding["code"] == "MIG008" and finding["severity"] == "review"
    assert "cannot tell" in finding["message"] and finding["reason"]


@pytest.mark.parametrize(
    "source",
    [
        # The wrapper's own static method, called as the file defines it.
        "class W:\n    @staticmethod\n    def initialize_carry(rng, dims, size):\n"
        "        return None\n\n\nW.initialize_carry(0, (2,), 3)\n",
        # The current API: two arguments.
        "def f(cell, k, x):\n    return cell.initialize_carry(k, x.shape)\n",
        # Another library's object.
        "import torch.nn as tnn\nh = tnn.LSTMCell.initialize_carry(0, (1,), 2)\n",
    ],
    ids=["own-method", "current-api", "torch"],
)
def test_calls_that_cannot_be_flax_0_6_are_not_reported(source, tmp_path, capsys):
    code, report, _ = run_snippet(tmp_path, capsys, source)
    assert (code, report["findings"]) == (0, [])


SCAN_FIELD = """import flax.linen as nn


class M(nn.Module):
    cell_type: type

    @nn.compact
    def __call__(self, c, xs):
        return nn.scan(self.cell_type, variable_broadcast="params")()(c, xs)
"""


def test_scan_over_a_class_it_cannot_resolve_needs_review(tmp_path, capsys):
    code, report, _ = run_snippet(tmp_path, capsys, SCAN_FIELD)
    [finding] = report["findings"]
    assert code == 1 and finding["code"] == "MIG008"
    assert "self.cell_type" in finding["message"] and "cell_type" in finding["message"]


def test_scanned_cell_class_handed_elsewhere_needs_review(tmp_path, capsys):
    source = (
        "import flax.linen as nn\n\n\ndef build(cls):\n    return cls()\n\n\n"
        "layer = build(nn.scan(nn.GRUCell, variable_broadcast='params'))\n"
    )
    code, report, _ = run_snippet(tmp_path, capsys, source)
    [finding] = report["findings"]
    assert code == 1 and finding["code"] == "MIG008"
    assert "needs features" in finding["message"]


def test_two_written_widths_are_named_and_not_chosen_between(tmp_path, capsys):
    source = (
        "import flax.linen as nn\ncell = nn.GRUCell()\n"
        "a = cell.initialize_carry(k, (2,), 4)\nb = cell.initialize_carry(k, (2,), 8)\n"
    )
    code, report, path = run_snippet(tmp_path, capsys, source, "--fix")
    ctor = report["findings"][0]
    assert code == 1 and ctor["code"] == "MIG003" and not ctor["fixable"]
    assert "4 and 8" in ctor["reason"] and path.read_text() == source


def test_width_bound_after_the_cell_is_not_used(tmp_path, capsys):
    source = (
        "import flax.linen as nn\n\n\ndef f(k):\n    cell = nn.GRUCell()\n    n = 4\n"
        "    return cell.initialize_carry(k, (2,), n)\n"
    )
    code, report, _ = run_snippet(tmp_path, capsys, source, "--fix")
    assert code == 1 and not any(f["fixed"] for f in report["findings"])
    assert "<hidden size>" in report["findings"][0]["suggestion"]


def test_width_read_from_the_carry_names_it_in_the_suggestion(tmp_path, capsys):
    source = (
        "import flax.linen as nn\n\n\ndef step(carry, x):\n    return nn.LSTMCell()(carry, x)\n"
    )
    _, report, _ = run_snippet(tmp_path, capsys, source)
    [finding] = report["findings"]
    assert finding["suggestion"].startswith("nn.LSTMCell(features=carry[0].shape[-1])")
    assert finding["fixable"]


# --------------------------------------------------------------------------- severities, the table


def test_advice_alone_exits_0_and_fails_with_strict(tmp_path, capsys):
    # What --fix leaves here is the advice on the custom cell's own old initialize_carry.
    source = (CORPUS / "scan_custom_cell.py").read_text()
    code, _, path = run_snippet(tmp_path, capsys, source, "--fix")
    assert code == 0
    assert main([str(path), "--strict"]) == 1
    out = capsys.readouterr().out
    assert "MIG006 advice:" in out


def test_rules_table_is_one_table_with_known_severities():
    codes = [rule.code for rule in RULES]
    assert codes == sorted(set(codes)) == [f"MIG00{i}" for i in range(1, len(RULES) + 1)]
    assert {rule.severity for rule in RULES} <= set(SEVERITIES)
    # A rule whose findings can take lower severities lists them after its own.
    for rule in RULES:
        order = [SEVERITIES.index(s) for s in (rule.severity, *rule.also)]
        assert order == sorted(set(order)), rule.code
    assert all(rule.finds and rule.breaks and rule.fix for rule in RULES)


def test_module_docstring_and_help_are_made_from_the_table(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    help_text = capsys.readouterr().out
    for rule in RULES:
        assert f"``{rule.code}`` {rule.title} ({rule.severities})" in migrate.__doc__
        assert f"{rule.code} {rule.severities:<6} {rule.title}" in help_text
    assert "recall" in migrate.__doc__ and "precision" in help_text
    # --help speaks of the tool: a user has no tests/ folder of this repository.
    assert "tests/" not in help_text and "tests." not in help_text


def test_measured_numbers_in_the_docs_are_the_script_s_kind():
    """The numbers quoted come with the script that measures them."""
    assert re.search(r"recall \d+/\d+", migrate.__doc__)
    assert re.search(r"precision \d+/\d+", migrate.__doc__)
    assert "tests/migrate_corpus_report.py" in migrate.__doc__
