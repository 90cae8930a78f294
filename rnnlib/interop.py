r"""Exact conversion between rnnlib and Flax NNX: ``from_nnx`` and ``to_nnx``.

rnnlib keeps its parameters in plain dicts laid out like flax.linen's, so **linen needs
no conversion**: ``variables`` from ``flax.linen.LSTMCell(...).init(...)`` apply to
``rnnlib.LSTMCell(...)`` unchanged, and the other way round. Flax NNX stores its
parameters inside the module objects, under different names and shapes; this module
converts between the two, exactly::

    from rnnlib import interop

    module, variables = interop.from_nnx(nnx_rnn)    # NNX -> rnnlib (linen layout)
    nnx_rnn = interop.to_nnx(module, variables)      # rnnlib (or linen) -> NNX

Both directions accept ``LSTMCell``, ``OptimizedLSTMCell``, ``GRUCell`` and
``SimpleCell``, an ``RNN`` around one of them, and a ``Bidirectional`` of two such
``RNN``\ s. The configuration travels too (``features``/``hidden_features``,
``gate_fn``, ``activation_fn``, ``dtype``, ``param_dtype``, ``carry_init``, SimpleCell's
``residual``; RNN's ``time_major``, ``return_carry``, ``reverse``, ``keep_order`` and
``unroll``; Bidirectional's ``merge_fn``, ``time_major`` and ``return_carry``), so given
the same inputs and initial carry the two modules compute the same numbers. Arrays are
moved, split and concatenated, never recomputed, so a round trip gives back bitwise the
same parameters.

Layout differences
------------------
Below, ``I`` is the input width (``in_features``) and ``H`` the cell width
(rnnlib's ``features``, NNX's ``hidden_features``). rnnlib's names are linen's.

``LSTMCell``
    Eight separate dense layers in both, with the same names except one: the input
    side of the forget gate is ``if`` in rnnlib/linen and ``if_`` in NNX (``if`` is a
    Python keyword, so it cannot be an attribute name). Input kernels ``ii, if_, ig,
    io`` are ``(I, H)`` without bias; hidden layers ``hi, hf, hg, ho`` are ``(H, H)``
    with a ``(H,)`` bias, exactly as in linen.

``OptimizedLSTMCell``
    NNX's docstring calls its parameters compatible with ``LSTMCell``, but they are
    not: NNX fuses the gates into two layers, ``dense_i`` with kernel ``(I, 4H)`` and
    no bias, and ``dense_h`` with kernel ``(H, 4H)`` and bias ``(4H,)``. The four
    column blocks of width ``H`` are the gates in the order ``i, f, g, o``, and all
    the bias sits on the hidden side. rnnlib (like linen) keeps the eight
    ``LSTMCell`` layers for both classes, so the conversion splits the fused arrays
    into ``ii, if, ig, io`` / ``hi, hf, hg, ho`` and concatenates them back. One
    consequence: the same rnnlib variables convert to either NNX class.

``GRUCell``
    NNX fuses the gates too, in the order ``r, z, n``: ``dense_i`` has kernel
    ``(I, 3H)`` and bias ``(3H,)`` (the biases of ``ir, iz, in``), and ``dense_h`` has
    kernel ``(H, 3H)`` and **no bias**. So NNX computes
    ``n = tanh(x W_in + b_in + r * (h W_hn))``, where linen and rnnlib compute
    ``n = tanh(x W_in + b_in + r * (h W_hn + b_hn))``. The bias ``b_hn`` is multiplied
    by the reset gate ``r``, which changes from step to step, so it cannot be folded
    into ``b_in`` or anywhere else. ``from_nnx`` returns ``hn/bias`` as zeros (exact);
    ``to_nnx`` converts a GRU whose ``hn/bias`` is exactly zero and raises a
    ``ValueError`` for any other.

``SimpleCell``
    Same parameters, different names: rnnlib's ``i`` (kernel ``(I, H)``, bias
    ``(H,)``) is NNX's ``dense_i``, and rnnlib's ``h`` (kernel ``(H, H)``, no bias)
    is NNX's ``dense_h``. NNX's ``SimpleCell`` defaults to ``dtype=float32`` where
    rnnlib's defaults to ``None`` (promote); the converted module keeps whichever
    was set.

``RNN`` and ``Bidirectional``
    The nesting names agree: an RNN holds its cell under ``cell``, and a
    Bidirectional holds ``forward_rnn`` and ``backward_rnn``. NNX modules also carry
    an RNG stream (``rngs``) used only to draw the initial carry; it is not a
    parameter and is not converted. When both directions share one cell (the same
    NNX ``RNN`` object twice, or two ``RNN``\ s around one cell object), NNX stores
    the cell once and rnnlib stores its parameters under ``forward_rnn`` only; the
    conversion keeps the sharing in both directions.

The carry has the same structure in both: ``(c, h)`` for the LSTMs, a single array
``h`` for GRU and SimpleCell.

What is not converted, and why
------------------------------
- ``MGUCell`` and ``ConvLSTMCell``: NNX has neither (``TypeError``). flax.linen has
  both, with rnnlib's layout, so use ``flax.linen.MGUCell`` / ``flax.linen.ConvLSTMCell``
  with rnnlib's variables unchanged (wrapped in ``flax.nnx.bridge.ToNNX`` if the rest
  of the model is NNX), or keep the cell in rnnlib.
- A GRU whose ``hn/bias`` is not zero (``ValueError``, see above).
- NNX configurations rnnlib cannot reproduce (``ValueError``): a ``promote_dtype``
  other than NNX's default, and an ``RNN.state_axes`` other than the default
  ``{...: Carry}`` (other values scan parameters over time).
- Subclasses of the supported classes, whose ``__call__`` may differ, and anything
  else (``TypeError``).
- Initializers (``kernel_init`` and friends) are not converted: flax >= 0.11 does not
  keep them on the module, and the parameters they made are converted instead (the
  rnnlib twin gets rnnlib's defaults; ``to_nnx`` builds the NNX module with zeros). Metadata on NNX
  ``Param``\ s (sharding annotations and the like) is dropped. Carry RNGs are not
  converted: with a random ``carry_init`` the two sides draw different initial
  carries, so pass ``initial_carry`` to compare them.

Two behaviours differ even with identical parameters, both in ``RNN`` with
``seq_lengths`` and ``return_carry``: a sequence of length 0 gets its initial carry back
from rnnlib but the carry after the last (padded) step from NNX, which indexes step
``length - 1 = -1``; and NNX's carry selection handles one batch dim only (it raises a
broadcasting error for more), where rnnlib allows any number.

Supported Flax versions: flax.nnx 0.10.2 (the lowest version rnnlib is tested with)
through the pinned one; the layouts above are the same in 0.10.2 and 0.12.8. Older NNX
releases are not supported.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

try:
    from flax import nnx
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError(
        "rnnlib.interop converts to and from flax.nnx, so it needs flax: pip install flax "
        "(or install rnnlib with its extra: pip install "
        "'rnnlib[flax] @ git+https://github.com/carry-on-book/carry-on')."
    ) from error

from rnnlib.bidirectional import Bidirectional, concatenate
from rnnlib.cell_base import RNNCellBase
from rnnlib.conv_lstm import ConvLSTMCell
from rnnlib.gru import GRUCell, MGUCell
from rnnlib.lstm import LSTMCell, OptimizedLSTMCell
from rnnlib.module import Module, check_params, describe, params_of
from rnnlib.rnn import RNN
from rnnlib.simple import SimpleCell

__all__ = ["from_nnx", "to_nnx"]

_LSTM_INPUT = ("ii", "if", "ig", "io")
_LSTM_HIDDEN = ("hi", "hf", "hg", "ho")
_GRU_INPUT = ("ir", "iz", "in")
_GRU_HIDDEN = ("hr", "hz", "hn")

_NNX_CELLS = {
    nnx.LSTMCell: LSTMCell,
    nnx.OptimizedLSTMCell: OptimizedLSTMCell,
    nnx.GRUCell: GRUCell,
    nnx.SimpleCell: SimpleCell,
}
_RNNLIB_CELLS = {rnnlib_cell: nnx_cell for nnx_cell, rnnlib_cell in _NNX_CELLS.items()}
_SUPPORTED = "LSTMCell, OptimizedLSTMCell, GRUCell, SimpleCell, or an RNN or Bidirectional of them"


def _nnx_name(name: str) -> str:
    """NNX's attribute name for a linen LSTM layer: ``if`` is a keyword, so NNX says ``if_``."""
    return "if_" if name == "if" else name


