"""rnnlib's recurrent layers as ``flax.nnx`` modules, to use inside a model of your own.

``rnnlib.nnx.RNN(cell, in_features, rngs=rngs)`` takes the place of
``nnx.RNN(nnx.LSTMCell(in_features, features, rngs=rngs))`` in an ``nnx.Module``. The cell
is an rnnlib cell, which knows its width but not its input's, so the layer is told
``in_features`` and creates the parameters itself. They sit where NNX keeps a cell's, under
the layer's ``cell`` attribute and with NNX's names and shapes, so ``nnx.state`` of a model
is the same whichever layer it holds, and a state saved from one model loads into the
other unchanged (``nnx.update``, or ``nnx.merge`` of one's graph with the other's state)::

    from flax import nnx
    import rnnlib
    from rnnlib import nnx as rx

    class Tagger(nnx.Module):
        def __init__(self, rngs):
            self.embed = nnx.Embed(1000, 32, rngs=rngs)
            self.rnn = rx.RNN(rnnlib.LSTMCell(64), 32, rngs=rngs)  # state: rnn/cell/ii/...
            self.head = nnx.Linear(64, 10, rngs=rngs)

        def __call__(self, tokens, lengths):     # (batch, time) ints, (batch,)
            x = self.embed(tokens)               # (batch, time, 32)
            x = self.rnn(x, seq_lengths=lengths)  # (batch, time, 64)
            return self.head(x)

The layer brings what Flax's cells lack: the linear cells run as one associative scan
(``plan=rnnlib.Plan(scan='associative')``), ``seq_lengths`` with any number of batch dims,
``resets``, recurrent dropout (``rnnlib.RecurrentDropoutCell``) and, in ``StackedRNN``,
several layers with dropout between them. Dropout keys come from the ``dropout`` stream of
the ``nnx.Rngs`` the layer is built with, and a ``deterministic`` attribute switches it off,
as for ``nnx.Dropout`` (``model.eval()`` sets it).

Parameter layouts. For the four cells NNX has, the layer keeps NNX's tree:

- ``LSTMCell``: ``ii, if_, ig, io`` (kernels ``(in, features)``) and ``hi, hf, hg, ho``
  (kernels ``(features, features)`` and biases), as ``nnx.LSTMCell``.
- ``OptimizedLSTMCell``: ``dense_i`` (kernel ``(in, 4 * features)``) and ``dense_h``
  (kernel ``(features, 4 * features)``, bias ``(4 * features,)``), gates in the order
  ``i, f, g, o``, as ``nnx.OptimizedLSTMCell``.
- ``GRUCell``: ``dense_i`` (kernel ``(in, 3 * features)``, bias) and ``dense_h`` (kernel
  ``(features, 3 * features)``, no bias), gates ``r, z, n``. Like ``nnx.GRUCell`` it has no
  bias ``b_hn`` on the hidden side of the candidate: the layer runs rnnlib's GRU with
  ``b_hn = 0``, which is NNX's GRU.
- ``SimpleCell``: ``dense_i`` (kernel, bias) and ``dense_h`` (kernel), as ``nnx.SimpleCell``.

Every other cell (``MGUCell``, ``ConvLSTMCell``, ``MinGRUCell``, ``MinLSTMCell``,
``RGLRUCell``, a ``RecurrentDropoutCell`` around any cell, a cell of your own) has no NNX
counterpart, and keeps linen's names: the tree ``rnnlib.linen`` and ``flax.linen`` give the
cell (``cell/if/kernel`` for an MGU). ``layout='linen'`` asks for linen's tree for the four
cells too (the GRU then has its ``b_hn``, as linen's).

The RNG state matches too: the layer keeps a carry stream under ``rngs`` as ``nnx.RNN`` does
(and, on flax 0.10, the cell keeps the ``nnx.Rngs`` it was built with, as NNX's cells do
there), so the whole ``nnx.state``, not only the ``nnx.Param`` part, has the same paths.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

try:
    from flax import nnx
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError(
        "rnnlib.nnx builds flax.nnx modules, so it needs flax: pip install flax "
        "(or install rnnlib with its extra: pip install "
        "'rnnlib[flax] @ git+https://github.com/carry-on-book/carry-on')."
    ) from error

from rnnlib import rnn as rnn_module
from rnnlib import stacked as stacked_module
from rnnlib.bidirectional import Bidirectional
from rnnlib.cell_base import RNNCellBase
from rnnlib.gru import GRUCell
from rnnlib.lstm import LSTMCell, OptimizedLSTMCell
from rnnlib.module import flax_family
from rnnlib.plan import Plan
from rnnlib.recurrent_dropout import RecurrentDropoutCell
from rnnlib.simple import SimpleCell

__all__ = ["Cell", "RNN", "StackedRNN"]

# What the installed Flax keeps besides parameters, read from its signatures: since flax
# 0.11 a cell keeps no rngs unless asked (keep_rngs) and nnx.RNN makes a carry stream of
# its own (rngs=True); flax 0.10's cells keep the nnx.Rngs they were built with and its
# nnx.RNN an nnx.Rngs(0).
_CELLS_KEEP_RNGS = "keep_rngs" not in inspect.signature(nnx.LSTMCell.__init__).parameters
_RNN_MAKES_STREAM = inspect.signature(nnx.RNN.__init__).parameters["rngs"].default is True

_LSTM_INPUT = ("ii", "if", "ig", "io")
_LSTM_HIDDEN = ("hi", "hf", "hg", "ho")
_GRU_INPUT = ("ir", "iz", "in")
_GRU_HIDDEN = ("hr", "hz", "hn")
_NNX_NAMED = (LSTMCell, OptimizedLSTMCell, GRUCell, SimpleCell)
_LAYOUTS = ("nnx", "linen")


# -- parameter trees: linen's (what rnnlib runs) and NNX's (what the layer keeps) -----------


def _concat(params, names, leaf):
    return jnp.concatenate([params[name][leaf] for name in names], axis=-1)


def _split(array, names, leaf):
    return {name: {leaf: part} for name, part in zip(names, jnp.split(array, len(names), -1))}


def _to_nnx_names(kind, params: dict) -> dict:
    """A linen-layout tree of an NNX-named cell in NNX's layout (fused gates, NNX names)."""
    if kind is LSTMCell:
        return {("if_" if name == "if" else name): layer for name, layer in params.items()}
    if kind is OptimizedLSTMCell:
        return {
            "dense_i": {"kernel": _concat(params, _LSTM_INPUT, "kernel")},
            "dense_h": {
                "kernel": _concat(params, _LSTM_HIDDEN, "kernel"),
                "bias": _concat(params, _LSTM_HIDDEN, "bias"),
            },
        }
    if kind is GRUCell:  # hn's bias is dropped: NNX's GRU has none
        return {
            "dense_i": {
                "kernel": _concat(params, _GRU_INPUT, "kernel"),
                "bias": _concat(params, _GRU_INPUT, "bias"),
            },
            "dense_h": {"kernel": _concat(params, _GRU_HIDDEN, "kernel")},
        }
    return {"dense_i": params["i"], "dense_h": params["h"]}  # SimpleCell


