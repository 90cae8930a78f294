"""How ``RNN`` computes a cell is a value, ``rnnlib.Plan``, and no plan changes the numbers.

Every plan (the input layers hoisted before the loop or not, the dense layers joined into
one matmul or not, the whole-sequence rule or JAX's own derivatives) gives the outputs,
carry and derivatives of ``rnnlib.plan.REFERENCE``, the plain program, to every order. The
whole-sequence rule works for any cell that declares its layers, a user's own included,
and the structure it promises (the kernels' gradients as matmuls after the loop) is read
off the jaxpr.
"""

from __future__ import annotations

import functools
from unittest import mock

import jax
import jax.numpy as jnp
import pytest

import rnnlib
from rnnlib.exercises.speed import matmuls
from rnnlib.linear import Dense, Param
from rnnlib.plan import REFERENCE, Plan, jax_differentiates_sequence, resolve
from tests.parity_helpers import (
    CELLS_BY_ID,
    random_array,
    random_carry,
    random_lengths,
    sequence_input,
)
from tests.tolerance import assert_close, recurrent_terms

TIME = 5
ON_CPU = jax.default_backend() == "cpu"
RULE = ON_CPU and jax_differentiates_sequence()
# A plan that asks for the rule where this JAX cannot transpose it (jax 0.4.30, 0.8.1) fails
# with that JAX's error; where RNN chooses by itself it takes JAX's own derivatives there.
needs_the_rule = pytest.mark.skipif(
    not jax_differentiates_sequence(), reason="this JAX cannot differentiate the rule"
)


class UsersCell(rnnlib.RNNCellBase):
    """A cell no part of rnnlib knows: a gated Elman cell with a learned per-unit decay."""

    features: int

    def initialize_carry(self, rng, input_shape):
        return jnp.zeros(tuple(input_shape[:-1]) + (self.features,))

    def layers(self, input_shape):
        init = jax.nn.initializers.lecun_normal()
        n = self.features
        return {
            "x": Dense("x", input_shape[-1], n, init, jax.nn.initializers.zeros),
            "gate": Dense("x", input_shape[-1], n, init),
            "h": Dense("h", n, n, init),
            "decay": Param((n,), jax.nn.initializers.uniform(1.0)),
        }

    def update(self, h, a):
        g = jax.nn.sigmoid(a["gate"] + a["decay"] * h)
        h = g * jnp.tanh(a["x"] + a["h"]) + (1 - g) * h
        return h, h


CASES = {cid: CELLS_BY_ID[cid] for cid in ("LSTMCell", "GRUCell", "MGUCell-reset_gate")}
CASES.update({cid: CELLS_BY_ID[cid] for cid in ("SimpleCell-residual", "ConvLSTMCell-2d")})
CELL_IDS = [*CASES, "UsersCell"]
PLANS = {
    "default": Plan(),
    "hoisted": Plan(hoist_inputs=True),
    "per layer, in the loop, rule": Plan(False, False, True),
    "joined, in the loop, rule": Plan(False, True, True),
    "joined, hoisted, no rule": Plan(True, True, False),
}
PLAN_PARAMS = [
    pytest.param(name, marks=needs_the_rule if PLANS[name].kernel_gradients_after_loop else ())
    for name in PLANS
]


def _cell_and_input(cell_id, batch=(3,)):
    if cell_id == "UsersCell":
        return UsersCell(4), sequence_input(0, batch, TIME, (3,))
    case = CASES[cell_id]
    return case.twins()[1], sequence_input(0, batch, TIME, case.feature_shape)


def _loss(output):
    leaves = jax.tree_util.tree_leaves(output)
    return sum(jnp.sum(jnp.sin(leaf * (i + 1))) for i, leaf in enumerate(leaves))


def _run(cell, plan, variables, x, carry, lengths=None):
    """``(carry, outputs)`` and the gradient of ``_loss`` with respect to the variables,
    the input and the initial carry, jitted."""
    rnn = rnnlib.RNN(cell, return_carry=True, plan=plan)

    def apply(v, x, c):
        return rnn.apply(v, x, initial_carry=c, seq_lengths=lengths)

    grads = jax.grad(lambda *args: _loss(apply(*args)), argnums=(0, 1, 2))
    return jax.jit(apply)(variables, x, carry), jax.jit(grads)(variables, x, carry)


