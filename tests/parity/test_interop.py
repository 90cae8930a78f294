"""Tests for rnnlib.interop: exact conversion between rnnlib (linen layout) and Flax NNX.

Parity tests run the real NNX module and the converted rnnlib one on the same inputs and
initial carry; round-trip tests check that parameters come back bitwise equal; layout
tests pin the NNX parameter names and shapes the conversion relies on.
"""

from __future__ import annotations

import subprocess
import sys
import warnings

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import rnnlib
from rnnlib import interop
from tests.tolerance import assert_close, assert_identical

CELLS = ["LSTMCell", "OptimizedLSTMCell", "GRUCell", "SimpleCell"]
IN, H, BATCH, TIME = 3, 5, 4, 6
LENGTHS = np.array([6, 2, 5, 1])  # no zero: NNX returns a padded step's carry for those
# Rounded terms per element (tests/tolerance.py): a step sums IN + H products and a bias,
# over TIME steps.
TERMS = (IN + H + 1) * TIME

RNN_FLAGS = {
    "default": {},
    "time_major": {"time_major": True},
    "reverse": {"reverse": True},
    "reverse_keep_order": {"reverse": True, "keep_order": True},
    "return_carry": {"return_carry": True},
    "unroll_2": {"unroll": 2, "return_carry": True},
}
# (RNN flags, whether the call passes seq_lengths): each flag once on full sequences, and
# with seq_lengths wherever they change the result (padding flips, final carries).
RNN_SCENARIOS = {
    "default": ("default", False),
    "time_major-seq_lengths": ("time_major", True),
    "reverse": ("reverse", False),
    "reverse-seq_lengths": ("reverse", True),
    "reverse_keep_order-seq_lengths": ("reverse_keep_order", True),
    "return_carry-seq_lengths": ("return_carry", True),
    "unroll_2": ("unroll_2", False),
}


# -- helpers ----------------------------------------------------------------------------------


def make_nnx_cell(name, seed=0, **kwargs):
    """An NNX cell with random biases too, so that misplaced biases show in the numbers."""
    kwargs.setdefault("bias_init", jax.nn.initializers.normal(1.0))
    return getattr(nnx, name)(IN, H, rngs=nnx.Rngs(seed), **kwargs)


def randomized(variables, seed=0):
    """``variables`` with every leaf redrawn from N(0, 0.5), except a GRU's ``hn/bias``,
    which is set to zero (the one value NNX can represent)."""
    leaves, tree = jax.tree_util.tree_flatten(variables)
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    leaves = [0.5 * jax.random.normal(k, x.shape, x.dtype) for k, x in zip(keys, leaves)]
    return zero_hn_bias(jax.tree_util.tree_unflatten(tree, leaves))


def zero_hn_bias(tree):
    if not isinstance(tree, dict):
        return tree
    out = {k: zero_hn_bias(v) for k, v in tree.items()}
    if "hn" in out and "bias" in out["hn"]:
        out["hn"] = dict(out["hn"], bias=jnp.zeros_like(out["hn"]["bias"]))
    return out


def init_rnnlib(module, seed=0):
    """Random variables for ``module`` (only the shapes come from ``init``, abstractly)."""
    x = jnp.zeros((BATCH, TIME, IN))
    if isinstance(module, rnnlib.RNNCellBase):
        carry = module.initialize_carry(jax.random.key(0), (BATCH, IN))
        shapes = jax.eval_shape(lambda: module.init(jax.random.key(seed), carry, x[:, 0]))
    else:
        shapes = jax.eval_shape(lambda: module.init(jax.random.key(seed), x))
    return randomized(shapes, seed)


def inputs(time_major=False, seed=1):
    x = jax.random.normal(jax.random.key(seed), (BATCH, TIME, IN))
    return jnp.swapaxes(x, 0, 1) if time_major else x


def random_carry(rnnlib_cell, seed=2):
    carry = rnnlib_cell.initialize_carry(jax.random.key(0), (BATCH, IN))
    leaves, tree = jax.tree_util.tree_flatten(carry)
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    return jax.tree_util.tree_unflatten(
        tree, [jax.random.normal(k, x.shape, x.dtype) for k, x in zip(keys, leaves)]
    )


def nnx_params(module):
    """``{path: array}`` for every ``nnx.Param`` of ``module``, e.g. ``"['cell']['ii']['kernel']"``."""
    flat = jax.tree_util.tree_flatten_with_path(nnx.state(module, nnx.Param))[0]
    return {jax.tree_util.keystr(path).removesuffix(".value"): value for path, value in flat}