def _to_linen_names(kind, params: dict) -> dict:
    """The inverse of ``_to_nnx_names``: the tree rnnlib's cell reads."""
    if kind is LSTMCell:
        return {("if" if name == "if_" else name): layer for name, layer in params.items()}
    dense_i, dense_h = params["dense_i"], params["dense_h"]
    if kind is OptimizedLSTMCell:
        tree = _split(dense_i["kernel"], _LSTM_INPUT, "kernel")
        hidden = _split(dense_h["kernel"], _LSTM_HIDDEN, "kernel")
        biases = _split(dense_h["bias"], _LSTM_HIDDEN, "bias")
        tree.update({name: {**hidden[name], **biases[name]} for name in _LSTM_HIDDEN})
        return tree
    if kind is GRUCell:
        kernels = _split(dense_i["kernel"], _GRU_INPUT, "kernel")
        biases = _split(dense_i["bias"], _GRU_INPUT, "bias")
        tree = {name: {**kernels[name], **biases[name]} for name in _GRU_INPUT}
        tree.update(_split(dense_h["kernel"], _GRU_HIDDEN, "kernel"))
        tree["hn"]["bias"] = jnp.zeros_like(tree["hn"]["kernel"][0])  # NNX's GRU: b_hn = 0
        return tree
    return {"i": dense_i, "h": dense_h}  # SimpleCell


