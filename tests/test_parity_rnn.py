"""rnnlib.RNN (and flip_sequences) against flax.linen.RNN, given the same variables."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax.core import freeze
from flax.linen.recurrent import flip_sequences as flax_flip_sequences

import rnnlib
from tests.parity_helpers import (
    BATCH_DIMS,
    BATCH_IDS,
    CELLS_BY_ID,
    CONV_CELLS,
    CUSTOM_FN_CELLS,
    DENSE_CELLS,
    TOLERANCES,
    CellCase,
    assert_matches_flax,
    assert_same_signature,
    final_carries_one_by_one,
    flax_reference,
    jit_apply,
    jitted,
    random_array,
    random_lengths,
    random_like,
    random_variables,
    sequence_input,
)

TIME = 5
BUILTIN_CELLS = DENSE_CELLS + CONV_CELLS


def _twin_rnns(case, cell_fields=None, **rnn_fields):
    flax_cell, cell = case.twins(**(cell_fields or {}))
    return nn.RNN(flax_cell, **rnn_fields), rnnlib.RNN(cell, **rnn_fields)


def _lengths(batch_dims, seed=3, minimum=1):
    return random_lengths(seed, batch_dims, TIME, minimum=minimum)


# ---------------------------------------------------------------------------
# Parameter trees and the two directions of variable exchange.


@pytest.mark.parametrize("case", BUILTIN_CELLS, ids=lambda c: c.id)
def test_rnn_init_has_flax_tree_and_both_libraries_apply_either_init(case):
    flax_rnn, rnn = _twin_rnns(case, return_carry=True)
    x = sequence_input(0, (2,), TIME, case.feature_shape)
    lengths = _lengths((2,))

    variables = rnn.init(jax.random.key(1), x, seq_lengths=lengths)
    assert_same_signature(variables, jax.eval_shape(flax_rnn.init, jax.random.key(1), x))
    assert set(variables) == {"params"} and set(variables["params"]) == {"cell"}

    flax_apply = jitted(flax_rnn)
    # rnnlib init -> Flax apply gives rnnlib's numbers.
    assert_matches_flax(
        rnn.apply(variables, x, seq_lengths=lengths),
        flax_apply(variables, x, seq_lengths=lengths),
    )
    # Variables in Flax's layout -> rnnlib apply gives Flax's numbers.
    flax_variables = random_variables(flax_rnn, 2, x)
    assert_matches_flax(
        rnn.apply(flax_variables, x, seq_lengths=lengths),
        flax_apply(flax_variables, x, seq_lengths=lengths),
    )


def test_rnn_applies_variables_from_a_real_flax_init_and_init_with_output():
    case = CELLS_BY_ID["LSTMCell"]
    flax_rnn, rnn = _twin_rnns(case)
    x = sequence_input(0, (2,), TIME, case.feature_shape)
    flax_variables = flax_rnn.init(jax.random.key(1), x)
    assert_matches_flax(rnn.apply(flax_variables, x), jit_apply(flax_rnn, flax_variables, x))

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
    assert_matches_flax(
        rnn.apply(frozen, x, init_key=jax.random.PRNGKey(5)),
        jit_apply(flax_rnn, frozen, x, init_key=jax.random.PRNGKey(5)),
    )


# ---------------------------------------------------------------------------
# Every cell with the other batch layouts: no batch dims or two, taking turns
# (the test above runs each built-in cell with one batch dim).

CELL_GRID = [
    pytest.param(case, layouts[i % len(layouts)], id=f"{case.id}-{ids[i % len(ids)]}")
    for cases, layouts, ids in [
        (BUILTIN_CELLS, BATCH_DIMS[::2], BATCH_IDS[::2]),
        (CUSTOM_FN_CELLS, BATCH_DIMS, BATCH_IDS),
    ]
    for i, case in enumerate(cases)
]


@pytest.mark.parametrize("case, batch_dims", CELL_GRID)
def test_rnn_outputs_and_final_carry_match_flax_for_every_cell(case, batch_dims):
    flax_rnn, rnn = _twin_rnns(case, return_carry=True)
    x = sequence_input(0, batch_dims, TIME, case.feature_shape)
    variables = random_variables(flax_rnn, 1, x)
    assert_matches_flax(rnn.apply(variables, x), jit_apply(flax_rnn, variables, x))


# ---------------------------------------------------------------------------
# The options that interact: seq_lengths x reverse x keep_order x time_major in
# full, with the final carry returned; the batch layout changes from case to case
# so that each layout meets each direction and both kinds of lengths.

DIRECTIONS = {
    "forward": (False, False),
    "reverse": (True, False),
    "reverse-keep_order": (True, True),
}
OPTIONS_GRID = [
    pytest.param(
        *DIRECTIONS[direction],
        time_major,
        with_lengths,
        batch_dims,
        id=f"{direction}-{'time' if time_major else 'batch'}_major-"
        f"{'seq_lengths' if with_lengths else 'full'}-{batch_id}",
    )
    for d, direction in enumerate(DIRECTIONS)
    for time_major in (False, True)
    for with_lengths in (False, True)
    for batch_dims, batch_id in [
        (
            BATCH_DIMS[(d + 2 * time_major + with_lengths) % 3],
            BATCH_IDS[(d + 2 * time_major + with_lengths) % 3],
        )
    ]
] + [
    # keep_order without reverse changes nothing; one case shows it.
    pytest.param(False, True, False, True, (2,), id="forward-keep_order-seq_lengths-batch"),
]


@pytest.mark.parametrize("reverse, keep_order, time_major, with_lengths, batch_dims", OPTIONS_GRID)
def test_rnn_options_match_flax(reverse, keep_order, time_major, with_lengths, batch_dims):
    # Tuple carries (LSTM) for batch-major inputs, single-array carries (GRU) for time-major.
    case = CELLS_BY_ID["GRUCell" if time_major else "LSTMCell"]
    flax_rnn, rnn = _twin_rnns(case, return_carry=True)
    x = sequence_input(0, batch_dims, TIME, case.feature_shape, time_major=time_major)
    variables = random_variables(flax_rnn, 1, x, time_major=time_major)
    options = dict(time_major=time_major, reverse=reverse, keep_order=keep_order)
    if with_lengths:
        options["seq_lengths"] = _lengths(batch_dims)
    assert_matches_flax(
        rnn.apply(variables, x, **options),
        flax_reference(flax_rnn, variables, x, num_batch_dims=len(batch_dims), **options),
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
    lengths = _lengths((2,))
    expected = jit_apply(flax_rnn, variables, x, seq_lengths=lengths, **call)
    assert isinstance(expected, tuple) == call["return_carry"]
    assert_matches_flax(rnn.apply(variables, x, seq_lengths=lengths, **call), expected)


@pytest.mark.parametrize(
    "unroll, reverse, with_lengths",
    [(3, True, True), (3, False, True), (7, True, False)],
    ids=["3-reverse-seq_lengths", "3-forward-seq_lengths", "7_over_time-reverse-full"],
)
def test_rnn_unroll_matches_flax(unroll, reverse, with_lengths):
    case = CELLS_BY_ID["MGUCell-reset_gate"]
    flax_rnn, rnn = _twin_rnns(case, unroll=unroll, return_carry=True, reverse=reverse)
    x = sequence_input(0, (3,), TIME, case.feature_shape)
    variables = random_variables(flax_rnn, 1, x)
    options = {"seq_lengths": _lengths((3,))} if with_lengths else {}
    assert_matches_flax(
        rnn.apply(variables, x, **options), jit_apply(flax_rnn, variables, x, **options)
    )


# ---------------------------------------------------------------------------
# ConvLSTM in 1-D, 2-D and 3-D, with explicit strides and size-preserving padding.

CONV_CONFIGS = {
    "1d-same": (dict(kernel_size=(3,), strides=(1,), padding="SAME"), (6, 2)),
    "1d-explicit": (dict(kernel_size=(2,), strides=(1,), padding=((0, 1),)), (5, 2)),
    "1d-circular": (dict(kernel_size=(3,), padding="CIRCULAR", use_bias=False), (6, 2)),
    "2d-explicit": (
        dict(kernel_size=(3, 3), strides=(1, 1), padding=((1, 1), (1, 1)), use_bias=False),
        (4, 5, 2),
    ),
    "2d-same": (dict(kernel_size=(2, 3), padding="SAME"), (4, 3, 2)),
    "3d-same": (dict(kernel_size=(2, 2, 2), strides=(1, 1, 1), padding="SAME"), (3, 3, 2, 2)),
    "3d-explicit": (
        dict(kernel_size=(3, 1, 2), padding=((1, 1), (0, 0), (0, 1)), use_bias=False),
        (3, 2, 3, 1),
    ),
}
CONV_GRID = [
    ("1d-same", ()),
    ("1d-explicit", (2,)),
    ("1d-circular", (2, 3)),
    ("2d-explicit", ()),
    ("2d-explicit", (2,)),
    ("2d-same", (2, 3)),
    ("3d-same", ()),
    ("3d-same", (2,)),
    ("3d-explicit", (2, 3)),
]


@pytest.mark.parametrize(
    "config, batch_dims", CONV_GRID, ids=[f"{c}-{len(b)}batch" for c, b in CONV_GRID]
)
def test_conv_lstm_rnn_matches_flax(config, batch_dims):
    fields, feature_shape = CONV_CONFIGS[config]
    time_major = len(batch_dims) == 1  # one layout of each dimensionality is time-major
    case = CellCase(config, lambda lib, **kw: lib.ConvLSTMCell(features=3, **fields, **kw), ())
    flax_rnn, rnn = _twin_rnns(case, return_carry=True, time_major=time_major, reverse=True)
    x = sequence_input(0, batch_dims, TIME, feature_shape, time_major=time_major)
    variables = random_variables(flax_rnn, 1, x)
    lengths = _lengths(batch_dims)
    assert_same_signature(rnn.init(jax.random.key(2), x, seq_lengths=lengths), variables)
    assert_matches_flax(
        rnn.apply(variables, x, seq_lengths=lengths),
        flax_reference(flax_rnn, variables, x, num_batch_dims=len(batch_dims), seq_lengths=lengths),
    )


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
    cell_variables = random_variables(case.make(nn), 1, *_first_step(case, x))
    variables = {"params": {"cell": cell_variables["params"]}}
    lengths = _lengths((2,))
    got = rnn.apply(variables, x, seq_lengths=lengths)
    # Flax's scan needs the carry's dtype fixed from the start. A SimpleCell computing
    # in bfloat16 returns a bfloat16 carry, so Flax is given a bfloat16 initial carry;
    # rnnlib promotes its own initial carry to the cell's computed dtype.
    carry_dtype = jax.tree_util.tree_leaves(got[0])[0].dtype
    initial_carry = jax.tree_util.tree_map(
        lambda c: c.astype(carry_dtype),
        flax_rnn.cell.initialize_carry(jax.random.key(0), x[:, 0].shape),
    )
    expected = jit_apply(flax_rnn, variables, x, seq_lengths=lengths, initial_carry=initial_carry)
    assert_matches_flax(got, expected, **TOLERANCES["bfloat16"])


def _first_step(case, x):
    """The (carry, input) of a cell's first step on the batch-major sequence ``x``."""
    step = x[:, 0]
    return case.make(nn).initialize_carry(jax.random.key(0), step.shape), step


