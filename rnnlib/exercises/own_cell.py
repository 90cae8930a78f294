"""Checkers for the exercises of the chapter "Writing your own cell" (book/own_cell.ipynb).

The reader writes an IndRNN cell (Li et al., 2018: each unit keeps its own recurrent
weight, a vector ``u`` instead of a matrix)::

    h' = relu(x W + b + u * h)        y = h'

first in flax.linen (an ``nn.RNNCellBase`` run by ``nn.RNN``), then in flax.nnx (an
``nnx.RNNCellBase`` run by ``nnx.RNN``). Both are compared, on the same parameters, with a
reference written as a plain ``jax.lax.scan``; the linen cell also goes through
``rnnlib.testing.check_cell_contract``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from rnnlib.exercises._check import Feedback, attempt, compare
from rnnlib.testing import CellContractError, check_cell_contract

FEATURES = 4
STEP_SHAPE = (2, 3, 3)  # (*batch, channels): two batch dims
STEPS = 6
# The parameters, laid out as linen's nn.Dense(features, name="i") plus one vector "u".
PARAM_PATHS = ["['i']['bias']", "['i']['kernel']", "['u']"]


def _inputs():
    """The checker's input ``(*batch, time, channels)``, from NumPy's seeded generator
    (a ``jax.random`` draw would compile a program of its own)."""
    batch, n_in = STEP_SHAPE[:-1], STEP_SHAPE[-1]
    return np.random.default_rng(7).standard_normal(batch + (STEPS, n_in), dtype=np.float32)


@functools.cache
def _reference_run():
    """The reference's ``(cell parameters, (carry, outputs))`` on the checker's input:
    an IndRNN written as a ``jax.lax.scan`` over time, made once per process."""
    k_i, k_b, k_u = jax.random.split(jax.random.key(8), 3)
    n_in, n = STEP_SHAPE[-1], FEATURES
    params = {
        "i": {
            "kernel": jax.nn.initializers.lecun_normal()(k_i, (n_in, n)),
            "bias": jax.random.normal(k_b, (n,)) * 0.5,
        },
        "u": jax.random.uniform(k_u, (n,), minval=-1.0, maxval=1.0),
    }

    def step(h, x):
        h = jax.nn.relu(x @ params["i"]["kernel"] + params["i"]["bias"] + params["u"] * h)
        return h, h

    xs = _inputs()
    h0 = jnp.zeros(STEP_SHAPE[:-1] + (n,))
    carry, ys = jax.lax.scan(step, h0, jnp.moveaxis(xs, -2, 0))
    outputs = jnp.moveaxis(ys, 0, -2)
    return jax.tree_util.tree_map(np.asarray, params), (np.asarray(carry), np.asarray(outputs))


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


def _names(made) -> str | None:
    """Compares the attempt's parameter paths with the reference's, in words."""
    paths = sorted(jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(made))
    if paths != PARAM_PATHS:
        return (
            f"the cell's parameters are {paths}; expected {PARAM_PATHS} (a dense layer "
            "named 'i' with a kernel and a bias, and a vector 'u'), so that the reference's "
            "parameters can be loaded into it."
        )
    return None


def check_flax_indrnn_cell(cell_class) -> Feedback:
    """Checks a flax.linen IndRNN: ``cell_class(features=4)``, an ``nn.RNNCellBase``.

    First the cell contract (``check_cell_contract`` on steps shaped (2, 3, 3)), then
    ``flax.linen.RNN`` on the reference's parameters: they must be named as the
    reference's (``i/kernel``, ``i/bias``, ``u``) and give the same outputs and final carry
    over 6 steps.
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
    params, want = _reference_run()
    rnn = nn.RNN(cell, return_carry=True)
    made = jax.eval_shape(lambda: rnn.init(jax.random.key(0), _inputs()))["params"]["cell"]
    problem = _names(made)
    if problem:
        return Feedback(name, 3, (problem,))
    got, error = attempt(rnn.apply, {"params": {"cell": params}}, _inputs())
    if error:
        return Feedback(name, 3, (f"nn.RNN(cell).apply on the reference's parameters: {error}",))
    return Feedback(name, 3, tuple(_numbers(got, want)))


def check_nnx_indrnn_cell(cell_class) -> Feedback:
    """Checks a flax.nnx IndRNN: ``cell_class(3, 4, rngs=nnx.Rngs(0))``, an ``nnx.RNNCellBase``
    built from ``(in_features, hidden_features, *, rngs)``.

    Checks ``num_feature_axes``, ``initialize_carry(input_shape)`` with two batch dims, the
    parameters' names (``i`` an ``nnx.Linear``, ``u`` an ``nnx.Param``), then loads the
    reference's parameters with ``nnx.update`` and compares ``nnx.RNN``'s outputs and final
    carry over 6 steps.
    """
    from flax import nnx

    name = "check_nnx_indrnn_cell"
    n_in = STEP_SHAPE[-1]
    cell, error = attempt(cell_class, n_in, FEATURES, rngs=nnx.Rngs(0))
    if error:
        return Feedback(name, 1, (f"building cell_class({n_in}, {FEATURES}, rngs=...): {error}",))
    if not isinstance(cell, nnx.RNNCellBase):
        return Feedback(
            name, 1, (f"the cell should subclass nnx.RNNCellBase; got {type(cell).__name__}.",)
        )
    try:
        axes = cell.num_feature_axes
    except NotImplementedError:
        axes = "not defined (nnx.RNNCellBase leaves it unimplemented)"
    except Exception as error:  # the reader's property may raise anything; report it
        axes = f"raising {type(error).__name__}: {error}"
    if axes != 1:
        shown = axes if isinstance(axes, str) else repr(axes)
        return Feedback(name, 4, (f"num_feature_axes should be 1 (the channels); it is {shown}.",))
    carry, error = attempt(cell.initialize_carry, STEP_SHAPE)
    want_shape = STEP_SHAPE[:-1] + (FEATURES,)
    if error:
        return Feedback(name, 4, (f"initialize_carry({STEP_SHAPE}): {error}",))
    if np.shape(carry) != want_shape:
        return Feedback(
            name,
            4,
            (
                f"initialize_carry({STEP_SHAPE}) returned shape {np.shape(carry)}; expected "
                f"{want_shape}: every axis of input_shape but the last, then the features.",
            ),
        )
    problem = _names(nnx.to_pure_dict(nnx.state(cell, nnx.Param)))
    if problem:
        return Feedback(name, 4, (problem,))
    params, want = _reference_run()
    _, error = attempt(nnx.update, cell, jax.tree_util.tree_map(jnp.asarray, params))
    if error:
        return Feedback(name, 4, (f"loading the reference's parameters with nnx.update: {error}",))
    got, error = attempt(lambda: nnx.RNN(cell)(_inputs(), return_carry=True))
    if error:
        return Feedback(name, 4, (f"nnx.RNN(cell) on the reference's parameters: {error}",))
    return Feedback(name, 4, tuple(_numbers(got, want)))