@functools.cache
def _keeps_empty_bias() -> bool:
    """Whether the installed ``nnx.Linear(..., use_bias=False)`` keeps ``bias`` as a
    ``Param`` holding ``None`` (flax 0.10 does, so its cells' state lists those too)."""
    linear = nnx.Linear(1, 1, use_bias=False, rngs=nnx.Rngs(0))
    return isinstance(getattr(linear, "bias", None), nnx.Variable)


def _with_empty_biases(params: dict) -> dict:
    """``params`` (NNX's names) with ``bias: None`` in each layer without one, as the
    installed NNX's bias-free ``Linear`` layers keep it."""
    if not _keeps_empty_bias():
        return params
    return {name: {"bias": None, **layer} for name, layer in params.items()}


def _value(variable):
    return variable.get_value() if hasattr(variable, "get_value") else variable.value


class _Params(nnx.Module):
    """A nested dict of arrays as NNX state: a dict is a submodule, an array an ``nnx.Param``."""

    def __init__(self, tree: Mapping):
        self._fill(tree)

    def _fill(self, tree: Mapping) -> None:
        self.param_names = tuple(tree)
        for name, value in tree.items():
            child = _Params(value) if isinstance(value, Mapping) else nnx.Param(value)
            setattr(self, name, child)

    def tree(self) -> dict:
        """The arrays as a nested dict, in the layout they are kept."""
        out = {}
        for name in self.param_names:
            child = getattr(self, name)
            value = child.tree() if isinstance(child, _Params) else _value(child)
            if value is not None:  # an empty bias (see _with_empty_biases) is no parameter
                out[name] = value
        return out


# -- checks -------------------------------------------------------------------------------


def _name(kind) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


def _check_cell(owner: str, cell) -> None:
    if isinstance(cell, RNNCellBase):
        return
    got = _name(type(cell))
    if flax_family(cell):
        raise TypeError(
            f"rnnlib.nnx.{owner} expects an rnnlib cell, such as rnnlib.LSTMCell(features=...), "
            f"with in_features given to the layer; got the Flax cell {got}. Run Flax cells in "
            "flax.nnx.RNN, or swap in rnnlib's cell of the same name: the parameter tree is "
            "NNX's."
        )
    raise TypeError(
        f"rnnlib.nnx.{owner} expects an rnnlib.RNNCellBase cell, such as "
        f"rnnlib.LSTMCell(features=...); got {got}."
    )


def _check_rngs(owner: str, rngs) -> None:
    if not isinstance(rngs, nnx.Rngs):
        raise TypeError(
            f"rnnlib.nnx.{owner} expects rngs to be a flax.nnx.Rngs, such as nnx.Rngs(0) or "
            f"nnx.Rngs(params=0, dropout=1), from which it draws its parameters; got "
            f"{_name(type(rngs))}."
        )


def _check_in_features(owner: str, in_features) -> int:
    integer = isinstance(in_features, (int, np.integer)) and not isinstance(in_features, bool)
    if not integer or in_features < 1:
        raise (ValueError if integer else TypeError)(
            f"rnnlib.nnx.{owner} expects in_features >= 1, an int: the width (channels) of "
            f"its inputs, as nnx.LSTMCell(in_features, ...) takes it; got {in_features!r}."
        )
    return int(in_features)


def _check_deterministic(owner: str, value) -> None:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(
            f"rnnlib.nnx.{owner} expects deterministic to be a bool (True: no dropout); "
            f"got {value!r}."
        )


def _check_call_rngs(owner: str, rngs, uses: str) -> None:
    if rngs is not None and not isinstance(rngs, (nnx.Rngs, nnx.RngStream)):
        raise TypeError(
            f"rnnlib.nnx.{owner} expects the call's rngs to be an nnx.Rngs or an "
            f"nnx.RngStream ({uses}); got {_name(type(rngs))}."
        )