@pytest.mark.parametrize(
    "case", [CELLS_BY_ID[i] for i in COMPLEX_PARAM_CELLS] + CONV_CELLS[:1], ids=lambda c: c.id
)
def test_rnn_with_complex64_params_matches_flax(case):
    flax_rnn, rnn = _twin_rnns(case, {"param_dtype": jnp.complex64}, return_carry=True)
    x = sequence_input(0, (2,), TIME, case.feature_shape, dtype=jnp.complex64)
    variables = random_variables(flax_rnn, 1, x)
    assert_same_signature(rnn.init(jax.random.key(2), x), variables)
    lengths = _lengths((2,))
    assert_matches_flax(
        rnn.apply(variables, x, seq_lengths=lengths),
        jit_apply(flax_rnn, variables, x, seq_lengths=lengths),
        **TOLERANCES["complex64"],
    )


@pytest.mark.parametrize(
    "case", [CELLS_BY_ID[i] for i in COMPLEX_INPUT_CELLS] + CONV_CELLS[:1], ids=lambda c: c.id
)
def test_rnn_with_complex64_inputs_and_float32_params_promotes_the_carry(case):
    """Flax's scan rejects this (its float32 carry turns complex after one step);
    rnnlib starts from the same carry promoted to complex64, which Flax accepts."""
    flax_rnn, rnn = _twin_rnns(case, return_carry=True)
    x = sequence_input(0, (2,), TIME, case.feature_shape, dtype=jnp.complex64)
    variables = random_variables(flax_rnn, 1, x.real)
    lengths = _lengths((2,))
    promoted = jax.tree_util.tree_map(
        lambda c: c.astype(jnp.complex64),
        flax_rnn.cell.initialize_carry(jax.random.key(0), x[:, 0].shape),
    )
    got = rnn.apply(variables, x, seq_lengths=lengths)
    expected = jit_apply(flax_rnn, variables, x, seq_lengths=lengths, initial_carry=promoted)
    assert_matches_flax(got, expected, **TOLERANCES["complex64"])


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
    zeros = rnn.cell.initialize_carry(jax.random.key(0), (*batch_dims, *case.feature_shape))
    initial_carry = random_like(2, zeros)
    options = dict(initial_carry=initial_carry, seq_lengths=_lengths(batch_dims))
    assert_matches_flax(
        rnn.apply(variables, x, **options),
        flax_reference(flax_rnn, variables, x, num_batch_dims=len(batch_dims), **options),
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
    got = rnn.apply(variables, x, **options)
    assert_matches_flax(got, jit_apply(flax_rnn, variables, x, **options))
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
        ((3, 3), True, False),
        ((2, 1, 2), False, True),
        ((2, 1, 2), True, False),
    ],
    ids=[
        "3x4-batch_major-forward",
        "3x4-time_major-reverse",
        "3x3-batch_major-reverse",
        "3x3-time_major-forward",
        "2x1x2-batch_major-reverse",
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
    lengths = _lengths(batch_dims)
    carry, outputs = rnn.apply(variables, x, seq_lengths=lengths)
    expected_carry = final_carries_one_by_one(
        rnn.cell,
        {"params": variables["params"]["cell"]},
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
    lengths = _lengths(batch_dims, minimum=0)
    lengths = jnp.asarray(lengths).at[(0,) * len(batch_dims)].set(0)
    if batch_dims:
        lengths = lengths.at[(-1,) * len(batch_dims)].set(TIME)
    carry, outputs = rnn.apply(variables, x, seq_lengths=lengths, initial_carry=initial_carry)

    expected = final_carries_one_by_one(
        rnn.cell,
        {"params": variables["params"]["cell"]},
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
    assert_matches_flax(
        rnn.apply(variables, x, seq_lengths=lengths),
        jit_apply(flax_rnn, variables, x, seq_lengths=lengths),
    )


# ---------------------------------------------------------------------------
# flip_sequences.


@pytest.mark.parametrize("feature_shape", [(3,), (2, 3)], ids=["1feature_axis", "2feature_axes"])
@pytest.mark.parametrize("time_major", [False, True], ids=["batch_major", "time_major"])
@pytest.mark.parametrize("with_lengths", [False, True], ids=["full", "seq_lengths"])
@pytest.mark.parametrize("batch_dims", BATCH_DIMS, ids=BATCH_IDS)
def test_flip_sequences_matches_flax(batch_dims, with_lengths, time_major, feature_shape):
    x = sequence_input(0, batch_dims, TIME, feature_shape, time_major=time_major)
    lengths = _lengths(batch_dims, minimum=0) if with_lengths else None
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
