"""rnnlib.torch_weights against the real PyTorch (CPU build).

PyTorch lives in a side environment, .venv-torch (``make .venv-torch/.stamp``, from
tests/oracle/requirements-torch.txt). The reference script tests/oracle/torch_reference.py runs
there: it builds ``nn.LSTM`` and ``nn.GRU`` modules over a seeded grid of configurations, runs
them and stores their state dicts, inputs, outputs and final carries. Here the state dicts go
through the converters into flax.linen's ``nn.RNN``/``nn.Bidirectional`` stacks and rnnlib's
``RNN``/``Bidirectional``/``StackedRNN``, which must give PyTorch's numbers to rounding. The
converted-back state dicts go through the script again: PyTorch loads them strictly, gives the
same outputs, and its state dict converts back to the same bits.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rnnlib
from rnnlib import torch_weights as tw
from tests import side_env, tolerance

pytestmark = pytest.mark.pinned_env

ROOT = side_env.Path(__file__).resolve().parents[2]
TORCH_PYTHON = ROOT / ".venv-torch" / "bin" / "python"
SCRIPT = ROOT / "tests" / "oracle" / "torch_reference.py"
FROM = {"LSTM": tw.lstm_from_torch, "GRU": tw.gru_from_torch}
TO = {"LSTM": tw.lstm_to_torch, "GRU": tw.gru_to_torch}
LINEN_CELLS = {"LSTM": nn.LSTMCell, "GRU": nn.GRUCell}
RNNLIB_CELLS = {"LSTM": rnnlib.LSTMCell, "GRU": rnnlib.GRUCell}


def _grid() -> list[dict]:
    """Every kind x num_layers x bidirectional, with sizes, batch_first and the shape of the
    input drawn from a seeded generator; then two modules without biases and one with proj_size."""
    rng = np.random.default_rng(56)
    cases = []
    for kind in ("LSTM", "GRU"):
        for num_layers in (1, 2, 3):
            for bidirectional in (False, True):
                cases.append(
                    dict(
                        kind=kind,
                        num_layers=num_layers,
                        bidirectional=bidirectional,
                        batch_first=bool(rng.integers(2)),
                        bias=True,
                        proj_size=0,
                        input_size=int(rng.integers(1, 8)),
                        hidden_size=int(rng.integers(1, 9)),
                        batch=int(rng.integers(1, 4)),
                        time=int(rng.integers(1, 7)),
                    )
                )
    for kind in ("LSTM", "GRU"):
        cases.append(dict(cases[-1], kind=kind, bias=False, num_layers=2, bidirectional=True))
    for k, case in enumerate(cases):
        case.update(seed=k, name=f"case{k}")
    return cases


CASES = _grid()
CONVERTED = [c for c in CASES if c["proj_size"] == 0]
PROJECTED = dict(CASES[0], name="projected", hidden_size=6, proj_size=3, seed=99)


def _case_id(case):
    bits = [case["kind"], f"{case['num_layers']}layers", f"F{case['input_size']}"]
    bits += [f"H{case['hidden_size']}", "bi" * case["bidirectional"]]
    bits += ["batch_first" * case["batch_first"], "nobias" * (not case["bias"])]
    return "-".join(b for b in bits if b)


def _torch(tmp_path_factory, tag, cases, states=None):
    """Runs the reference script on ``cases`` (with ``states``, an ``.npz`` dict, loaded)."""
    python = side_env.require_python(TORCH_PYTHON, "PyTorch", ".venv-torch")
    folder = tmp_path_factory.mktemp(tag)
    spec = folder / "cases.json"
    spec.write_text(json.dumps(cases))
    args = [spec]
    if states is not None:
        np.savez(folder / "states.npz", **states)
        args.append(folder / "states.npz")
    return side_env.run_reference(python, SCRIPT, folder / "out.npz", *args, what="PyTorch")


def _state(data, name) -> dict:
    prefix = f"{name}/state/"
    return {k[len(prefix) :]: v for k, v in data.items() if k.startswith(prefix)}


@pytest.fixture(scope="module")
def oracle(tmp_path_factory):
    """What PyTorch computed for every case of the grid, and for the proj_size module."""
    return _torch(tmp_path_factory, "torch", CASES + [PROJECTED])


@pytest.fixture(scope="module")
def back(oracle, tmp_path_factory):
    """PyTorch again, on each case's state dict converted to Flax and back, and its input."""
    states = {}
    for case in CONVERTED:
        name = case["name"]
        layers = FROM[case["kind"]](_state(oracle, name))
        state = TO[case["kind"]](layers, bias=case["bias"])
        states.update({f"{name}/state/{k}": v for k, v in state.items()})
        states[f"{name}/x"] = oracle[f"{name}/x"]
    return _torch(tmp_path_factory, "torch_back", CONVERTED, states)