def _check_channels(owner: str, in_features: int, shape) -> None:
    if shape[-1] != in_features:
        raise ValueError(
            f"rnnlib.nnx.{owner} was built for in_features={in_features} (channels, the "
            f"last axis); got inputs shaped {tuple(shape)}, with {shape[-1]} channels."
        )


# -- RNG streams ----------------------------------------------------------------------------


def _has_stream(rngs: nnx.Rngs, name: str) -> bool:
    """Whether ``rngs`` gives a stream ``name`` (its own, or the ``default`` one)."""
    try:
        getattr(rngs, name)
    except (AttributeError, KeyError):
        return False
    return True


def _carry_stream():
    """What ``nnx.RNN(cell)`` keeps under ``rngs``: the stream its initial carries come from."""
    if _RNN_MAKES_STREAM:
        return nnx.RngStream(0, tag="carry")
    return nnx.Rngs(0)


def _draw(stream, name: str):
    """A key from ``stream`` (an ``nnx.RngStream``) or from ``stream``'s stream ``name``."""
    if isinstance(stream, nnx.Rngs):
        return getattr(stream, name)()
    return stream()


def _dropout_stream(rngs: nnx.Rngs):
    """The layer's own dropout stream from ``rngs``, as ``nnx.Dropout`` keeps one; ``None``
    when ``rngs`` has neither a ``dropout`` nor a ``default`` stream."""
    try:
        stream = rngs.dropout
    except (AttributeError, KeyError):
        return None
    return stream.fork() if hasattr(stream, "fork") else stream


def _dropout_key(owner: str, stream, rngs):
    """The key masks are drawn from: the call's ``rngs``, else the layer's own stream."""
    if isinstance(rngs, nnx.RngStream):
        return rngs()
    if rngs is not None:
        if _has_stream(rngs, "dropout"):
            return rngs.dropout()
        raise ValueError(
            f"rnnlib.nnx.{owner} drops values (deterministic=False) and draws the masks from "
            "the call's rngs, which have no 'dropout' (or 'default') stream: pass "
            "rngs=nnx.Rngs(dropout=seed)."
        )
    if stream is None:
        raise ValueError(
            f"rnnlib.nnx.{owner} drops values (deterministic=False), but it was built with an "
            "nnx.Rngs that has no 'dropout' (or 'default') stream, and the call gave no rngs. "
            "Build it with nnx.Rngs(params=0, dropout=1), pass rngs=nnx.Rngs(dropout=seed) "
            "to the call, or set deterministic=True (model.eval())."
        )
    return _draw(stream, "dropout")


# -- the layers -----------------------------------------------------------------------------


class Cell(_Params):
    """An rnnlib cell's parameters as NNX state, where ``nnx.RNN`` keeps its cell's.

    ``RNN`` makes one from an rnnlib cell. Make it yourself to share one cell's parameters
    between two layers (``nnx.Bidirectional(RNN(cell), RNN(cell))``, one set of weights).

    Arguments:
        cell: the rnnlib cell (``rnnlib.LSTMCell(features=8)``...).
        in_features: the width (channels) of one step's input.
        layout: ``'nnx'`` (default): NNX's names and shapes for ``LSTMCell``,
            ``OptimizedLSTMCell``, ``GRUCell`` and ``SimpleCell`` (see the module
            docstring), linen's for every other cell; ``'linen'``: linen's for all.
        rngs: an ``nnx.Rngs``; the parameters are drawn from its ``params`` stream with the
            cell's own initializers.

    Its state is the parameters, at the paths of the layout (``cell/dense_i/kernel``...).
    ``linen_params()`` gives them in the tree the rnnlib cell reads.
    """

    def __init__(self, cell: RNNCellBase, in_features: int, *, layout: str = "nnx", rngs):
        _check_cell("Cell", cell)
        in_features = _check_in_features("Cell", in_features)
        _check_rngs("Cell", rngs)
        if layout not in _LAYOUTS:
            raise ValueError(
                f"rnnlib.nnx.Cell expects layout 'nnx' (NNX's tree for the cells NNX has) or "
                f"'linen' (linen's tree); got {layout!r}."
            )
        self.rnnlib_cell = cell
        self.in_features = in_features
        self.nnx_names = layout == "nnx" and type(cell) in _NNX_NAMED
        step_shape = (1,) * cell.num_feature_axes + (in_features,)  # (batch, *signal, channels)
        params = cell.create_params(rngs.params(), step_shape)
        if self.nnx_names:
            params = _with_empty_biases(_to_nnx_names(type(cell), params))
            if _CELLS_KEEP_RNGS:  # as flax 0.10's cells keep theirs
                self.rngs = rngs
        self._fill(params)

    def linen_params(self) -> dict:
        """The parameters in linen's tree, which ``rnnlib.RNN`` runs (a GRU kept in NNX's
        layout gets ``hn/bias`` as zeros)."""
        params = self.tree()
        if self.nnx_names:
            return _to_linen_names(type(self.rnnlib_cell), params)
        return params


