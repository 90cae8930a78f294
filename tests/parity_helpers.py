"""Shared helpers for the parity, property and transform tests.

Every parity test builds one configuration twice, once from ``flax.linen`` and once
from ``rnnlib`` (their class and field names are the same), gives both the same
variables and inputs, and compares the results up to rounding (``tests.tolerance``).

rnnlib does not reproduce Flax's random initial values, only their names, shapes
and dtypes. So most tests draw their own random variables in the layout of Flax's
parameter tree (``random_variables``) and apply both libraries to them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

import rnnlib
from tests import tolerance

LIBRARIES = {"flax": nn, "rnnlib": rnnlib}

BATCH_DIMS = [(), (2,), (2, 3)]
BATCH_IDS = ["no-batch", "batch", "batch2x3"]

# The number of time steps in the sequences of the RNN and Bidirectional parity tests.
TIME = 5


# ---------------------------------------------------------------------------
# Cell configurations, each buildable from either library.


def hard_gate(x):
    """A custom gate function (not the default sigmoid)."""
    return jax.nn.hard_sigmoid(x)


def soft_activation(x):
    """A custom activation function (not the default tanh)."""
    return jax.nn.soft_sign(x)


@dataclasses.dataclass(frozen=True)
class CellCase:
    """A cell configuration: ``make(lib, **overrides)`` builds it from ``flax.linen`` or rnnlib.

    ``feature_shape`` is the shape of one step's input without batch dims,
    ``(*signal, channels)``.
    """

    id: str
    make: Callable
    feature_shape: tuple[int, ...]

    def twins(self, **overrides):
        """The same cell built by Flax and by rnnlib."""
        return build_twins(lambda lib: self.make(lib, **overrides))


def build_twins(build):
    """``(build(flax.linen), build(rnnlib))``: one configuration built by both libraries."""
    return build(nn), build(rnnlib)


def _cell(name, **fields):
    return lambda lib, **overrides: getattr(lib, name)(**{**fields, **overrides})


DENSE_CELLS = [
    CellCase("LSTMCell", _cell("LSTMCell", features=4), (3,)),
    CellCase("OptimizedLSTMCell", _cell("OptimizedLSTMCell", features=4), (3,)),
    CellCase("GRUCell", _cell("GRUCell", features=4), (3,)),
    CellCase("MGUCell-reset_gate", _cell("MGUCell", features=4, reset_gate=True), (3,)),
    CellCase("MGUCell-no_reset_gate", _cell("MGUCell", features=4, reset_gate=False), (3,)),
    CellCase("SimpleCell", _cell("SimpleCell", features=4), (3,)),
    CellCase("SimpleCell-residual", _cell("SimpleCell", features=4, residual=True), (3,)),
]

CUSTOM_FN_CELLS = [
    CellCase(
        f"{name}-custom_fns",
        _cell(name, features=4, gate_fn=hard_gate, activation_fn=soft_activation),
        (3,),
    )
    for name in ("LSTMCell", "OptimizedLSTMCell", "GRUCell", "MGUCell")
] + [
    CellCase(
        "SimpleCell-custom_fns",
        _cell("SimpleCell", features=4, activation_fn=soft_activation),
        (3,),
    )
]

CONV_CELLS = [
    CellCase("ConvLSTMCell-1d", _cell("ConvLSTMCell", features=3, kernel_size=(3,)), (6, 2)),
    CellCase("ConvLSTMCell-2d", _cell("ConvLSTMCell", features=3, kernel_size=(3, 3)), (4, 5, 2)),
    CellCase(
        "ConvLSTMCell-3d", _cell("ConvLSTMCell", features=2, kernel_size=(2, 2, 2)), (3, 3, 4, 2)
    ),
]

ALL_CELLS = DENSE_CELLS + CUSTOM_FN_CELLS + CONV_CELLS
CELLS_BY_ID = {case.id: case for case in ALL_CELLS}

# Rounded terms per element (tests/tolerance.py) in the parity tests: the longest sum in
# one step of the cells above, and over the TIME steps of a sequence. A gradient test
# counts its own with tolerance.recurrent_terms, which adds the rows summed.
STEP_TERMS = max(
    tolerance.step_terms(case.make(rnnlib), case.feature_shape[-1]) for case in ALL_CELLS
)
OUTPUT_TERMS = TIME * STEP_TERMS


def cell_params(ids):
    """``pytest.param``-ready list of cell cases for the given ids."""
    return [CELLS_BY_ID[i] for i in ids]


# ---------------------------------------------------------------------------
# Inputs and variables.


def sequence_input(seed, batch_dims, time, feature_shape, *, time_major=False, dtype=jnp.float32):
    """A normal random input shaped ``(*batch, time, *signal, channels)`` or ``(time, *batch, *signal, channels)``."""
    shape = (
        (time, *batch_dims, *feature_shape) if time_major else (*batch_dims, time, *feature_shape)
    )
    return random_array(seed, shape, dtype)


# Test data comes from NumPy's generator: drawing with jax.random would compile a
# new program for every shape, which costs more than the computations under test.


def random_array(seed, shape, dtype=jnp.float32, scale=1.0):
    """Normal random values; complex dtypes get a random imaginary part too."""
    rng = np.random.default_rng(seed)
    dtype = jnp.dtype(dtype)
    values = rng.standard_normal(shape)
    if jnp.issubdtype(dtype, jnp.complexfloating):
        values = values + 1j * rng.standard_normal(shape)
    return jnp.asarray(scale * values, dtype=dtype)


def random_lengths(seed, batch_dims, time, *, minimum=1):
    """Integer sequence lengths in ``[minimum, time]``, one per batch element."""
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.integers(minimum, time + 1, size=batch_dims), dtype=jnp.int32)


def sequence_lengths(batch_dims, *, seed=3, minimum=1):
    """Random lengths in ``[minimum, TIME]`` for sequences with the given ``batch_dims``."""
    return random_lengths(seed, batch_dims, TIME, minimum=minimum)


def random_variables(flax_module, seed, *args, scale=0.5, **kwargs):
    """Random variables laid out like ``flax_module.init(key, *args, **kwargs)``.

    Flax's tree is read with ``jax.eval_shape`` (no values are computed), and
    every leaf, biases included, gets its own random values so that a
    parameter used in the wrong place changes the numbers.
    """
    shapes = jax.eval_shape(
        lambda key, *args: flax_module.init(key, *args, **kwargs), jax.random.key(0), *args
    )
    leaves, treedef = jax.tree_util.tree_flatten(shapes)
    values = [
        random_array((seed, i), leaf.shape, leaf.dtype, scale) for i, leaf in enumerate(leaves)
    ]
    return jax.tree_util.tree_unflatten(treedef, values)


def random_like(seed, tree):
    """A tree with the structure, shapes and dtypes of ``tree``, filled with random values."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    values = [
        random_array((seed, i), np.shape(leaf), jnp.result_type(leaf))
        for i, leaf in enumerate(leaves)
    ]
    return jax.tree_util.tree_unflatten(treedef, values)