class LinenStack(nn.Module):
    """Layers one after the other, each returning ``(carry, outputs)``: PyTorch's stack."""

    layers: Sequence[nn.Module]

    @nn.compact
    def __call__(self, x):
        carries = []
        for layer in self.layers:
            carry, x = layer(x)
            carries.append(carry)
        return carries, x


def _linen_layer(case):
    cell = LINEN_CELLS[case["kind"]]
    time_major = not case["batch_first"]
    if not case["bidirectional"]:
        return nn.RNN(cell(case["hidden_size"]), return_carry=True, time_major=time_major)
    rnns = [nn.RNN(cell(case["hidden_size"])) for _ in range(2)]
    return nn.Bidirectional(*rnns, return_carry=True, time_major=time_major)


def _rnnlib_layer(case):
    cell = RNNLIB_CELLS[case["kind"]]
    time_major = not case["batch_first"]
    if not case["bidirectional"]:
        return rnnlib.RNN(cell(case["hidden_size"]), time_major=time_major)
    rnns = [rnnlib.RNN(cell(case["hidden_size"]), time_major=time_major) for _ in range(2)]
    return rnnlib.Bidirectional(*rnns, time_major=time_major)


def _torch_carries(data, case):
    """PyTorch's final carry as one Flax carry per layer: ``(c, h)`` for the LSTM, ``h`` for
    the GRU, a ``(forward, backward)`` pair of those per bidirectional layer."""
    name, directions = case["name"], 1 + case["bidirectional"]
    carries = []
    for k in range(case["num_layers"]):
        per_direction = []
        for d in range(directions):
            row = directions * k + d
            h = data[f"{name}/h"][row]
            per_direction.append((data[f"{name}/c"][row], h) if case["kind"] == "LSTM" else h)
        carries.append(tuple(per_direction) if directions == 2 else per_direction[0])
    return carries


def _terms(case) -> int:
    """Rounded terms per element: each step sums ``F + H`` products and two biases, each layer
    reads the rounded outputs of the one below, over every step."""
    width = max(case["input_size"], 2 * case["hidden_size"]) + case["hidden_size"] + 2
    return case["time"] * case["num_layers"] * width


@pytest.mark.parametrize("case", CONVERTED, ids=_case_id)
def test_converted_weights_give_torchs_outputs_and_carries_in_linen_and_rnnlib(oracle, case):
    name = case["name"]
    layers = FROM[case["kind"]](_state(oracle, name))
    assert len(layers) == case["num_layers"]
    x = jnp.asarray(oracle[f"{name}/x"])
    want = (_torch_carries(oracle, case), oracle[f"{name}/y"])
    terms = _terms(case)

    linen = LinenStack([_linen_layer(case) for _ in range(case["num_layers"])])
    stacked = tw.stack_layers(layers)
    got = linen.apply(stacked, x)
    tolerance.assert_close(got, want, terms=terms, label="linen")

    ours = rnnlib.StackedRNN(tuple(_rnnlib_layer(case) for _ in range(case["num_layers"])))
    got = ours.apply(stacked, x, return_carry=True, deterministic=True)
    tolerance.assert_close((list(got[0]), got[1]), want, terms=terms, label="rnnlib")

    first = _linen_layer(case).apply(layers[0], x)
    assert jax.tree.structure(first[0]) == jax.tree.structure(want[0][0])