class RNN(nnx.Module):
    """Runs an rnnlib cell over a sequence inside a ``flax.nnx`` model, like ``nnx.RNN``.

    Example::

        rnn = RNN(rnnlib.GRUCell(features=8), in_features=3, rngs=nnx.Rngs(0))
        y = rnn(jnp.ones((4, 10, 3)))   # (batch, time, channels) -> (4, 10, 8)
        nnx.state(rnn, nnx.Param)       # cell/dense_i/{kernel, bias}, cell/dense_h/kernel

    Arguments:
        cell: an rnnlib cell (``rnnlib.LSTMCell``, ``GRUCell``, ``MinGRUCell``,
            ``RGLRUCell``, ``RecurrentDropoutCell``...), not an NNX one, or a ``Cell`` that
            already holds one's parameters (then ``in_features`` and ``layout`` are its).
        in_features: the width (channels) of the inputs; needed with an rnnlib cell.
        time_major: whether time is the first axis of inputs and outputs.
        return_carry: also return the final carry, as ``(carry, outputs)``.
        reverse: process each sequence from its last valid step.
        keep_order: with ``reverse``, give the outputs back in the input's order.
        unroll: steps per iteration of the loop.
        plan: how it runs, an ``rnnlib.Plan`` (a loop, or an associative scan); ``None``
            for ``rnnlib.Plan()``.
        layout: the parameter tree, ``'nnx'`` or ``'linen'`` (see ``Cell``).
        deterministic: for a ``RecurrentDropoutCell``: ``True`` for no dropout; the call's
            ``deterministic`` overrides it, and ``model.eval()`` / ``model.train()`` set it.
        rngs: an ``nnx.Rngs``: the parameters come from its ``params`` stream, and a
            ``RecurrentDropoutCell``'s masks from its ``dropout`` stream (forked, as
            ``nnx.Dropout`` does).

    The call takes ``inputs`` ``(*batch, time, *signal, channels)`` and, as ``nnx.RNN``,
    ``initial_carry``, ``seq_lengths`` (ints ``(*batch)``, any number of batch dims),
    ``return_carry``, ``time_major``, ``reverse``, ``keep_order`` and ``rngs`` (an
    ``nnx.Rngs``: its ``dropout`` stream for the masks, its ``carry`` stream for the initial
    carry; an ``nnx.RngStream``, as ``nnx.Bidirectional`` passes: the initial carry's), plus
    ``deterministic`` and ``resets`` (bools ``(*batch, time)``: the carry starts afresh
    before each flagged step, as ``rnnlib.RNN``'s; ``nnx.RNN`` has none). The initial carry
    is the cell's ``initialize_carry``, with a key from the carry stream the layer keeps
    under ``rngs``, as ``nnx.RNN``'s. A sequence of length 0 gives back its initial carry
    (``nnx.RNN``: the carry after the padded steps). ``config`` is the ``rnnlib.RNN`` the
    layer runs.
    """

    def __init__(
        self,
        cell,
        in_features: int | None = None,
        *,
        time_major: bool = False,
        return_carry: bool = False,
        reverse: bool = False,
        keep_order: bool = False,
        unroll: int = 1,
        plan: Plan | None = None,
        layout: str = "nnx",
        deterministic: bool = False,
        rngs,
    ):
        _check_rngs("RNN", rngs)
        _check_deterministic("RNN", deterministic)
        if isinstance(cell, Cell):
            if in_features is not None and in_features != cell.in_features:
                raise ValueError(
                    f"rnnlib.nnx.RNN got a Cell built for in_features={cell.in_features} and "
                    f"in_features={in_features!r}; leave in_features out with a Cell."
                )
        else:
            _check_cell("RNN", cell)
            if in_features is None:
                raise TypeError(
                    "rnnlib.nnx.RNN needs in_features, the width (channels) of its inputs, to "
                    f"create {type(cell).__name__}'s parameters: RNN(cell, in_features, "
                    "rngs=rngs), as nnx.LSTMCell(in_features, features, rngs=rngs) takes it."
                )
            cell = Cell(cell, in_features, layout=layout, rngs=rngs)
        self.config = rnn_module.RNN(
            cell.rnnlib_cell,
            time_major=time_major,
            return_carry=return_carry,
            reverse=reverse,
            keep_order=keep_order,
            unroll=unroll,
            plan=Plan() if plan is None else plan,
        )
        self.cell = cell
        self.deterministic = deterministic
        self.rngs = _carry_stream()
        if isinstance(cell.rnnlib_cell, RecurrentDropoutCell):
            self.dropout_rngs = _dropout_stream(rngs)

    def __call__(
        self,
        inputs,
        *,
        initial_carry=None,
        seq_lengths=None,
        return_carry: bool | None = None,
        time_major: bool | None = None,
        reverse: bool | None = None,
        keep_order: bool | None = None,
        resets=None,
        deterministic: bool | None = None,
        rngs=None,
    ):
        _check_call_rngs("RNN", rngs, "a 'dropout' stream for the masks, the carry's stream")
        inputs = jnp.asarray(inputs)
        config, cell = self.config, self.cell.rnnlib_cell
        major = config.time_major if time_major is None else time_major
        _, t = rnn_module.split_axes(cell, inputs.shape, major, owner=config)
        _check_channels("RNN", self.cell.in_features, inputs.shape)
        if isinstance(cell, RecurrentDropoutCell):
            deterministic = self.deterministic if deterministic is None else deterministic
            _check_deterministic("RNN", deterministic)
            if deterministic:
                cell = cell.with_masks()
            else:
                own_rngs = rngs if isinstance(rngs, nnx.Rngs) else None  # a stream: the carry's
                key = _dropout_key("RNN", self.dropout_rngs, own_rngs)
                step_shape = inputs.shape[:t] + inputs.shape[t + 1 :]
                cell = cell.with_masks(*cell.draw_masks(key, step_shape))
            config = dataclasses.replace(config, cell=cell)
        carry_stream = self.rngs
        if isinstance(rngs, nnx.RngStream):
            carry_stream = rngs
        elif isinstance(rngs, nnx.Rngs) and _has_stream(rngs, "carry"):
            carry_stream = rngs.carry
        init_key = None if initial_carry is not None else _draw(carry_stream, "carry")
        return config.apply(
            {"params": {"cell": self.cell.linen_params()}},
            inputs,
            initial_carry=initial_carry,
            init_key=init_key,
            seq_lengths=seq_lengths,
            return_carry=return_carry,
            time_major=time_major,
            reverse=reverse,
            keep_order=keep_order,
            resets=resets,
        )


