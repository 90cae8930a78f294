"""Inputs that used to give a wrong answer without a word: each now gives the right answer
or a clear error, the same in the loop and in the associative scan, eagerly and under jit."""

import re

import jax
import jax.numpy as jnp
import pytest

from rnnlib import RNN, GRUCell, LinearCellBase, MinGRUCell, Plan, RGLRUCell
from rnnlib.linear import Param
from tests import tolerance

KEY = jax.random.key(0)
SEQUENTIAL = Plan(scan="sequential")
ASSOCIATIVE = Plan(scan="associative")


def _raises(exc, *fragments):
    return pytest.raises(exc, match="(?s)" + "".join(f"(?=.*{re.escape(f)})" for f in fragments))


class _ConstantDecay(LinearCellBase):
    """h' = a * h + b with a and b parameters: coefficients that never read the input."""

    features: int

    def layers(self, input_shape):
        half = lambda key, shape, dtype: jnp.full(shape, 0.5, dtype)  # noqa: E731
        return {"a": Param((self.features,), half), "b": Param((self.features,), half)}

    def coefficients(self, a):
        return a["a"], a["b"]


def test_coefficients_that_do_not_read_x_scan_over_time_as_the_loop_does():
    x = jnp.ones((2, 5, 4))
    rnn = RNN(_ConstantDecay(3))
    variables = rnn.init(KEY, x)
    loop = RNN(_ConstantDecay(3), plan=SEQUENTIAL).apply(variables, x)
    scan = RNN(_ConstantDecay(3), plan=ASSOCIATIVE).apply(variables, x)
    assert loop.shape == scan.shape == (2, 5, 3)
    # h_t = 0.5 h_{t-1} + 0.5 from h_0 = 0: 1 - 0.5 ** t.
    want = 1 - 0.5 ** jnp.arange(1, 6)
    tolerance.assert_close(loop, jnp.broadcast_to(want[None, :, None], (2, 5, 3)), terms=5)
    tolerance.assert_close(scan, loop, terms=5)


@pytest.mark.parametrize("plan", [SEQUENTIAL, ASSOCIATIVE], ids=["loop", "scan"])
def test_traced_seq_lengths_outside_zero_to_time_are_clamped_in_loop_and_scan(plan):
    # Eagerly such lengths are a ValueError (tests/unit/test_errors.py); under jit nothing can
    # be refused, and the scan used to give a NaN carry for a length past the end.
    rnn = RNN(MinGRUCell(4), plan=plan, return_carry=True)
    x = jax.random.normal(jax.random.key(1), (3, 5, 2))
    variables = rnn.init(KEY, x)
    carry, _ = jax.jit(rnn.apply)(variables, x, seq_lengths=jnp.array([9, -2, 3]))
    want, _ = rnn.apply(variables, x, seq_lengths=jnp.array([5, 0, 3]))
    assert bool(jnp.isfinite(carry).all())
    tolerance.assert_close(carry, want, terms=5 * (2 + 4 + 1))


@pytest.mark.parametrize("c", [-1.0, 0.0, float("nan"), "8"])
def test_an_rglru_whose_decay_would_not_be_below_one_is_refused(c):
    with _raises(ValueError, "c > 0", f"c={c!r}"):
        RGLRUCell(8, c=c)


@pytest.mark.parametrize(
    "cell, plan",
    [(GRUCell(4), SEQUENTIAL), (MinGRUCell(4), SEQUENTIAL), (MinGRUCell(4), ASSOCIATIVE)],
    ids=["gru-loop", "mingru-loop", "mingru-scan"],
)
@pytest.mark.parametrize("return_carry", [False, True])
def test_a_nan_in_padded_steps_does_not_poison_the_gradient(cell, plan, return_carry):
    x = jax.random.normal(jax.random.key(2), (2, 6, 3))
    lengths = jnp.array([6, 3])
    x = x.at[1, 3:].set(jnp.nan)  # padding of the second sequence
    rnn = RNN(cell, plan=plan, return_carry=return_carry)
    variables = rnn.init(KEY, x)
    valid = (jnp.arange(6) < lengths[:, None])[..., None]

    def loss(v, x):
        out = rnn.apply(v, x, seq_lengths=lengths)
        if return_carry:
            return jnp.sum(out[0] ** 2)
        return jnp.sum(jnp.where(valid, out, 0.0) ** 2)

    grads = jax.grad(loss, argnums=(0, 1))(variables, x)
    for g in jax.tree_util.tree_leaves(grads):
        assert bool(jnp.isfinite(g).all())
    # The valid steps see the same inputs: the loss is the one of finite padding.
    clean = jnp.where(jnp.isnan(x), 0.0, x)
    # The loss sums 2 sequences x 6 steps x 4 features, each step over input, carry, bias.
    tolerance.assert_close(loss(variables, x), loss(variables, clean), terms=2 * 6 * 4 * 8)
