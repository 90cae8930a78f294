"""PyTorch ``nn.LSTM`` and ``nn.GRU`` weights as flax.linen (and rnnlib) variables, and back.

Example::

    lstm = torch.nn.LSTM(3, 8, num_layers=2, bidirectional=True, batch_first=True)
    state = {name: tensor.numpy() for name, tensor in lstm.state_dict().items()}
    layers = lstm_from_torch(state)          # one variables dict per layer
    layer = nn.Bidirectional(nn.RNN(nn.LSTMCell(8)), nn.RNN(nn.LSTMCell(8)))
    y = layer.apply(layers[0], x)            # x: (batch, time, 3) -> (batch, time, 16)
    stack = stack_layers(layers)             # {'params': {'layers_0': ..., 'layers_1': ...}}
    lstm.load_state_dict({k: torch.from_numpy(v) for k, v in lstm_to_torch(stack).items()})

This module needs neither torch nor jax: a state dict is any mapping of names to arrays
(``numpy.asarray`` of a CPU tensor is one), and the variables come back as numpy arrays.

Layouts, with ``H`` the hidden size, ``F`` a layer's input width (``input_size`` for layer 0,
``H`` or ``2 * H`` with ``bidirectional`` above it) and ``G`` the number of gates (4 for the
LSTM, in PyTorch's order ``i, f, g, o``; 3 for the GRU, ``r, z, n``):

- PyTorch: ``weight_ih_l{k}`` ``(G * H, F)``, ``weight_hh_l{k}`` ``(G * H, H)``, ``bias_ih_l{k}``
  and ``bias_hh_l{k}`` ``(G * H,)``, and the same names ending in ``_reverse`` for the
  backward direction of a ``bidirectional`` module.
- Flax: one ``Dense`` per gate and side in the cell, its ``kernel`` the transposed block of rows
  of PyTorch's weight: ``ii, if, ig, io`` ``(F, H)`` without bias and ``hi, hf, hg, ho`` ``(H, H)``
  with a bias ``(H,)`` for ``LSTMCell``; ``ir, iz, in`` ``(F, H)`` with a bias, ``hr, hz``
  ``(H, H)`` without and ``hn`` ``(H, H)`` with one for ``GRUCell``. ``OptimizedLSTMCell`` has
  ``LSTMCell``'s tree.
- Layer ``k`` is ``{'params': {'cell': cell}}``, the variables of ``nn.RNN(cell)`` or
  ``rnnlib.RNN(cell)``; with ``bidirectional``, ``{'params': {'forward_rnn': {'cell': ...},
  'backward_rnn': {'cell': ...}}}``, those of ``nn.Bidirectional`` or ``rnnlib.Bidirectional``
  (default concatenating merge, as PyTorch's outputs are). ``stack_layers`` nests them under
  ``layers_0, layers_1, ...``: the tree of ``rnnlib.StackedRNN`` and of the flax.linen stack in
  its docstring, which is what a ``num_layers`` module computes (PyTorch's ``dropout`` between
  layers is that stack's ``dropout_rate``).

The equations agree. PyTorch's LSTM adds two biases per gate where Flax's has one, so their sum
goes in Flax's ``h*`` bias. Its GRU adds ``b_hn`` inside ``r * (W_hn h + b_hn)``, exactly where
Flax's ``GRUCell`` has the ``hn`` bias; ``b_hr`` and ``b_hz`` are summed into ``ir`` and ``iz``'s.
PyTorch's carry ``(h_n, c_n)``, each ``(num_layers * num_directions, batch, H)``, is Flax's
``(c, h)`` of each layer and direction (row ``2 * k + 1`` is layer ``k``'s backward one).
``batch_first`` changes no weight: a module with ``batch_first=False`` reads ``(time, batch, F)``,
which Flax's ``RNN`` and ``Bidirectional`` read with ``time_major=True``.

What Flax has no equal of is refused with a ``ValueError``: ``proj_size > 0`` (the
``weight_hr_l{k}`` tensors). A module built with ``bias=False`` has no bias tensors; its biases
are zero, which Flax's cells hold exactly, so it converts (and ``bias=False`` converts back).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["gru_from_torch", "gru_to_torch", "lstm_from_torch", "lstm_to_torch", "stack_layers"]

GATES = {"LSTM": "ifgo", "GRU": "rzn"}
KEY = re.compile(r"(weight|bias)_(ih|hh|hr)_l(\d+)(_reverse)?")
DIRECTIONS = ("", "_reverse")
SIDES = {"": "forward_rnn", "_reverse": "backward_rnn"}


def lstm_from_torch(state_dict: Mapping) -> list[dict]:
    """Flax variables, one dict per layer, of a ``torch.nn.LSTM``'s ``state_dict``.

    Each gate's bias is ``bias_ih + bias_hh``, in Flax's ``h*`` bias. Raises a ``ValueError``
    for ``proj_size > 0`` and for names or shapes that are not an LSTM's.
    """
    return [_cells(layer, _lstm_cell) for layer in _torch_layers(state_dict, "LSTM")]


def gru_from_torch(state_dict: Mapping) -> list[dict]:
    """Flax variables, one dict per layer, of a ``torch.nn.GRU``'s ``state_dict``.

    ``ir`` and ``iz`` get ``b_ir + b_hr`` and ``b_iz + b_hz``; ``in`` gets ``b_in`` and ``hn``
    gets ``b_hn``, which sits inside the reset gate in both libraries. Raises a ``ValueError``
    for names or shapes that are not a GRU's.
    """
    return [_cells(layer, _gru_cell) for layer in _torch_layers(state_dict, "GRU")]


def lstm_to_torch(variables, *, bias: bool = True) -> dict[str, np.ndarray]:
    """The ``state_dict`` (as numpy arrays) of a ``torch.nn.LSTM`` computing ``variables``.

    ``variables`` is one layer's (``nn.RNN`` or ``nn.Bidirectional`` of ``LSTMCell``), a list of
    them, or a ``stack_layers`` tree. Each gate's Flax bias goes in ``bias_ih``; ``bias_hh`` is
    ``-0.0``, a zero that adds exactly, so ``lstm_from_torch`` gives back the same bits. With
    ``bias=False`` the biases, which must then be zero, are left out.
    """
    return _to_torch(variables, "LSTM", _lstm_rows, bias)


def gru_to_torch(variables, *, bias: bool = True) -> dict[str, np.ndarray]:
    """The ``state_dict`` (as numpy arrays) of a ``torch.nn.GRU`` computing ``variables``.

    ``variables`` is as for ``lstm_to_torch``, of ``GRUCell``. ``bias_ih`` holds ``ir, iz, in``'s
    biases, ``bias_hh`` is ``-0.0`` for ``r`` and ``z`` (a zero that adds exactly) and ``hn``'s
    bias for ``n``. With ``bias=False`` the biases, which must then be zero, are left out.
    """
    return _to_torch(variables, "GRU", _gru_rows, bias)


def stack_layers(layers: Sequence[Mapping]) -> dict:
    """``{'params': {'layers_0': ..., 'layers_1': ...}}`` of per-layer variables: the tree of
    ``rnnlib.StackedRNN`` (and of a flax.linen module with its layers in a ``layers`` field)."""
    params = {f"layers_{k}": _params(layer, f"layer {k}") for k, layer in enumerate(layers)}
    return {"params": params}


# -- PyTorch -> Flax ----------------------------------------------------------------------------


def _torch_layers(state_dict, kind: str) -> list[dict]:
    """Per layer, per direction suffix: ``{'w_ih', 'w_hh', 'b_ih', 'b_hh'}`` checked arrays."""
    if not isinstance(state_dict, Mapping):
        got = type(state_dict).__name__
        raise TypeError(f"{kind} state dict: expected a mapping of names to arrays; got {got}.")
    found, unknown = {}, []
    for name, value in state_dict.items():
        match = KEY.fullmatch(str(name))
        if match is None:
            unknown.append(name)
            continue
        what, side, layer, reverse = match.groups()
        found[(int(layer), reverse or "", f"{what[0]}_{side}")] = np.asarray(value)
    if unknown:
        raise ValueError(
            f"{kind} state dict: expected names such as weight_ih_l0, weight_hh_l0, bias_ih_l0, "
            f"bias_hh_l0 (and _reverse ones); got {sorted(map(str, unknown))}. A submodule's "
            "entries carry its prefix ('lstm.weight_ih_l0'): strip it first."
        )
    projected = sorted(f"weight_hr_l{k}{d}" for k, d, part in found if part == "w_hr")
    if projected:
        raise ValueError(
            f"{kind} state dict has {projected}: the module was built with proj_size > 0, which "
            "projects h to a smaller width. Flax's cells have no projection, so it has no Flax "
            "equal; rebuild the module with proj_size=0."
        )
    if not found:
        raise ValueError(f"{kind} state dict: expected weight_ih_l0 and weight_hh_l0; got none.")
    layers = sorted({k for k, _, _ in found})
    if layers != list(range(len(layers))):
        raise ValueError(
            f"{kind} state dict: expected layers 0 to {max(layers)}; got layers {layers}."
        )
    directions = DIRECTIONS if any(d for _, d, _ in found) else DIRECTIONS[:1]
    with_bias = any(part.startswith("b_") for _, _, part in found)
    parts = ("w_ih", "w_hh") + (("b_ih", "b_hh") if with_bias else ())
    expected = {(k, d, p) for k in layers for d in directions for p in parts}
    if set(found) != expected:
        missing = sorted(_torch_name(*key) for key in expected - set(found))
        extra = sorted(_torch_name(*key) for key in set(found) - expected)
        raise ValueError(
            f"{kind} state dict of {len(layers)} layer(s), "
            f"{'bidirectional' if len(directions) == 2 else 'one direction'}, "
            f"{'with' if with_bias else 'without'} biases: missing {missing}, unexpected {extra}."
        )
    width = None
    result = []
    for k in layers:
        layer = {}
        for d in directions:
            arrays = {p: found[(k, d, p)] for p in parts}
            hidden = _check_shapes(arrays, kind, k, d, width)
            if d and hidden != layer[""]["w_hh"].shape[1]:
                forward = layer[""]["w_hh"].shape[1]
                raise ValueError(
                    f"{kind} state dict: layer {k}'s directions disagree on hidden_size: "
                    f"{forward} forward, {hidden} reverse ({_torch_name(k, d, 'w_hh')})."
                )
            if not with_bias:
                zeros = np.zeros(len(GATES[kind]) * hidden, arrays["w_ih"].dtype)
                arrays.update(b_ih=zeros, b_hh=zeros)
            layer[d] = arrays
        width = hidden * len(directions)
        result.append(layer)
    return result


def _torch_name(layer: int, direction: str, part: str) -> str:
    what, side = part.split("_")
    return f"{'weight' if what == 'w' else 'bias'}_{side}_l{layer}{direction}"


def _check_shapes(arrays: dict, kind: str, layer: int, direction: str, width) -> int:
    """The hidden size, after checking every shape of one layer and direction."""
    gates = len(GATES[kind])
    name = {p: _torch_name(layer, direction, p) for p in arrays}
    shape = {p: tuple(a.shape) for p, a in arrays.items()}
    w_hh = shape["w_hh"]
    if len(w_hh) != 2 or w_hh[0] != gates * w_hh[1]:
        other = {4: "an LSTM's", 3: "a GRU's"}.get(w_hh[0] // max(w_hh[-1], 1), "")
        hint = f" (that is {other}: use the other converter)" if len(w_hh) == 2 and other else ""
        raise ValueError(
            f"{kind} state dict: expected {name['w_hh']} shaped ({gates} * hidden_size, "
            f"hidden_size), one block of rows per gate; got shape {w_hh}{hint}."
        )
    hidden = w_hh[1]
    inputs = "input_size" if width is None else str(width)
    if len(shape["w_ih"]) != 2 or shape["w_ih"][0] != gates * hidden:
        raise ValueError(
            f"{kind} state dict: expected {name['w_ih']} shaped ({gates * hidden}, {inputs}); "
            f"got shape {shape['w_ih']}."
        )
    if width is not None and shape["w_ih"][1] != width:
        raise ValueError(
            f"{kind} state dict: layer {layer} reads the previous layer's outputs, so expected "
            f"{name['w_ih']} shaped ({gates * hidden}, {width}); got shape {shape['w_ih']}."
        )
    for part in ("b_ih", "b_hh"):
        if part in shape and shape[part] != (gates * hidden,):
            raise ValueError(
                f"{kind} state dict: expected {name[part]} shaped ({gates * hidden},); "
                f"got shape {shape[part]}."
            )
    return hidden


def _cells(layer: dict, cell) -> dict:
    """One layer's Flax variables: ``nn.RNN``'s, or ``nn.Bidirectional``'s with two directions."""
    if len(layer) == 1:
        return {"params": {"cell": cell(layer[""])}}
    return {"params": {SIDES[d]: {"cell": cell(arrays)} for d, arrays in layer.items()}}