# -- NNX -> rnnlib ---------------------------------------------------------------------------


def from_nnx(nnx_module) -> tuple[Module, dict]:
    """Converts a Flax NNX recurrent module into its rnnlib twin and linen-layout variables.

    Example::

        cell = flax.nnx.GRUCell(3, 4, rngs=flax.nnx.Rngs(0))
        module, variables = from_nnx(flax.nnx.RNN(cell))
        y = module.apply(variables, x)      # flax.nnx.RNN(cell)(x), up to rounding

    Arguments:
        nnx_module: an ``nnx.LSTMCell``, ``nnx.OptimizedLSTMCell``, ``nnx.GRUCell`` or
            ``nnx.SimpleCell``, an ``nnx.RNN`` around one, or an ``nnx.Bidirectional`` of
            two such ``nnx.RNN``\\ s.

    Returns:
        ``(module, variables)``: the rnnlib module with the same configuration, and
        ``{'params': {...}}`` laid out as flax.linen lays it out (see the module
        docstring for how each NNX layout maps onto it).

    Raises:
        TypeError: for any other module (a linen or rnnlib module needs no conversion).
        ValueError: for NNX configurations rnnlib cannot reproduce (a custom
            ``promote_dtype``, a non-default ``RNN.state_axes``) or parameters of the
            wrong shape.
    """
    kind = type(nnx_module)
    if kind is nnx.Bidirectional:
        module, params = _bidirectional_from_nnx(nnx_module)
    elif kind is nnx.RNN:
        module, params = _rnn_from_nnx(nnx_module, "params")
    elif kind in _NNX_CELLS:
        module, params = _cell_from_nnx(nnx_module, "params")
    else:
        raise TypeError(_not_nnx_message(nnx_module))
    return module, {"params": params}