class StackedRNN(nnx.Module):
    """``rnnlib.StackedRNN`` inside a ``flax.nnx`` model: layers with dropout between them.

    Example::

        stack = StackedRNN(
            (rnnlib.RNN(rnnlib.LSTMCell(8)), rnnlib.RNN(rnnlib.LSTMCell(8))),
            in_features=3,
            dropout_rate=0.1,
            rngs=nnx.Rngs(params=0, dropout=1),
        )
        y = stack(x)            # (batch, time, 8), dropout on; stack.eval() turns it off

    Arguments:
        layers: a non-empty tuple of ``rnnlib.RNN`` and ``rnnlib.Bidirectional`` (rnnlib's
            configuration, not NNX modules); layer ``i``'s parameters live under
            ``layers_i``, in linen's tree (NNX has no stacked layer to match).
        in_features: the width (channels) of the inputs.
        dropout_rate: probability of dropping each value between two layers, in ``[0, 1)``.
        residual: ``True``, ``False`` or one bool per layer: add each layer's input to its
            output.
        deterministic: ``True`` for no dropout; the call's ``deterministic`` overrides it,
            and ``model.eval()`` / ``model.train()`` set it.
        rngs: an ``nnx.Rngs``: the parameters come from its ``params`` stream, the dropout
            masks from its ``dropout`` stream (forked, as ``nnx.Dropout`` does).

    The call takes ``inputs`` ``(*batch, time, channels)``, ``deterministic``, ``rngs``
    (an ``nnx.Rngs`` or ``nnx.RngStream`` for this call's masks), ``seq_lengths``,
    ``resets``, ``initial_carry`` (one per layer) and ``return_carry``, as
    ``rnnlib.StackedRNN``'s ``apply``.
    """

    def __init__(
        self,
        layers,
        in_features: int,
        *,
        dropout_rate: float = 0.0,
        residual: bool | tuple[bool, ...] = False,
        deterministic: bool = False,
        rngs,
    ):
        _check_rngs("StackedRNN", rngs)
        _check_deterministic("StackedRNN", deterministic)
        in_features = _check_in_features("StackedRNN", in_features)
        layers = tuple(layers) if isinstance(layers, list) else layers
        for index, layer in enumerate(layers if isinstance(layers, tuple) else ()):
            if not isinstance(layer, (rnn_module.RNN, Bidirectional)):
                raise TypeError(
                    "rnnlib.nnx.StackedRNN expects rnnlib.RNN or rnnlib.Bidirectional layers "
                    f"(rnnlib's configuration); layer {index} is {_name(type(layer))}. Write "
                    "rnnlib.RNN(rnnlib.LSTMCell(features)) there: the stack creates the "
                    "parameters."
                )
        self.config = stacked_module.StackedRNN(layers, dropout_rate, residual)
        first = layers[0] if isinstance(layers[0], rnn_module.RNN) else layers[0].forward_rnn
        axes = first.cell.num_feature_axes
        self.in_features = in_features
        shape = jax.ShapeDtypeStruct((1, 1) + (1,) * (axes - 1) + (in_features,), jnp.float32)
        params = self.config._init(rngs.params(), shape)
        self.layer_names = tuple(params)
        for name, tree in params.items():
            setattr(self, name, _Params(tree))
        self.deterministic = deterministic
        if self.config._drops():
            self.dropout_rngs = _dropout_stream(rngs)

    def __call__(self, inputs, *, deterministic: bool | None = None, rngs=None, **kwargs):
        _check_call_rngs("StackedRNN", rngs, "for this call's dropout masks")
        inputs = jnp.asarray(inputs)
        _check_channels("StackedRNN", self.in_features, inputs.shape)
        deterministic = self.deterministic if deterministic is None else deterministic
        _check_deterministic("StackedRNN", deterministic)
        drop_rngs = None
        if self.config._drops() and not deterministic:
            drop_rngs = {"dropout": _dropout_key("StackedRNN", self.dropout_rngs, rngs)}
        return self.config.apply(
            {"params": {name: getattr(self, name).tree() for name in self.layer_names}},
            inputs,
            deterministic=deterministic or drop_rngs is None,
            rngs=drop_rngs,
            **kwargs,
        )


def _show_signature(layer: type) -> None:
    """Gives ``layer`` its ``__init__``'s signature, which ``inspect.signature``, ``help``
    and the API page would otherwise read from NNX's metaclass as ``(*args, **kwargs)``."""
    parameters = list(inspect.signature(layer.__init__).parameters.values())[1:]
    layer.__signature__ = inspect.Signature(parameters)


for _layer in (Cell, RNN, StackedRNN):
    _show_signature(_layer)
del _layer
