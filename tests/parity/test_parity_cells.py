"""One step of every rnnlib cell against the same cell from flax.linen."""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax.core import freeze

import rnnlib
from tests.parity_helpers import (
    ALL_CELLS,
    BATCH_DIMS,
    BATCH_IDS,
    CELLS_BY_ID,
    CONV_CELLS,
    CUSTOM_FN_CELLS,
    DENSE_CELLS,
    STEP_TERMS,
    assert_each_matches_flax,
    assert_matches_flax,
    assert_same_signature,
    assert_trees_close,
    jit_apply,
    jit_together,
    random_array,
    random_like,
    random_variables,
)
from tests.tolerance import assert_close, assert_identical, recurrent_terms

CELL_CLASSES = [
    "LSTMCell",
    "OptimizedLSTMCell",
    "GRUCell",
    "MGUCell",
    "SimpleCell",
    "ConvLSTMCell",
]
CELL_IDS = [case.id for case in ALL_CELLS]
BUILTIN_CELLS = DENSE_CELLS + CONV_CELLS


def _ids(case):
    return case.id


def _step_input(case, batch_dims, seed, dtype=jnp.float32):
    return random_array(seed, (*batch_dims, *case.feature_shape), dtype)


def _random_carry(cell, seed, x):
    """A random carry with the structure, shapes and dtypes of ``initialize_carry``."""
    return random_like(seed, cell.initialize_carry(jax.random.key(0), x.shape))


def _flax_fields(cls):
    return [f for f in dataclasses.fields(cls) if f.name not in ("parent", "name")]


def _default(field):
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


@pytest.mark.parametrize("name", CELL_CLASSES)
def test_cell_has_flax_fields_in_flax_order_with_equivalent_defaults(name):
    flax_fields = _flax_fields(getattr(nn, name))
    flax_names = [f.name for f in flax_fields]
    ours = {f.name: f for f in dataclasses.fields(getattr(rnnlib, name))}
    assert set(flax_names) <= ours.keys()
    # rnnlib takes dtype, param_dtype and carry_init by keyword only (Flax by position too):
    # the other fields come in Flax's order.
    positional = [n for n in flax_names if not ours[n].kw_only]
    assert [n for n in ours if n in positional] == positional
    assert {n for n in flax_names if ours[n].kw_only} == {"dtype", "param_dtype", "carry_init"}
    key = jax.random.key(3)
    for field in flax_fields:
        want, got = _default(field), _default(ours[field.name])
        if field.name.endswith("_init"):
            # Initializers: the same values for the same key, shape and dtype.
            np.testing.assert_array_equal(
                got(key, (5, 5), jnp.float32), want(key, (5, 5), jnp.float32), err_msg=field.name
            )
        elif field.name.endswith("_fn"):
            x = jnp.linspace(-4.0, 4.0, 17)
            assert_close(got(x), want(x), terms=1, label=field.name)  # one elementwise op
        else:
            assert got == want, field.name


def test_cells_take_required_fields_positionally_like_flax():
    assert rnnlib.LSTMCell(5).features == nn.LSTMCell(5).features == 5
    conv, flax_conv = rnnlib.ConvLSTMCell(3, (2, 2)), nn.ConvLSTMCell(3, (2, 2))
    assert (conv.features, tuple(conv.kernel_size)) == (flax_conv.features, (2, 2))


@pytest.mark.parametrize("case", ALL_CELLS, ids=CELL_IDS)
def test_cell_num_feature_axes_matches_flax(case):
    flax_cell, cell = case.twins()
    assert cell.num_feature_axes == flax_cell.num_feature_axes == len(case.feature_shape)


