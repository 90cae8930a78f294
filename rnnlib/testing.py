"""``check_cell_contract``: does a recurrent cell meet what ``RNN`` and ``Bidirectional`` need?

A cell, flax.linen's or rnnlib's, is one step ``(carry, x) -> (carry, y)``. The modules that
run it over a sequence rely on a few promises it never states in code. This module checks
them, one part at a time, and names the first part a cell breaks::

    from rnnlib.testing import check_cell_contract

    report = check_cell_contract(MyCell(features=8), input_shape=(2, 3, 5))
    print(report)   # ✔ MyCell(features=8) meets the cell contract for steps shaped ...

``input_shape`` is the shape of one step's input, ``(*batch, *signal, channels)`` with at least
two batch dims (so that several batch dims are checked). The parts, in the order they are
checked (``PARTS``):

1. ``num_feature_axes``: an int >= 1, the number of trailing axes of one step's input
   that the cell owns, ``(*signal, channels)`` (1 for a dense cell, ``len(signal) + 1`` for
   a ConvLSTM).
2. ``initialize_carry``: ``initialize_carry(rng, input_shape)`` returns a pytree of
   arrays, each leaf starting with the batch dims ``input_shape[:-num_feature_axes]``,
   and follows ``input_shape`` when the batch dims change.
3. ``one step``: the cell's call returns ``(carry, y)``; the new carry has the structure,
   shapes and dtypes of the old one, and ``y`` starts with the batch dims (for an rnnlib
   cell ``y`` is one array: ``RNN`` moves its time axis with ``jnp.moveaxis``). An rnnlib
   cell's call is its ``layers`` and its ``update`` (``rnnlib.cell_base``), which parts 4
   to 8 run in ``RNN`` under its default plan.
4. ``batch dims``: ``RNN`` over inputs with several batch dims gives, for every sequence,
   the outputs and final carry of that sequence run alone, step by step.
5. ``time_major``: ``RNN(time_major=True)`` on the time-major input gives the same numbers.
6. ``seq_lengths``: with ``seq_lengths`` and ``return_carry``, the outputs at valid steps
   are those of the sequence alone, and the carry is the one after each sequence's last
   valid step (the initial carry for a sequence of length 0).
7. ``Bidirectional``: it runs with ``seq_lengths``; its backward half at the valid steps is
   the sequence's valid part run backwards, and both carries are right.
8. ``jit and grad``: ``jax.jit`` gives the same numbers, and ``jax.grad`` gives finite
   gradients for every parameter and for the input.

Comparisons allow what rounding explains and nothing more, by the book's one rule::

    |got - expected| <= 4 * eps(dtype) * sqrt(terms) * scale     for every element

``eps`` is the machine epsilon of the compared array's dtype, ``scale`` the largest
``|expected|`` of that array, and ``terms`` the number of rounded terms that feed one
element. The check cannot see inside a cell, so by default it counts a generous bound:
``steps * (input elements + carry elements + 1)`` per sequence, as if each step summed
every number it reads. A bug moves values by far more than that bound; pass ``terms``
to tighten it.

A flax.linen cell runs in ``flax.linen.RNN`` and ``flax.linen.Bidirectional``, an rnnlib
cell in rnnlib's. Flax 0.12's ``RNN`` picks the last carry with an index written for one
batch dim, and returns the last step's carry for a sequence of length 0 (whatever the
cell); so for a flax.linen cell parts 6 and 7 flatten the batch dims into one and use no
empty sequence, and the report says so.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rnnlib.cell_base import RNNCellBase
from rnnlib.module import describe, flax_family

SLACK = 4.0

#: The parts of the contract, in the order ``check_cell_contract`` checks them; a
#: ``CellContractError`` names the part that broke with one of these.
PARTS = (
    "num_feature_axes",
    "initialize_carry",
    "one step",
    "batch dims",
    "time_major",
    "seq_lengths",
    "Bidirectional",
    "jit and grad",
)

FLAX_NOTE = (
    "flax.linen: seq_lengths and Bidirectional ran with the batch dims flattened into one "
    "and no empty sequence (flax.linen.RNN's last-carry index assumes one batch dim and "
    "reads length 0 as the last step, whatever the cell)."
)


class CellContractError(AssertionError):
    """A cell broke one part of the contract; ``part`` is its name in ``PARTS``."""

    def __init__(self, cell, part: str, problem: str):
        self.part = part
        self.problem = problem
        super().__init__(f"{describe(cell)} breaks the cell contract, part '{part}': {problem}")


@dataclasses.dataclass(frozen=True)
class CellContractReport:
    """What ``check_cell_contract`` checked: the cell, the step shape, the parts, and notes."""

    cell: str
    input_shape: tuple[int, ...]
    parts: tuple[str, ...] = PARTS
    notes: tuple[str, ...] = ()

    def __str__(self) -> str:
        lines = [
            f"✔ {self.cell} meets the cell contract for steps shaped {self.input_shape}: "
            + ", ".join(self.parts)
            + "."
        ]
        return "\n".join(lines + [f"  note: {note}" for note in self.notes])

    __repr__ = __str__


def check_cell_contract(
    cell,
    input_shape: Sequence[int],
    *,
    steps: int = 5,
    seed: int = 0,
    terms: int | None = None,
) -> CellContractReport:
    """Checks that ``cell`` works in ``RNN`` and ``Bidirectional``; raises on the first break.

    Arguments:
        cell: a flax.linen ``RNNCellBase`` or an rnnlib ``RNNCellBase``, unbound.
        input_shape: one step's input, ``(*batch, *signal, channels)``, with at least two
            batch dims. The check draws inputs of this shape (float32, seeded).
        steps: the length of the sequences it runs (at least 2).
        seed: seeds the inputs, the variables and the initial carries.
        terms: rounded terms per element in the tolerance rule (see the module docstring);
            default ``steps * (input elements + carry elements + 1)`` per sequence.

    Returns a ``CellContractReport`` (print it) when every part in ``PARTS`` holds.
    Raises ``CellContractError``, an ``AssertionError``, naming the part that failed and
    what was expected and received. Raises ``TypeError`` or ``ValueError`` when the
    arguments themselves are wrong (not a cell, too few batch dims, ``steps < 2``).
    """
    lib = _library(cell)
    check = _Check(cell, lib, tuple(int(n) for n in input_shape), steps, seed, terms)
    for part, run in check.parts():
        try:
            run()
        except Exception as error:  # a cell may raise anything; name it and its part
            if isinstance(error, CellContractError) or getattr(error, "_check_argument", False):
                raise
            raise CellContractError(cell, part, _raised(error)) from error
    notes = (FLAX_NOTE,) if lib.name == "flax.linen" else ()
    return CellContractReport(describe(cell), check.input_shape, PARTS, notes)


# -- the libraries ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Library:
    name: str
    rnn: Any
    bidirectional: Any
    clone: Any
    flat_seq_lengths: bool  # run seq_lengths parts with one batch dim and no length 0


def _library(cell) -> _Library:
    if isinstance(cell, RNNCellBase):
        import rnnlib

        return _Library("rnnlib", rnnlib.RNN, rnnlib.Bidirectional, copy.copy, False)
    family = flax_family(cell)
    if family == "flax.linen":
        import flax.linen as nn

        return _Library("flax.linen", nn.RNN, nn.Bidirectional, lambda c: c.clone(), True)
    raise _argument_error(
        TypeError,
        "check_cell_contract expects a flax.linen or rnnlib cell (a subclass of "
        "flax.linen.RNNCellBase or rnnlib.RNNCellBase); got "
        f"{type(cell).__module__}.{type(cell).__qualname__}.",
    )


def _argument_error(kind, message):
    error = kind(message)
    error._check_argument = True  # the caller's mistake, not the cell's: raised as it is
    return error


def _raised(error) -> str:
    text = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
    if len(text) > 400:
        text = text[:400] + " ..."
    return f"running it raised {type(error).__name__}: {text or '(no message)'}"


# -- the parts --------------------------------------------------------------------------


class _Check:
    def __init__(self, cell, lib, input_shape, steps, seed, terms):
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 2:
            raise _argument_error(
                ValueError, f"check_cell_contract needs steps >= 2 (an int); got {steps!r}."
            )
        self.cell, self.lib, self.input_shape, self.steps = cell, lib, input_shape, steps
        self.seed = seed
        keys = jax.random.split(jax.random.key(seed), 3)
        self.keys = dict(zip(("params", "carry", "other"), keys))
        self.user_terms = terms

    def parts(self):
        runs = (
            self.feature_axes,
            self.initial_carry,
            self.one_step,
            self.batch_dims,
            self.time_major,
            self.seq_lengths,
            self.bidirectional,
            self.jit_and_grad,
        )
        return zip(PARTS, runs)

    def fail(self, part, problem):
        raise CellContractError(self.cell, part, problem)

    # 1
    def feature_axes(self):
        try:
            n = self.cell.num_feature_axes
        except NotImplementedError as error:
            detail = f" ({error})" if str(error) else ""
            self.fail(
                "num_feature_axes",
                f"reading cell.num_feature_axes raised NotImplementedError{detail}; expected "
                "a property returning an int >= 1, the number of trailing axes of one step's "
                "input the cell owns, (*signal, channels): 1 for a dense cell, len(signal) + 1 "
                "for a convolutional one.",
            )
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            self.fail(
                "num_feature_axes",
                f"expected an int >= 1 (the number of trailing feature axes); got {n!r}.",
            )
        self.features_n = int(n)
        batch = self.input_shape[: len(self.input_shape) - self.features_n]
        if len(self.input_shape) < self.features_n + 2:
            raise _argument_error(
                ValueError,
                "check_cell_contract needs input_shape = (*batch, *signal, channels) with at least "
                f"two batch dims, to check several; got {self.input_shape}, which has "
                f"{max(len(self.input_shape) - self.features_n, 0)} for a cell with "
                f"num_feature_axes = {self.features_n}.",
            )
        self.batch = batch
        self.feature_shape = self.input_shape[len(batch) :]
        # NumPy draws the inputs: a jax.random draw compiles a program for every new shape.
        shape = batch + (self.steps,) + self.feature_shape
        self.x = jnp.asarray(np.random.default_rng(self.seed).standard_normal(shape, np.float32))

    # 2
    def initial_carry(self):
        part = "initialize_carry"
        self.carry = self._carry_for(self.input_shape, self.batch, part)
        for batch in (tuple(n + 1 for n in self.batch), (2,) + self.batch):
            shape = batch + self.feature_shape
            other = self._carry_for(shape, batch, part)
            want = _tail_shapes(self.carry, len(self.batch))
            got = _tail_shapes(other, len(batch))
            if jax.tree_util.tree_structure(other) != jax.tree_util.tree_structure(self.carry):
                self.fail(
                    part,
                    f"initialize_carry(rng, {shape}) returned a carry structured as "
                    f"{jax.tree_util.tree_structure(other)}, but for {self.input_shape} "
                    f"{jax.tree_util.tree_structure(self.carry)}; expected the same structure "
                    "for any batch dims.",
                )
            if got != want:
                self.fail(
                    part,
                    f"after the batch dims, the carry for input_shape {shape} has shapes "
                    f"{got}, but for {self.input_shape} {want}; expected the same: only the "
                    "batch dims may follow input_shape.",
                )
        self.terms = self.user_terms or self.steps * (
            math.prod(self.feature_shape) + sum(math.prod(s) for s in want) + 1
        )

    def _carry_for(self, shape, batch, part):
        carry = self.cell.initialize_carry(self.keys["carry"], shape)
        if not _leaves(carry):
            self.fail(
                part,
                f"initialize_carry(rng, {shape}) returned {carry!r}, a carry with no arrays; "
                "expected an array or a pytree of arrays (e.g. a tuple (c, h)).",
            )
        for where, leaf in _with_paths(carry):
            if not hasattr(leaf, "shape") or not hasattr(leaf, "dtype"):
                self.fail(
                    part,
                    f"initialize_carry(rng, {shape}) returned a carry whose {where} is "
                    f"a {type(leaf).__name__}; expected arrays.",
                )
            if tuple(leaf.shape[: len(batch)]) != batch:
                self.fail(
                    part,
                    f"initialize_carry(rng, {shape}) returned {where} of shape "
                    f"{tuple(leaf.shape)}; expected it to start with the batch dims {batch} "
                    f"(input_shape[:-num_feature_axes]), i.e. shaped ({', '.join(map(str, batch))}, ...). "
                    "A carry must have the batch dims of input_shape in front, whatever "
                    "they are.",
                )
        return carry

    # 3
    def one_step(self):
        part = "one step"
        x0 = self.x[(slice(None),) * len(self.batch) + (0,)]
        self.cell_variables = self.cell.init(self.keys["params"], self.carry, x0)
        result = self.cell.apply(self.cell_variables, self.carry, x0)
        if not isinstance(result, tuple) or len(result) != 2:
            self.fail(
                part,
                f"expected the cell's call to return a pair (carry, y); got "
                f"{type(result).__name__}"
                + (f" of length {len(result)}." if isinstance(result, tuple) else "."),
            )
        new_carry, y = result
        want_tree = jax.tree_util.tree_structure(self.carry)
        if jax.tree_util.tree_structure(new_carry) != want_tree:
            self.fail(
                part,
                f"the carry returned by one step is structured as "
                f"{jax.tree_util.tree_structure(new_carry)}; expected {want_tree}, the "
                "structure of initialize_carry's.",
            )
        for (where, old), new in zip(_with_paths(self.carry), _leaves(new_carry)):
            if tuple(np.shape(new)) != tuple(old.shape):
                self.fail(
                    part,
                    f"one step turned {where} of shape {tuple(old.shape)} into "
                    f"shape {tuple(np.shape(new))}; expected the same shape (lax.scan needs "
                    "a carry that keeps its shapes).",
                )
            if jnp.result_type(new) != jnp.result_type(old):
                self.fail(
                    part,
                    f"one step turned {where} of dtype {jnp.result_type(old)} into "
                    f"{jnp.result_type(new)}; expected the same dtype (make initialize_carry "
                    "return the dtype the step computes in).",
                )
        if self.lib.name == "rnnlib" and not hasattr(y, "shape"):
            self.fail(
                part,
                f"y is a {type(y).__name__}; expected one array (rnnlib.RNN moves the "
                "outputs' time axis with jnp.moveaxis).",
            )
        for where, leaf in _with_paths(y, "y"):
            if tuple(np.shape(leaf)[: len(self.batch)]) != self.batch:
                self.fail(
                    part,
                    f"{where} has shape {tuple(np.shape(leaf))}; expected it to start with "
                    f"the batch dims {self.batch} of the input {tuple(x0.shape)}.",
                )
        self.params = {"cell": self.cell_variables["params"]}
        self.xn = np.asarray(self.x)
        self._loop = None

    # 4
    def batch_dims(self):
        part = "batch dims"
        rnn = self.lib.rnn(self.cell, return_carry=True)
        made = jax.eval_shape(lambda: rnn.init(self.keys["params"], self.x))["params"]
        self._same_shapes(part, "RNN.init", "cell.init's, under 'cell'", made, self.params)
        carry, y = _numpy(jax.jit(rnn.apply)({"params": self.params}, self.x))
        # RNN's default carry: initialize_carry(jax.random.key(0), step_shape).
        self.start = _numpy(self.cell.initialize_carry(jax.random.key(0), self.input_shape))
        self.alone = {}
        for index in np.ndindex(*self.batch):
            runs = self._alone(self.cell_variables, index)
            self.alone[index] = runs
            what = f"sequence {list(index)}"
            reference = "the sequence run alone, step by step"
            self._close(part, f"RNN's outputs for {what}", _at(y, index), runs.outputs, reference)
            self._close(
                part, f"RNN's final carry for {what}", _at(carry, index), runs.carry(-1), reference
            )

    def _alone(self, variables, index, length=None):
        """The sequence at batch ``index`` run alone (a batch of one) by an unrolled loop.

        With ``length``, its first ``length`` steps are read last to first (the steps
        after them follow, in order, and change nothing before them).
        """
        nb = len(self.batch)
        xs = self.xn[tuple(slice(i, i + 1) for i in index)]
        if length is not None:
            order = list(reversed(range(length))) + list(range(length, self.steps))
            xs = np.take(xs, order, axis=nb)
        if self._loop is None:
            self._loop = jax.jit(self._unrolled)
        carries, outputs = _numpy(self._loop(variables, _keep(self.start, index), xs))
        return _Alone(outputs, carries)

    def _unrolled(self, variables, carry, xs):
        nb = len(self.batch)
        carries, outputs = [carry], []
        for t in range(self.steps):
            carry, y = self.cell.apply(variables, carry, xs[(slice(None),) * nb + (t,)])
            carries.append(carry)
            outputs.append(y)

        def stack(*leaves):
            return jnp.stack([leaf.reshape(leaf.shape[nb:]) for leaf in leaves])

        return jax.tree_util.tree_map(stack, *carries), jax.tree_util.tree_map(stack, *outputs)

    # 5
    def time_major(self):
        part = "time_major"
        rnn = self.lib.rnn(self.cell, time_major=True, return_carry=True)
        nb = len(self.batch)
        x = jnp.moveaxis(self.x, nb, 0)
        carry, y = _numpy(rnn.apply({"params": self.params}, x, initial_carry=self.start))
        y = jax.tree_util.tree_map(lambda a: np.moveaxis(a, 0, nb), y)
        for index, runs in self.alone.items():
            what = f"sequence {list(index)}"
            reference = "the sequence run alone"
            self._close(
                part,
                f"RNN(time_major=True)'s outputs for {what}",
                _at(y, index),
                runs.outputs,
                reference,
            )
            self._close(
                part,
                f"RNN(time_major=True)'s final carry for {what}",
                _at(carry, index),
                runs.carry(-1),
                reference,
            )

    def _lengths(self):
        count = math.prod(self.batch)
        cycle = [self.steps, 0, 1, self.steps - 1] + list(range(2, self.steps - 1))
        if self.lib.flat_seq_lengths:
            cycle = [n for n in cycle if n > 0]
        return np.array([cycle[i % len(cycle)] for i in range(count)]).reshape(self.batch)

    def _flat(self, tree):
        """Leaves with the batch dims flattened into one, for flax.linen's RNN."""
        if not self.lib.flat_seq_lengths:
            return tree
        nb = len(self.batch)
        return jax.tree_util.tree_map(lambda a: a.reshape((-1,) + a.shape[nb:]), tree)

    def _unflat(self, tree):
        tree = _numpy(tree)
        if not self.lib.flat_seq_lengths:
            return tree
        return jax.tree_util.tree_map(lambda a: a.reshape(self.batch + a.shape[1:]), tree)

    # 6
    def seq_lengths(self):
        part = "seq_lengths"
        self.lengths = lengths = self._lengths()
        rnn = self.lib.rnn(self.cell, return_carry=True)
        carry, y = self._unflat(
            rnn.apply(
                {"params": self.params},
                self._flat(self.x),
                initial_carry=self._flat(self.start),
                seq_lengths=jnp.asarray(self._flat(lengths)),
            )
        )
        self.with_lengths = (carry, y)
        for index, runs in self.alone.items():
            n = int(lengths[index])
            what = f"sequence {list(index)} (length {n} of {self.steps})"
            if n:
                self._close(
                    part,
                    f"RNN's outputs at the valid steps of {what}",
                    _first(_at(y, index), n),
                    _first(runs.outputs, n),
                    "the valid steps run alone",
                )
            after = (
                f"the carry after step {n} of the sequence alone"
                if n
                else ("the initial carry (no valid step)")
            )
            self._close(
                part, f"RNN's returned carry for {what}", _at(carry, index), runs.carry(n), after
            )

    # 7
    def bidirectional(self):
        part = "Bidirectional"
        bi = self.lib.bidirectional(
            self.lib.rnn(self.cell), self.lib.rnn(self.lib.clone(self.cell)), return_carry=True
        )
        x, lengths = self._flat(self.x), jnp.asarray(self._flat(self.lengths))
        start = self._flat(self.start)
        kwargs = dict(seq_lengths=lengths, initial_carry=(start, start))
        # Both directions get the RNN's parameters: the forward references are then the
        # runs already made for part 4, and only the backward ones are new.
        made = jax.eval_shape(lambda: bi.init(self.keys["other"], x, **kwargs))["params"]
        params = {name: self.params for name in ("forward_rnn", "backward_rnn")}
        self._same_shapes(part, "Bidirectional.init", "RNN.init's, per direction", made, params)
        apply = jax.jit(lambda p, x: bi.apply({"params": p}, x, **kwargs))
        (carry_f, carry_b), y = self._unflat(apply(params, x))
        for index, ahead in self.alone.items():
            n = int(self.lengths[index])
            what = f"sequence {list(index)} (length {n} of {self.steps})"
            back = self._alone(self.cell_variables, index, length=n)
            self._close(
                part,
                f"the forward carry for {what}",
                _at(carry_f, index),
                ahead.carry(n),
                "the valid steps run alone",
            )
            self._close(
                part,
                f"the backward carry for {what}",
                _at(carry_b, index),
                back.carry(n),
                "the valid steps run alone, last to first",
            )
            if not n:
                continue
            want_f = _first(ahead.outputs, n)
            want_b = jax.tree_util.tree_map(lambda a, n=n: a[:n][::-1], back.outputs)
            width = _leaves(want_f)[0].shape[-1]
            got = _first(_at(y, index), n)
            self._close(
                part,
                f"the forward half of Bidirectional's outputs for {what}",
                jax.tree_util.tree_map(lambda a, w=width: a[..., :w], got),
                want_f,
                "the valid steps run alone",
            )
            self._close(
                part,
                f"the backward half of Bidirectional's outputs for {what}",
                jax.tree_util.tree_map(lambda a, w=width: a[..., w:], got),
                want_b,
                "the valid steps run alone, last to first, then flipped back",
            )

    # 8
    def jit_and_grad(self):
        part = "jit and grad"
        rnn = self.lib.rnn(self.cell, return_carry=True)
        lengths = jnp.asarray(self._flat(self.lengths))
        x, start = self._flat(self.x), self._flat(self.start)

        def run(params, x):
            return rnn.apply({"params": params}, x, initial_carry=start, seq_lengths=lengths)

        def loss(params, x):
            return sum(jnp.sum(jnp.abs(a) ** 2) for a in _leaves(run(params, x)))

        both = jax.jit(lambda p, x: (run(p, x), jax.grad(loss, argnums=(0, 1))(p, x)))
        outputs, grads = both(self.params, x)
        self._close(
            part,
            "jax.jit(RNN.apply)'s carry and outputs",
            self._unflat(outputs),
            self.with_lengths,
            "the same call without jit (part seq_lengths)",
        )
        grads = _numpy(grads)
        for where, leaf in _with_paths(grads[0], "params"):
            if not np.all(np.isfinite(leaf)):
                self.fail(
                    part,
                    f"the gradient of {where} holds non-finite values; expected finite "
                    "gradients for every parameter.",
                )
        if not np.all(np.isfinite(grads[1])):
            self.fail(
                part,
                "the gradient with respect to the input holds non-finite values; expected "
                "finite values.",
            )

    def _same_shapes(self, part, made_by, want_by, made, want):
        """Raises unless the parameter trees ``made`` and ``want`` have the same shapes."""
        shapes = [jax.tree_util.tree_map(lambda a: tuple(a.shape), t) for t in (made, want)]
        if shapes[0] != shapes[1]:
            self.fail(
                part,
                f"{made_by} made parameters shaped {shapes[0]}; expected the same as "
                f"{want_by}, {shapes[1]}.",
            )

    # -- comparisons --------------------------------------------------------------------

    def _close(self, part, what, got, want, reference):
        got_tree, want_tree = (jax.tree_util.tree_structure(t) for t in (got, want))
        if got_tree != want_tree:
            self.fail(
                part, f"{what} is structured as {got_tree}; expected {want_tree} ({reference})."
            )
        for (where, w), g in zip(_with_paths(want, ""), _leaves(got)):
            label = f"{what}{where}"
            if tuple(np.shape(g)) != tuple(np.shape(w)):
                self.fail(
                    part,
                    f"{label} has shape {tuple(np.shape(g))}; expected "
                    f"{tuple(np.shape(w))} ({reference}).",
                )
            g64, w64 = (
                np.asarray(a).astype(np.complex64 if np.iscomplexobj(a) else np.float32)
                for a in (g, w)
            )
            scale = float(np.max(np.abs(w64), initial=0.0))
            limit = SLACK * _eps(w) * math.sqrt(self.terms) * scale
            error = np.abs(g64 - w64)
            if np.isnan(error).any() or float(np.max(error, initial=0.0)) > limit:
                at = np.unravel_index(int(np.argmax(np.nan_to_num(error, nan=np.inf))), error.shape)
                at = tuple(int(i) for i in at)
                self.fail(
                    part,
                    f"{label} differs from {reference}: at index {list(at)} got "
                    f"{g64[at]:.6g}, expected {w64[at]:.6g} (difference "
                    f"{float(error[at]):.3g}; rounding explains at most {limit:.3g} = "
                    f"{SLACK:g} * eps * sqrt({self.terms} terms) * scale {scale:.3g}).",
                )