@pytest.mark.parametrize("plan_id", PLAN_PARAMS)
@pytest.mark.parametrize("cell_id", CELL_IDS)
@pytest.mark.parametrize("lengths", [False, True], ids=["whole", "seq_lengths"])
def test_every_plan_gives_the_reference_outputs_carry_and_gradients(cell_id, plan_id, lengths):
    cell, x = _cell_and_input(cell_id)
    variables = rnnlib.RNN(cell).init(jax.random.key(0), x)
    carry = random_carry(cell, 1, x.shape[:1] + x.shape[2:])
    seq_lengths = random_lengths(2, (3,), TIME, minimum=0) if lengths else None
    if lengths and PLANS[plan_id].kernel_gradients_after_loop:  # refused, never run plainly
        with pytest.raises(ValueError, match="seq_lengths and return_carry"):
            _run(cell, PLANS[plan_id], variables, x, carry, seq_lengths)
        return
    got = _run(cell, PLANS[plan_id], variables, x, carry, seq_lengths)
    want = _run(cell, REFERENCE, variables, x, carry, seq_lengths)
    assert_close(got, want, terms=recurrent_terms(cell, x.shape, steps=TIME, gradient=True))


@needs_the_rule
@pytest.mark.parametrize("cell_id", CELL_IDS)
def test_the_whole_sequence_rule_agrees_with_the_plain_loop_in_forward_mode_and_to_second_order(
    cell_id,
):
    """``jax.jvp`` of the outputs, and a Hessian-vector product (``jax.jvp`` of
    ``jax.grad``), in the variables, the input and the initial carry at once."""
    cell, x = _cell_and_input(cell_id, batch=(2,))
    variables = rnnlib.RNN(cell).init(jax.random.key(0), x)
    carry = random_carry(cell, 1, x.shape[:1] + x.shape[2:])
    primals = (variables, x, carry)
    tangents = jax.tree_util.tree_map(lambda a: random_array(3, a.shape, a.dtype), primals)

    def derivatives(plan):
        rnn = rnnlib.RNN(cell, return_carry=True, plan=plan)

        def apply(v, x, c):
            return rnn.apply(v, x, initial_carry=c)

        def loss(*args):
            return _loss(apply(*args))

        jvp = jax.jvp(apply, primals, tangents)
        hvp = jax.jvp(jax.grad(loss, argnums=(0, 1, 2)), primals, tangents)[1]
        return jax.jit(lambda: (jvp, hvp))()

    terms = 4 * recurrent_terms(cell, x.shape, steps=TIME, gradient=True)
    assert_close(derivatives(Plan(False, True, True)), derivatives(REFERENCE), terms=terms)


def test_the_rule_is_taken_by_default_on_cpu_where_this_jax_can_differentiate_it():
    cell, x = _cell_and_input("UsersCell")
    chosen = resolve(Plan(), cell, x.shape[:1] + x.shape[2:])
    assert chosen.kernel_gradients_after_loop == RULE
    assert chosen.hoist_inputs == (not ON_CPU)
    assert resolve(REFERENCE, cell, (3, 3)) == REFERENCE
    assert resolve(Plan(hoist_inputs=True), cell, (3, 3)).kernel_gradients_after_loop is False


@pytest.mark.pinned_env
@pytest.mark.skipif(not ON_CPU, reason="the rule is the CPU's default")
def test_the_pinned_jax_differentiates_the_rule():
    assert jax_differentiates_sequence()


@needs_the_rule
@pytest.mark.parametrize("cell_id", ["UsersCell", "LSTMCell", "GRUCell"])
def test_the_rule_takes_each_sides_kernel_gradient_as_one_matmul_after_the_loop(cell_id):
    """In a training step under the rule, the forward loop holds one matmul per side (the
    dense layers joined), and the kernels' gradients are one matmul per side over every
    step's rows, outside the loops; the plain program takes them inside the backward
    loop, one per layer and step, and has no matmul outside."""
    cell, x = _cell_and_input(cell_id)
    variables = rnnlib.RNN(cell).init(jax.random.key(0), x)

    def counted(plan):
        rnn = rnnlib.RNN(cell, plan=plan)
        return matmuls(jax.grad(lambda v: jnp.sum(rnn.apply(v, x) ** 2)), variables)

    assert counted(Plan(False, True, True)) == (2, 2)
    assert counted(Plan(False, False, True)) == (2, 2)  # joined whatever join_layers says
    layers = len(cell.layers(x.shape[:1] + x.shape[2:])) - (cell_id == "UsersCell")
    assert counted(REFERENCE) == (layers, 0)