@pytest.mark.parametrize("batch_dims", BATCH_DIMS, ids=BATCH_IDS)
@pytest.mark.parametrize("case", BUILTIN_CELLS, ids=_ids)
def test_initialize_carry_matches_flax(case, batch_dims):
    flax_cell, cell = case.twins()
    input_shape = (*batch_dims, *case.feature_shape)
    key = jax.random.key(1)
    # The same initializer called with the same key: one computation, so the same bits.
    assert_identical(
        cell.initialize_carry(key, input_shape),
        flax_cell.initialize_carry(key, input_shape),
    )


@pytest.mark.parametrize("case", [DENSE_CELLS[0], DENSE_CELLS[2], CONV_CELLS[0]], ids=_ids)
def test_initialize_carry_with_random_carry_init_matches_flax_values(case):
    carry_init = jax.nn.initializers.normal(1.0)
    flax_cell, cell = case.twins(carry_init=carry_init)
    input_shape = (2, *case.feature_shape)
    for key in (jax.random.key(4), jax.random.PRNGKey(4)):
        # The same initializer called with the same key: one computation, so the same bits.
        assert_identical(
            cell.initialize_carry(key, input_shape),
            flax_cell.initialize_carry(key, input_shape),
        )


@pytest.mark.parametrize("case", DENSE_CELLS + CONV_CELLS[:1], ids=_ids)
def test_cell_init_has_flax_tree_and_flax_applies_it_with_rnnlib_numbers(case):
    flax_cell, cell = case.twins()
    x = _step_input(case, (2,), 0)
    carry = _random_carry(cell, 1, x)
    variables = cell.init(jax.random.key(2), carry, x)
    assert set(variables) == {"params"}
    assert_same_signature(variables, jax.eval_shape(flax_cell.init, jax.random.key(2), carry, x))
    assert_matches_flax(
        cell.apply(variables, carry, x),
        jit_apply(flax_cell, variables, carry, x),
        terms=STEP_TERMS,
    )


@pytest.mark.parametrize(
    "case",
    [CELLS_BY_ID[i] for i in ("LSTMCell", "MGUCell-reset_gate", "ConvLSTMCell-1d")],
    ids=_ids,
)
def test_cell_applies_a_real_flax_init_and_makes_the_same_biases(case):
    flax_cell, cell = case.twins()
    x = _step_input(case, (2,), 0)
    carry = _random_carry(cell, 1, x)
    flax_variables = flax_cell.init(jax.random.key(2), carry, x)
    assert_matches_flax(
        cell.apply(flax_variables, carry, x),
        jit_apply(flax_cell, flax_variables, carry, x),
        terms=STEP_TERMS,
    )
    # Biases come from deterministic initializers (zeros; ones for MGU's forget gate).
    params = cell.init(jax.random.key(2), carry, x)["params"]
    for layer, flax_layer in flax_variables["params"].items():
        if "bias" in flax_layer:
            np.testing.assert_array_equal(params[layer]["bias"], flax_layer["bias"], err_msg=layer)


@pytest.mark.parametrize("case", CUSTOM_FN_CELLS + CONV_CELLS[1:], ids=_ids)
def test_cell_init_has_flax_tree(case):
    flax_cell, cell = case.twins()
    x = _step_input(case, (2,), 0)
    carry = cell.initialize_carry(jax.random.key(1), x.shape)
    assert_same_signature(
        jax.eval_shape(cell.init, jax.random.key(2), carry, x),
        jax.eval_shape(flax_cell.init, jax.random.key(2), carry, x),
    )


@pytest.mark.parametrize("case", DENSE_CELLS, ids=_ids)
def test_cell_recurrent_kernels_are_orthogonal_like_flax(case):
    _, cell = case.twins()
    x = _step_input(case, (2,), 0)
    carry = cell.initialize_carry(jax.random.key(1), x.shape)
    params = cell.init(jax.random.key(2), carry, x)["params"]
    recurrent = [name for name in params if name.startswith("h")]
    assert recurrent
    for name in recurrent:
        kernel = np.asarray(params[name]["kernel"])
        # QR and then this product: about n * n rounded terms per element of an n x n matrix.
        eye = np.eye(kernel.shape[1], dtype=kernel.dtype)
        assert_close(kernel.T @ kernel, eye, terms=kernel.size, label=name)


