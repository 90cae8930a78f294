"""``resolve`` is the last word: the plan it returns is the program ``RNN`` runs.

Each field is read back off the program itself (the jaxpr of ``apply``): whether a step-by-step
loop runs (``scan``), whether the whole-sequence rule wraps it (``kernel_gradients_after_loop``),
whether matmuls run outside the loop (``hoist_inputs``), and how many run per step
(``join_layers``). A field given explicitly is honoured or refused with a ``ValueError`` saying
why, never silently dropped, on the CPU and on a GPU (``resolve`` told it runs on one).
"""

from __future__ import annotations

import re
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rnnlib
from rnnlib import RNN, Plan
from rnnlib.linear import Dense
from rnnlib.plan import REFERENCE, jax_differentiates_sequence, resolve

BATCH, TIME, FEATURES = 2, 3, 4
MATMULS = {"dot_general", "conv_general_dilated"}
LOOPS = {"scan", "while"}


def _raises(exc, *fragments):
    return pytest.raises(exc, match="(?s)" + "".join(f"(?=.*{re.escape(f)})" for f in fragments))


class ThreeOnH(rnnlib.RNNCellBase):
    """A cell of a user's with three dense layers on ``h``, as many as a GRU's."""

    features: int

    def layers(self, input_shape):
        init = jax.nn.initializers.lecun_normal()
        n = self.features
        layers = {"x": Dense("x", input_shape[-1], n, init)}
        return {**layers, **{k: Dense("h", n, n, init) for k in ("h1", "h2", "h3")}}

    def update(self, h, a):
        h = jnp.tanh(a["x"] + a["h1"] * jax.nn.sigmoid(a["h2"]) + a["h3"])
        return h, h


def _masked_gru():
    return rnnlib.RecurrentDropoutCell(rnnlib.GRUCell(FEATURES), recurrent_rate=0.5).with_masks()


CELLS = {
    "LSTMCell": lambda: rnnlib.LSTMCell(FEATURES),
    "GRUCell": lambda: rnnlib.GRUCell(FEATURES),
    "masked GRUCell": _masked_gru,
    "ThreeOnH": lambda: ThreeOnH(FEATURES),
    "MinGRUCell": lambda: rnnlib.MinGRUCell(FEATURES),
    "RGLRUCell": lambda: rnnlib.RGLRUCell(FEATURES, num_heads=2),
}
LINEAR = ("MinGRUCell", "RGLRUCell")
PLANS = {
    "default": Plan(),
    "reference": REFERENCE,
    "hoisted": Plan(hoist_inputs=True),
    "in the loop": Plan(hoist_inputs=False),
    "per layer": Plan(join_layers=False),
    "rule": Plan(kernel_gradients_after_loop=True),
    "no rule": Plan(kernel_gradients_after_loop=False),
    "associative": Plan(scan="associative"),
}
CALLS = {
    "plain": {},
    "seq_lengths, carry": {"seq_lengths": np.array([3, 1]), "return_carry": True},
    "seq_lengths": {"seq_lengths": np.array([3, 1])},
    "resets": {"resets": np.array([[False, True, False], [False, False, True]])},
}


def _jaxprs_in(eqn):
    for value in eqn.params.values():
        for item in value if isinstance(value, (tuple, list)) else [value]:
            if hasattr(item, "eqns"):
                yield item
            elif hasattr(item, "jaxpr") and hasattr(item.jaxpr, "eqns"):
                yield item.jaxpr


def _program(fn, *args) -> dict:
    """What ``fn(*args)`` runs, read off its jaxpr: loops, the rule (a ``custom_jvp`` holding a
    loop), matmuls outside every loop and inside the first one."""
    seen = {"loops": 0, "rule": False, "outside": 0, "inside": 0}

    def holds_a_loop(jaxpr):
        return any(
            e.primitive.name in LOOPS or any(holds_a_loop(j) for j in _jaxprs_in(e))
            for e in jaxpr.eqns
        )

    def walk(jaxpr, in_loop):
        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            if name in MATMULS:
                seen["inside" if in_loop else "outside"] += 1
            if name.startswith("custom_jvp") and any(map(holds_a_loop, _jaxprs_in(eqn))):
                seen["rule"] = True
            loop = name in LOOPS
            seen["loops"] += loop and not in_loop
            for sub in _jaxprs_in(eqn):
                walk(sub, in_loop or loop)

    walk(jax.make_jaxpr(fn)(*args).jaxpr, False)
    return seen