def _not_nnx_message(obj) -> str:
    name = f"{type(obj).__module__}.{type(obj).__qualname__}"
    message = f"from_nnx expects a flax.nnx {_SUPPORTED}; got {name}."
    if isinstance(obj, Module):
        message += " That is already an rnnlib module; to_nnx converts in the other direction."
    elif type(obj).__module__.startswith("flax.linen"):
        message += (
            " flax.linen modules need no conversion: their variables are rnnlib's, so build "
            "the rnnlib module with the same configuration and apply the linen variables."
        )
    elif isinstance(obj, nnx.Module) and any(isinstance(obj, c) for c in (*_NNX_CELLS, nnx.RNN)):
        message += (
            " Subclasses are refused because their __call__ may compute something else; "
            "convert an instance of the flax.nnx class itself."
        )
    return message


def _bidirectional_from_nnx(bi) -> tuple[Bidirectional, dict]:
    for name in ("forward_rnn", "backward_rnn"):
        rnn = getattr(bi, name)
        if type(rnn) is not nnx.RNN:
            raise TypeError(
                f"from_nnx converts an nnx.Bidirectional whose directions are nnx.RNN modules; "
                f"its {name} is {type(rnn).__module__}.{type(rnn).__qualname__}."
            )
    forward, params_forward = _rnn_from_nnx(bi.forward_rnn, "params/forward_rnn")
    params = {"forward_rnn": params_forward}
    if bi.backward_rnn is bi.forward_rnn:
        backward = forward
    elif bi.backward_rnn.cell is bi.forward_rnn.cell:
        # Two RNNs around one NNX cell share it; rnnlib shares when the cell object is shared.
        backward = _rnn_config_from_nnx(bi.backward_rnn, forward.cell)
    else:
        backward, params["backward_rnn"] = _rnn_from_nnx(bi.backward_rnn, "params/backward_rnn")
    merge_fn = bi.merge_fn
    if merge_fn is _nnx_default(nnx.Bidirectional, "merge_fn"):
        merge_fn = concatenate
    module = Bidirectional(
        forward_rnn=forward,
        backward_rnn=backward,
        merge_fn=merge_fn,
        time_major=bi.time_major,
        return_carry=bi.return_carry,
    )
    return module, params


