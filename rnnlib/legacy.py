"""``rnnlib.legacy``: the recurrent API of Flax 0.6.11, running on rnnlib's cells.

Up to Flax 0.6.11 a recurrent cell did not know its own width. The carry was made
first, by a *static* method that never saw the input or the cell's configuration::

    carry = LSTMCell.initialize_carry(rng, batch_dims, size)  # shape batch_dims + (size,)
    (c, h), y = LSTMCell().apply(variables, carry, x)         # the width is read from h
    y = RNN(LSTMCell(), cell_size=64).apply(variables, xs)

FLIP 3099 (Flax 0.7) moved that knowledge into the cell: ``LSTMCell(features=64)``
and ``cell.initialize_carry(rng, input_shape)``. That API is rnnlib's own. This
module keeps the old one alive so that 0.6-era code can run next to the new API
on a current JAX, which the real Flax 0.6.11 no longer installs on. It is for
reading and porting old code, and for the book's chapter about why the API changed.

Only the calling convention is old. Every computation is done by the new cells
(``rnnlib.LSTMCell``, ``rnnlib.GRUCell``, ...), built on the fly with the width the
carry implies, so the variables have the same layout (that of flax.linen) and the
same variables give the same numbers in both APIs::

    from rnnlib import legacy
    carry = legacy.LSTMCell.initialize_carry(key, (16,), 64)
    variables = legacy.LSTMCell().init(key, carry, x)       # x: (16, channels)
    old_out = legacy.LSTMCell().apply(variables, carry, x)
    new_out = rnnlib.LSTMCell(features=64).apply(variables, carry, x)  # identical arrays

Each entry point (building a legacy cell, ``RNN`` or ``Bidirectional``, and each
static ``initialize_carry``) emits a ``DeprecationWarning`` that spells out the
new-API call, with the caller's own numbers where they are known.

What is kept from 0.6.11, and what is not:

- A carry that does not fit the input is not checked up front: the old API had
  no way to know what fits. The step computes as 0.6.11 did and fails where it
  failed, at the sum of the input and hidden projections, with the same
  ``TypeError`` (the message adds one sentence about where the carry came from).
- 0.6.11's crashes are not kept: ``RNN`` accepts ``seq_lengths`` without
  ``return_carry``, takes any number of batch dims with ``seq_lengths``, and a
  sequence of length 0 returns its initial carry (0.6.11 returned the carry after
  the last padded step). A ``cell_size`` that cannot fit the cell or the input
  raises an error naming both.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import rnnlib
from rnnlib.module import Module, check_params, describe
from rnnlib.rnn import check_flags, split_axes

__all__ = [
    "LSTMCell",
    "OptimizedLSTMCell",
    "GRUCell",
    "ConvLSTMCell",
    "RNN",
    "Bidirectional",
]

_zeros = jax.nn.initializers.zeros


def _deprecated(old: str, new: str, stacklevel: int) -> None:
    """Warns that ``old`` is the 0.6 API and names ``new``; ``stacklevel`` counts from
    the caller of this helper, so the warning points at the user's line."""
    warnings.warn(
        f"rnnlib.legacy: {old} is the Flax <= 0.6.11 API; the new API is {new} "
        "(rnnlib, or flax.linen >= 0.7).",
        DeprecationWarning,
        stacklevel=stacklevel + 1,
    )


# -- arguments of the static initialize_carry --------------------------------------------


def _check_batch_dims(owner: str, batch_dims) -> tuple[int, ...]:
    if isinstance(batch_dims, (tuple, list)) and all(
        isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in batch_dims
    ):
        return tuple(int(d) for d in batch_dims)
    raise TypeError(
        f"{owner}.initialize_carry expects batch_dims as a tuple of ints >= 0, such as (16,) "
        f"for a batch of 16; got {batch_dims!r} ({type(batch_dims).__name__})."
    )


def _is_size(n) -> bool:
    return isinstance(n, (int, np.integer)) and not isinstance(n, bool)


def _check_dense_size(owner: str, size, what: str = "size") -> int:
    if not _is_size(size):
        raise TypeError(
            f"{owner} expects {what} to be the hidden width, an int such as 64; "
            f"got {size!r} ({type(size).__name__})."
        )
    if size < 1:
        raise ValueError(f"{owner} expects {what} >= 1 (the hidden width); got {size}.")
    return int(size)


