"""``RNNCellBase``: what a recurrent cell writes, and what rnnlib derives from it.

A cell is one step of a recurrence, ``(carry, x) -> (carry, y)``: it writes its carry
(``initialize_carry``), its layers by name (``layers``) and the rest of the step (``update``).
The rest is derived, so ``RNN`` can move a cell's matmuls without knowing the cell.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rnnlib import linear
from rnnlib.module import Module, check_params, describe


class RNNCellBase(Module):
    """Base class of recurrent cells: ``init(key, carry, x)`` creates the parameters for inputs
    shaped like ``x``, ``apply(variables, carry, x) -> (carry, y)`` runs one step; both raise a
    ``ValueError`` naming expected and received shapes. A subclass's annotated attributes are
    its fields, as in Flax; it needs no decorator.

    Every cell takes three keyword-only fields, declared here once:

    - ``dtype``: the dtype of the computation (``None``, the default: promoted from the inputs
      and the parameters, as in Flax);
    - ``param_dtype``: the dtype of the parameters and of the initial carry (float32);
    - ``carry_init``: the initializer of the carry's arrays (zeros).

    ``features``, the width of the carry, is each cell's first field; a cell that has none (its
    carry is not one width) writes ``initialize_carry`` itself. A subclass that declares a field
    one letter or two from these names (``param_dtyp``, ``feature``) is refused: the base would
    silently read its own default instead.
    """

    # Where XLA:CPU was measured to run this cell slower with each side's layers joined into one
    # matmul (cpu_slow_when_joined), and slower with the whole-sequence gradient rule than with
    # JAX's own derivative (cpu_slow_after_loop), as bands (rows per step from, to, features
    # above, up to): Plan's defaults avoid them (benchmarks/README.md, "One matmul per layer
    # inside bands of widths" and "Where the rule does not pay"). A cell never measured has
    # none; a subclass has its parent's.
    cpu_slow_when_joined: ClassVar[tuple] = ()
    cpu_slow_after_loop: ClassVar[tuple] = ()
    # Whether the step is linear in the carry, h' = a_t * h + b_t (rnnlib.LinearCellBase), so
    # that it can also run as one associative scan.
    linear_in_carry: ClassVar[bool] = False

    features: ClassVar[int | None] = None  # a cell with a width declares it as a field
    dtype: Any = dataclasses.field(default=None, kw_only=True)
    param_dtype: Any = dataclasses.field(default=jnp.float32, kw_only=True)
    carry_init: Callable[..., Any] = dataclasses.field(
        default=jax.nn.initializers.zeros, kw_only=True
    )

    def __init_subclass__(cls, **kwargs):
        own = vars(cls).get("__annotations__", {})
        for name in own:
            _check_spelling(cls, name)
        if "features" in own and "features" not in vars(cls):  # required, not the base's None
            cls.features = dataclasses.field()
        for name in _KEYWORD_ONLY.intersection(own):  # a new default keeps it keyword-only
            default = vars(cls).get(name, dataclasses.MISSING)
            if not isinstance(default, dataclasses.Field):
                setattr(cls, name, dataclasses.field(default=default, kw_only=True))
        super().__init_subclass__(**kwargs)

    def __post_init__(self):
        n = self.features
        if n is not None and (isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1):
            raise ValueError(f"{type(self).__name__} needs features >= 1 (an int); got {n!r}.")
        for name in ("dtype", "param_dtype"):
            dtype = getattr(self, name)
            if dtype is not None and not _inexact(dtype):
                raise TypeError(
                    f"{type(self).__name__} needs {name} to be a floating or complex dtype, such "
                    f"as jnp.float32 or jnp.bfloat16 (or None to promote from the inputs); got "
                    f"{name}={dtype!r}. Integer parameters would truncate the kernels."
                )

    @property
    def inner(self) -> RNNCellBase:
        """The cell whose layers and ``update`` this one runs. That is the cell itself, or
        for a wrapper (``RecurrentDropoutCell``) the wrapped cell's ``inner``."""
        return self

    def initialize_carry(self, rng, input_shape: Sequence[int]) -> Any:
        """The initial carry for one step's input of shape ``input_shape``: by default
        ``h``, ``(*batch, features)``, from ``carry_init`` (zeros) with ``rng`` whole."""
        if self.features is None:
            raise NotImplementedError(_missing(self, "initialize_carry"))
        shape = tuple(input_shape[:-1]) + (self.features,)
        return self.carry_init(rng, shape, self.param_dtype)

    def layers(self, input_shape: Sequence[int]) -> dict:
        """The layers by name (``Dense``, ``Conv``, ``Param``) for steps of ``input_shape``."""
        raise NotImplementedError(_missing(self, "layers"))

    def update(self, carry, a: dict) -> tuple:
        """The step from the layers' outputs ``a`` (by name) to ``(new_carry, y)``."""
        raise NotImplementedError(_missing(self, "update"))

    @property
    def num_feature_axes(self) -> int:
        """How many trailing axes of one step's input the cell owns, ``(*signal, channels)``."""
        return 1

    def hidden(self, carry):
        """What the layers reading ``"h"`` read: the carry, or its last item."""
        return carry[-1] if isinstance(carry, (tuple, list)) else carry

    def create_params(self, key, input_shape: Sequence[int]) -> dict:
        """The parameter dict for one step's input of shape ``input_shape``, from ``layers``."""
        return linear.create(self.layers(tuple(input_shape)), key, self.param_dtype)

    def param_shapes(self, input_shape: Sequence[int]) -> dict:
        """The tree ``create_params`` returns, with ``jax.ShapeDtypeStruct`` leaves (none drawn)."""
        shape_only = lambda _, key, shape, dtype: jax.ShapeDtypeStruct(shape, dtype)  # noqa: E731
        layers = self.layers(tuple(input_shape))
        return linear.create(layers, jax.random.key(0), self.param_dtype, shape_only)

    def bind(self, params: dict, input_shape: Sequence[int], join: bool = False) -> Bound:
        """The step with ``params`` for inputs of ``input_shape``; with ``join``, the dense
        layers that read the same input run as one matmul (``rnnlib.linear.groups``)."""
        layers = self.layers(tuple(input_shape))
        constants = {n: params[n] for n, la in layers.items() if isinstance(la, linear.Param)}
        groups = (linear.groups(layers, params, reads, join) for reads in ("x", "h"))
        return Bound(self, *groups, constants)

    def check_input_shape(self, shape: Sequence[int], layout="(*batch, *signal, channels)"):
        """Raises if ``shape`` has fewer axes than this cell's feature axes."""
        if len(shape) < self.num_feature_axes:
            raise ValueError(
                f"{describe(self)} expects inputs shaped {self.feature_layout(layout)} "
                f"({self.num_feature_axes} feature axes); got shape {tuple(shape)}, which has "
                f"only {len(shape)} axes."
            )

    def feature_layout(self, layout: str = "(*batch, *signal, channels)") -> str:
        """``layout`` with the feature axes spelled out (``height, width, channels`` in 2-D)."""
        signal = ("", "length, ", "height, width, ", "depth, height, width, ")
        n = self.num_feature_axes
        return layout.replace("*signal, ", signal[n - 1] if n <= len(signal) else "*signal, ")

    def check_variables(self, params: dict, input_shape: Sequence[int], path: str = "params"):
        """Raises unless ``params`` holds every parameter of this cell, at its shape."""
        check_params(self, params, self.param_shapes(tuple(input_shape)), path)

    def check_carry(self, carry, input_shape: Sequence[int], what: str = "carry"):
        """Raises if ``carry`` differs in structure or shapes from ``initialize_carry``'s."""
        shape = tuple(input_shape)
        want = jax.eval_shape(lambda: self.initialize_carry(jax.random.key(0), shape))
        same = jax.tree_util.tree_structure(carry) == jax.tree_util.tree_structure(want)
        got, want = (jax.tree_util.tree_map(lambda x: tuple(np.shape(x)), t) for t in (carry, want))
        if not same or got != want:
            raise ValueError(
                f"{describe(self)} expects the {what} for inputs of shape {shape} to have shapes "
                f"{want} (as initialize_carry gives); got {got}."
            )

    def _init(self, key, carry, inputs):
        self.check_input_shape(np.shape(inputs))
        return self.create_params(key, tuple(np.shape(inputs)))

    def _call(self, params, carry, inputs):
        shape = tuple(np.shape(inputs))
        self.check_input_shape(shape)
        self.check_variables(params, shape)
        self.check_carry(carry, shape)
        with jax.named_scope(type(self).__name__):
            return self.bind(params, shape)(carry, inputs)