def assert_trees_close(a, b):
    assert_close(a, b, terms=TERMS)


def nnx_config(module):
    """The configuration of an NNX module (and its children) that conversion must keep."""
    if isinstance(module, nnx.Bidirectional):
        return (
            "Bidirectional",
            nnx_config(module.forward_rnn),
            nnx_config(module.backward_rnn),
            module.merge_fn,
            module.time_major,
            module.return_carry,
            module.backward_rnn is module.forward_rnn,
            module.backward_rnn.cell is module.forward_rnn.cell,
        )
    if isinstance(module, nnx.RNN):
        flags = (module.time_major, module.return_carry, module.reverse, module.keep_order)
        return ("RNN", nnx_config(module.cell), flags, module.unroll)
    fields = ("in_features", "hidden_features", "dtype", "param_dtype", "activation_fn")
    fields += ("gate_fn",) if hasattr(module, "gate_fn") else ("residual",)
    return (type(module).__name__,) + tuple(getattr(module, f) for f in fields)


# -- layouts ----------------------------------------------------------------------------------

NNX_LAYOUT = {
    "LSTMCell": {
        **{f"['{n}']['kernel']": (IN, H) for n in ("ii", "if_", "ig", "io")},
        **{f"['{n}']['kernel']": (H, H) for n in ("hi", "hf", "hg", "ho")},
        **{f"['{n}']['bias']": (H,) for n in ("hi", "hf", "hg", "ho")},
    },
    "OptimizedLSTMCell": {
        "['dense_i']['kernel']": (IN, 4 * H),
        "['dense_h']['kernel']": (H, 4 * H),
        "['dense_h']['bias']": (4 * H,),
    },
    "GRUCell": {
        "['dense_i']['kernel']": (IN, 3 * H),
        "['dense_i']['bias']": (3 * H,),
        "['dense_h']['kernel']": (H, 3 * H),
    },
    "SimpleCell": {
        "['dense_i']['kernel']": (IN, H),
        "['dense_i']['bias']": (H,),
        "['dense_h']['kernel']": (H, H),
    },
}


@pytest.mark.parametrize("name", CELLS)
def test_nnx_cells_have_the_parameter_names_and_shapes_the_conversion_assumes(name):
    shapes = {path: tuple(x.shape) for path, x in nnx_params(make_nnx_cell(name)).items()}
    assert shapes == NNX_LAYOUT[name]


def test_nnx_lstm_and_optimized_lstm_parameters_are_not_interchangeable():
    plain = nnx_params(make_nnx_cell("LSTMCell"))
    fused = nnx_params(make_nnx_cell("OptimizedLSTMCell"))
    assert not set(plain) & set(fused)


def test_lstm_forget_gate_input_layer_is_if_in_rnnlib_and_if__in_nnx():
    cell = rnnlib.LSTMCell(features=H)
    variables = init_rnnlib(cell)
    converted = interop.to_nnx(cell, variables)
    assert_identical(
        nnx_params(converted)["['if_']['kernel']"], variables["params"]["if"]["kernel"]
    )
    back, back_variables = interop.from_nnx(converted)
    assert "if" in back_variables["params"] and "if_" not in back_variables["params"]


def test_optimized_lstm_fused_columns_are_gates_i_f_g_o_with_the_bias_on_the_hidden_side():
    cell = rnnlib.OptimizedLSTMCell(features=H)
    params = init_rnnlib(cell)["params"]
    converted = nnx_params(interop.to_nnx(cell, {"params": params}))
    for k, gate in enumerate("ifgo"):
        block = slice(k * H, (k + 1) * H)
        assert_identical(converted["['dense_i']['kernel']"][:, block], params[f"i{gate}"]["kernel"])
        assert_identical(converted["['dense_h']['kernel']"][:, block], params[f"h{gate}"]["kernel"])
        assert_identical(converted["['dense_h']['bias']"][block], params[f"h{gate}"]["bias"])
    assert "['dense_i']['bias']" not in converted


def test_gru_fused_columns_are_gates_r_z_n_with_biases_on_the_input_side_only():
    cell = rnnlib.GRUCell(features=H)
    params = init_rnnlib(cell)["params"]
    converted = nnx_params(interop.to_nnx(cell, {"params": params}))
    for k, gate in enumerate("rzn"):
        block = slice(k * H, (k + 1) * H)
        assert_identical(converted["['dense_i']['kernel']"][:, block], params[f"i{gate}"]["kernel"])
        assert_identical(converted["['dense_i']['bias']"][block], params[f"i{gate}"]["bias"])
        assert_identical(converted["['dense_h']['kernel']"][:, block], params[f"h{gate}"]["kernel"])
    assert "['dense_h']['bias']" not in converted