@dataclasses.dataclass
class _Alone:
    outputs: Any  # each leaf (time, *y), without the batch dims
    carries: Any  # each leaf (time + 1, ...): the carry before any step, then after each

    def carry(self, t):
        return jax.tree_util.tree_map(lambda a: a[t], self.carries)


def _eps(x) -> float:
    dtype = jnp.result_type(x)
    if jnp.issubdtype(dtype, jnp.complexfloating):
        dtype = jnp.finfo(dtype).dtype
    return float(jnp.finfo(dtype).eps) if jnp.issubdtype(dtype, jnp.floating) else 0.0


def _numpy(tree):
    return jax.tree_util.tree_map(np.asarray, tree)


def _leaves(tree):
    return jax.tree_util.tree_leaves(tree)


def _with_paths(tree, name="carry"):
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [(f"{name}{jax.tree_util.keystr(path)}", leaf) for path, leaf in flat]


def _tail_shapes(tree, batch_ndim):
    return [tuple(leaf.shape[batch_ndim:]) for leaf in _leaves(tree)]


def _at(tree, index):
    return jax.tree_util.tree_map(lambda a: a[tuple(index)], tree)


def _keep(tree, index):
    """The entry at batch ``index``, keeping each batch dim with size 1."""
    where = tuple(slice(i, i + 1) for i in index)
    return jax.tree_util.tree_map(lambda a: a[where], tree)


def _first(tree, n):
    return jax.tree_util.tree_map(lambda a: a[:n], tree)
