"""``RNN``: a cell run over the time axis of a sequence with ``jax.lax.scan``."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rnnlib import fast
from rnnlib.cell_base import RNNCellBase
from rnnlib.flip import flip_sequences
from rnnlib.module import Module, check_params, describe


def split_axes(cell: RNNCellBase, shape, time_major: bool, owner=None):
    """Where the batch dims and the time axis of an input of ``shape`` are.

    The cell owns its last ``cell.num_feature_axes`` axes; the axis just before them is
    time (or axis 0 when ``time_major``), and everything else is batch::

        time_major=False:  (*batch, time, *signal, channels)  ->  time_axis = ndim - (F + 1)
        time_major=True:   (time, *batch, *signal, channels)  ->  time_axis = 0

    Returns ``(batch_dims, time_axis)``; raises a ``ValueError`` when ``shape`` has
    no room for a time axis.
    """
    shape = tuple(shape)
    owned = cell.num_feature_axes
    if len(shape) < owned + 1:
        layout = (
            "(time, *batch, *signal, channels)"
            if time_major
            else "(*batch, time, *signal, channels)"
        )
        axes = "axis" if owned == 1 else "axes"
        raise ValueError(
            f"{describe(owner or cell)} expects inputs shaped "
            f"{RNNCellBase.feature_layout(cell, layout)} "
            f"({owned} feature {axes} after the time axis); got shape {shape}, which has "
            "no time axis."
        )
    if time_major:
        return shape[1 : len(shape) - owned], 0
    time_axis = len(shape) - (owned + 1)
    return shape[:time_axis], time_axis


FLAGS = ("time_major", "return_carry", "reverse", "keep_order")


def check_flags(owner: str, module, hints=None) -> None:
    """Raises a ``TypeError`` unless each of ``module``'s ``FLAGS`` is a bool.

    ``owner`` names the module in the message; ``hints`` adds a sentence per flag.
    """
    for flag in FLAGS:
        value = getattr(module, flag)
        if not isinstance(value, (bool, np.bool_)):
            hint = (hints or {}).get(flag, "")
            raise TypeError(f"{owner} expects {flag} to be a bool; got {value!r}.{hint}")


@dataclasses.dataclass(frozen=True, repr=False)
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
        reverse: process the sequence from its last step to its first; outputs come
            back in processing order unless ``keep_order``. With ``seq_lengths`` only the
            valid steps are reversed (see ``flip_sequences``).
        keep_order: with ``reverse``, flip the outputs back to the input's order.
        unroll: steps per iteration of the underlying ``lax.scan`` loop.
        hoist_inputs: where the cell's carry-independent input projection
            (``project_inputs``) runs. ``True``: for every step at once, as one large
            matmul before the loop, so the loop body keeps only the recurrent matmul.
            ``False``: inside the loop, one step at a time. ``None`` (the default)
            chooses by JAX's default backend: inside the loop on CPU, hoisted on GPU
            and TPU (see ``hoists_inputs``). The numbers are the same either way.

    Every field except ``cell``, ``unroll`` and ``hoist_inputs`` can be overridden per call, and the call
    also takes ``initial_carry`` (default: ``cell.initialize_carry(init_key, ...)``),
    ``init_key`` (default ``jax.random.key(0)``) and ``seq_lengths``, ints shaped
    ``(*batch)``. Outputs at padded steps are computed but meaningless; the carry
    returned for each sequence is the one after its last valid step, and a sequence of
    length 0 returns its initial carry.
    """

    cell: RNNCellBase
    time_major: bool = False
    return_carry: bool = False
    reverse: bool = False
    keep_order: bool = False
    unroll: int = 1
    hoist_inputs: bool | None = None

    def __post_init__(self):
        if not isinstance(self.cell, RNNCellBase):
            kind = type(self.cell)
            hint = ""
            if kind.__module__ == "rnnlib.legacy":
                hint = " Legacy cells run in rnnlib.legacy.RNN(cell, cell_size)."
            raise TypeError(
                "RNN expects an rnnlib.RNNCellBase cell, such as rnnlib.LSTMCell(features=...); "
                f"got {kind.__module__}.{kind.__qualname__}.{hint}"
            )
        check_flags(
            "RNN",
            self,
            hints={
                "time_major": " (Flax 0.6's RNN took cell_size as its second argument; the cell "
                "now carries its own features, so pass RNN(cell) alone.)"
            },
        )
        if isinstance(self.unroll, bool) or not isinstance(self.unroll, (int, np.integer)):
            raise TypeError(f"RNN expects unroll to be an int >= 1; got {self.unroll!r}.")
        if self.unroll < 1:
            raise ValueError(
                f"RNN expects unroll >= 1 (steps per loop iteration); got {self.unroll}."
            )
        if self.hoist_inputs is not None and not isinstance(self.hoist_inputs, (bool, np.bool_)):
            raise TypeError(
                f"RNN expects hoist_inputs to be True, False or None; got {self.hoist_inputs!r}."
            )

    @property
    def hoists_inputs(self) -> bool:
        """Whether this RNN projects the inputs of all steps before the loop.

        ``hoist_inputs`` when it is set; otherwise ``True`` unless JAX's default
        backend is the CPU, where the projection measured faster inside the loop
        (``rnnlib.fast.hoists_inputs`` gives the measurements).
        """
        if self.hoist_inputs is not None:
            return bool(self.hoist_inputs)
        return fast.hoists_inputs()

    def _init(self, key, inputs, *, time_major=None, **unused):
        time_major = self.time_major if time_major is None else time_major
        shape = tuple(np.shape(inputs))
        _, time_axis = split_axes(self.cell, shape, time_major, owner=self)
        step_shape = shape[:time_axis] + shape[time_axis + 1 :]
        return {"cell": self.cell.create_params(key, step_shape)}

    def _call(
        self,
        params,
        inputs,
        *,
        initial_carry: Any = None,
        init_key=None,
        seq_lengths=None,
        return_carry: bool | None = None,
        time_major: bool | None = None,
        reverse: bool | None = None,
        keep_order: bool | None = None,
    ):
        return_carry = self.return_carry if return_carry is None else return_carry
        time_major = self.time_major if time_major is None else time_major
        reverse = self.reverse if reverse is None else reverse
        keep_order = self.keep_order if keep_order is None else keep_order

        inputs = jnp.asarray(inputs)
        batch_dims, time_axis = split_axes(self.cell, inputs.shape, time_major, owner=self)
        steps = inputs.shape[time_axis]
        step_shape = inputs.shape[:time_axis] + inputs.shape[time_axis + 1 :]
        check_params(self, params, {"cell": self.cell.param_shapes(step_shape)})
        if seq_lengths is not None:
            seq_lengths = _check_seq_lengths(self, seq_lengths, batch_dims, steps)

        if reverse:
            inputs = flip_sequences(inputs, seq_lengths, len(batch_dims), time_major)
        if initial_carry is None:
            key = jax.random.key(0) if init_key is None else init_key
            carry = self.cell.initialize_carry(key, step_shape)
        else:
            self.cell.check_carry(initial_carry, step_shape, what="initial_carry")
            carry = initial_carry

        with jax.named_scope(f"RNN_{type(self.cell).__name__}"):
            carry, outputs = _scan(
                self.cell,
                self.cell.prepare(params["cell"], step_shape),
                carry,
                jnp.moveaxis(inputs, time_axis, 0),
                seq_lengths if return_carry else None,
                self.unroll,
                self.hoists_inputs,
            )
        outputs = jnp.moveaxis(outputs, 0, time_axis)
        if reverse and keep_order:
            outputs = flip_sequences(outputs, seq_lengths, len(batch_dims), time_major)
        return (carry, outputs) if return_carry else outputs