def random_carry(cell, seed, step_shape):
    """A carry laid out like ``cell.initialize_carry(key, step_shape)``, filled with random values.

    ``step_shape`` is the shape of one step's input, ``(*batch, *signal, channels)``.
    """
    return random_like(seed, cell.initialize_carry(jax.random.key(0), step_shape))


def rnn_carry(cell, key, x, *, time_major=False):
    """``cell.initialize_carry`` for one step of the sequence ``x``."""
    time_axis = 0 if time_major else x.ndim - cell.num_feature_axes - 1
    step_shape = x.shape[:time_axis] + x.shape[time_axis + 1 :]
    return cell.initialize_carry(key, step_shape)


# ---------------------------------------------------------------------------
# Comparing trees.


def plain(tree):
    """The same tree with every mapping as a ``dict`` and every tuple-like as a ``tuple``."""
    if isinstance(tree, Mapping):
        return {k: plain(v) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)):
        return tuple(plain(v) for v in tree)
    return tree


def signature(tree):
    """``{path: (shape, dtype)}`` for every leaf; the layout a reader would print."""
    flat, _ = jax.tree_util.tree_flatten_with_path(plain(tree))
    return {
        jax.tree_util.keystr(path): (tuple(np.shape(leaf)), jnp.result_type(leaf))
        for path, leaf in flat
    }


