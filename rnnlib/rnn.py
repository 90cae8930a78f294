"""``RNN``: a cell run over the time axis of a sequence with ``jax.lax.scan``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from rnnlib.cell_base import RNNCellBase
from rnnlib.flip import flip_sequences
from rnnlib.linear_rnn import associative
from rnnlib.module import Module, check_params, describe
from rnnlib.plan import Plan, resolve, sequence


def split_axes(cell: RNNCellBase, shape, time_major: bool, owner=None):
    """``(batch_dims, time_axis)`` of an input of ``shape``: the cell owns its last
    ``num_feature_axes`` axes, time is the axis before them (axis 0 when ``time_major``), the rest
    is batch. Raises a ``ValueError`` when ``shape`` has no room for time."""
    shape, owned = tuple(shape), cell.num_feature_axes
    if len(shape) < owned + 1:
        layout = "(time, *batch, *signal, channels)" if time_major else None
        layout = RNNCellBase.feature_layout(cell, layout or "(*batch, time, *signal, channels)")
        raise ValueError(
            f"{describe(owner or cell)} expects inputs shaped {layout} ({owned} feature "
            f"{'axis' if owned == 1 else 'axes'} after the time axis); got shape {shape}, "
            "which has no time axis."
        )
    if time_major:
        return shape[1 : len(shape) - owned], 0
    return shape[: len(shape) - owned - 1], len(shape) - owned - 1


FLAGS = ("time_major", "return_carry", "reverse", "keep_order")


def check_flags(owner: str, module, hints=None, flags=FLAGS):
    """Raises a ``TypeError`` unless each ``flag`` of ``module`` is a bool (``hints``: per flag)."""
    for flag in flags:
        if not isinstance(value := getattr(module, flag), (bool, np.bool_)):
            hint = (hints or {}).get(flag, "")
            raise TypeError(f"{owner} expects {flag} to be a bool; got {value!r}.{hint}")


class RNN(Module):
    """Runs a cell over every step of a sequence; returns the stacked outputs.

    The time axis is found from the cell's ``num_feature_axes``: inputs are
    ``(*batch, time, *signal, channels)`` (or ``(time, *batch, *signal, channels)`` with
    ``time_major``), with any number of batch dims, including none. Example::

        rnn = RNN(LSTMCell(features=8))
        x = jnp.ones((4, 10, 3))                      # (batch, time, channels)
        variables = rnn.init(jax.random.key(0), x)    # {'params': {'cell': {...}}}
        y = rnn.apply(variables, x)                   # (4, 10, 8)
        carry, y = rnn.apply(variables, x, return_carry=True,
                             seq_lengths=jnp.array([10, 3, 7, 0]))

    Arguments:
        cell: the ``RNNCellBase`` applied at each step.
        time_major: whether time is the first axis of inputs and outputs.
        return_carry: also return the final carry, as ``(carry, outputs)``.
        reverse: process each sequence from its last valid step (``flip_sequences``); outputs
            come back in processing order unless ``keep_order``.
        keep_order: with ``reverse``, flip the outputs back to the input's order.
        unroll: steps per iteration of the underlying ``lax.scan`` loop.
        plan: how it runs (a loop, or an associative scan), ``rnnlib.Plan()``; never the numbers.

    ``apply`` takes the fields but ``cell``, ``unroll`` and ``plan`` again, ``initial_carry``
    (default ``cell.initialize_carry(init_key, ...)``, ``init_key`` default ``jax.random.key(0)``)
    and ``seq_lengths`` (ints, ``(*batch)``): padded steps' outputs are meaningless; each carry
    follows its last valid step; length 0 gives the initial carry (flax.linen: the last padded one).
    A length outside ``[0, time]`` is a ValueError when its values can be read; under ``jit``
    it is clamped to that range, for every plan. A NaN or inf in a padded step is read as 0,
    so it cannot poison the gradient.

    ``apply`` also takes ``resets``, booleans shaped like the inputs' batch and time axes,
    ``(*batch, time)`` (``(time, *batch)`` with ``time_major``): where ``resets[..., t]`` is
    true, step ``t`` starts a new episode, and the carry is set back to the initial carry
    (``initial_carry``, or the cell's ``initialize_carry``) before that step reads its input.
    This is the convention of Haiku's ``ResetCore`` and of purejaxrl's recurrent PPO: the flag
    travels with the first step of an episode, and the reset happens before the step, never
    after it. Every episode's outputs are then those of running it alone, from the initial
    carry, and no gradient flows from one episode into an earlier one. A flag at step 0 changes
    nothing. With ``reverse`` the flags still mark where episodes start in the input; read
    backwards, an episode is entered at its last step, so the carry is reset before each step
    whose next valid step starts an episode: each direction of a ``Bidirectional`` sees every
    episode on its own. The associative scan folds the flags into its operator (a stretch of
    steps that holds a start forgets the steps before it), so it stays one parallel scan.
    """

    cell: RNNCellBase
    time_major: bool = False
    return_carry: bool = False
    reverse: bool = False
    keep_order: bool = False
    unroll: int = 1
    plan: Plan = Plan()

    def __post_init__(self):
        if not isinstance(self.cell, RNNCellBase):
            kind = type(self.cell)
            legacy = kind.__module__ == "rnnlib.legacy"
            hint = " Legacy cells run in rnnlib.legacy.RNN(cell, cell_size)." if legacy else ""
            raise TypeError(
                "RNN expects an rnnlib.RNNCellBase cell, such as rnnlib.LSTMCell(features=...); "
                f"got {kind.__module__}.{kind.__qualname__}.{hint}"
            )
        hint = " (Flax 0.6's RNN took cell_size as its second argument; the cell now carries"
        check_flags("RNN", self, {"time_major": hint + " its own features: pass RNN(cell) alone.)"})
        integer = isinstance(self.unroll, (int, np.integer)) and not isinstance(self.unroll, bool)
        if not integer or self.unroll < 1:
            raise (ValueError if integer else TypeError)(
                f"RNN expects unroll >= 1, an int (steps per loop iteration); got {self.unroll!r}."
            )
        if not isinstance(self.plan, Plan):
            raise TypeError(f"RNN expects plan to be an rnnlib.Plan; got {self.plan!r}.")

    def resolved_plan(
        self, inputs, *, seq_lengths=None, resets=None, return_carry=None, time_major=None
    ) -> Plan:
        """The program ``apply`` runs for these arguments: ``plan`` with every field chosen
        (``rnnlib.plan.resolve``), or the ``ValueError`` saying why a field given cannot run.
        ``inputs`` may be an array or anything with its ``shape``."""
        shape = tuple(np.shape(inputs))
        major = self.time_major if time_major is None else time_major
        _, t = split_axes(self.cell, shape, major, owner=self)
        keeps = self.return_carry if return_carry is None else return_carry
        return resolve(
            self.plan,
            self.cell,
            shape[:t] + shape[t + 1 :],
            seq_lengths=bool(keeps) and seq_lengths is not None,
            resets=resets is not None,
        )

    def _init(self, key, inputs, *, time_major=None, **unused):
        shape = tuple(np.shape(inputs))
        major = self.time_major if time_major is None else time_major
        _, t = split_axes(self.cell, shape, major, owner=self)
        return {"cell": self.cell.create_params(key, shape[:t] + shape[t + 1 :])}

    def _call(
        self,
        params,
        inputs,
        *,
        initial_carry=None,
        init_key=None,
        seq_lengths=None,
        return_carry=None,
        time_major=None,
        reverse=None,
        keep_order=None,
        resets=None,
    ):
        return_carry = self.return_carry if return_carry is None else return_carry
        time_major = self.time_major if time_major is None else time_major
        reverse = self.reverse if reverse is None else reverse
        keep_order = self.keep_order if keep_order is None else keep_order

        inputs = jnp.asarray(inputs)
        batch_dims, time_axis = split_axes(self.cell, inputs.shape, time_major, owner=self)
        step_shape = inputs.shape[:time_axis] + inputs.shape[time_axis + 1 :]
        check_params(self, params, {"cell": self.cell.param_shapes(step_shape)})
        if seq_lengths is not None:
            seq_lengths = _check_seq_lengths(self, seq_lengths, batch_dims, inputs.shape[time_axis])
        if resets is not None:
            resets = _check_resets(self, resets, inputs.shape[: len(batch_dims) + 1], time_major)
            if reverse:
                resets = _entered_backwards(resets, seq_lengths, time_axis)
                resets = flip_sequences(resets, seq_lengths, len(batch_dims), time_major)
            resets = jnp.moveaxis(resets, time_axis, 0)  # time first, as the scan reads it

        if reverse:
            inputs = flip_sequences(inputs, seq_lengths, len(batch_dims), time_major)
        if initial_carry is None:
            key = jax.random.key(0) if init_key is None else init_key
            carry = self.cell.initialize_carry(key, step_shape)
        else:
            self.cell.check_carry(initial_carry, step_shape, what="initial_carry")
            carry = initial_carry

        xs = jnp.moveaxis(inputs, time_axis, 0)
        if seq_lengths is not None:
            xs = _finite_padding(xs, seq_lengths)
        lengths = seq_lengths if return_carry else None
        # What resolved_plan(inputs, ...) returns, from the step shape already split off here.
        plan = resolve(
            self.plan,
            self.cell,
            step_shape,
            seq_lengths=lengths is not None,
            resets=resets is not None,
        )
        with jax.named_scope(f"RNN_{type(self.cell).__name__}"):
            carry, outputs = _scan(
                self.cell,
                params["cell"],
                step_shape,
                carry,
                xs,
                lengths,
                self.unroll,
                plan,
                resets,
            )
        outputs = jnp.moveaxis(outputs, 0, time_axis)
        if reverse and keep_order:
            outputs = flip_sequences(outputs, seq_lengths, len(batch_dims), time_major)
        return (carry, outputs) if return_carry else outputs


def _scan(cell, params, step_shape, carry, inputs, seq_lengths, unroll, plan, resets=None):
    """``(final_carry, outputs)`` over axis 0 of ``inputs``, as ``plan`` says; with ``seq_lengths``,
    the carry after each sequence's last valid step (a select per step, nothing stacked); with
    ``resets`` (``(time, *batch)`` bools), the initial carry again before each flagged step."""
    bound = cell.bind(params, step_shape, plan.join_layers)
    if plan.scan == "associative":  # a cell linear in its carry: every step at once
        return associative(bound, carry, inputs, seq_lengths, resets)
    step = bound.step if plan.hoist_inputs else bound.__call__  # a method: scan keeps a weakref
    inputs = bound.inputs(inputs) if plan.hoist_inputs else inputs
    # lax.scan needs a carry of the dtype a step returns (complex inputs, a bfloat16 cell): cast.
    x = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape[1:], a.dtype), inputs)
    out = jax.eval_shape(lambda c, x: step(c, x)[0], carry, x)
    carry = jax.tree_util.tree_map(lambda c, o: jnp.asarray(c, o.dtype), carry, out)
    if plan.kernel_gradients_after_loop:  # resolve's: no hoisting, seq_lengths or resets then
        return sequence(cell, params, carry, inputs, step_shape, plan.join_layers, unroll)
    if resets is not None:
        step, inputs = _restarting(step, carry), (inputs, resets)
    if seq_lengths is None:
        return jax.lax.scan(step, carry, inputs, unroll=unroll)

    def body(state, xs):
        (running, kept), (x, t) = state, xs
        running, y = step(running, x)

        def select(new, old):  # the new carry where t is a valid step of the sequence
            valid = jnp.expand_dims(t < seq_lengths, tuple(range(seq_lengths.ndim, new.ndim)))
            return jnp.where(valid, new, old)

        return (running, jax.tree_util.tree_map(select, running, kept)), y

    times = jnp.arange(jax.tree_util.tree_leaves(inputs)[0].shape[0])
    (_, kept), outputs = jax.lax.scan(body, (carry, carry), (inputs, times), unroll=unroll)
    return kept, outputs


def _restarting(step, initial):
    """``step`` on ``(x, reset)`` pairs: from ``initial`` where ``reset``, else from the carry."""

    def restarted(carry, xs):
        x, reset = xs

        def pick(start, running):  # reset is (*batch); a leaf is (*batch, *features)
            flag = reset.reshape(reset.shape + (1,) * (running.ndim - reset.ndim))
            return jnp.where(flag, start, running)

        return step(jax.tree_util.tree_map(pick, initial, carry), x)

    return restarted


def _entered_backwards(resets, seq_lengths, time_axis):
    """Where a reversed run enters an episode: each step whose next valid step starts one.

    ``resets`` marks the first step of each episode; read from the end, an episode begins at
    its last step, the step before a flagged one (the last valid step needs no flag: the run
    starts there from the initial carry)."""
    steps = resets.shape[time_axis]
    t = jax.lax.broadcasted_iota(jnp.int32, resets.shape, time_axis)
    valid = steps if seq_lengths is None else jnp.expand_dims(seq_lengths, time_axis)
    return jnp.roll(resets, -1, axis=time_axis) & (t + 1 < valid)


def _check_resets(rnn, resets, expected, time_major):
    layout = "(time, *batch)" if time_major else "(*batch, time)"
    shape = tuple(np.shape(resets))
    if shape != tuple(expected):
        raise ValueError(
            f"{describe(rnn)} expects resets shaped {layout}, the inputs' batch and time "
            f"axes, {tuple(expected)}; got shape {shape}."
        )
    resets = jnp.asarray(resets)
    if resets.dtype != jnp.bool_:
        raise TypeError(
            f"{describe(rnn)} expects resets to be booleans (True where a step starts a new "
            f"episode); got dtype {resets.dtype}. Pass resets.astype(bool) or resets == 1."
        )
    return resets


def _check_seq_lengths(rnn, seq_lengths, batch_dims, steps):
    seq_lengths = jnp.asarray(seq_lengths)
    if seq_lengths.shape != tuple(batch_dims):
        raise ValueError(
            f"{describe(rnn)} expects seq_lengths shaped like the batch dims {tuple(batch_dims)}; "
            f"got shape {seq_lengths.shape}."
        )
    if not jnp.issubdtype(seq_lengths.dtype, jnp.integer):
        raise TypeError(f"seq_lengths must hold integers; got dtype {seq_lengths.dtype}.")
    if not isinstance(seq_lengths, jax.core.Tracer):
        concrete = np.asarray(seq_lengths)
        outside = (concrete < 0) | (concrete > steps)
        if outside.any():
            where = tuple(int(i) for i in np.argwhere(outside)[0])
            raise ValueError(
                f"seq_lengths must lie in [0, {steps}] (the time axis has {steps} steps); "
                f"seq_lengths{list(where)} is {int(concrete[where])}."
            )
    # Under jit no value can be read, so none can be refused: one rule for the loop and
    # the scan clamps each length to [0, steps].
    return jnp.clip(seq_lengths, 0, steps)


def _finite_padding(xs, seq_lengths):
    """``xs`` (time first) with every non-finite value of a padded step replaced by 0.

    A padded step's output is not used, but its derivative is still taken: a NaN there
    times the zero cotangent is NaN, and it would poison every gradient (the ``where``
    trap). Finite padding is kept as it is, so the padded outputs stay flax.linen's."""
    if not jnp.issubdtype(xs.dtype, jnp.inexact):
        return xs  # integers are always finite
    t = jnp.arange(xs.shape[0]).reshape((-1,) + (1,) * seq_lengths.ndim)
    padded = t >= seq_lengths
    padded = padded.reshape(padded.shape + (1,) * (xs.ndim - padded.ndim))
    return jnp.where(padded & ~jnp.isfinite(xs), jnp.zeros((), xs.dtype), xs)
