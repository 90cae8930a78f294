"""The choices rnnlib makes for speed change the program, never the numbers.

``RNN(hoist_inputs=...)`` moves the input projection before the loop or into it; on
CPU ``ConvLSTMCell`` takes its kernel's derivative as a matmul over patches, a large
``LSTMCell`` runs one matmul per gate, the gated cells take their kernel gradients
gate by gate, and small fused kernels and biases hand their gradients back to the
gates by matmul (``rnnlib.fast.join_gates``); ``rnnlib.fast.plan`` decides, and
``rnnlib.fast.reference()`` switches every rule off. Each path is checked against the
other, against the reference path and against flax.linen, and the structure each
promises (where the matmuls are, which convolutions the backward pass runs) is read off
the jaxpr.
"""

import functools
import math
from unittest import mock

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rnnlib
import rnnlib.fast
from rnnlib.fast import _conv_filter_grad_by_patches, conv
from rnnlib.linear import lax_conv as _conv
from tests.parity_helpers import CELLS_BY_ID, random_array, random_lengths, sequence_input
from tests.tolerance import assert_close, assert_identical, recurrent_terms

TIME = 5
CELL_IDS = ["LSTMCell", "GRUCell", "MGUCell-reset_gate", "SimpleCell-residual", "ConvLSTMCell-2d"]


def _loss(output):
    leaves = jax.tree_util.tree_leaves(output)
    return sum(jnp.sum(jnp.sin(leaf * (i + 1))) for i, leaf in enumerate(leaves))


def _rnn_terms(cell, x, *, gradient=True):
    """Rounded terms per element of an RNN's outputs and (by default) gradients."""
    return recurrent_terms(cell, x.shape, steps=TIME, gradient=gradient)


def _equations(jaxpr, inside_loop=False):
    """``(equation, inside a scan body)`` for every equation, recursively."""
    found = []
    for eqn in jaxpr.eqns:
        found.append((eqn, inside_loop))
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                sub = getattr(sub, "jaxpr", sub)  # a ClosedJaxpr holds its Jaxpr
                if hasattr(sub, "eqns"):
                    found += _equations(sub, inside_loop or eqn.primitive.name == "scan")
    return found


def _count(jaxpr, name):
    """``(inside the loop, outside it)`` counts of primitive ``name``."""
    hits = [inside for eqn, inside in _equations(jaxpr) if eqn.primitive.name == name]
    return sum(hits), len(hits) - sum(hits)


def _outputs_and_gradients(cell, variables, x, lengths, hoist):
    """``((carry, outputs), gradients of _loss wrt (variables, x))`` of a jitted RNN of
    ``cell`` with ``seq_lengths=lengths``, its projection hoisted or not."""
    rnn = rnnlib.RNN(cell, return_carry=True, hoist_inputs=hoist)

    def loss(variables, x):
        return _loss(rnn.apply(variables, x, seq_lengths=lengths))

    outputs = jax.jit(rnn.apply)(variables, x, seq_lengths=lengths)
    return outputs, jax.jit(jax.grad(loss, argnums=(0, 1)))(variables, x)


def _case_run(cell_id):
    """``(cell, x, variables, run)`` for one of the shared cell cases, where
    ``run(hoist=...)`` is ``_outputs_and_gradients`` of the case's cell on a batch of
    3 sequences of random lengths (zero included)."""
    case = CELLS_BY_ID[cell_id]
    _, cell = case.twins()
    x = sequence_input(0, (3,), TIME, case.feature_shape)
    lengths = random_lengths(1, (3,), TIME, minimum=0)
    variables = rnnlib.RNN(cell).init(jax.random.key(0), x)
    return (
        cell,
        x,
        variables,
        functools.partial(_outputs_and_gradients, cell, variables, x, lengths),
    )


@pytest.mark.parametrize("cell_id", CELL_IDS)
def test_hoisted_and_in_loop_projections_give_the_same_outputs_carry_and_gradients(cell_id):
    cell, x, _, run = _case_run(cell_id)
    assert_close(run(hoist=True), run(hoist=False), terms=_rnn_terms(cell, x))


@pytest.mark.parametrize("cell_id", CELL_IDS)
def test_the_reference_path_has_no_custom_rules_and_the_numbers_of_the_fast_one(cell_id):
    """``rnnlib.fast.reference()`` switches off every rule of ``rnnlib.fast``: the
    forward program holds no custom derivative, and outputs, carry and gradients agree
    with the default path up to rounding."""
    cell, x, variables, run = _case_run(cell_id)

    def program():
        """(custom derivative rules in the forward program, the training step's jaxpr)."""
        jaxpr = jax.make_jaxpr(rnnlib.RNN(cell).apply)(variables, x).jaxpr
        rules = sum(eqn.primitive.name == "custom_jvp_call" for eqn, _ in _equations(jaxpr))
        loss = lambda v: _loss(rnnlib.RNN(cell).apply(v, x))  # noqa: E731
        return rules, str(jax.make_jaxpr(jax.grad(loss))(variables))

    fast = run(hoist=False), *program()
    with rnnlib.fast.reference():
        reference = run(hoist=False), *program()
    assert reference[1] == 0
    # On CPU the ConvLSTM's patches rule and the LSTM's and the GRU's whole-sequence rules
    # are custom ones; the MGU computes gate by gate on every backend.
    assert (fast[1] > 0) == (
        (ON_CPU and cell_id == "ConvLSTMCell-2d")
        or (LSTM_SEQUENCE and cell_id == "LSTMCell")
        or (GRU_SEQUENCE and cell_id == "GRUCell")
    )
    differs = (ON_CPU and cell_id in ("LSTMCell", "GRUCell", "ConvLSTMCell-2d")) or (
        cell_id.startswith("MGUCell")
    )
    assert (fast[2] != reference[2]) == differs
    assert_close(fast[0], reference[0], terms=_rnn_terms(cell, x))


def test_both_paths_keep_complex_inputs_complex():
    cell = rnnlib.LSTMCell(features=3)
    x = random_array(0, (2, TIME, 4), jnp.complex64)
    variables = rnnlib.RNN(cell).init(jax.random.key(0), x.real)
    hoisted = rnnlib.RNN(cell, hoist_inputs=True).apply(variables, x)
    in_loop = rnnlib.RNN(cell, hoist_inputs=False).apply(variables, x)
    assert hoisted.dtype == in_loop.dtype == jnp.complex64
    assert_close(hoisted, in_loop, terms=_rnn_terms(cell, x, gradient=False))


