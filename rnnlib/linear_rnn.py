"""Cells whose step is linear in their carry, and the associative scan that runs them.

A step ``h' = a ⊙ h + b`` whose ``a`` and ``b`` come from the step's input alone composes:
the step ``(a1, b1)`` followed by ``(a2, b2)`` is the one step ``(a1 a2, a2 b1 + b2)``, and that
rule is associative. So ``jax.lax.associative_scan`` can compute every ``h_t`` of a sequence in
about ``2 log2(T)`` rounds instead of ``T`` steps, doing about three times the arithmetic.

A cell declares its coefficients once (``LinearCellBase.coefficients``); its step, which ``RNN``
runs one at a time like any cell's, is derived from them, and so is the scan, which ``RNN`` runs
instead when its plan says ``Plan(scan="associative")``. Which of the two is faster where, and so
the plan's default: ``benchmarks/README.md``.
"""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp
from jax import lax

from rnnlib import linear
from rnnlib.cell_base import Bound, RNNCellBase
from rnnlib.module import describe


class LinearCellBase(RNNCellBase):
    r"""Base class of cells whose step is linear in their carry ``h``; the output is the new ``h``.

    .. math::

        h_t = a_t \odot h_{t-1} + b_t, \qquad (a_t, b_t) = \mathrm{coefficients}(a)

    A subclass writes ``layers(input_shape)``, none of them reading ``"h"``, and
    ``coefficients(a)``; ``a`` holds each layer's output by name and, under ``"x"``, the step's
    input itself. ``coefficients`` returns ``(a_t, b_t)``, each ``(*batch, features)`` or
    broadcasting to it, or ``(log a_t, log b_t)`` when the class sets ``log_space = True`` (its
    coefficients are then positive, and the scan combines their logarithms, which never
    underflow). The carry is one array, ``(*batch, features)``, from ``carry_init``.

    ``update``, one step, is derived from ``coefficients``; so is ``RNN``'s other mode,
    ``RNN(cell, plan=rnnlib.Plan(scan="associative"))``, one ``jax.lax.associative_scan`` over
    the whole sequence (``rnnlib.linear_rnn.associative``). Run step by step, such a cell keeps
    JAX's own derivatives (``Plan.kernel_gradients_after_loop`` does not apply: that rule
    differentiates the layers alone, and ``update`` also reads the step's input).

    In low precision the recurrence runs in float32, as ``recurrentgemma``'s does: where the
    step computes in bfloat16 or float16 (the cell's ``dtype``, or the dtype promoted from the
    input and the layers' outputs), the layers' outputs are cast to float32, and
    ``coefficients`` and ``h' = a_t * h + b_t`` run there, in the loop and in the scan. A decay
    close to 1 would otherwise round to 1 (bfloat16 keeps 8 bits), and the error would grow with
    every step. The outputs come back in the step's dtype; the carry stays in float32 (the
    initial carry too, from ``initialize_carry``, whatever ``param_dtype`` says).
    """

    linear_in_carry = True
    #: whether ``coefficients`` returns the logarithms of ``a_t`` and ``b_t``
    log_space = False
    #: where ``Plan()`` runs the associative scan on a CPU: bands ``(rows from, to, features
    #: above, up to)`` of the step's batch rows and the cell's ``features``, those measured
    #: faster there than the loop (``benchmarks/README.md``, "Linear cells"); elsewhere on a CPU
    #: the loop runs, and on a GPU or TPU the scan
    cpu_scan_when: ClassVar[tuple] = ()

    def __init_subclass__(cls, **kwargs):
        if "scan_on_cpu" in vars(cls):  # the attribute this one replaced: never ignored unseen
            raise TypeError(
                f"{cls.__name__} sets scan_on_cpu, which rnnlib no longer reads: Plan() now "
                "takes the associative scan on a CPU inside the bands of cpu_scan_when, "
                "(rows from, to, features above, up to); for everywhere, "
                "cpu_scan_when = ((1, math.inf, 0, math.inf),); for nowhere, ()."
            )
        super().__init_subclass__(**kwargs)

    def coefficients(self, a: dict) -> tuple:
        """``(a_t, b_t)`` (or their logs, with ``log_space``) from the layers' outputs ``a``."""
        raise NotImplementedError(
            f"{type(self).__name__} does not define coefficients, which every linear cell "
            "must: coefficients(a) returns (a_t, b_t) of h' = a_t * h + b_t from a, each "
            "layer's output by name and the step's input under 'x'."
        )

    def initialize_carry(self, rng, input_shape):
        """``h``, ``(*batch, features)``, from ``carry_init``, in ``param_dtype`` or, when that
        is narrower, in float32, the dtype the recurrence accumulates in."""
        h = super().initialize_carry(rng, input_shape)
        return h.astype(accumulation_dtype(h.dtype))

    def update(self, h, a):
        """One step: ``h' = a_t ⊙ h + b_t``, from ``coefficients(a)`` (in float32 at least)."""
        a, dtype = _widened(self, a)
        a_t, b_t = self.coefficients(a)
        if self.log_space:
            a_t, b_t = jnp.exp(a_t), jnp.exp(b_t)
        h = a_t * h + b_t
        return h, _narrowed(h, dtype)

    def bind(self, params: dict, input_shape, join: bool = False) -> Bound:
        """The step with ``params``, passing the step's input to ``update`` as ``a["x"]``."""
        return _WithInput(*super().bind(params, input_shape, join))