def test_cpu_default_training_step_takes_the_rule_for_a_users_cell():
    cell, x = _cell_and_input("UsersCell")
    rnn = rnnlib.RNN(cell)
    variables = rnn.init(jax.random.key(0), x)
    counted = matmuls(jax.grad(lambda v: jnp.sum(rnn.apply(v, x) ** 2)), variables)
    assert counted == ((2, 2) if RULE else (2, 0) if ON_CPU else counted)


def test_a_plan_joins_the_dense_layers_that_read_one_input_or_runs_one_matmul_each():
    cell = rnnlib.LSTMCell(features=4)
    x = jax.ShapeDtypeStruct((2, 5, 3), jnp.float32)
    variables = jax.eval_shape(rnnlib.RNN(cell).init, jax.random.key(0), x)
    for join, hoist, counts in [
        (True, False, (2, 0)),
        (False, False, (8, 0)),
        (True, True, (1, 1)),
    ]:
        rnn = rnnlib.RNN(cell, plan=Plan(hoist_inputs=hoist, join_layers=join))
        assert matmuls(rnn.apply, variables, x) == counts


@pytest.mark.parametrize(
    "make, features, rows, joined, rule",
    [
        (rnnlib.GRUCell, 160, 8, True, True),
        (rnnlib.GRUCell, 161, 8, False, True),
        (rnnlib.GRUCell, 192, 64, False, True),
        (rnnlib.GRUCell, 481, 64, True, True),
        (rnnlib.GRUCell, 128, 16, True, True),
        (rnnlib.GRUCell, 128, 32, False, True),
        (rnnlib.GRUCell, 128, 128, False, True),
        (rnnlib.GRUCell, 128, 256, True, True),
        (rnnlib.GRUCell, 64, 32, True, True),
        (rnnlib.GRUCell, 64, 64, False, True),
        (rnnlib.GRUCell, 64, 256, False, True),
        (rnnlib.GRUCell, 32, 128, True, True),
        (rnnlib.GRUCell, 512, 256, True, False),
        (rnnlib.GRUCell, 257, 128, False, False),
        (rnnlib.GRUCell, 256, 256, False, True),
        (rnnlib.GRUCell, 512, 127, True, True),
        (rnnlib.GRUCell, 513, 256, True, True),
        (rnnlib.LSTMCell, 192, 63, False, True),
        (rnnlib.LSTMCell, 192, 64, True, True),
        (rnnlib.LSTMCell, 320, 64, False, True),
        (rnnlib.LSTMCell, 512, 256, True, True),
        (rnnlib.MGUCell, 320, 8, True, True),
    ],
)
def test_on_cpu_the_plan_follows_the_measured_bands_of_rows_and_widths(
    make, features, rows, joined, rule
):
    """XLA:CPU runs a joined matmul of some widths and rows slowly (benchmarks/README.md, "One
    matmul per layer inside bands of widths"), and from 128 rows at 257-512 features a GRU
    trains faster with JAX's own derivative than under the rule ("Where the rule does not
    pay"); the bands are those measured for the GRU and the LSTM (an MGU has none). The forward
    pass runs one matmul per layer inside a band."""
    cell = make(features)
    chosen = resolve(Plan(), cell, (rows, 16))
    assert chosen.join_layers == (joined or not ON_CPU)
    assert chosen.kernel_gradients_after_loop == (RULE and rule)
    x = jax.ShapeDtypeStruct((rows, 3, 16), jnp.float32)
    variables = jax.eval_shape(rnnlib.RNN(cell).init, jax.random.key(0), x)
    per_step = len([n for n in cell.layers((rows, 16)) if n[0] == "h"]) * 2
    assert matmuls(rnnlib.RNN(cell).apply, variables, x)[0] == (
        2 if joined or not ON_CPU else per_step
    )