def _rnn_from_nnx(rnn, path: str) -> tuple[RNN, dict]:
    if type(rnn.cell) not in _NNX_CELLS:
        raise TypeError(
            f"from_nnx converts an nnx.RNN around an nnx LSTMCell, OptimizedLSTMCell, GRUCell "
            f"or SimpleCell; the RNN at {path} wraps "
            f"{type(rnn.cell).__module__}.{type(rnn.cell).__qualname__}."
        )
    cell, params = _cell_from_nnx(rnn.cell, f"{path}/cell")
    return _rnn_config_from_nnx(rnn, cell, path), {"cell": params}


def _rnn_config_from_nnx(rnn, cell: RNNCellBase, path: str = "params") -> RNN:
    state_axes = getattr(rnn, "state_axes", None)  # flax >= 0.11 only
    if state_axes is not None:
        default = nnx.StateAxes({...: nnx.transforms.iteration.Carry})
        if (tuple(state_axes.filters), tuple(state_axes.axes)) != (default.filters, default.axes):
            raise ValueError(
                f"The nnx.RNN at {path} has state_axes={state_axes}; rnnlib's RNN uses the same "
                f"parameters at every step, which is NNX's default {default}. Other state_axes "
                "scan parameters or state over time, which rnnlib cannot reproduce."
            )
    return RNN(
        cell,
        time_major=rnn.time_major,
        return_carry=rnn.return_carry,
        reverse=rnn.reverse,
        keep_order=rnn.keep_order,
        unroll=rnn.unroll,
    )


def _cell_from_nnx(cell, path: str) -> tuple[RNNCellBase, dict]:
    kind = type(cell)
    promote = getattr(cell, "promote_dtype", None)  # flax >= 0.11 only
    if promote is not None and promote is not _nnx_default(kind, "promote_dtype"):
        raise ValueError(
            f"The nnx.{kind.__name__} at {path} has a custom promote_dtype "
            f"({getattr(promote, '__name__', promote)!r}); rnnlib promotes inputs, parameters and "
            "carry the way NNX's default does and cannot run another rule."
        )
    config = dict(
        features=cell.hidden_features,
        dtype=cell.dtype,
        param_dtype=cell.param_dtype,
        carry_init=cell.carry_init or jax.nn.initializers.zeros,
    )
    if kind is nnx.SimpleCell:
        config.update(activation_fn=cell.activation_fn, residual=cell.residual)
    else:
        config.update(gate_fn=cell.gate_fn, activation_fn=cell.activation_fn)
    module = _NNX_CELLS[kind](**config)

    H = cell.hidden_features
    if kind is nnx.LSTMCell:
        params = {
            name: {"kernel": _read(cell, _nnx_name(name), "kernel", path)} for name in _LSTM_INPUT
        }
        for name in _LSTM_HIDDEN:
            params[name] = {
                "kernel": _read(cell, name, "kernel", path),
                "bias": _read(cell, name, "bias", path),
            }
    elif kind is nnx.OptimizedLSTMCell:
        # dense_i: (I, 4H), no bias; dense_h: (H, 4H) + (4H,). Column blocks: i, f, g, o.
        input_kernels = _split(
            _read(cell, "dense_i", "kernel", path), 4, H, f"{path}/dense_i/kernel"
        )
        hidden_kernels = _split(
            _read(cell, "dense_h", "kernel", path), 4, H, f"{path}/dense_h/kernel"
        )
        biases = _split(_read(cell, "dense_h", "bias", path), 4, H, f"{path}/dense_h/bias")
        params = {name: {"kernel": k} for name, k in zip(_LSTM_INPUT, input_kernels)}
        for name, k, b in zip(_LSTM_HIDDEN, hidden_kernels, biases):
            params[name] = {"kernel": k, "bias": b}
    elif kind is nnx.GRUCell:
        # dense_i: (I, 3H) + (3H,); dense_h: (H, 3H), no bias. Column blocks: r, z, n.
        input_kernels = _split(
            _read(cell, "dense_i", "kernel", path), 3, H, f"{path}/dense_i/kernel"
        )
        input_biases = _split(_read(cell, "dense_i", "bias", path), 3, H, f"{path}/dense_i/bias")
        hidden_kernels = _split(
            _read(cell, "dense_h", "kernel", path), 3, H, f"{path}/dense_h/kernel"
        )
        params = {
            name: {"kernel": k, "bias": b}
            for name, k, b in zip(_GRU_INPUT, input_kernels, input_biases)
        }
        params.update({name: {"kernel": k} for name, k in zip(_GRU_HIDDEN, hidden_kernels)})
        # NNX has no b_hn; a zero bias computes exactly what NNX computes.
        params["hn"]["bias"] = jnp.zeros((H,), input_biases[2].dtype)
    else:  # nnx.SimpleCell
        params = {
            "i": {
                "kernel": _read(cell, "dense_i", "kernel", path),
                "bias": _read(cell, "dense_i", "bias", path),
            },
            "h": {"kernel": _read(cell, "dense_h", "kernel", path)},
        }
    in_features = _first_kernel(module, params).shape[0]
    module.check_variables(params, (in_features,), path)
    return module, params