def _check_conv_size(owner: str, size, what: str = "size") -> tuple[int, ...]:
    if not isinstance(size, (tuple, list)) or not all(_is_size(n) for n in size):
        raise TypeError(
            f"{owner} expects {what} = signal dims + (features,), a tuple of ints such as "
            f"(64, 64, 16) for 64x64 images and 16 features; got {size!r} "
            f"({type(size).__name__})."
        )
    if len(size) < 2 or any(n < 1 for n in size):
        raise ValueError(
            f"{owner} expects {what} = signal dims + (features,): at least two ints >= 1, such "
            f"as (64, 64, 16); got {tuple(size)!r}."
        )
    return tuple(int(n) for n in size)


def _spell(shape: Sequence[Any]) -> str:
    """``(16, <input channels>)``: a shape that may hold placeholders, as Python spells it."""
    items = [str(n) for n in shape]
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


def _carry_init_note(init_fn) -> str:
    return "" if init_fn is _zeros else ", carry_init=<your init_fn>"


def _pair_carry(rng, shape, init_fn):
    """``(c, h)`` as 0.6.11 made it: one key for ``c``, one for ``h``, no dtype passed."""
    key_c, key_h = jax.random.split(rng)
    return init_fn(key_c, shape), init_fn(key_h, shape)


def _dense_pair_carry(name, rng, batch_dims, size, init_fn, stacklevel):
    owner = f"{name}.initialize_carry"
    batch_dims = _check_batch_dims(name, batch_dims)
    size = _check_dense_size(owner, size)
    _deprecated(
        f"{name}.initialize_carry(rng, {_spell(batch_dims) if batch_dims else '()'}, {size})",
        f"{name}(features={size}{_carry_init_note(init_fn)}).initialize_carry(rng, "
        f"{_spell(batch_dims + ('<input channels>',))})",
        stacklevel + 1,
    )
    return _pair_carry(rng, batch_dims + (size,), init_fn)


# -- cells ---------------------------------------------------------------------------------


class _LegacyCell(Module):
    """What the legacy cells share: the width comes from the carry, the math from a new cell.

    Subclasses say how to build the new cell (``new_cell(features)``) and how to
    read the width off a carry (``_carry_features``).
    """

    _carry_note = ""  # what the construction warning adds after the new-API call

    def __post_init__(self):
        self._validate()
        _deprecated(describe(self), self._new_call() + self._carry_note, stacklevel=3)

    def _validate(self) -> None:
        """Raises on a malformed configuration (dense cells have nothing to check)."""

    def _new_call(self, features: Any = "<hidden size>") -> str:
        shown = describe(self)
        name, _, rest = shown.partition("(")
        return f"{name}(features={features}{', ' if rest != ')' else ''}{rest}"

    def new_cell(self, features: int) -> rnnlib.RNNCellBase:
        """The new-API cell with this configuration and ``features`` (for dense cells,
        the width of the carry): it holds all the math and the parameter layout."""
        raise NotImplementedError

    def _carry_features(self, carry) -> int:
        raise NotImplementedError

    def _create_params(self, cell, key, carry, input_shape):
        return cell.create_params(key, input_shape)

    def _init(self, key, carry, inputs):
        cell = self.new_cell(self._carry_features(carry))
        shape = tuple(np.shape(inputs))
        cell.check_input_shape(shape)
        return self._create_params(cell, key, carry, shape)

    def _call(self, params, carry, inputs):
        cell = self.new_cell(self._carry_features(carry))
        shape = tuple(np.shape(inputs))
        cell.check_input_shape(shape)
        expected = jax.eval_shape(
            lambda: self._create_params(cell, jax.random.key(0), carry, shape)
        )
        check_params(self, params, expected)
        with jax.named_scope(type(self).__name__):
            try:
                return cell.bind(params, shape)(carry, inputs)
            except TypeError as error:
                if "incompatible shapes" not in str(error):
                    raise
                raise TypeError(
                    f"{error} legacy.{describe(self)} got a carry shaped "
                    f"{jax.tree_util.tree_map(np.shape, carry)} for an input step shaped {shape}: "
                    "the static initialize_carry(rng, batch_dims, size) never sees the input "
                    "or the cell, so its batch_dims and size must match them by hand."
                ) from error


