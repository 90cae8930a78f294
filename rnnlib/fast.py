"""How rnnlib computes its cells fast: the one module that reads the backend.

The cells (``lstm.py``, ``gru.py``, ``simple.py``, ``conv_lstm.py``) write their
equations with the three calls this module provides and know nothing of backends or
sizes:

- ``gate_layers(cell, params, input_shape, input=names, hidden=names)``, called by a
  gated cell's ``prepare``: the two sides' dense layers (``Sides``), each in the form
  ``plan`` chooses for that cell on this backend, from one step's input shape;
- ``gates(x, layers, dtype)``: the affine maps of every gate of one side, as ``Gates``
  (add two with ``+``, take the gates apart with ``.split()``);
- ``conv(...)``: ``rnnlib.linear.conv``, with the kernel's derivative taken as a
  matmul over patches on CPU.

``RNN`` asks ``hoists_inputs()`` where the input projection runs by default, and
``runs_lstm_sequence(...)`` (``runs_gru_sequence(...)``) whether an LSTM (a GRU) runs its
whole loop as ``lstm_sequence`` (``gru_sequence``), with its kernel gradients taken after
the loop.

Everything here changes how a number is computed, never which number (up to the
rounding of a sum taken in another order, which the tests bound). ``reference()``
switches it all off: inside it, each side is one fused matmul of plainly concatenated
kernels, differentiated by JAX's own rules, and convolutions are ``lax``'s, so a
reader can compare the two programs and a test can run both. Every choice is read
when a function is traced: a function jitted outside ``reference()`` keeps its form.

Most of what follows works around compile time on XLA's CPU backend, where every
slice at a different offset is a kernel of its own, compiled by LLVM in 10-20 ms,
while matmuls go to a library and compile nothing per shape. The measurements come
from ``benchmarks/`` (see its README); each rule's docstring gives its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import math
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.custom_derivatives import SymbolicZero

from rnnlib.cell_base import Sides
from rnnlib.linear import affine, lax_conv
from rnnlib.linear import conv as plain_conv

# -- the switch ---------------------------------------------------------------------------


@dataclasses.dataclass
class Policy:
    """Whether the rules of this module apply (``fast``) or the plain reference path runs."""

    fast: bool = True


POLICY = Policy()


@contextlib.contextmanager
def reference():
    """Within this block, cells compute the plain way: one fused matmul per side, plain
    concatenations and ``lax`` convolutions, no custom derivative rules, no thresholds.
    ``RNN``'s default for ``hoist_inputs`` is unaffected."""
    before = POLICY.fast
    POLICY.fast = False
    try:
        yield
    finally:
        POLICY.fast = before


def _on_cpu() -> bool:
    """Whether the rules for XLA's CPU backend apply."""
    return POLICY.fast and jax.default_backend() == "cpu"


# -- where the input projection runs ------------------------------------------------------


def hoists_inputs() -> bool:
    """``RNN``'s default for ``hoist_inputs``: before the loop except on CPU.

    Hoisting turns ``T`` small input matmuls into one large one, which pays where large
    matmuls are far more efficient than small ones and every operation in the loop
    costs a kernel launch (GPU, TPU). On XLA's CPU backend the benchmark in
    ``benchmarks/`` measured the opposite: the loop reading a ``(T, batch, gates)``
    array of projections, one slice per step, runs slower than computing the small
    matmul in the loop, in the forward pass and in training, at every size it tries.
    """
    return jax.default_backend() != "cpu"


# -- the forms of one side's gates --------------------------------------------------------


class Form(NamedTuple):
    """How one side's gates are computed.

    ``per_gate``: one matmul per gate, from the layers as they are, instead of one
    fused matmul. ``per_gate_gradient``: one fused matmul whose derivative with respect
    to the layers is taken gate by gate (``_per_gate_affine``). ``joined_in_step``: one
    fused matmul whose kernel is joined inside the step, from the layers as they are,
    and differentiated by JAX's own rules (flax.linen's ``OptimizedLSTMCell`` computes
    its gates this way). None of them: one fused matmul, its kernel joined once before
    the loop and differentiated through the fused kernel. ``per_gate_forward`` combines
    with any of the others: where nothing differentiates the gates, they take one matmul
    each (flax.linen's program); a derivative computes them, and is taken, as the other
    fields say (``_per_gate_forward``).
    """

    per_gate: bool = False
    per_gate_gradient: bool = False
    joined_in_step: bool = False
    per_gate_forward: bool = False


FUSED = Form()
JOINED_IN_STEP = Form(joined_in_step=True)

# On CPU, an LSTM computes its gates with one matmul each, instead of one fused matmul,
# when one step's rows x features reaches this (plan says why).
SEPARATE_GATES_MIN_SIZE = 2**17
# On CPU, a fused matmul takes its derivative gate by gate once one step's rows x
# features (of one gate) reaches this (plan says why).
PER_GATE_GRADIENT_MIN_SIZE = 2**14
# On CPU, a GRU joins its gate kernels inside the step while one step has fewer rows
# than this, and an LSTM wherever it does not run per gate (plan says why).
GRU_JOINED_IN_STEP_MAX_ROWS = 63
# On CPU, the forward pass of a GRU or an LSTM of these widths runs one matmul per gate:
# features above the first number, up to the second, in the band of the most rows per
# step that one step reaches (plan says why).
PER_GATE_FORWARD_WIDTHS = {
    "GRUCell": {0: (160, 480)},
    "LSTMCell": {0: (160, 416), 64: (256, 416)},
}


def _kind(cell) -> str:
    """The built-in cell ``cell`` is (or derives from), or ``''``."""
    from rnnlib.gru import GRUCell, MGUCell  # imported here: the cells import this module
    from rnnlib.lstm import LSTMCell

    for klass in (LSTMCell, GRUCell, MGUCell):
        if isinstance(cell, klass):
            return klass.__name__
    return ""