def test_from_nnx_gives_a_gru_a_zero_hn_bias_since_nnx_has_none():
    _, variables = interop.from_nnx(make_nnx_cell("GRUCell"))
    hn = variables["params"]["hn"]
    assert hn["bias"].shape == (H,) and not np.any(np.asarray(hn["bias"]))
    assert all("bias" not in variables["params"][n] for n in ("hr", "hz"))


def test_simple_cell_layers_i_and_h_are_nnx_dense_i_and_dense_h():
    cell = rnnlib.SimpleCell(features=H)
    params = init_rnnlib(cell)["params"]
    converted = nnx_params(interop.to_nnx(cell, {"params": params}))
    assert_identical(converted["['dense_i']['kernel']"], params["i"]["kernel"])
    assert_identical(converted["['dense_i']['bias']"], params["i"]["bias"])
    assert_identical(converted["['dense_h']['kernel']"], params["h"]["kernel"])


@pytest.mark.parametrize("name", CELLS)
def test_carries_have_the_same_structure_and_order_in_both(name):
    nnx_cell = make_nnx_cell(name)
    cell, variables = interop.from_nnx(nnx_cell)
    nnx_carry = nnx_cell.initialize_carry((BATCH, IN), nnx.Rngs(0))
    ours = cell.initialize_carry(jax.random.key(0), (BATCH, IN))
    assert jax.tree_util.tree_structure(nnx_carry) == jax.tree_util.tree_structure(ours)
    # Feed distinct c and h: swapping them would change the step's result.
    carry = random_carry(cell)
    assert_trees_close(
        nnx_cell(carry, inputs()[:, 0]), cell.apply(variables, carry, inputs()[:, 0])
    )


def test_one_set_of_rnnlib_variables_drives_both_nnx_lstm_layouts_alike():
    variables = init_rnnlib(rnnlib.LSTMCell(features=H))
    plain = interop.to_nnx(rnnlib.LSTMCell(features=H), variables)
    fused = interop.to_nnx(rnnlib.OptimizedLSTMCell(features=H), variables)
    carry = random_carry(rnnlib.LSTMCell(features=H))
    assert_trees_close(plain(carry, inputs()[:, 0]), fused(carry, inputs()[:, 0]))


def test_folding_the_hn_bias_into_the_in_bias_would_change_the_outputs():
    """Why to_nnx refuses a non-zero hn bias: b_hn sits inside r * (h W_hn + b_hn)."""
    cell = rnnlib.GRUCell(features=H)
    params = init_rnnlib(cell)["params"]
    b_hn = jnp.full((H,), 0.5)
    with_bias = dict(params, hn=dict(params["hn"], bias=b_hn))
    folded = dict(params, **{"in": dict(params["in"], bias=params["in"]["bias"] + b_hn)})
    carry, x = random_carry(cell), inputs()[:, 0]
    _, y_true = cell.apply({"params": with_bias}, carry, x)
    _, y_folded = interop.to_nnx(cell, {"params": folded})(carry, x)
    assert np.max(np.abs(np.asarray(y_true) - np.asarray(y_folded))) > 1e-3


# -- parity: NNX -> rnnlib --------------------------------------------------------------------


@pytest.mark.parametrize("name", CELLS)
def test_from_nnx_cell_step_matches_nnx(name):
    nnx_cell = make_nnx_cell(name)
    cell, variables = interop.from_nnx(nnx_cell)
    assert type(cell) is getattr(rnnlib, name)
    carry, x = random_carry(cell), inputs()[:, 0]
    assert_trees_close(cell.apply(variables, carry, x), nnx_cell(carry, x))


@pytest.mark.parametrize("scenario", list(RNN_SCENARIOS))
@pytest.mark.parametrize("name", CELLS)
def test_from_nnx_rnn_matches_nnx(name, scenario):
    flags, with_lengths = RNN_SCENARIOS[scenario]
    options = RNN_FLAGS[flags]
    nnx_rnn = nnx.RNN(make_nnx_cell(name), **options)
    rnn, variables = interop.from_nnx(nnx_rnn)
    assert (rnn.time_major, rnn.reverse, rnn.keep_order, rnn.return_carry, rnn.unroll) == (
        nnx_rnn.time_major,
        nnx_rnn.reverse,
        nnx_rnn.keep_order,
        nnx_rnn.return_carry,
        nnx_rnn.unroll,
    )
    x = inputs(options.get("time_major", False))
    call = dict(initial_carry=random_carry(rnn.cell))
    if with_lengths:
        call["seq_lengths"] = jnp.asarray(LENGTHS)
    assert_trees_close(rnn.apply(variables, x, **call), nnx_rnn(x, **call))


