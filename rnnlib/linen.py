"""rnnlib's recurrent layers as ``flax.linen`` modules, to use inside a model of your own.

``rnnlib.linen.RNN(cell)`` takes the place of ``nn.RNN(cell)`` in an ``nn.Module``: it is
named ``RNN_0``, ``RNN_1``... like Flax's, and its cell's parameters go where linen puts
them, so a model's variables move between the two unchanged. The cell is an rnnlib cell, which brings
what Flax's cells lack: the linear cells run as one associative scan, ``seq_lengths`` with
any number of batch dims, recurrent dropout and ``Plan``::

    import flax.linen as nn
    import rnnlib
    from rnnlib import linen as rl

    class Tagger(nn.Module):
        @nn.compact
        def __call__(self, tokens, lengths):            # (batch, time) ints, (batch,)
            x = nn.Embed(1000, 32)(tokens)               # (batch, time, 32)
            x = rl.RNN(rnnlib.LSTMCell(64))(x, seq_lengths=lengths)  # (batch, time, 64)
            return nn.Dense(10)(x)                       # params['LSTMCell_0']['ii'] ...

The parameters go where linen puts a cell's: a cell built inline in a compact method belongs
to the model (``LSTMCell_0``, as ``nn.RNN(nn.LSTMCell(64))``), one built in ``setup`` to its
attribute (``rnn/cell``). A cell built outside the model goes under ``RNN_0/cell`` in linen;
wrap it with ``rl.linen_cell`` there (see its docstring) to get the same.

``nn.Bidirectional(rl.RNN(cell), rl.RNN(cell))`` runs both directions, and
``rl.StackedRNN`` several layers with dropout between them. Dropout keys come from linen's
``'dropout'`` stream (``rngs={'dropout': key}``) and ``deterministic`` is given once, as a
field or at call time, as for ``nn.Dropout``.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax

from rnnlib import rnn as rnn_module
from rnnlib import stacked as stacked_module
from rnnlib.cell_base import RNNCellBase
from rnnlib.module import _params_key, flax_family
from rnnlib.plan import Plan
from rnnlib.recurrent_dropout import RecurrentDropoutCell


def _declare(owner: nn.Module, module, inputs) -> dict:
    """``module``'s parameters, one linen param per top-level name of its tree."""
    shape = jax.ShapeDtypeStruct(inputs.shape, inputs.dtype)

    def make(key):
        return module._init(_params_key(key), shape)

    names = jax.eval_shape(make, jax.random.key(0))
    return {name: owner.param(name, lambda key, name=name: make(key)[name]) for name in names}


def _check_cell(owner: str, cell) -> None:
    if isinstance(cell, RNNCellBase):
        return
    kind = type(cell)
    got = f"{kind.__module__}.{kind.__qualname__}"
    if flax_family(cell):
        raise TypeError(
            f"rnnlib.linen.{owner} expects an rnnlib cell, such as rnnlib.LSTMCell(features=...); "
            f"got the Flax cell {got}. Run Flax cells in flax.linen.RNN, or swap in rnnlib's cell "
            "of the same name: the parameters are laid out the same."
        )
    raise TypeError(
        f"rnnlib.linen.{owner} expects an rnnlib.RNNCellBase cell, such as "
        f"rnnlib.LSTMCell(features=...); got {got}."
    )


class CellParams(nn.Module):
    """Holds an rnnlib cell's parameters where linen would keep a linen cell's.

    ``RNN`` makes one for its cell when it is built, named after the cell's class, so it is
    adopted and auto-named as Flax's cell would be: ``LSTMCell_0`` in the model when the
    layer is built in a compact method, ``<attribute>/cell`` in ``setup``, ``RNN_0/cell``
    for a cell built outside any module. Calling it with one step's input shape
    ``(*batch, *signal, channels)`` returns the cell's parameter tree.

    Arguments:
        rnnlib_cell: the rnnlib cell whose parameters it holds.
    """

    rnnlib_cell: Any

    @nn.compact
    def __call__(self, step_shape):
        cell, step_shape = self.rnnlib_cell, tuple(step_shape)

        def make(key):
            return cell.create_params(_params_key(key), step_shape)

        names = jax.eval_shape(make, jax.random.key(0))
        return {name: self.param(name, lambda key, name=name: make(key)[name]) for name in names}


_HOLDERS: dict[str, type] = {}


def linen_cell(cell: RNNCellBase) -> CellParams:
    """``cell`` as a linen module (a ``CellParams`` of a class named as the cell's).

    ``RNN(cell)`` calls it when it is built. Call it yourself where linen's names depend on
    where the cell is built: a cell built outside any module, or shared by two layers::

        cell = linen_cell(rnnlib.LSTMCell(8))   # outside the model: RNN_0/cell, as linen
        bi = nn.Bidirectional(RNN(cell), RNN(cell))  # one LSTMCell_0, shared, as linen
    """
    _check_cell("linen_cell", cell)
    name = type(cell).__name__
    if name not in _HOLDERS:
        _HOLDERS[name] = type(name, (CellParams,), {"__module__": __name__})
    return _HOLDERS[name](cell)


