"""The NNX chapter's checker: an LSTM's eight linen layers fused into NNX's two."""

import jax.numpy as jnp

from rnnlib.exercises.nnx import check_fuse


def _fused(params, order="ifgo", axis=-1):
    def side(name, leaf):
        return jnp.concatenate([params[name + gate][leaf] for gate in order], axis=axis)

    return {
        "dense_i": {"kernel": side("i", "kernel")},
        "dense_h": {"kernel": side("h", "kernel"), "bias": side("h", "bias")},
    }


def test_the_solution_passes():
    feedback = check_fuse(_fused)
    assert feedback and "all 2 cases" in str(feedback)


def test_a_wrong_gate_order_is_named():
    feedback = check_fuse(lambda params: _fused(params, order="igfo"))
    assert not feedback
    assert "gate order i, g, f, o; NNX expects i, f, g, o" in str(feedback)


def test_gates_stacked_on_the_first_axis_are_told_to_go_side_by_side():
    feedback = check_fuse(lambda params: _fused(params, axis=0))
    assert not feedback
    assert "has shape (12, 4); expected (3, 16)" in str(feedback)
    assert "side by side on the last axis" in str(feedback)


def test_a_bias_on_the_input_side_is_a_structure_problem():
    def bias_on_input(params):
        fused = _fused(params)
        fused["dense_i"]["bias"] = fused["dense_h"].pop("bias")
        return fused

    feedback = check_fuse(bias_on_input)
    assert not feedback
    assert "should be a dict with keys ['kernel']" in str(feedback)
