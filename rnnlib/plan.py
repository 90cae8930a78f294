"""How ``RNN`` computes a cell over a sequence: a ``Plan``, and the whole-sequence rule.

A plan changes the program, never the numbers (up to rounding). ``Plan()`` leaves each choice to
``resolve``, from the backend and one step's shape; ``REFERENCE`` is the plain program. Why each
choice pays: ``benchmarks/README.md``.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.custom_derivatives import SymbolicZero

from rnnlib import linear
from rnnlib.cell_base import RNNCellBase
from rnnlib.module import describe


@dataclasses.dataclass(frozen=True)
class Plan:
    """How ``RNN`` computes a cell; a field left ``None`` is chosen by ``resolve``.

    Arguments:
        hoist_inputs: run the layers that read ``x`` for all steps first (default: not on CPU).
        join_layers: one matmul for all the dense layers that read one input, their kernels
            concatenated (default: yes, except on CPU at widths where XLA runs it slowly; the
            derivative of ``kernel_gradients_after_loop`` joins them whatever this says).
        kernel_gradients_after_loop: kernel gradients as matmuls after the backward loop
            (default: on CPU, where JAX can and it pays; never with ``hoist_inputs``, a linear
            cell, resets, or ``seq_lengths`` with ``return_carry``, where ``True`` is refused).
        scan: ``"sequential"``, step by step, or ``"associative"``: one ``associative_scan``, for
            a cell linear in its carry (default there on GPU and TPU; on CPU, inside the bands of
            its ``cpu_scan_when``),
            which runs the layers on every step at once (``hoist_inputs`` is then ``True``).

    ``resolve`` returns the program that runs, every field filled in; ``RNN.resolved_plan``
    gives it for one call. Where a field left ``None`` could not take the choice that pays (the
    whole-sequence rule on a JAX that cannot transpose it, or with ``seq_lengths``), the
    resolved plan's ``note`` says why; it takes no part in comparing plans.
    """

    hoist_inputs: bool | None = None
    join_layers: bool | None = None
    kernel_gradients_after_loop: bool | None = None
    scan: str | None = None
    note: str = dataclasses.field(default="", compare=False, kw_only=True)

    def __repr__(self) -> str:  # the note only where there is one
        fields = [f for f in dataclasses.fields(self) if f.name != "note" or self.note]
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields)
        return f"Plan({shown})"

    def __post_init__(self):
        for name in ("hoist_inputs", "join_layers", "kernel_gradients_after_loop"):
            if (value := getattr(self, name)) is not None and not isinstance(value, bool):
                raise TypeError(f"Plan expects {name} to be True, False or None; got {value!r}.")
        if (scan := self.scan) not in (None, "sequential", "associative"):
            error = ValueError if isinstance(scan, str) else TypeError
            raise error(f"Plan expects scan 'sequential', 'associative' or None; got {scan!r}.")


#: The plain program, for comparison (step by step, one matmul per layer, JAX's own derivatives).
REFERENCE = Plan(False, False, False, "sequential")


def _backend() -> str:
    """The backend a plan is chosen for (a function of its own, so a test can name another)."""
    return jax.default_backend()


def resolve(plan: Plan, cell: RNNCellBase, step_shape, *, seq_lengths=False, resets=False) -> Plan:
    """The program ``RNN`` runs, field for field: ``plan`` with every ``None`` chosen from the
    backend, the cell and one step's input shape.

    ``seq_lengths``: whether the run keeps each sequence's carry at its length (``RNN`` given
    ``seq_lengths`` and ``return_carry``); ``resets``: whether it resets the carry. A field given
    explicitly is honoured (it steers the defaults: ``kernel_gradients_after_loop=True`` leaves
    the inputs in the loop, ``hoist_inputs=False`` runs a linear cell step by step), or refused
    with a ``ValueError`` that says why it cannot run.
    """
    measured = cell.inner  # the cell whose layers run, a wrapper's too
    linear_cell = measured.linear_in_carry
    cpu = _backend() == "cpu"
    rows = math.prod(step_shape[:-1])

    def within(bands, width):  # on XLA:CPU, inside one of the bands measured for this cell
        return cpu and any(r0 <= rows <= r1 and f0 < width <= f1 for r0, r1, f0, f1 in bands)

    scan = plan.scan
    if scan is None:
        faster = linear_cell and (not cpu or within(measured.cpu_scan_when, measured.features or 0))
        scan = "associative" if faster else "sequential"
        scan = "sequential" if plan.hoist_inputs is False else scan
    if scan == "associative":
        return _associative(plan)
    rule = plan.kernel_gradients_after_loop
    hoist = plan.hoist_inputs
    hoist = (not cpu and not rule) if hoist is None else hoist
    h = [la for la in cell.layers(tuple(step_shape)).values() if isinstance(la, linear.Dense)]
    h = [la.features for la in h if la.reads == "h"]
    width = max(h, default=0)
    slow = functools.partial(within, width=width)
    join = not slow(measured.cpu_slow_when_joined) if plan.join_layers is None else plan.join_layers
    why = _why_not_the_rule(linear_cell, hoist, seq_lengths, resets)
    note = ""
    if rule is None:
        rule = cpu and not slow(measured.cpu_slow_after_loop)
        if rule and why:  # it would pay here, but cannot run
            rule, note = False, f"kernel_gradients_after_loop is False: {why}"
    elif rule and why:
        raise ValueError(
            f"Plan(kernel_gradients_after_loop=True) cannot run for {describe(cell)}: {why}. "
            "Leave it None for RNN to choose, or pass False for JAX's own derivatives."
        )
    return Plan(hoist, join, rule, "sequential", note=note)


def _associative(plan: Plan) -> Plan:
    """``plan`` resolved for the associative scan, which runs every layer on all steps at once."""
    if plan.hoist_inputs is False:
        raise ValueError(
            "Plan(scan='associative') runs the layers that read x on every step at once, "
            "before the scan (hoist_inputs=True); got hoist_inputs=False, which asks for them "
            "inside a loop the scan does not have. Leave hoist_inputs None, or pass "
            "scan='sequential' to run step by step."
        )
    if plan.kernel_gradients_after_loop:
        raise ValueError(
            "Plan(scan='associative') takes JAX's own derivatives of the scan; got "
            "kernel_gradients_after_loop=True, a rule for the step-by-step loop. Leave it "
            "None, or pass scan='sequential'."
        )
    join = True if plan.join_layers is None else plan.join_layers
    return Plan(True, join, False, "associative")


def _why_not_the_rule(linear_cell: bool, hoist: bool, seq_lengths: bool, resets: bool):
    """Why the whole-sequence rule cannot run this program, or ``None`` where it can."""
    reasons = [
        (
            linear_cell,
            "a linear cell's update reads the step's input, and the rule "
            "differentiates the layers alone",
        ),
        (
            hoist,
            "with hoist_inputs=True the layers that read x run before the loop, and the "
            "rule differentiates a loop that runs them",
        ),
        (
            seq_lengths,
            "with seq_lengths and return_carry the loop keeps each sequence's carry "
            "at its length, a select the rule does not differentiate",
        ),
        (
            resets,
            "with resets the loop sets the carry back before the flagged steps, a select "
            "the rule does not differentiate",
        ),
    ]
    why = next((reason for applies, reason in reasons if applies), None)
    return why or _jax_cannot_run_the_rule()


def sequence(cell: RNNCellBase, params, carry, xs, step_shape, join: bool, unroll: int = 1):
    """``(final_carry, outputs)`` of ``cell`` over axis 0 of ``xs``: the plain loop, its derivative
    taking each kernel's gradient as one matmul after the loop (``benchmarks/README.md``)."""
    return _sequence((cell, tuple(step_shape), join, unroll), params, carry, xs)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _sequence(how, params, carry, xs):
    cell, step_shape, join, unroll = how
    bound = cell.bind(params, step_shape, join)
    return lax.scan(lambda c, x: bound(c, x), carry, xs, unroll=unroll)