def plan(cell, input_shape: Sequence[int]) -> Sides:
    """The ``Form`` of each side of ``cell``'s gates for one step's input of ``input_shape``.

    Decided once per call of ``RNN`` (by the cell's ``prepare``), from one step's rows
    (the product of every axis of ``input_shape`` but the last), the same for the input
    side whether it is hoisted before the loop or not, and for the hidden side.

    **Kernels joined inside the step: an LSTM below 2**17, a GRU below 64 rows.** In
    this form each side joins its kernels inside the step, as flax.linen's
    ``OptimizedLSTMCell`` does, and JAX differentiates the join by its own rules. The
    joins do not change from step to step, so they still run once: JAX's scan moves
    them before the loop of a training step, and a forward pass measured as fast as the
    fused form. The values are the fused form's; what changes is the backward loop,
    which accumulates each gate's kernel gradient on its own instead of one fused
    gradient cut after the loop. An LSTM takes it wherever it does not run per gate,
    a GRU up to 63 rows (``GRU_JOINED_IN_STEP_MAX_ROWS``); the GRU's per-gate gradients
    below apply from there.

    Measured in training (T = 64). A micro-benchmark (input width H / 2, medians of 7
    alternating rounds, this form's time over the rules below): an LSTM at batch 8 took
    0.79-0.83 of the time at 64 and 256 features over four runs (0.87 at 512); a GRU
    took 0.62-0.98 at batch 8-32 and was level from batch 64 (0.85-1.05); the forward
    pass took 0.93-1.04. The sweep of ``benchmarks/sweep.py`` then measured the LSTM
    from batch 16 up, with the rules below, at 1.04-1.36 of flax.linen's
    ``OptimizedLSTMCell`` at 12 of its points (the program this form reproduces); with
    this form the same 12 points read 0.90-1.28, a geometric mean of 0.99 against 1.13,
    11 of them lower (the forward pass 0.99 against 0.99).

    **LSTM, per gate from 2**17.** Per gate means four ``(rows, in) @ (in, features)``
    matmuls instead of one ``(rows, in) @ (in, 4 * features)``. On XLA's CPU backend, in
    training, the per-gate form measured faster once ``rows * features`` reached
    ``2**17`` (``SEPARATE_GATES_MIN_SIZE``): 2-6% at 512 features and batch 256, 7-8% at
    batch 512, 18% at 1024 features and batch 256. Around ``2**16`` the two were within
    4% of each other, and below it the fused form won (at 256 features and batch 64 by
    1% with 256 input features and by about 25% with 128; by 35-40% at 32 features and
    batch 8). In a micro-benchmark the difference came from the kernel gradient
    ``h.T @ d_gates``, which XLA:CPU computes more slowly for one wide kernel than for
    four narrow ones, at every step of the backward loop.

    **Per-gate gradients from 2**14.** The fused matmul ``x @ concat(kernels)`` computes
    every gate at once, but its parameter gradient is one ``(in, k * features)`` array
    that XLA then cuts into ``k`` slices, one per layer, after the loop; on XLA:CPU each
    slice is a kernel to compile. With one ``x.T @ d_gate`` per gate the gradients need
    no slices at all. For a GRU with batch 64 and 256 features that took its training
    step from 43 compiled kernels to 33, and its first call (trace, compile, run) from
    1.07 to 0.97 of flax.linen's, for the same running time (and 4% less of it at batch
    256 and 512 features). For smaller inputs the ``k`` matmuls and additions per step
    cost more than they save: a GRU trained about 1% slower at ``2**13``, 5-23% slower
    at ``2**12`` and about 30% slower at batch 8 and 32 features. So: on CPU, from
    ``rows * features >= 2**14`` (``PER_GATE_GRADIENT_MIN_SIZE``), on both sides of a
    GRU with 64 rows or more. (It was also measured on an LSTM's hidden side, where the
    joined form above has since replaced it.)

    **The forward pass per gate between two widths.** XLA:CPU's speed on one matmul
    shape or another follows no size rule. In the forward pass (T = 64, input width
    H / 2, medians of at least 9 rotating rounds, each time over flax.linen's, whose
    ``GRUCell`` and ``LSTMCell`` compute one matmul per gate), a GRU's two fused
    matmuls took 1.02-1.65 of linen's time at 27 of 33 points from 176 to 480 features
    (batch 8-256; 0.84-0.99 at the others), but 0.66-0.96 at 32-160 features and at
    500 and 512 (batch 8-64, one 1.11). An LSTM's (the same two matmuls as linen's
    ``OptimizedLSTMCell``, which read the same) took 1.03-1.76 at 288-416 features and
    batch 8-64. From 160 to 256 features they took 0.97-1.25 with 8-32 rows (above
    1.15 at five of eight points) against 0.99-1.03 for one matmul per gate, and with
    64-128 rows 0.66-0.91 (one 1.15) against 0.97-1.00. Between those widths
    (``PER_GATE_FORWARD_WIDTHS``: a GRU above 160 features up to 480, an LSTM above 160
    up to 416, and from 64 rows only above 256) a forward pass
    runs one matmul per gate, flax.linen's program. The widths sweep
    (``benchmarks/results/sweep-widths.md``: 160-512 features at batch 8, 32 and 128,
    run when the LSTM's band started above 256 at every batch) read the GRU's forward
    pass at 0.97-1.03 of linen's time at 26 of its 27 points in the band (one 1.10),
    and found the LSTM's fused matmuls at 1.13-1.22 at batch 32 and 160-224 features,
    which its lower bound of 160 now covers. Training keeps its form:
    ``_per_gate_forward`` (and ``_lstm``'s rule for the whole-sequence LSTM) computes
    the gates and their tangents in the form chosen above, so a training step compiles
    to the same program with this rule or without it, and its fused matmuls trained at
    0.54-1.05 of linen's time over that sweep.

    **MGU, always per gate.** flax.linen computes each gate with its own ``Dense``. A
    fused matmul of width ``2 * features`` gives the same sums, but XLA:CPU rounds them
    in another order, so the outputs differed from flax.linen's in the last bits (about
    ``3e-8``); one matmul per gate gives flax.linen's numbers bit for bit. This rule
    holds on every backend.

    GPUs and TPUs keep the fused forms (except the MGU's), as does any other cell, and
    every cell inside ``reference()``. On CPU, where ``RNN`` runs a whole sequence with
    ``lstm_sequence`` or ``gru_sequence``, those rules replace the training forms above;
    the forward pass still reads ``per_gate_forward`` here.
    """
    kind = _kind(cell)
    if not POLICY.fast or not kind:
        return Sides(FUSED, FUSED)
    if kind == "MGUCell":
        return Sides(Form(per_gate=True), Form(per_gate=True))
    if not _on_cpu():
        return Sides(FUSED, FUSED)
    rows = math.prod(tuple(input_shape)[:-1])
    size = rows * cell.features
    if kind == "LSTMCell":
        side = Form(per_gate=True) if size >= SEPARATE_GATES_MIN_SIZE else JOINED_IN_STEP
    elif rows <= GRU_JOINED_IN_STEP_MAX_ROWS:
        side = JOINED_IN_STEP
    else:
        side = Form(per_gate_gradient=size >= PER_GATE_GRADIENT_MIN_SIZE)
    bands = PER_GATE_FORWARD_WIDTHS[kind]
    above, up_to = bands[max(fewest for fewest in bands if fewest <= rows)]
    if above < cell.features <= up_to and not side.per_gate:
        side = side._replace(per_gate_forward=True)
    return Sides(side, side)


