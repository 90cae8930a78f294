"""rnnlib.RGLRUCell against recurrentgemma's own RG-LRU layer.

recurrentgemma 1.0.1 (Google DeepMind's package for Griffin and RecurrentGemma) pins
``numpy<2.4``, below the book's numpy, so it lives in a side environment,
.venv-recurrentgemma (``make .venv-recurrentgemma/.stamp``, from
tests/oracle/requirements-recurrentgemma.txt). The reference script
tests/oracle/rglru_reference.py runs there once per session: it builds recurrentgemma's
``RGLRU`` layer, moves its parameters to random values, runs it with both of its scans from a
random carry, and stores parameters, inputs, outputs and gradients in an ``.npz``. Here the
same parameter tree and inputs go, unchanged, through ``RNN(RGLRUCell(...))`` in both of
rnnlib's modes, whose outputs, final carries and gradients must match.
"""

from __future__ import annotations

import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rnnlib
from tests import side_env, tolerance
from tests.parity.test_legacy_oracle import subtree

pytestmark = pytest.mark.pinned_env

ROOT = Path(__file__).resolve().parents[2]
ORACLE_PYTHON = ROOT / ".venv-recurrentgemma" / "bin" / "python"
SCRIPT = ROOT / "tests" / "oracle" / "rglru_reference.py"
# Mirrors CASES in the reference script: name -> (width, num_heads, batch, time).
CASES = {"w8_h2": (8, 2, 3, 16), "w16_h4": (16, 4, 2, 64), "w6_h1": (6, 1, 2, 5)}
MODES = {"sequential": rnnlib.Plan(scan="sequential")}
MODES["associative"] = rnnlib.Plan(scan="associative")


def loss(outputs, carry):
    """The reference script's loss."""
    return jnp.sum(jnp.sin(3.0 * outputs)) + jnp.sum(jnp.cos(2.0 * carry))


def require_oracle_python(python: Path) -> Path:
    """``python`` if it exists; otherwise the test fails (never skips) with the fix."""
    return side_env.require_python(python, "recurrentgemma", ".venv-recurrentgemma")


@pytest.fixture(scope="module")
def oracle(tmp_path_factory):
    """Every array the reference script stored, by flattened key."""
    python = require_oracle_python(ORACLE_PYTHON)
    out = tmp_path_factory.mktemp("recurrentgemma") / "reference.npz"
    return side_env.run_reference(python, SCRIPT, out, what="recurrentgemma")


def test_the_reference_comes_from_recurrentgemma_1_0_1(oracle):
    assert str(oracle["versions/recurrentgemma"]) == "1.0.1"


def _terms(cell, x_shape, time, gradient=False):
    # The two sides round in different orders (another jax, another scan, 1 - a**2 as
    # 1 - exp(2 log a) there and -expm1(2 log a) here), over up to `time` steps.
    return tolerance.recurrent_terms(cell, x_shape, steps=time, gradient=gradient)


@pytest.mark.parametrize("scan", ["linear", "associative"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", CASES)
def test_rglru_cell_gives_recurrentgemmas_outputs_carry_and_gradients(oracle, case, mode, scan):
    width, heads, _, time = CASES[case]
    cell = rnnlib.RGLRUCell(width, num_heads=heads)
    rnn = rnnlib.RNN(cell, return_carry=True, plan=MODES[mode])
    params = subtree(oracle, f"{case}/params")
    x, h0 = jnp.asarray(oracle[f"{case}/x"]), jnp.asarray(oracle[f"{case}/h0"])
    # recurrentgemma's parameter tree is the cell's, as it is
    mine = rnn.init(jax.random.key(0), x)["params"]["cell"]
    assert jax.tree_util.tree_map(np.shape, mine) == jax.tree_util.tree_map(np.shape, params)

    def apply(p, x, h0):
        return rnn.apply({"params": {"cell": p}}, x, initial_carry=h0)

    carry, outputs = jax.jit(apply)(params, x, h0)
    want = f"{case}/{scan}"
    terms = _terms(cell, x.shape, time)
    tolerance.assert_close(outputs, oracle[f"{want}/outputs"], terms=terms, label="outputs")
    tolerance.assert_close(carry, oracle[f"{want}/carry"], terms=terms, label="carry")

    grads = jax.jit(jax.grad(lambda *a: loss(*apply(*a)[::-1]), argnums=(0, 1, 2)))(params, x, h0)
    expected = {
        "params": subtree(oracle, f"{want}/grad/params"),
        "x": oracle[f"{want}/grad/x"],
        "h0": oracle[f"{want}/grad/h0"],
    }
    got = {"params": grads[0], "x": grads[1], "h0": grads[2]}
    terms = _terms(cell, x.shape, time, gradient=True)
    tolerance.assert_close(got, expected, terms=terms, label="gradients")


def test_a_missing_side_environment_fails_rather_than_skips(tmp_path):
    with pytest.raises(pytest.fail.Exception, match=re.escape("make .venv-recurrentgemma/.stamp")):
        require_oracle_python(tmp_path / "no-venv" / "bin" / "python")