_SAVED = {lax.logistic_p, lax.tanh_p, lax.exp_p, lax.log_p, lax.log1p_p, lax.expm1_p}


def _sequence_jvp(how, primals, tangents):
    cell, step_shape, _, unroll = how
    (params, carry, xs), (dparams, dcarry, dxs) = primals, tangents
    dtype = cell.inner.dtype
    bound = cell.bind(params, step_shape, join=True)
    update = jax.checkpoint(cell.update, policy=lambda primitive, *_, **__: primitive in _SAVED)
    sums = _sums(bound, carry, xs)

    def forward(carry, x):
        h, a = cell.hidden(carry), bound.outputs(carry, bound.inputs(x))
        summed = {n: a.pop(n) for n in sums}  # their tangents enter with their partners'
        (carry, y), tangent = jax.linearize(lambda c, a: update(c, {**a, **summed}), carry, a)
        # The linear map is a pytree (jax.tree_util.Partial) of the step's saved arrays, which
        # scan stacks like any output; h, saved already, is left out of it as a None.
        return carry, (y, h, jax.tree_util.tree_map(lambda s: None if s is h else s, tangent))

    final, (ys, hs, saved) = lax.scan(forward, carry, xs, unroll=unroll)
    # The tangents that do not come from the step before, one matmul per group over all steps: a
    # layer is linear in its parameters, so theirs enter as the layers with tangents for params.
    dbound = cell.bind(_instantiate(dparams, params), step_shape, join=True)
    dx_outs = dbound.inputs(xs)
    if not isinstance(dxs, SymbolicZero):
        dx_outs = [a + b for a, b in zip(dx_outs, bound.inputs(dxs, bias=False))]
    dx = linear.by_name(bound.x_groups, dx_outs)
    dh = linear.by_name(bound.h_groups, linear.run(dbound.h_groups, hs, dtype))
    dh.update({h: dh[h] + dx.pop(x) for x, h in sums.items()})  # one stream per sum
    x_groups, dx_outs = _streams(bound.x_groups, dx)
    loop = bound._replace(x_groups=x_groups)

    def tangent_step(dcarry, t):
        dx_t, dh_t, h_t, saved_t = t
        dh = linear.run(bound.h_groups, cell.hidden(dcarry), dtype, bias=False)
        a = loop.named(dx_t, [d + e for d, e in zip(dh, dh_t)], dbound.constants)
        is_h = lambda s: s is None  # noqa: E731
        tangent = jax.tree_util.tree_map(lambda s: h_t if is_h(s) else s, saved_t, is_leaf=is_h)
        return tangent(dcarry, a)

    streams = (dx_outs, _streams(bound.h_groups, dh)[1], hs, saved)
    dfinal, dys = lax.scan(tangent_step, _instantiate(dcarry, carry), streams, unroll=unroll)
    return (final, ys), (dfinal, dys)