def _with_features(cell: _LegacyCell, new_class, features: int) -> rnnlib.RNNCellBase:
    """``new_class(features=features, ...)`` with every field of the legacy dense ``cell``:
    their fields are the new cells' fields, less ``features``."""
    fields = {f.name: getattr(cell, f.name) for f in dataclasses.fields(cell)}
    return new_class(features=features, **fields)


def _pair_features(cell: _LegacyCell, carry) -> int:
    """The width of an LSTM carry ``(c, h)``: the last axis of ``h``, as 0.6.11 read it."""
    if not isinstance(carry, (tuple, list)) or len(carry) != 2:
        raise TypeError(
            f"legacy.{describe(cell)} expects the carry as a pair (c, h) of arrays shaped "
            f"batch_dims + (size,), as {type(cell).__name__}.initialize_carry returns; got "
            f"{_what(carry)}."
        )
    return _last_axis(cell, carry[1], "h")


def _what(carry) -> str:
    """``a tuple of length 3``, ``an array of shape (2, 4)``: a carry, described for errors."""
    if isinstance(carry, (tuple, list, Mapping)):
        return f"a {type(carry).__name__} of length {len(carry)}"
    if hasattr(carry, "shape"):
        return f"an array of shape {tuple(carry.shape)}"
    return f"a {type(carry).__name__}"


def _last_axis(cell: _LegacyCell, array, name: str) -> int:
    shape = np.shape(array)
    if len(shape) < 1:
        raise ValueError(
            f"legacy.{describe(cell)} reads its width from the last axis of {name}, shaped "
            f"batch_dims + (size,); got {name} with shape {tuple(shape)}, which has no axes."
        )
    return shape[-1]


class LSTMCell(_LegacyCell):
    r"""The Flax 0.6.11 ``LSTMCell``: no ``features``; the width is the carry's.

    Old API (Flax <= 0.6.11)::

        LSTMCell(gate_fn=sigmoid, activation_fn=tanh, kernel_init=lecun_normal(),
                 recurrent_kernel_init=orthogonal(), bias_init=zeros, dtype=None,
                 param_dtype=float32)
        carry = LSTMCell.initialize_carry(rng, batch_dims, size)   # static
        (c, h), y = cell.apply(variables, carry, x)                 # width: h.shape[-1]

    New API: ``LSTMCell(features=size, ...)`` and
    ``cell.initialize_carry(rng, x.shape)``. The update equations, the parameters
    (``ii, if, ig, io`` without bias, ``hi, hf, hg, ho`` with bias) and the numbers are
    those of ``rnnlib.LSTMCell``, which does the computing.

    Arguments:
        gate_fn, activation_fn, kernel_init, recurrent_kernel_init, bias_init, dtype, param_dtype:
            as in ``rnnlib.LSTMCell``.
    """

    gate_fn: Callable[..., Any] = jax.nn.sigmoid
    activation_fn: Callable[..., Any] = jnp.tanh
    kernel_init: Callable[..., Any] = jax.nn.initializers.lecun_normal()
    recurrent_kernel_init: Callable[..., Any] = jax.nn.initializers.orthogonal()
    bias_init: Callable[..., Any] = jax.nn.initializers.zeros
    dtype: Any = None
    param_dtype: Any = jnp.float32

    _NEW = rnnlib.LSTMCell

    def new_cell(self, features):
        return _with_features(self, self._NEW, features)

    def _carry_features(self, carry):
        return _pair_features(self, carry)

    @staticmethod
    def initialize_carry(rng, batch_dims, size, init_fn=_zeros):
        """``(c, h)``, each shaped ``batch_dims + (size,)``.

        ``rng`` is split in two, the first key for ``c`` and the second for ``h``, and
        ``init_fn(key, shape)`` makes each (its default dtype, float32 for zeros).
        New API: ``LSTMCell(features=size).initialize_carry(rng, batch_dims + (in_features,))``.
        """
        return _dense_pair_carry("LSTMCell", rng, batch_dims, size, init_fn, stacklevel=2)