def _scan(cell, weights, carry, inputs, seq_lengths, unroll, hoist):
    """Runs ``cell`` over axis 0 of ``inputs``; returns ``(final_carry, outputs)``.

    With ``hoist``, the input projection of every step is computed in one batched
    call before the loop (``project_inputs``), so the loop body only holds the
    recurrent matmul and the gate arithmetic; without it, each step projects its own
    input (see ``RNN.hoists_inputs`` for when each pays). With ``seq_lengths`` the
    loop also keeps, per sequence, the carry after its last valid step: an
    ``O(batch x features)`` select per step, instead of stacking every step's carry
    and gathering afterwards. Where ``rnnlib.fast.runs_lstm_sequence`` or
    ``runs_gru_sequence`` says so (an LSTM or a GRU on CPU), the loop is
    ``rnnlib.fast.lstm_sequence`` or ``gru_sequence``: the same numbers, with a
    derivative rule of its own.
    """
    steps = inputs.shape[0]
    if hoist:
        inputs = cell.project_inputs(weights, inputs)  # may be a pytree (rnnlib.fast.Gates)

    def step(carry, x):
        return cell.step(weights, carry, x if hoist else cell.project_inputs(weights, x))

    carry = _promote_carry(cell, step, carry, inputs)

    if seq_lengths is None and not hoist:
        if fast.runs_lstm_sequence(cell, weights, carry, inputs):
            return fast.lstm_sequence(weights, carry, inputs, unroll)
        if fast.runs_gru_sequence(cell, weights, carry, inputs):
            return fast.gru_sequence(weights, carry, inputs, unroll)
    if seq_lengths is None:
        return jax.lax.scan(step, carry, inputs, unroll=unroll)

    def body(state, xs):
        x, t = xs
        running, kept = state
        running, y = step(running, x)
        valid = t < seq_lengths
        kept = jax.tree_util.tree_map(lambda new, old: _where(valid, new, old), running, kept)
        return (running, kept), y

    times = jnp.arange(steps)
    (_, kept), outputs = jax.lax.scan(body, (carry, carry), (inputs, times), unroll=unroll)
    return kept, outputs