def _nnx_default(cls, argument: str):
    """The default of ``argument`` in ``cls.__init__``: what NNX uses when none is given."""
    parameter = inspect.signature(cls.__init__).parameters.get(argument)
    return None if parameter is None else parameter.default


def _read(cell, layer: str, name: str, path: str):
    """The array of ``cell.<layer>.<name>``; raises if NNX's layer has no such parameter."""
    variable = getattr(getattr(cell, layer, None), name, None)
    value = None
    if variable is not None:
        value = variable.get_value() if hasattr(variable, "get_value") else variable.value
    if value is None:
        raise ValueError(
            f"The nnx.{type(cell).__name__} at {path} has no {layer}.{name}, which every "
            f"nnx.{type(cell).__name__} has; was the module modified after construction?"
        )
    return value


def _split(array, parts: int, features: int, where: str):
    """Splits the last axis of a fused NNX array into ``parts`` blocks of ``features``."""
    if array.shape[-1] != parts * features:
        raise ValueError(
            f"{where} should have {parts} x hidden_features = {parts * features} columns (one "
            f"block of {features} per gate); it has shape {tuple(array.shape)}."
        )
    return jnp.split(array, parts, axis=-1)


# -- rnnlib -> NNX ---------------------------------------------------------------------------


def to_nnx(module: Module, variables: Mapping[str, Any]):
    """Builds the Flax NNX module equivalent to an rnnlib module with ``variables``.

    The NNX module is constructed with ``rngs=nnx.Rngs(0)`` and the same configuration
    (its initializers set to zeros, since nothing they make survives), then every
    parameter is overwritten with the (split, renamed or concatenated) arrays from
    ``variables``. A non-default ``carry_init`` goes to the NNX cell's constructor,
    because ``nnx.RNN`` only uses the cell's own; flax >= 0.11 warns about that. Since rnnlib's
    variables are linen's, this also converts flax.linen variables: build the matching rnnlib
    module and pass them in. The two modules compute the same function with the same
    parameters, equal up to rounding, not bit for bit: NNX sums a cell's matmuls in its own
    order (for an ``LSTMCell`` the outputs differed by about 5e-8 in float32; the tests allow
    ``4 * eps * sqrt(terms) * scale``, the book's rounding rule).
    Example::

        module = rnnlib.RNN(rnnlib.LSTMCell(features=4))
        variables = module.init(jax.random.key(0), x)
        nnx_rnn = to_nnx(module, variables)   # nnx_rnn(x) ~ module.apply(variables, x)

    Arguments:
        module: an rnnlib ``LSTMCell``, ``OptimizedLSTMCell``, ``GRUCell`` or
            ``SimpleCell``, an ``RNN`` around one, or a ``Bidirectional`` of two ``RNN``\\ s.
        variables: ``{'params': {...}}`` for ``module``, as ``module.init`` returns.

    Returns:
        An NNX module of the matching class (``nnx.LSTMCell`` and so on, ``nnx.RNN`` or
        ``nnx.Bidirectional``).

    Raises:
        TypeError: for ``MGUCell`` and ``ConvLSTMCell`` (NNX has neither; the message
            says what to use instead) and for anything that is not a supported rnnlib
            module, or variables that are not a dict.
        ValueError: for a GRU whose ``hn/bias`` is not zero (NNX's GRU has no such
            bias), and for variables that do not fit ``module``.
    """
    if not isinstance(module, Module):
        name = f"{type(module).__module__}.{type(module).__qualname__}"
        hint = (
            " That is an NNX module; from_nnx converts in the other direction."
            if isinstance(module, nnx.Module)
            else ""
        )
        raise TypeError(f"to_nnx expects an rnnlib {_SUPPORTED}; got {name}.{hint}")
    params = params_of(variables, module)
    rngs = nnx.Rngs(0)
    if isinstance(module, Bidirectional):
        return _bidirectional_to_nnx(module, params, rngs)
    if isinstance(module, RNN):
        return _rnn_to_nnx(module, params, "params", rngs)
    return _cell_to_nnx(module, params, "params", rngs)