class OptimizedLSTMCell(LSTMCell):
    """The Flax 0.6.11 ``OptimizedLSTMCell``: the same fields, parameters and numbers as
    :class:`LSTMCell` (0.6.11 fused the gate matmuls; rnnlib's ``RNN`` does where its
    ``plan`` says so).

    Old API: ``OptimizedLSTMCell()`` and the static
    ``OptimizedLSTMCell.initialize_carry(rng, batch_dims, size)``.
    New API: ``OptimizedLSTMCell(features=size)`` and ``cell.initialize_carry(rng, x.shape)``.
    """

    _NEW = rnnlib.OptimizedLSTMCell

    @staticmethod
    def initialize_carry(rng, batch_dims, size, init_fn=_zeros):
        """``(c, h)``, each shaped ``batch_dims + (size,)``; keys as in
        :meth:`LSTMCell.initialize_carry`."""
        return _dense_pair_carry("OptimizedLSTMCell", rng, batch_dims, size, init_fn, stacklevel=2)


class GRUCell(_LegacyCell):
    r"""The Flax 0.6.11 ``GRUCell``: no ``features``; the width is the carry's.

    Old API (Flax <= 0.6.11)::

        GRUCell(gate_fn=sigmoid, activation_fn=tanh, kernel_init=lecun_normal(),
                recurrent_kernel_init=orthogonal(), bias_init=zeros, dtype=None,
                param_dtype=float32)
        h = GRUCell.initialize_carry(rng, batch_dims, size)        # static
        h, y = cell.apply(variables, h, x)                          # width: h.shape[-1]

    New API: ``GRUCell(features=size, ...)`` and ``cell.initialize_carry(rng, x.shape)``.
    Parameters (``ir, iz, in`` with bias, ``hr, hz`` without, ``hn`` with) and numbers
    are those of ``rnnlib.GRUCell``, which does the computing.
    """

    gate_fn: Callable[..., Any] = jax.nn.sigmoid
    activation_fn: Callable[..., Any] = jnp.tanh
    kernel_init: Callable[..., Any] = jax.nn.initializers.lecun_normal()
    recurrent_kernel_init: Callable[..., Any] = jax.nn.initializers.orthogonal()
    bias_init: Callable[..., Any] = jax.nn.initializers.zeros
    dtype: Any = None
    param_dtype: Any = jnp.float32

    def new_cell(self, features):
        return _with_features(self, rnnlib.GRUCell, features)

    def _carry_features(self, carry):
        if isinstance(carry, (tuple, list, Mapping)):
            raise TypeError(
                f"legacy.{describe(self)} expects the carry h, one array shaped "
                "batch_dims + (size,) as GRUCell.initialize_carry returns; got "
                f"{_what(carry)}."
            )
        return _last_axis(self, carry, "h")

    @staticmethod
    def initialize_carry(rng, batch_dims, size, init_fn=_zeros):
        """``h`` shaped ``batch_dims + (size,)``, made by ``init_fn(rng, shape)``: the
        key is used whole, not split. New API:
        ``GRUCell(features=size).initialize_carry(rng, batch_dims + (in_features,))``."""
        batch_dims = _check_batch_dims("GRUCell", batch_dims)
        size = _check_dense_size("GRUCell.initialize_carry", size)
        _deprecated(
            f"GRUCell.initialize_carry(rng, {_spell(batch_dims) if batch_dims else '()'}, {size})",
            f"GRUCell(features={size}{_carry_init_note(init_fn)}).initialize_carry(rng, "
            f"{_spell(batch_dims + ('<input channels>',))})",
            stacklevel=2,
        )
        return init_fn(rng, batch_dims + (size,))