def _expected(plan: Plan, cell, step_shape) -> dict:
    """What the resolved ``plan`` says runs, counted from the cell's layers."""
    layers = cell.layers(step_shape)

    def per_side(reads):
        mine = [la for la in layers.values() if getattr(la, "reads", None) == reads]
        dense = sum(isinstance(la, Dense) for la in mine)
        joined = 1 if plan.join_layers and dense > 1 else dense
        return joined + len(mine) - dense

    x, h = per_side("x"), per_side("h")
    if plan.scan == "associative":
        return {"loops": 0, "rule": False, "outside": x, "inside": 0}
    hoisted = plan.hoist_inputs
    return {
        "loops": 1,
        "rule": plan.kernel_gradients_after_loop,
        "outside": x if hoisted else 0,
        "inside": h + (0 if hoisted else x),
    }


def _check(cell_id, plan_id, call_id):
    """The resolved plan, every field filled, each explicit field kept, describes what runs;
    or, where ``resolved_plan`` refuses, ``apply`` refuses with the same error."""
    cell = CELLS[cell_id]()
    x = jnp.ones((BATCH, TIME, FEATURES))
    plan = PLANS[plan_id]
    rnn = RNN(cell, plan=plan)
    variables = jax.eval_shape(RNN(cell).init, jax.random.key(0), x)
    call = CALLS[call_id]
    try:
        resolved = rnn.resolved_plan(x, **call)
    except ValueError as error:
        with pytest.raises(ValueError, match=re.escape(str(error))):
            rnn.apply(variables, x, **call)
        return "refused"
    choices = ("hoist_inputs", "join_layers", "kernel_gradients_after_loop", "scan")
    assert None not in [getattr(resolved, field) for field in choices]
    for field in choices:
        value = getattr(plan, field)
        assert value is None or getattr(resolved, field) == value, (field, plan, resolved)
    ran = _program(lambda v, x: rnn.apply(v, x, **call), variables, x)
    assert ran == _expected(resolved, cell, (BATCH, FEATURES)), (resolved, call_id)
    return resolved


def _cases(cell_id):
    plans = [p for p in PLANS if p != "associative" or cell_id in LINEAR]
    return [(p, c) for p in plans for c in CALLS]


@pytest.mark.parametrize("backend", ["this backend", "gpu"])
@pytest.mark.parametrize("cell_id", CELLS)
def test_the_resolved_plan_is_the_program_that_runs(cell_id, backend):
    outcomes = {}
    with mock.patch("rnnlib.plan._backend", return_value="gpu") if backend == "gpu" else _same():
        for plan_id, call_id in _cases(cell_id):
            outcomes[plan_id, call_id] = _check(cell_id, plan_id, call_id)
    # An explicit rule runs wherever it can: on a GPU too, with the inputs left in the loop.
    rule = outcomes["rule", "plain"]
    if cell_id in LINEAR or not jax_differentiates_sequence():
        assert rule == "refused"
    else:
        assert rule.kernel_gradients_after_loop and not rule.hoist_inputs
    # Nothing else given here is refused, but the rule's conflicts.
    refused = {k for k, v in outcomes.items() if v == "refused"}
    assert {plan for plan, _ in refused} <= {"rule"}


class _same:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_with_seq_lengths_and_a_carry_or_resets_the_default_leaves_the_rule_out():
    x = jnp.ones((BATCH, TIME, FEATURES))
    rnn = RNN(rnnlib.GRUCell(FEATURES))
    for call_id in ("seq_lengths, carry", "resets"):
        assert rnn.resolved_plan(x, **CALLS[call_id]).kernel_gradients_after_loop is False
    # Outputs alone need no carry at the lengths: the rule runs.
    assert rnn.resolved_plan(x, **CALLS["seq_lengths"]) == rnn.resolved_plan(x)