def _dense(weight, bias=None) -> dict:
    """A Flax ``Dense``'s parameters from PyTorch's ``(out, in)`` block of rows."""
    dense = {"kernel": np.ascontiguousarray(weight.T)}
    if bias is not None:
        dense["bias"] = np.array(bias)
    return dense


def _lstm_cell(arrays: dict) -> dict:
    w_ih, w_hh = np.split(arrays["w_ih"], 4), np.split(arrays["w_hh"], 4)
    b = np.split(arrays["b_ih"] + arrays["b_hh"], 4)
    cell = {}
    for gate, w_i, w_h, b_h in zip(GATES["LSTM"], w_ih, w_hh, b):
        cell[f"i{gate}"] = _dense(w_i)
        cell[f"h{gate}"] = _dense(w_h, b_h)
    return cell


def _gru_cell(arrays: dict) -> dict:
    w_ir, w_iz, w_in = np.split(arrays["w_ih"], 3)
    w_hr, w_hz, w_hn = np.split(arrays["w_hh"], 3)
    b_ir, b_iz, b_in = np.split(arrays["b_ih"], 3)
    b_hr, b_hz, b_hn = np.split(arrays["b_hh"], 3)
    return {
        "ir": _dense(w_ir, b_ir + b_hr),
        "iz": _dense(w_iz, b_iz + b_hz),
        "in": _dense(w_in, b_in),
        "hr": _dense(w_hr),
        "hz": _dense(w_hz),
        "hn": _dense(w_hn, b_hn),
    }