def test_converted_layers_have_the_names_and_shapes_linen_creates(oracle):
    """The converted tree has the names and shapes of a freshly initialised layer."""
    for case in CONVERTED:
        layers = FROM[case["kind"]](_state(oracle, case["name"]))
        x = jnp.asarray(oracle[f"{case['name']}/x"])
        for layer, variables in zip(_layers_for_init(case), layers):
            created = jax.eval_shape(layer.init, jax.random.key(0), x)
            shapes = jax.tree.map(np.shape, variables)
            assert jax.tree.map(np.shape, created) == shapes, case["name"]
            x = jax.eval_shape(layer.apply, created, x)[1]


def _layers_for_init(case):
    return [_linen_layer(case) for _ in range(case["num_layers"])]


@pytest.mark.parametrize("case", CONVERTED, ids=_case_id)
def test_torch_to_flax_to_torch_loads_strictly_and_gives_the_same_outputs(oracle, back, case):
    name = case["name"]
    for key in ("y", "h", "c"):
        if f"{name}/{key}" in oracle:
            tolerance.assert_close(
                back[f"{name}/{key}"], oracle[f"{name}/{key}"], terms=_terms(case), label=key
            )
    assert sorted(_state(back, name)) == sorted(_state(oracle, name))


@pytest.mark.parametrize("case", CONVERTED, ids=_case_id)
def test_flax_to_torch_to_flax_is_bit_exact_through_torch(oracle, back, case):
    """Flax variables -> a state dict PyTorch loads -> PyTorch's state dict -> the same bits."""
    convert = FROM[case["kind"]]
    before = convert(_state(oracle, case["name"]))
    after = convert(_state(back, case["name"]))
    _assert_same_bits(after, before)


def _assert_same_bits(actual, expected):
    assert jax.tree.structure(actual) == jax.tree.structure(expected)
    for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected)):
        assert a.dtype == e.dtype and a.shape == e.shape
        assert np.array_equal(a.view(np.uint32), e.view(np.uint32))


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_flax_to_torch_to_flax_is_bit_exact_for_any_initialised_variables(kind, bidirectional):
    """Random linen variables, a negative zero among the biases, survive the round trip."""
    case = dict(kind=kind, hidden_size=5, bidirectional=bidirectional, batch_first=True)
    x = jnp.ones((2, 4, 3))
    normal = jax.nn.initializers.normal(1.0)
    layers = []
    for k, layer in enumerate(_layers_for_init(dict(case, num_layers=2))):
        variables = jax.eval_shape(layer.init, jax.random.key(k), x)
        leaves, treedef = jax.tree.flatten(variables)
        keys = jax.random.split(jax.random.key(10 + k), len(leaves))
        leaves = [np.array(normal(key, v.shape)) for key, v in zip(keys, leaves)]
        layers.append(jax.tree.unflatten(treedef, leaves))
        x = jax.eval_shape(layer.apply, variables, x)[1]
    bias = layers[0]["params"]["cell" if not bidirectional else "forward_rnn"]
    bias = (bias if not bidirectional else bias["cell"])["hi" if kind == "LSTM" else "hn"]
    bias["bias"][0] = -0.0
    state = TO[kind](layers)
    assert sorted(state) == sorted(_torch_keys(2, bidirectional, bias=True))
    _assert_same_bits(FROM[kind](state), layers)
    _assert_same_bits(FROM[kind](TO[kind](tw.stack_layers(layers))), layers)


def _torch_keys(num_layers, bidirectional, *, bias):
    parts = ["weight_ih", "weight_hh"] + ["bias_ih", "bias_hh"] * bias
    directions = ["", "_reverse"] if bidirectional else [""]
    return [f"{p}_l{k}{d}" for p in parts for k in range(num_layers) for d in directions]


