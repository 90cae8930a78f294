"""Checker for the NNX chapter's exercise: an LSTM's eight layers fused into NNX's two."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp

from rnnlib.exercises._check import Feedback, compare, run_cases
from rnnlib.lstm import LSTMCell, OptimizedLSTMCell

GATES = "ifgo"


def _cases():
    cases = []
    for index, (channels, features) in enumerate([(3, 4), (5, 2)]):
        cell = LSTMCell(features=features)
        x = jnp.zeros((1, channels))
        carry = cell.initialize_carry(jax.random.key(0), x.shape)
        params = cell.init(jax.random.key(index), carry, x)["params"]
        # Fresh biases are zeros; make them count, so that a misplaced bias is seen.
        params = {
            name: {**layer, "bias": jnp.full((features,), 0.1 * (i + 1))}
            if "bias" in layer
            else layer
            for i, (name, layer) in enumerate(sorted(params.items()))
        }
        cases.append((f"{channels} inputs, features={features}", params))
    return cases


def _reference(params):
    from rnnlib import interop  # needs flax; imported only when the check runs

    features = params["hi"]["kernel"].shape[0]
    fused = interop.to_nnx(OptimizedLSTMCell(features=features), {"params": params})
    return {
        "dense_i": {"kernel": fused.dense_i.kernel[...]},
        "dense_h": {"kernel": fused.dense_h.kernel[...], "bias": fused.dense_h.bias[...]},
    }


def check_fuse(fuse) -> Feedback:
    """Check ``fuse(params)``: rnnlib/linen ``LSTMCell`` params -> ``nnx.OptimizedLSTMCell``'s.

    ``params`` has the eight layers ``ii, if, ig, io`` (input side, kernels only) and ``hi, hf,
    hg, ho`` (hidden side, kernels and biases). The answer is
    ``{"dense_i": {"kernel"}, "dense_h": {"kernel", "bias"}}``, each the four gates' arrays
    side by side on the last axis.
    """
    cases = [(name, (params,), _reference(params)) for name, params in _cases()]
    return run_cases("check_fuse", fuse, cases, _judge)


def _judge(got, params, want) -> str | None:
    return compare("the result", got, want, explain=lambda: _diagnosis(got, params))


def _diagnosis(got, params) -> str:
    try:
        kernel = jnp.asarray(got["dense_i"]["kernel"])
    except (KeyError, TypeError):
        return ""
    rows, columns = params["ii"]["kernel"].shape
    if kernel.shape == (4 * rows, columns):
        return " (the four gates go side by side on the last axis, not stacked on the first)"
    for order in itertools.permutations(GATES):
        blocks = [params["i" + gate]["kernel"] for gate in order]
        if kernel.shape == (blocks[0].shape[0], 4 * blocks[0].shape[1]) and jnp.array_equal(
            kernel, jnp.concatenate(blocks, axis=-1)
        ):
            if "".join(order) != GATES:
                return (
                    f" (dense_i's blocks are in the gate order {', '.join(order)}; NNX expects"
                    " i, f, g, o)"
                )
            return ""
    return ""
