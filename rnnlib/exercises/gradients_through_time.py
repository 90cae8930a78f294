"""Checkers for the exercises of the chapter "Gradients through time".

``check_gradient_norms(fn)``: ``fn(rnn, variables, xs)`` returns, for a ``flax.linen.RNN``
and an input ``xs`` shaped ``(batch, time, channels)``, the ``(batch, time)`` norms
``|| d h_T / d x_t ||`` of the Jacobian of each sequence's last output ``h_T`` with respect
to each of its input steps ``x_t``.

``check_checkpointed_rnn(fn)``: ``fn(cell, variables, xs)`` runs a ``flax.linen`` cell over a
time-major input ``(time, batch, channels)`` with ``jax.checkpoint`` around each step, and
returns the stacked outputs ``(time, batch, features)``, the same numbers as
``flax.linen.RNN(cell, time_major=True)``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from rnnlib.exercises._check import Feedback, attempt, compare, run_cases

# Elementwise functions a cell applies to its gates and carry; a backward pass that holds
# one of them is computing the step again.
_ACTIVATIONS = frozenset({"tanh", "logistic"})


def _variables(init, recurrent_scale, seed, *example_args):
    """Variables laid out as ``init(key, *example_args)`` lays them out, drawn with NumPy.

    ``jax.eval_shape`` gives the layout without running anything; the values come from a
    seeded NumPy generator (a checker should not spend a reader's time compiling random
    initialisers): kernels scaled by ``1/sqrt(fan_in)``, recurrent kernels (layers whose
    name starts with ``h``) orthogonal times ``recurrent_scale``, biases uniform in
    ``(-0.5, 0.5)`` so that a forgotten bias would show.
    """
    rng = np.random.default_rng(seed)
    shapes = jax.eval_shape(init, jax.random.key(0), *example_args)

    def draw(path, leaf):
        layer, kind = path[-2].key, path[-1].key
        if kind == "bias":
            values = rng.uniform(-0.5, 0.5, leaf.shape)
        elif layer.startswith("h"):
            q, r = np.linalg.qr(rng.standard_normal(leaf.shape))
            values = recurrent_scale * q * np.sign(np.diag(r))
        else:
            values = rng.standard_normal(leaf.shape) / np.sqrt(leaf.shape[0])
        return jnp.asarray(values, leaf.dtype)

    return jax.tree_util.tree_map_with_path(draw, shapes)


def _inputs(seed, shape):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), jnp.float32)


@functools.cache
def _norm_cases():
    """(name, rnn, variables, xs, reference norms): short sequences, so that no norm is
    vanishingly small. Built once per process, from NumPy, with the reference compiled
    once per case: checking a stub and then a solution reuses them."""
    cells = [  # norms that shrink with distance, and norms that do not
        ("nn.LSTMCell(5), batch 3, 7 steps, 2 channels", nn.LSTMCell(5), (3, 7, 2), 1.0),
        (
            "nn.GRUCell(3) with recurrent scale 3, batch 2, 5 steps, 4 channels",
            nn.GRUCell(3),
            (2, 5, 4),
            3.0,
        ),
    ]
    cases = []
    for index, (name, cell, shape, scale) in enumerate(cells):
        rnn = nn.RNN(cell)
        xs = _inputs(100 + index, shape)
        variables = _variables(rnn.init, scale, 100 + index, xs)
        want = reference_gradient_norms(rnn, variables, xs)
        cases.append((name, rnn, variables, xs, want))
    return tuple(cases)


def _last(ys):
    return ys[-1]


def _sum_last(ys):
    return jnp.sum(ys[-1])


def _first(ys):
    return ys[0]


def _sum_over_time(ys):
    return jnp.sum(ys, axis=0)


@functools.partial(jax.jit, static_argnums=(0, 3))
def _jitted_jacobian_norms(rnn, variables, xs, output):
    def one(x):  # (time, channels)
        jacobian = jax.jacrev(lambda x: output(rnn.apply(variables, x)))(x)
        jacobian = jacobian.reshape(-1, *x.shape)  # (outputs, time, channels)
        return jnp.sqrt(jnp.sum(jacobian**2, axis=(0, 2)))

    return jax.vmap(one)(xs)


def _jacobian_norms(rnn, variables, xs, output):
    """Per sequence, the norms over (outputs, channels) of d output(ys) / d x_t:
    ``(batch, time)`` for ``xs`` shaped ``(batch, time, channels)``; ``output`` is a
    module-level function, so that each one is compiled once per case's shapes."""
    return np.asarray(_jitted_jacobian_norms(rnn, variables, xs, output))