@pytest.mark.parametrize("cell_id", CELL_IDS)
def test_param_shapes_are_read_from_the_layers_without_tracing(cell_id):
    cell, x = _cell_and_input(cell_id)
    step_shape = x.shape[:1] + x.shape[2:]
    traced = jax.eval_shape(
        functools.partial(cell.create_params, input_shape=step_shape), jax.random.key(0)
    )
    with mock.patch("jax.eval_shape", side_effect=AssertionError("param_shapes traced")):
        written = cell.param_shapes(step_shape)
    assert written == traced


@needs_the_rule
def test_recurrent_dropout_masks_hold_under_the_rule():
    """The masked cell drops the same units in the rule's loop and its derivative."""
    inner, x = _cell_and_input("GRUCell")
    cell = rnnlib.RecurrentDropoutCell(inner, recurrent_rate=0.3, input_rate=0.2)
    masks = cell.draw_masks(jax.random.key(4), x.shape[:1] + x.shape[2:])
    variables = {
        "params": {
            "cell": rnnlib.RNN(cell.with_masks()).init(jax.random.key(0), x)["params"]["cell"]
        }
    }
    carry = random_carry(inner, 1, x.shape[:1] + x.shape[2:])

    def run(plan):
        return _run(cell.with_masks(*masks), plan, variables, x, carry)

    terms = recurrent_terms(inner, x.shape, steps=TIME, gradient=True)
    assert_close(run(Plan(False, True, True)), run(REFERENCE), terms=terms)


@needs_the_rule
def test_the_rule_computes_in_the_cells_dtype():
    cell = rnnlib.LSTMCell(4, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16)
    x = sequence_input(0, (3,), TIME, (3,), dtype=jnp.bfloat16)
    variables = rnnlib.RNN(cell).init(jax.random.key(0), x)
    carry = cell.initialize_carry(jax.random.key(1), x.shape[:1] + x.shape[2:])
    got, want = (_run(cell, p, variables, x, carry) for p in (Plan(False, True, True), REFERENCE))
    assert {leaf.dtype for leaf in jax.tree_util.tree_leaves(got)} == {jnp.dtype(jnp.bfloat16)}
    terms = recurrent_terms(cell, x.shape, steps=TIME, gradient=True)
    assert_close(got, want, terms=terms, compute_dtype=jnp.bfloat16)


class ReadsXTwice(UsersCell):
    """``UsersCell`` with its ``x`` layer read a second time, outside its sum with ``h``."""

    def update(self, h, a):
        h = jnp.tanh(a["x"] + a["h"]) * jax.nn.sigmoid(a["gate"] + a["x"])
        return h, h


@pytest.mark.parametrize(
    "cell_id, pairs",
    [
        ("LSTMCell", {"ii": "hi", "if": "hf", "ig": "hg", "io": "ho"}),
        ("GRUCell", {"ir": "hr", "iz": "hz"}),  # not in/hn: r multiplies the h side first
        ("MGUCell-reset_gate", {"if": "hf"}),
        ("UsersCell", {"x": "h"}),
        ("ReadsXTwice", {}),
    ],
)
def test_the_rule_folds_an_x_and_an_h_layer_into_one_stream_only_where_update_reads_their_sum(
    cell_id, pairs
):
    """The rule's tangent feeds a pair of layers as one stream only where ``update`` reads
    the two outputs once each, in one ``add``: for ``ReadsXTwice`` it must keep them apart,
    and its gradients still equal the plain program's."""
    from rnnlib.plan import _sums

    twice = cell_id == "ReadsXTwice"
    cell, x = _cell_and_input("UsersCell" if twice else cell_id)
    cell = ReadsXTwice(4) if twice else cell
    step = x.shape[:1] + x.shape[2:]
    bound = cell.bind(cell.create_params(jax.random.key(0), step), step, join=True)
    carry = cell.initialize_carry(jax.random.key(1), step)
    assert _sums(bound, carry, jnp.moveaxis(x, 1, 0)) == pairs  # time-major, as the rule's
    if twice and jax_differentiates_sequence():
        variables = rnnlib.RNN(cell).init(jax.random.key(0), x)
        got = _run(cell, Plan(False, True, True), variables, x, carry)
        want = _run(cell, REFERENCE, variables, x, carry)
        assert_close(got, want, terms=recurrent_terms(cell, x.shape, steps=TIME, gradient=True))