# -- Flax -> PyTorch ----------------------------------------------------------------------------


def _params(variables, where: str) -> Mapping:
    """The ``params`` of ``variables`` (or ``variables`` itself when it is a params dict)."""
    if not isinstance(variables, Mapping):
        got = type(variables).__name__
        raise TypeError(f"{where}: expected Flax variables, a dict; got {got}.")
    return variables["params"] if "params" in variables else variables


def _layers_of(variables, kind: str) -> list[Mapping]:
    """Per-layer params of one layer's variables, a list of them, or a ``stack_layers`` tree."""
    if isinstance(variables, Sequence) and not isinstance(variables, str):
        if not variables:
            raise ValueError(f"{kind} variables: expected at least one layer; got an empty list.")
        return [_params(layer, f"{kind} layer {k}") for k, layer in enumerate(variables)]
    params = _params(variables, f"{kind} variables")
    names = [f"layers_{k}" for k in range(len(params))]
    if params and all(name in params for name in names):
        return [params[name] for name in names]
    return [params]


def _directions(params: Mapping, kind: str, layer: int) -> dict:
    """``{'': cell}`` or ``{'': forward cell, '_reverse': backward cell}`` of one layer."""
    if set(params) == {"cell"}:
        return {"": params["cell"]}
    if set(params) == set(SIDES.values()):
        cells = {d: params[side] for d, side in SIDES.items()}
        if all(isinstance(c, Mapping) and set(c) == {"cell"} for c in cells.values()):
            return {d: c["cell"] for d, c in cells.items()}
    raise ValueError(
        f"{kind} variables, layer {layer}: expected the params of an RNN, {{'cell': ...}}, or "
        "of a Bidirectional, {'forward_rnn': {'cell': ...}, 'backward_rnn': {'cell': ...}} "
        f"(both directions: PyTorch has no shared ones); got keys {sorted(map(str, params))}."
    )


