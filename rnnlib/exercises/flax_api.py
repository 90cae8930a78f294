"""Checkers for the exercises of "Flax's recurrent API at a glance": NNX's first carry, and a
linen GRU's parameters moved into an NNX GRU."""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rnnlib.exercises._check import Feedback, attempt, case_problems, compare

_GATES = ("r", "z", "n")


def _carry_cases():
    return [
        ("nnx.LSTMCell(6, 8), x (4, 7, 6)", ("LSTMCell", (4, 7, 6), 8)),
        ("nnx.GRUCell(6, 8), x with two batch dims (3, 2, 7, 6)", ("GRUCell", (3, 2, 7, 6), 8)),
        ("nnx.SimpleCell(6, 8), x with no batch dims (7, 6)", ("SimpleCell", (7, 6), 8)),
    ]


def check_nnx_first_carry(nnx_first_carry) -> Feedback:
    """Check ``nnx_first_carry(cell, x, rngs)``: the first carry of an NNX cell for input ``x``.

    ``x`` is batch-major, ``(*batch, time, channels)``; the carry must be the one
    ``cell.initialize_carry`` builds for one time step of ``x``, with ``rngs``' carry stream:
    ``(*batch, features)`` per leaf, with no time axis.
    """
    problems = []
    cases = _carry_cases()
    for name, (cell_name, x_shape, features) in cases:
        cell = getattr(nnx, cell_name)(x_shape[-1], features, rngs=nnx.Rngs(0))
        x = jnp.zeros(x_shape)
        got, problem = attempt(nnx_first_carry, cell, x, nnx.Rngs(1))
        if problem is None:
            want = cell.initialize_carry(x_shape[:-2] + x_shape[-1:], nnx.Rngs(1))
            explain = functools.partial(_carry_diagnosis, got, x_shape)
            problem = compare("the carry", got, want, explain=explain)
        elif "TypeError" in problem or "rngs" in problem.lower():
            problem += (
                " (NNX's initialize_carry takes the step's shape first and rngs second:"
                " linen's order, key first, does not carry over)"
            )
        if problem:
            problems.append(f"case '{name}': {problem}")
    return Feedback("check_nnx_first_carry", len(cases), tuple(problems))


def _carry_diagnosis(got, x_shape) -> str:
    leaves = jax.tree_util.tree_leaves(got)
    if not leaves:
        return ""
    shape = tuple(jnp.shape(leaves[0]))
    if shape[:-1] == tuple(x_shape[:-1]):
        return (
            " (the carry kept the time axis: initialize_carry wants the shape of one step,"
            " the input without its time axis)"
        )
    if len(x_shape) > 3 and shape[:-1] == tuple(x_shape[:1] + x_shape[2:-1]):
        return (
            f" (the batch dims here are {tuple(x_shape[:-2])}: the time axis is the"
            " second-to-last axis, not always axis 1)"
        )
    return ""


def linen_gru_params(in_features: int, features: int, seed: int, hn_bias: bool = False) -> dict:
    """A linen GRUCell's ``params`` with random values everywhere; ``hn``'s bias zero unless
    ``hn_bias``.

    Built by hand with NumPy, which costs no compilation; the checker runs them in linen's
    own ``nn.GRUCell``, which would refuse a layout that is not linen's.
    """
    rng = np.random.default_rng(seed)

    def layer(rows, bias):
        kernel = {"kernel": rng.normal(0.0, 0.5, (rows, features)).astype(np.float32)}
        if bias:
            kernel["bias"] = rng.normal(0.0, 0.5, (features,)).astype(np.float32)
        return kernel

    params = {f"i{g}": layer(in_features, bias=True) for g in _GATES}
    params |= {f"h{g}": layer(features, bias=g == "n") for g in _GATES}
    if not hn_bias:
        params["hn"]["bias"] = np.zeros(features, np.float32)
    return params


def _reference_port(params) -> dict:
    return {
        "dense_i": {
            "kernel": jnp.concatenate([params[f"i{g}"]["kernel"] for g in _GATES], axis=-1),
            "bias": jnp.concatenate([params[f"i{g}"]["bias"] for g in _GATES], axis=-1),
        },
        "dense_h": {
            "kernel": jnp.concatenate([params[f"h{g}"]["kernel"] for g in _GATES], axis=-1),
        },
    }


def _gru_cases():
    return [
        ("in_features 6, features 8", (6, 8, 0)),
        ("in_features 3, features 2", (3, 2, 10)),
    ]