def test_lstm_biases_are_summed_and_put_back_in_bias_ih_with_negative_zeros_in_bias_hh(oracle):
    case = CONVERTED[0]
    assert case["kind"] == "LSTM" and case["bias"]
    state = _state(oracle, case["name"])
    cell = tw.lstm_from_torch(state)[0]["params"]["cell"]
    hidden = case["hidden_size"]
    summed = state["bias_ih_l0"] + state["bias_hh_l0"]
    np.testing.assert_array_equal(cell["hf"]["bias"], summed[hidden : 2 * hidden])
    assert "bias" not in cell["if"]
    back = tw.lstm_to_torch([{"params": {"cell": cell}}])
    np.testing.assert_array_equal(back["bias_ih_l0"], summed)
    assert np.all(back["bias_hh_l0"] == 0) and np.all(np.signbit(back["bias_hh_l0"]))


def test_gru_keeps_b_hn_apart_and_sums_the_reset_and_update_biases(oracle):
    case = next(c for c in CONVERTED if c["kind"] == "GRU" and c["bias"])
    state = _state(oracle, case["name"])
    cell = tw.gru_from_torch(state)[0]["params"]
    cell = cell["cell"] if "cell" in cell else cell["forward_rnn"]["cell"]
    b_ir, b_iz, b_in = np.split(state["bias_ih_l0"], 3)
    b_hr, b_hz, b_hn = np.split(state["bias_hh_l0"], 3)
    np.testing.assert_array_equal(cell["ir"]["bias"], b_ir + b_hr)
    np.testing.assert_array_equal(cell["iz"]["bias"], b_iz + b_hz)
    np.testing.assert_array_equal(cell["in"]["bias"], b_in)
    np.testing.assert_array_equal(cell["hn"]["bias"], b_hn)
    assert "bias" not in cell["hr"] and "bias" not in cell["hz"]


def test_a_module_without_biases_gets_zero_biases_and_converts_back_without_them(oracle):
    case = next(c for c in CONVERTED if not c["bias"])
    state = _state(oracle, case["name"])
    assert not any(k.startswith("bias") for k in state)
    layers = FROM[case["kind"]](state)
    cell = layers[0]["params"]["forward_rnn"]["cell"]
    assert all(np.all(d["bias"] == 0) for d in cell.values() if "bias" in d)
    assert sorted(TO[case["kind"]](layers, bias=False)) == sorted(state)


# -- errors ---------------------------------------------------------------------------------


def _a_state(oracle, kind, **match):
    case = next(c for c in CONVERTED if c["kind"] == kind and c["bias"] and _has(c, match))
    return _state(oracle, case["name"])


def _has(case, match):
    return all(case[k] == v for k, v in match.items())


def test_proj_size_is_refused_because_flax_has_no_projection(oracle):
    state = _state(oracle, "projected")
    assert "weight_hr_l0" in state
    with pytest.raises(ValueError, match=r"\['weight_hr_l0'\].*proj_size > 0.*no Flax equal"):
        tw.lstm_from_torch(state)


def test_an_lstm_state_dict_given_to_the_gru_converter_says_which_it_is(oracle):
    with pytest.raises(ValueError, match=r"weight_hh_l0 shaped \(3 \* hidden_size.*an LSTM's"):
        tw.gru_from_torch(_a_state(oracle, "LSTM"))
    with pytest.raises(ValueError, match=r"weight_hh_l0 shaped \(4 \* hidden_size.*a GRU's"):
        tw.lstm_from_torch(_a_state(oracle, "GRU"))


def test_a_missing_tensor_is_named(oracle):
    state = _a_state(oracle, "LSTM", num_layers=2, bidirectional=True)
    del state["bias_hh_l1_reverse"]
    with pytest.raises(ValueError, match=r"missing \['bias_hh_l1_reverse'\], unexpected \[\]"):
        tw.lstm_from_torch(state)


def test_a_missing_layer_is_named(oracle):
    state = _a_state(oracle, "GRU", num_layers=3, bidirectional=False)
    state = {k: v for k, v in state.items() if "_l1" not in k}
    with pytest.raises(ValueError, match=r"expected layers 0 to 2; got layers \[0, 2\]"):
        tw.gru_from_torch(state)