# -- one side's layers and gates ----------------------------------------------------------


@jax.tree_util.register_pytree_node_class
class GateLayers:
    """The dense layers of one side, in the form ``form`` computes them.

    ``kernels`` and ``biases`` are the layers themselves (a bias is None where its layer
    has none); ``kernel`` and ``bias`` are their fusion (``fused``), None in the
    per-gate and joined-in-step forms, which never need them.
    """

    def __init__(self, kernel, bias, kernels: tuple, biases: tuple, form: Form):
        self.kernel, self.bias, self.kernels, self.biases, self.form = (
            kernel,
            bias,
            kernels,
            biases,
            form,
        )

    def tree_flatten(self):
        return (self.kernel, self.bias, self.kernels, self.biases), self.form

    @classmethod
    def tree_unflatten(cls, form, children):
        return cls(*children, form)


def layers(params: dict, names: Sequence[str], form: Form = FUSED) -> GateLayers:
    """The layers ``names`` of ``params`` for ``form``."""
    kernels = tuple(params[n]["kernel"] for n in names)
    biases = tuple(params[n].get("bias") for n in names)
    kernel = bias = None
    if not (form.per_gate or form.joined_in_step):
        kernel, bias = fused(params, names)
    return GateLayers(kernel, bias, kernels, biases, form)


def gate_layers(cell, params: dict, input_shape, *, input: Sequence[str], hidden: Sequence[str]):
    """``Sides`` of ``GateLayers``: the layers ``input`` and ``hidden`` of ``params``, each
    in the form ``plan(cell, input_shape)`` chooses."""
    forms = plan(cell, input_shape)
    return Sides(layers(params, input, forms.input), layers(params, hidden, forms.hidden))


@jax.tree_util.register_pytree_node_class
class Gates:
    """The affine maps of ``k`` gates: one array ``(..., k * features)`` or ``k`` arrays.

    ``split()`` gives the ``k`` gates; ``a + b`` adds two sides gate by gate (one
    addition when both are fused). A pytree, so ``RNN`` can slice hoisted ones by step.
    """

    def __init__(self, value, k: int):
        self.value, self.k = value, k

    def split(self) -> tuple:
        if isinstance(self.value, tuple):
            return self.value
        return tuple(jnp.split(self.value, self.k, axis=-1))

    def __add__(self, other: Gates) -> Gates:
        if not isinstance(self.value, tuple) and not isinstance(other.value, tuple):
            return Gates(self.value + other.value, self.k)
        return Gates(tuple(a + b for a, b in zip(self.split(), other.split())), self.k)

    def tree_flatten(self):
        return (self.value,), self.k

    @classmethod
    def tree_unflatten(cls, k, children):
        return cls(children[0], k)


def gates(x, layers: GateLayers, dtype=None) -> Gates:
    """``x @ kernel + bias`` for every gate of one side, in ``layers.form``."""
    k = len(layers.kernels)
    if layers.form.per_gate_forward:
        rest = layers.form._replace(per_gate_forward=False)
        arrays = (x, layers.kernels, layers.biases, layers.kernel, layers.bias)
        return Gates(_per_gate_forward(rest, dtype, *arrays), k)
    if layers.form.per_gate:
        return Gates(
            tuple(affine(x, w, b, dtype=dtype) for w, b in zip(layers.kernels, layers.biases)), k
        )
    if layers.form.joined_in_step:
        join = functools.partial(jnp.concatenate, axis=-1)
        kernel, bias = _joined(layers.kernels, layers.biases, join)
        return Gates(affine(x, kernel, bias, dtype=dtype), k)
    if layers.form.per_gate_gradient:
        value = _per_gate_affine(
            x, layers.kernels, layers.biases, layers.kernel, layers.bias, dtype
        )
        return Gates(value, k)
    return Gates(affine(x, layers.kernel, layers.bias, dtype=dtype), k)


# -- fused layers and their joins ---------------------------------------------------------


def fused(params: dict, names: Sequence[str]):
    """Concatenates the kernels (and biases) of several dense layers along the output axis.

    One ``(in, k * features)`` matmul computes ``k`` gates at once. Layers without a bias
    contribute zeros, so a fused bias exists whenever any of them has one. The
    concatenations are ``join_gates``.
    """
    kernels = [params[n]["kernel"] for n in names]
    return _joined(kernels, [params[n].get("bias") for n in names], join_gates)


def _joined(kernels: Sequence, biases: Sequence, join):
    """``(join(kernels), join(biases))``, a missing bias joined as zeros; the bias is
    None where no layer has one."""
    kernel = join(kernels)
    if all(b is None for b in biases):
        return kernel, None
    return kernel, join(_zero_filled(kernels, biases))


def _zero_filled(kernels: Sequence, biases: Sequence) -> list:
    """``biases`` with zeros (one per output feature) where a layer has none."""
    return [jnp.zeros(w.shape[-1:], w.dtype) if b is None else b for w, b in zip(kernels, biases)]


# On CPU, join_gates takes its derivative by matmuls while they cost at most this many
# multiply-adds; join_by_matmul says why.
JOIN_BY_MATMUL_MAX_MACS = 2**20