@pytest.mark.parametrize("hoist, inside, outside", [(True, 1, 1), (False, 2, 0)])
def test_hoisting_moves_the_input_matmul_of_an_lstm_out_of_the_loop(hoist, inside, outside):
    rnn = rnnlib.RNN(rnnlib.LSTMCell(features=4), hoist_inputs=hoist)
    x = jnp.ones((2, TIME, 3))
    variables = rnn.init(jax.random.key(0), x)
    jaxpr = jax.make_jaxpr(rnn.apply)(variables, x).jaxpr
    assert _count(jaxpr, "dot_general") == (inside, outside)


def test_hoist_inputs_default_follows_the_backend_and_an_explicit_choice_wins():
    cell = rnnlib.GRUCell(features=4)
    assert rnnlib.RNN(cell).hoists_inputs == (jax.default_backend() != "cpu")
    assert rnnlib.RNN(cell, hoist_inputs=True).hoists_inputs is True
    assert rnnlib.RNN(cell, hoist_inputs=False).hoists_inputs is False


# ---------------------------------------------------------------------------
# The convolution's kernel derivative on CPU

CONV_CASES = [  # (window, strides, padding) over a signal of 7 per spatial dim
    ((3, 3), (1, 1), "SAME"),
    ((3,), (2,), ((2, 1),)),
    ((2, 3, 1), (1, 2, 1), ((0, 1), (1, 1), (0, 0))),
    ((3, 3), (1, 1), "VALID"),
    ((3,), (1,), "CIRCULAR"),
    ((4,), (1,), "CAUSAL"),
]


def _conv_case(window, dtype=jnp.float32):
    rank = len(window)
    x = random_array(0, (2,) + (7,) * rank + (3,), dtype)
    kernel = random_array(1, window + (3, 5), dtype, scale=0.3)
    bias = random_array(2, (5,), dtype)
    return x, kernel, bias


@pytest.mark.parametrize(
    "window, strides, padding", [c for c in CONV_CASES if c[2] not in ("CIRCULAR", "CAUSAL")]
)
def test_patches_rule_gives_lax_convolution_derivatives(window, strides, padding):
    x, kernel, _ = _conv_case(window)
    if isinstance(padding, str):
        padding = jax.lax.padtype_to_pads(x.shape[1:-1], window, strides, padding)
    pads = tuple(tuple(int(p) for p in pair) for pair in padding)

    def bind(fn):
        return lambda x, k: fn(x, k, strides, pads)

    plain, patches = bind(_conv), bind(_conv_filter_grad_by_patches)
    y = plain(x, kernel)
    # A window's sum per output; the kernel's derivative also sums over every output row.
    terms = math.prod(window) * x.shape[-1] + math.prod(y.shape[:-1])
    assert_close(patches(x, kernel), y, terms=terms)

    def pullback(fn):  # a VJP with a cotangent that is not all ones
        return jax.vjp(fn, x, kernel)[1](jnp.cos(y))

    assert_close(pullback(patches), pullback(plain), terms=terms)
    tangents = (jnp.cos(x), jnp.cos(kernel))
    assert_close(
        jax.jvp(patches, (x, kernel), tangents), jax.jvp(plain, (x, kernel), tangents), terms=terms
    )

    def curvature(fn):  # a Hessian-vector product: reverse over forward
        loss = lambda k: jnp.sum(jnp.sin(fn(x, k)))  # noqa: E731
        return jax.grad(lambda k: jax.jvp(loss, (k,), (k,))[1])(kernel)

    assert_close(curvature(patches), curvature(plain), terms=2 * terms)