class _WithInput(Bound):
    """A bound linear cell: the layers' outputs and, last, the step's input itself."""

    def inputs(self, x, bias: bool = True):
        (x,) = linear.promote(x, dtype=self.cell.dtype)
        return [*super().inputs(x, bias), x]

    def named(self, x_outs, h_outs, constants=None) -> dict:
        return {**super().named(x_outs[:-1], h_outs, constants), "x": x_outs[-1]}


def accumulation_dtype(dtype):
    """The dtype a linear cell's recurrence runs in for a step computed in ``dtype``: float32
    for a floating dtype narrower than it (bfloat16, float16), else ``dtype`` itself."""
    dtype = jnp.dtype(dtype)
    if jnp.issubdtype(dtype, jnp.floating) and dtype.itemsize < 4:
        return jnp.dtype(jnp.float32)
    return dtype


def _widened(cell, a: dict):
    """``(a, dtype)``: ``dtype`` is the step's, that of the input and the layers' outputs (the
    ``Param`` values read as they are do not count), and ``a`` every entry in its
    ``accumulation_dtype``."""
    layers = cell.layers(tuple(jnp.shape(a["x"])))
    constants = {name for name, layer in layers.items() if isinstance(layer, linear.Param)}
    dtype = jnp.result_type(*[v for name, v in a.items() if name not in constants])
    wide = accumulation_dtype(dtype)
    return {name: jnp.asarray(v, wide) for name, v in a.items()}, dtype


def _narrowed(h, dtype):
    """The outputs ``h`` back in the step's ``dtype`` where the recurrence ran wider."""
    return h if accumulation_dtype(dtype) == dtype else h.astype(dtype)


def combine(earlier, later):
    """The pair ``(a, b)`` of two stretches of steps, ``earlier`` first: ``(a1 a2, a2 b1 + b2)``."""
    (a1, b1), (a2, b2) = earlier, later
    return a1 * a2, a2 * b1 + b2


def log_combine(earlier, later):
    """``combine`` on ``(log a, log b)`` pairs: products become sums, ``+`` a ``logaddexp``."""
    (log_a1, log_b1), (log_a2, log_b2) = earlier, later
    return log_a1 + log_a2, jnp.logaddexp(log_a2 + log_b1, log_b2)


def restarting(rule):
    """``rule`` (``combine`` or ``log_combine``) on ``(start, a, b)`` triples, for resets.

    ``start`` is true for a stretch of steps that holds the first step of an episode, where
    the carry goes back to ``h_0``. Such a stretch forgets every step before it: combined after
    anything, it stays itself, so each prefix is the pair of the steps since the last start,
    and ``h_t = A_t h_0 + B_t`` still holds, with ``h_0`` of either sign (log space too).
    The rule is still associative, so the scan stays one parallel scan; where a stretch holds
    a start, the earlier stretch gets a derivative of exactly zero."""

    def combined(earlier, later):
        (start1, *pair1), (start2, *pair2) = earlier, later
        a, b = rule(pair1, pair2)
        return start1 | start2, jnp.where(start2, pair2[0], a), jnp.where(start2, pair2[1], b)

    return combined