def assert_same_signature(actual, expected):
    """Same paths, shapes and dtypes in both trees."""
    got, want = signature(actual), signature(expected)
    assert got.keys() == want.keys(), (
        f"paths differ: only in actual {sorted(got.keys() - want.keys())}, "
        f"only in expected {sorted(want.keys() - got.keys())}"
    )
    for path in want:
        assert got[path] == want[path], f"{path}: got {got[path]}, expected {want[path]}"


def _to_numpy(x):
    x = jnp.asarray(x)
    if x.dtype == jnp.bfloat16:
        x = x.astype(jnp.float32)
    return np.asarray(x)


def assert_trees_close(actual, expected, *, terms, label="", compute_dtype=None):
    """Same structure, shapes and dtypes, and values within the rounding bound of
    ``tests.tolerance`` for ``terms`` rounded terms per element.

    ``label`` names the case in failure messages.
    """
    actual, expected = plain(actual), plain(expected)
    assert signature(actual) == signature(expected), (
        f"{label}: shapes or dtypes differ:\n{signature(actual)}\n{signature(expected)}"
    )
    tolerance.assert_close(actual, expected, terms=terms, label=label, compute_dtype=compute_dtype)


def assert_matches_flax(actual, expected, *, label="", terms=None, compute_dtype=None):
    """rnnlib's result equals Flax's up to rounding (``OUTPUT_TERMS`` unless ``terms``;
    ``compute_dtype`` when the cells compute in another dtype than they return)."""
    assert_trees_close(
        actual, expected, label=label, terms=terms or OUTPUT_TERMS, compute_dtype=compute_dtype
    )


def assert_each_matches_flax(pairs, *, terms=None):
    """``pairs`` maps a case name to ``(rnnlib_result, flax_result)``; each must match."""
    assert pairs
    for name, (actual, expected) in pairs.items():
        assert_matches_flax(actual, expected, label=name, terms=terms)


def assert_apply_matches_flax(
    flax_module,
    module,
    variables,
    x,
    *,
    num_batch_dims=None,
    terms=None,
    compute_dtype=None,
    **kwargs,
):
    """``module.apply(variables, x, **kwargs)`` equals Flax's; returns rnnlib's result.

    Flax's result comes from ``jit_apply``, or, given ``num_batch_dims``, from
    ``flax_reference`` (which lifts Flax's one-batch-dim limit). ``terms`` is passed
    to ``assert_matches_flax``.
    """
    got = module.apply(variables, x, **kwargs)
    if num_batch_dims is None:
        expected = jit_apply(flax_module, variables, x, **kwargs)
    else:
        expected = flax_reference(
            flax_module, variables, x, num_batch_dims=num_batch_dims, **kwargs
        )
    assert_matches_flax(got, expected, terms=terms, compute_dtype=compute_dtype)
    return got


def assert_either_init_matches_flax(flax_module, module, x, **kwargs):
    """Variables from rnnlib's ``init`` and random ones in Flax's layout both give Flax's numbers.

    Both variable sets go through one compiled Flax apply. Returns rnnlib's variables.
    """
    variables = module.init(jax.random.key(1), x, **kwargs)
    flax_apply = jitted(flax_module)
    for name, each in {
        "rnnlib init": variables,
        "Flax layout": random_variables(flax_module, 2, x),
    }.items():
        assert_matches_flax(
            module.apply(each, x, **kwargs), flax_apply(each, x, **kwargs), label=name
        )
    return variables


