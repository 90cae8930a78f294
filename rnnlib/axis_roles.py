"""``layout``: how a module reads the axes of an input shape, as data and as a picture.

Every axis of an input plays one role: ``batch``, ``time``, ``signal`` (the spatial
axes a ConvLSTM convolves over) or ``channels`` (the last axis, the width of each
position's vector). The split is decided by one number, the cell's
``num_feature_axes``: the last ``num_feature_axes`` axes, the cell's feature axes in
Flax's words, are ``(*signal, channels)``; the axis before them is time (for an
``RNN``), and the rest are batch. ``layout`` applies that rule and reports the result::

    >>> layout(RNN(ConvLSTMCell(6, kernel_size=(3, 3))), (16, 10, 64, 64, 3))
    Layout of RNN(cell=ConvLSTMCell(features=6, kernel_size=(3, 3))) on input (16, 10, 64, 64, 3)
      axis 0  size 16  batch
      axis 1  size 10  time
      ...
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from rnnlib.bidirectional import Bidirectional
from rnnlib.cell_base import RNNCellBase
from rnnlib.module import describe, flax_family
from rnnlib.rnn import RNN, split_axes

#: The colour of each role in ``Layout.plot`` (and in the book's figures).
ROLE_COLORS = {
    "batch": "#4C72B0",
    "time": "#DD8452",
    "signal": "#55A868",
    "channels": "#C44E52",
}


@dataclasses.dataclass(frozen=True)
class Layout:
    """The role of every axis of ``input_shape`` for ``module``, and what comes out.

    Attributes:
        module: a short description of the module.
        input_shape: the shape that was analysed.
        roles: one of ``'batch'``, ``'time'``, ``'signal'``, ``'channels'`` per axis.
        batch_dims: the sizes of the batch axes.
        time_axis: the index of the time axis (``None`` for a lone cell).
        signal_dims: the sizes of the signal axes (``()`` for dense cells).
        feature_axes: the indices of the cell's feature axes, ``(*signal, channels)``.
        channels: the size of the last axis, the channels the cell reads (not the
            cell's ``features``, which is the width of what it produces).
        carry_shapes: the shapes ``initialize_carry`` gives, with the carry's structure
            (a pair for ``Bidirectional``: forward and backward).
        output_shape: the shape of the module's output for this input.
    """

    module: str
    input_shape: tuple[int, ...]
    roles: tuple[str, ...]
    batch_dims: tuple[int, ...]
    time_axis: int | None
    signal_dims: tuple[int, ...]
    feature_axes: tuple[int, ...]
    channels: int
    carry_shapes: Any
    output_shape: tuple[int, ...]

    @property
    def num_feature_axes(self) -> int:
        return len(self.feature_axes)

    def __repr__(self) -> str:
        width = max(len(str(n)) for n in self.input_shape)
        lines = [f"Layout of {self.module} on input {self.input_shape}"]
        for axis, (size, role) in enumerate(zip(self.input_shape, self.roles)):
            lines.append(f"  axis {axis}  size {size:>{width}}  {role}")
        lines.append(
            f"  batch_dims={self.batch_dims}  time_axis={self.time_axis}  "
            f"signal_dims={self.signal_dims}  channels={self.channels}"
        )
        lines.append(f"  carry shapes: {self.carry_shapes}")
        lines.append(f"  output shape: {self.output_shape}")
        return "\n".join(lines)

    def plot(self, ax=None, title: str | None = None):
        """Draws the input's axes as a row of boxes coloured by role; returns the axes.

        It needs matplotlib, which rnnlib does not install (``pip install matplotlib``)."""
        try:
            import matplotlib.pyplot as plt
        except ImportError as error:
            raise ImportError(
                "Layout.plot draws with matplotlib, which rnnlib does not depend on and "
                "which is not installed here; install it with pip install matplotlib."
            ) from error
        from matplotlib.patches import Patch, Rectangle

        if ax is None:
            _, ax = plt.subplots(figsize=(1.3 * len(self.input_shape) + 1.5, 1.6))
        for axis, (size, role) in enumerate(zip(self.input_shape, self.roles)):
            ax.add_patch(Rectangle((axis, 0), 0.92, 1, color=ROLE_COLORS[role], alpha=0.85))
            ax.text(
                axis + 0.46,
                0.62,
                str(size),
                ha="center",
                va="center",
                color="white",
                fontsize=13,
                fontweight="bold",
            )
            ax.text(axis + 0.46, 0.25, role, ha="center", va="center", color="white", fontsize=9)
            ax.text(axis + 0.46, -0.18, f"axis {axis}", ha="center", va="center", fontsize=8)
        ax.set_xlim(-0.1, len(self.input_shape))
        ax.set_ylim(-0.4, 1.1)
        ax.axis("off")
        used = [r for r in ROLE_COLORS if r in self.roles]
        ax.legend(
            handles=[Patch(color=ROLE_COLORS[r], label=r) for r in used],
            loc="center left",
            bbox_to_anchor=(1.0, 0.5),
            frameon=False,
        )
        ax.set_title(title or f"{self.module}\ninput {self.input_shape}", fontsize=9)
        return ax


def layout(module, input_shape, *, time_major: bool | None = None) -> Layout:
    """Splits ``input_shape`` into batch, time, signal and channels axes for ``module``.

    Arguments:
        module: a cell (``input_shape`` is one step's input, ``(*batch, *signal, channels)``),
            an ``RNN`` or a ``Bidirectional`` (``input_shape`` is a whole sequence):
            rnnlib's, flax.linen's or flax.nnx's, including cells of your own that
            subclass one of their ``RNNCellBase`` classes. The split needs only the
            cell's ``num_feature_axes`` and the ``time_major`` flag, which is the rule
            all three libraries follow.
        input_shape: the shape to analyse.
        time_major: for an ``RNN``/``Bidirectional``, whether time is axis 0; by
            default the module's own ``time_major`` field.

    Raises the ``ValueError`` rnnlib's ``RNN`` raises when the shape has no room for a
    time axis, and a ``TypeError`` naming the type for anything that is not a cell, an
    ``RNN`` or a ``Bidirectional``.
    """
    input_shape = tuple(int(n) for n in input_shape)
    kind = _kind(module)
    if kind == "cell":
        if time_major:
            raise ValueError(
                "time_major only applies to an RNN or Bidirectional; a cell "
                "reads one step, which has no time axis."
            )
        cell, time_axis = module, None
        if isinstance(module, RNNCellBase):
            module.check_input_shape(input_shape)
        step_shape = input_shape
    else:
        if time_major is None:
            time_major = bool(getattr(module, "time_major", False))
        cell = module.cell if kind == "rnn" else module.forward_rnn.cell
        _, time_axis = split_axes(cell, input_shape, time_major, owner=module)
        step_shape = input_shape[:time_axis] + input_shape[time_axis + 1 :]

    n_features = cell.num_feature_axes
    roles = ["batch"] * len(input_shape)
    if time_axis is not None:
        roles[time_axis] = "time"
    first_feature = len(input_shape) - n_features
    for axis in range(first_feature, len(input_shape) - 1):
        roles[axis] = "signal"
    roles[-1] = "channels"

    carry = _carry_shapes(cell, step_shape)
    if kind == "bidirectional":
        carry = (carry, _carry_shapes(module.backward_rnn.cell, step_shape))
    x = jax.ShapeDtypeStruct(input_shape, jnp.float32)

    return Layout(
        module=describe(module),
        input_shape=input_shape,
        roles=tuple(roles),
        batch_dims=tuple(n for n, r in zip(input_shape, roles) if r == "batch"),
        time_axis=time_axis,
        signal_dims=input_shape[first_feature:-1],
        feature_axes=tuple(range(first_feature, len(input_shape))),
        channels=input_shape[-1],
        carry_shapes=carry,
        output_shape=_output_shape(module, kind, x, step_shape, time_major),
    )


def _family(module) -> str | None:
    """Whose calling convention ``module`` follows: ``'rnnlib'``, ``'flax.linen'``,
    ``'flax.nnx'`` (a reader's subclass included), or ``None``."""
    if isinstance(module, (RNNCellBase, RNN, Bidirectional)):
        return "rnnlib"
    return flax_family(module)


def _kind(module) -> str:
    """``'cell'``, ``'rnn'`` or ``'bidirectional'``; a ``TypeError`` for anything else."""
    if _family(module):
        if hasattr(module, "forward_rnn") and hasattr(module, "backward_rnn"):
            return "bidirectional"
        if hasattr(getattr(module, "cell", None), "num_feature_axes"):
            return "rnn"
        if hasattr(module, "num_feature_axes") and hasattr(module, "initialize_carry"):
            return "cell"
    kind = type(module)
    raise TypeError(
        "layout expects a cell, an RNN or a Bidirectional (from rnnlib, flax.linen or "
        f"flax.nnx); got {kind.__module__}.{kind.__qualname__}."
    )


def _carry_shapes(cell, step_shape):
    """The shapes of ``cell.initialize_carry`` for one step's input, in each API."""
    if _family(cell) == "flax.nnx":
        from flax import nnx

        # NNX draws the carry from an Rngs; a fresh one leaves any the cell keeps alone.
        carry = jax.eval_shape(lambda: cell.initialize_carry(step_shape, rngs=nnx.Rngs(0)))
    else:
        carry = jax.eval_shape(lambda: cell.initialize_carry(jax.random.key(0), step_shape))
    return _shapes(carry)


def _output_shape(module, kind, x, step_shape, time_major):
    """The shape of the module's output for an input like ``x``, computed abstractly."""
    key = jax.random.key(0)
    if _family(module) == "flax.nnx":
        from flax import nnx

        if kind == "cell":
            carry = module.initialize_carry(step_shape, rngs=nnx.Rngs(0))
            out = nnx.eval_shape(lambda m, c, x: m(c, x)[1], module, carry, x)
        else:
            out = nnx.eval_shape(lambda m, x: m(x, time_major=time_major), module, x)
    elif kind == "cell":

        def run(x):
            carry = module.initialize_carry(key, step_shape)
            return module.init_with_output(key, carry, x)[0][1]

        out = jax.eval_shape(run, x)
    else:
        out = jax.eval_shape(lambda x: module.init_with_output(key, x, time_major=time_major)[0], x)
    return tuple(out.shape)


def _shapes(tree):
    return jax.tree_util.tree_map(lambda x: tuple(x.shape), tree)