class Bound(NamedTuple):
    """A cell's step with its parameters: its layers (in groups) and its ``Param`` values."""

    cell: RNNCellBase
    x_groups: list
    h_groups: list
    constants: dict

    def inputs(self, x, bias: bool = True):
        """The outputs of the layers that read ``x`` (of any leading axes), one per group."""
        return linear.run(self.x_groups, x, self.cell.inner.dtype, bias)

    def step(self, carry, x_outs):
        """One step from the outputs of the layers that read ``x``: ``(new_carry, y)``."""
        return self.cell.update(carry, self.outputs(carry, x_outs))

    def outputs(self, carry, x_outs) -> dict:
        """``update``'s ``a`` at ``carry``: the layers that read ``h`` run on ``hidden(carry)``."""
        h_outs = linear.run(self.h_groups, self.cell.hidden(carry), self.cell.inner.dtype)
        return self.named(x_outs, h_outs)

    def named(self, x_outs, h_outs, constants=None) -> dict:
        """``update``'s ``a``: every layer's output by name."""
        a = {**linear.by_name(self.x_groups, x_outs), **linear.by_name(self.h_groups, h_outs)}
        return {**a, **(self.constants if constants is None else constants)}

    def __call__(self, carry, x):
        return self.step(carry, self.inputs(x))