def assert_options_match_flax(cases, variables, x, lengths, *, num_batch_dims):
    """Each case applied by rnnlib equals Flax's, all compiled as one program.

    ``cases`` maps a name to ``(flax_module, module, options, with_lengths)``.
    ``options`` holds the call's keyword arguments, ``time_major`` among them; the
    batch-major input ``x`` is moved to time-major for the cases that ask for it,
    and ``lengths`` is passed as ``seq_lengths`` where ``with_lengths``. Inputs and
    lengths are arguments of the program, not constants for XLA to fold.
    """

    def both(variables, x, lengths):
        inputs = {False: x, True: jnp.moveaxis(x, num_batch_dims, 0)}
        results = {}
        for name, (flax_module, module, options, with_lengths) in cases.items():
            if with_lengths:
                options = dict(options, seq_lengths=lengths)
            xx = inputs[options["time_major"]]
            results[name] = (
                module.apply(variables, xx, **options),
                flax_reference(
                    flax_module, variables, xx, num_batch_dims=num_batch_dims, **options
                ),
            )
        return results

    assert_each_matches_flax(jit_together(both, variables, x, lengths))


def jit_together(fn, *args):
    """``fn(*args)`` compiled as one program.

    Compiling dominates these tests: one program holding several rnnlib and Flax
    calls compiles in about the time of a single call, so related cases share one.
    """
    return jax.jit(fn)(*args)


# ---------------------------------------------------------------------------
# Reference computations for the cases where Flax is wrong.


def batch_major(x, num_batch_dims, time_major):
    """Moves the time axis of ``x`` to just after the batch dims."""
    return jnp.moveaxis(x, 0, num_batch_dims) if time_major else x


def step_by_step(apply, cell_variables, sequence, carry, length, *, reverse=False):
    """Runs one unbatched sequence ``(time, *signal, channels)`` through a cell in a Python loop.

    ``apply`` is the cell's ``apply`` (possibly jitted). Only the first ``length``
    steps are valid; with ``reverse`` they are visited last to first. Returns the
    carry after the last valid step and the outputs in the order they were computed.
    """
    steps = range(length - 1, -1, -1) if reverse else range(length)
    outputs = []
    for t in steps:
        carry, y = apply(cell_variables, carry, sequence[t])
        outputs.append(y)
    return carry, outputs


def final_carries_one_by_one(
    cell,
    cell_variables,
    x,
    seq_lengths,
    *,
    num_batch_dims,
    time_major=False,
    reverse=False,
    initial_carry=None,
    init_key=None,
):
    """Each sequence's final carry, computed alone with ``step_by_step``.

    ``x`` is the batched input of an RNN call, ``seq_lengths`` its lengths (or
    ``None``: every sequence is full length). The carries are stacked back into
    the batch layout ``(*batch, *carry_features)``.
    """
    x = batch_major(x, num_batch_dims, time_major)
    batch_dims = x.shape[:num_batch_dims]
    time = x.shape[num_batch_dims]
    if initial_carry is None:
        key = jax.random.key(0) if init_key is None else init_key
        step_shape = x.shape[:num_batch_dims] + x.shape[num_batch_dims + 1 :]
        initial_carry = cell.initialize_carry(key, step_shape)
    apply = jax.jit(cell.apply)  # one compiled step for every sequence
    carries = []
    for index in np.ndindex(*batch_dims):
        length = time if seq_lengths is None else int(np.asarray(seq_lengths)[index])
        carry0 = jax.tree_util.tree_map(lambda c, index=index: c[index], initial_carry)
        carry, _ = step_by_step(apply, cell_variables, x[index], carry0, length, reverse=reverse)
        carries.append(carry)
    if not batch_dims:
        return carries[0]
    stacked = jax.tree_util.tree_map(lambda *cs: jnp.stack(cs), *carries)
    return jax.tree_util.tree_map(lambda c: c.reshape(*batch_dims, *c.shape[1:]), stacked)


