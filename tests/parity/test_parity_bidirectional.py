"""rnnlib.Bidirectional against flax.linen.Bidirectional, given the same variables."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.parity_helpers import (
    BATCH_DIMS,
    BATCH_IDS,
    CELLS_BY_ID,
    TIME,
    assert_apply_matches_flax,
    assert_either_init_matches_flax,
    assert_matches_flax,
    assert_options_match_flax,
    assert_same_signature,
    build_twins,
    flax_reference,
    jit_apply,
    random_array,
    random_carry,
    random_variables,
    rnn_carries_one_by_one,
    sequence_input,
    sequence_lengths,
)

FEATURES = (3,)


def sum_merge(forward, backward):
    return forward + backward


def gated_merge(forward, backward):
    """A custom merge that is not symmetric, so swapped directions would show."""
    return jnp.concatenate([forward * jax.nn.sigmoid(backward), backward - forward], axis=-1)


MERGES = {"concat": None, "sum": sum_merge, "custom": gated_merge}


def _twins(forward="LSTMCell", backward="LSTMCell", merge="concat", rnn_fields=None, **fields):
    """The same Bidirectional built by Flax and by rnnlib, from cell case ids."""

    def build(lib):
        rnn_kw = rnn_fields or {}
        fwd = lib.RNN(CELLS_BY_ID[forward].make(lib), **rnn_kw)
        bwd = lib.RNN(CELLS_BY_ID[backward].make(lib), **rnn_kw)
        if MERGES[merge] is not None:
            fields["merge_fn"] = MERGES[merge]
        return lib.Bidirectional(fwd, bwd, **fields)

    return build_twins(build)


@pytest.mark.parametrize(
    "forward, backward",
    [
        ("LSTMCell", "LSTMCell"),
        ("OptimizedLSTMCell", "GRUCell"),
        ("SimpleCell", "MGUCell-reset_gate"),
    ],
)
def test_bidirectional_init_has_flax_tree_and_both_libraries_apply_either_init(forward, backward):
    flax_bi, bi = _twins(forward, backward, return_carry=True)
    x = sequence_input(0, (2,), TIME, FEATURES)
    variables = assert_either_init_matches_flax(flax_bi, bi, x, seq_lengths=sequence_lengths((2,)))
    assert_same_signature(variables, jax.eval_shape(flax_bi.init, jax.random.key(1), x))
    assert set(variables["params"]) == {"forward_rnn", "backward_rnn"}


@pytest.mark.parametrize("batch_dims", BATCH_DIMS, ids=BATCH_IDS)
def test_bidirectional_matches_flax_for_every_merge_and_option(batch_dims):
    """merge_fn x time_major x seq_lengths x return_carry, compiled as one program."""
    twins = {merge: _twins("LSTMCell", "GRUCell", merge) for merge in MERGES}
    x = sequence_input(0, batch_dims, TIME, FEATURES)
    variables = random_variables(twins["concat"][0], 1, x)
    cases = {
        f"{merge}-{'time' if tm else 'batch'}_major-{'seq_lengths' if sl else 'full'}"
        f"-{'carry' if rc else 'outputs'}": (
            *twins[merge],
            dict(time_major=tm, return_carry=rc),
            sl,
        )
        for merge in MERGES
        for tm in (False, True)
        for sl in (False, True)
        for rc in (False, True)
        # concat: every layout and lengths option with the carries; sum and custom: the
        # two mixed ones, one returning carries and one not.
        if (merge == "concat" and rc) or (merge != "concat" and tm != sl and rc == tm)
    }
    assert_options_match_flax(
        cases, variables, x, sequence_lengths(batch_dims), num_batch_dims=len(batch_dims)
    )


def test_bidirectional_call_arguments_override_fields_like_flax():
    flax_bi, bi = _twins("GRUCell", "GRUCell", time_major=True, return_carry=True)
    x = sequence_input(0, (2,), TIME, FEATURES)
    variables = random_variables(flax_bi, 1, x, time_major=False)
    # Flax ignores reverse and keep_order here: each direction has its own.
    options = dict(time_major=False, return_carry=False, reverse=True, keep_order=False)
    options["seq_lengths"] = sequence_lengths((2,))
    expected = jit_apply(flax_bi, variables, x, **options)
    assert not isinstance(expected, tuple)
    assert_matches_flax(bi.apply(variables, x, **options), expected)


def test_bidirectional_directions_take_time_major_and_direction_from_the_wrapper_and_unroll_from_the_rnns():
    flax_bi, bi = _twins(
        "LSTMCell",
        "LSTMCell",
        rnn_fields=dict(time_major=True, reverse=True, unroll=3),
        return_carry=True,
    )
    x = sequence_input(0, (2,), TIME, FEATURES)
    variables = random_variables(flax_bi, 1, x)
    assert_apply_matches_flax(flax_bi, bi, variables, x, seq_lengths=sequence_lengths((2,)))


# ---------------------------------------------------------------------------
# Shared cells.


def _shared(lib, how):
    cell = lib.GRUCell(features=4)
    if how == "same_rnn":
        rnn = lib.RNN(cell)
        return lib.Bidirectional(rnn, rnn, return_carry=True)
    return lib.Bidirectional(lib.RNN(cell), lib.RNN(cell, unroll=2), return_carry=True)


@pytest.mark.parametrize("how", ["same_rnn", "same_cell"])
def test_bidirectional_with_a_shared_cell_stores_and_uses_one_set_of_params(how):
    flax_bi, bi = build_twins(lambda lib: _shared(lib, how))
    x = sequence_input(0, (2,), TIME, FEATURES)
    flax_shapes = jax.eval_shape(flax_bi.init, jax.random.key(1), x)
    assert set(flax_shapes["params"]) == {"forward_rnn"}
    variables = bi.init(jax.random.key(1), x)
    assert_same_signature(variables, flax_shapes)

    variables = random_variables(flax_bi, 2, x)
    assert_apply_matches_flax(flax_bi, bi, variables, x, seq_lengths=sequence_lengths((2,)))


def test_bidirectional_with_equal_but_distinct_cells_keeps_two_sets_of_params():
    def build(lib):
        return lib.Bidirectional(lib.RNN(lib.GRUCell(4)), lib.RNN(lib.GRUCell(4)))

    flax_bi, bi = build_twins(build)
    x = sequence_input(0, (2,), TIME, FEATURES)
    variables = bi.init(jax.random.key(1), x)
    assert set(variables["params"]) == {"forward_rnn", "backward_rnn"}
    assert_same_signature(variables, jax.eval_shape(flax_bi.init, jax.random.key(1), x))
    assert_apply_matches_flax(flax_bi, bi, random_variables(flax_bi, 2, x), x)


# ---------------------------------------------------------------------------
# Initial carries: given, or drawn from init_key.


@pytest.mark.parametrize("batch_dims", [(), (2, 3)], ids=["no-batch", "batch2x3"])
def test_bidirectional_given_initial_carries_match_flax(batch_dims):
    flax_bi, bi = _twins("LSTMCell", "GRUCell", return_carry=True)
    x = sequence_input(0, batch_dims, TIME, FEATURES)
    variables = random_variables(flax_bi, 1, x)
    initial_carry = (
        random_carry(bi.forward_rnn.cell, 2, (*batch_dims, *FEATURES)),
        random_carry(bi.backward_rnn.cell, 3, (*batch_dims, *FEATURES)),
    )
    assert_apply_matches_flax(
        flax_bi,
        bi,
        variables,
        x,
        num_batch_dims=len(batch_dims),
        initial_carry=initial_carry,
        seq_lengths=sequence_lengths(batch_dims),
    )


@pytest.mark.parametrize("key_kind", ["typed", "raw"])
def test_bidirectional_splits_init_key_between_the_directions_like_flax(key_kind):
    random_carry = {"carry_init": jax.nn.initializers.normal(1.0)}

    def build(lib):
        def rnn():
            return lib.RNN(lib.LSTMCell(4, **random_carry))

        return lib.Bidirectional(rnn(), rnn(), return_carry=True)

    flax_bi, bi = build_twins(build)
    x = sequence_input(0, (2,), TIME, FEATURES)
    variables = random_variables(flax_bi, 1, x)
    key = jax.random.key(8) if key_kind == "typed" else jax.random.PRNGKey(8)
    got = assert_apply_matches_flax(flax_bi, bi, variables, x, init_key=key)

    # The same as drawing each direction's carry from its half of the split key.
    key_forward, key_backward = jax.random.split(key)
    initial_carry = (
        bi.forward_rnn.cell.initialize_carry(key_forward, (2, *FEATURES)),
        bi.backward_rnn.cell.initialize_carry(key_backward, (2, *FEATURES)),
    )
    assert_matches_flax(got, bi.apply(variables, x, initial_carry=initial_carry))


# ---------------------------------------------------------------------------
# ConvLSTM, bfloat16 and complex numbers.


@pytest.mark.parametrize("batch_dims", [(), (2,)], ids=["no-batch", "batch"])
def test_bidirectional_conv_lstm_2d_matches_flax(batch_dims):
    def build(lib):
        def rnn():
            return lib.RNN(lib.ConvLSTMCell(2, kernel_size=(3, 2), strides=(1, 1), padding="SAME"))

        return lib.Bidirectional(rnn(), rnn(), merge_fn=sum_merge, return_carry=True)

    flax_bi, bi = build_twins(build)
    x = sequence_input(0, batch_dims, TIME, (3, 4, 2))
    variables = random_variables(flax_bi, 1, x)
    assert_same_signature(jax.eval_shape(bi.init, jax.random.key(2), x), variables)
    assert_apply_matches_flax(flax_bi, bi, variables, x, seq_lengths=sequence_lengths(batch_dims))


def test_bidirectional_with_bfloat16_compute_matches_flax():
    def build(lib):
        def rnn():
            return lib.RNN(lib.GRUCell(4, dtype=jnp.bfloat16))

        return lib.Bidirectional(rnn(), rnn(), return_carry=True)

    flax_bi, bi = build_twins(build)
    x = sequence_input(0, (2,), TIME, FEATURES)
    variables = random_variables(flax_bi, 1, x)
    assert_apply_matches_flax(
        flax_bi,
        bi,
        variables,
        x,
        seq_lengths=sequence_lengths((2,)),
        compute_dtype=jnp.bfloat16,  # the cells round in bfloat16
    )


def test_bidirectional_with_complex64_params_matches_flax():
    def build(lib):
        def rnn():
            return lib.RNN(lib.LSTMCell(4, param_dtype=jnp.complex64))

        return lib.Bidirectional(rnn(), rnn(), merge_fn=sum_merge, return_carry=True)

    flax_bi, bi = build_twins(build)
    x = sequence_input(0, (2,), TIME, FEATURES, dtype=jnp.complex64)
    variables = random_variables(flax_bi, 1, x)
    assert_apply_matches_flax(
        flax_bi,
        bi,
        variables,
        x,
        seq_lengths=sequence_lengths((2,)),
    )


# ---------------------------------------------------------------------------
# Where rnnlib is deliberately better than Flax.


@pytest.mark.parametrize(
    "batch_dims, time_major",
    [((3, 4), False), ((3, 3), True)],
    ids=["3x4-batch_major", "3x3-time_major"],
)
def test_bidirectional_returns_each_sequences_last_valid_carries_with_many_batch_dims(
    batch_dims, time_major
):
    flax_bi, bi = _twins("LSTMCell", "GRUCell", return_carry=True, time_major=time_major)
    x = sequence_input(0, batch_dims, TIME, FEATURES, time_major=time_major)
    variables = random_variables(flax_bi, 1, x)
    lengths = sequence_lengths(batch_dims, minimum=0)
    (carry_forward, carry_backward), outputs = bi.apply(variables, x, seq_lengths=lengths)

    params = variables["params"]
    common = dict(num_batch_dims=len(batch_dims), time_major=time_major)
    expected_forward = rnn_carries_one_by_one(
        bi.forward_rnn, params["forward_rnn"], x, lengths, **common
    )
    expected_backward = rnn_carries_one_by_one(
        bi.backward_rnn,
        params["backward_rnn"],
        x,
        lengths,
        reverse=True,
        **common,
    )
    assert_matches_flax((carry_forward, carry_backward), (expected_forward, expected_backward))
    # A zero length leaves the initial (zero) carries untouched.
    empty = np.asarray(lengths) == 0
    if empty.any():
        assert not np.asarray(carry_backward)[empty].any()


@pytest.mark.parametrize("batch_dims", [(), (2, 2)], ids=["no-batch", "batch2x2"])
def test_bidirectional_zero_length_sequence_returns_the_initial_carries(batch_dims):
    flax_bi, bi = _twins("GRUCell", "GRUCell", return_carry=True)
    x = sequence_input(0, batch_dims, TIME, FEATURES)
    variables = random_variables(flax_bi, 1, x)
    initial_carry = (
        random_array(2, (*batch_dims, 4)),
        random_array(3, (*batch_dims, 4)),
    )
    lengths = jnp.zeros(batch_dims, int)
    if batch_dims:
        lengths = lengths.reshape(-1).at[1:].set(jnp.arange(1, lengths.size) % TIME + 1)
        lengths = lengths.reshape(batch_dims)
    carry, outputs = bi.apply(variables, x, seq_lengths=lengths, initial_carry=initial_carry)

    params = variables["params"]
    common = dict(num_batch_dims=len(batch_dims))
    expected = (
        rnn_carries_one_by_one(
            bi.forward_rnn,
            params["forward_rnn"],
            x,
            lengths,
            initial_carry=initial_carry[0],
            **common,
        ),
        rnn_carries_one_by_one(
            bi.backward_rnn,
            params["backward_rnn"],
            x,
            lengths,
            initial_carry=initial_carry[1],
            reverse=True,
            **common,
        ),
    )
    assert_matches_flax(carry, expected)
    empty = np.asarray(lengths) == 0
    for got, initial in zip(carry, initial_carry):
        np.testing.assert_array_equal(np.asarray(got)[empty], np.asarray(initial)[empty])
    # Outputs are Flax's, padding included.
    assert_matches_flax(
        outputs,
        flax_reference(
            flax_bi,
            variables,
            x,
            num_batch_dims=len(batch_dims),
            seq_lengths=lengths,
            initial_carry=initial_carry,
            return_carry=False,
        ),
    )


class ScanGRU:
    """An RNN-like object written outside rnnlib: a GRU run by a plain ``lax.scan``.

    It speaks RNN's public calling convention, ``init(key, inputs, time_major=...)`` and
    ``apply(variables, inputs, ...)``, for inputs ``(batch, time, channels)``, and nothing
    else (no ``_init``, no ``_call``, not an rnnlib module). Its step is written here, on
    the flax.linen parameter layout.
    """

    def __init__(self, features):
        self.features = features

    def init(self, key, inputs, time_major=False):
        assert not time_major
        seed = int(jax.random.randint(key, (), 0, 2**30))
        width = {"i": inputs.shape[-1], "h": self.features}
        params = {}
        for i, name in enumerate(("ir", "iz", "in", "hr", "hz", "hn")):
            shape = (width[name[0]], self.features)
            layer = {"kernel": random_array(seed + i, shape, scale=0.5)}
            if name[0] == "i" or name == "hn":
                layer["bias"] = random_array(seed + 10 + i, (self.features,), scale=0.5)
            params[name] = layer
        return {"params": {"cell": params}}

    def apply(
        self,
        variables,
        inputs,
        *,
        initial_carry=None,
        init_key=None,
        seq_lengths=None,
        return_carry=False,
        time_major=False,
        reverse=False,
        keep_order=False,
    ):
        p = variables["params"]["cell"]
        batch, steps = inputs.shape[:2]
        lengths = jnp.full((batch,), steps) if seq_lengths is None else seq_lengths
        t = jnp.arange(steps)[None, :]
        # Reversed, each sequence's valid steps run from its last to its first.
        order = jnp.where(t < lengths[:, None], lengths[:, None] - 1 - t, t) if reverse else None

        def flip(x):
            return jnp.take_along_axis(x, order[..., None], axis=1)

        xs = flip(inputs) if reverse else inputs

        def dense(x, name):
            y = x @ p[name]["kernel"]
            return y + p[name]["bias"] if "bias" in p[name] else y

        def step(h, x_and_t):
            x, t = x_and_t
            r = jax.nn.sigmoid(dense(x, "ir") + dense(h, "hr"))
            z = jax.nn.sigmoid(dense(x, "iz") + dense(h, "hz"))
            n = jnp.tanh(dense(x, "in") + r * dense(h, "hn"))
            new = (1.0 - z) * n + z * h
            # Past its length a sequence keeps its carry (its outputs are meaningless).
            return jnp.where((t < lengths)[:, None], new, h), new

        h = jnp.zeros((batch, self.features)) if initial_carry is None else initial_carry
        h, ys = jax.lax.scan(step, h, (jnp.swapaxes(xs, 0, 1), jnp.arange(steps)))
        ys = jnp.swapaxes(ys, 0, 1)
        if reverse and keep_order:
            ys = flip(ys)
        return (h, ys) if return_carry else ys


def test_bidirectional_runs_an_rnn_like_object_written_outside_rnnlib():
    """Bidirectional calls only RNN's public init/apply: an object written here, in both
    directions, gives the numbers of rnnlib's own RNN and of flax.linen's."""
    import flax.linen as nn

    import rnnlib
    from tests.tolerance import assert_close, recurrent_terms

    features = 4
    x = sequence_input(0, (3,), TIME, FEATURES)
    lengths = jnp.array([TIME, 2, 1])
    ours = rnnlib.Bidirectional(ScanGRU(features), ScanGRU(features), return_carry=True)
    variables = ours.init(jax.random.key(0), x)
    assert set(variables["params"]) == {"forward_rnn", "backward_rnn"}
    assert set(variables["params"]["backward_rnn"]["cell"]) == {"ir", "iz", "in", "hr", "hz", "hn"}
    valid = (jnp.arange(TIME)[None, :] < lengths[:, None])[..., None]

    def meaningful(result):  # outputs at padded steps are computed but meaningless
        carry, outputs = result
        return carry, jnp.where(valid, outputs, 0.0)

    got = meaningful(jax.jit(ours.apply)(variables, x, seq_lengths=lengths))
    for lib in (rnnlib, nn):
        gru = lib.GRUCell(features=features)
        bi = lib.Bidirectional(lib.RNN(gru), lib.RNN(lib.GRUCell(features=features)))
        want = meaningful(bi.apply(variables, x, seq_lengths=lengths, return_carry=True))
        assert_close(got, want, terms=recurrent_terms(gru, x.shape, steps=TIME))