def _where(valid, new, old):
    valid = valid.reshape(valid.shape + (1,) * (new.ndim - valid.ndim))
    return jnp.where(valid, new, old)


def _promote_carry(cell, step, carry, inputs):
    """Casts the initial carry to the dtype ``step`` produces from it.

    ``lax.scan`` needs the carry's dtype fixed, but a step can change it: a float32
    carry meeting complex inputs comes out complex, and a SimpleCell computing in
    bfloat16 returns a bfloat16 carry. The carry is cast to what a step returns
    until a step returns what it was given (one or two rounds in practice).
    """
    x = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape[1:], a.dtype), inputs)
    for _ in range(4):
        out = jax.eval_shape(lambda c, x: step(c, x)[0], carry, x)
        dtypes = [o.dtype for o in jax.tree_util.tree_leaves(out)]
        if dtypes == [jnp.result_type(c) for c in jax.tree_util.tree_leaves(carry)]:
            return carry
        carry = jax.tree_util.tree_map(lambda c, o: jnp.asarray(c, o.dtype), carry, out)
    raise TypeError(
        f"{describe(cell)} changes its carry's dtype at every step (last: {dtypes}); "
        "lax.scan needs a carry whose dtype a step preserves."
    )


def _check_seq_lengths(rnn, seq_lengths, batch_dims, steps):
    seq_lengths = jnp.asarray(seq_lengths)
    if seq_lengths.shape != tuple(batch_dims):
        raise ValueError(
            f"{describe(rnn)} expects seq_lengths shaped like the batch dims {tuple(batch_dims)}; "
            f"got shape {seq_lengths.shape}."
        )
    if not jnp.issubdtype(seq_lengths.dtype, jnp.integer):
        raise TypeError(f"seq_lengths must hold integers; got dtype {seq_lengths.dtype}.")
    try:
        concrete = np.asarray(seq_lengths)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        return seq_lengths  # traced under jit: the values are checked by nobody
    bad = (concrete < 0) | (concrete > steps)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"seq_lengths must lie in [0, {steps}] (the time axis has {steps} steps); "
            f"seq_lengths{list(where)} is {int(concrete[where])}."
        )
    return seq_lengths
