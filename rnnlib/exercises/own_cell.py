"""Checkers for the exercises of the chapter "Writing your own cell" (book/own_cell.ipynb).

The reader writes an IndRNN cell (Li et al., 2018: each unit keeps its own recurrent
weight, a vector ``u`` instead of a matrix)::

    h' = relu(x W + b + u * h)        y = h'

first in rnnlib (``initialize_carry`` and ``update`` of a subclass of ``IndRNNParams``),
then in flax.linen (``__call__``). Each checker runs ``rnnlib.testing.check_cell_contract``
on the attempt, then compares its numbers with a reference on the same parameters.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from rnnlib.cell_base import RNNCellBase
from rnnlib.exercises._check import Feedback, attempt, compare
from rnnlib.linear import Dense, Param
from rnnlib.rnn import RNN
from rnnlib.testing import CellContractError, check_cell_contract

FEATURES = 4
STEP_SHAPE = (2, 3, 3)  # (*batch, channels): two batch dims
STEPS = 6


def _half_normal(key, shape, dtype=jnp.float32):
    return jax.random.normal(key, shape, dtype) * 0.5


def _symmetric_uniform(key, shape, dtype=jnp.float32):
    return jax.random.uniform(key, shape, dtype, minval=-1.0, maxval=1.0)


class IndRNNParams(RNNCellBase):
    """The parts of an rnnlib IndRNN cell the exercise gives: its fields and layers.

    Parameters, laid out as flax.linen's ``nn.Dense(features, name="i")`` plus one vector:
    ``{"i": {"kernel": (in_features, features), "bias": (features,)}, "u": (features,)}``.
    A subclass writes ``initialize_carry(rng, input_shape)`` and ``update(h, a)``, where
    ``a["i"]`` is ``x W + b`` and ``a["u"]`` is ``u``.
    """

    features: int = FEATURES

    def layers(self, input_shape):
        lecun = jax.nn.initializers.lecun_normal()
        return {
            "i": Dense("x", input_shape[-1], self.features, lecun, _half_normal),
            "u": Param((self.features,), _symmetric_uniform),
        }


class _Reference(IndRNNParams):
    def initialize_carry(self, rng, input_shape):
        return jnp.zeros(tuple(input_shape[:-1]) + (self.features,))

    def update(self, h, a):
        h = jax.nn.relu(a["i"] + a["u"] * h)
        return h, h


def _inputs():
    """The checker's input ``(*batch, time, channels)``, from NumPy's seeded generator
    (a ``jax.random`` draw would compile a program of its own)."""
    batch, n_in = STEP_SHAPE[:-1], STEP_SHAPE[-1]
    return np.random.default_rng(7).standard_normal(batch + (STEPS, n_in), dtype=np.float32)


@functools.cache
def _reference_run():
    """The reference's ``(variables, (carry, outputs))`` on the checker's input, made once
    per process (both checkers compare with it)."""
    reference = RNN(_Reference(), return_carry=True)
    outputs, variables = reference.init_with_output(jax.random.key(8), _inputs())
    return variables, jax.tree_util.tree_map(np.asarray, outputs)


def _contract(cell) -> str | None:
    """The contract's verdict on ``cell`` in words, or None when it holds."""
    try:
        check_cell_contract(cell, STEP_SHAPE, steps=4)
    except CellContractError as error:
        return f"the cell contract, part '{error.part}': {error.problem}"
    return None


def _numbers(got, want) -> list[str]:
    """Compares ``(carry, outputs)`` with the reference's, naming the likely cause."""
    problems = []
    for name, g, w in (("outputs", got[1], want[1]), ("final carry", got[0], want[0])):
        problem = compare(name, np.asarray(g), np.asarray(w))
        if problem:
            problems.append(f"on the same parameters and inputs, {problem}")
    if problems and bool(np.any(np.asarray(got[1]) < 0)):
        problems.append(
            "some outputs are negative, but relu(...) never is: is the activation relu?"
        )
    return problems


def check_indrnn_cell(cell_class) -> Feedback:
    """Checks an rnnlib IndRNN: ``cell_class(features=4)`` subclasses ``IndRNNParams``.

    First the cell contract (``check_cell_contract`` on steps shaped (2, 3, 3)), then the
    outputs and final carry of ``rnnlib.RNN`` over 6 steps against the reference's.
    """
    name = "check_indrnn_cell"
    cell, error = attempt(cell_class, features=FEATURES)
    if error:
        return Feedback(name, 1, (f"building cell_class(features={FEATURES}): {error}",))
    if not isinstance(cell, IndRNNParams):
        return Feedback(
            name,
            1,
            (f"the cell should subclass IndRNNParams; got {type(cell).__name__}.",),
        )
    problem = _contract(cell)
    if problem:
        return Feedback(name, 2, (problem,))
    variables, want = _reference_run()
    got, error = attempt(RNN(cell, return_carry=True).apply, variables, _inputs())
    if error:
        return Feedback(name, 2, (f"RNN(cell).apply on the reference's variables: {error}",))
    return Feedback(name, 2, tuple(_numbers(got, want)))


def check_flax_indrnn_cell(cell_class) -> Feedback:
    """Checks a flax.linen IndRNN: ``cell_class(features=4)``, an ``nn.RNNCellBase``.

    First the cell contract, then ``flax.linen.RNN`` on the rnnlib reference's variables:
    the parameters must be named as the reference's (``i/kernel``, ``i/bias``, ``u``) and
    give the same outputs and final carry.
    """
    import flax.linen as nn

    name = "check_flax_indrnn_cell"
    cell, error = attempt(cell_class, features=FEATURES)
    if error:
        return Feedback(name, 1, (f"building cell_class(features={FEATURES}): {error}",))
    if not isinstance(cell, nn.RNNCellBase):
        return Feedback(
            name, 1, (f"the cell should subclass nn.RNNCellBase; got {type(cell).__name__}.",)
        )
    problem = _contract(cell)
    if problem:
        return Feedback(name, 3, (problem,))
    variables, want = _reference_run()
    rnn = nn.RNN(cell, return_carry=True)
    made = jax.eval_shape(lambda: rnn.init(jax.random.key(0), _inputs()))["params"]["cell"]
    names = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(made)[0]]
    expected = [
        jax.tree_util.keystr(p)
        for p, _ in jax.tree_util.tree_flatten_with_path(variables["params"]["cell"])[0]
    ]
    if sorted(names) != sorted(expected):
        return Feedback(
            name,
            3,
            (
                f"the cell's parameters are {sorted(names)}; expected {sorted(expected)}, "
                "as in the rnnlib cell (nn.Dense(features, name='i') and self.param('u', ...)), "
                "so that one set of variables serves both libraries.",
            ),
        )
    got, error = attempt(rnn.apply, variables, _inputs())
    if error:
        return Feedback(name, 3, (f"nn.RNN(cell).apply on the reference's variables: {error}",))
    return Feedback(name, 3, tuple(_numbers(got, want)))
