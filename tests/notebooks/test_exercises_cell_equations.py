"""The checkers of the chapter "The cells from their equations": right attempts pass, and each
usual wrong attempt is rejected with a message that names what is wrong."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

from rnnlib.exercises import cell_equations as ce
from tests.tolerance import assert_close


def gru_step(params, h, x):
    """The chapter's solution, written independently of the checker's reference."""

    def dense(name, v):
        layer = params[name]
        return v @ layer["kernel"] + layer.get("bias", 0.0)

    r = jax.nn.sigmoid(dense("ir", x) + dense("hr", h))
    z = jax.nn.sigmoid(dense("iz", x) + dense("hz", h))
    n = jnp.tanh(dense("in", x) + r * dense("hn", h))
    return (1 - z) * n + z * h


def gru_reset_before(params, h, x):
    r = jax.nn.sigmoid(
        x @ params["ir"]["kernel"] + params["ir"]["bias"] + h @ params["hr"]["kernel"]
    )
    z = jax.nn.sigmoid(
        x @ params["iz"]["kernel"] + params["iz"]["bias"] + h @ params["hz"]["kernel"]
    )
    hidden = (r * h) @ params["hn"]["kernel"] + params["hn"]["bias"]
    n = jnp.tanh(x @ params["in"]["kernel"] + params["in"]["bias"] + hidden)
    return (1 - z) * n + z * h


def gru_swapped_z(params, h, x):
    h_new = gru_step(params, h, x)
    # Recover z and n the long way, then mix them the wrong way round.
    z = jax.nn.sigmoid(
        x @ params["iz"]["kernel"] + params["iz"]["bias"] + h @ params["hz"]["kernel"]
    )
    n = (h_new - z * h) / (1 - z)
    return z * n + (1 - z) * h


def mgu_step(params, h, x):
    f = jax.nn.sigmoid(
        x @ params["if"]["kernel"] + params["if"]["bias"] + h @ params["hf"]["kernel"]
    )
    hidden = f * (h @ params["hn"]["kernel"] + params["hn"]["bias"])
    n = jnp.tanh(x @ params["in"]["kernel"] + params["in"]["bias"] + hidden)
    return (1 - f) * n + f * h


@pytest.mark.parametrize(
    "check, solution", [(ce.check_gru_step, gru_step), (ce.check_mgu_step, mgu_step)]
)
def test_the_solution_passes_every_case(check, solution):
    feedback = check(solution)
    assert feedback, str(feedback)
    assert str(feedback).startswith("✔") and f"all {len(ce.CASES)} cases" in str(feedback)


def test_a_jitted_solution_passes_too():
    assert ce.check_gru_step(jax.jit(gru_step))


def test_reset_gate_before_the_matmul_is_named():
    message = str(ce.check_gru_step(gru_reset_before))
    assert message.startswith("✘")
    assert "applies the reset gate before the hidden matmul, (r * h) @ W_hn" in message
    assert "case 'batch 1': h_new" in message  # which case and which value


def test_swapped_update_gate_is_named():
    message = str(ce.check_gru_step(gru_swapped_z))
    assert "swaps z and 1 - z" in message
    assert "before the hidden matmul" not in message


def test_both_mistakes_at_once_are_both_named():
    def both(params, h, x):
        h_before = gru_reset_before(params, h, x)
        z = jax.nn.sigmoid(
            x @ params["iz"]["kernel"] + params["iz"]["bias"] + h @ params["hz"]["kernel"]
        )
        n = (h_before - z * h) / (1 - z)
        return z * n + (1 - z) * h

    message = str(ce.check_gru_step(both))
    assert "before the hidden matmul" in message and "swaps z and 1 - z" in message


def test_missing_hidden_bias_is_named():
    def no_bias(params, h, x):
        params = dict(params, hn={"kernel": params["hn"]["kernel"]})
        return gru_step(params, h, x)

    assert "leaves out params['hn']['bias']" in str(ce.check_gru_step(no_bias))


def test_wrong_shape_is_reported_with_the_expected_shape():
    message = str(ce.check_gru_step(lambda params, h, x: gru_step(params, h, x)[..., :3]))
    assert "h_new has shape (1, 3); expected (1, 4)" in message
    assert "must have the shape of h" in message
    assert "known mistake" not in message


def test_an_attempt_that_assumes_one_batch_axis_fails_only_there():
    def flat(params, h, x):
        return gru_step(params, h.reshape(-1, h.shape[-1]), x.reshape(-1, x.shape[-1]))

    feedback = ce.check_gru_step(flat)
    assert len(feedback.problems) == 1
    assert "case 'batch (2, 3)': h_new has shape (6, 4); expected (2, 3, 4)" in str(feedback)


def test_an_exception_is_reported_not_raised():
    def stub(params, h, x):
        raise NotImplementedError("write the GRU step here")

    feedback = ce.check_gru_step(stub)
    assert not feedback
    assert "calling it raised NotImplementedError: write the GRU step here" in str(feedback)
    assert len(feedback.problems) == len(ce.CASES)


def test_returning_the_cell_pair_is_explained():
    message = str(ce.check_gru_step(lambda params, h, x: (gru_step(params, h, x),) * 2))
    assert "returned a tuple of 2; return only the new h" in message


def test_a_plain_wrong_answer_gets_no_diagnosis():
    message = str(ce.check_gru_step(lambda params, h, x: h))
    assert "largest difference" in message and "known mistake" not in message


@pytest.mark.parametrize(
    "mistake, words",
    [
        (dict(reset="before"), "applies f before the hidden matmul"),
        (dict(reset="none"), "does not multiply the candidate's hidden term by f"),
        (dict(swap=True), "swaps f and 1 - f"),
    ],
)
def test_mgu_mistakes_are_named(mistake, words):
    message = str(ce.check_mgu_step(lambda params, h, x: ce._mgu(params, h, x, **mistake)))
    assert message.startswith("✘") and words in message


@pytest.mark.parametrize(
    "cell, variant",
    [(nn.GRUCell(features=ce.FEATURES), ce._gru), (nn.MGUCell(features=ce.FEATURES), ce._mgu)],
)
def test_the_checkers_correct_form_is_flax_linens(cell, variant):
    # The diagnoses rest on _gru/_mgu with default arguments being the right equations.
    for _, params, h, x in ce._cases(cell, seed=0):
        want, _ = cell.apply({"params": params}, h, x)
        terms = ce.CHANNELS + ce.FEATURES + 1
        assert_close(variant(params, h, x), want, terms=terms)


@pytest.mark.parametrize(
    "check, cell",
    [
        (ce.check_gru_step, nn.GRUCell(features=ce.FEATURES)),
        (ce.check_mgu_step, nn.MGUCell(features=ce.FEATURES)),
    ],
)
def test_flax_linens_own_cell_passes_its_checker(check, cell):
    # The reference is flax.linen's cell: its own step, as (params, h, x) -> h_new, passes.
    feedback = check(lambda params, h, x: cell.apply({"params": params}, h, x)[0])
    assert feedback, str(feedback)