def rnn_carries_one_by_one(rnn, rnn_params, x, seq_lengths, **kwargs):
    """``final_carries_one_by_one`` for the cell of ``rnn``, whose params are ``rnn_params``.

    ``rnn_params`` is the RNN's own subtree of params, ``{"cell": ...}``.
    """
    cell_variables = {"params": rnn_params["cell"]}
    return final_carries_one_by_one(rnn.cell, cell_variables, x, seq_lengths, **kwargs)


def flatten_batch(x, seq_lengths, num_batch_dims, time_major):
    """Merges the batch dims of an input (and its lengths) into one, for Flax's one-batch-dim path."""
    if time_major:
        shape = (x.shape[0], -1, *x.shape[1 + num_batch_dims :])
    else:
        shape = (-1, *x.shape[num_batch_dims:])
    lengths = None if seq_lengths is None else jnp.reshape(seq_lengths, (-1,))
    return jnp.reshape(x, shape), lengths


def unflatten_carry(carry, batch_dims):
    """Inverse of ``flatten_batch`` for a carry of shape ``(prod(batch), *signal, features)``."""
    return jax.tree_util.tree_map(lambda c: c.reshape(*batch_dims, *c.shape[1:]), carry)


def jitted(module, **static):
    """``module.apply`` compiled with ``jax.jit``, with the given keyword arguments fixed.

    Used for Flax, the reference: one compiled program costs much less than
    Flax's eager op-by-op dispatch, and a test that applies the same shapes twice
    reuses it. Call it as ``f(variables, *args, **array_kwargs)``.
    """

    @jax.jit
    def run(variables, args, traced):
        return module.apply(variables, *args, **traced, **static)

    return lambda variables, *args, **traced: run(variables, args, traced)


def jit_apply(module, variables, *args, **kwargs):
    """``module.apply(variables, *args, **kwargs)`` under ``jax.jit``.

    Flags (``bool``/``None``/``int`` keyword arguments) stay static; arrays,
    carries and keys are traced.
    """
    static = {k: v for k, v in kwargs.items() if v is None or isinstance(v, (bool, int))}
    traced = {k: v for k, v in kwargs.items() if k not in static}
    return jitted(module, **static)(variables, *args, **traced)


def flax_reference(flax_module, variables, x, *, num_batch_dims, **kwargs):
    """Flax's result for an RNN or Bidirectional call, with its one-batch-dim limit lifted.

    Flax selects the carry at each sequence's last valid step correctly only for
    exactly one batch dim. With more, this merges the batch dims into one (and
    ``seq_lengths`` and ``initial_carry`` with them), runs Flax, and splits the
    results back. Lengths of zero are not handled here: Flax's carry is wrong there.
    """
    seq_lengths = kwargs.get("seq_lengths")
    time_major = kwargs.get("time_major")
    if time_major is None:
        time_major = flax_module.time_major
    if num_batch_dims <= 1 or seq_lengths is None:
        return jit_apply(flax_module, variables, x, **kwargs)
    batch_dims = np.shape(seq_lengths)
    x, kwargs["seq_lengths"] = flatten_batch(x, seq_lengths, num_batch_dims, time_major)
    if kwargs.get("initial_carry") is not None:
        kwargs["initial_carry"] = jax.tree_util.tree_map(
            lambda c: c.reshape(-1, *c.shape[num_batch_dims:]), kwargs["initial_carry"]
        )
    result = jit_apply(flax_module, variables, x, **kwargs)

    def split_outputs(y):
        if time_major:
            return y.reshape(y.shape[0], *batch_dims, *y.shape[2:])
        return y.reshape(*batch_dims, *y.shape[1:])

    return_carry = kwargs.get("return_carry")
    if return_carry is None:
        return_carry = flax_module.return_carry
    if return_carry:
        carry, outputs = result
        return unflatten_carry(carry, batch_dims), jax.tree_util.tree_map(split_outputs, outputs)
    return jax.tree_util.tree_map(split_outputs, result)
