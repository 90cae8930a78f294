"""Every wrapper with every cell under every plan: it runs, it is finite, and every plan
gives the same numbers and the same gradients (a plan says how a program runs, never what it
computes)."""

import jax
import jax.numpy as jnp
import pytest

from rnnlib import (
    RNN,
    Bidirectional,
    GRUCell,
    LSTMCell,
    MinGRUCell,
    MinLSTMCell,
    Plan,
    RecurrentDropoutCell,
    RGLRUCell,
    RNNCellBase,
    SimpleCell,
    StackedRNN,
)
from rnnlib.linear import Dense
from rnnlib.plan import REFERENCE
from tests import tolerance

FEATURES = 4
X = jax.random.normal(jax.random.key(1), (2, 5, FEATURES))
RNGS = {"dropout": jax.random.key(2)}
# Terms summed into one output: up to two layers of 5 steps, each a sum over the input,
# the carry and a bias; a gradient sums that again over the batch and the steps.
TERMS = 2 * 5 * (2 * FEATURES + 1)
GRADIENT_TERMS = TERMS * 2 * 5


class OwnCell(RNNCellBase):
    """A user's cell: h' = tanh(x W + h U), written with the base class's hooks only."""

    features: int

    def layers(self, input_shape):
        init = jax.nn.initializers.lecun_normal()
        return {
            "x": Dense("x", input_shape[-1], self.features, init, jax.nn.initializers.zeros),
            "h": Dense("h", self.features, self.features, init),
        }

    def update(self, h, a):
        h = jnp.tanh(a["x"] + a["h"])
        return h, h


CELLS = {
    "simple": SimpleCell(FEATURES),
    "lstm": LSTMCell(FEATURES),
    "gru": GRUCell(FEATURES),
    "own": OwnCell(FEATURES),
    "mingru": MinGRUCell(FEATURES),
    "minlstm": MinLSTMCell(FEATURES),
    "rglru": RGLRUCell(FEATURES, num_heads=2),
}
LINEAR = {"mingru", "minlstm", "rglru"}
WRAPPERS = ["rnn", "dropout", "stacked", "bidirectional", "stacked bidirectional dropout"]


def _plans(name):
    plans = [Plan(), REFERENCE, Plan(hoist_inputs=True, join_layers=True)]
    return plans + ([Plan(scan="associative")] if name in LINEAR else [])


def _dropout(cell, name):  # a linear cell reads no h: input dropout only
    return RecurrentDropoutCell(cell, recurrent_rate=0.0 if name in LINEAR else 0.3, input_rate=0.2)


def _model(name, wrapper, plan):
    cell = CELLS[name]
    if wrapper == "rnn":
        return RNN(cell, plan=plan)
    if wrapper == "dropout":
        return StackedRNN((RNN(_dropout(cell, name), plan=plan),))
    if wrapper == "stacked":
        return StackedRNN((RNN(cell, plan=plan), RNN(cell, plan=plan)), dropout_rate=0.1)
    if wrapper == "bidirectional":
        return Bidirectional(RNN(cell, plan=plan), RNN(cell, plan=plan))
    forward, backward = (RNN(_dropout(cell, name), plan=plan) for _ in range(2))
    return StackedRNN((Bidirectional(forward, backward),))


def _run(model, variables):
    if isinstance(model, StackedRNN):
        return model.apply(variables, X, deterministic=False, rngs=RNGS)
    return model.apply(variables, X)


def _outputs_and_gradients(model, variables):
    def loss(variables):
        y = _run(model, variables)
        return jnp.mean(y**2), y

    (_, y), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(variables)
    return y, grads


@pytest.mark.parametrize("wrapper", WRAPPERS)
@pytest.mark.parametrize("name", list(CELLS))
def test_every_wrapper_runs_every_cell_with_the_same_numbers_under_every_plan(name, wrapper):
    plans = _plans(name)
    variables = _model(name, wrapper, plans[0]).init(jax.random.key(0), X)
    reference, reference_grads = _outputs_and_gradients(_model(name, wrapper, REFERENCE), variables)
    assert all(bool(jnp.isfinite(leaf).all()) for leaf in jax.tree.leaves(reference_grads))
    assert bool(jnp.isfinite(reference).all())
    for plan in [p for p in plans if p != REFERENCE]:
        got, grads = _outputs_and_gradients(_model(name, wrapper, plan), variables)
        tolerance.assert_close(got, reference, terms=TERMS, label=str(plan))
        tolerance.assert_close(grads, reference_grads, terms=GRADIENT_TERMS, label=str(plan))


@pytest.mark.parametrize("name", sorted(LINEAR))
def test_a_linear_cell_wrapped_in_recurrent_dropout_keeps_its_associative_scan(name):
    cell = _dropout(CELLS[name], name)
    masks = cell.draw_masks(jax.random.key(3), X.shape[:1] + X.shape[2:])
    rnn = RNN(cell.with_masks(*masks), plan=Plan(scan="associative"))
    variables = rnn.init(jax.random.key(0), X)
    scan = rnn.apply(variables, X)
    loop = RNN(cell.with_masks(*masks), plan=REFERENCE).apply(variables, X)
    tolerance.assert_close(scan, loop, terms=TERMS)
    plain = RNN(cell.with_masks(), plan=REFERENCE).apply(variables, X)
    assert float(jnp.abs(plain - loop).max()) > 1e-3, "the input dropout changed nothing"