class ConvLSTMCell(_LegacyCell):
    r"""The Flax 0.6.11 ``ConvLSTMCell``, with its static, shape-blind ``initialize_carry``.

    Old API (Flax <= 0.6.11)::

        ConvLSTMCell(features, kernel_size, strides=None, padding='SAME', use_bias=True,
                     dtype=None, param_dtype=float32)
        carry = ConvLSTMCell.initialize_carry(rng, batch_dims, size)  # size = signal + (features,)

    New API: the same constructor, ``rnnlib.ConvLSTMCell(features, kernel_size, ...)``,
    with ``cell.initialize_carry(rng, x.shape)``, which reads the batch and signal dims
    off the input and the channels off the cell.

    As in 0.6.11, the hidden convolution's kernel is made for the channels of the
    ``h`` it is given, and the carry is not compared with the input: a carry made
    for the wrong input fails at the sum of the two convolutions, ``(*batch, *signal,
    4 * features)`` each, with a ``TypeError`` that shows both shapes. Given a
    carry that fits, parameters and numbers are those of ``rnnlib.ConvLSTMCell``.
    """

    features: int
    kernel_size: Sequence[int]
    strides: Sequence[int] | None = None
    padding: Any = "SAME"
    use_bias: bool = True
    dtype: Any = None
    param_dtype: Any = jnp.float32

    _carry_note = (
        ", the same constructor, with cell.initialize_carry(rng, input_shape) in place of the "
        "static ConvLSTMCell.initialize_carry(rng, batch_dims, size)"
    )

    def _validate(self):
        self.new_cell()  # rnnlib.ConvLSTMCell raises on a malformed configuration

    def _new_call(self, features: Any = None) -> str:
        return describe(self.new_cell(self.features))

    def new_cell(self, features=None):
        """The new-API ``rnnlib.ConvLSTMCell`` with this configuration."""
        return rnnlib.ConvLSTMCell(
            features=self.features,
            kernel_size=self.kernel_size,
            strides=self.strides,
            padding=self.padding,
            use_bias=self.use_bias,
            dtype=self.dtype,
            param_dtype=self.param_dtype,
        )

    def _carry_features(self, carry):
        if not isinstance(carry, (tuple, list)) or len(carry) != 2:
            raise TypeError(
                f"legacy.{describe(self)} expects the carry as a pair (c, h) of arrays shaped "
                "batch_dims + size, as ConvLSTMCell.initialize_carry returns; got "
                f"{_what(carry)}."
            )
        _last_axis(self, carry[1], "h")
        return self.features

    def _create_params(self, cell, key, carry, input_shape):
        params = cell.create_params(key, input_shape)
        channels = np.shape(carry[1])[-1]
        if channels != self.features:
            # 0.6.11 sized the hidden convolution by the h it was given. Only a carry made
            # for another cell gets here; the step then fails at the sum, as it did there.
            _, key_hh = jax.random.split(key)
            params["hh"] = cell.create_params(key_hh, (channels,))["ih"]
        return params

    @staticmethod
    def initialize_carry(rng, batch_dims, size, init_fn=_zeros):
        """``(c, h)``, each shaped ``batch_dims + size``, where ``size`` is the signal dims
        plus the features, e.g. ``(64, 64, 16)``. ``rng`` is split in two: the first key
        for ``c``, the second for ``h``. Nothing checks ``size`` against the cell or the
        input; that is the caller's job, as in 0.6.11."""
        batch_dims = _check_batch_dims("ConvLSTMCell", batch_dims)
        size = _check_conv_size("ConvLSTMCell.initialize_carry", size)
        signal, features = size[:-1], size[-1]
        _deprecated(
            f"ConvLSTMCell.initialize_carry(rng, {_spell(batch_dims) if batch_dims else '()'}, "
            f"{_spell(size)})",
            f"ConvLSTMCell(features={features}, kernel_size=<kernel_size>"
            f"{_carry_init_note(init_fn)}).initialize_carry(rng, "
            f"{_spell(batch_dims + signal + ('<input channels>',))})",
            stacklevel=2,
        )
        return _pair_carry(rng, batch_dims + size, init_fn)


def _carry_maker(cell: _LegacyCell):
    """The static ``initialize_carry`` of ``cell``'s class, without its warning: ``RNN``
    calls it on every application, and only the user's own calls should warn."""
    if isinstance(cell, GRUCell):
        return lambda rng, batch_dims, size: _zeros(rng, batch_dims + (size,))
    return lambda rng, batch_dims, size: _pair_carry(
        rng, batch_dims + (size if isinstance(size, tuple) else (size,)), _zeros
    )


