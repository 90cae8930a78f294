"""``RecurrentDropoutCell``: dropout on a cell's input and on its carried ``h``, with one
mask per sequence that every step of that sequence reuses.

Dropout between layers draws a new mask for every value of every step. Recurrent
(variational) dropout draws, per sequence, one mask for the input ``x`` and one for the
hidden state ``h``, and applies the same two masks at every step: the connection from one
step to the next loses the same units all along the sequence.

``h`` is dropped only where the cell's layers read it (the recurrent matmuls, the layers
that read ``"h"``), never on its carry path: a GRU's ``z * h`` keeps ``h`` as it is, as in
Gal and Ghahramani's variational dropout. A linear cell (``rnnlib.LinearCellBase``) has
no layer that reads ``h``, so it takes input dropout only; a ``recurrent_rate`` above 0
for it is an error.

The wrapper is a cell whose parameters are the wrapped cell's, under ``'cell'``::

    cell = RecurrentDropoutCell(LSTMCell(features=8), recurrent_rate=0.25, input_rate=0.1)
    stack = StackedRNN((RNN(cell),))                 # StackedRNN takes the rngs
    variables = stack.init(jax.random.key(0), x)    # params/layers_0/cell/cell/{ii, ...}
    y = stack.apply(variables, x, deterministic=False, rngs={"dropout": key})

``StackedRNN`` draws the masks (``draw_masks``) and runs an ``RNN`` of the cell bound to
them (``with_masks``). A cell that was never given masks refuses to run: ``rnnlib.RNN``
takes no ``rngs``, and silently running without dropout would hide the mistake.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import jax.numpy as jnp

from rnnlib import linear
from rnnlib.cell_base import Bound, RNNCellBase
from rnnlib.dropout import apply_mask, check_rate, dropout_mask, linen_key
from rnnlib.module import describe

# Which make_rng call of a cell inside flax.linen's nn.RNN draws the masks the loop uses:
# the scan traces the cell twice and the second trace's keys are the ones that run.
LINEN_SCAN_DRAW = 2


class _Wrapper(RNNCellBase):
    """A cell that runs another's layers and ``update`` (``_wrapped``): what ``RNN`` and the
    plan read of a cell, delegated. ``dtype``, ``param_dtype`` and ``carry_init`` are the
    wrapped cell's, copied from it rather than set, so they always say what runs."""

    dtype: object = dataclasses.field(default=None, init=False)
    param_dtype: object = dataclasses.field(default=None, init=False)
    carry_init: object = dataclasses.field(default=None, init=False)

    @property
    def _wrapped(self) -> RNNCellBase:
        raise NotImplementedError

    def __post_init__(self):
        for name in ("dtype", "param_dtype", "carry_init"):
            object.__setattr__(self, name, getattr(self._wrapped, name))

    @property
    def inner(self) -> RNNCellBase:
        return self._wrapped.inner

    @property
    def features(self):
        return self._wrapped.features

    @property
    def num_feature_axes(self) -> int:
        return self._wrapped.num_feature_axes

    def initialize_carry(self, rng, input_shape: Sequence[int]):
        return self._wrapped.initialize_carry(rng, input_shape)

    def layers(self, input_shape: Sequence[int]) -> dict:
        return self._wrapped.layers(input_shape)

    def update(self, carry, a):
        return self._wrapped.update(carry, a)  # the carry path keeps h as it is


