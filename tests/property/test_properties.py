"""Property tests: random shapes and options, checked against Flax where Flax is right
and against running each sequence alone, step by step, where Flax is not."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax.linen.recurrent import flip_sequences as flax_flip_sequences
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rnnlib
from tests.parity_helpers import (
    CELLS_BY_ID,
    assert_matches_flax,
    final_carries_one_by_one,
    jit_apply,
    jit_together,
    random_array,
    sequence_input,
)
from tests.tolerance import recurrent_terms

# JAX compiles a program for every new shape, which dominates the running time:
# few examples, no deadline.
SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])

CELL_IDS = ["LSTMCell", "OptimizedLSTMCell", "GRUCell", "MGUCell-no_reset_gate", "SimpleCell"]


@st.composite
def sequences(draw):
    """A batch of sequences: batch dims (0 to 2 of them), time, features and lengths."""
    batch_dims = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=2)))
    time = draw(st.integers(1, 5))
    lengths = draw(
        st.one_of(
            st.none(),
            st.lists(
                st.integers(0, time),
                min_size=int(np.prod(batch_dims)),
                max_size=int(np.prod(batch_dims)),
            ).map(lambda ls: jnp.asarray(ls, jnp.int32).reshape(batch_dims)),
        )
    )
    return dict(
        batch_dims=batch_dims,
        time=time,
        in_features=draw(st.integers(1, 4)),
        lengths=lengths,
        time_major=draw(st.booleans()),
        seed=draw(st.integers(0, 2**16)),
    )


def _one_batch_dim_and_no_empty_sequence(data):
    lengths = data["lengths"]
    return len(data["batch_dims"]) <= 1 and (lengths is None or bool(jnp.all(lengths >= 1)))


@SETTINGS
@given(
    data=sequences(),
    cell_id=st.sampled_from(CELL_IDS),
    features=st.integers(1, 4),
    reverse=st.booleans(),
    keep_order=st.booleans(),
    unroll=st.integers(1, 3),
)
def test_rnn_matches_flax_or_running_each_sequence_alone(
    data, cell_id, features, reverse, keep_order, unroll
):
    flax_cell, cell = CELLS_BY_ID[cell_id].twins(features=features)
    fields = dict(time_major=data["time_major"], reverse=reverse, keep_order=keep_order)
    flax_rnn = nn.RNN(flax_cell, unroll=unroll, **fields)
    rnn = rnnlib.RNN(cell, unroll=unroll, **fields)
    x = sequence_input(
        data["seed"],
        data["batch_dims"],
        data["time"],
        (data["in_features"],),
        time_major=data["time_major"],
    )
    variables = {"params": {"cell": _cell_params(flax_cell, data, data["seed"] + 1)}}
    lengths = data["lengths"]

    flax_is_right = _one_batch_dim_and_no_empty_sequence(data)

    def both(variables, x, lengths):
        # Flax's outputs, padded steps included, are always right; its carry only
        # for one batch dim (or none) and no empty sequence.
        return (
            rnn.apply(variables, x, seq_lengths=lengths, return_carry=True),
            flax_rnn.apply(variables, x, seq_lengths=lengths, return_carry=flax_is_right),
        )

    (carry, outputs), expected = jit_together(both, variables, x, lengths)
    terms = recurrent_terms(cell, x.shape, steps=data["time"])
    if flax_is_right:
        assert_matches_flax((carry, outputs), expected, terms=terms)
        return
    assert_matches_flax(outputs, expected, terms=terms)
    # The carry is each sequence's carry after its last valid step.
    expected_carry = final_carries_one_by_one(
        cell,
        {"params": variables["params"]["cell"]},
        x,
        lengths,
        num_batch_dims=len(data["batch_dims"]),
        time_major=data["time_major"],
        reverse=reverse,
    )
    assert_matches_flax(carry, expected_carry, terms=terms)


def _cell_params(flax_cell, data, seed):
    """Random cell parameters in Flax's layout for inputs of ``data``'s feature size."""
    step = random_array(0, (data["in_features"],))
    carry = flax_cell.initialize_carry(jax.random.key(0), step.shape)
    shapes = jax.eval_shape(flax_cell.init, jax.random.key(0), carry, step)["params"]
    leaves, treedef = jax.tree_util.tree_flatten(shapes)
    return jax.tree_util.tree_unflatten(
        treedef,
        [random_array((seed, i), leaf.shape, leaf.dtype, 0.5) for i, leaf in enumerate(leaves)],
    )


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=sequences(), merge=st.sampled_from(["concat", "sum"]))
def test_bidirectional_matches_flax_or_running_each_sequence_alone(data, merge):
    forward = CELLS_BY_ID["GRUCell"]
    backward = CELLS_BY_ID["LSTMCell"]
    merge_fn = {"concat": None, "sum": jnp.add}[merge]

    def build(lib):
        extra = {} if merge_fn is None else {"merge_fn": merge_fn}
        return lib.Bidirectional(
            lib.RNN(forward.make(lib)),
            lib.RNN(backward.make(lib)),
            time_major=data["time_major"],
            **extra,
        )

    flax_bi, bi = build(nn), build(rnnlib)
    x = sequence_input(
        data["seed"],
        data["batch_dims"],
        data["time"],
        (data["in_features"],),
        time_major=data["time_major"],
    )
    variables = {
        "params": {
            "forward_rnn": {"cell": _cell_params(flax_bi.forward_rnn.cell, data, 1)},
            "backward_rnn": {"cell": _cell_params(flax_bi.backward_rnn.cell, data, 2)},
        }
    }
    lengths = data["lengths"]
    (carry_forward, carry_backward), outputs = bi.apply(
        variables, x, seq_lengths=lengths, return_carry=True
    )

    terms = max(
        recurrent_terms(rnn.cell, x.shape, steps=data["time"])
        for rnn in (bi.forward_rnn, bi.backward_rnn)
    )
    if _one_batch_dim_and_no_empty_sequence(data):
        expected = jit_apply(flax_bi, variables, x, seq_lengths=lengths, return_carry=True)
        assert_matches_flax(((carry_forward, carry_backward), outputs), expected, terms=terms)
        return
    # Flax's carries are wrong here; its outputs are not (they skip carry selection).
    flax_outputs = _flax_bidirectional_outputs(flax_bi, variables, x, lengths, data)
    assert_matches_flax(outputs, flax_outputs, terms=terms)
    params = variables["params"]
    common = dict(num_batch_dims=len(data["batch_dims"]), time_major=data["time_major"])
    assert_matches_flax(
        (carry_forward, carry_backward),
        (
            final_carries_one_by_one(
                bi.forward_rnn.cell,
                {"params": params["forward_rnn"]["cell"]},
                x,
                lengths,
                **common,
            ),
            final_carries_one_by_one(
                bi.backward_rnn.cell,
                {"params": params["backward_rnn"]["cell"]},
                x,
                lengths,
                reverse=True,
                **common,
            ),
        ),
        terms=terms,
    )


def _flax_bidirectional_outputs(flax_bi, variables, x, lengths, data):
    """Flax's Bidirectional outputs, rebuilt from its two RNNs: Flax's Bidirectional
    always selects carries, which fails for some batch shapes."""
    params = variables["params"]
    options = dict(seq_lengths=lengths, time_major=data["time_major"], return_carry=False)
    forward = jit_apply(
        flax_bi.forward_rnn, {"params": params["forward_rnn"]}, x, reverse=False, **options
    )
    backward = jit_apply(
        flax_bi.backward_rnn,
        {"params": params["backward_rnn"]},
        x,
        reverse=True,
        keep_order=True,
        **options,
    )
    return flax_bi.merge_fn(forward, backward)


@settings(max_examples=25, deadline=None)
@given(
    batch_dims=st.lists(st.integers(1, 3), min_size=0, max_size=3).map(tuple),
    time=st.integers(1, 6),
    feature_shape=st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple),
    time_major=st.booleans(),
    with_lengths=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_flip_sequences_matches_flax(
    batch_dims, time, feature_shape, time_major, with_lengths, seed
):
    x = sequence_input(seed, batch_dims, time, feature_shape, time_major=time_major)
    lengths = None
    if with_lengths:
        rng = np.random.default_rng(seed)
        lengths = jnp.asarray(rng.integers(0, time + 1, size=batch_dims), jnp.int32)
    args = dict(seq_lengths=lengths, num_batch_dims=len(batch_dims), time_major=time_major)
    np.testing.assert_array_equal(
        np.asarray(rnnlib.flip_sequences(x, **args)), np.asarray(flax_flip_sequences(x, **args))
    )


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batch_dims=st.lists(st.integers(1, 2), min_size=0, max_size=2).map(tuple),
    signal=st.lists(st.integers(2, 4), min_size=1, max_size=2).map(tuple),
    kernel=st.integers(1, 3),
    channels=st.integers(1, 2),
    features=st.integers(1, 3),
    time=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_conv_lstm_rnn_matches_flax_for_random_signal_shapes(
    batch_dims, signal, kernel, channels, features, time, seed
):
    kernel_size = (kernel,) * len(signal)
    flax_rnn = nn.RNN(nn.ConvLSTMCell(features, kernel_size), return_carry=True)
    rnn = rnnlib.RNN(rnnlib.ConvLSTMCell(features, kernel_size), return_carry=True)
    x = sequence_input(seed, batch_dims, time, (*signal, channels))
    shapes = jax.eval_shape(flax_rnn.init, jax.random.key(0), x)
    leaves, treedef = jax.tree_util.tree_flatten(shapes)
    variables = jax.tree_util.tree_unflatten(
        treedef, [random_array((seed, i), s.shape, s.dtype, 0.5) for i, s in enumerate(leaves)]
    )
    assert_matches_flax(
        rnn.apply(variables, x),
        jit_apply(flax_rnn, variables, x),
        terms=recurrent_terms(rnn.cell, x.shape, steps=time),
    )