SHARING = ["separate", "same_rnn", "same_cell"]


def make_nnx_bidirectional(name, sharing, **options):
    forward = nnx.RNN(make_nnx_cell(name, seed=0))
    if sharing == "same_rnn":
        backward = forward
    elif sharing == "same_cell":
        backward = nnx.RNN(forward.cell)
    else:
        backward = nnx.RNN(make_nnx_cell(name, seed=1))
    return nnx.Bidirectional(forward, backward, **options)


@pytest.mark.parametrize("sharing", SHARING)
@pytest.mark.parametrize("name", CELLS)
def test_from_nnx_bidirectional_matches_nnx(name, sharing):
    nnx_bi = make_nnx_bidirectional(name, sharing, return_carry=True)
    bi, variables = interop.from_nnx(nnx_bi)
    assert bi.return_carry and bi.shares_parameters == (sharing != "separate")
    assert set(variables["params"]) == (
        {"forward_rnn", "backward_rnn"} if sharing == "separate" else {"forward_rnn"}
    )
    carry = (random_carry(bi.forward_rnn.cell, 2), random_carry(bi.forward_rnn.cell, 3))
    x, lengths = inputs(), jnp.asarray(LENGTHS)
    assert_trees_close(
        bi.apply(variables, x, initial_carry=carry, seq_lengths=lengths),
        nnx_bi(x, initial_carry=carry, seq_lengths=lengths),
    )


@pytest.mark.parametrize("with_lengths", [False, True], ids=["full", "seq_lengths"])
@pytest.mark.parametrize("time_major", [False, True], ids=["batch_major", "time_major"])
def test_from_nnx_bidirectional_keeps_time_major_and_merge_fn(time_major, with_lengths):
    def merge(forward, backward):
        return forward - 2.0 * backward

    nnx_bi = make_nnx_bidirectional("LSTMCell", "separate", time_major=time_major, merge_fn=merge)
    bi, variables = interop.from_nnx(nnx_bi)
    assert bi.time_major == time_major and bi.merge_fn is merge
    call = {"seq_lengths": jnp.asarray(LENGTHS)} if with_lengths else {}
    x = inputs(time_major)
    assert_trees_close(bi.apply(variables, x, **call), nnx_bi(x, **call))


def test_from_nnx_maps_nnx_default_merge_fn_to_rnnlib_default():
    bi, _ = interop.from_nnx(make_nnx_bidirectional("GRUCell", "separate"))
    assert bi.merge_fn is rnnlib.bidirectional.concatenate


# -- parity: rnnlib -> NNX --------------------------------------------------------------------


@pytest.mark.parametrize("name", CELLS)
def test_to_nnx_cell_step_matches_rnnlib(name):
    cell = getattr(rnnlib, name)(features=H)
    variables = init_rnnlib(cell)
    nnx_cell = interop.to_nnx(cell, variables)
    assert type(nnx_cell) is getattr(nnx, name)
    assert (nnx_cell.in_features, nnx_cell.hidden_features) == (IN, H)
    carry, x = random_carry(cell), inputs()[:, 0]
    assert_trees_close(nnx_cell(carry, x), cell.apply(variables, carry, x))


@pytest.mark.parametrize("scenario", list(RNN_SCENARIOS))
@pytest.mark.parametrize("name", CELLS)
def test_to_nnx_rnn_matches_rnnlib(name, scenario):
    flags, with_lengths = RNN_SCENARIOS[scenario]
    options = RNN_FLAGS[flags]
    rnn = rnnlib.RNN(getattr(rnnlib, name)(features=H), **options)
    variables = init_rnnlib(rnn)
    nnx_rnn = interop.to_nnx(rnn, variables)
    assert type(nnx_rnn) is nnx.RNN
    x = inputs(options.get("time_major", False))
    call = dict(initial_carry=random_carry(rnn.cell))
    if with_lengths:
        call["seq_lengths"] = jnp.asarray(LENGTHS)
    assert_trees_close(nnx_rnn(x, **call), rnn.apply(variables, x, **call))


def make_rnnlib_bidirectional(name, sharing, **options):
    cell = getattr(rnnlib, name)(features=H)
    forward = rnnlib.RNN(cell)
    if sharing == "same_rnn":
        backward = forward
    elif sharing == "same_cell":
        backward = rnnlib.RNN(cell)
    else:
        backward = rnnlib.RNN(getattr(rnnlib, name)(features=H))
    return rnnlib.Bidirectional(forward, backward, **options)