class RNN(nn.Module):
    """Runs an rnnlib cell over a sequence inside a ``flax.linen`` model, like ``nn.RNN``.

    Example::

        class Model(nn.Module):
            @nn.compact
            def __call__(self, x):                       # (batch, time, channels)
                return RNN(rnnlib.GRUCell(features=8))(x)  # (batch, time, 8)

    Arguments:
        cell: an rnnlib cell (``rnnlib.LSTMCell``, ``GRUCell``, ``MinGRUCell``,
            ``RGLRUCell``, ``RecurrentDropoutCell``...), not a linen cell. Its parameters
            are held by a ``CellParams`` named as linen names a cell (``GRUCell_0``...).
        time_major: whether time is the first axis of inputs and outputs.
        return_carry: also return the final carry, as ``(carry, outputs)``.
        reverse: process each sequence from its last valid step.
        keep_order: with ``reverse``, give the outputs back in the input's order.
        unroll: steps per iteration of the loop.
        plan: how it runs, ``rnnlib.Plan()`` (a loop, or an associative scan).
        deterministic: for a ``RecurrentDropoutCell``: ``True`` for no dropout; give it here
            or at call time, not both.

    The call takes ``inputs`` ``(*batch, time, *signal, channels)`` and, as ``nn.RNN``,
    ``initial_carry``, ``init_key``, ``seq_lengths`` (ints ``(*batch)``, any number of batch
    dims), ``return_carry``, ``time_major``, ``reverse`` and ``keep_order``, plus
    ``deterministic`` and ``resets`` (bools ``(*batch, time)``: the carry starts afresh
    before each flagged step, as ``rnnlib.RNN``'s; ``nn.RNN`` has none). The parameters sit
    where ``nn.RNN``'s would. A sequence of length 0 gives back its initial carry (``nn.RNN``:
    the carry after the padded steps).
    """

    cell: Any
    time_major: bool = False
    return_carry: bool = False
    reverse: bool = False
    keep_order: bool = False
    unroll: int = 1
    plan: Plan = Plan()
    deterministic: bool | None = None

    def __post_init__(self):
        if not isinstance(self.cell, CellParams):
            _check_cell("RNN", self.cell)
            object.__setattr__(self, "cell", linen_cell(self.cell))
        super().__post_init__()

    def rnnlib_module(self, cell=None) -> rnn_module.RNN:
        """The ``rnnlib.RNN`` this layer runs (with ``cell`` in place of its own, if given)."""
        return rnn_module.RNN(
            self.cell.rnnlib_cell if cell is None else cell,
            time_major=self.time_major,
            return_carry=self.return_carry,
            reverse=self.reverse,
            keep_order=self.keep_order,
            unroll=self.unroll,
            plan=self.plan,
        )

    def __call__(self, inputs, *, deterministic: bool | None = None, **kwargs):
        cell, inputs = self.cell.rnnlib_cell, jax.numpy.asarray(inputs)
        major = kwargs.get("time_major")
        major = self.time_major if major is None else major
        _, t = rnn_module.split_axes(cell, inputs.shape, major, owner=self.rnnlib_module())
        step_shape = inputs.shape[:t] + inputs.shape[t + 1 :]
        params = {"cell": self.cell(step_shape)}
        if isinstance(cell, RecurrentDropoutCell):
            if nn.merge_param("deterministic", self.deterministic, deterministic):
                cell = cell.with_masks()
            else:
                cell = cell.with_masks(*cell.draw_masks(self.make_rng("dropout"), step_shape))
        return self.rnnlib_module(cell).apply({"params": params}, inputs, **kwargs)


class StackedRNN(nn.Module):
    """``rnnlib.StackedRNN`` inside a ``flax.linen`` model: layers with dropout between them.

    Example::

        stack = StackedRNN(
            (rnnlib.RNN(rnnlib.LSTMCell(8)), rnnlib.RNN(rnnlib.LSTMCell(8))),
            dropout_rate=0.1,
        )
        y = stack(x, deterministic=False)   # (batch, time, 8); needs rngs={'dropout': key}

    Arguments:
        layers: a non-empty tuple of ``rnnlib.RNN`` and ``rnnlib.Bidirectional`` (rnnlib's
            modules, not linen ones); layer ``i``'s parameters live under ``'layers_i'``.
        dropout_rate: probability of dropping each value between two layers, in ``[0, 1)``.
        residual: ``True``, ``False`` or one bool per layer: add each layer's input to its
            output.
        deterministic: ``True`` for no dropout; here or at call time, not both.

    The call takes ``inputs`` ``(*batch, time, channels)``, ``deterministic``,
    ``seq_lengths``, ``resets`` (to every layer), ``initial_carry`` (one per layer) and
    ``return_carry``, as ``rnnlib.StackedRNN``'s ``apply``; the dropout key is drawn from the ``'dropout'`` stream
    only when something drops.
    """

    layers: tuple[Any, ...]
    dropout_rate: float = 0.0
    residual: bool | tuple[bool, ...] = False
    deterministic: bool | None = None

    def rnnlib_module(self) -> stacked_module.StackedRNN:
        """The ``rnnlib.StackedRNN`` this layer runs."""
        layers = tuple(self.layers) if isinstance(self.layers, list) else self.layers
        for index, layer in enumerate(layers if isinstance(layers, tuple) else ()):
            if flax_family(layer):
                kind = type(layer)
                raise TypeError(
                    "rnnlib.linen.StackedRNN expects rnnlib.RNN or rnnlib.Bidirectional layers "
                    f"(rnnlib's modules); layer {index} is the linen module "
                    f"{kind.__module__}.{kind.__qualname__}. Write rnnlib.RNN(cell) there."
                )
        return stacked_module.StackedRNN(layers, self.dropout_rate, self.residual)

    @nn.compact
    def __call__(self, inputs, *, deterministic: bool | None = None, **kwargs):
        stack = self.rnnlib_module()
        inputs = jax.numpy.asarray(inputs)
        params = _declare(self, stack, inputs)
        drops = not nn.merge_param("deterministic", self.deterministic, deterministic)
        rngs = {"dropout": self.make_rng("dropout")} if drops and stack._drops() else None
        return stack.apply({"params": params}, inputs, deterministic=not drops, rngs=rngs, **kwargs)
