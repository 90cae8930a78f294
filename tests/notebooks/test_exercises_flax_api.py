"""The checkers of "Flax's recurrent API at a glance": NNX's first carry and a GRU port."""

import flax.linen as nn
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rnnlib.exercises.flax_api import check_gru_to_nnx, check_nnx_first_carry, linen_gru_params
from tests.tolerance import assert_close


def first_carry(cell, x, rngs):
    return cell.initialize_carry(x[..., 0, :].shape, rngs)


def test_the_first_carry_solution_passes():
    feedback = check_nnx_first_carry(first_carry)
    assert feedback and "all 3 cases" in str(feedback)


def test_the_whole_input_shape_is_told_to_drop_the_time_axis():
    feedback = check_nnx_first_carry(lambda cell, x, rngs: cell.initialize_carry(x.shape, rngs))
    assert not feedback
    assert "the carry kept the time axis" in str(feedback)


def test_one_batch_axis_only_is_told_what_the_batch_dims_are():
    feedback = check_nnx_first_carry(
        lambda cell, x, rngs: cell.initialize_carry(x[:, 0].shape, rngs)
    )
    assert not feedback
    assert "the batch dims here are (3, 2)" in str(feedback)


def test_linen_argument_order_is_named():
    feedback = check_nnx_first_carry(
        lambda cell, x, rngs: cell.initialize_carry(rngs, x[..., 0, :].shape)
    )
    assert not feedback
    assert "takes the step's shape first and rngs second" in str(feedback)


def port(params):
    if np.any(np.asarray(params["hn"]["bias"]) != 0):
        raise ValueError("linen's hn bias is not zero; NNX's GRU has no place for it")
    gates = ("r", "z", "n")
    return {
        "dense_i": {
            "kernel": jnp.concatenate([params["i" + g]["kernel"] for g in gates], axis=1),
            "bias": jnp.concatenate([params["i" + g]["bias"] for g in gates]),
        },
        "dense_h": {"kernel": jnp.concatenate([params["h" + g]["kernel"] for g in gates], axis=1)},
    }


def test_the_port_solution_passes():
    feedback = check_gru_to_nnx(port)
    assert feedback and "all 3 cases" in str(feedback)


def test_the_solution_really_computes_linen_s_step():
    # Independent of the checker: load the port by hand and run both cells on one step.
    params = linen_gru_params(3, 4, seed=5)
    cell = nnx.GRUCell(3, 4, rngs=nnx.Rngs(0))
    state = nnx.state(cell, nnx.Param)
    nnx.replace_by_pure_dict(state, port(params))
    nnx.update(cell, state)
    h, x = jnp.ones((2, 4)), jnp.linspace(-1.0, 1.0, 6).reshape(2, 3)
    _, want = nn.GRUCell(features=4).apply({"params": params}, h, x)
    _, got = cell(h, x)
    assert_close(got, want, terms=3 + 4)  # each gate sums 3 input and 4 carry products
    assert float(jnp.max(jnp.abs(want))) > 0.1  # a step that does something


def test_gates_out_of_order_are_named():
    def r_n_z(params):
        result = port(params)
        for layer in ("dense_i", "dense_h"):
            r, z, n = jnp.split(result[layer]["kernel"], 3, axis=1)
            result[layer]["kernel"] = jnp.concatenate([r, n, z], axis=1)
        r, z, n = jnp.split(result["dense_i"]["bias"], 3)
        result["dense_i"]["bias"] = jnp.concatenate([r, n, z])
        return result

    feedback = check_gru_to_nnx(r_n_z)
    assert not feedback
    assert "out of order: NNX stacks them r, z, n" in str(feedback)


def test_dropping_hn_bias_silently_is_refused():
    def silent(params):
        return port(
            {**params, "hn": {**params["hn"], "bias": jnp.zeros_like(params["hn"]["bias"])}}
        )

    feedback = check_gru_to_nnx(silent)
    assert not feedback
    assert "case 'hn bias not zero'" in str(feedback) and "raise a ValueError" in str(feedback)
    assert str(feedback).count("case '") == 1  # the other cases pass


def test_a_bias_on_dense_h_is_reported_as_not_loading():
    def with_bias(params):
        result = port(params)
        result["dense_h"]["bias"] = params["hn"]["bias"]
        return result

    feedback = check_gru_to_nnx(with_bias)
    assert not feedback
    assert "the layout of nnx.GRUCell's parameters" in str(feedback)
    assert "'dense_h': ['bias', 'kernel']" in str(feedback)


def test_empty_layers_are_told_the_layout():
    feedback = check_gru_to_nnx(lambda params: {"dense_i": {}, "dense_h": {}})
    assert not feedback
    assert "got {'dense_i': [], 'dense_h': []}" in str(feedback)


@pytest.mark.parametrize("wrong", [KeyError, TypeError])
def test_any_other_refusal_is_not_accepted(wrong):
    def refuses(params):
        if np.any(np.asarray(params["hn"]["bias"]) != 0):
            raise wrong("hn")
        return port(params)

    feedback = check_gru_to_nnx(refuses)
    assert not feedback
    assert "expected a ValueError naming hn" in str(feedback)