# -- RNN and Bidirectional ------------------------------------------------------------------


class RNN(Module):
    """The Flax 0.6.11 ``RNN``: a legacy cell run over time, its carry sized by ``cell_size``.

    Old API (Flax <= 0.6.11)::

        RNN(cell, cell_size, time_major=False, return_carry=False, reverse=False,
            keep_order=False, unroll=1)
        RNN(LSTMCell(), cell_size=64)
        RNN(ConvLSTMCell(64, kernel_size=(3, 3)), cell_size=(32, 32, 64))  # signal + features

    New API: ``RNN(LSTMCell(features=64))``; the cell knows its width, and the carry
    comes from ``cell.initialize_carry(rng, input_shape)``, so ``cell_size`` is gone.

    The carry is ``cell.initialize_carry(init_key, batch_dims, cell_size)`` with
    zeros (``init_key`` defaults to ``jax.random.PRNGKey(0)``), unless the call passes
    ``initial_carry``. Inputs are ``(*batch, time, *signal, channels)``, or ``(time, *batch,
    *signal, channels)`` with ``time_major``; the call takes the same keywords as
    ``rnnlib.RNN`` (``initial_carry``, ``init_key``, ``seq_lengths``, ``return_carry``,
    ``time_major``, ``reverse``, ``keep_order``). The scan, ``seq_lengths`` handling and
    numbers are ``rnnlib.RNN``'s; the variables are ``{'params': {'cell': {...}}}``.

    Arguments:
        cell: a cell from ``rnnlib.legacy``.
        cell_size: the hidden width, an int; for ``ConvLSTMCell``, the signal dims plus
            the features, e.g. ``(32, 32, 64)``.
        time_major, return_carry, reverse, keep_order, unroll: as in ``rnnlib.RNN``.
    """

    cell: _LegacyCell
    cell_size: int | tuple[int, ...]
    time_major: bool = False
    return_carry: bool = False
    reverse: bool = False
    keep_order: bool = False
    unroll: int = 1

    def __post_init__(self):
        if not isinstance(self.cell, _LegacyCell):
            hint = ""
            if isinstance(self.cell, rnnlib.RNNCellBase):
                hint = (
                    f": a new-API cell goes in rnnlib.RNN({describe(self.cell)}), without cell_size"
                )
            raise TypeError(
                "legacy.RNN expects a cell from rnnlib.legacy, such as legacy.LSTMCell(); got "
                f"{describe(self.cell)}{hint}."
            )
        owner = f"RNN({describe(self.cell)}, cell_size=...)"
        if isinstance(self.cell, ConvLSTMCell):
            size = _check_conv_size(owner, self.cell_size, "cell_size")
            rank = len(self.cell.new_cell().kernel_size)
            if len(size) != rank + 1 or size[-1] != self.cell.features:
                raise ValueError(
                    f"{owner} needs cell_size = {rank} signal dims + (features,) with "
                    f"features={self.cell.features}, such as "
                    f"{_spell(('<size>',) * rank + (self.cell.features,))}; got {size!r}."
                )
            object.__setattr__(self, "cell_size", size)
        else:
            _check_dense_size(owner, self.cell_size, "cell_size")
        check_flags("legacy.RNN", self)
        self.new_rnn()  # rnnlib.RNN checks unroll
        _deprecated(_old_spelling(self), _new_spelling(self), stacklevel=3)

    def new_rnn(self) -> rnnlib.RNN:
        """The new-API ``rnnlib.RNN`` this module runs on."""
        features = self.cell_size if isinstance(self.cell_size, int) else self.cell_size[-1]
        return rnnlib.RNN(
            self.cell.new_cell(features),
            time_major=self.time_major,
            return_carry=self.return_carry,
            reverse=self.reverse,
            keep_order=self.keep_order,
            unroll=self.unroll,
        )

    def _init(self, key, inputs, *, time_major=None, **unused):
        return self.new_rnn()._init(key, inputs, time_major=time_major)

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
        rnn = self.new_rnn()
        time_major = self.time_major if time_major is None else time_major
        if initial_carry is None:
            shape = tuple(np.shape(inputs))
            batch_dims, time_axis = split_axes(rnn.cell, shape, time_major, owner=self)
            self._check_cell_size(shape, batch_dims, time_axis)
            key = jax.random.PRNGKey(0) if init_key is None else init_key
            initial_carry = _carry_maker(self.cell)(key, tuple(batch_dims), self.cell_size)
        return rnn._call(
            params,
            inputs,
            initial_carry=initial_carry,
            seq_lengths=seq_lengths,
            return_carry=return_carry,
            time_major=time_major,
            reverse=reverse,
            keep_order=keep_order,
        )

    def _check_cell_size(self, shape, batch_dims, time_axis):
        if not isinstance(self.cell, ConvLSTMCell):
            return  # a dense carry batch_dims + (cell_size,) fits any input
        step = shape[:time_axis] + shape[time_axis + 1 :]
        signal = step[len(batch_dims) : -1]
        if tuple(self.cell_size[:-1]) != tuple(signal):
            raise ValueError(
                f"{describe(self)} makes carries shaped batch_dims + cell_size = "
                f"{tuple(batch_dims) + self.cell_size}, but inputs of shape {shape} have the "
                f"signal dims {tuple(signal)}, so the carry must be "
                f"{tuple(batch_dims) + tuple(signal) + (self.cell.features,)}: use "
                f"cell_size={tuple(signal) + (self.cell.features,)}."
            )