@pytest.mark.parametrize(
    "cell, plan, call, fragments",
    [
        (rnnlib.GRUCell(4), Plan(True, None, True), {}, ["hoist_inputs=True", "run before"]),
        (
            rnnlib.GRUCell(4),
            Plan(kernel_gradients_after_loop=True),
            CALLS["seq_lengths, carry"],
            ["seq_lengths and return_carry", "at its length"],
        ),
        (
            rnnlib.LSTMCell(4),
            Plan(kernel_gradients_after_loop=True),
            CALLS["resets"],
            ["with resets", "sets the carry back"],
        ),
        (
            rnnlib.MinGRUCell(4),
            Plan(scan="sequential", kernel_gradients_after_loop=True),
            {},
            ["MinGRUCell", "a linear cell's update reads the step's input"],
        ),
    ],
)
def test_an_explicit_rule_that_cannot_run_is_a_value_error_saying_why(cell, plan, call, fragments):
    rnn = RNN(cell, plan=plan)
    x = jnp.ones((BATCH, TIME, 4))
    variables = RNN(cell).init(jax.random.key(0), x)
    with _raises(ValueError, "Plan(kernel_gradients_after_loop=True) cannot run for", *fragments):
        rnn.apply(variables, x, **call)


@pytest.mark.skipif(jax_differentiates_sequence(), reason="this JAX runs the rule")
def test_on_a_jax_that_cannot_transpose_the_rule_an_explicit_rule_names_the_version():
    rnn = RNN(rnnlib.GRUCell(4), plan=Plan(kernel_gradients_after_loop=True))
    with _raises(ValueError, "cannot run for", f"this JAX ({jax.__version__})"):
        rnn.resolved_plan(jnp.ones((2, 3, 4)))
    assert jax.__version_info__ < rnnlib.plan.TESTED_JAX  # never turned off on a tested JAX


@mock.patch("rnnlib.plan._backend", lambda: "cpu")  # where the rule is a default
def test_the_resolved_plan_notes_why_the_rule_that_would_pay_is_off():
    x = jnp.ones((2, 3, 4))
    rnn = RNN(rnnlib.GRUCell(4), return_carry=True)
    if jax_differentiates_sequence():
        assert rnn.resolved_plan(x).kernel_gradients_after_loop is True
        assert rnn.resolved_plan(x).note == ""
    else:  # an old JAX: the plan says so instead of turning the rule off unseen
        plan = rnn.resolved_plan(x)
        assert plan.kernel_gradients_after_loop is False
        assert f"this JAX ({jax.__version__}) cannot transpose the rule" in plan.note
        assert "note=" in repr(plan)
    plan = rnn.resolved_plan(x, seq_lengths=jnp.array([1, 3]))
    assert plan.kernel_gradients_after_loop is False
    assert plan.note.startswith("kernel_gradients_after_loop is False: with seq_lengths")
    assert plan == Plan(False, True, False, "sequential")  # the note is not compared


@pytest.mark.parametrize(
    "plan, fragments",
    [
        (
            Plan(hoist_inputs=False, scan="associative"),
            ["got hoist_inputs=False", "scan='sequential'"],
        ),
        (
            Plan(kernel_gradients_after_loop=True, scan="associative"),
            ["got kernel_gradients_after_loop=True", "JAX's own derivatives of the scan"],
        ),
    ],
)
def test_the_associative_scan_refuses_what_it_cannot_run_saying_why(plan, fragments):
    rnn = RNN(rnnlib.MinGRUCell(4), plan=plan)
    with _raises(ValueError, "Plan(scan='associative')", *fragments):
        rnn.resolved_plan(jnp.ones((2, 3, 4)))


def test_an_explicit_in_loop_plan_runs_a_linear_cell_step_by_step_wherever_it_runs():
    for backend in ("cpu", "gpu"):
        with mock.patch("rnnlib.plan._backend", return_value=backend):
            chosen = resolve(Plan(hoist_inputs=False), rnnlib.RGLRUCell(4), (2, 4))
        assert chosen == Plan(False, True, False, "sequential")


@pytest.mark.parametrize(
    "cell, joined",
    [
        (rnnlib.GRUCell(192), False),  # inside the GRU's band (above 160 up to 480 features)
        (rnnlib.RecurrentDropoutCell(rnnlib.GRUCell(192), recurrent_rate=0.1), False),
        (rnnlib.OptimizedLSTMCell(320), False),  # an LSTMCell: the LSTM's band (256 to 416)
        (ThreeOnH(192), True),  # three layers on h, as a GRU, but never measured: no band
        (rnnlib.MGUCell(192), True),
    ],
)
def test_the_cpu_bands_are_the_measured_cells_not_a_count_of_layers(cell, joined):
    with mock.patch("rnnlib.plan._backend", return_value="cpu"):
        assert resolve(Plan(), cell, (8, 16)).join_layers == joined
