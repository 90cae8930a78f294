"""``RNNCellBase``: what every recurrent cell provides, and the checks they share.

A cell is one step of a recurrence, ``(carry, x) -> (carry, y)``. After FLIP 3099
a cell carries its own metadata: ``initialize_carry(rng, input_shape)`` builds the
carry from the shape of one step's input, and ``num_feature_axes`` says how many
trailing axes of that input the cell owns, ``(*signal, channels)`` (1 for dense
cells; ``len(signal) + 1`` for a ConvLSTM over a ``signal`` of spatial dims). ``RNN`` needs nothing more to
find the time axis of any input.

The contract: what a cell writes, and what ``RNN`` calls. Four methods are required:

- ``num_feature_axes``: a property, how many trailing axes of one step's input the
  cell owns;
- ``initialize_carry(rng, input_shape)``: the carry for one step's input of that shape;
- ``create_params(key, input_shape)``: the parameter dict, laid out as in flax.linen;
- ``step(weights, carry, projected) -> (carry, y)``: one step of the recurrence.

Three are optional, with defaults that suit a cell whose step does everything:

- ``param_shapes(input_shape)``: the shapes ``create_params`` makes, with
  ``jax.ShapeDtypeStruct`` leaves (default: traced from ``create_params``);
- ``prepare(params, input_shape) -> weights``: the parameters rearranged once per call,
  outside the loop, for steps of ``input_shape`` (default: ``params`` as they are). The
  built-in gated cells return ``Sides(input=..., hidden=...)``, the layers that read
  ``x`` and those that read ``h``, each fused in the form ``rnnlib.fast`` chooses;
- ``project_inputs(weights, inputs) -> projected``: the part of a step that ignores the
  carry (default: ``inputs`` as they are). ``RNN`` applies it either inside the loop, to
  one step, or before the loop, to every step at once (``RNN.hoist_inputs``), so it must
  accept any number of leading axes and return one type either way: an array, or a
  pytree of arrays that each carry those leading axes (the gated cells return
  ``rnnlib.fast.Gates``). ``step`` receives one step's ``projected``.

``RNN`` calls ``weights = prepare(params, step_shape)`` once, then ``step`` at every time
step on ``project_inputs(weights, x)``; a cell's own ``apply`` does the same for one
step. Nothing else is called: the rest of the class (``check_*``, ``feature_layout``)
is shared checking that a cell inherits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

from rnnlib.module import Module, check_params, describe

Carry = Any


class Sides(NamedTuple):
    """What a gated cell holds per side: for the layers that read the step's input
    ``x`` (``input``) and for those that read the carried ``h`` (``hidden``)."""

    input: Any
    hidden: Any


class RNNCellBase(Module):
    """Base class of recurrent cells: ``cell.apply(variables, carry, x) -> (carry, y)``.

    ``init(key, carry, x)`` creates the parameters for inputs shaped like ``x``;
    ``apply(variables, carry, x)`` runs one step. Both check their arguments and
    raise a ``ValueError`` naming the expected and received shapes.
    """

    def initialize_carry(self, rng, input_shape: Sequence[int]) -> Carry:
        """The initial carry for one step's input of shape ``input_shape``."""
        raise NotImplementedError(_missing(self, "initialize_carry"))

    @property
    def num_feature_axes(self) -> int:
        """The number of trailing axes of one step's input that the cell owns, ``(*signal, channels)``."""
        raise NotImplementedError(_missing(self, "num_feature_axes"))

    def create_params(self, key, input_shape: Sequence[int]) -> dict:
        """The parameter dict for one step's input of shape ``input_shape``."""
        raise NotImplementedError(_missing(self, "create_params"))

    def param_shapes(self, input_shape: Sequence[int]) -> dict:
        """The tree ``create_params(key, input_shape)`` returns, with ``jax.ShapeDtypeStruct``
        leaves; ``RNN`` checks the variables it is given against it on every trace.

        This default traces ``create_params``. The built-in cells write their shapes out
        instead: tracing their initializers (the orthogonal one runs a QR decomposition)
        took about 50 ms, a twentieth of the first call of a small training step. A
        subclass whose body defines ``create_params`` but not ``param_shapes`` gets this
        traced default back, so shapes written for its parent's parameters never stand
        for its own.
        """
        return jax.eval_shape(lambda: self.create_params(jax.random.key(0), tuple(input_shape)))

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "create_params" in vars(cls) and "param_shapes" not in vars(cls):
            cls.param_shapes = RNNCellBase.param_shapes

    def prepare(self, params: dict, input_shape: Sequence[int]) -> Any:
        """``params`` rearranged for steps whose input is shaped ``input_shape``; ``RNN``
        calls it once per call, outside the loop (default: ``params`` as they are)."""
        return params

    def project_inputs(self, weights, inputs):
        """The carry-independent part of a step, applied to any leading axes at once
        (default: ``inputs`` as they are)."""
        return inputs

    def step(self, weights, carry: Carry, projected) -> tuple[Carry, Any]:
        """One recurrence step on a projected input; returns ``(new_carry, output)``."""
        raise NotImplementedError(_missing(self, "step"))

    # -- shape checks shared by cells and RNN -------------------------------------------

    def check_input_shape(
        self, input_shape: Sequence[int], layout: str = "(*batch, *signal, channels)"
    ):
        """Raises if ``input_shape`` has fewer axes than this cell's feature axes."""
        input_shape = tuple(input_shape)
        if len(input_shape) < self.num_feature_axes:
            raise ValueError(
                f"{describe(self)} expects inputs shaped {self.feature_layout(layout)} "
                f"({self.num_feature_axes} feature axes); got shape {input_shape}, which has "
                f"only {len(input_shape)} axes."
            )

    def feature_layout(self, layout: str = "(*batch, *signal, channels)") -> str:
        """``layout`` with this cell's feature axes, ``*signal, channels``, spelled out:
        ``channels`` for a dense cell, ``height, width, channels`` for a 2-D ConvLSTM."""
        names = {
            1: "channels",
            2: "length, channels",
            3: "height, width, channels",
            4: "depth, height, width, channels",
        }
        return layout.replace(
            "*signal, channels", names.get(self.num_feature_axes, "*signal, channels")
        )

    def check_variables(self, params: dict, input_shape: Sequence[int], path: str = "params"):
        """Raises if ``params`` does not hold every parameter, at the right shape, that
        this cell needs for inputs of ``input_shape``."""
        check_params(self, params, self.param_shapes(tuple(input_shape)), path)

    def check_carry(self, carry: Carry, input_shape: Sequence[int], what: str = "carry"):
        """Raises if ``carry`` differs in structure or shapes from ``initialize_carry``'s."""
        expected = jax.eval_shape(
            lambda: self.initialize_carry(jax.random.key(0), tuple(input_shape))
        )
        want_leaves, want_tree = jax.tree_util.tree_flatten(expected)
        got_leaves, got_tree = jax.tree_util.tree_flatten(carry)
        want_shapes = jax.tree_util.tree_unflatten(want_tree, [x.shape for x in want_leaves])
        if got_tree != want_tree:
            raise ValueError(
                f"{describe(self)} expects the {what} to be structured like "
                f"initialize_carry(rng, {tuple(input_shape)}), i.e. shapes {want_shapes}; "
                f"got a {what} structured as {got_tree}."
            )
        got_shapes = [tuple(np.shape(x)) for x in got_leaves]
        if got_shapes != [tuple(x.shape) for x in want_leaves]:
            raise ValueError(
                f"{describe(self)} expects the {what} for inputs of shape {tuple(input_shape)} to "
                f"have shapes {want_shapes} (as initialize_carry gives); got "
                f"{jax.tree_util.tree_unflatten(got_tree, got_shapes)}."
            )

    # -- Module hooks ---------------------------------------------------------------------

    def _init(self, key, carry, inputs):
        self.check_input_shape(np.shape(inputs))
        return self.create_params(key, tuple(np.shape(inputs)))

    def _call(self, params, carry, inputs):
        shape = tuple(np.shape(inputs))
        self.check_input_shape(shape)
        self.check_variables(params, shape)
        self.check_carry(carry, shape)
        weights = self.prepare(params, shape)
        with jax.named_scope(type(self).__name__):
            return self.step(weights, carry, self.project_inputs(weights, inputs))


# What each hook every cell must write does, for the error raised when one is missing.
_REQUIRED = {
    "num_feature_axes": "a property giving how many trailing axes of one step's input it "
    "owns, (*signal, channels): 1 for a dense cell, len(signal) + 1 for a convolutional one",
    "initialize_carry": "initialize_carry(rng, input_shape) returns the carry for one step's "
    "input of that shape, each leaf starting with the batch dims input_shape[:-num_feature_axes]",
    "create_params": "create_params(key, input_shape) returns the parameter dict, laid out as "
    "in flax.linen",
    "step": "step(weights, carry, projected) runs one step and returns (new_carry, y)",
}


def _missing(cell, hook: str) -> str:
    return f"{type(cell).__name__} does not define {hook}, which every rnnlib cell must: " + (
        f"{_REQUIRED[hook]}."
    )


def check_features(cell, features) -> None:
    """Raises unless ``features`` is a positive int."""
    if isinstance(features, bool) or not isinstance(features, (int, np.integer)) or features < 1:
        raise ValueError(f"{type(cell).__name__} needs features >= 1 (an int); got {features!r}.")
