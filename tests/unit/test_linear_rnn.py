"""The linear cells (``MinGRUCell``, ``MinLSTMCell``, ``RGLRUCell``) and ``RNN``'s two ways of
running them: step by step, and one associative scan (``Plan(scan=...)``).

The two modes must agree, in values and gradients, with every option of ``RNN`` (batch dims,
``seq_lengths`` with zeros, ``reverse``, ``initial_carry``, chunks fed through the carry), in
``Bidirectional`` too; and both must agree with the papers' equations, written here again as a
plain loop that shares no code with rnnlib. The RG-LRU's outside oracle, recurrentgemma's own
layer, is ``tests/parity/test_rglru_oracle.py``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import rnnlib
from rnnlib.linear import Dense
from rnnlib.plan import REFERENCE, Plan, jax_differentiates_sequence, resolve
from rnnlib.testing import PARTS, check_cell_contract
from tests.parity_helpers import random_array, random_carry, random_like
from tests.tolerance import assert_close, assert_identical, log_space_terms, recurrent_terms

SEQUENTIAL, ASSOCIATIVE = Plan(scan="sequential"), Plan(scan="associative")
MODES = {"sequential": SEQUENTIAL, "associative": ASSOCIATIVE}
ON_CPU = jax.default_backend() == "cpu"


def make_cell(name, dtype=jnp.float32):
    """The cell ``name`` at 4 features (in ``dtype``), and the channels of its input."""
    if name == "MinGRUCell":
        return rnnlib.MinGRUCell(4, dtype=dtype, param_dtype=dtype), 3
    if name == "MinLSTMCell":
        return rnnlib.MinLSTMCell(4, dtype=dtype, param_dtype=dtype), 3
    return rnnlib.RGLRUCell(4, num_heads=2, dtype=dtype, param_dtype=dtype), 4


CELL_NAMES = ["MinGRUCell", "MinLSTMCell", "RGLRUCell"]


def _loss(output):
    leaves = jax.tree_util.tree_leaves(output)
    return sum(jnp.sum(jnp.sin(v.astype(jnp.float32) * (i + 1))) for i, v in enumerate(leaves))


def run(rnn, variables, x, carry, **call):
    """``(carry, outputs)`` of ``rnn``, and the gradient of ``_loss`` of them with respect to
    the variables, the input and the initial carry, each jitted."""

    def apply(v, x, c):
        return rnn.apply(v, x, initial_carry=c, return_carry=True, **call)

    grads = jax.grad(lambda *args: _loss(apply(*args)), argnums=(0, 1, 2))
    return jax.jit(apply)(variables, x, carry), jax.jit(grads)(variables, x, carry)


def run_both(rnn_for, variables, x, carry, **call):
    """``run`` for each mode, by name; ``rnn_for(plan)`` builds the RNN."""
    return {mode: run(rnn_for(plan), variables, x, carry, **call) for mode, plan in MODES.items()}


def assert_modes_agree(results, cell, steps, dtype, variables, x):
    """Values and gradients within the rounding bound of ``tests.tolerance``: ``eps(dtype)``
    times the square root of the rounded terms, which grow with the steps (the gradients also
    sum over every row of the input), and for a cell in log space with the logs' magnitude
    (``tolerance.log_space_terms``)."""
    (values, grads), (values_a, grads_a) = results["sequential"], results["associative"]
    extra = 0.0
    if getattr(cell, "log_space", False):
        _, b = paper_coefficients(type(cell).__name__, variables["params"]["cell"], x)
        extra = log_space_terms(steps, np.log(np.max(b)))
    terms = recurrent_terms(cell, x.shape, steps=steps) + extra
    assert_close(values_a, values, terms=terms, compute_dtype=dtype, label="values")
    terms = recurrent_terms(cell, x.shape, steps=steps, gradient=True) + extra
    assert_close(grads_a, grads, terms=terms, compute_dtype=dtype, label="gradients")


# -- the two modes agree ---------------------------------------------------------------------


@settings(max_examples=12, deadline=None)
# Drawn once by hypothesis: minLSTM's log-space scan 1.03 of the bound without log_space_terms.
@example(name="MinLSTMCell", batch=(), steps=3, reverse=False, lengths=True, seed=1321)
@given(
    name=st.sampled_from(CELL_NAMES),
    batch=st.sampled_from([(), (3,), (2, 3)]),
    steps=st.integers(1, 12),
    reverse=st.booleans(),
    lengths=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_both_modes_give_the_same_outputs_carry_and_gradients(
    name, batch, steps, reverse, lengths, seed
):
    cell, channels = make_cell(name)
    x = random_array(seed, (*batch, steps, channels))
    variables = random_like(seed + 1, rnnlib.RNN(cell).init(jax.random.key(0), x))
    carry = random_carry(cell, seed + 2, (*batch, channels))
    rng = np.random.default_rng(seed + 3)
    seq_lengths = jnp.asarray(rng.integers(0, steps + 1, batch), jnp.int32) if lengths else None
    results = run_both(
        lambda plan: rnnlib.RNN(cell, reverse=reverse, keep_order=True, plan=plan),
        variables,
        x,
        carry,
        seq_lengths=seq_lengths,
    )
    assert_modes_agree(results, cell, steps, jnp.float32, variables, x)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("steps", [16, 256])
@pytest.mark.parametrize("name", CELL_NAMES)
def test_the_modes_agree_within_a_bound_that_grows_with_the_dtypes_eps_and_the_length(
    name, steps, dtype
):
    cell, channels = make_cell(name, dtype)
    x = random_array(0, (2, steps, channels), dtype)
    variables = rnnlib.RNN(cell).init(jax.random.key(0), x)
    carry = random_carry(cell, 1, (2, channels))
    results = run_both(lambda plan: rnnlib.RNN(cell, plan=plan), variables, x, carry)
    assert_modes_agree(results, cell, steps, dtype, variables, x)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", CELL_NAMES)
def test_a_sequence_of_length_zero_returns_its_initial_carry_unchanged(name, mode):
    cell, channels = make_cell(name)
    x = random_array(0, (3, 5, channels))
    rnn = rnnlib.RNN(cell, return_carry=True, plan=MODES[mode])
    variables = rnn.init(jax.random.key(0), x)
    carry = random_carry(cell, 1, (3, channels))
    final, _ = rnn.apply(variables, x, initial_carry=carry, seq_lengths=jnp.array([0, 5, 0]))
    # the carry passed through: no arithmetic touched it
    assert_identical(final[jnp.array([0, 2])], carry[jnp.array([0, 2])])


@pytest.mark.parametrize("name", CELL_NAMES)
def test_chunks_fed_through_the_carry_give_the_whole_sequence_in_either_mode(name):
    """The first 7 steps in one mode, the other 9 from its carry in either mode, against the
    16 steps in one call of the sequential mode."""
    cell, channels = make_cell(name)
    x = random_array(0, (2, 16, channels))
    variables = rnnlib.RNN(cell).init(jax.random.key(0), x)
    carry = random_carry(cell, 1, (2, channels))

    def chunk(plan, x, carry):
        rnn = rnnlib.RNN(cell, return_carry=True, plan=plan)
        return jax.jit(rnn.apply)(variables, x, initial_carry=carry)

    whole = chunk(SEQUENTIAL, x, carry)
    terms = recurrent_terms(cell, x.shape, steps=16)
    for first in MODES.values():
        middle, head = chunk(first, x[:, :7], carry)
        for second in MODES.values():
            final, tail = chunk(second, x[:, 7:], middle)
            assert_close((final, jnp.concatenate([head, tail], axis=1)), whole, terms=terms)


@pytest.mark.parametrize("name", CELL_NAMES)
def test_bidirectional_runs_either_mode_with_seq_lengths_and_agrees(name):
    cell, channels = make_cell(name)
    x = random_array(0, (3, 6, channels))
    lengths = jnp.array([6, 0, 4])

    def bidirectional(plan):
        rnn = rnnlib.RNN(cell, plan=plan)
        return rnnlib.Bidirectional(rnn, rnnlib.RNN(cell, plan=plan), return_carry=True)

    variables = bidirectional(SEQUENTIAL).init(jax.random.key(0), x)
    got, want = (
        jax.jit(bidirectional(plan).apply)(variables, x, seq_lengths=lengths)
        for plan in (ASSOCIATIVE, SEQUENTIAL)
    )
    assert_close(got, want, terms=recurrent_terms(cell, x.shape, steps=6))
    (_, backward_carry), outputs = got
    assert outputs.shape == (3, 6, 8)
    assert_identical(backward_carry[1], jnp.zeros(4))  # length 0: the initial carry


@pytest.mark.parametrize("mode", MODES)
def test_time_major_inputs_run_in_either_mode(mode):
    cell = rnnlib.MinGRUCell(4)
    x = random_array(0, (6, 2, 3))  # (time, batch, channels)
    rnn = rnnlib.RNN(cell, time_major=True, plan=MODES[mode])
    variables = rnn.init(jax.random.key(0), x)
    batch_major = rnnlib.RNN(cell, plan=SEQUENTIAL).apply(variables, jnp.swapaxes(x, 0, 1))
    got = jnp.swapaxes(rnn.apply(variables, x), 0, 1)
    assert_close(got, batch_major, terms=recurrent_terms(cell, (2, 6, 3), steps=6))


# -- the papers' equations, written again ----------------------------------------------------


def _sigmoid(v):
    return 1 / (1 + np.exp(-v))


def _g(v):
    return np.where(v >= 0, v + 0.5, _sigmoid(v))


def paper_coefficients(name, params, x):
    """``(a_t, b_t)`` of ``h_t = a_t h_{t-1} + b_t`` as the cell's paper writes them, in
    float64 NumPy, at every step of ``x`` (any layout, channels last)."""
    p = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), params)
    x = np.asarray(x, np.float64)
    dense = {k: x @ p[k]["kernel"] + p[k]["bias"] for k in p}
    if name == "MinGRUCell":  # h = (1 - z) h + z g(candidate)
        z = _sigmoid(dense["gate"])
        return 1 - z, z * _g(dense["candidate"])
    # minLSTM: normalised forget and input gates
    f, i = _sigmoid(dense["forget"]), _sigmoid(dense["input"])
    return f / (f + i), i / (f + i) * _g(dense["candidate"])


def paper_loop(name, params, x, h):
    """The cell's recurrence as its paper writes it, one step after another, in float64
    NumPy: ``x`` is ``(time, batch, channels)``, ``h`` the initial ``(batch, features)``."""
    outputs = []
    for a_t, b_t in zip(*paper_coefficients(name, params, x)):
        h = a_t * h + b_t
        outputs.append(h)
    return h, np.stack(outputs)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["MinGRUCell", "MinLSTMCell"])
def test_min_cells_follow_the_papers_equations_in_either_mode(name, mode):
    cell, channels = make_cell(name)
    x = random_array(0, (3, 20, channels), scale=2.0)  # candidates on both sides of 0
    rnn = rnnlib.RNN(cell, return_carry=True, plan=MODES[mode])
    variables = random_like(1, rnn.init(jax.random.key(0), x))
    carry = random_carry(cell, 2, (3, channels))
    got = jax.jit(rnn.apply)(variables, x, initial_carry=carry)
    final, outputs = paper_loop(name, variables["params"]["cell"], np.swapaxes(x, 0, 1), carry)
    want = (final.astype(np.float32), np.swapaxes(outputs, 0, 1).astype(np.float32))
    assert_close(got, want, terms=recurrent_terms(cell, x.shape, steps=20))


def test_the_positive_candidate_and_its_log_agree_and_meet_at_zero():
    from rnnlib.min_rnn import g, log_g

    v = jnp.linspace(-20.0, 20.0, 4001)
    # Against the float64 formula, in log space, where an absolute error is a relative one:
    # g spans 2e-9 to 20.5. Each side rounds a few times (sigmoid or softplus, log).
    exact = np.log(_g(np.asarray(v, np.float64))).astype(np.float32)
    assert_close(log_g(v), exact, terms=3)
    assert_close(jnp.log(g(v)), exact, terms=3)
    assert float(g(jnp.float32(0.0))) == 0.5 == float(jax.nn.sigmoid(0.0))
    assert bool(jnp.all(jnp.isfinite(jax.vmap(jax.grad(log_g))(v))))


# -- the contract ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", CELL_NAMES)
def test_each_linear_cell_meets_the_cell_contract(name):
    cell, channels = make_cell(name)
    assert check_cell_contract(cell, (2, 3, channels), steps=4).parts == PARTS


@pytest.mark.parametrize(
    "name, layout",
    [
        ("MinGRUCell", {"gate": ["bias", "kernel"], "candidate": ["bias", "kernel"]}),
        ("MinLSTMCell", {n: ["bias", "kernel"] for n in ("forget", "input", "candidate")}),
        ("RGLRUCell", {"a_param": None, "input_gate": ["b", "w"], "a_gate": ["b", "w"]}),
    ],
)
def test_each_cells_variables_are_laid_out_as_its_reference_lays_them_out(name, layout):
    """minGRU's and minLSTM's as flax.linen ``Dense`` layers named after the paper's symbols
    (the chapter's Flax cell), the RG-LRU's as recurrentgemma's ``RGLRU`` layer."""
    cell, channels = make_cell(name)
    params = rnnlib.RNN(cell).init(jax.random.key(0), jnp.ones((2, 5, channels)))["params"]
    tree = params["cell"]
    assert set(tree) == set(layout)
    for layer, names in layout.items():
        assert (sorted(tree[layer]) if names else None) == names
    if name == "RGLRUCell":
        assert tree["a_param"].shape == (4,)
        assert tree["a_gate"]["w"].shape == (2, 2, 2) and tree["a_gate"]["b"].shape == (2, 2)


@pytest.mark.parametrize("name", CELL_NAMES)
def test_init_and_initialize_carry_follow_the_fields(name):
    cell, channels = make_cell(name)
    carry = cell.initialize_carry(jax.random.key(0), (2, 3, channels))
    assert carry.shape == (2, 3, 4) and carry.dtype == jnp.float32
    assert cell.num_feature_axes == 1
    half = type(cell)(**{**vars(cell), "param_dtype": jnp.bfloat16, "dtype": None})
    variables = rnnlib.RNN(half).init(jax.random.key(0), jnp.ones((2, 5, channels)))
    assert {leaf.dtype for leaf in jax.tree_util.tree_leaves(variables)} == {jnp.dtype("bfloat16")}


def test_the_rglru_starts_with_decays_on_its_ring_and_a_state_at_the_inputs_scale():
    """``sigmoid(-a_param)`` lies in [0.9, 0.999]; with unit inputs and the normalisation
    sqrt(1 - a**2), a long run's h has about the variance of ``i_t * x_t``, not 1 / (1 - a**2)
    times it."""
    cell = rnnlib.RGLRUCell(64)
    x = random_array(0, (8, 400, 64))
    rnn = rnnlib.RNN(cell)
    variables = rnn.init(jax.random.key(3), x)
    radius = jax.nn.sigmoid(-variables["params"]["cell"]["a_param"])
    assert float(radius.min()) >= 0.9 - 1e-6 and float(radius.max()) <= 0.999 + 1e-6
    # uniform over the ring's area: the squared radii spread over [0.81, 0.998]
    assert float(jnp.std(radius**2)) > 0.03
    h = rnn.apply(variables, x)[:, 200:]
    assert 0.05 < float(jnp.var(h)) < 1.0


def test_the_rglrus_square_root_passes_back_a_bounded_slope():
    from rnnlib.rglru import MAX_SQRT_SLOPE, _sqrt

    v = jnp.array([0.0, 1e-12, 0.25, 1.0])
    slopes = jax.vmap(jax.grad(_sqrt))(v)
    assert_close(slopes[:2], jnp.full(2, MAX_SQRT_SLOPE, slopes.dtype), terms=1)
    assert_close(slopes[2:], jnp.array([1.0, 0.5], slopes.dtype), terms=1)
    np.testing.assert_array_equal(_sqrt(v), jnp.sqrt(v))


# -- the plan's choice -----------------------------------------------------------------------


def test_the_default_plan_runs_a_linear_cell_in_its_faster_mode_on_cpu_and_as_a_scan_elsewhere():
    """On a CPU, inside each linear cell's ``cpu_scan_when`` bands (measured in
    benchmarks/linear_scan.py): minGRU and minLSTM step by step, the RG-LRU as a scan up to 32
    rows of up to 256 features and step by step beyond; elsewhere, the scan."""
    for cell, step_shape, on_cpu in [
        (rnnlib.MinGRUCell(4), (2, 4), "sequential"),
        (rnnlib.MinLSTMCell(4), (2, 4), "sequential"),
        (rnnlib.RGLRUCell(4), (2, 4), "associative"),
        (rnnlib.RGLRUCell(4), (4, 8, 4), "associative"),  # 32 rows
        (rnnlib.RGLRUCell(4), (64, 4), "sequential"),
        (rnnlib.RGLRUCell(512), (2, 512), "sequential"),  # wider than measured
    ]:
        chosen = resolve(Plan(), cell, step_shape).scan
        assert chosen == (on_cpu if ON_CPU else "associative"), (cell, step_shape)
        for scan in ("sequential", "associative"):  # the user's choice wins
            assert resolve(Plan(scan=scan), cell, step_shape).scan == scan
    assert resolve(Plan(), rnnlib.LSTMCell(4), (2, 3)).scan == "sequential"
    assert REFERENCE.scan == "sequential" and resolve(REFERENCE, rnnlib.MinGRUCell(4), (2, 3))


def test_a_linear_cell_that_sets_the_replaced_scan_on_cpu_is_refused_at_definition():
    with pytest.raises(
        TypeError, match="sets scan_on_cpu, which rnnlib no longer reads.*cpu_scan_when"
    ):

        class Old(rnnlib.LinearCellBase):
            features: int
            scan_on_cpu = "associative"


def test_a_linear_cell_refuses_the_rule_when_asked_and_leaves_it_out_by_default():
    # The rule differentiates the layers alone; a linear cell's update also reads its input.
    with pytest.raises(ValueError, match="RGLRUCell.*a linear cell's update reads the step's"):
        resolve(Plan(False, True, True, "sequential"), rnnlib.RGLRUCell(4), (2, 4))
    chosen = resolve(Plan(scan="sequential"), rnnlib.RGLRUCell(4), (2, 4))
    assert chosen.kernel_gradients_after_loop is False
    if jax_differentiates_sequence():
        gru = resolve(Plan(False, True, True), rnnlib.GRUCell(4), (2, 4))
        assert gru.kernel_gradients_after_loop


@pytest.mark.parametrize("name", CELL_NAMES)
def test_every_plan_of_the_sequential_mode_gives_the_same_numbers(name):
    cell, channels = make_cell(name)
    x = random_array(0, (2, 7, channels))
    variables = rnnlib.RNN(cell).init(jax.random.key(0), x)
    carry = random_carry(cell, 1, (2, channels))
    lengths = jnp.array([7, 3])
    plans = [REFERENCE, Plan(True, True, None, "sequential"), Plan(False, True, None), Plan()]
    runs = [run(rnnlib.RNN(cell, plan=p), variables, x, carry, seq_lengths=lengths) for p in plans]
    terms = recurrent_terms(cell, x.shape, steps=7, gradient=True)
    for other in runs[1:]:
        assert_close(other, runs[0], terms=terms)


# -- errors ----------------------------------------------------------------------------------


def test_asking_for_the_associative_scan_on_a_nonlinear_cell_names_the_cell_and_what_it_lacks():
    rnn = rnnlib.RNN(rnnlib.LSTMCell(4), plan=ASSOCIATIVE)
    with pytest.raises(TypeError) as raised:
        rnn.init(jax.random.key(0), jnp.ones((2, 5, 3)))
    message = str(raised.value)
    for part in ("Plan(scan='associative')", "LSTMCell(features=4)", "coefficients(a)",
                 "Plan(scan='sequential')"):  # fmt: skip
        assert part in message, message


class _ReadsItsCarry(rnnlib.LinearCellBase):
    """Declares coefficients, but one of its layers reads h: not linear in its carry."""

    features: int = 4

    def layers(self, input_shape):
        init = jax.nn.initializers.lecun_normal()
        return {"k": Dense("x", input_shape[-1], 4, init), "u": Dense("h", 4, 4, init)}

    def coefficients(self, a):
        return jax.nn.sigmoid(a["k"] + a["u"]), a["k"]


def test_a_linear_cell_whose_layer_reads_h_is_refused_by_the_associative_scan():
    rnn = rnnlib.RNN(_ReadsItsCarry(), plan=ASSOCIATIVE)
    with pytest.raises(TypeError, match=r"_ReadsItsCarry\(\).*layers \['u'\] read 'h'"):
        rnn.init(jax.random.key(0), jnp.ones((2, 5, 3)))


class _NoCoefficients(rnnlib.LinearCellBase):
    features: int = 4

    def layers(self, input_shape):
        return {"k": Dense("x", input_shape[-1], 4, jax.nn.initializers.lecun_normal())}


def test_a_linear_cell_without_coefficients_says_what_it_must_define():
    with pytest.raises(NotImplementedError, match="_NoCoefficients does not define coefficients"):
        rnnlib.RNN(_NoCoefficients()).init(jax.random.key(0), jnp.ones((2, 5, 3)))


@pytest.mark.parametrize(
    "value, error", [("parallel", ValueError), (True, TypeError), (1, TypeError)]
)
def test_a_plan_rejects_a_scan_that_is_not_one_of_the_two(value, error):
    with pytest.raises(error, match=f"'sequential', 'associative' or None; got {value!r}"):
        Plan(scan=value)


def test_the_rglru_refuses_inputs_of_another_width_and_heads_that_do_not_divide_it():
    with pytest.raises(ValueError, match=r"RGLRUCell\(features=4\) expects inputs shaped "
                       r"\(\*batch, 4\).*got shape \(2, 3\)"):  # fmt: skip
        rnnlib.RNN(rnnlib.RGLRUCell(4)).init(jax.random.key(0), jnp.ones((2, 5, 3)))
    with pytest.raises(ValueError, match="features=6, num_heads=4"):
        rnnlib.RGLRUCell(6, num_heads=4)
    with pytest.raises(TypeError, match="num_heads, an int >= 1; got 0"):
        rnnlib.RGLRUCell(6, num_heads=0)