class RecurrentDropoutCell(_Wrapper):
    """Wraps ``cell`` with per-sequence dropout masks on its input and on its ``h``.

    ``rnnlib.StackedRNN`` takes ``deterministic`` and ``rngs={'dropout': key}`` and draws the
    masks itself. In a plain ``RNN``, which takes no ``rngs``, bind them first::

        masks = cell.draw_masks(key, step_shape)  # step_shape: (*batch, *signal, channels)
        rnn = RNN(cell.with_masks(*masks))        # training
        rnn = RNN(cell.with_masks())              # evaluation: no dropout

    Arguments:
        cell: the wrapped ``RNNCellBase``. Its carry is ``h`` (GRU, MGU, simple cells) or
            ``(c, h)`` (LSTM, ConvLSTM); only ``h`` is dropped, and only where the cell's
            layers read it (its recurrent matmuls), never in the carry ``update`` reads.
        recurrent_rate: probability of dropping a unit of ``h``, in ``[0, 1)``; the mask is
            shaped like ``h``, ``(*batch, features)``.
        input_rate: probability of dropping a value of the input, in ``[0, 1)``; the mask
            is shaped like one step's input, ``(*batch, *signal, channels)``.

    The carry the cell returns is the wrapped cell's new carry, not dropped. The masks
    come from the keys flax.linen gives two ``nn.Dropout`` submodules of this cell named
    ``recurrent_dropout`` and ``input_dropout`` inside an ``nn.RNN`` whose ``split_rngs``
    has ``'dropout': False`` (the same key at every step): ``rnnlib.dropout.linen_key(key,
    *path, name, 2)``. The count is 2, not 1, because ``nn.RNN``'s scan traces the cell
    twice (first to check which values stay the same at every step, as ``nn.scan`` does
    with ``check_constancy_invariants``, then for the loop) without resetting the cell's
    rng counter, and the loop uses the second trace's key (flax 0.10 to 0.12).
    """

    cell: RNNCellBase
    recurrent_rate: float = 0.0
    input_rate: float = 0.0

    def __post_init__(self):
        if not isinstance(self.cell, RNNCellBase):
            kind = type(self.cell)
            raise TypeError(
                "RecurrentDropoutCell expects an rnnlib cell, such as rnnlib.LSTMCell(...); "
                f"got {kind.__module__}.{kind.__qualname__}."
            )
        check_rate(self, "recurrent_rate", self.recurrent_rate)
        check_rate(self, "input_rate", self.input_rate)
        super().__post_init__()

    # -- what RNN needs, the wrapped cell's (_Wrapper), its parameters under "cell" ----

    @property
    def _wrapped(self) -> RNNCellBase:
        return self.cell

    def create_params(self, key, input_shape: Sequence[int]) -> dict:
        return {"cell": self.cell.create_params(key, input_shape)}

    def param_shapes(self, input_shape: Sequence[int]) -> dict:
        return {"cell": self.cell.param_shapes(input_shape)}

    def bind(self, params: dict, input_shape: Sequence[int], join: bool = False):
        raise ValueError(
            f"{describe(self)} has no dropout masks: rnnlib.RNN takes no rngs. Run it "
            "inside rnnlib.StackedRNN, which takes deterministic and rngs={'dropout': key}, "
            "or bind masks yourself: RNN(cell.with_masks(*cell.draw_masks(key, step_shape))) "
            "for masks drawn once, or cell.with_masks() for none (evaluation)."
        )

    # -- masks ------------------------------------------------------------------------

    def draw_masks(self, key, input_shape: Sequence[int], path: Sequence[str | int] = ()):
        """``(recurrent_mask, input_mask)`` for one step's input of ``input_shape``.

        ``key`` is the ``rngs['dropout']`` key of the root module, and ``path`` the names
        from the root down to this cell (``('layers_0', 'cell')`` in a ``StackedRNN``). A
        mask is ``None`` when its rate is 0.
        """
        self._check_reads_h(input_shape)
        h_shape = jax.eval_shape(
            lambda: self.cell.hidden(self.cell.initialize_carry(jax.random.key(0), input_shape))
        ).shape
        recurrent = input_ = None
        if self.recurrent_rate > 0:
            h_key = linen_key(key, *path, "recurrent_dropout", LINEN_SCAN_DRAW)
            recurrent = dropout_mask(h_key, h_shape, self.recurrent_rate)
        if self.input_rate > 0:
            x_key = linen_key(key, *path, "input_dropout", LINEN_SCAN_DRAW)
            input_ = dropout_mask(x_key, tuple(input_shape), self.input_rate)
        return recurrent, input_

    def _check_reads_h(self, input_shape):
        """Raises when ``h`` is to be dropped but none of the cell's layers reads it."""
        if self.recurrent_rate == 0:
            return
        layers = self.cell.layers(tuple(input_shape)).values()
        if not any(not isinstance(la, linear.Param) and la.reads == "h" for la in layers):
            raise ValueError(
                f"{describe(self)} drops h where the cell's layers read it, but none of "
                f"{describe(self.cell)}'s layers reads 'h' (a linear cell's gates read "
                "only the input), so there is nothing to drop: use recurrent_rate=0 and "
                f"input_rate alone; got recurrent_rate={self.recurrent_rate}."
            )

    def with_masks(self, recurrent_mask=None, input_mask=None) -> RNNCellBase:
        """This cell bound to fixed masks (booleans, ``True`` = kept), ready for ``RNN``.

        A mask of ``None`` leaves that side undropped. The masks must be shaped like ``h``
        and like one step's input (or broadcast to them).
        """
        return _MaskedCell(self, recurrent_mask, input_mask)