def reference_gradient_norms(rnn, variables, xs):
    """The reference: ``|| d h_T / d x_t ||`` (Frobenius) per sequence and step,
    ``(batch, time)``."""
    return _jacobian_norms(rnn, variables, xs, _last)


def _compiled_first(fn, static_argnums):
    """``fn`` under ``jax.jit`` (one compiled program per case instead of one per
    operation); when tracing fails (an attempt that calls NumPy on its arrays, or returns
    something that is not an array), ``fn`` itself, so the reader sees what it does."""
    jitted = jax.jit(fn, static_argnums=static_argnums)

    def run(*args):
        try:
            return jitted(*args)
        except Exception:
            return fn(*args)

    return run


def _close(got, want) -> bool:
    return np.shape(got) == np.shape(want) and compare("", got, want) is None


def _diagnose_norms(got, rnn, variables, xs, want) -> str:
    """Names a known mistake when the values match one, else the generic difference."""
    if _close(got, want[:, ::-1]):
        return (
            "the norms are in reverse order: entry t must belong to input x_t, so entry 0 "
            "is the step farthest from h_T and entry -1 the nearest; yours are indexed by "
            "the distance T - 1 - t"
        )
    if _close(got, want**2):
        return "these are the squared norms; take the square root (the Frobenius norm)"
    wrong_outputs = [
        ("sum(h_T)", _sum_last),
        ("the first output ys[0] (h_1), not the last", _first),
        ("the sum of all outputs over time", _sum_over_time),
    ]
    for what, output in wrong_outputs:
        if _close(got, _jacobian_norms(rnn, variables, xs, output)):
            return (
                f"these are the norms of the gradient of {what} with respect to x_t; the "
                "exercise asks for the whole Jacobian d h_T / d x_t of the last output "
                "h_T, every feature of it (for example with jax.jacrev)"
            )
    return compare("the norms", got, want)


def _shape_hint(shape, batch, steps, channels) -> str:
    if shape == (steps,):
        return ": one row per sequence; did you add up or merge the batch?"
    if shape == (steps, batch):
        return ": batch first, then time (transposed?)"
    if shape == (batch, steps, channels):
        return (
            ": one norm per step and channel; take one norm per step, over the features "
            "of h_T and the channels of x_t together"
        )
    if len(shape) > 2:
        return ": reduce each Jacobian to one norm per input step"
    return ""


def check_gradient_norms(fn: Callable[..., Any]) -> Feedback:
    """Checks ``fn(rnn, variables, xs) -> (batch, time)`` against the reference."""
    cases = [(name, (rnn, variables, xs), want) for name, rnn, variables, xs, want in _norm_cases()]
    return run_cases("check_gradient_norms", _compiled_first(fn, 0), cases, _judge_norms)


def _judge_norms(got, rnn, variables, xs, want) -> str | None:
    try:
        got = np.asarray(got, dtype=want.dtype)
    except Exception:  # a value NumPy cannot read as an array of floats
        return f"expected an array of shape {want.shape}; got {type(got).__name__}"
    if got.shape != want.shape:
        hint = _shape_hint(got.shape, *xs.shape)
        return f"the norms have shape {got.shape}; expected {want.shape} = (batch, time){hint}"
    if compare("the norms", got, want) is not None:
        return _diagnose_norms(got, rnn, variables, xs, want)
    return None


@functools.cache
def _checkpoint_cases():
    """(name, cell, variables, xs, reference outputs, reference gradient), with xs
    time-major, (time, batch, channels). Built once, like ``_norm_cases``: one compiled
    program per case gives the reference's outputs and gradient together."""
    cells = [
        ("nn.SimpleCell(4), 5 steps, batch 2, 3 channels", nn.SimpleCell(4), (5, 2, 3)),
        ("nn.LSTMCell(3), 6 steps, batch 3, 2 channels", nn.LSTMCell(3), (6, 3, 2)),
    ]
    cases = []
    for index, (name, cell, shape) in enumerate(cells):
        xs = _inputs(200 + index, shape)

        def init(key, x, cell=cell):
            return cell.init(key, cell.initialize_carry(key, x.shape), x)

        variables = _variables(init, 1.0, 200 + index, xs[0])
        outputs, grads = _outputs_and_grad(_reference_outputs, cell, variables, xs)
        cases.append((name, cell, variables, xs, outputs, grads))
    return tuple(cases)