@pytest.mark.parametrize("sharing", SHARING)
@pytest.mark.parametrize("name", CELLS)
def test_to_nnx_bidirectional_matches_rnnlib(name, sharing):
    bi = make_rnnlib_bidirectional(name, sharing, return_carry=True)
    variables = init_rnnlib(bi)
    nnx_bi = interop.to_nnx(bi, variables)
    assert (nnx_bi.backward_rnn.cell is nnx_bi.forward_rnn.cell) == (sharing != "separate")
    assert (nnx_bi.backward_rnn is nnx_bi.forward_rnn) == (sharing == "same_rnn")
    carry = (random_carry(bi.forward_rnn.cell, 2), random_carry(bi.forward_rnn.cell, 3))
    x, lengths = inputs(), jnp.asarray(LENGTHS)
    assert_trees_close(
        nnx_bi(x, initial_carry=carry, seq_lengths=lengths),
        bi.apply(variables, x, initial_carry=carry, seq_lengths=lengths),
    )


@pytest.mark.parametrize("time_major", [False, True], ids=["batch_major", "time_major"])
def test_to_nnx_bidirectional_keeps_time_major_and_merge_fn(time_major):
    def merge(forward, backward):
        return forward * backward

    bi = make_rnnlib_bidirectional("GRUCell", "separate", time_major=time_major, merge_fn=merge)
    variables = init_rnnlib(bi)
    nnx_bi = interop.to_nnx(bi, variables)
    assert nnx_bi.time_major == time_major and nnx_bi.merge_fn is merge
    x = inputs(time_major)
    lengths = jnp.asarray(LENGTHS)
    assert_trees_close(nnx_bi(x, seq_lengths=lengths), bi.apply(variables, x, seq_lengths=lengths))


# -- configuration ----------------------------------------------------------------------------


def test_from_nnx_keeps_gate_and_activation_functions_dtypes_and_rnn_flags():
    def hard_sigmoid(x):
        return jnp.clip(0.25 * x + 0.5, 0.0, 1.0)

    nnx_cell = make_nnx_cell(
        "GRUCell",
        gate_fn=hard_sigmoid,
        activation_fn=jax.nn.soft_sign,
        dtype=jnp.float32,
        param_dtype=jnp.float32,
    )
    nnx_rnn = nnx.RNN(nnx_cell, time_major=True, reverse=True, keep_order=True, unroll=3)
    rnn, variables = interop.from_nnx(nnx_rnn)
    assert rnn == rnnlib.RNN(
        rnnlib.GRUCell(
            features=H,
            gate_fn=hard_sigmoid,
            activation_fn=jax.nn.soft_sign,
            dtype=jnp.float32,
            param_dtype=jnp.float32,
        ),
        time_major=True,
        reverse=True,
        keep_order=True,
        unroll=3,
    )
    x = inputs(time_major=True)
    assert_trees_close(rnn.apply(variables, x), nnx_rnn(x))


@pytest.mark.parametrize("residual", [False, True])
def test_simple_cell_keeps_residual_and_each_sides_dtype_default(residual):
    nnx_cell = make_nnx_cell("SimpleCell", residual=residual)
    cell, variables = interop.from_nnx(nnx_cell)
    # NNX's SimpleCell defaults to dtype=float32; rnnlib's to None. Each keeps its own.
    assert cell.residual is residual and cell.dtype == jnp.float32
    carry, x = random_carry(cell), inputs()[:, 0]
    assert_trees_close(cell.apply(variables, carry, x), nnx_cell(carry, x))
    assert interop.to_nnx(rnnlib.SimpleCell(features=H, residual=residual), variables).dtype is None


@pytest.mark.parametrize("name", CELLS)
def test_carry_init_travels_so_default_initial_carries_agree(name):
    ones = jax.nn.initializers.ones
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # NNX >= 0.11 prefers carry_init at call time
        nnx_rnn = nnx.RNN(make_nnx_cell(name, carry_init=ones), return_carry=True)
        rnn, variables = interop.from_nnx(nnx_rnn)
        assert rnn.cell.carry_init is ones
        back = interop.to_nnx(rnn, variables)
    assert back.cell.carry_init is ones
    assert_trees_close(rnn.apply(variables, inputs()), nnx_rnn(inputs()))
    assert_trees_close(back(inputs()), nnx_rnn(inputs()))


def test_default_carry_init_is_not_passed_to_nnx():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # NNX >= 0.11 warns when a cell is given carry_init
        interop.to_nnx(rnnlib.LSTMCell(features=H), init_rnnlib(rnnlib.LSTMCell(features=H)))


