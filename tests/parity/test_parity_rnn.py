"""rnnlib.RNN (and flip_sequences) against flax.linen.RNN, given the same variables."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax.core import freeze
from flax.linen.recurrent import flip_sequences as flax_flip_sequences

import rnnlib
from tests.parity_helpers import (
    ALL_CELLS,
    BATCH_DIMS,
    BATCH_IDS,
    CELLS_BY_ID,
    CONV_CELLS,
    DENSE_CELLS,
    TIME,
    CellCase,
    assert_apply_matches_flax,
    assert_each_matches_flax,
    assert_either_init_matches_flax,
    assert_matches_flax,
    assert_options_match_flax,
    assert_same_signature,
    build_twins,
    flax_reference,
    jit_apply,
    jit_together,
    random_array,
    random_carry,
    random_variables,
    rnn_carries_one_by_one,
    sequence_input,
    sequence_lengths,
)

BUILTIN_CELLS = DENSE_CELLS + CONV_CELLS


def _twin_rnns(case, cell_fields=None, **rnn_fields):
    return build_twins(lambda lib: lib.RNN(case.make(lib, **(cell_fields or {})), **rnn_fields))


# ---------------------------------------------------------------------------
# Parameter trees and the two directions of variable exchange.


@pytest.mark.parametrize("case", ALL_CELLS, ids=lambda c: c.id)
def test_rnn_init_has_flax_tree(case):
    flax_rnn, rnn = _twin_rnns(case)
    x = sequence_input(0, (2,), TIME, case.feature_shape)
    shapes = jax.eval_shape(rnn.init, jax.random.key(1), x)
    assert set(shapes) == {"params"} and set(shapes["params"]) == {"cell"}
    assert_same_signature(shapes, jax.eval_shape(flax_rnn.init, jax.random.key(1), x))


@pytest.mark.parametrize(
    "case", [CELLS_BY_ID["LSTMCell"], CELLS_BY_ID["GRUCell"], CONV_CELLS[0]], ids=lambda c: c.id
)
def test_rnn_init_and_flax_layout_variables_give_the_same_numbers_in_both_libraries(case):
    flax_rnn, rnn = _twin_rnns(case, return_carry=True)
    x = sequence_input(0, (2,), TIME, case.feature_shape)
    # rnnlib init -> Flax apply gives rnnlib's numbers, and variables in Flax's
    # layout -> rnnlib apply gives Flax's numbers.
    assert_either_init_matches_flax(flax_rnn, rnn, x, seq_lengths=sequence_lengths((2,)))


def test_rnn_applies_variables_from_a_real_flax_init_and_init_with_output():
    case = CELLS_BY_ID["LSTMCell"]
    flax_rnn, rnn = _twin_rnns(case)
    x = sequence_input(0, (2,), TIME, case.feature_shape)
    assert_apply_matches_flax(flax_rnn, rnn, flax_rnn.init(jax.random.key(1), x), x)

    output, variables = rnn.init_with_output(jax.random.key(1), x)
    assert_matches_flax(output, jit_apply(flax_rnn, variables, x))


def test_rnn_accepts_frozendict_variables_and_raw_prng_keys():
    case = CELLS_BY_ID["GRUCell"]
    flax_rnn, rnn = _twin_rnns(case)
    x = sequence_input(0, (2,), TIME, case.feature_shape)
    assert_same_signature(
        rnn.init(jax.random.PRNGKey(1), x), jax.eval_shape(flax_rnn.init, jax.random.key(1), x)
    )
    frozen = freeze(random_variables(flax_rnn, 2, x))
    assert_apply_matches_flax(flax_rnn, rnn, frozen, x, init_key=jax.random.PRNGKey(5))


# ---------------------------------------------------------------------------
# Every cell over every batch layout. Each test compiles its cases, rnnlib's and
# Flax's, as one program (see jit_together): compiling dominates the running time.


def _layouts(feature_shape, *, time_major=False):
    """One input per batch layout: no batch dims, one, and two."""
    return {
        batch_id: sequence_input(i, batch_dims, TIME, feature_shape, time_major=time_major)
        for i, (batch_dims, batch_id) in enumerate(zip(BATCH_DIMS, BATCH_IDS))
    }


@pytest.mark.parametrize("case", ALL_CELLS, ids=lambda c: c.id)
def test_rnn_outputs_and_final_carry_match_flax_for_every_cell_and_batch_layout(case):
    flax_rnn, rnn = _twin_rnns(case, return_carry=True)
    xs = _layouts(case.feature_shape)
    variables = random_variables(flax_rnn, 1, xs["batch"])

    def both(variables, xs):
        return {k: (rnn.apply(variables, x), flax_rnn.apply(variables, x)) for k, x in xs.items()}

    assert_each_matches_flax(jit_together(both, variables, xs))


# ---------------------------------------------------------------------------
# The options that interact: seq_lengths x reverse x keep_order x time_major in
# full, each over every batch layout, with the final carry returned.

DIRECTIONS = {
    "forward": dict(reverse=False, keep_order=False),
    "reverse": dict(reverse=True, keep_order=False),
    "reverse-keep_order": dict(reverse=True, keep_order=True),
    "forward-keep_order": dict(reverse=False, keep_order=True),  # keep_order alone: no-op
}


@pytest.mark.parametrize(
    "cell_id, batch_dims",
    [("LSTMCell", ()), ("GRUCell", (2,)), ("LSTMCell", (2, 3))],
    ids=["LSTMCell-no-batch", "GRUCell-batch", "LSTMCell-batch2x3"],
)
def test_rnn_options_match_flax(cell_id, batch_dims):
    case = CELLS_BY_ID[cell_id]
    flax_rnn, rnn = _twin_rnns(case, return_carry=True)
    x = sequence_input(0, batch_dims, TIME, case.feature_shape)
    variables = random_variables(flax_rnn, 1, x)
    cases = {
        f"{direction}-{'time' if time_major else 'batch'}_major-"
        f"{'seq_lengths' if with_lengths else 'full'}": (
            flax_rnn,
            rnn,
            dict(flags, time_major=time_major),
            with_lengths,
        )
        for direction, flags in DIRECTIONS.items()
        for time_major in (False, True)
        for with_lengths in (False, True)
    }
    assert_options_match_flax(
        cases, variables, x, sequence_lengths(batch_dims), num_batch_dims=len(batch_dims)
    )


@pytest.mark.parametrize("where", ["fields", "call"])
def test_rnn_call_arguments_override_fields_like_flax(where):
    case = CELLS_BY_ID["OptimizedLSTMCell"]
    on = dict(time_major=True, reverse=True, keep_order=True, return_carry=True)
    off = {name: False for name in on}
    fields, call = (on, off) if where == "fields" else (off, on)
    flax_rnn, rnn = _twin_rnns(case, **fields)
    time_major = call["time_major"]
    x = sequence_input(0, (2,), TIME, case.feature_shape, time_major=time_major)
    variables = random_variables(flax_rnn, 1, x, time_major=time_major)
    lengths = sequence_lengths((2,))
    expected = jit_apply(flax_rnn, variables, x, seq_lengths=lengths, **call)
    assert isinstance(expected, tuple) == call["return_carry"]
    assert_matches_flax(rnn.apply(variables, x, seq_lengths=lengths, **call), expected)


def test_rnn_unroll_matches_flax():
    case = CELLS_BY_ID["MGUCell-reset_gate"]
    x = sequence_input(0, (3,), TIME, case.feature_shape)
    lengths = sequence_lengths((3,))
    cases = {
        "unroll3-reverse-seq_lengths": (3, dict(reverse=True, seq_lengths=lengths)),
        "unroll3-forward-seq_lengths": (3, dict(seq_lengths=lengths)),
        "unroll7_over_time-reverse-full": (7, dict(reverse=True)),
    }
    twins = {name: _twin_rnns(case, unroll=u, return_carry=True) for name, (u, _) in cases.items()}
    variables = random_variables(twins["unroll3-forward-seq_lengths"][0], 1, x)

    def both(variables, x, lengths):
        return {
            name: (
                twins[name][1].apply(variables, x, **_with_lengths(options, lengths)),
                twins[name][0].apply(variables, x, **_with_lengths(options, lengths)),
            )
            for name, (_, options) in cases.items()
        }

    assert_each_matches_flax(jit_together(both, variables, x, lengths))


def _with_lengths(options, lengths):
    """``options`` with its ``seq_lengths`` (if any) replaced by the traced ``lengths``."""
    return dict(options, seq_lengths=lengths) if "seq_lengths" in options else options


# ---------------------------------------------------------------------------
# ConvLSTM in 1-D, 2-D and 3-D, with explicit strides and size-preserving padding,
# each over every batch layout.

CONV_CONFIGS = {
    "1d": {
        "same": (dict(kernel_size=(3,), strides=(1,), padding="SAME"), (6, 2), ()),
        "explicit": (dict(kernel_size=(2,), strides=(1,), padding=((0, 1),)), (5, 2), (2,)),
        "circular": (
            dict(kernel_size=(3,), padding="CIRCULAR", use_bias=False),
            (6, 2),
            (2, 3),
        ),
    },
    "2d": {
        "explicit": (
            dict(kernel_size=(3, 3), strides=(1, 1), padding=((1, 1), (1, 1)), use_bias=False),
            (4, 5, 2),
            (),
        ),
        "same": (dict(kernel_size=(2, 3), padding="SAME"), (4, 3, 2), (2,)),
        "explicit-strides": (
            dict(kernel_size=(2, 2), strides=(1, 1), padding=((0, 1), (1, 0))),
            (3, 3, 1),
            (2, 3),
        ),
    },
    "3d": {
        "same": (dict(kernel_size=(2, 2, 2), strides=(1, 1, 1), padding="SAME"), (3, 3, 2, 2), ()),
        "explicit": (
            dict(kernel_size=(3, 1, 2), padding=((1, 1), (0, 0), (0, 1)), use_bias=False),
            (3, 2, 3, 1),
            (2,),
        ),
        "same-no_bias": (
            dict(kernel_size=(1, 2, 1), strides=(1, 1, 1), padding="SAME", use_bias=False),
            (2, 2, 2, 1),
            (2, 3),
        ),
    },
}


@pytest.mark.parametrize("dims", list(CONV_CONFIGS))
def test_conv_lstm_rnn_matches_flax(dims):
    twins, inputs, lengths, variables = {}, {}, {}, {}
    for i, (name, (fields, feature_shape, batch_dims)) in enumerate(CONV_CONFIGS[dims].items()):
        case = CellCase(name, lambda lib, fields=fields: lib.ConvLSTMCell(features=3, **fields), ())
        time_major = len(batch_dims) == 1  # one layout of each dimensionality is time-major
        name = f"{name}-{len(batch_dims)}batch{'-time_major' if time_major else ''}"
        twins[name] = _twin_rnns(case, return_carry=True, time_major=time_major, reverse=True)
        inputs[name] = sequence_input(i, batch_dims, TIME, feature_shape, time_major=time_major)
        lengths[name] = sequence_lengths(batch_dims, seed=i)
        variables[name] = random_variables(twins[name][0], i, inputs[name])
        assert_same_signature(
            jax.eval_shape(twins[name][1].init, jax.random.key(2), inputs[name]), variables[name]
        )

    def both(variables, inputs, lengths):
        return {
            name: (
                rnn.apply(variables[name], inputs[name], seq_lengths=lengths[name]),
                flax_reference(
                    flax_rnn,
                    variables[name],
                    inputs[name],
                    num_batch_dims=lengths[name].ndim,
                    seq_lengths=lengths[name],
                ),
            )
            for name, (flax_rnn, rnn) in twins.items()
        }

    assert_each_matches_flax(jit_together(both, variables, inputs, lengths))


# ---------------------------------------------------------------------------
# bfloat16 compute and complex numbers.


BFLOAT16_CELLS = ["LSTMCell", "GRUCell", "MGUCell-reset_gate", "SimpleCell", "SimpleCell-residual"]
COMPLEX_PARAM_CELLS = ["LSTMCell", "GRUCell", "MGUCell-reset_gate", "SimpleCell"]
COMPLEX_INPUT_CELLS = ["OptimizedLSTMCell", "MGUCell-no_reset_gate", "SimpleCell-residual"]


@pytest.mark.parametrize(
    "case", [CELLS_BY_ID[i] for i in BFLOAT16_CELLS] + CONV_CELLS[1:2], ids=lambda c: c.id
)
def test_rnn_with_bfloat16_compute_matches_flax(case):
    flax_rnn, rnn = _twin_rnns(case, {"dtype": jnp.bfloat16}, return_carry=True)
    x = sequence_input(0, (2,), TIME, case.feature_shape)
    # Flax cannot even trace this RNN for a SimpleCell (see below), so the
    # parameter layout is read from the cell.
    carry = flax_rnn.cell.initialize_carry(jax.random.key(0), x[:, 0].shape)
    cell_variables = random_variables(flax_rnn.cell, 1, carry, x[:, 0])
    variables = {"params": {"cell": cell_variables["params"]}}
    lengths = sequence_lengths((2,))
    # Flax's scan needs the carry's dtype fixed from the start. A SimpleCell computing
    # in bfloat16 returns a bfloat16 carry from a float32 one, so Flax is given the
    # initial carry in the dtype the cell computes, which is what rnnlib promotes to.
    step_carry, _ = jax.eval_shape(flax_rnn.cell.apply, cell_variables, carry, x[:, 0])
    initial_carry = jax.tree_util.tree_map(lambda c, s: c.astype(s.dtype), carry, step_carry)

    def both(variables, x, lengths):
        return (
            rnn.apply(variables, x, seq_lengths=lengths),
            flax_rnn.apply(variables, x, seq_lengths=lengths, initial_carry=initial_carry),
        )

    # The cells round in bfloat16 whatever dtype they return: bfloat16's epsilon counts.
    assert_matches_flax(*jit_together(both, variables, x, lengths), compute_dtype=jnp.bfloat16)


@pytest.mark.parametrize(
    "case", [CELLS_BY_ID[i] for i in COMPLEX_PARAM_CELLS] + CONV_CELLS[:1], ids=lambda c: c.id
)
def test_rnn_with_complex64_params_matches_flax(case):
    flax_rnn, rnn = _twin_rnns(case, {"param_dtype": jnp.complex64}, return_carry=True)
    x = sequence_input(0, (2,), TIME, case.feature_shape, dtype=jnp.complex64)
    variables = random_variables(flax_rnn, 1, x)
    assert_same_signature(jax.eval_shape(rnn.init, jax.random.key(2), x), variables)
    lengths = sequence_lengths((2,))

    def both(variables, x, lengths):
        return (
            rnn.apply(variables, x, seq_lengths=lengths),
            flax_rnn.apply(variables, x, seq_lengths=lengths),
        )

    assert_matches_flax(*jit_together(both, variables, x, lengths))


@pytest.mark.parametrize(
    "case", [CELLS_BY_ID[i] for i in COMPLEX_INPUT_CELLS] + CONV_CELLS[:1], ids=lambda c: c.id
)
def test_rnn_with_complex64_inputs_and_float32_params_promotes_the_carry(case):
    """Flax's scan rejects this (its float32 carry turns complex after one step);
    rnnlib starts from the same carry promoted to complex64, which Flax accepts."""
    flax_rnn, rnn = _twin_rnns(case, return_carry=True)
    x = sequence_input(0, (2,), TIME, case.feature_shape, dtype=jnp.complex64)
    variables = random_variables(flax_rnn, 1, x.real)
    lengths = sequence_lengths((2,))
    promoted = jax.tree_util.tree_map(
        lambda c: c.astype(jnp.complex64),
        flax_rnn.cell.initialize_carry(jax.random.key(0), x[:, 0].shape),
    )

    def both(variables, x, lengths):
        return (
            rnn.apply(variables, x, seq_lengths=lengths),
            flax_rnn.apply(variables, x, seq_lengths=lengths, initial_carry=promoted),
        )

    assert_matches_flax(*jit_together(both, variables, x, lengths))


# ---------------------------------------------------------------------------
# initial_carry and init_key.


@pytest.mark.parametrize(
    "case, batch_dims",
    [
        (CELLS_BY_ID["LSTMCell"], ()),
        (CELLS_BY_ID["LSTMCell"], (2, 3)),
        (CELLS_BY_ID["SimpleCell"], (2,)),
        (CONV_CELLS[0], (2, 3)),
    ],
    ids=["LSTMCell-no-batch", "LSTMCell-batch2x3", "SimpleCell-batch", "ConvLSTMCell-1d-batch2x3"],
)
def test_rnn_given_initial_carry_matches_flax(case, batch_dims):
    flax_rnn, rnn = _twin_rnns(case, return_carry=True, reverse=True)
    x = sequence_input(0, batch_dims, TIME, case.feature_shape)
    variables = random_variables(flax_rnn, 1, x)
    initial_carry = random_carry(rnn.cell, 2, (*batch_dims, *case.feature_shape))
    assert_apply_matches_flax(
        flax_rnn,
        rnn,
        variables,
        x,
        num_batch_dims=len(batch_dims),
        initial_carry=initial_carry,
        seq_lengths=sequence_lengths(batch_dims),
    )


@pytest.mark.parametrize("key_kind", ["typed", "raw", "default"])
def test_rnn_init_key_draws_the_initial_carry_like_flax(key_kind):
    case = CELLS_BY_ID["LSTMCell"]
    flax_rnn, rnn = _twin_rnns(
        case, {"carry_init": jax.nn.initializers.normal(1.0)}, return_carry=True
    )
    x = sequence_input(0, (2,), TIME, case.feature_shape)
    variables = random_variables(flax_rnn, 1, x)
    options = {
        "typed": {"init_key": jax.random.key(9)},
        "raw": {"init_key": jax.random.PRNGKey(9)},
        "default": {},
    }[key_kind]
    got = assert_apply_matches_flax(flax_rnn, rnn, variables, x, **options)
    # The random initial carry matters: another key gives another result.
    other = rnn.apply(variables, x, init_key=jax.random.key(10))
    assert not np.allclose(np.asarray(got[1]), np.asarray(other[1]))


# ---------------------------------------------------------------------------
# Where rnnlib is deliberately better than Flax: checked against running each
# sequence on its own, step by step, with rnnlib's cell.


@pytest.mark.parametrize(
    "batch_dims, time_major, reverse",
    [
        ((3, 4), False, False),
        ((3, 4), True, True),
        ((3, 3), False, True),
        ((2, 1, 2), True, False),
    ],
    ids=[
        "3x4-batch_major-forward",
        "3x4-time_major-reverse",
        "3x3-batch_major-reverse",
        "2x1x2-time_major-forward",
    ],
)
def test_return_carry_selects_last_valid_step_for_each_sequence_with_many_batch_dims(
    batch_dims, time_major, reverse
):
    case = CELLS_BY_ID["LSTMCell"]
    flax_rnn, rnn = _twin_rnns(case, return_carry=True, time_major=time_major, reverse=reverse)
    x = sequence_input(0, batch_dims, TIME, case.feature_shape, time_major=time_major)
    variables = random_variables(flax_rnn, 1, x, time_major=time_major)
    lengths = sequence_lengths(batch_dims)
    carry, outputs = rnn.apply(variables, x, seq_lengths=lengths)
    expected_carry = rnn_carries_one_by_one(
        rnn,
        variables["params"],
        x,
        lengths,
        num_batch_dims=len(batch_dims),
        time_major=time_major,
        reverse=reverse,
    )
    assert_matches_flax(carry, expected_carry)
    # Outputs (padded steps included) are Flax's.
    assert_matches_flax(
        outputs, jit_apply(flax_rnn, variables, x, seq_lengths=lengths, return_carry=False)
    )


@pytest.mark.parametrize(
    "batch_dims, reverse",
    [((), True), ((2,), False), ((2,), True), ((2, 3), False)],
    ids=["no-batch-reverse", "batch-forward", "batch-reverse", "batch2x3-forward"],
)
def test_zero_length_sequence_returns_the_initial_carry(batch_dims, reverse):
    case = CELLS_BY_ID["GRUCell"]
    flax_rnn, rnn = _twin_rnns(case, return_carry=True, reverse=reverse)
    x = sequence_input(0, batch_dims, TIME, case.feature_shape)
    variables = random_variables(flax_rnn, 1, x)
    initial_carry = random_array(2, (*batch_dims, 4))
    lengths = sequence_lengths(batch_dims, minimum=0)
    lengths = jnp.asarray(lengths).at[(0,) * len(batch_dims)].set(0)
    if batch_dims:
        lengths = lengths.at[(-1,) * len(batch_dims)].set(TIME)
    carry, outputs = rnn.apply(variables, x, seq_lengths=lengths, initial_carry=initial_carry)

    expected = rnn_carries_one_by_one(
        rnn,
        variables["params"],
        x,
        lengths,
        num_batch_dims=len(batch_dims),
        reverse=reverse,
        initial_carry=initial_carry,
    )
    assert_matches_flax(carry, expected)
    empty = np.asarray(lengths) == 0
    np.testing.assert_array_equal(np.asarray(carry)[empty], np.asarray(initial_carry)[empty])
    # Outputs (all padding for an empty sequence) are still Flax's.
    assert_matches_flax(
        outputs,
        flax_reference(
            flax_rnn,
            variables,
            x,
            num_batch_dims=len(batch_dims),
            seq_lengths=lengths,
            initial_carry=initial_carry,
            return_carry=False,
        ),
    )


def test_one_batch_dim_and_positive_lengths_match_flax_exactly_when_lengths_vary_widely():
    case = CELLS_BY_ID["LSTMCell"]
    flax_rnn, rnn = _twin_rnns(case, return_carry=True)
    x = sequence_input(0, (TIME,), TIME, case.feature_shape)
    variables = random_variables(flax_rnn, 1, x)
    lengths = jnp.arange(1, TIME + 1)
    assert_apply_matches_flax(flax_rnn, rnn, variables, x, seq_lengths=lengths)


# ---------------------------------------------------------------------------
# flip_sequences.


@pytest.mark.parametrize("feature_shape", [(3,), (2, 3)], ids=["1feature_axis", "2feature_axes"])
@pytest.mark.parametrize("time_major", [False, True], ids=["batch_major", "time_major"])
@pytest.mark.parametrize("with_lengths", [False, True], ids=["full", "seq_lengths"])
@pytest.mark.parametrize("batch_dims", BATCH_DIMS, ids=BATCH_IDS)
def test_flip_sequences_matches_flax(batch_dims, with_lengths, time_major, feature_shape):
    x = sequence_input(0, batch_dims, TIME, feature_shape, time_major=time_major)
    lengths = sequence_lengths(batch_dims, minimum=0) if with_lengths else None
    args = dict(seq_lengths=lengths, num_batch_dims=len(batch_dims), time_major=time_major)
    got = rnnlib.flip_sequences(x, **args)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(flax_flip_sequences(x, **args)))


def test_flip_sequences_accepts_positional_arguments_like_flax():
    x = jnp.arange(12.0).reshape(3, 4)
    lengths = jnp.array([1, 2, 4])
    np.testing.assert_array_equal(
        np.asarray(rnnlib.flip_sequences(x, lengths, 1, False)),
        np.asarray(flax_flip_sequences(x, lengths, 1, False)),
    )