@pytest.mark.parametrize(
    "window, strides, padding, dtype",
    [case + (jnp.float32,) for case in CONV_CASES]
    + [case + (jnp.complex64,) for case in CONV_CASES[:2]],
)
def test_conv_gradients_equal_a_plain_lax_convolution(window, strides, padding, dtype):
    x, kernel, bias = _conv_case(window, dtype)
    padding = rnnlib.linear.conv_padding(padding, len(window))

    def ours(x, kernel, bias):
        return conv(x, kernel, bias, strides, padding, 1)

    def reference(x, kernel, bias):  # the same convolution, differentiated by JAX's own rules
        shifted = x
        mode = padding
        if padding in ("CIRCULAR", "CAUSAL"):
            widths = [((k - 1) // 2, k // 2) for k in window]
            if padding == "CAUSAL":
                widths = [(window[0] - 1, 0)]
            wrap = "wrap" if padding == "CIRCULAR" else "constant"
            shifted = jnp.pad(x, [(0, 0)] + widths + [(0, 0)], mode=wrap)
            mode = "VALID"
        numbers = ("NWC", "WIO", "NWC") if len(window) == 1 else None
        if numbers is None:
            spec = "N" + "DHW"[-len(window) :] + "C"
            numbers = (spec, "DHW"[-len(window) :] + "IO", spec)
        y = jax.lax.conv_general_dilated(shifted, kernel, strides, mode, dimension_numbers=numbers)
        return y + bias

    y = reference(x, kernel, bias)
    # A window's sum per output; the kernel's and bias's derivatives sum over every row.
    terms = math.prod(window) * x.shape[-1] + 1 + math.prod(y.shape[:-1])
    assert_close(ours(x, kernel, bias), y, terms=terms)

    def pullback(fn):  # a VJP with a cotangent that is not all ones
        return jax.vjp(fn, x, kernel, bias)[1](jnp.cos(y))

    assert_close(pullback(ours), pullback(reference), terms=terms)


def test_on_cpu_a_conv_lstm_trains_without_a_kernel_gradient_convolution():
    """In the loop: the input and hidden convolutions forward; backward, JAX's own rules
    add one for the hidden state's gradient and one per kernel. On CPU the kernels'
    derivatives are matmuls over patches instead."""
    rnn = rnnlib.RNN(rnnlib.ConvLSTMCell(features=3, kernel_size=(3, 3)))
    x = jnp.ones((2, TIME, 6, 6, 2))
    variables = rnn.init(jax.random.key(0), x)
    params_only = jax.make_jaxpr(jax.grad(lambda v: _loss(rnn.apply(v, x))))(variables).jaxpr
    inside, _ = _count(params_only, "conv_general_dilated")
    assert inside == (3 if jax.default_backend() == "cpu" else 5)


def _tree_of_shapes(tree):
    return jax.tree_util.tree_map(lambda leaf: (tuple(leaf.shape), jnp.dtype(leaf.dtype)), tree)


KEY = jax.random.key(0)
SHAPE_VARIANTS = [
    {},
    {"param_dtype": jnp.bfloat16},
    {"param_dtype": jnp.complex64},
    {"bias_init": None},
    {"features": 7},
]


@pytest.mark.parametrize("variant", SHAPE_VARIANTS, ids=lambda v: ",".join(v) or "default")
@pytest.mark.parametrize("cell_id", sorted(CELLS_BY_ID))
def test_written_param_shapes_are_the_shapes_create_params_makes(cell_id, variant):
    """The built-in cells write their parameter shapes out rather than tracing their
    initializers; the two must agree for every cell and option."""
    case = CELLS_BY_ID[cell_id]
    if "bias_init" in variant and "ConvLSTMCell" in cell_id:
        variant = {"use_bias": False}
    if "bias_init" in variant and cell_id.startswith("MGUCell"):
        variant = {"forget_bias_init": None, "activation_bias_init": None}
    _, cell = case.twins(**variant)
    for width in (1, 5):
        step_shape = (2,) + case.feature_shape[:-1] + (width,)
        traced = jax.eval_shape(functools.partial(cell.create_params, input_shape=step_shape), KEY)
        with mock.patch("jax.eval_shape", side_effect=AssertionError("param_shapes traced")):
            written = cell.param_shapes(step_shape)
        assert _tree_of_shapes(written) == _tree_of_shapes(traced)


def test_a_subclass_with_its_own_create_params_gets_traced_param_shapes():
    class PeepholeLSTM(rnnlib.LSTMCell):
        def create_params(self, key, input_shape):
            params = super().create_params(key, input_shape)
            params["peephole"] = {"kernel": jnp.zeros((self.features, 3 * self.features))}
            return params

    cell = PeepholeLSTM(features=4)
    assert cell.param_shapes((2, 3))["peephole"]["kernel"].shape == (4, 12)
    assert "peephole" not in rnnlib.LSTMCell(features=4).param_shapes((2, 3))


# ---------------------------------------------------------------------------
# LSTMCell's per-gate matmuls at large sizes on CPU

ON_CPU = jax.default_backend() == "cpu"


def _no_joins():
    """No GRU joins its kernels inside the step, whatever its batch (the tests of the
    GRU's other forms run small batches, which would take that form)."""
    return mock.patch.object(rnnlib.fast, "GRU_JOINED_IN_STEP_MAX_ROWS", 0)


# Where RNN runs an LSTM or a GRU with its whole-sequence rule (rnnlib.fast.lstm_sequence,
# gru_sequence): on CPU, with a JAX that can take the rule's gradient (jax 0.4.30 cannot;
# rnnlib then keeps the forms plan chooses).
LSTM_SEQUENCE = ON_CPU and rnnlib.fast.jax_transposes_lstm_sequence()
GRU_SEQUENCE = ON_CPU and rnnlib.fast.jax_transposes_gru_sequence()
# Each cell's rule, and whether this machine and JAX take it.
SEQUENCE_RULES = {
    "LSTMCell": ("lstm_sequence", LSTM_SEQUENCE),
    "OptimizedLSTMCell": ("lstm_sequence", LSTM_SEQUENCE),
    "GRUCell": ("gru_sequence", GRU_SEQUENCE),
}


@pytest.mark.pinned_env
@pytest.mark.parametrize("rule", ["lstm_sequence", "gru_sequence"])
def test_the_pinned_jax_takes_the_whole_sequence_rules(rule):
    """The check that decides where a rule applies must not fail on the versions the book
    pins (older ones may fall back)."""
    assert getattr(rnnlib.fast, f"jax_transposes_{rule}")()


def _no_sequence_rule(rule):
    """No cell runs its sequence with ``rule``, so the tests of the forms ``plan`` chooses
    for the gates see those forms."""
    return mock.patch.object(rnnlib.fast, f"runs_{rule}", lambda *args: False)


def _no_lstm_sequence():
    return _no_sequence_rule("lstm_sequence")


def _no_gru_sequence():
    return _no_sequence_rule("gru_sequence")


@pytest.mark.skipif(not ON_CPU, reason="the per-gate form is chosen on CPU only")
@pytest.mark.parametrize(
    "cell_id, batch, hoist",
    [  # OptimizedLSTMCell is LSTMCell under another name: no case of its own
        ("LSTMCell", (2, 3), False),
        ("LSTMCell", (2, 3), True),
        ("LSTMCell-custom_fns", (3,), False),
    ],
)
def test_per_gate_and_fused_lstm_matmuls_give_the_same_outputs_carry_and_gradients(
    cell_id, batch, hoist
):
    _, cell = CELLS_BY_ID[cell_id].twins()
    x = sequence_input(0, batch, TIME, (3,))
    lengths = random_lengths(1, batch, TIME, minimum=0)
    variables = rnnlib.RNN(cell).init(jax.random.key(0), x)
    fused = _outputs_and_gradients(cell, variables, x, lengths, hoist)
    with mock.patch.object(rnnlib.fast, "SEPARATE_GATES_MIN_SIZE", 1):
        assert rnnlib.fast.plan(cell, x.shape[:-2] + x.shape[-1:]).hidden.per_gate == ON_CPU
        per_gate = _outputs_and_gradients(cell, variables, x, lengths, hoist)
    assert_close(per_gate, fused, terms=_rnn_terms(cell, x))


@pytest.mark.skipif(not ON_CPU, reason="the per-gate form is chosen on CPU only")
@pytest.mark.parametrize(
    "fields, dtype",
    [
        ({"bias_init": None}, jnp.float32),
        ({"dtype": jnp.bfloat16}, jnp.float32),
        ({}, jnp.complex64),
    ],
    ids=["no-bias", "bfloat16", "complex64"],
)
def test_per_gate_lstm_keeps_dtypes_and_missing_biases(fields, dtype):
    cell = rnnlib.LSTMCell(features=4, **fields)
    x = random_array(0, (2, TIME, 3), dtype)
    variables = rnnlib.RNN(cell).init(jax.random.key(0), x.real)
    fused = rnnlib.RNN(cell).apply(variables, x)
    with mock.patch.object(rnnlib.fast, "SEPARATE_GATES_MIN_SIZE", 1):
        per_gate = rnnlib.RNN(cell).apply(variables, x)
    assert per_gate.dtype == fused.dtype
    # With dtype=bfloat16 the cell rounds in bfloat16: that epsilon counts (None: the result's).
    assert_close(
        per_gate, fused, terms=_rnn_terms(cell, x, gradient=False), compute_dtype=cell.dtype
    )


@pytest.mark.parametrize(
    "batch, hoist, inside, outside",
    [
        (255, False, 2, 0),  # 255 x 512 rows x features: fused, both matmuls in the loop
        (256, False, 8, 0),  # 256 x 512 = 2**17: one matmul per gate and side
        (256, True, 4, 4),  # hoisted: four input matmuls before the loop
        # Hoisted: decided from one step's 8 x 512 rows x features, not from the 64 x 8
        # rows projected before the loop, so both sides are fused.
        (8, True, 1, 1),
    ],
)
def test_lstm_matmuls_run_per_gate_from_two_to_the_17_rows_times_features_on_cpu(
    batch, hoist, inside, outside
):
    rnn = rnnlib.RNN(rnnlib.LSTMCell(features=512), hoist_inputs=hoist)
    x = jax.ShapeDtypeStruct((batch, 64, 16), jnp.float32)
    variables = jax.eval_shape(rnn.init, jax.random.key(0), x)
    with _no_lstm_sequence():
        jaxpr = jax.make_jaxpr(rnn.apply)(variables, x).jaxpr
    if not ON_CPU:
        inside, outside = (1, 1) if hoist else (2, 0)
    assert _count(jaxpr, "dot_general") == (inside, outside)


def test_a_large_per_gate_lstm_matches_flax_in_value_and_gradient():
    """No patched threshold: 256 x 512 takes the per-gate form on CPU (the fused one
    elsewhere), and both must equal flax.linen's LSTM."""
    flax_rnn, rnn = (lib.RNN(lib.LSTMCell(features=512)) for lib in (nn, rnnlib))
    x = random_array(0, (256, 2, 8), jnp.float32)
    variables = flax_rnn.init(jax.random.key(0), x)
    assert rnnlib.fast.plan(rnnlib.LSTMCell(features=512), (256, 8)).hidden.per_gate == ON_CPU
    _assert_loss_and_gradients_close(rnn, flax_rnn, variables, x)


def _value_and_grad(rnn, variables, x):
    """``_loss`` of ``rnn``'s outputs and its gradient wrt ``(variables, x)``, jitted."""

    def loss(variables, x):
        return _loss(rnn.apply(variables, x))

    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(variables, x)


def _assert_loss_and_gradients_close(rnn, flax_rnn, variables, x):
    """rnnlib's ``_value_and_grad`` equals flax.linen's up to rounding. The loss is a sum
    of sines (each at most 1 in size) over every output, so its scale is 1, not its value."""
    (loss, grads), (flax_loss, flax_grads) = (
        _value_and_grad(each, variables, x) for each in (rnn, flax_rnn)
    )
    terms = _rnn_terms(rnn.cell, x)
    assert_close(loss, flax_loss, terms=terms + x[..., :1].size * rnn.cell.features, scale=1.0)
    assert_close(grads, flax_grads, terms=terms)


# ---------------------------------------------------------------------------
# Kernels joined inside the step (rnnlib.fast.plan) for small batches on CPU


@pytest.mark.parametrize(
    "cell_name, below, at, joins_at",
    [
        # 8 features: an LSTM joins in the step up to 2**17 / 8 rows, then runs per gate
        ("LSTMCell", 2**17 // 8 - 1, 2**17 // 8, 0),
        ("GRUCell", 63, 64, 4),
    ],
)
def test_the_kernels_are_joined_inside_the_step_on_cpu(cell_name, below, at, joins_at):
    """An LSTM short of the per-gate form, a GRU below 64 rows: the step joins each
    side's kernels (and the biases of a side that has any: an LSTM's hidden side, both
    sides of a GRU), so the loop of the forward pass holds the joins and the backward
    loop cuts each join's cotangent into its gates. From ``at`` on, a GRU joins once,
    before the loop (cutting the cotangents after it), and an LSTM joins nothing."""
    rnn = rnnlib.RNN(getattr(rnnlib, cell_name)(features=8))

    def program(batch):
        """(joins inside the forward loop, before it), and the arrays cut out by split
        or slice inside the training step's loops."""
        x = jax.ShapeDtypeStruct((batch, 4, 6), jnp.float32)
        variables = jax.eval_shape(rnn.init, jax.random.key(0), x)
        forward = jax.make_jaxpr(rnn.apply)(variables, x).jaxpr
        loss = lambda v: jnp.sum(rnn.apply(v, jnp.ones(x.shape)))  # noqa: E731
        train = jax.make_jaxpr(jax.grad(loss))(variables).jaxpr
        cut = sum(
            len(eqn.outvars)
            for eqn, inside in _equations(train)
            if inside and eqn.primitive.name in ("split", "slice")
        )
        return _count(forward, "concatenate"), cut

    assert rnnlib.fast.plan(rnn.cell, (below, 6)).hidden.joined_in_step == ON_CPU
    assert not rnnlib.fast.plan(rnn.cell, (at, 6)).input.joined_in_step
    joins = 3 if cell_name == "LSTMCell" else 4
    with _no_lstm_sequence(), _no_gru_sequence():
        (joined, joined_cut), (fused, fused_cut) = program(below), program(at)
    if ON_CPU:
        assert fused == (0, joins_at)
    else:
        assert fused == (0, joins)
    if ON_CPU:
        assert joined == (joins, 0)
        assert joined_cut > fused_cut
    else:
        assert (joined, joined_cut) == (fused, fused_cut)


@pytest.mark.parametrize("cell_id", ["LSTMCell", "GRUCell", "LSTMCell-custom_fns"])
@pytest.mark.parametrize("hoist", [False, True])
def test_joined_in_step_and_reference_agree_to_the_second_order(cell_id, hoist):
    """Kernels joined inside the step (the default for these few sequences on CPU)
    against the reference path: outputs, carry, gradients, a JVP and a Hessian-vector
    product, with sequences of different lengths."""
    _, cell = CELLS_BY_ID[cell_id].twins()
    x = sequence_input(0, (2, 3), TIME, (3,))
    lengths = random_lengths(1, (2, 3), TIME, minimum=0)
    variables = rnnlib.RNN(cell).init(jax.random.key(0), x)
    assert rnnlib.fast.plan(cell, (2, 3, 3)).hidden.joined_in_step == ON_CPU
    joined = _derivatives(cell, variables, x, lengths, hoist)
    with rnnlib.fast.reference():
        reference = _derivatives(cell, variables, x, lengths, hoist)
    assert_close(joined, reference, terms=_rnn_terms(cell, x))


# ---------------------------------------------------------------------------
# Kernel gradients taken gate by gate (rnnlib.fast.plan) from 2**14 on CPU


def _derivatives(cell, variables, x, lengths, hoist):
    """Outputs and carry; the gradient of a loss with respect to the variables and the
    inputs; a JVP and a Hessian-vector product (reverse over forward, so the JVP is
    differentiated again) with respect to the variables. One jitted program."""
    rnn = rnnlib.RNN(cell, return_carry=True, hoist_inputs=hoist)
    direction = jax.tree_util.tree_map(
        lambda a: jnp.cos(jnp.arange(a.size)).reshape(a.shape), variables
    )

    def loss(variables, x):
        return _loss(rnn.apply(variables, x, seq_lengths=lengths))

    def forward(variables):
        return jax.jvp(lambda v: loss(v, x), (variables,), (direction,))[1]

    def everything(variables, x):
        return (
            rnn.apply(variables, x, seq_lengths=lengths),
            jax.grad(loss, argnums=(0, 1))(variables, x),
            jax.jvp(lambda v: rnn.apply(v, x, seq_lengths=lengths), (variables,), (direction,)),
            jax.grad(forward)(variables),
        )

    return jax.jit(everything)(variables, x)


@pytest.mark.parametrize(
    "cell_id, hoist",
    [
        ("GRUCell", False),
        ("MGUCell-no_reset_gate", True),
    ],
)
def test_per_gate_and_fused_gradients_agree_to_the_second_order(cell_id, hoist):
    """The per-gate derivative rule (an MGU's per-gate matmuls) against the reference path:
    outputs, carry, gradients (parameters and inputs), a JVP and a Hessian-vector
    product, with sequences of different lengths."""
    _, cell = CELLS_BY_ID[cell_id].twins()
    batch = (2, 3)
    x = sequence_input(0, batch, TIME, (3,))
    lengths = random_lengths(1, batch, TIME, minimum=0)
    variables = rnnlib.RNN(cell).init(jax.random.key(0), x)
    with rnnlib.fast.reference():
        fused = _derivatives(cell, variables, x, lengths, hoist)
    with _no_joins(), mock.patch.object(rnnlib.fast, "PER_GATE_GRADIENT_MIN_SIZE", 1):
        forms = rnnlib.fast.plan(cell, x.shape[:-2] + x.shape[-1:])
        # An MGU computes each gate by its own matmul on every backend.
        assert forms.hidden.per_gate_gradient == (ON_CPU and cell_id != "MGUCell-no_reset_gate")
        per_gate = _derivatives(cell, variables, x, lengths, hoist)
    assert_close(per_gate, fused, terms=_rnn_terms(cell, x))


@pytest.mark.parametrize("cell_name", ["GRUCell"])
def test_a_per_gate_gradient_cell_matches_flax_in_value_and_gradient(cell_name):
    """No patched threshold: 128 rows x 128 features = 2**14 takes the per-gate
    gradient on CPU, and must equal flax.linen in value and gradient. (An LSTM joins
    its kernels in the step there instead.)"""
    flax_rnn, rnn = (lib.RNN(getattr(lib, cell_name)(features=128)) for lib in (nn, rnnlib))
    x = random_array(0, (128, 2, 3), jnp.float32)
    variables = flax_rnn.init(jax.random.key(0), x)
    cell = getattr(rnnlib, cell_name)(features=128)
    assert rnnlib.fast.plan(cell, (128, 3)).hidden.per_gate_gradient == ON_CPU
    assert not rnnlib.fast.plan(cell, (127, 3)).hidden.per_gate_gradient
    with _no_gru_sequence():  # the per-gate gradient, not the whole-sequence rule
        _assert_loss_and_gradients_close(rnn, flax_rnn, variables, x)


@pytest.mark.parametrize(
    "cell_name, batch, backward, after",
    [
        # Per step of the backward loop: dh (1) + each kernel's gradient, fused (1 per
        # side) or per gate (3 per side). After the loop: the fused biases' gradients,
        # cut into the gates by matmul (join_gates; three input biases and one hidden).
        # Where the per-gate rule takes them gate by gate (128) those matmuls are
        # unused: jax 0.4.30 leaves them in the jaxpr for XLA to remove, newer jax
        # removes them itself, so that count is not asserted. (An LSTM joins its
        # kernels in the step at these sizes, and never takes this rule.)
        ("GRUCell", 127, 3, 4),
        ("GRUCell", 128, 7, None),
    ],
)
def test_the_kernel_gradients_are_taken_per_gate_from_two_to_the_14_on_cpu(
    cell_name, batch, backward, after
):
    rnn = rnnlib.RNN(getattr(rnnlib, cell_name)(features=128))
    x = jax.ShapeDtypeStruct((batch, 4, 8), jnp.float32)
    variables = jax.eval_shape(rnn.init, jax.random.key(0), x)

    def loss(v):
        return jnp.sum(rnn.apply(v, jnp.ones(x.shape)))

    with _no_gru_sequence():  # the forms plan chooses, not the whole-sequence rule
        jaxpr = jax.make_jaxpr(jax.grad(loss))(variables).jaxpr
    if not ON_CPU:
        backward, after = 3, 0
    inside, outside = _count(jaxpr, "dot_general")
    assert inside == 2 + backward
    if after is not None:
        assert outside == after


# ---------------------------------------------------------------------------
# The forward pass gate by gate at some widths (rnnlib.fast.plan) on CPU

GATES = {"GRUCell": 3, "LSTMCell": 4}


def _per_gate_forward_widths(above, up_to):
    """Every GRU and LSTM with ``above < features <= up_to`` runs its forward pass gate
    by gate (on CPU)."""
    widths = {kind: {0: (above, up_to)} for kind in rnnlib.fast.PER_GATE_FORWARD_WIDTHS}
    return mock.patch.dict(rnnlib.fast.PER_GATE_FORWARD_WIDTHS, widths)


@pytest.mark.parametrize("cell_name", sorted(GATES))
def test_the_forward_pass_runs_gate_by_gate_between_two_widths_on_cpu(cell_name):
    """Above the first width of ``PER_GATE_FORWARD_WIDTHS``'s band for few rows (4 here)
    and up to the second, the
    forward pass's loop on CPU holds one matmul per gate and side; at the widths
    around them it holds one per side. The training step's matmuls stay where they
    are: only the forward pass changes."""
    above, up_to = rnnlib.fast.PER_GATE_FORWARD_WIDTHS[cell_name][0]
    assert 0 < above < up_to
    k = GATES[cell_name]

    def program(features):
        """Matmuls (inside the loop, outside it) of the forward pass and training step."""
        rnn = rnnlib.RNN(getattr(rnnlib, cell_name)(features=features))
        x = jax.ShapeDtypeStruct((4, 5, 6), jnp.float32)
        variables = jax.eval_shape(rnn.init, jax.random.key(0), x)
        loss = lambda v: jnp.sum(rnn.apply(v, jnp.ones(x.shape)))  # noqa: E731
        forward = jax.make_jaxpr(rnn.apply)(variables, x).jaxpr
        train = jax.make_jaxpr(jax.grad(loss))(variables).jaxpr
        return _count(forward, "dot_general"), _count(train, "dot_general")

    for features in (above, above + 1, up_to, up_to + 1):
        between = ON_CPU and above < features <= up_to
        cell = getattr(rnnlib, cell_name)(features=features)
        assert rnnlib.fast.plan(cell, (4, 6)).hidden.per_gate_forward == between
        forward, train = program(features)
        assert forward == ((2 * k, 0) if between else (2, 0)), features
        with _per_gate_forward_widths(0, 0):
            assert program(features) == ((2, 0), train), features


def test_an_lstm_with_many_rows_runs_its_forward_pass_gate_by_gate_only_above_a_width():
    """An LSTM's second band of ``PER_GATE_FORWARD_WIDTHS`` starts at ``many`` rows per
    step: from there its forward pass stays fused up to a higher width and runs gate by
    gate above it (on CPU); with one row fewer the first band, which starts lower,
    applies."""
    bands = rnnlib.fast.PER_GATE_FORWARD_WIDTHS["LSTMCell"]
    few, many = sorted(bands)
    (lower, up_to), (above, many_up_to) = bands[few], bands[many]
    assert few == 0 and lower < above < up_to == many_up_to
    for rows, features, between in [
        (many, above, False),
        (many, above + 1, True),
        (many, lower + 1, False),
        (many - 1, lower + 1, True),
        (many - 1, above, True),
        (many - 1, lower, False),
    ]:
        cell = rnnlib.LSTMCell(features=features)
        form = rnnlib.fast.plan(cell, (rows, 3)).hidden
        assert form.per_gate_forward == (ON_CPU and between), (rows, features)
    rnn = rnnlib.RNN(rnnlib.LSTMCell(features=above + 1))
    x = jax.ShapeDtypeStruct((many, 2, 3), jnp.float32)
    variables = jax.eval_shape(rnn.init, jax.random.key(0), x)
    assert _count(jax.make_jaxpr(rnn.apply)(variables, x).jaxpr, "dot_general") == (
        (8, 0) if ON_CPU else (2, 0)
    )


@pytest.mark.parametrize(
    "cell_id, hoist",
    [("GRUCell", False), ("GRUCell", True), ("LSTMCell", False), ("LSTMCell-custom_fns", True)],
)
def test_the_per_gate_forward_and_reference_agree_to_the_second_order(cell_id, hoist):
    """Every width gate by gate in the forward pass, against the reference path:
    outputs, carry, gradients, a JVP and a Hessian-vector product, with sequences of
    different lengths (each cell's gates in the form ``plan`` gives these few rows)."""
    _, cell = CELLS_BY_ID[cell_id].twins()
    x = sequence_input(0, (2, 3), TIME, (3,))
    lengths = random_lengths(1, (2, 3), TIME, minimum=0)
    variables = rnnlib.RNN(cell).init(jax.random.key(0), x)
    with _per_gate_forward_widths(0, 2**30):
        assert rnnlib.fast.plan(cell, (2, 3, 3)).hidden.per_gate_forward == ON_CPU
        per_gate = _derivatives(cell, variables, x, lengths, hoist)
    with rnnlib.fast.reference():
        reference = _derivatives(cell, variables, x, lengths, hoist)
    assert_close(per_gate, reference, terms=_rnn_terms(cell, x))


@pytest.mark.parametrize("cell_name, features", [("GRUCell", 192), ("LSTMCell", 320)])
def test_a_per_gate_forward_cell_matches_flax_in_value_and_gradient(cell_name, features):
    """No patched width: a GRU of 192 features and an LSTM of 320 run their forward pass
    gate by gate on CPU, and equal flax.linen in outputs, loss and gradients."""
    flax_rnn, rnn = (lib.RNN(getattr(lib, cell_name)(features=features)) for lib in (nn, rnnlib))
    x = random_array(0, (3, 4, 5), jnp.float32)
    variables = flax_rnn.init(jax.random.key(0), x)
    cell = getattr(rnnlib, cell_name)(features=features)
    assert rnnlib.fast.plan(cell, (3, 5)).hidden.per_gate_forward == ON_CPU
    terms = _rnn_terms(rnn.cell, x, gradient=False)
    assert_close(jax.jit(rnn.apply)(variables, x), flax_rnn.apply(variables, x), terms=terms)
    _assert_loss_and_gradients_close(rnn, flax_rnn, variables, x)


# ---------------------------------------------------------------------------
# Fused kernels and biases whose gradients leave them by matmul (join_gates)


def _join_derivatives(join, parts, live):
    """Value, JVP, VJP and a Hessian-vector product of a nonlinear function of
    ``join(parts)``, differentiated with respect to the parts whose index is in ``live``
    (the others are constants, so their tangents are symbolic zeros)."""

    def f(*moving):
        it = iter(moving)
        joined = join([next(it) if i in live else p for i, p in enumerate(parts)])
        return joined, jnp.sum(
            jnp.sin(joined) * jnp.cos(jnp.arange(joined.size)).reshape(joined.shape)
        )

    primals = tuple(parts[i] for i in live)
    tangents = tuple(jnp.cos(3.0 * p + 1.0) for p in primals)
    (value, scalar), (jvp_value, _) = jax.jvp(f, primals, tangents)
    (joined, _), pullback = jax.vjp(f, *primals)
    vjp = pullback((jnp.tanh(joined - 0.5), jnp.float32(0.0)))
    hvp = jax.jvp(
        jax.grad(lambda *ps: f(*ps)[1], argnums=tuple(range(len(live)))), primals, tangents
    )[1]
    return value, scalar, jvp_value, vjp, hvp


JOIN_CASES = [
    # (part shape, parts, the indices differentiated)
    ((5, 8), 4, (0, 1, 2, 3)),  # LSTM kernels
    ((3, 4), 3, (0, 2)),  # GRU kernels, one constant part in between
    ((8,), 4, (0, 1, 2, 3)),  # biases, viewed as (2, 4) each
    ((6,), 3, (2,)),  # a GRU's hidden biases: only hn is a parameter
    ((2, 3, 4), 2, (0, 1)),  # more than one leading axis
]


@pytest.mark.parametrize("shape, k, live", JOIN_CASES)
def test_join_gates_has_the_values_and_derivatives_of_a_concatenation(shape, k, live):
    parts = [random_array(i, shape, jnp.float32) for i in range(k)]
    assert rnnlib.fast.join_by_matmul(shape, k) == ON_CPU
    joined = _join_derivatives(rnnlib.fast.join_gates, parts, live)
    concatenated = _join_derivatives(lambda ps: jnp.concatenate(ps, axis=-1), parts, live)
    # Multiplying by one and adding zeros: the same numbers, not merely close ones.
    assert_identical(joined, concatenated)


@pytest.mark.skipif(not ON_CPU, reason="joins differentiate by matmul on CPU only")
@pytest.mark.parametrize(
    "cell_name, matmuls",
    # (An MGU fuses nothing: rnnlib.fast.plan gives it one matmul per gate. An LSTM joins
    # its kernels in the step, so nothing is cut after the loop.)
    [("GRUCell", 3 + 3 + 3 + 1)],
)
def test_a_small_cells_gradient_leaves_its_fused_arrays_by_matmul_not_by_slices(cell_name, matmuls):
    """Batch 8 and 32 features: the kernels and biases of both sides come out of the
    fused arrays by one matmul each after the loop (kernels of both sides, then input
    and hidden biases; a GRU has a hidden bias on its candidate only), where
    plain differentiation splits them."""
    rnn = rnnlib.RNN(getattr(rnnlib, cell_name)(features=32))
    x = jax.ShapeDtypeStruct((8, 4, 32), jnp.float32)
    variables = jax.eval_shape(rnn.init, jax.random.key(0), x)

    def loss(v):
        return jnp.sum(rnn.apply(v, jnp.ones(x.shape)))

    def after_the_loop():
        """(matmuls, arrays cut out by split or slice) outside the loops."""
        jaxpr = jax.make_jaxpr(jax.grad(loss))(variables).jaxpr
        eqns = [eqn for eqn, inside in _equations(jaxpr) if not inside]
        cut = sum(len(e.outvars) for e in eqns if e.primitive.name in ("split", "slice"))
        return sum(e.primitive.name == "dot_general" for e in eqns), cut

    # batch 8 would join the kernels inside the step instead; the forms, not rule 8
    with _no_joins(), _no_gru_sequence():
        joined, cut = after_the_loop()
        with mock.patch.object(rnnlib.fast, "join_by_matmul", return_value=False):
            plain, plain_cut = after_the_loop()
    # One matmul instead of a cut for every kernel and bias (jax < 0.4.36 cuts by slice;
    # newer jax's split also cuts out the zero biases padded in for a GRU's or MGU's
    # other gates, which need no matmul).
    assert (joined, plain) == (matmuls, 0)
    assert plain_cut - cut >= matmuls


@pytest.mark.parametrize(
    "shape, k, expected",
    [
        ((32, 32), 4, True),  # an LSTM kernel with 32 features
        ((64, 32), 4, True),  # 4 * 64 * 32 * 128 = 2**20 multiply-adds
        ((65, 32), 4, False),
        ((1, 32), 4, False),  # one row
        ((32, 1), 4, False),  # one column
        ((512,), 4, True),  # biases of any size: their matmuls are tiny
        ((4,), 3, True),
        ((5,), 3, False),  # odd: no (2, features / 2) view
        ((2,), 3, False),  # (2, 1): one column
    ],
)
def test_joins_differentiate_by_matmul_on_cpu_up_to_two_to_the_20_multiply_adds(shape, k, expected):
    assert rnnlib.fast.join_by_matmul(shape, k) == (expected and ON_CPU)
    with mock.patch.object(jax, "default_backend", return_value="gpu"):
        assert not rnnlib.fast.join_by_matmul(shape, k)


@pytest.mark.parametrize(
    "parts, joined",
    [
        ([jnp.ones((3, 4)), jnp.ones((3, 2))], jnp.ones((3, 6))),  # shapes differ
        ([jnp.ones((3, 4), jnp.bfloat16), jnp.ones((3, 4))], jnp.ones((3, 8))),  # dtypes differ
    ],
    ids=["shapes", "dtypes"],
)
def test_join_gates_of_unlike_parts_is_a_plain_concatenation(parts, joined):
    jaxpr = jax.make_jaxpr(jax.grad(lambda ps: jnp.sum(rnnlib.fast.join_gates(ps))))(parts)
    assert _count(jaxpr.jaxpr, "dot_general") == (0, 0)
    result = rnnlib.fast.join_gates(parts)
    assert result.dtype == jnp.float32  # promoted, as jnp.concatenate does
    np.testing.assert_array_equal(result, joined)


@pytest.mark.skipif(not ON_CPU, reason="joins differentiate by matmul on CPU only")
def test_an_infinite_cotangent_in_one_gate_is_nan_in_the_others_as_documented():
    """What join_gates' docstring warns of: ``inf * 0`` in the selecting matmul."""
    parts = [jnp.ones((2, 4)) for _ in range(4)]
    cotangent = jnp.zeros((2, 16)).at[0, 0].set(jnp.inf)
    _, pullback = jax.vjp(rnnlib.fast.join_gates, parts)
    (grads,) = pullback(cotangent)
    assert grads[0][0, 0] == jnp.inf
    assert jnp.isnan(grads[1][0]).all()
    _, pullback = jax.vjp(lambda ps: jnp.concatenate(ps, axis=-1), parts)
    assert jnp.isfinite(pullback(cotangent)[0][1]).all()


# ---------------------------------------------------------------------------
# An LSTM's or a GRU's whole sequence with its kernel gradients after the loop
# (rnnlib.fast.lstm_sequence, gru_sequence)


def _sequence_derivatives(cell, variables, x, carry, unroll=1):
    """Outputs and final carry; the gradient of a loss with respect to the variables, the
    inputs and the initial carry; a JVP in all three; a Hessian-vector product with
    respect to the variables (reverse over forward). One jitted program, no seq_lengths."""
    rnn = rnnlib.RNN(cell, return_carry=True, unroll=unroll)
    direction = jax.tree_util.tree_map(
        lambda a: jnp.cos(jnp.arange(a.size)).reshape(a.shape), (variables, x, carry)
    )

    def run(variables, x, carry):
        return rnn.apply(variables, x, initial_carry=carry)

    def loss(variables, x, carry):
        return _loss(run(variables, x, carry))

    def forward(variables):
        return jax.jvp(lambda v: loss(v, x, carry), (variables,), (direction[0],))[1]

    def everything(variables, x, carry):
        return (
            run(variables, x, carry),
            jax.grad(loss, argnums=(0, 1, 2))(variables, x, carry),
            jax.jvp(run, (variables, x, carry), direction),
            jax.grad(forward)(variables),
        )

    return jax.jit(everything)(variables, x, carry)


def _takes_sequence_rule(rnn, variables, x, rule=None, **kwargs) -> bool:
    """Whether ``rnn`` runs its sequence with the whole-sequence rule ``rule`` (by
    default its cell's)."""
    rule = rule or SEQUENCE_RULES[type(rnn.cell).__name__][0]
    spy = mock.patch.object(rnnlib.fast, rule, wraps=getattr(rnnlib.fast, rule))
    with spy as called:
        jax.make_jaxpr(lambda v, x: rnn.apply(v, x, **kwargs))(variables, x)
    return called.called


def _sequence_case(cell_name, batch):
    """A cell of 4 features, its input (3 features, ``batch`` axes), variables, and a
    random initial carry."""
    cell = getattr(rnnlib, cell_name)(features=4)
    x = sequence_input(0, batch, TIME, (3,))
    variables = rnnlib.RNN(cell).init(jax.random.key(0), x)
    zeros = cell.initialize_carry(jax.random.key(1), x.shape[:-2] + x.shape[-1:])
    leaves, tree = jax.tree_util.tree_flatten(zeros)
    carry = [random_array(1 + i, leaf.shape, jnp.float32) for i, leaf in enumerate(leaves)]
    return cell, x, variables, jax.tree_util.tree_unflatten(tree, carry)


def _not_taken_here(taken: bool):
    return pytest.mark.skipif(not taken, reason="the whole-sequence rule is not taken here")


@pytest.mark.parametrize(
    "cell_name, batch, unroll",
    [
        ("LSTMCell", (2, 3), 1),
        ("OptimizedLSTMCell", (5,), 3),
        ("LSTMCell", (), 2),
        ("GRUCell", (2, 3), 1),
        ("GRUCell", (5,), 3),
        ("GRUCell", (), 2),
    ],
)
def test_a_sequence_rule_and_reference_agree_to_the_second_order(cell_name, batch, unroll):
    """Outputs, final carry, gradients (variables, inputs, initial carry), a JVP in all
    three and a Hessian-vector product, from a random initial carry; two batch axes, one,
    or none."""
    cell, x, variables, carry = _sequence_case(cell_name, batch)
    _, taken = SEQUENCE_RULES[cell_name]
    assert _takes_sequence_rule(rnnlib.RNN(cell), variables, x) == taken
    fast = _sequence_derivatives(cell, variables, x, carry, unroll)
    with rnnlib.fast.reference():
        assert not _takes_sequence_rule(rnnlib.RNN(cell), variables, x)
        reference = _sequence_derivatives(cell, variables, x, carry, unroll)
    assert_close(fast, reference, terms=_rnn_terms(cell, x))


@pytest.mark.parametrize(
    "cell_name, batch",
    [("LSTMCell", (2, 3)), ("OptimizedLSTMCell", ()), ("GRUCell", (2, 3)), ("GRUCell", ())],
)
def test_a_sequence_rule_with_a_per_gate_forward_agrees_to_the_second_order(cell_name, batch):
    """The whole-sequence rule whose forward loop runs gate by gate (every width, by
    patch) against the reference path: outputs, carry, gradients, a JVP in the
    variables, inputs and initial carry, and a Hessian-vector product."""
    cell, x, variables, carry = _sequence_case(cell_name, batch)
    _, taken = SEQUENCE_RULES[cell_name]
    with _per_gate_forward_widths(0, 2**30):
        assert _takes_sequence_rule(rnnlib.RNN(cell), variables, x) == taken
        per_gate = _sequence_derivatives(cell, variables, x, carry)
    with rnnlib.fast.reference():
        reference = _sequence_derivatives(cell, variables, x, carry)
    assert_close(per_gate, reference, terms=_rnn_terms(cell, x))


@pytest.mark.parametrize(
    "cell_name",
    [
        pytest.param(name, marks=_not_taken_here(SEQUENCE_RULES[name][1]))
        for name in ("LSTMCell", "GRUCell")
    ],
)
def test_a_sequence_rule_takes_the_kernel_gradients_after_the_backward_loop(cell_name):
    """The forward loop holds two matmuls (inputs and hidden state), the backward loop
    one (the cotangent of the hidden side's pre-activations back to ``h``); each side's
    kernel gradient is one matmul after it. Differentiated by JAX (the kernels joined
    once before the loop, their gradients cut by slices), the backward loop holds all
    three."""
    rule, _ = SEQUENCE_RULES[cell_name]
    rnn = rnnlib.RNN(getattr(rnnlib, cell_name)(features=8))
    x = jax.ShapeDtypeStruct((4, 5, 6), jnp.float32)
    variables = jax.eval_shape(rnn.init, jax.random.key(0), x)

    def program():
        loss = lambda v: jnp.sum(rnn.apply(v, jnp.ones(x.shape)))  # noqa: E731
        return _count(jax.make_jaxpr(jax.grad(loss))(variables).jaxpr, "dot_general")

    with mock.patch.object(rnnlib.fast, "join_by_matmul", return_value=False):
        assert program() == (2 + 1, 2)
        with _no_sequence_rule(rule), _no_joins():
            assert program() == (2 + 3, 0)


@pytest.mark.parametrize(
    "cell_name, others",
    [
        pytest.param("LSTMCell", ("GRUCell",), marks=_not_taken_here(LSTM_SEQUENCE)),
        pytest.param("GRUCell", ("MGUCell", "LSTMCell"), marks=_not_taken_here(GRU_SEQUENCE)),
    ],
)
def test_a_sequence_rule_is_left_where_its_equations_or_loop_differ(cell_name, others):
    """Only rnnlib's own LSTM (or GRU) with its default gate functions and dtype, in
    float32, with the projection in the loop and no seq_lengths; everything else, other
    cells included, runs ``step``."""
    x = sequence_input(0, (3,), TIME, (2,))
    cell_class = getattr(rnnlib, cell_name)
    rule, _ = SEQUENCE_RULES[cell_name]

    class Subclass(cell_class):
        pass

    def takes(cell, x=x, **kwargs):
        rnn = rnnlib.RNN(cell, **{k: kwargs.pop(k) for k in ("hoist_inputs",) if k in kwargs})
        variables = rnnlib.RNN(cell).init(jax.random.key(0), x)
        return _takes_sequence_rule(rnn, variables, x, rule, **kwargs)

    assert takes(cell_class(features=4))
    assert takes(cell_class(features=4), return_carry=True)
    assert not takes(cell_class(features=4), hoist_inputs=True)
    assert not takes(cell_class(features=4), seq_lengths=jnp.array([1, 2, 3]), return_carry=True)
    assert not takes(cell_class(features=4, gate_fn=jax.nn.hard_sigmoid))
    assert not takes(cell_class(features=4, activation_fn=jax.nn.relu))
    assert not takes(cell_class(features=4, dtype=jnp.bfloat16))
    assert not takes(cell_class(features=4, param_dtype=jnp.bfloat16))
    assert not takes(cell_class(features=4), x=x.astype(jnp.bfloat16))
    assert not takes(Subclass(features=4))
    for other in others:
        assert not takes(getattr(rnnlib, other)(features=4))


@pytest.mark.parametrize("cell_name", ["LSTMCell", "GRUCell"])
def test_a_sequence_rule_matches_flax_in_value_and_gradient(cell_name):
    """No patched threshold: 16 sequences of 12 steps, 32 features, against flax.linen's
    cell (the whole-sequence rule on CPU, the fused form elsewhere)."""
    flax_rnn, rnn = (lib.RNN(getattr(lib, cell_name)(features=32)) for lib in (nn, rnnlib))
    x = random_array(0, (16, 12, 8), jnp.float32)
    variables = flax_rnn.init(jax.random.key(0), x)
    assert _takes_sequence_rule(rnn, variables, x) == SEQUENCE_RULES[cell_name][1]
    _assert_loss_and_gradients_close(rnn, flax_rnn, variables, x)
