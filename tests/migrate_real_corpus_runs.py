"""Runs the files of the real-code corpus that can run on their own, as a check of the lines
marked by hand in tests/migrate_real_corpus.json (a maintainer's script, not a test).

Run from the repository root, with the Flax 0.6.11 side environment built
(``make .venv-flax06/.stamp``)::

    .venv/bin/python tests/migrate_real_corpus_runs.py [CORPUS]

For each file in ``EXERCISES`` it loads the file as a module (imports that are not installed,
such as a project's own modules or an RL environment library, are replaced by stand-ins that
accept anything; the recurrent code under test is the file's own), builds its recurrent module,
fills every parameter with the same NumPy draws (tests/migrate_corpus/_report.py) and runs it:

1. under Flax 0.6.11, where it must run;
2. unchanged under the pinned Flax, where it must fail, and the line it fails on must be one
   marked in the manifest;
3. after ``python -m rnnlib.migrate --fix`` on a copy, under the pinned Flax: when the tool
   exits 0, the fixed file must run; where it runs, the largest difference from 0.6.11's
   outputs is printed (a file the tool leaves with exit 1 may still run here when the
   exercise does not reach the site it left).

Each exercise is a few lines of our own that call the file's classes the way the file's
project does; the corpus files are read, never changed.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OLD_PYTHON = ROOT / ".venv-flax06" / "bin" / "python"
NEW_PYTHON = ROOT / ".venv" / "bin" / "python"

# ----------------------------------------------------------------------------- the child side


class _StandIn(types.ModuleType):
    """A module whose every attribute is a stand-in (a callable that accepts anything)."""

    __path__: list = []

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything(f"{self.__name__}.{name}")


class _Anything:
    def __init__(self, name="anything"):
        self._name = name

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # used as a decorator: leave the function as it is
        return _Anything(self._name + "()")

    def __getattr__(self, name):
        return _Anything(f"{self._name}.{name}")

    def __getitem__(self, key):  # a generic type alias: LearnerFn[State]
        return _Anything(f"{self._name}[...]")

    def __mro_entries__(self, bases):
        return (object,)


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """A module the corpus file imports that is not installed, or does not import here (its
    top-level name in `roots`), becomes a stand-in; nothing else does, so the optional imports
    of installed libraries behave as they always do."""

    def __init__(self, roots):
        self.roots = roots

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] not in self.roots:
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        return _StandIn(spec.name)

    def exec_module(self, module):
        module.__path__ = []


def _missing_roots(path: Path) -> set[str]:
    """Top-level names of the absolute imports of `path` that are not installed, or do not
    import here (optax in the Flax 0.6.11 environment: its jax is older than its scipy)."""
    import ast

    roots = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            roots.add(node.module.split(".")[0])
    missing = set()
    for root in sorted(roots):
        if importlib.util.find_spec(root) is None:
            missing.add(root)
            continue
        try:
            importlib.import_module(root)
        except Exception:
            missing.add(root)
            for name in [n for n in sys.modules if n == root or n.startswith(root + ".")]:
                del sys.modules[name]
    return missing


def _load(path: Path, extra: dict):
    """Import `path` as a module (inside package `extra["__package__"]`, for a file with
    relative imports), after installing the modules `extra` names."""
    package = extra.pop("__package__", None)
    missing = _missing_roots(path) | ({package} if package else set())
    sys.meta_path.insert(0, _StandInFinder(missing))
    if package and package not in extra:
        extra = {package: {"__path__": []}, **extra}
    for name, attrs in extra.items():
        module = types.ModuleType(name)
        module.__dict__.update(attrs)
        sys.modules[name] = module
        while "." in name:  # `from core.data import error_kinds` reads it off its parent
            parent_name, child_name = name.rsplit(".", 1)
            parent = sys.modules.setdefault(parent_name, types.ModuleType(parent_name))
            parent.__dict__.setdefault("__path__", [])
            setattr(parent, child_name, module)
            name, module = parent_name, parent
    name = f"{package}.corpus_file" if package else "corpus_file"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _exercise_scan_lstm(m, cls="SimpleLSTM"):
    import jax
    from _report import inputs

    wrapper = getattr(m, cls)
    xs = inputs(2, 4, 3)
    carry = wrapper.initialize_carry((2,), 5)
    model = wrapper()
    variables = model.init(jax.random.PRNGKey(1), carry, xs)
    return variables, lambda v: model.apply(v, carry, xs)


def _exercise_stacked_cells(m):
    import jax
    from _report import inputs

    stack = m.StackedRNNCell(cells=m.create_lstm_cells(2))
    xs = inputs(2, 3)
    carry = stack.initialize_carry(jax.random.PRNGKey(0), (2,), 5)
    variables = stack.init(jax.random.PRNGKey(1), carry, xs)
    return variables, lambda v: stack.apply(v, carry, xs)


def _exercise_deluca_lstm(m):
    import jax
    from _report import inputs

    model = m.LSTM(n_layers=2, hidden_dim=4)
    xs = inputs(2, 5, 4)
    variables = model.init(jax.random.PRNGKey(1), xs)
    return variables, lambda v: model.apply(v, xs)


def _exercise_deluca_controller(m):
    import jax
    from _report import inputs

    model = m.LSTMnetwork(num_layers=1)
    carry = m.LSTMnetwork.initialize_carry((1,), 5)
    x = inputs(1, 3)
    variables = model.init(jax.random.PRNGKey(1), carry, x)
    return variables, lambda v: model.apply(v, carry, x)


def _exercise_scanned_rnn(m):
    import jax
    import jax.numpy as jnp
    from _report import inputs

    model = m.ScannedRNN()
    hidden = m.ScannedRNN.initialize_carry(2, 6)
    ins = inputs(3, 2, 6)
    resets = jnp.array([[False, False], [True, False], [False, True]])
    variables = model.init(jax.random.PRNGKey(1), hidden, (ins, resets))
    return variables, lambda v: model.apply(v, hidden, (ins, resets))


def _exercise_evosax(m):
    import jax
    from _report import inputs

    model = m.LSTM(num_hidden_units=5, num_output_units=2)
    carry = model.initialize_carry()
    x = inputs(3)
    variables = model.init(jax.random.PRNGKey(1), x, carry)
    return variables, lambda v: model.apply(v, x, carry)


def _evosax_shared():
    import flax.linen as nn

    def dense_out(x, n, kernel_init_type, *rest):
        return nn.Dense(n)(x)

    return {
        "__package__": "evosax_networks",
        "evosax_networks.shared": {
            "identity_out": dense_out,
            "tanh_out": dense_out,
            "categorical_out": dense_out,
            "gaussian_out": dense_out,
            "default_bias_init": lambda: nn.initializers.zeros,
            "kernel_init_fn": {"lecun_normal": nn.initializers.lecun_normal},
        },
        "evosax_networks": {"__path__": []},
    }


def _exercise_flaxnlp(m):
    import jax
    import jax.numpy as jnp
    from _report import inputs

    model = m.LSTMLayer(hidden_dim=5, bidirectional=False)
    xs = inputs(2, 4, 3)
    mask = jnp.ones((2, 4), dtype=bool)
    variables = model.init(jax.random.PRNGKey(1), xs, mask)
    return variables, lambda v: model.apply(v, xs, mask)


def _exercise_algoperf(m):
    import jax
    import jax.numpy as jnp
    from _report import inputs

    model = m.LSTM(hidden_size=5, num_layers=1)
    xs = inputs(2, 4, 3)
    paddings = jnp.zeros((2, 4))
    variables = model.init(jax.random.PRNGKey(1), xs, paddings)
    return variables, lambda v: model.apply(v, xs, paddings)


def _exercise_s4(m):
    import jax
    from _report import inputs

    model = m.LSTMRecurrentModel(N=1, l_max=4, d_model=5)
    xs = inputs(4, 3)
    variables = model.init(jax.random.PRNGKey(1), xs)
    return variables, lambda v: model.apply(v, xs)


def _rnn_model_stubs():
    return {"core.data.error_kinds": {"NUM_CLASSES": 3}}


def _exercise_rnn_model(m):
    import types as t

    import jax
    import jax.numpy as jnp

    model = m.StackedLSTMModel()
    config = t.SimpleNamespace(
        model=t.SimpleNamespace(hidden_size=5),
        dataset=t.SimpleNamespace(batch_size=2, vocab_size=11),
    )
    example = {
        "tokens": jnp.array([[1, 2, 3, 4, 5, 6], [6, 5, 4, 3, 2, 1]]),
        "node_token_span_starts": jnp.zeros((2, 3), dtype=jnp.int32),
        "node_token_span_ends": jnp.full((2, 3), -1, dtype=jnp.int32),
    }
    variables = model.init(jax.random.PRNGKey(1), example, config)
    return variables, lambda v: model.apply(v, example, config)


# file -> (exercise, stand-in modules to install first)
EXERCISES = {
    "google-research__runtime-error-prediction__core__modules__rnn__lstm.py": (
        _exercise_scan_lstm,
        dict,
    ),
    "google-research__runtime-error-prediction__models__rnn_model.py": (
        _exercise_rnn_model,
        _rnn_model_stubs,
    ),
    "google-research__runtime-error-prediction__core__models__ipagnn__rnn.py": (
        _exercise_stacked_cells,
        dict,
    ),
    "TimCargan__chemise__src__chemise__layers__lstm.py": (_exercise_scan_lstm, dict),
    "altescy__flaxnlp__flaxnlp__modules__seq2seq_encoders__lstm_encoder.py": (
        _exercise_flaxnlp,
        dict,
    ),
    "google__deluca__deluca__lung__utils__nn__lstm.py": (_exercise_deluca_lstm, dict),
    "google__deluca__deluca__lung__controllers___lstm.py": (_exercise_deluca_controller, dict),
    "luchris429__purejaxrl__purejaxrl__ppo_rnn.py": (_exercise_scanned_rnn, dict),
    "instadeepai__Mava__jax_distribution__systems__ippo_recurrent_anakin.py": (
        _exercise_scanned_rnn,
        dict,
    ),
    "instadeepai__Mava__mava__systems__rec_mappo_rware.py": (_exercise_scanned_rnn, dict),
    "RobertTLange__evosax__evosax__networks__lstm.py": (_exercise_evosax, _evosax_shared),
    "mlcommons__algorithmic-efficiency__algorithmic_efficiency__workloads__librispeech_deepspeech__librispeech_jax__models.py": (  # noqa: E501
        _exercise_algoperf,
        dict,
    ),
    "srush__annotated-s4__s4__train.py": (_exercise_s4, lambda: {"__package__": "s4"}),
}


def child(path: Path, out: Path) -> int:
    """Run one exercise; save its variables and outputs, or report where it failed."""
    sys.path.insert(0, str(ROOT / "tests" / "migrate_corpus"))
    from _report import fill, flat

    exercise, stubs = EXERCISES[path.name]
    try:
        module = _load(path, stubs())
        variables, apply = exercise(module)
        variables = fill(variables)
        outputs = apply(variables)
    except Exception as exc:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == str(path)]
        line = frames[-1].lineno if frames else None
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)[:300], "line": line}))
        return 3
    import numpy as np

    np.savez(out, **flat(variables, "param"), **flat(outputs, "out"))
    return 0


# ----------------------------------------------------------------------------- the parent side


def _run(python: Path, path: Path, out: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    env.update(JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3", PYTHONNOUSERSITE="1")
    proc = subprocess.run(
        [str(python), __file__, "--child", str(path), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=out.parent,
    )
    if proc.returncode == 0:
        return {"ok": True}
    last = proc.stdout.strip().splitlines()[-1:] or ["{}"]
    try:
        return {"ok": False, **json.loads(last[0])}
    except json.JSONDecodeError:
        return {"ok": False, "error": "crash", "message": proc.stderr[-300:], "line": None}


def _largest_difference(a: Path, b: Path):
    import numpy as np

    want, got = np.load(a), np.load(b)
    if sorted(want.files) != sorted(got.files):
        return None
    keys = [k for k in want.files if k == "out" or k.startswith("out/")]
    return max(float(np.max(np.abs(want[k] - got[k]))) for k in keys)


def parent(corpus: Path) -> int:
    sys.path.insert(0, str(ROOT))
    from tests.migrate_corpus_report import run_tool
    from tests.migrate_real_corpus_report import load_manifest

    manifest = {e["file"]: e for e in load_manifest()}
    problems = 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name in EXERCISES:
            sites = [tuple(b["lines"]) for b in manifest[name]["breaks"]]
            path = corpus / "files" / name
            old = _run(OLD_PYTHON, path, tmp / "old.npz")
            new = _run(NEW_PYTHON, path, tmp / "new.npz")
            fixed_path = tmp / name
            shutil.copyfile(path, fixed_path)
            status, _ = run_tool(fixed_path, "--fix")
            fixed = _run(NEW_PYTHON, fixed_path, tmp / "fixed.npz")
            marked = new.get("line") is not None and any(
                lo <= new["line"] <= hi for lo, hi in sites
            )
            line = f"{manifest[name]['repository']} {manifest[name]['path']}:"
            line += f"\n  flax 0.6.11: {'runs' if old['ok'] else 'FAILS ' + str(old)}"
            line += "\n  pinned flax, unchanged: " + (
                "RUNS (not broken?)"
                if new["ok"]
                else f"{new['error']} at line {new['line']}"
                + (" (a marked site)" if marked else " (NOT a marked site)")
            )
            if fixed["ok"] and old["ok"]:
                diff = _largest_difference(tmp / "old.npz", tmp / "fixed.npz")
                result = f"runs, largest difference from 0.6.11 {diff:.1e}"
            elif fixed["ok"]:
                result = "runs"
            else:
                result = f"fails ({fixed['error']} at line {fixed['line']})"
            line += f"\n  after --fix (exit {status}), pinned flax: {result}"
            # A file the tool calls clean after --fix must run; one it does not may still run
            # here, when the exercise does not reach the site it left.
            bad = not old["ok"] or new["ok"] or not marked or (status == 0 and not fixed["ok"])
            problems += bad
            print(line + ("\n  ^ does not match the manifest" if bad else ""))
    print(f"\n{len(EXERCISES)} files run, {problems} not as the manifest says")
    return 1 if problems else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        sys.exit(child(Path(sys.argv[2]), Path(sys.argv[3])))
    sys.path.insert(0, str(ROOT))
    from tests.migrate_real_corpus_report import find_corpus

    found = find_corpus(sys.argv[1] if len(sys.argv) > 1 else None)
    if found is None:
        sys.exit("no corpus found (see tests/migrate_real_corpus_report.py)")
    sys.exit(parent(found))