@pytest.mark.parametrize("case", ALL_CELLS, ids=CELL_IDS)
def test_cell_step_matches_flax_for_every_batch_layout(case):
    flax_cell, cell = case.twins()
    xs = {bid: _step_input(case, bd, i) for i, (bd, bid) in enumerate(zip(BATCH_DIMS, BATCH_IDS))}
    carries = {bid: _random_carry(cell, 10 + i, x) for i, (bid, x) in enumerate(xs.items())}
    variables = random_variables(flax_cell, 2, carries["batch"], xs["batch"])

    # One compiled program for all the cases: compiling dominates the running time.
    def both(variables, carries, xs):
        return {
            bid: (
                cell.apply(variables, carries[bid], x),
                flax_cell.apply(variables, carries[bid], x),
            )
            for bid, x in xs.items()
        }

    assert_each_matches_flax(jit_together(both, variables, carries, xs), terms=STEP_TERMS)


@pytest.mark.parametrize(
    "case",
    [CELLS_BY_ID[i] for i in ("GRUCell", "SimpleCell-residual", "ConvLSTMCell-2d")],
    ids=_ids,
)
def test_cell_init_with_output_returns_the_output_of_its_variables(case):
    flax_cell, cell = case.twins()
    x = _step_input(case, (2,), 0)
    carry = _random_carry(cell, 1, x)
    output, variables = cell.init_with_output(jax.random.key(2), carry, x)
    assert_matches_flax(output, jit_apply(flax_cell, variables, carry, x), terms=STEP_TERMS)


def _step_both(flax_cell, cell, variables, carry, x):
    """One step of each library, compiled together."""
    return jit_together(
        lambda v, c, x: (cell.apply(v, c, x), flax_cell.apply(v, c, x)), variables, carry, x
    )


@pytest.mark.parametrize("case", BUILTIN_CELLS, ids=_ids)
def test_cell_step_with_bfloat16_compute_matches_flax(case):
    flax_cell, cell = case.twins(dtype=jnp.bfloat16)
    x = _step_input(case, (2,), 0)
    carry = _random_carry(cell, 1, x)
    variables = random_variables(flax_cell, 2, carry, x)
    got, expected = _step_both(flax_cell, cell, variables, carry, x)
    # float32 results of a step that rounds in bfloat16: bfloat16's epsilon counts.
    assert_matches_flax(got, expected, terms=STEP_TERMS, compute_dtype=jnp.bfloat16)


COMPLEX_INPUT_CELLS = ["OptimizedLSTMCell", "MGUCell-no_reset_gate", "SimpleCell-residual"]
COMPLEX_PARAM_CELLS = ["LSTMCell", "GRUCell", "MGUCell-reset_gate", "SimpleCell"]


@pytest.mark.parametrize(
    "case", [CELLS_BY_ID[i] for i in COMPLEX_INPUT_CELLS] + CONV_CELLS[1:2], ids=_ids
)
def test_cell_step_with_complex64_inputs_and_float32_params_matches_flax(case):
    flax_cell, cell = case.twins()
    x = _step_input(case, (2,), 0, jnp.complex64)
    carry = _random_carry(cell, 1, x)
    variables = random_variables(flax_cell, 2, carry, x)
    got, expected = _step_both(flax_cell, cell, variables, carry, x)
    assert jax.tree_util.tree_leaves(expected)[-1].dtype == jnp.complex64
    assert_matches_flax(got, expected, terms=STEP_TERMS)