def associative(bound: Bound, carry, xs, seq_lengths=None, resets=None):
    """``(final_carry, outputs)`` of a bound linear cell over axis 0 of ``xs``, by one
    ``jax.lax.associative_scan``: what ``RNN`` runs for ``Plan(scan="associative")``.

    Every step's coefficients come from the cell's layers run on all of ``xs`` at once. The scan
    gives, for each ``t``, the pair ``(A_t, B_t)`` of steps ``1..t``, so ``h_t = A_t h_0 + B_t``
    for any initial carry ``h_0`` (of either sign, in log space too). With ``seq_lengths``
    (``(*batch)`` ints), the final carry is each sequence's ``h`` after its last valid step,
    ``h_0`` for a length of 0. With ``resets`` (``(time, *batch)`` bools), the carry is ``h_0``
    again before each flagged step (the scan's operator is ``restarting``'s). In bfloat16 or
    float16 the coefficients and the scan run in float32 (``LinearCellBase``), and the outputs
    come back in the step's dtype. Raises a ``TypeError`` for a cell that is not linear in its
    carry.
    """
    cell = bound.cell.inner  # the linear cell, a wrapper's too
    _check_linear(cell, bound, carry)
    a, dtype = _widened(cell, bound.named(bound.inputs(xs), []))
    a_t, b_t = cell.coefficients(a)
    # Coefficients that do not read x lack the time axis: the scan runs over axis 0 only
    # once every step's pair is spelled out, (time, *batch, features).
    steps = jax.tree_util.tree_leaves(xs)[0].shape[0]
    shape = jnp.broadcast_shapes(jnp.shape(a_t), jnp.shape(b_t), (steps, *jnp.shape(carry)))
    a_t, b_t = jnp.broadcast_to(a_t, shape), jnp.broadcast_to(b_t, shape)
    log_space = cell.log_space
    rule = log_combine if log_space else combine
    if resets is None:
        prefix_a, prefix_b = lax.associative_scan(rule, (a_t, b_t))
    else:
        starts = resets.reshape(resets.shape + (1,) * (len(shape) - resets.ndim))
        _, prefix_a, prefix_b = lax.associative_scan(restarting(rule), (starts, a_t, b_t))
    if log_space:
        prefix_a, prefix_b = jnp.exp(prefix_a), jnp.exp(prefix_b)
    hs = prefix_a * carry + prefix_b
    carry = jnp.asarray(carry, hs.dtype)
    if seq_lengths is None or hs.shape[0] == 0:
        return (hs[-1] if hs.shape[0] else carry), _narrowed(hs, dtype)
    lengths = jnp.asarray(seq_lengths)
    shape = lengths.shape + (1,) * (hs.ndim - 1 - lengths.ndim)  # lengths against h's axes
    index = jnp.broadcast_to(jnp.maximum(lengths - 1, 0).reshape((1,) + shape), (1,) + hs.shape[1:])
    last = jnp.take_along_axis(hs, index, axis=0)[0]  # h after each sequence's last valid step
    return jnp.where(lengths.reshape(shape) > 0, last, carry), _narrowed(hs, dtype)


def _check_linear(cell, bound: Bound, carry):
    run_it = "Run it step by step with Plan(scan='sequential'), or with the default Plan()."
    if not isinstance(cell, LinearCellBase):
        raise TypeError(
            f"Plan(scan='associative') runs a cell whose step is linear in its carry, "
            f"h' = a_t * h + b_t, as one jax.lax.associative_scan; {describe(cell)} is not "
            "one: it has no coefficients(a) method that returns (a_t, b_t) from the step's "
            "input (rnnlib.LinearCellBase; rnnlib.MinGRUCell, MinLSTMCell and RGLRUCell have "
            f"one). {run_it}"
        )
    if bound.h_groups:
        names = [name for group in bound.h_groups for name in group.names]
        raise TypeError(
            f"Plan(scan='associative') needs every coefficient of {describe(cell)} to come "
            f"from the step's input, but its layers {names} read 'h': its step is not linear "
            f"in its carry. {run_it}"
        )
    structure = jax.tree_util.tree_structure(carry)
    if not jax.tree_util.treedef_is_leaf(structure):
        raise TypeError(
            f"Plan(scan='associative') needs {describe(cell)}'s carry to be one array h, "
            f"(*batch, features); got the structure {structure}. {run_it}"
        )