def _bidirectional_to_nnx(bi: Bidirectional, params, rngs):
    for name in ("forward_rnn", "backward_rnn"):
        rnn = getattr(bi, name)
        if type(rnn) is not RNN:
            raise TypeError(
                f"to_nnx converts a Bidirectional whose directions are rnnlib RNNs; its {name} "
                f"is {type(rnn).__module__}.{type(rnn).__qualname__}."
            )
        _nnx_class(rnn.cell, f"params/{name}/cell")
    expected = (
        {"forward_rnn": {}} if bi.shares_parameters else {"forward_rnn": {}, "backward_rnn": {}}
    )
    check_params(bi, params, expected)
    forward = _rnn_to_nnx(bi.forward_rnn, params["forward_rnn"], "params/forward_rnn", rngs)
    if bi.backward_rnn is bi.forward_rnn:
        backward = forward
    elif bi.shares_parameters:
        backward = _nnx_rnn(bi.backward_rnn, forward.cell)
    else:
        backward = _rnn_to_nnx(bi.backward_rnn, params["backward_rnn"], "params/backward_rnn", rngs)
    extra = {} if bi.merge_fn is concatenate else {"merge_fn": bi.merge_fn}
    return nnx.Bidirectional(
        forward, backward, time_major=bi.time_major, return_carry=bi.return_carry, **extra
    )


def _rnn_to_nnx(rnn: RNN, params, path: str, rngs):
    _nnx_class(rnn.cell, f"{path}/cell")
    check_params(rnn, params, {"cell": {}}, path)
    return _nnx_rnn(rnn, _cell_to_nnx(rnn.cell, params["cell"], f"{path}/cell", rngs))


def _nnx_rnn(rnn: RNN, nnx_cell):
    return nnx.RNN(
        nnx_cell,
        time_major=rnn.time_major,
        return_carry=rnn.return_carry,
        reverse=rnn.reverse,
        keep_order=rnn.keep_order,
        unroll=rnn.unroll,
    )


def _nnx_class(cell, path: str):
    """The NNX class matching an rnnlib cell; raises for cells NNX does not have."""
    kind = type(cell)
    if kind is MGUCell or kind is ConvLSTMCell:
        raise TypeError(
            f"flax.nnx has no {kind.__name__}, so to_nnx cannot convert {describe(cell)}. "
            f"flax.linen.{kind.__name__} has exactly rnnlib's parameter layout: use it with "
            "these variables unchanged (wrap it in flax.nnx.bridge.ToNNX inside an NNX model), "
            "or keep this cell in rnnlib."
        )
    if kind not in _RNNLIB_CELLS:
        raise TypeError(
            f"to_nnx converts rnnlib's LSTMCell, OptimizedLSTMCell, GRUCell and SimpleCell "
            f"(exactly these classes, not subclasses); the cell at {path} is "
            f"{kind.__module__}.{kind.__qualname__}."
        )
    return _RNNLIB_CELLS[kind]