class _MaskedCell(_Wrapper, eq=False):
    """A ``RecurrentDropoutCell`` bound to the masks of one call: its input is dropped
    before the layers that read ``x``, and ``h`` before those that read ``h`` only; the
    wrapped cell's ``update`` gets the carry undropped."""

    dropout: RecurrentDropoutCell
    recurrent_mask: object = None
    input_mask: object = None

    def __repr__(self) -> str:
        return f"{describe(self.dropout)} (with masks)"

    @property
    def _wrapped(self) -> RNNCellBase:
        return self.dropout

    def create_params(self, key, input_shape):
        return self.dropout.create_params(key, input_shape)

    def param_shapes(self, input_shape):
        return self.dropout.param_shapes(input_shape)

    def hidden(self, carry):
        """The ``h`` the layers that read ``"h"`` see: dropped, when there is a mask."""
        h = self.dropout.cell.hidden(carry)
        if self.recurrent_mask is None:
            return h
        return apply_mask(h, self.recurrent_mask, self.dropout.recurrent_rate)

    def bind(self, params, input_shape, join=False):
        if self.recurrent_mask is not None:
            self.dropout._check_reads_h(input_shape)
        cell = self.dropout.cell
        h = jax.eval_shape(
            lambda: cell.hidden(cell.initialize_carry(jax.random.key(0), input_shape))
        )
        self._check_mask("recurrent_mask", self.recurrent_mask, h.shape, "h")
        self._check_mask("input_mask", self.input_mask, tuple(input_shape), "one step's input")
        return _InputDropped(self, self.dropout.cell.bind(params["cell"], input_shape, join))

    def _check_mask(self, name, mask, shape, what):
        """Raises unless ``mask`` (or None) broadcasts to ``shape``, the shape of ``what``."""
        if mask is None:
            return
        try:
            fits = jnp.broadcast_shapes(jnp.shape(mask), shape) == tuple(shape)
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(
                f"{describe(self.dropout)} expects {name} shaped like {what}, {tuple(shape)} "
                f"(or broadcasting to it); got shape {jnp.shape(mask)}. Draw the masks for "
                "this batch: cell.draw_masks(key, step_shape) with this input's step shape."
            )


class _InputDropped:
    """The wrapped cell's own bound step (whatever its kind), with the input dropped before
    every layer that reads it and ``h`` read through the masked cell's ``hidden``."""

    def __init__(self, cell: _MaskedCell, inner: Bound):
        self.cell, self.inner = cell, inner

    x_groups = property(lambda self: self.inner.x_groups)
    h_groups = property(lambda self: self.inner.h_groups)
    constants = property(lambda self: self.inner.constants)

    def _replace(self, **fields):
        return _InputDropped(self.cell, self.inner._replace(**fields))

    def inputs(self, x, bias=True):
        # The mask is (*batch, *signal, channels); it broadcasts over a leading time axis
        # when RNN projects every step at once, and is the same mask at every step.
        if self.cell.input_mask is not None:
            x = apply_mask(x, self.cell.input_mask, self.cell.dropout.input_rate)
        return self.inner.inputs(x, bias)

    def outputs(self, carry, x_outs) -> dict:
        h_outs = linear.run(self.h_groups, self.cell.hidden(carry), self.cell.inner.dtype)
        return self.named(x_outs, h_outs)

    def named(self, x_outs, h_outs, constants=None) -> dict:
        return self.inner.named(x_outs, h_outs, constants)

    def step(self, carry, x_outs):
        return self.cell.update(carry, self.outputs(carry, x_outs))

    def __call__(self, carry, x):
        return self.step(carry, self.inputs(x))