def join_by_matmul(shape, parts: int) -> bool:
    """Whether ``join_gates`` of ``parts`` arrays of ``shape`` differentiates by matmuls.

    Why: the gradient of a concatenation is one slice per part, and on XLA's CPU
    backend every slice at a different offset is a kernel of its own, compiled by LLVM
    in 10-20 ms (``plan``'s per-gate gradients tell the same story for the fused
    matmul's gradient). A matmul with a matrix of zeros and ones selects the same
    block, and XLA:CPU hands matmuls to a library, compiling nothing per offset. For an
    LSTM with batch 8 and 32 features, too small for per-gate gradients, that took the
    training step from 39 compiled kernels to 31 (flax.linen's: 26) and its compile
    time from about 855 to about 760 ms (flax.linen's: about 700), for the same running
    time; a GRU went from 33 kernels to 27.

    The library takes no matmul with a single row, column or summed term, so a 1-D
    part (a bias) is viewed as ``(2, features / 2)``, which needs an even number of
    at least 4 features; its matmuls are tiny. A kernel's matmuls cost ``parts *
    features`` multiply-adds per number of the joined array, where a slice copies it
    once, so kernels take them up to ``JOIN_BY_MATMUL_MAX_MACS`` multiply-adds in all
    (32 features, not 128). CPU only: GPUs and TPUs keep the slices.
    """
    if not _on_cpu():
        return False
    *rows, features = shape
    if not rows:
        return features >= 4 and features % 2 == 0
    rows = math.prod(rows)
    macs = parts * rows * features * parts * features
    return rows >= 2 and features >= 2 and macs <= JOIN_BY_MATMUL_MAX_MACS


def join_gates(parts: Sequence):
    """``jnp.concatenate(parts, axis=-1)``, differentiated by matmuls where that pays.

    The value is always the concatenation. For ``parts`` of one shape and dtype, where
    ``join_by_matmul`` says so, its derivative is taken by matmuls with constant
    0/1 matrices instead of slices: the same numbers, except that a non-finite number
    in one part of a cotangent spreads to the other parts as NaN (``inf * 0``).
    """
    parts = tuple(parts)
    alike = len({(p.shape, jnp.result_type(p)) for p in parts}) == 1
    if alike and join_by_matmul(parts[0].shape, len(parts)):
        return _join_by_matmul(parts)
    return jnp.concatenate(parts, axis=-1)


# The rule below is written in lax, not jnp: jnp's functions are jitted wrappers whose
# tracing cost, paid for every join of every cell, would eat into the compile time saved.


@jax.custom_jvp
def _join_by_matmul(parts):
    return lax.concatenate(parts, parts[0].ndim - 1)


def _join_by_matmul_jvp(primals, tangents):
    (parts,), (dparts,) = primals, tangents
    k = len(parts)
    terms = [_place(dp, g, k) for g, dp in enumerate(dparts) if not isinstance(dp, SymbolicZero)]
    joined = _join_by_matmul(parts)
    if not terms:
        return joined, lax.full_like(joined, 0)
    return joined, functools.reduce(lax.add, terms)


_join_by_matmul.defjvp(_join_by_matmul_jvp, symbolic_zeros=True)