def _cell_to_nnx(cell, params, path: str, rngs):
    kind, nnx_class = type(cell), _nnx_class(cell, path)
    in_features = _in_features(cell, params, path)
    cell.check_variables(params, (in_features,), path)

    if kind is GRUCell:
        b_hn = np.asarray(params["hn"]["bias"])
        if np.any(b_hn != 0):
            raise ValueError(
                f"{path}/hn/bias is non-zero (max |b| = {float(np.max(np.abs(b_hn))):.6g}), but "
                "flax.nnx.GRUCell has no bias on the hidden side of the candidate gate: it "
                "computes n = tanh(x W_in + b_in + r * (h W_hn)), without b_hn. Because b_hn is "
                "multiplied by the reset gate r, it cannot be folded into b_in. Keep this GRU in "
                "rnnlib or flax.linen (whose GRUCell has the bias), or train it with hn's bias "
                "held at zero."
            )

    # Every parameter is overwritten below, so NNX's initializers only need to make arrays
    # of the right shape: zeros are cheap, and unlike NNX's orthogonal default they work
    # for every param_dtype (a QR in bfloat16 fails on CPU).
    zeros = jax.nn.initializers.zeros
    config = dict(
        dtype=cell.dtype,
        param_dtype=cell.param_dtype,
        kernel_init=zeros,
        recurrent_kernel_init=zeros,
        bias_init=zeros,
        rngs=rngs,
    )
    if cell.carry_init is not jax.nn.initializers.zeros:
        config["carry_init"] = cell.carry_init
    if kind is SimpleCell:
        config.update(activation_fn=cell.activation_fn, residual=cell.residual)
    else:
        config.update(gate_fn=cell.gate_fn, activation_fn=cell.activation_fn)
    out = nnx_class(in_features, cell.features, **config)

    if kind is LSTMCell:
        for name in _LSTM_INPUT:
            _write(getattr(out, _nnx_name(name)).kernel, params[name]["kernel"])
        for name in _LSTM_HIDDEN:
            _write(getattr(out, name).kernel, params[name]["kernel"])
            _write(getattr(out, name).bias, params[name]["bias"])
    elif kind is OptimizedLSTMCell:
        _write(out.dense_i.kernel, _concat(params, _LSTM_INPUT, "kernel"))
        _write(out.dense_h.kernel, _concat(params, _LSTM_HIDDEN, "kernel"))
        _write(out.dense_h.bias, _concat(params, _LSTM_HIDDEN, "bias"))
    elif kind is GRUCell:
        _write(out.dense_i.kernel, _concat(params, _GRU_INPUT, "kernel"))
        _write(out.dense_i.bias, _concat(params, _GRU_INPUT, "bias"))
        _write(out.dense_h.kernel, _concat(params, _GRU_HIDDEN, "kernel"))
    else:  # SimpleCell
        _write(out.dense_i.kernel, params["i"]["kernel"])
        _write(out.dense_i.bias, params["i"]["bias"])
        _write(out.dense_h.kernel, params["h"]["kernel"])
    return out


def _first_kernel(cell, params):
    return params[_first_kernel_name(cell)]["kernel"]


def _first_kernel_name(cell) -> str:
    """The layer whose kernel is ``(in_features, features)``: where the input width is read."""
    return {SimpleCell: "i", GRUCell: "ir"}.get(type(cell), "ii")


def _in_features(cell, params, path: str) -> int:
    name = _first_kernel_name(cell)
    layer = params.get(name) if isinstance(params, Mapping) else None
    kernel = layer.get("kernel") if isinstance(layer, Mapping) else None
    if kernel is None:
        cell.check_variables(params, (1,), path)  # names the missing entry (any width does)
    if np.ndim(kernel) != 2:
        raise ValueError(
            f"{describe(cell)} needs {path}/{name}/kernel shaped (in_features, {cell.features}); "
            f"got {None if kernel is None else tuple(np.shape(kernel))}."
        )
    return int(np.shape(kernel)[0])


def _concat(params, names, leaf: str):
    return jnp.concatenate([jnp.asarray(params[n][leaf]) for n in names], axis=-1)


def _write(variable, value) -> None:
    value = jnp.asarray(value)
    if hasattr(variable, "set_value"):
        variable.set_value(value)
    else:  # flax < 0.11
        variable.value = value