@pytest.mark.parametrize(
    "case", [CELLS_BY_ID[i] for i in COMPLEX_PARAM_CELLS] + CONV_CELLS[:1], ids=_ids
)
def test_cell_with_complex64_params_matches_flax(case):
    flax_cell, cell = case.twins(param_dtype=jnp.complex64)
    x = _step_input(case, (2,), 0, jnp.complex64)
    carry = _random_carry(cell, 1, x)
    assert_same_signature(
        jax.eval_shape(cell.init, jax.random.key(2), carry, x),
        jax.eval_shape(flax_cell.init, jax.random.key(2), carry, x),
    )
    variables = random_variables(flax_cell, 3, carry, x)
    got, expected = _step_both(flax_cell, cell, variables, carry, x)
    assert_matches_flax(got, expected, terms=STEP_TERMS)


@pytest.mark.parametrize("case", [DENSE_CELLS[0], CONV_CELLS[1]], ids=_ids)
def test_cell_accepts_frozendict_variables_and_raw_prng_keys(case):
    flax_cell, cell = case.twins()
    x = _step_input(case, (2,), 0)
    carry = cell.initialize_carry(jax.random.PRNGKey(1), x.shape)
    variables = cell.init(jax.random.PRNGKey(2), carry, x)
    assert_same_signature(variables, jax.eval_shape(cell.init, jax.random.key(2), carry, x))
    frozen = freeze(random_variables(flax_cell, 3, carry, x))
    assert_matches_flax(
        cell.apply(frozen, carry, x), jit_apply(flax_cell, frozen, carry, x), terms=STEP_TERMS
    )


@pytest.mark.parametrize("case", BUILTIN_CELLS + CUSTOM_FN_CELLS[:1], ids=_ids)
def test_cell_gradients_match_flax(case):
    flax_cell, cell = case.twins()
    x = _step_input(case, (2,), 0)
    carry = _random_carry(cell, 1, x)
    variables = random_variables(flax_cell, 2, carry, x)

    def gradients(module, variables, carry, x):
        def loss(variables, carry, x):
            new_carry, y = module.apply(variables, carry, x)
            leaves = jax.tree_util.tree_leaves(new_carry)
            return jnp.sum(jnp.sin(y)) + sum(jnp.sum(leaf**2) for leaf in leaves)

        return jax.grad(loss, argnums=(0, 1, 2))(variables, carry, x)

    got, expected = jit_together(
        lambda *args: (gradients(cell, *args), gradients(flax_cell, *args)), variables, carry, x
    )
    assert_trees_close(got, expected, terms=recurrent_terms(cell, x.shape, steps=1, gradient=True))


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="bit for bit is measured on CPU")
@pytest.mark.parametrize("case_id", ["MGUCell-reset_gate", "MGUCell-no_reset_gate"])
def test_mgu_gives_flax_linens_numbers_bit_for_bit_on_cpu(case_id):
    """One step computes each layer by its own matmul, as flax.linen's Dense layers do,
    and so does RNN under rnnlib.plan.REFERENCE: one step, a whole sequence and its
    gradient come out with the same bits, not merely within rounding. (A joined matmul
    of width 2 * features, the default plan's, differs in the last bits.)"""
    flax_cell, cell = CELLS_BY_ID[case_id].twins(features=32)
    x = random_array(0, (8, 16), jnp.float32)
    carry = _random_carry(cell, 1, x)
    variables = random_variables(flax_cell, 2, carry, x)
    assert_identical(
        jax.jit(cell.apply)(variables, carry, x), jax.jit(flax_cell.apply)(variables, carry, x)
    )
    xs = random_array(3, (8, 7, 16), jnp.float32)
    results = []
    for rnn in (rnnlib.RNN(cell, plan=rnnlib.plan.REFERENCE), nn.RNN(flax_cell)):

        def loss(variables, rnn=rnn):
            return jnp.sum(jnp.sin(rnn.apply(variables, xs)))

        rnn_variables = {"params": {"cell": variables["params"]}}
        results.append(
            (jax.jit(rnn.apply)(rnn_variables, xs), jax.jit(jax.grad(loss))(rnn_variables))
        )
    assert_identical(*results)