# -- round trips ------------------------------------------------------------------------------


def _rnnlib_round_trip_cases():
    cases = {}
    for name in CELLS:
        cls = getattr(rnnlib, name)
        cases[f"{name}"] = cls(features=H)
        cases[f"{name}-bfloat16"] = cls(features=H, param_dtype=jnp.bfloat16, dtype=jnp.bfloat16)
        for flags, options in RNN_FLAGS.items():
            cases[f"RNN-{name}-{flags}"] = rnnlib.RNN(cls(features=H), **options)
        for sharing in SHARING:
            cases[f"Bidirectional-{name}-{sharing}"] = make_rnnlib_bidirectional(name, sharing)
    cases["SimpleCell-residual"] = rnnlib.SimpleCell(features=H, residual=True)
    cases["LSTMCell-custom-fns"] = rnnlib.LSTMCell(
        features=H, gate_fn=jax.nn.hard_sigmoid, activation_fn=jax.nn.soft_sign
    )
    cases["Bidirectional-time_major-return_carry"] = make_rnnlib_bidirectional(
        "LSTMCell", "separate", time_major=True, return_carry=True
    )
    return cases


RNNLIB_CASES = _rnnlib_round_trip_cases()


@pytest.mark.parametrize("case", list(RNNLIB_CASES))
def test_rnnlib_to_nnx_to_rnnlib_is_exact(case):
    module = RNNLIB_CASES[case]
    variables = init_rnnlib(module)
    back, back_variables = interop.from_nnx(interop.to_nnx(module, variables))
    assert back == module
    assert_identical(back_variables, variables)
    if isinstance(module, rnnlib.Bidirectional):
        assert back.shares_parameters == module.shares_parameters
        assert (back.backward_rnn is back.forward_rnn) == (
            module.backward_rnn is module.forward_rnn
        )


def _nnx_round_trip_cases():
    cases = {}
    for name in CELLS:
        cases[name] = lambda name=name: make_nnx_cell(name)
        # NNX's default orthogonal initializer cannot run in bfloat16 on CPU.
        cases[f"{name}-bfloat16"] = lambda name=name: make_nnx_cell(
            name,
            dtype=jnp.bfloat16,
            param_dtype=jnp.bfloat16,
            recurrent_kernel_init=jax.nn.initializers.normal(0.3),
        )
        for flags, options in RNN_FLAGS.items():
            cases[f"RNN-{name}-{flags}"] = lambda name=name, o=options: nnx.RNN(
                make_nnx_cell(name), **o
            )
        for sharing in SHARING:
            cases[f"Bidirectional-{name}-{sharing}"] = lambda name=name, s=sharing: (
                make_nnx_bidirectional(name, s)
            )
    cases["SimpleCell-residual"] = lambda: make_nnx_cell("SimpleCell", residual=True)
    cases["Bidirectional-time_major-return_carry"] = lambda: make_nnx_bidirectional(
        "GRUCell", "separate", time_major=True, return_carry=True
    )
    return cases


NNX_CASES = _nnx_round_trip_cases()


@pytest.mark.parametrize("case", list(NNX_CASES))
def test_nnx_to_rnnlib_to_nnx_is_exact(case):
    original = NNX_CASES[case]()
    back = interop.to_nnx(*interop.from_nnx(original))
    assert type(back) is type(original)
    assert nnx_config(back) == nnx_config(original)
    want, got = nnx_params(original), nnx_params(back)
    assert set(got) == set(want)
    for path in want:
        assert_identical(got[path], want[path])


# -- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["cell", "rnn", "bidirectional"])
def test_to_nnx_refuses_a_gru_with_nonzero_hn_bias_naming_the_parameter(where):
    cell = rnnlib.GRUCell(features=H)
    module = {
        "cell": cell,
        "rnn": rnnlib.RNN(cell),
        "bidirectional": make_rnnlib_bidirectional("GRUCell", "separate"),
    }[where]
    variables = init_rnnlib(module)
    params = variables["params"]
    layer = {
        "cell": lambda p: p,
        "rnn": lambda p: p["cell"],
        "bidirectional": lambda p: p["backward_rnn"]["cell"],
    }
    hn = layer[where](params)["hn"]
    hn["bias"] = hn["bias"].at[2].set(-0.75)
    path = {
        "cell": "params/hn/bias",
        "rnn": "params/cell/hn/bias",
        "bidirectional": "params/backward_rnn/cell/hn/bias",
    }[where]
    with pytest.raises(ValueError) as info:
        interop.to_nnx(module, variables)
    message = str(info.value)
    assert f"{path} is non-zero (max |b| = 0.75)" in message
    assert "flax.nnx.GRUCell has no bias on the hidden side of the candidate gate" in message