def _cell_arrays(cell, names: dict, kind: str, where: str) -> dict:
    """``{dense: {'kernel': ..., 'bias': ...}}`` as numpy, checked against ``names``: each
    Dense's name mapped to whether it has a bias."""
    expected = {name: sorted(("kernel", "bias") if b else ("kernel",)) for name, b in names.items()}
    received = {
        name: sorted(map(str, dense)) if isinstance(dense, Mapping) else type(dense).__name__
        for name, dense in (cell.items() if isinstance(cell, Mapping) else ())
    }
    if received != expected:
        raise ValueError(
            f"{kind} variables, {where}: expected a {kind} cell's params {expected}; "
            f"got {received or type(cell).__name__}."
        )
    return {n: {p: np.asarray(a) for p, a in dense.items()} for n, dense in cell.items()}


def _lstm_rows(cell, where: str):
    """``(w_ih, w_hh, b_ih, b_hh)`` of one LSTM cell, in PyTorch's layout."""
    names = {f"i{g}": False for g in GATES["LSTM"]} | {f"h{g}": True for g in GATES["LSTM"]}
    dense = _cell_arrays(cell, names, "LSTM", where)
    w_ih = np.concatenate([dense[f"i{g}"]["kernel"].T for g in GATES["LSTM"]])
    w_hh = np.concatenate([dense[f"h{g}"]["kernel"].T for g in GATES["LSTM"]])
    b_ih = np.concatenate([dense[f"h{g}"]["bias"] for g in GATES["LSTM"]])
    return w_ih, w_hh, b_ih, np.full_like(b_ih, -0.0)