def _place(part, g: int, k: int):
    """``part`` as block ``g`` of ``k`` along the last axis, zeros elsewhere, by one matmul."""
    n = part.shape[-1]
    if part.ndim == 1:
        # (2, n/2) rows: block g of the joined (2k, n/2) rows is rows 2g and 2g + 1.
        select = _selection(2 * k, 2, 2 * g, part.dtype)
        rows = lax.dot_general(select, lax.reshape(part, (2, n // 2)), _MATMUL, precision=_EXACT)
        return lax.reshape(rows, (k * n,))
    select = _selection(k * n, n, g * n, part.dtype).T
    dims = (((part.ndim - 1,), (0,)), ((), ()))
    return lax.dot_general(part, select, dims, precision=_EXACT)


_MATMUL = (((1,), (0,)), ((), ()))
# Full precision, so that multiplying by one and adding zeros leaves every number as it is.
_EXACT = lax.Precision.HIGHEST


@functools.lru_cache(maxsize=64)
def _selection(rows: int, columns: int, offset: int, dtype):
    """A ``(rows, columns)`` NumPy matrix of zeros with ones at ``(offset + j, j)``."""
    select = np.zeros((rows, columns), dtype)
    select[offset + np.arange(columns), np.arange(columns)] = 1
    select.flags.writeable = False
    return select


# -- per-gate gradients of a fused matmul -------------------------------------------------


@functools.partial(jax.custom_jvp, nondiff_argnums=(5,))
def _per_gate_affine(x, kernels, biases, kernel, bias, dtype):
    """``x @ kernel + bias``, whose derivative with respect to the layers is taken gate
    by gate (``x.T @ d_gate`` for each kernel) from ``kernels`` and ``biases``, never
    through the fused arrays (``plan`` says when that pays).

    ``kernel`` and ``bias`` are ``fused(kernels, biases)``, computed once outside any
    loop; the rule ignores their tangents and uses the per-gate ones, which carry the
    same information. The derivative with respect to ``x`` is one fused matmul, and
    derivatives of every order equal those of the fused map (the rule's own tangent is
    differentiable again, so Hessians come out right too).
    """
    return affine(x, kernel, bias, dtype=dtype)


def _per_gate_affine_jvp(dtype, primals, tangents):
    x, kernels, biases, kernel, bias = primals
    dx, dkernels, dbiases, _, _ = tangents
    y = _per_gate_affine(x, kernels, biases, kernel, bias, dtype)
    terms = []
    if not isinstance(dx, SymbolicZero):
        # Written with the fused kernel as a plain input: differentiating this term
        # again reaches the kernel's real tangent (the concatenation of the gates').
        terms.append(affine(dx, kernel, dtype=dtype))
    gates = []
    for b, dk, db in zip(biases, dkernels, dbiases):
        gate = None
        if not isinstance(dk, SymbolicZero):
            gate = affine(x, dk, dtype=dtype)
        if b is not None and not isinstance(db, SymbolicZero):
            gate = db if gate is None else gate + db
        gates.append(gate)
    if any(g is not None for g in gates):
        shape = y.shape[:-1] + (kernels[0].shape[-1],)
        gates = [
            jnp.zeros(shape, y.dtype) if g is None else jnp.broadcast_to(g, shape) for g in gates
        ]
        terms.append(jnp.concatenate(gates, axis=-1))
    if not terms:
        return y, jnp.zeros_like(y)
    return y, sum(terms[1:], terms[0]).astype(y.dtype)


_per_gate_affine.defjvp(_per_gate_affine_jvp, symbolic_zeros=True)


# -- one matmul per gate, unless differentiated ----------------------------------------------


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _per_gate_forward(rest: Form, dtype, x, kernels, biases, kernel, bias):
    """The gates of one side, one ``x @ kernel + bias`` each, as a tuple.

    The rule computes the same gates, and their tangents, in the form ``rest``: so a
    forward pass runs one matmul per gate, while a training step, ``jax.jvp`` or a
    Hessian runs, and differentiates, the form ``plan`` chose for training. ``kernel``
    and ``bias`` are ``rest``'s fused arrays (None where it needs none); only the rule
    reads them.
    """
    return tuple(affine(x, w, b, dtype=dtype) for w, b in zip(kernels, biases))


def _per_gate_forward_jvp(rest, dtype, primals, tangents):
    leaves, tree = jax.tree_util.tree_flatten(primals)
    dleaves = jax.tree_util.tree_leaves(tangents, is_leaf=_zero)
    live = [i for i, t in enumerate(dleaves) if not _zero(t)]

    def gates_in_rest(*live_leaves):
        full = list(leaves)
        for i, leaf in zip(live, live_leaves):
            full[i] = leaf
        x, kernels, biases, kernel, bias = jax.tree_util.tree_unflatten(tree, full)
        return gates(x, GateLayers(kernel, bias, kernels, biases, rest), dtype).split()

    if not live:
        y = gates_in_rest()
        return y, tuple(jnp.zeros_like(a) for a in y)
    # Only the arguments with a tangent become jvp inputs: the others stay constants,
    # so a training step computes no product with a tangent that is known to be zero.
    return jax.jvp(gates_in_rest, [leaves[i] for i in live], [dleaves[i] for i in live])


_per_gate_forward.defjvp(_per_gate_forward_jvp, symbolic_zeros=True)


# -- convolutions -------------------------------------------------------------------------


def conv(x, kernel, bias, strides, padding, num_batch_dims: int, dtype=None):
    """``rnnlib.linear.conv``; on CPU its kernel's derivative is a matmul over patches
    (``_conv_filter_grad_by_patches`` says why)."""
    convolve = _conv_filter_grad_by_patches if _on_cpu() else lax_conv
    return plain_conv(x, kernel, bias, strides, padding, num_batch_dims, dtype, convolve=convolve)


def _patches(x, window, strides, padding):
    """Every window of ``x`` ``(N, *signal, C)`` as one row: ``(N, *out_signal, prod(window) * C)``.

    The row holds the window's positions in row-major order, channels fastest, which is
    the order of a ``(*window, C, O)`` kernel reshaped to ``(prod(window) * C, O)``; so
    ``_patches(x, ...) @ kernel.reshape(-1, O)`` is the convolution.
    """
    x = jnp.pad(x, ((0, 0),) + padding + ((0, 0),))
    out = [(n - k) // s + 1 for n, k, s in zip(x.shape[1:-1], window, strides)]
    columns = []
    for offset in itertools.product(*(range(k) for k in window)):
        limit = [o + s * (n - 1) + 1 for o, s, n in zip(offset, strides, out)]
        columns.append(
            lax.slice(x, (0, *offset, 0), (x.shape[0], *limit, x.shape[-1]), (1, *strides, 1))
        )
    return jnp.concatenate(columns, axis=-1)


@functools.partial(jax.custom_jvp, nondiff_argnums=(2, 3))
def _conv_filter_grad_by_patches(x, kernel, strides, padding):
    """``lax_conv``, with the kernel's derivative taken as a matmul over the input's patches.

    Why: on XLA's CPU backend the gradient of a convolution with respect to its kernel,
    inside the ``while`` loop of a scan, measured several times slower than everything
    else in a ConvLSTM's training step (a 32x32 ConvLSTM trained about 7x faster with
    this rule, ``benchmarks/``). Written as ``patches(x) @ kernel`` the same derivative is
    one matmul, which the CPU runs well. The value itself is still ``lax``'s convolution,
    and so is the derivative with respect to ``x``. ``conv`` uses this on CPU only: GPUs
    and TPUs have fast kernel-gradient convolutions, and the patches cost
    ``prod(window)`` times the input's memory in the backward pass.
    """
    return lax_conv(x, kernel, strides, padding)


def _conv_jvp(strides, padding, primals, tangents):
    x, kernel = primals
    dx, dkernel = tangents
    y = lax_conv(x, kernel, strides, padding)
    parts = []
    if not isinstance(dx, SymbolicZero):
        parts.append(lax_conv(dx, kernel, strides, padding))
    if not isinstance(dkernel, SymbolicZero):
        columns = _patches(x, kernel.shape[:-2], strides, padding)
        flat = dkernel.reshape(-1, dkernel.shape[-1])
        parts.append(lax.dot_general(columns, flat, (((columns.ndim - 1,), (0,)), ((), ()))))
    return y, sum(parts[1:], parts[0]) if parts else jnp.zeros_like(y)


_conv_filter_grad_by_patches.defjvp(_conv_jvp, symbolic_zeros=True)


# -- the LSTM over a whole sequence: kernel gradients after the loop -------------------------


def runs_lstm_sequence(cell, weights: Sides, carry, inputs) -> bool:
    """Whether ``RNN`` runs ``cell`` over ``inputs`` (time on axis 0, the input projection
    in the loop, no ``seq_lengths``) with ``lstm_sequence``: on CPU, for rnnlib's own
    ``LSTMCell`` (or ``OptimizedLSTMCell``) with its default gate functions and dtype,
    everything in float32, at every size (``lstm_sequence`` says why)."""
    from rnnlib.lstm import LSTMCell, OptimizedLSTMCell

    if not _on_cpu() or type(cell) not in (LSTMCell, OptimizedLSTMCell):
        return False
    arrays = (weights.input.kernels, weights.hidden, carry, inputs)
    return _default_float32(cell, arrays) and jax_transposes_lstm_sequence()


def _default_float32(cell, arrays) -> bool:
    """Whether ``cell`` keeps its default gate functions (sigmoid, tanh) and dtype, and
    every array of the pytree ``arrays`` is float32."""
    if cell.gate_fn is not jax.nn.sigmoid or cell.activation_fn is not jnp.tanh:
        return False
    leaves = jax.tree_util.tree_leaves(arrays)
    return cell.dtype is None and all(jnp.result_type(a) == jnp.float32 for a in leaves)


def _takes_gradient(loss, *shapes) -> bool:
    """Whether this JAX traces ``jax.grad(loss)`` in all of ``shapes`` (nothing runs)."""
    try:
        jax.eval_shape(jax.grad(loss, argnums=tuple(range(len(shapes)))), *shapes)
    except Exception:  # whatever this JAX raises, the cell keeps the forms plan chooses
        return False
    return True


@functools.cache
def jax_transposes_lstm_sequence() -> bool:
    """Whether this JAX can take a gradient through ``lstm_sequence``'s rule.

    The rule's tangent loop reads the kernels' tangents as one array over every step.
    Older JAX releases fail to transpose it, each its own way (jax 0.4.30's ``lax.scan``
    transpose stops at an internal assertion; 0.8.1 raises a TypeError on one of its own
    accumulators), while the versions this book pins take it. So one tiny gradient,
    traced once per process (shapes only, nothing runs), decides: any failure there means
    rules 1 and 5 instead. A test checks that the pinned versions pass.
    """
    kernels = [jax.ShapeDtypeStruct(s, jnp.float32) for s in ((1, 8), (2, 8), (8,))]

    def loss(w_i, w_h, b):
        carry = (jnp.zeros((1, 2)), jnp.zeros((1, 2)))
        return jnp.sum(_lstm(1, False, (w_i,), (w_h,), (b,), jnp.ones((2, 1, 1)), carry)[1])

    return _takes_gradient(loss, *kernels)


def lstm_sequence(weights: Sides, carry, inputs, unroll: int = 1):
    """``(final_carry, outputs)`` of an LSTM over axis 0 of ``inputs``: the numbers of
    ``LSTMCell.step`` in a loop, with a derivative rule of its own.

    JAX differentiates a loop step by step, and its backward loop adds every step's
    share of each kernel's gradient into a running sum: ``h.T @ d_gates`` for the hidden
    kernel and ``x.T @ d_gates`` for the input kernel, two matmuls per step whose inner
    dimension is the batch. Nothing later in the loop needs those sums. ``_lstm``'s
    rule writes the tangent so that, once JAX transposes it for a gradient, the
    backward loop keeps only what the step before needs (``d_gates @ W_h.T`` and the
    gates' arithmetic) and stores each step's ``d_gates``; each kernel's gradient is
    then one matmul over all ``T * rows`` rows, after the loop. The tangent is plain
    JAX, so forward mode (``jax.jvp``) and second derivatives work as for any loop.

    Measured on XLA's CPU backend in training (``benchmarks/backward.py``: batch 8-256,
    widths 32-512, input width H / 2, T = 64, medians of 7 rotating rounds, each time
    over the faster of flax.linen's ``LSTMCell`` and ``OptimizedLSTMCell``): this rule
    0.57-1.01, a geometric mean of 0.80 over the 30 points, where the same loop
    differentiated by JAX read 0.83-1.34 (1.03); the rule was at or below JAX's at every
    point, by the most at batch 8-32. A hand-written backward pass (``jax.custom_vjp``)
    measured about the same (0.78) but would make ``jax.jvp`` of an ``RNN`` fail. So the
    rule applies at every size on CPU, in place of the forms ``plan`` chooses for the
    LSTM there; those stay for ``seq_lengths``, a hoisted projection, other gate functions
    or dtypes. Without a derivative, the loop is ``step``'s, the kernels joined once
    before it.
    """
    per_gate = weights.hidden.form.per_gate_forward
    kernels = (weights.input.kernels, weights.hidden.kernels, weights.hidden.biases)
    return _lstm(unroll, per_gate, *kernels, inputs, carry)


def _join_sides(i_kernels, h_kernels, h_biases):
    """The LSTM's joined ``(w_i, w_h, b)`` from its per-gate layers (``b`` None where the
    hidden layers have no biases)."""
    join = functools.partial(jnp.concatenate, axis=-1)
    w_i, _ = _joined(i_kernels, (None,) * len(i_kernels), join)
    w_h, b = _joined(h_kernels, h_biases, join)
    return w_i, w_h, b


def _lstm_loop(unroll, pre_activations, xs, carry, keep: bool):
    """The LSTM over axis 0 of ``xs``: ``(final_carry, outputs)``, and with ``keep`` also
    each step's incoming ``(c, h)``, its four activated gates and ``tanh(c')``.
    ``pre_activations(x, h)`` gives the four gates before their activations."""

    def step(carry, x):
        c, h = carry
        i, f, g, o = pre_activations(x, h)
        i, f, g, o = jax.nn.sigmoid(i), jax.nn.sigmoid(f), jnp.tanh(g), jax.nn.sigmoid(o)
        c_next = f * c + i * g
        tanh_c = jnp.tanh(c_next)
        h_next = o * tanh_c
        kept = (h_next, c, h, i, f, g, o, tanh_c) if keep else h_next
        return (c_next, h_next), kept

    return lax.scan(step, carry, xs, unroll=unroll)


def _joined_pre_activations(w_i, w_h, b):
    """Two matmuls per step, one per side, of the joined kernels."""

    def pre_activations(x, h):
        hidden = h @ w_h if b is None else h @ w_h + b
        return jnp.split(x @ w_i + hidden, 4, axis=-1)

    return pre_activations


def _per_gate_pre_activations(i_kernels, h_kernels, h_biases):
    """Eight matmuls per step, one per gate and side (flax.linen's ``LSTMCell``)."""

    def pre_activations(x, h):
        return tuple(
            x @ w_i + (h @ w_h if b is None else h @ w_h + b)
            for w_i, w_h, b in zip(i_kernels, h_kernels, h_biases)
        )

    return pre_activations


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _lstm(unroll, per_gate, i_kernels, h_kernels, h_biases, xs, carry):
    if per_gate:
        pre_activations = _per_gate_pre_activations(i_kernels, h_kernels, h_biases)
    else:
        pre_activations = _joined_pre_activations(*_join_sides(i_kernels, h_kernels, h_biases))
    return _lstm_loop(unroll, pre_activations, xs, carry, keep=False)


def _rows(a):
    """``a`` with every axis but the last as one: XLA:CPU runs a 2-D matmul of these
    far faster than the same contraction over several axes."""
    return a.reshape(-1, a.shape[-1])


def _joined_tangent(tangents, primals):
    """The per-gate ``tangents`` of ``primals`` joined along the last axis (zeros for a
    gate without one), or None where no gate has one."""
    if all(t is None or _zero(t) for t in tangents):
        return None
    parts = [jnp.zeros_like(p) if t is None or _zero(t) else t for t, p in zip(tangents, primals)]
    return jnp.concatenate(parts, axis=-1)


def _lstm_jvp(unroll, per_gate, primals, tangents):
    # The derivative always runs the joined loop, whatever the forward pass runs.
    i_kernels, h_kernels, h_biases, xs, carry = primals
    di_kernels, dh_kernels, dh_biases, dxs, dcarry = tangents
    w_i, w_h, b = _join_sides(i_kernels, h_kernels, h_biases)
    dw_i = _joined_tangent(di_kernels, i_kernels)
    dw_h = _joined_tangent(dh_kernels, h_kernels)
    db = None if b is None else _joined_tangent(dh_biases, _zero_filled(h_kernels, h_biases))
    final, (ys, c_in, h_in, i, f, g, o, tanh_c) = _lstm_loop(
        unroll, _joined_pre_activations(w_i, w_h, b), xs, carry, keep=True
    )
    # Every term of the gates' tangent that does not come from the step before: the
    # kernels' and the inputs' tangents, one matmul each over every step's rows (none
    # for an argument that is not being differentiated).
    terms = [_rows(h_in) @ dw_h] if dw_h is not None else []
    terms += [_rows(xs) @ dw_i] if dw_i is not None else []
    terms += [_rows(dxs) @ w_i] if not _zero(dxs) else []
    terms += [db] if db is not None else []
    outside = _outside_the_loop(terms, xs.shape[:-1] + w_h.shape[-1:], xs.dtype)
    dcarry = jax.tree_util.tree_map(
        lambda t, a: jnp.zeros_like(a) if _zero(t) else t, dcarry, carry, is_leaf=_zero
    )

    def step(dcarry, t):
        # Each product holds a tangent (sigmoid' = s - s * s enters as s * (d - s * d)),
        # so JAX's partial evaluation moves nothing into a loop of its own.
        dc, dh = dcarry
        d_gates, c, i, f, g, o, tanh_c = t
        di, df, dg, do = jnp.split(d_gates + dh @ w_h, 4, axis=-1)
        dc = f * dc + c * (f * (df - f * df)) + g * (i * (di - i * di)) + i * (dg - g * (g * dg))
        dh = tanh_c * (o * (do - o * do)) + o * (dc - tanh_c * (tanh_c * dc))
        return (dc, dh), dh

    dfinal, d_ys = lax.scan(step, dcarry, (outside, c_in, i, f, g, o, tanh_c), unroll=unroll)
    return (final, ys), (dfinal, d_ys)


def _outside_the_loop(terms, shape, dtype):
    """The sum of ``terms`` (matmuls over every step's rows, or a bias) as one array of
    ``shape``, ``(T, *rows, features)``: zeros where there are none."""
    total = functools.reduce(jnp.add, terms) if terms else jnp.zeros((), dtype)
    return jnp.broadcast_to(total, (math.prod(shape[:-1]), shape[-1])).reshape(shape)


def _zero(t) -> bool:
    return isinstance(t, SymbolicZero)


_lstm.defjvp(_lstm_jvp, symbolic_zeros=True)


# -- the GRU over a whole sequence: kernel gradients after the loop --------------------------


def runs_gru_sequence(cell, weights: Sides, carry, inputs) -> bool:
    """Whether ``RNN`` runs ``cell`` over ``inputs`` (time on axis 0, the input projection
    in the loop, no ``seq_lengths``) with ``gru_sequence``: on CPU, for rnnlib's own
    ``GRUCell`` with its default gate functions and dtype, everything in float32, at
    every size (``gru_sequence`` says why)."""
    from rnnlib.gru import GRUCell

    if not _on_cpu() or type(cell) is not GRUCell:
        return False
    arrays = (weights.input.kernels, weights.input.biases, weights.hidden, carry, inputs)
    return _default_float32(cell, arrays) and jax_transposes_gru_sequence()


@functools.cache
def jax_transposes_gru_sequence() -> bool:
    """Whether this JAX can take a gradient through ``gru_sequence``'s rule: one tiny
    gradient, traced once per process (shapes only), as for the LSTM
    (``jax_transposes_lstm_sequence`` says why)."""
    parts = [[jax.ShapeDtypeStruct(s, jnp.float32)] * 3 for s in ((1, 2), (2,), (2, 2))]

    def loss(i_kernels, i_biases, h_kernels, b_hn):
        h = jnp.zeros((1, 2))
        h_biases = (None, None, b_hn)
        xs = jnp.ones((2, 1, 1))
        return jnp.sum(_gru(1, False, i_kernels, i_biases, h_kernels, h_biases, xs, h)[1])

    return _takes_gradient(loss, *parts, parts[1][0])


def gru_sequence(weights: Sides, carry, inputs, unroll: int = 1):
    """``(final_carry, outputs)`` of a GRU over axis 0 of ``inputs``: the numbers of
    ``GRUCell.step`` in a loop, with a derivative rule of its own, the LSTM's
    (``lstm_sequence``) written for the GRU's equations.

    JAX's backward loop would add every step's share of the kernel gradients into
    running sums (``x.T @ d_a`` and ``h.T @ d_u`` for the input side's and the hidden
    side's pre-activations ``a = x W_i + b_i`` and ``u = h W_h + b_h``). ``_gru``'s rule
    keeps in the backward loop only ``d_u @ W_h.T`` and the gates' arithmetic, and
    stores each step's ``d_a`` and ``d_u``; each side's kernel gradient is then one
    matmul over all ``T * rows`` rows, after the loop. ``d_a`` and ``d_u`` are stored
    apart because the candidate's hidden term is gated (``n = tanh(a_n + r * u_n)``):
    its two sides' cotangents differ by the factor ``r``.

    Measured on XLA's CPU backend in training (the sweep's 30 GRU points: batch 8-256,
    widths 32-512, input width H / 2, T = 64; medians of at least 9 rotating rounds, first
    calls the median of 3), against the forms ``plan`` chooses: 0.64-0.94 of their time at
    batch 8-32, 0.80-1.06 at batch 64-256, a geometric mean of 0.87 (0.75 of flax.linen's
    ``GRUCell``'s time, where the forms took 0.87); the first call 0.93 of theirs. Above
    them at five points, by at most 6%, three of them at batch 128-256 and 32 features.
    The forward pass timed level with theirs (a geometric mean of 1.00 over 10 of the
    points). So the rule applies at every size on CPU,
    in place of the forms ``plan`` chooses for the GRU there; those stay for
    ``seq_lengths``, a hoisted projection, other gate functions or dtypes. Without a
    derivative, the loop is ``step``'s: the kernels joined once before it, or one matmul
    per gate where ``plan`` runs the forward pass that way.
    """
    per_gate = weights.hidden.form.per_gate_forward
    i, h = weights.input, weights.hidden
    return _gru(unroll, per_gate, i.kernels, i.biases, h.kernels, h.biases, inputs, carry)


def _gru_loop(unroll, pre_activations, xs, h, keep: bool):
    """The GRU over axis 0 of ``xs``: ``(final_h, outputs)``, and with ``keep`` also each
    step's incoming ``h``, its gates ``r``, ``z``, ``n`` and the candidate's hidden term
    ``u_n``. ``pre_activations(x, h)`` gives the three gates' input terms and their three
    hidden terms."""

    def step(h, x):
        (a_r, a_z, a_n), (u_r, u_z, u_n) = pre_activations(x, h)
        r = jax.nn.sigmoid(a_r + u_r)
        z = jax.nn.sigmoid(a_z + u_z)
        n = jnp.tanh(a_n + r * u_n)
        h_next = (1.0 - z) * n + z * h
        return h_next, ((h_next, h, r, z, n, u_n) if keep else h_next)

    return lax.scan(step, h, xs, unroll=unroll)


def _gru_joined(i_kernels, i_biases, h_kernels, h_biases):
    """The GRU's joined ``(w_i, b_i, w_h, b_h)`` from its per-gate layers."""
    join = functools.partial(jnp.concatenate, axis=-1)
    return (*_joined(i_kernels, i_biases, join), *_joined(h_kernels, h_biases, join))


def _joined_gru_pre_activations(w_i, b_i, w_h, b_h):
    """``pre_activations(x, h)`` for ``_gru_loop``: one matmul per side."""
    return lambda x, h: (
        jnp.split(affine(x, w_i, b_i), 3, axis=-1),
        jnp.split(affine(h, w_h, b_h), 3, axis=-1),
    )


def _per_gate_gru_pre_activations(i_kernels, i_biases, h_kernels, h_biases):
    """``pre_activations(x, h)`` for ``_gru_loop``: one matmul per gate and side."""
    i_layers, h_layers = tuple(zip(i_kernels, i_biases)), tuple(zip(h_kernels, h_biases))
    return lambda x, h: (
        tuple(affine(x, w, b) for w, b in i_layers),
        tuple(affine(h, w, b) for w, b in h_layers),
    )


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _gru(unroll, per_gate, i_kernels, i_biases, h_kernels, h_biases, xs, h):
    layers = (i_kernels, i_biases, h_kernels, h_biases)
    if per_gate:
        pre_activations = _per_gate_gru_pre_activations(*layers)
    else:
        pre_activations = _joined_gru_pre_activations(*_gru_joined(*layers))
    return _gru_loop(unroll, pre_activations, xs, h, keep=False)


def _gru_jvp(unroll, per_gate, primals, tangents):
    # The derivative always runs the joined loop, whatever the forward pass runs.
    i_kernels, i_biases, h_kernels, h_biases, xs, h = primals
    di_kernels, di_biases, dh_kernels, dh_biases, dxs, dh = tangents
    w_i, b_i, w_h, b_h = _gru_joined(i_kernels, i_biases, h_kernels, h_biases)
    final, (ys, h_in, r, z, n, u_n) = _gru_loop(
        unroll, _joined_gru_pre_activations(w_i, b_i, w_h, b_h), xs, h, keep=True
    )
    dw_i = _joined_tangent(di_kernels, i_kernels)
    dw_h = _joined_tangent(dh_kernels, h_kernels)
    db_i = _joined_tangent(di_biases, _zero_filled(i_kernels, i_biases))
    db_h = _joined_tangent(dh_biases, _zero_filled(h_kernels, h_biases))
    # Every term of the gates' tangents that does not come from the step before, one
    # matmul each over every step's rows: the input side's (d_a) and the hidden side's
    # (d_u), kept apart for the candidate's gated hidden term.
    input_terms = [_rows(xs) @ dw_i] if dw_i is not None else []
    input_terms += [_rows(dxs) @ w_i] if not _zero(dxs) else []
    input_terms += [db_i] if db_i is not None else []
    hidden_terms = [_rows(h_in) @ dw_h] if dw_h is not None else []
    hidden_terms += [db_h] if db_h is not None else []
    shape = xs.shape[:-1] + w_h.shape[-1:]
    dh = jnp.zeros_like(h) if _zero(dh) else dh

    def step(dh, t):
        # As in _lstm_jvp, each product holds a tangent, so JAX's partial evaluation
        # moves nothing into a loop of its own.
        d_a, d_u, h, r, z, n, u_n = t
        da_r, da_z, da_n = jnp.split(d_a, 3, axis=-1)
        du_r, du_z, du_n = jnp.split(d_u + dh @ w_h, 3, axis=-1)
        d_r = da_r + du_r
        d_r = r * (d_r - r * d_r)
        d_z = da_z + du_z
        d_z = z * (d_z - z * d_z)
        d_n = da_n + (d_r * u_n + r * du_n)
        d_n = d_n - n * (n * d_n)
        dh = (d_n - z * d_n) + (d_z * h - d_z * n) + z * dh
        return dh, dh

    outside = [_outside_the_loop(t, shape, xs.dtype) for t in (input_terms, hidden_terms)]
    residuals = (*outside, h_in, r, z, n, u_n)
    dfinal, d_ys = lax.scan(step, dh, residuals, unroll=unroll)
    return (final, ys), (dfinal, d_ys)


_gru.defjvp(_gru_jvp, symbolic_zeros=True)