def test_to_nnx_converts_a_gru_whose_hn_bias_is_exactly_zero():
    cell = rnnlib.GRUCell(features=H)
    variables = init_rnnlib(cell)
    assert not np.any(np.asarray(variables["params"]["hn"]["bias"]))
    assert type(interop.to_nnx(cell, variables)) is nnx.GRUCell


@pytest.mark.parametrize("name", ["MGUCell", "ConvLSTMCell"])
@pytest.mark.parametrize("wrapped", [False, True], ids=["cell", "in_rnn"])
def test_to_nnx_refuses_cells_nnx_does_not_have_and_says_what_to_use(name, wrapped):
    cell = (
        rnnlib.MGUCell(features=H)
        if name == "MGUCell"
        else rnnlib.ConvLSTMCell(features=H, kernel_size=(3,))
    )
    module = rnnlib.RNN(cell) if wrapped else cell
    with pytest.raises(TypeError, match=rf"flax\.nnx has no {name}") as info:
        interop.to_nnx(module, {"params": {}})
    assert f"flax.linen.{name}" in str(info.value) and "ToNNX" in str(info.value)


class _MyGRU(rnnlib.GRUCell):
    pass


@pytest.mark.parametrize(
    "module, expected",
    [
        (lambda: make_nnx_cell("GRUCell"), "from_nnx converts in the other direction"),
        (lambda: nn.GRUCell(features=H), "got flax.linen.recurrent.GRUCell"),
        (lambda: "GRUCell", "got builtins.str"),
    ],
    ids=["nnx_module", "linen_module", "string"],
)
def test_to_nnx_refuses_what_is_not_an_rnnlib_module(module, expected):
    with pytest.raises(TypeError, match="to_nnx expects an rnnlib") as info:
        interop.to_nnx(module(), {"params": {}})
    assert expected in str(info.value)


def test_to_nnx_refuses_subclassed_cells():
    cell = _MyGRU(features=H)
    with pytest.raises(TypeError, match="not subclasses.*_MyGRU"):
        interop.to_nnx(rnnlib.RNN(cell), init_rnnlib(rnnlib.RNN(rnnlib.GRUCell(features=H))))


def test_to_nnx_refuses_a_bidirectional_whose_direction_is_not_an_rnn():
    forward = rnnlib.RNN(rnnlib.GRUCell(features=H))
    bi = rnnlib.Bidirectional(forward, rnnlib.Bidirectional(forward, forward))
    with pytest.raises(TypeError, match="its backward_rnn is rnnlib.bidirectional.Bidirectional"):
        interop.to_nnx(bi, {"params": {"forward_rnn": {}, "backward_rnn": {}}})


def _without_hf(variables):
    cell = dict(variables["params"]["cell"])
    del cell["hf"]
    return {"params": {"cell": cell}}


def _with_cell_layer(name, layer):
    def edit(variables):
        return {"params": {"cell": dict(variables["params"]["cell"], **{name: layer})}}

    return edit


@pytest.mark.parametrize(
    "edit, error, match",
    [
        (lambda v: [1, 2], TypeError, r"expects variables shaped \{'params'"),
        (lambda v: {"param": v["params"]}, ValueError, "'params' collection"),
        (lambda v: {"params": {}}, ValueError, "no entry 'cell'"),
        (_without_hf, ValueError, "needs the parameter params/cell/hf"),
        (
            _with_cell_layer("ho", {"kernel": jnp.zeros((H, H + 1)), "bias": jnp.zeros(H)}),
            ValueError,
            r"params/cell/ho/kernel with shape \(5, 5\)",
        ),
        (
            _with_cell_layer("ii", {"kernel": jnp.zeros(IN)}),
            ValueError,
            r"params/cell/ii/kernel shaped \(in_features, 5\); got \(3,\)",
        ),
    ],
    ids=["not_a_dict", "no_params", "no_cell", "missing_layer", "wrong_shape", "kernel_not_2d"],
)
def test_to_nnx_refuses_variables_that_do_not_fit_the_module(edit, error, match):
    rnn = rnnlib.RNN(rnnlib.LSTMCell(features=H))
    with pytest.raises(error, match=match):
        interop.to_nnx(rnn, edit(init_rnnlib(rnn)))


class _MyNNXGRU(nnx.GRUCell):
    pass