def _gru_rows(cell, where: str):
    """``(w_ih, w_hh, b_ih, b_hh)`` of one GRU cell, in PyTorch's layout."""
    names = {"ir": True, "iz": True, "in": True, "hr": False, "hz": False, "hn": True}
    dense = _cell_arrays(cell, names, "GRU", where)
    w_ih = np.concatenate([dense[f"i{g}"]["kernel"].T for g in GATES["GRU"]])
    w_hh = np.concatenate([dense[f"h{g}"]["kernel"].T for g in GATES["GRU"]])
    b_ih = np.concatenate([dense[f"i{g}"]["bias"] for g in GATES["GRU"]])
    b_hn = dense["hn"]["bias"]
    b_hh = np.concatenate([np.full_like(b_hn, -0.0), np.full_like(b_hn, -0.0), b_hn])
    return w_ih, w_hh, b_ih, b_hh


def _to_torch(variables, kind: str, rows, bias: bool) -> dict[str, np.ndarray]:
    state = {}
    for k, params in enumerate(_layers_of(variables, kind)):
        for d, cell in _directions(params, kind, k).items():
            where = f"layer {k}" + (" backward_rnn" if d else "")
            w_ih, w_hh, b_ih, b_hh = rows(cell, where)
            state[f"weight_ih_l{k}{d}"] = np.ascontiguousarray(w_ih)
            state[f"weight_hh_l{k}{d}"] = np.ascontiguousarray(w_hh)
            if bias:
                state[f"bias_ih_l{k}{d}"] = b_ih
                state[f"bias_hh_l{k}{d}"] = b_hh
            elif np.any(b_ih != 0) or np.any(b_hh != 0):
                largest = float(max(np.max(np.abs(b_ih)), np.max(np.abs(b_hh))))
                raise ValueError(
                    f"{kind} variables, {where}: bias=False asks for a module without biases, "
                    f"but this cell's biases are not zero (largest magnitude {largest:g}); "
                    "convert with bias=True."
                )
    return state