_sequence.defjvp(_sequence_jvp, symbolic_zeros=True)


def _sums(bound, carry, xs) -> dict:
    """``{x layer: h layer}`` for each pair that ``update`` reads only once, by one ``add`` of
    equal shapes (the pair's tangent is then the sum of theirs): one step traced, shapes only."""
    x = jax.tree_util.tree_map(lambda v: jax.ShapeDtypeStruct(v.shape[1:], v.dtype), xs)
    a = jax.eval_shape(lambda c, x: bound.outputs(c, bound.inputs(x)), carry, x)
    jaxpr = jax.make_jaxpr(bound.cell.update)(carry, a).jaxpr
    labels = jax.tree_util.tree_leaves((jax.tree_util.tree_map(lambda _: "", carry), sorted(a)))
    name = dict(zip(map(id, jaxpr.invars), labels))
    reads = collections.Counter(map(id, [v for e in jaxpr.eqns for v in e.invars] + jaxpr.outvars))
    x_names, h_names = ({n for g in gs for n in g.names} for gs in (bound.x_groups, bound.h_groups))
    pairs = [
        sorted((name.get(id(v)) for v in e.invars), key=lambda n: n not in x_names)
        for e in jaxpr.eqns
        if e.primitive is lax.add_p and all(reads[id(v)] == 1 for v in e.invars)
    ]
    return {x: h for x, h in pairs if x in x_names and h in h_names and a[x].shape == a[h].shape}


def _streams(groups, named):
    """``groups`` cut down to the layers in ``named``, and each one's arrays side by side."""
    groups = [g._replace(names=[n for n in g.names if n in named]) for g in groups]
    groups = [g._replace(sizes=[named[n].shape[-1] for n in g.names]) for g in groups if g.names]
    return groups, [jnp.concatenate([named[n] for n in g.names], axis=-1) for g in groups]


def _instantiate(tangents, primals):
    """``tangents`` with a zero array of the primal's shape for each symbolic zero."""
    is_zero = lambda t: isinstance(t, SymbolicZero)  # noqa: E731
    zero = lambda t, p: jnp.zeros_like(p) if is_zero(t) else t  # noqa: E731
    return jax.tree_util.tree_map(zero, tangents, primals, is_leaf=is_zero)


class _Probe(RNNCellBase):  # the smallest cell with a layer on h
    def layers(self, input_shape):
        return {"h": linear.Dense("h", 2, 2, jax.nn.initializers.zeros)}

    def update(self, h, a):
        return a["h"] * h, h


#: The oldest JAX the rule is tested to run on (the book's pinned version); older ones may not.
TESTED_JAX = (0, 10, 2)


@functools.cache
def _jax_cannot_run_the_rule() -> str | None:
    """Why this JAX cannot transpose ``sequence``'s rule (jax 0.4.30 and 0.8.1 cannot), from a
    tiny trace, or ``None`` where it can. On a JAX at or above ``TESTED_JAX`` a failure is a
    bug, raised rather than turned off unseen."""

    def loss(kernel):
        xs, h = jnp.ones((3, 1, 1)), jnp.zeros((1, 2))
        return jnp.sum(sequence(_Probe(), {"h": {"kernel": kernel}}, h, xs, (1, 1), True)[1])

    try:
        jax.eval_shape(jax.grad(loss), jax.ShapeDtypeStruct((2, 2), jnp.float32))
    except Exception as error:
        if jax.__version_info__ >= TESTED_JAX:
            raise RuntimeError(
                f"rnnlib's whole-sequence gradient rule fails on JAX {jax.__version__}, a "
                f"version it is tested to run on ({type(error).__name__}: {error}); please "
                "report it. Plan(kernel_gradients_after_loop=False) runs without the rule."
            ) from error
        return f"this JAX ({jax.__version__}) cannot transpose the rule ({type(error).__name__})"
    return None


def jax_differentiates_sequence() -> bool:
    """Whether this JAX can transpose ``sequence``'s rule (older ones cannot)."""
    return _jax_cannot_run_the_rule() is None