def test_prefixed_names_are_refused_with_what_to_strip(oracle):
    state = {f"lstm.{k}": v for k, v in _a_state(oracle, "LSTM").items()}
    with pytest.raises(ValueError, match=r"got \['lstm.bias_hh_l0'.*strip it first"):
        tw.lstm_from_torch(state)


def test_shapes_that_do_not_chain_are_named(oracle):
    state = _a_state(oracle, "LSTM", num_layers=2, bidirectional=False)
    hidden = state["weight_hh_l0"].shape[1]
    state["weight_ih_l1"] = np.zeros((4 * hidden, hidden + 1), np.float32)
    want = (
        rf"weight_ih_l1 shaped \({4 * hidden}, {hidden}\); got shape \({4 * hidden}, {hidden + 1}\)"
    )
    with pytest.raises(ValueError, match=want):
        tw.lstm_from_torch(state)
    state = _a_state(oracle, "GRU")
    state["bias_ih_l0"] = state["bias_ih_l0"][:-1]
    with pytest.raises(ValueError, match=r"bias_ih_l0 shaped \(\d+,\); got shape \(\d+,\)"):
        tw.gru_from_torch(state)


def test_directions_that_disagree_on_hidden_size_are_named():
    state = {}
    for d, hidden in (("", 2), ("_reverse", 3)):
        state[f"weight_ih_l0{d}"] = np.zeros((3 * hidden, 4), np.float32)
        state[f"weight_hh_l0{d}"] = np.zeros((3 * hidden, hidden), np.float32)
    with pytest.raises(ValueError, match=r"disagree on hidden_size: 2 forward, 3 reverse"):
        tw.gru_from_torch(state)


def test_a_state_dict_that_is_not_a_mapping_is_a_type_error():
    with pytest.raises(TypeError, match="expected a mapping of names to arrays; got list"):
        tw.lstm_from_torch([np.zeros((4, 1))])
    with pytest.raises(ValueError, match="expected weight_ih_l0 and weight_hh_l0; got none"):
        tw.gru_from_torch({})


def _linen_variables(kind, bidirectional=False):
    layer = _linen_layer(
        dict(kind=kind, hidden_size=3, bidirectional=bidirectional, batch_first=True)
    )
    return layer.init(jax.random.key(0), jnp.ones((1, 2, 2)))


def test_back_conversion_refuses_the_other_kinds_cell_and_names_both_trees():
    with pytest.raises(
        ValueError, match=r"layer 0: expected a LSTM cell's params .*'hi'.*got .*'hn'"
    ):
        tw.lstm_to_torch(_linen_variables("GRU"))
    with pytest.raises(
        ValueError, match=r"layer 0: expected a GRU cell's params .*'hn'.*got .*'hi'"
    ):
        tw.gru_to_torch(_linen_variables("LSTM"))


def test_back_conversion_refuses_a_tree_that_is_no_rnn_or_bidirectional():
    variables = _linen_variables("GRU", bidirectional=True)
    del variables["params"]["backward_rnn"]
    with pytest.raises(ValueError, match=r"layer 0: expected .* got keys \['forward_rnn'\]"):
        tw.gru_to_torch(variables)
    with pytest.raises(ValueError, match="expected at least one layer; got an empty list"):
        tw.gru_to_torch([])
    with pytest.raises(TypeError, match="expected Flax variables, a dict; got int"):
        tw.gru_to_torch(3)


def test_bias_false_refuses_biases_that_are_not_zero():
    variables = _linen_variables("LSTM")
    variables["params"]["cell"]["ho"]["bias"] = jnp.full((3,), 0.5)
    with pytest.raises(ValueError, match=r"layer 0: bias=False asks .*\(largest magnitude 0.5\)"):
        tw.lstm_to_torch(variables, bias=False)
    assert sorted(tw.gru_to_torch(_linen_variables("GRU"), bias=False)) == sorted(
        _torch_keys(1, False, bias=False)
    )