def check_gru_to_nnx(gru_to_nnx) -> Feedback:
    """Check ``gru_to_nnx(params)``: a linen GRUCell's ``params`` as an NNX GRUCell's pure dict.

    The result must load into ``nnx.GRUCell(in_features, features)`` with
    ``nnx.replace_by_pure_dict`` and make it compute the linen cell's step. Where the linen
    ``hn`` bias is not zero, it has no place in NNX, and ``gru_to_nnx`` must raise a
    ``ValueError`` that names ``hn`` rather than drop it.
    """
    cases = _gru_cases()
    problems = case_problems(
        lambda in_features, features, seed: gru_to_nnx(
            linen_gru_params(in_features, features, seed)
        ),
        cases,
        _judge_port,
    )
    params = linen_gru_params(6, 8, 20, hn_bias=True)
    got, raised = attempt(gru_to_nnx, params)
    if raised is None:
        problems.append(
            "case 'hn bias not zero': it returned a result; NNX's GRU has no bias on its"
            " recurrent layer, so this port would change the outputs: raise a ValueError"
            " that names hn"
        )
    elif not raised.startswith("calling it raised ValueError") or "hn" not in raised:
        problems.append(f"case 'hn bias not zero': {raised}; expected a ValueError naming hn")
    return Feedback("check_gru_to_nnx", len(cases) + 1, tuple(problems))


def _judge_port(got, in_features, features, seed) -> str | None:
    params = linen_gru_params(in_features, features, seed)
    want = _reference_port(params)
    layout = {"dense_h": ["kernel"], "dense_i": ["bias", "kernel"]}
    if _layout(got) != layout:
        return (
            f"the dict should have the layout of nnx.GRUCell's parameters, {layout};"
            f" got {_layout(got)}"
        )
    # Only the layout of a cell: its arrays come from the reader's dict.
    cell = nnx.eval_shape(lambda: nnx.GRUCell(in_features, features, rngs=nnx.Rngs(0)))
    state = nnx.state(cell, nnx.Param)
    try:
        nnx.replace_by_pure_dict(state, got)
    except Exception as error:  # whatever a wrong dict makes NNX raise
        layout = jax.tree_util.tree_map(jnp.shape, want)
        return (
            f"it does not load into nnx.GRUCell: {type(error).__name__}: {error}"
            f" (NNX's GRU expects {layout})"
        )
    rng = np.random.default_rng(seed + 1)
    h = rng.normal(size=(4, features)).astype(np.float32)
    x = rng.normal(size=(4, in_features)).astype(np.float32)
    _, y_want = nn.GRUCell(features=features).apply({"params": params}, h, x)
    try:
        nnx.update(cell, state)
        _, y_got = cell(h, x)
    except Exception as error:  # arrays of the wrong shape fail here
        layout = jax.tree_util.tree_map(jnp.shape, want)
        return (
            f"the loaded nnx.GRUCell cannot run: {type(error).__name__}: {error}"
            f" (NNX's GRU expects {layout})"
        )
    return compare(
        "the NNX cell's output", y_got, y_want, explain=lambda: _port_diagnosis(got, want)
    )


def _layout(got):
    if not isinstance(got, dict):
        return type(got).__name__
    return {key: sorted(value) if isinstance(value, dict) else value for key, value in got.items()}


def _port_diagnosis(got, want) -> str:
    try:
        kernel = np.asarray(got["dense_i"]["kernel"])
        recurrent = np.asarray(got["dense_h"]["kernel"])
    except Exception:
        return ""
    if kernel.shape == want["dense_i"]["kernel"].shape[::-1]:
        return " (a linen kernel is (in, out) already: no transpose is needed)"
    blocks = np.split(kernel, 3, axis=-1)
    want_blocks = np.split(np.asarray(want["dense_i"]["kernel"]), 3, axis=-1)
    recurrent_blocks = np.split(recurrent, 3, axis=-1)
    want_recurrent = np.split(np.asarray(want["dense_h"]["kernel"]), 3, axis=-1)
    same_blocks = sorted(b.tobytes() for b in blocks) == sorted(b.tobytes() for b in want_blocks)
    if same_blocks and not all(np.array_equal(b, w) for b, w in zip(blocks, want_blocks)):
        return " (the gates are all there but out of order: NNX stacks them r, z, n)"
    if not all(np.array_equal(b, w) for b, w in zip(recurrent_blocks, want_recurrent)):
        return " (dense_h holds the recurrent layers hr, hz, hn, stacked r, z, n)"
    return ""