def _inexact(dtype) -> bool:
    try:
        return jnp.issubdtype(jnp.dtype(dtype), jnp.inexact)
    except TypeError:  # not a dtype at all
        return False


_REQUIRED = {  # what each hook a cell must write does, for the error when one is missing
    "initialize_carry": "initialize_carry(rng, input_shape) returns the carry for one step's input "
    "of that shape, each leaf starting with the batch dims input_shape[:-num_feature_axes]",
    "layers": "layers(input_shape) returns its layers by name, each an rnnlib.linear.Dense or Conv "
    "reading 'x' or 'h', or a Param",
    "update": "update(carry, a) returns (new_carry, y) from a, each layer's output by name",
}


def _missing(cell, hook: str) -> str:
    does = _REQUIRED[hook]
    if hook == "initialize_carry":  # the base's default needs features
        return (
            f"{type(cell).__name__} has no features field and does not define initialize_carry: "
            "a cell whose carry is one array (*batch, features) declares features: int as its "
            f"first field, any other carry needs initialize_carry, where {does}."
        )
    return f"{type(cell).__name__} does not define {hook}, which every rnnlib cell must: {does}."


_KEYWORD_ONLY = {"dtype", "param_dtype", "carry_init"}
_SHARED = {"features", *_KEYWORD_ONLY}  # what the base reads


def _check_spelling(cls, name: str) -> None:
    """Raises for a field named within a letter or two of a field the base reads (and not the
    name with a word added, like ``in_features``): the base would use its own default."""
    affixed = any(name.startswith(f + "_") or name.endswith("_" + f) for f in _SHARED)
    near = difflib.get_close_matches(name, _SHARED - {name}, n=1, cutoff=0.8)
    if near and not affixed:
        raise TypeError(
            f"{cls.__name__} declares a field {name!r}, which RNNCellBase does not read; "
            f"did you mean {near[0]!r}? The base reads {sorted(_SHARED)}, and with the "
            f"misspelt name it would use its own default for {near[0]!r}."
        )