def _old_spelling(rnn: RNN) -> str:
    """How a legacy ``RNN`` was written in 0.6.11, e.g. ``RNN(LSTMCell(), cell_size=64)``."""
    return f"RNN({describe(rnn.cell)}, cell_size={rnn.cell_size!r}{_rnn_options(rnn)})"


def _new_spelling(rnn) -> str:
    """The new-API spelling of a legacy ``RNN``, e.g. ``RNN(LSTMCell(features=64))``."""
    if not isinstance(rnn, RNN):
        return describe(rnn)
    features = rnn.cell_size if isinstance(rnn.cell_size, int) else rnn.cell_size[-1]
    return f"RNN({rnn.cell._new_call(features)}{_rnn_options(rnn)})"


def _rnn_options(rnn: RNN) -> str:
    shown = ""
    for field in dataclasses.fields(RNN):
        if field.name in ("cell", "cell_size"):
            continue
        value = getattr(rnn, field.name)
        if value != field.default:
            shown += f", {field.name}={value!r}"
    return shown


class Bidirectional(rnnlib.Bidirectional):
    """The Flax 0.6.11 ``Bidirectional``: a forward and a backward ``RNN``, merged.

    Old API (Flax <= 0.6.11)::

        Bidirectional(forward_rnn, backward_rnn, merge_fn=concatenate, time_major=False,
                      return_carry=False)
        Bidirectional(RNN(LSTMCell(), cell_size=64), RNN(LSTMCell(), cell_size=64))

    New API: the same signature with new-API RNNs,
    ``Bidirectional(RNN(LSTMCell(features=64)), RNN(LSTMCell(features=64)))``.
    Everything else is ``rnnlib.Bidirectional``: the backward direction respects
    ``seq_lengths``, ``init_key`` is split in two, and two RNNs sharing one cell
    object share its parameters, which live under ``forward_rnn``.
    """

    def __post_init__(self):
        for name in ("forward_rnn", "backward_rnn"):
            rnn = getattr(self, name)
            if not isinstance(rnn, (RNN, rnnlib.RNN)):
                raise TypeError(
                    f"legacy.Bidirectional expects {name} to be an RNN (legacy.RNN(cell, "
                    f"cell_size) or rnnlib.RNN(cell)); got {type(rnn).__name__}."
                )
        old = f"Bidirectional({_old_spelling_any(self.forward_rnn)}, {_old_spelling_any(self.backward_rnn)})"
        new = (
            f"Bidirectional({_new_spelling(self.forward_rnn)}, {_new_spelling(self.backward_rnn)})"
        )
        _deprecated(old, new, stacklevel=3)


def _old_spelling_any(rnn) -> str:
    return _old_spelling(rnn) if isinstance(rnn, RNN) else describe(rnn)