def _loss_and_outputs(run, cell, variables, xs):
    """What the checker differentiates, the sum of squares of every output, and the
    outputs."""
    ys = run(cell, variables, xs)
    return jnp.sum(ys**2), ys


def _loss(run, cell, variables, xs):
    return _loss_and_outputs(run, cell, variables, xs)[0]


@functools.partial(jax.jit, static_argnums=(0, 1))
def _outputs_and_grad(run, cell, variables, xs):
    """``run(cell, variables, xs)`` and the gradient of ``_loss`` with respect to the
    variables, from one compiled program."""
    grad = jax.value_and_grad(_loss_and_outputs, argnums=2, has_aux=True)
    (_, ys), grads = grad(run, cell, variables, xs)
    return ys, grads


def _reference_outputs(cell, variables, xs):
    rnn = nn.RNN(cell, time_major=True)
    return rnn.apply({"params": {"cell": variables["params"]}}, xs)


def _backward_scans(fn, cell, variables, xs):
    """The reverse=True scans in the jaxpr of the gradient of sum(fn(...)**2)."""

    grad = jax.grad(_loss, argnums=2)
    closed = jax.make_jaxpr(grad, static_argnums=(0, 1))(fn, cell, variables, xs)
    return [eqn for eqn in _all_eqns(closed.jaxpr) if _is_scan(eqn) and eqn.params["reverse"]]


def _is_scan(eqn) -> bool:
    return eqn.primitive.name == "scan"


def _sub_jaxprs(eqn):
    for value in eqn.params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if hasattr(item, "eqns"):
                yield item
            elif hasattr(getattr(item, "jaxpr", None), "eqns"):
                yield item.jaxpr


def _all_eqns(jaxpr):
    """Every equation of ``jaxpr`` and of the jaxprs nested in it (scan bodies, ...)."""
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in _sub_jaxprs(eqn):
            yield from _all_eqns(sub)


def count_primitives(jaxpr, names) -> dict[str, int]:
    """How many equations of ``jaxpr`` (nested ones included) apply each primitive in names."""
    counts = dict.fromkeys(names, 0)
    for eqn in _all_eqns(jaxpr):
        if eqn.primitive.name in counts:
            counts[eqn.primitive.name] += 1
    return counts


def check_checkpointed_rnn(fn: Callable[..., Any]) -> Feedback:
    """Checks ``fn(cell, variables, xs)``: nn.RNN's outputs and gradients, and a step that the
    backward pass recomputes (``jax.checkpoint`` around the step, not around the scan)."""

    def run(cell, variables, xs):
        """The outputs and gradient of the attempt, compiled together; when that fails,
        the outputs alone, run as they are, so that the judge names what is wrong."""
        try:
            return _outputs_and_grad(fn, cell, variables, xs)
        except Exception:
            return fn(cell, variables, xs), None

    def judge(got, cell, variables, xs, want, want_grads) -> str | None:
        got, grads = got
        problem = compare("the outputs", got, want)
        if problem:
            hint = ""
            if np.shape(got) == np.shape(want)[:1] + np.shape(want)[2:]:
                hint = " (return every step's output, not only the last carry)"
            return f"{problem}{hint}"
        if grads is None:  # jax.jit could not trace the attempt: differentiate it as it is
            grads, error = attempt(jax.grad(_loss, argnums=2), fn, cell, variables, xs)
            if error:
                return f"its gradient: {error}"
        problem = compare("the gradient", grads, want_grads)
        if problem:
            return problem
        backward = _backward_scans(fn, cell, variables, xs)
        if not backward:
            return "the gradient has no reverse scan; run the steps with jax.lax.scan"
        recomputed = sum(
            count_primitives(eqn.params["jaxpr"].jaxpr, _ACTIVATIONS)[n]
            for eqn in backward
            for n in _ACTIVATIONS
        )
        if not recomputed:
            return (
                "outputs and gradients are right, but the backward scan "
                "does not recompute the step, so every step's intermediate values are "
                "still stored: wrap the step function that scan calls in jax.checkpoint "
                "(not the whole scan, and not a function that scan does not call)"
            )
        return None

    cases = [
        (name, (cell, variables, xs), want, want_grads)
        for name, cell, variables, xs, want, want_grads in _checkpoint_cases()
    ]
    return run_cases("check_checkpointed_rnn", run, cases, judge)
