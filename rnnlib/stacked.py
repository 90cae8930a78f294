"""``StackedRNN``: layers of RNNs, the outputs of each the inputs of the next.

A deep RNN runs a sequence through several recurrent layers. Between two layers it may
drop values (dropout), and a layer may add its input to its output (a residual
connection), which needs the two to have the same width::

    stack = StackedRNN(
        (RNN(LSTMCell(8)), RNN(LSTMCell(8)), RNN(LSTMCell(8))),
        dropout_rate=0.25,
        residual=(False, True, True),       # layer 0 widens 3 channels to 8: no residual
    )
    x = jnp.ones((4, 10, 3))                               # (batch, time, channels)
    variables = stack.init(jax.random.key(0), x)           # params/layers_0, layers_1, ...
    y = stack.apply(variables, x, deterministic=True)      # (4, 10, 8)
    y = stack.apply(variables, x, deterministic=False, rngs={"dropout": jax.random.key(1)})

The numbers, dropout masks included, are those of this flax.linen module given the same
variables and ``rngs``::

    class Stack(nn.Module):
        layers: Sequence[nn.Module]        # nn.RNN or nn.Bidirectional
        dropout_rate: float
        residual: Sequence[bool]

        @nn.compact
        def __call__(self, x, *, deterministic):
            for i, layer in enumerate(self.layers):
                y = layer(x)
                y = x + y if self.residual[i] else y
                if i < len(self.layers) - 1:
                    y = nn.Dropout(self.dropout_rate)(y, deterministic=deterministic)
                x = y
            return x
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

from rnnlib.bidirectional import Bidirectional
from rnnlib.dropout import (
    apply_mask,
    check_rate,
    dropout_key,
    dropout_mask,
    linen_key,
    merge_deterministic,
)
from rnnlib.module import Module, describe, params_of
from rnnlib.recurrent_dropout import RecurrentDropoutCell
from rnnlib.rnn import RNN, split_axes


class StackedRNN(Module):
    """Runs ``layers`` one after the other, with dropout and residuals between them.

    Arguments:
        layers: a non-empty tuple of ``RNN`` and ``Bidirectional`` layers. Layer ``i``
            reads the output of layer ``i - 1``, shaped ``(*batch, time, width)``; its
            parameters live under ``params['layers_i']``.
        dropout_rate: probability, in ``[0, 1)``, of dropping each value of the output of
            every layer except the last (as PyTorch's ``nn.LSTM(dropout=...)`` does). The
            mask of the ``i``-th gap is drawn from ``rnnlib.dropout.linen_key(key, 'Dropout_i',
            1)``: the key of the ``i``-th ``nn.Dropout`` of the flax.linen module in this
            module's docstring.
        residual: ``True`` (every layer), ``False`` (none) or one bool per layer: whether
            the layer's output is its input plus what the layer computes. That needs the
            layer's input and output widths to match, which is checked.
        deterministic: ``True`` for no dropout (evaluation), ``False`` for dropout
            (training); give it here or at call time, not both.

    A layer whose RNN runs a ``RecurrentDropoutCell`` gets that cell's per-sequence masks
    drawn here, from the same ``rngs``; the call takes ``deterministic``, ``rngs``,
    ``seq_lengths`` and ``resets`` (both passed to every layer: a reset starts an episode
    afresh in every layer, so the outputs from that step on are those of the stack run on the
    rest of the sequence alone), ``initial_carry`` (one carry per layer, or ``None``) and
    ``return_carry`` (then it returns ``(carries, outputs)``, one carry per layer).
    """

    layers: tuple[Any, ...]
    dropout_rate: float = 0.0
    residual: bool | tuple[bool, ...] = False
    deterministic: bool | None = None

    def __post_init__(self):
        layers = self.layers
        if isinstance(layers, list):
            layers = tuple(layers)
            object.__setattr__(self, "layers", layers)
        if not isinstance(layers, tuple) or not layers:
            raise TypeError(
                "StackedRNN expects layers as a non-empty tuple of rnnlib.RNN or "
                f"rnnlib.Bidirectional; got {layers!r}."
            )
        for index, layer in enumerate(layers):
            if not isinstance(layer, (RNN, Bidirectional)):
                kind = type(layer)
                raise TypeError(
                    f"StackedRNN expects each layer to be an rnnlib.RNN or rnnlib.Bidirectional;"
                    f" layer {index} is {kind.__module__}.{kind.__qualname__}."
                )
        for index in range(1, len(layers)):
            _check_axes_agree(layers[index - 1], layers[index], index)
        check_rate(self, "dropout_rate", self.dropout_rate)
        residual = self.residual
        if isinstance(residual, list):
            residual = tuple(residual)
            object.__setattr__(self, "residual", residual)
        flags = residual if isinstance(residual, tuple) else (residual,)
        if not all(isinstance(flag, (bool, np.bool_)) for flag in flags):
            raise TypeError(
                f"StackedRNN expects residual to be a bool or one bool per layer; got {residual!r}."
            )
        if isinstance(residual, tuple) and len(residual) != len(layers):
            raise ValueError(
                f"StackedRNN has {len(layers)} layers but residual gives {len(residual)} flags "
                f"{residual}; give one per layer, or one bool for all."
            )

    @property
    def _short(self) -> str:
        """How errors name this stack: its size and rate, not every layer's fields."""
        return f"StackedRNN({len(self.layers)} layers, dropout_rate={self.dropout_rate})"

    @property
    def residuals(self) -> tuple[bool, ...]:
        """One bool per layer: whether it adds its input to its output."""
        if isinstance(self.residual, tuple):
            return tuple(bool(flag) for flag in self.residual)
        return (bool(self.residual),) * len(self.layers)

    # -- init and apply in flax.linen's convention --------------------------------------

    def init(self, key, inputs, **kwargs) -> dict:
        """Creates ``{'params': {'layers_0': ..., 'layers_1': ...}}`` for ``inputs``.

        Dropout does not change shapes, so the shapes are traced without it; the
        ``deterministic`` and ``rngs`` arguments are accepted and ignored.
        """
        kwargs.pop("deterministic", None)
        kwargs.pop("rngs", None)
        return super().init(key, inputs, _drop_key=None, **kwargs)

    def apply(self, variables, inputs, *, deterministic=None, rngs=None, **kwargs):
        """The last layer's outputs (and each layer's carry with ``return_carry``)."""
        params = params_of(variables, self)
        unknown = sorted(set(kwargs) - set(_CALL_ARGUMENTS))
        if unknown:
            raise TypeError(
                f"{self._short}.apply got unexpected keyword arguments {unknown}; it takes "
                f"variables, inputs and the keywords deterministic, rngs, "
                f"{', '.join(_CALL_ARGUMENTS)}."
            )
        if not self._drops():  # nothing to drop: deterministic is optional, as in linen
            if deterministic is not None or self.deterministic is not None:
                merge_deterministic(self._short, self.deterministic, deterministic)
            key = None
        elif merge_deterministic(self._short, self.deterministic, deterministic):
            key = None
        else:
            key = dropout_key(self._short, rngs)
        return self._call(params, inputs, _drop_key=key, **kwargs)

    def _drops(self) -> bool:
        """Whether a call can drop values (a rate above 0, or a recurrent dropout cell)."""
        if self.dropout_rate > 0 and len(self.layers) > 1:
            return True
        return any(_dropout_cells(layer) for layer in self.layers)

    def _init(self, key, inputs, **unused):
        params = {}
        keys = jax.random.split(key, len(self.layers))
        x = jax.ShapeDtypeStruct(np.shape(inputs), jax.numpy.result_type(inputs))
        for index, (layer, layer_key) in enumerate(zip(self.layers, keys)):
            name = f"layers_{index}"
            # Bound to no masks first: a Bidirectional's init runs its RNNs, and a recurrent
            # dropout cell runs only bound (its parameters are the wrapped cell's either way).
            run = self._layer(index, layer, None, x.shape)
            params[name] = run._init(layer_key, x)
            y = jax.eval_shape(lambda p, x, run=run: run._call(p, x), params[name], x)
            if self.residuals[index]:
                self._check_residual(index, x.shape, y.shape)
            x = y
        return params

    def _call(
        self,
        params,
        inputs,
        *,
        _drop_key=None,
        seq_lengths=None,
        initial_carry=None,
        return_carry: bool = False,
        resets=None,
    ):
        inputs = jax.numpy.asarray(inputs)
        if initial_carry is not None and (
            not isinstance(initial_carry, (tuple, list)) or len(initial_carry) != len(self.layers)
        ):
            raise ValueError(
                f"{self._short} expects initial_carry as one carry per layer "
                f"({len(self.layers)}), or None; got {type(initial_carry).__name__}"
                + (
                    f" of length {len(initial_carry)}."
                    if hasattr(initial_carry, "__len__")
                    else "."
                )
            )
        x, carries, last = inputs, [], len(self.layers) - 1
        for index, layer in enumerate(self.layers):
            name = f"layers_{index}"
            if name not in params:
                raise ValueError(
                    f"{self._short} needs params/{name} for layer {index}; the variables "
                    f"hold {sorted(params)}. Were they made for a stack of fewer layers?"
                )
            run = self._layer(index, layer, _drop_key, x.shape)
            carry, y = run._call(
                params[name],
                x,
                seq_lengths=seq_lengths,
                initial_carry=None if initial_carry is None else initial_carry[index],
                return_carry=True,
                resets=resets,
            )
            if self.residuals[index]:
                self._check_residual(index, x.shape, y.shape)
                y = x + y
            if index < last and self.dropout_rate > 0 and _drop_key is not None:
                key = linen_key(_drop_key, f"Dropout_{index}", 1)
                y = apply_mask(y, dropout_mask(key, y.shape, self.dropout_rate), self.dropout_rate)
            carries.append(carry)
            x = y
        return (tuple(carries), x) if return_carry else x

    def _check_residual(self, index, in_shape, out_shape):
        if tuple(in_shape) != tuple(out_shape):
            raise ValueError(
                f"{self._short}: layer {index}, {describe(self.layers[index])}, has a "
                f"residual connection, which adds its input to its output, but it maps inputs shaped "
                f"{tuple(in_shape)} to outputs shaped {tuple(out_shape)}: the widths "
                f"{in_shape[-1]} and {out_shape[-1]} differ. Give that layer residual=False "
                "(residual takes one bool per layer) or make the widths equal."
            )

    def _layer(self, index, layer, key, in_shape):
        """``layer``, with any ``RecurrentDropoutCell`` bound to its masks (or to none)."""
        if not _dropout_cells(layer):
            return layer
        name = f"layers_{index}"
        if isinstance(layer, RNN):
            return _bind(layer, key, in_shape, layer.time_major, (name, "cell"))
        if layer.shares_parameters:
            raise ValueError(
                f"{self._short}: layer {index}, a Bidirectional, runs one RecurrentDropoutCell, "
                f"{describe(layer.forward_rnn.cell)}, in both directions, which then share its "
                "parameters; each direction draws its own masks, so it needs a cell of its "
                "own: Bidirectional(RNN(RecurrentDropoutCell(...)), RNN(RecurrentDropoutCell(...)))."
            )
        time_major = layer.time_major
        forward = _bind(layer.forward_rnn, key, in_shape, time_major, (name, "forward_rnn", "cell"))
        backward = _bind(
            layer.backward_rnn, key, in_shape, time_major, (name, "backward_rnn", "cell")
        )
        return dataclasses.replace(layer, forward_rnn=forward, backward_rnn=backward)


def _axes(layer) -> tuple[bool, int | None]:
    """``(time_major, num_feature_axes)`` of a layer's input and output."""
    rnns = [layer] if isinstance(layer, RNN) else [layer.forward_rnn, layer.backward_rnn]
    cell = getattr(rnns[0], "cell", None)
    return bool(layer.time_major), getattr(cell, "num_feature_axes", None)


def _check_axes_agree(before, after, index: int) -> None:
    """Raises unless layer ``index`` reads its input with the axes layer ``index - 1`` writes."""
    (major_before, axes_before), (major_after, axes_after) = _axes(before), _axes(after)
    if major_before != major_after:
        raise ValueError(
            f"StackedRNN: layer {index - 1}, {describe(before)}, has time_major={major_before} "
            f"but layer {index}, {describe(after)}, has time_major={major_after}; the second "
            "would scan the wrong axis. Give every layer the same time_major."
        )
    if None not in (axes_before, axes_after) and axes_before != axes_after:
        raise ValueError(
            f"StackedRNN: layer {index - 1}, {describe(before)}, outputs {axes_before} feature "
            f"axes but layer {index}, {describe(after)}, reads {axes_after}; the second would "
            "take a signal axis for time. Stack cells with the same num_feature_axes (a "
            "ConvLSTM on a ConvLSTM of the same rank, a dense cell on a dense cell)."
        )


def _dropout_cells(layer) -> list:
    rnns = [layer] if isinstance(layer, RNN) else [layer.forward_rnn, layer.backward_rnn]
    return [
        rnn.cell for rnn in rnns if isinstance(getattr(rnn, "cell", None), RecurrentDropoutCell)
    ]


def _bind(rnn, key, in_shape, time_major, path):
    """``rnn`` with its ``RecurrentDropoutCell`` bound to masks (none when ``key`` is None)."""
    cell = rnn.cell
    if not isinstance(cell, RecurrentDropoutCell):
        return rnn
    if key is None:
        return dataclasses.replace(rnn, cell=cell.with_masks())
    _, time_axis = split_axes(cell, in_shape, time_major, owner=rnn)
    step_shape = tuple(in_shape[:time_axis]) + tuple(in_shape[time_axis + 1 :])
    recurrent, input_ = cell.draw_masks(key, step_shape, path)
    return dataclasses.replace(rnn, cell=cell.with_masks(recurrent, input_))


_CALL_ARGUMENTS = ("seq_lengths", "resets", "initial_carry", "return_carry")