@pytest.mark.parametrize(
    "make, hint",
    [
        (lambda: nnx.Linear(IN, H, rngs=nnx.Rngs(0)), "got flax.nnx"),
        (lambda: nn.LSTMCell(features=H), "flax.linen modules need no conversion"),
        (lambda: rnnlib.LSTMCell(features=H), "to_nnx converts in the other direction"),
        (lambda: _MyNNXGRU(IN, H, rngs=nnx.Rngs(0)), "Subclasses are refused"),
        (lambda: None, "got builtins.NoneType"),
    ],
    ids=["nnx_linear", "linen_cell", "rnnlib_cell", "nnx_subclass", "none"],
)
def test_from_nnx_refuses_what_it_cannot_convert(make, hint):
    with pytest.raises(TypeError, match="from_nnx expects a flax.nnx") as info:
        interop.from_nnx(make())
    assert hint in str(info.value)


def test_from_nnx_refuses_an_rnn_around_an_unsupported_cell():
    with pytest.raises(TypeError, match="the RNN at params wraps .*_MyNNXGRU"):
        interop.from_nnx(nnx.RNN(_MyNNXGRU(IN, H, rngs=nnx.Rngs(0))))


def test_from_nnx_refuses_a_bidirectional_whose_direction_is_not_an_rnn():
    forward = nnx.RNN(make_nnx_cell("LSTMCell"))
    with pytest.raises(TypeError, match="its backward_rnn is flax.nnx"):
        interop.from_nnx(nnx.Bidirectional(forward, make_nnx_cell("LSTMCell")))


def test_from_nnx_refuses_a_custom_promote_dtype():
    if "promote_dtype" not in nnx.GRUCell.__init__.__code__.co_varnames:
        pytest.skip("this flax.nnx has no promote_dtype option")

    def promote_to_float16(args, /, *, dtype=None, inexact=True):
        return tuple(None if a is None else jnp.asarray(a, jnp.float16) for a in args)

    cell = make_nnx_cell("GRUCell", promote_dtype=promote_to_float16)
    with pytest.raises(
        ValueError, match="params/cell has a custom promote_dtype .*promote_to_float16"
    ):
        interop.from_nnx(nnx.RNN(cell))


def test_from_nnx_refuses_state_axes_that_scan_parameters_over_time():
    if not hasattr(nnx.RNN(make_nnx_cell("GRUCell")), "state_axes"):
        pytest.skip("this flax.nnx's RNN has no state_axes option")
    carry = nnx.transforms.iteration.Carry
    rnn = nnx.RNN(make_nnx_cell("GRUCell"), state_axes=nnx.StateAxes({nnx.Param: 0, ...: carry}))
    with pytest.raises(ValueError, match="The nnx.RNN at params has state_axes="):
        interop.from_nnx(rnn)


@pytest.mark.parametrize(
    "name, layer, columns", [("OptimizedLSTMCell", "dense_h", 4), ("GRUCell", "dense_i", 3)]
)
def test_from_nnx_refuses_a_fused_kernel_of_the_wrong_width(name, layer, columns):
    cell = make_nnx_cell(name)
    kernel = getattr(cell, layer).kernel
    wrong = jnp.zeros((kernel.shape[0], columns * H + 1))
    if hasattr(kernel, "set_value"):
        kernel.set_value(wrong)
    else:
        kernel.value = wrong
    with pytest.raises(
        ValueError, match=rf"params/{layer}/kernel should have {columns} x hidden_features"
    ):
        interop.from_nnx(cell)


# -- linen and packaging ----------------------------------------------------------------------


def test_linen_variables_apply_in_rnnlib_unchanged():
    x = inputs()[:, 0]
    linen_cell = nn.LSTMCell(features=H, bias_init=jax.nn.initializers.normal(1.0))
    carry = random_carry(rnnlib.LSTMCell(features=H))
    variables = linen_cell.init(jax.random.key(0), carry, x)
    assert_trees_close(
        rnnlib.LSTMCell(features=H).apply(variables, carry, x),
        linen_cell.apply(variables, carry, x),
    )
    # ... and so linen variables reach NNX through to_nnx.
    assert_trees_close(
        interop.to_nnx(rnnlib.LSTMCell(features=H), variables)(carry, x),
        linen_cell.apply(variables, carry, x),
    )


def test_importing_rnnlib_does_not_import_flax():
    code = "import sys, rnnlib; assert 'flax' not in sys.modules, sorted(m for m in sys.modules if 'flax' in m)"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_interop_is_reachable_as_rnnlib_interop():
    import rnnlib.interop as module

    assert module.from_nnx is interop.from_nnx and module.to_nnx is interop.to_nnx
