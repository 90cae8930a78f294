"""rnnlib.legacy against the real Flax 0.6.11.

Flax 0.6.11 cannot be installed next to the book's JAX, so it lives in a side
environment, .venv-flax06 (``make .venv-flax06/.stamp``, from
tests/oracle/requirements-flax06.txt). The reference script
tests/oracle/flax06_reference.py runs there once per session: it builds the 0.6.11
cells, RNNs and Bidirectionals, initialises them, replaces every parameter with
random numbers and stores inputs, variables and results in an ``.npz``. Here the
same variables and inputs go through ``rnnlib.legacy``, whose parameter trees and
results must match.
"""

from __future__ import annotations

import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rnnlib
from rnnlib import legacy
from tests import side_env, tolerance

pytestmark = [pytest.mark.pinned_env, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

ROOT = Path(__file__).resolve().parents[2]
ORACLE_PYTHON = ROOT / ".venv-flax06" / "bin" / "python"
SCRIPT = ROOT / "tests" / "oracle" / "flax06_reference.py"
# Rounded terms per element (tests/tolerance.py): the longest step sum among the oracle's
# cases (a 3 x 3 ConvLSTM from 2 to 3 channels) over up to 5 steps. The oracle ran on
# another jax and XLA, so the two sides round in different orders.
TERMS = 5 * tolerance.step_terms(rnnlib.ConvLSTMCell(3, (3, 3)), 2)

CELLS = {
    "LSTMCell": legacy.LSTMCell,
    "OptimizedLSTMCell": legacy.OptimizedLSTMCell,
    "GRUCell": legacy.GRUCell,
}
NORMAL = jax.nn.initializers.normal(1.0)

# Mirrors RNN_CASES in the reference script: constructor fields for each case name.
RNN_FIELDS = {
    "plain": {},
    "return_carry": {"return_carry": True},
    "reverse": {"reverse": True},
    "reverse_keep_order": {"reverse": True, "keep_order": True},
    "time_major": {"time_major": True, "return_carry": True},
    "seq_lengths": {"return_carry": True},
    "seq_lengths_reverse": {"return_carry": True, "reverse": True, "keep_order": True},
    "initial_carry": {"return_carry": True},
}


def require_oracle_python(python: Path) -> Path:
    """``python`` if it exists; otherwise the test fails (never skips) with the fix."""
    return side_env.require_python(python, "Flax 0.6.11", ".venv-flax06")


@pytest.fixture(scope="module")
def oracle(tmp_path_factory):
    """Every array the reference script stored, by flattened key."""
    python = require_oracle_python(ORACLE_PYTHON)
    out = tmp_path_factory.mktemp("flax06") / "reference.npz"
    partitionable = int(bool(jax.config.jax_threefry_partitionable))
    args = ("--partitionable", partitionable)
    return side_env.run_reference(python, SCRIPT, out, *args, what="Flax 0.6.11")


def subtree(data, prefix):
    """The stored tree under ``prefix``, rebuilt as nested dicts (tuples come back as dicts
    keyed "0", "1", ...; ``as_carry`` turns those into tuples), or the array stored at it."""
    if prefix in data:
        return data[prefix]
    tree = {}
    for key, value in data.items():
        if not key.startswith(prefix + "/"):
            continue
        *parents, leaf = key[len(prefix) + 1 :].split("/")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    if not tree:
        raise KeyError(f"the reference holds nothing under {prefix!r}")
    return tree


def as_carry(tree):
    """A stored carry back in its Python structure: a pair for "0"/"1" keys, else an array."""
    if isinstance(tree, dict) and set(tree) <= {str(i) for i in range(len(tree))}:
        return tuple(as_carry(tree[str(i)]) for i in range(len(tree)))
    if isinstance(tree, dict):
        return {k: as_carry(v) for k, v in tree.items()}
    return jnp.asarray(tree)


def flatten(tree, prefix=""):
    out = {}
    if isinstance(tree, dict):
        for key, value in tree.items():
            out.update(flatten(value, f"{prefix}/{key}"))
    elif isinstance(tree, (tuple, list)):
        for i, value in enumerate(tree):
            out.update(flatten(value, f"{prefix}/{i}"))
    else:
        out[prefix] = np.asarray(tree)
    return out


def assert_matches(actual, data, prefix):
    """``actual`` has the structure and (up to rounding) the values stored under ``prefix``."""
    got = flatten(actual, prefix)
    want = {k: v for k, v in data.items() if k.startswith(prefix + "/") or k == prefix}
    assert sorted(got) == sorted(want)
    for key, value in want.items():
        assert got[key].shape == value.shape, key
        tolerance.assert_close(got[key], value, terms=TERMS, label=key)


def shapes(tree):
    return {k: v.shape for k, v in flatten(tree).items()}


def test_the_reference_comes_from_flax_0_6_11(oracle):
    assert str(oracle["versions/flax"]) == "0.6.11"
    assert str(oracle["versions/jax"]) == "0.4.13"


# -- cells ----------------------------------------------------------------------------------


def build_cell(name):
    if name == "GRUCell_custom":
        return legacy.GRUCell(gate_fn=jax.nn.hard_sigmoid, activation_fn=jax.nn.soft_sign)
    if name == "ConvLSTM2d":
        return legacy.ConvLSTMCell(3, kernel_size=(3, 3))
    if name == "ConvLSTM1d":
        return legacy.ConvLSTMCell(2, kernel_size=(3,), use_bias=False)
    return CELLS[name]()


@pytest.mark.parametrize(
    "name",
    ["LSTMCell", "OptimizedLSTMCell", "GRUCell", "GRUCell_custom", "ConvLSTM2d", "ConvLSTM1d"],
)
def test_cell_matches_flax_0_6_11(oracle, name):
    prefix = f"cell/{name}"
    cell = build_cell(name)
    carry = as_carry(subtree(oracle, f"{prefix}/carry"))
    x = jnp.asarray(oracle[f"{prefix}/x"])
    variables = subtree(oracle, f"{prefix}/variables")
    # legacy.init builds the same parameter tree, with the same shapes, as 0.6.11 did
    assert shapes(cell.init(jax.random.PRNGKey(0), carry, x)) == shapes(variables)
    assert_matches(cell.apply(variables, carry, x), oracle, f"{prefix}/out")


# -- RNN and Bidirectional ------------------------------------------------------------------


@pytest.mark.parametrize("name", CELLS)
@pytest.mark.parametrize("case", RNN_FIELDS)
def test_rnn_matches_flax_0_6_11(oracle, name, case):
    prefix = f"rnn/{name}/{case}"
    rnn = legacy.RNN(CELLS[name](), 6, **RNN_FIELDS[case])
    x = jnp.asarray(oracle[f"{prefix}/x"])
    variables = subtree(oracle, f"{prefix}/variables")
    assert shapes(rnn.init(jax.random.PRNGKey(0), x)) == shapes(variables)
    call = {}
    if f"{prefix}/call/seq_lengths" in oracle:
        call["seq_lengths"] = jnp.asarray(oracle[f"{prefix}/call/seq_lengths"])
    if case == "initial_carry":
        call["initial_carry"] = as_carry(subtree(oracle, f"{prefix}/call/initial_carry"))
    assert_matches(rnn.apply(variables, x, **call), oracle, f"{prefix}/out")


def test_conv_lstm_rnn_matches_flax_0_6_11(oracle):
    prefix = "rnn/ConvLSTM2d"
    rnn = legacy.RNN(legacy.ConvLSTMCell(3, kernel_size=(3, 3)), (5, 4, 3), return_carry=True)
    x = jnp.asarray(oracle[f"{prefix}/x"])
    variables = subtree(oracle, f"{prefix}/variables")
    assert shapes(rnn.init(jax.random.PRNGKey(0), x)) == shapes(variables)
    assert_matches(rnn.apply(variables, x), oracle, f"{prefix}/out")


def build_bidirectional(name):
    if name == "lstm_gru":
        return legacy.Bidirectional(
            legacy.RNN(legacy.LSTMCell(), 5), legacy.RNN(legacy.GRUCell(), 4), return_carry=True
        )
    if name == "shared_cell":
        cell = legacy.GRUCell()
        return legacy.Bidirectional(legacy.RNN(cell, 4), legacy.RNN(cell, 4), return_carry=True)
    return legacy.Bidirectional(
        legacy.RNN(legacy.OptimizedLSTMCell(), 5),
        legacy.RNN(legacy.LSTMCell(), 3),
        return_carry=True,
        time_major=True,
    )


@pytest.mark.parametrize("name", ["lstm_gru", "shared_cell", "time_major"])
def test_bidirectional_matches_flax_0_6_11(oracle, name):
    prefix = f"bi/{name}"
    bi = build_bidirectional(name)
    x = jnp.asarray(oracle[f"{prefix}/x"])
    variables = subtree(oracle, f"{prefix}/variables")
    assert shapes(bi.init(jax.random.PRNGKey(0), x)) == shapes(variables)
    call = {}
    if f"{prefix}/call/seq_lengths" in oracle:
        call["seq_lengths"] = jnp.asarray(oracle[f"{prefix}/call/seq_lengths"])
    assert_matches(bi.apply(variables, x, **call), oracle, f"{prefix}/out")


# -- the static initialize_carry ------------------------------------------------------------

CARRY_SIZES = {"LSTMCell": 3, "OptimizedLSTMCell": 3, "GRUCell": 3, "ConvLSTMCell": (4, 3)}


@pytest.mark.parametrize("name", CARRY_SIZES)
def test_initialize_carry_hands_out_keys_like_flax_0_6_11(oracle, name):
    prefix = f"carry/{name}"
    cls = legacy.ConvLSTMCell if name == "ConvLSTMCell" else CELLS[name]
    rng = jnp.asarray(oracle[f"{prefix}/rng"])
    seen = []

    def recording(key, shape):
        seen.append(np.asarray(key))
        return jnp.zeros(shape)

    cls.initialize_carry(rng, (2,), CARRY_SIZES[name], recording)
    # the same keys as 0.6.11 gave its init_fn, in the same order ...
    assert_matches(seen, oracle, f"{prefix}/keys")
    # ... which are, for the LSTMs, the halves of split(rng); GRU takes rng whole
    expected = [oracle[f"{prefix}/rng"]] if name == "GRUCell" else list(oracle[f"{prefix}/split"])
    assert_matches(expected, oracle, f"{prefix}/keys")
    assert_matches(cls.initialize_carry(rng, (2,), CARRY_SIZES[name]), oracle, f"{prefix}/zeros")
    assert_matches(
        cls.initialize_carry(rng, (2,), CARRY_SIZES[name], NORMAL), oracle, f"{prefix}/normal"
    )


# -- what 0.6.11 raised ---------------------------------------------------------------------


def test_flip_3099_example_fails_with_the_error_flax_0_6_11_raised(oracle):
    key1, key2 = jax.random.split(jax.random.PRNGKey(0))
    carry = legacy.ConvLSTMCell.initialize_carry(key1, (16,), (64, 64, 16))
    cell = legacy.ConvLSTMCell(features=6, kernel_size=(3, 3))
    with pytest.raises(Exception) as raised:
        cell.init_with_output(key2, carry, jnp.ones((2, 4, 4, 3)))
    assert type(raised.value).__name__ == str(oracle["flip/error_type"]) == "TypeError"
    reference = str(oracle["flip/message"])
    assert "(2, 4, 4, 24), (16, 64, 64, 24)" in reference
    # 0.6.11's message, then one sentence of explanation
    assert str(raised.value).startswith(reference)

    fixed = legacy.ConvLSTMCell.initialize_carry(key1, (2,), (4, 4, 6))
    (c, h), y = cell.init_with_output(key2, fixed, jnp.ones((2, 4, 4, 3)))[0]
    np.testing.assert_array_equal([c.shape, h.shape, y.shape], oracle["flip/fixed/shapes"])


def test_seq_lengths_without_return_carry_crashed_0_6_11_but_runs_in_legacy(oracle):
    assert str(oracle["seq_lengths_without_return_carry/error_type"]) != ""
    rnn = legacy.RNN(legacy.GRUCell(), 4)
    x = jnp.ones((3, 5, 2))
    lengths = jnp.array([5, 2, 4])
    outputs = rnn.apply(rnn.init(jax.random.PRNGKey(0), x), x, seq_lengths=lengths)
    assert outputs.shape == (3, 5, 4)


def test_a_missing_side_environment_fails_rather_than_skips(tmp_path):
    with pytest.raises(pytest.fail.Exception, match=re.escape("make .venv-flax06/.stamp")):
        require_oracle_python(tmp_path / "no-venv" / "bin" / "python")
