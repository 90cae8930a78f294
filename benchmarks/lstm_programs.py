"""Hand-written LSTM programs in flax.linen's parameter layout, for the LSTM studies.

``benchmarks.contenders`` builds them as contenders by name, and ``benchmarks.backward`` and
``benchmarks.forward`` time them over the sweep's LSTM grid. They live here, apart from both,
so that every benchmarks module imports this one and none imports a study.

Two training programs take the kernels' gradients after the backward loop (``BACKWARD``):

- ``lax.scan:custom_vjp``: a ``jax.custom_vjp`` whose forward loop stores the gate
  activations and whose backward loop is written by hand. Reverse mode only.
- ``lax.scan:custom_jvp``: a ``jax.custom_jvp`` whose tangent is a loop linear in the
  tangents; JAX transposes it into a backward loop of the same shape.

Five forward programs schedule the same arithmetic other ways (``FORWARD``): one matmul per
gate and side, per gate on the hidden side only, one stacked ``[x, h]`` matmul, the input
projection hoisted before the loop, and four steps unrolled per iteration.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

_INPUT = ("ii", "if", "ig", "io")
_HIDDEN = ("hi", "hf", "hg", "ho")
VJP = "lax.scan:custom_vjp"
JVP = "lax.scan:custom_jvp"
BACKWARD = (VJP, JVP)
FORWARD = (
    "lax.scan:per-gate",
    "lax.scan:per-gate-hidden",
    "lax.scan:stacked",
    "lax.scan:hoisted",
    "lax.scan:unroll-4",
)
PER_GATE, PER_GATE_HIDDEN, STACKED, HOISTED, UNROLLED = FORWARD
NAMES = BACKWARD + FORWARD


def apply_for(name: str):
    """``apply(params, xs)`` for program ``name`` (one of ``NAMES``): flax.linen's LSTM
    parameters, inputs ``(batch, time, features)``."""
    if name in BACKWARD:
        return _after_the_loop(name)
    if name in FORWARD:
        return _scheduled(name)
    raise ValueError(f"unknown LSTM program {name!r}; expected one of {NAMES}")


# -- training: the kernels' gradients after the backward loop --------------------------------


def _gates(g):
    """The four activated gates of the pre-activations ``g``, ``(..., 4H)``."""
    i, f, g, o = jnp.split(g, 4, axis=-1)
    return jax.nn.sigmoid(i), jax.nn.sigmoid(f), jnp.tanh(g), jax.nn.sigmoid(o)


def _forward(w_i, w_h, b, xs, carry):
    """The LSTM over axis 0 of ``xs``, keeping what a backward pass needs: the outputs,
    each step's incoming ``(c, h)``, its four activated gates and ``tanh(c')``."""

    def step(carry, x):
        c, h = carry
        i, f, g, o = _gates(x @ w_i + h @ w_h + b)
        c_next = f * c + i * g
        tanh_c = jnp.tanh(c_next)
        h_next = o * tanh_c
        return (c_next, h_next), (h_next, c, h, i, f, g, o, tanh_c)

    return lax.scan(step, carry, xs)[1]


def _plain(w_i, w_h, b, xs, carry):
    return _forward(w_i, w_h, b, xs, carry)[0]


def _rows(a):
    """``a`` with its time and batch axes as one: ``(T * B, features)``. XLA:CPU runs a
    plain 2-D matmul of these far faster than the same contraction over two axes."""
    return a.reshape(-1, a.shape[-1])


def _after_loop(xs, h_in, d_gates, w_i):
    """The kernels', the bias's and the inputs' gradients from every step's ``d_gates``,
    one matmul each over all ``T * B`` rows."""
    d_rows = _rows(d_gates)
    d_w_h = _rows(h_in).T @ d_rows
    d_w_i = _rows(xs).T @ d_rows
    d_xs = (d_rows @ w_i.T).reshape(xs.shape)
    return d_w_i, d_w_h, d_rows.sum(0), d_xs


# -- reverse mode only: the backward loop by hand --------------------------------------------

lstm_vjp = jax.custom_vjp(_plain)


def _vjp_forward(w_i, w_h, b, xs, carry):
    ys, c_in, h_in, i, f, g, o, tanh_c = _forward(w_i, w_h, b, xs, carry)
    return ys, (w_i, w_h, xs, h_in, c_in, i, f, g, o, tanh_c)


def _vjp_backward(saved, d_ys):
    w_i, w_h, xs, h_in, c_in, i, f, g, o, tanh_c = saved
    w_h_t = w_h.T

    def step(carry, t):
        d_c, d_h = carry
        d_y, c, i, f, g, o, tanh_c = t
        d_h = d_h + d_y
        d_c = d_c + d_h * o * (1 - tanh_c**2)
        d_gates = jnp.concatenate(
            [
                d_c * g * i * (1 - i),
                d_c * c * f * (1 - f),
                d_c * i * (1 - g**2),
                d_h * tanh_c * o * (1 - o),
            ],
            axis=-1,
        )
        return (d_c * f, d_gates @ w_h_t), d_gates

    zeros = jnp.zeros_like(d_ys[0])
    d_carry, d_gates = lax.scan(
        step, (zeros, zeros), (d_ys, c_in, i, f, g, o, tanh_c), reverse=True
    )
    d_w_i, d_w_h, d_b, d_xs = _after_loop(xs, h_in, d_gates, w_i)
    return d_w_i, d_w_h, d_b, d_xs, d_carry


lstm_vjp.defvjp(_vjp_forward, _vjp_backward)


# -- forward and reverse mode: a tangent loop that JAX transposes -----------------------------

lstm_jvp = jax.custom_jvp(_plain)


@lstm_jvp.defjvp
def _lstm_jvp_rule(primals, tangents):
    w_i, w_h, b, xs, carry = primals
    dw_i, dw_h, db, dxs, (dc0, dh0) = tangents
    ys, c_in, h_in, i, f, g, o, tanh_c = _forward(w_i, w_h, b, xs, carry)
    # Every term of the gates' tangent that does not depend on the previous step.
    d_rows = _rows(h_in) @ dw_h + _rows(xs) @ dw_i + _rows(dxs) @ w_i + db
    d_outside = d_rows.reshape(xs.shape[:-1] + d_rows.shape[-1:])

    def step(carry, t):
        # Every product below has a tangent in it (sigma' = s - s * s is written as
        # s * (d - s * d)), so JAX's partial evaluation finds nothing to move into a
        # loop of its own: the loop it transposes is this one.
        dc, dh = carry
        d_gates, c, i, f, g, o, tanh_c = t
        dg_i, dg_f, dg_g, dg_o = jnp.split(d_gates + dh @ w_h, 4, axis=-1)
        di = i * (dg_i - i * dg_i)
        df = f * (dg_f - f * dg_f)
        dg = dg_g - g * (g * dg_g)
        do = o * (dg_o - o * dg_o)
        dc = f * dc + c * df + g * di + i * dg
        d_tanh_c = dc - tanh_c * (tanh_c * dc)
        dh = tanh_c * do + o * d_tanh_c
        return (dc, dh), dh

    _, d_ys = lax.scan(step, (dc0, dh0), (d_outside, c_in, i, f, g, o, tanh_c))
    return ys, d_ys


def _after_the_loop(name):
    """``apply(params, xs)`` for ``VJP`` or ``JVP``."""
    run = {VJP: lstm_vjp, JVP: lstm_jvp}[name]

    def apply(p, xs):
        cell = p["cell"]
        w_i = jnp.concatenate([cell[n]["kernel"] for n in _INPUT], -1)
        w_h = jnp.concatenate([cell[n]["kernel"] for n in _HIDDEN], -1)
        b = jnp.concatenate([cell[n]["bias"] for n in _HIDDEN], -1)
        zeros = jnp.zeros((xs.shape[0], w_h.shape[0]), xs.dtype)
        ys = run(w_i, w_h, b, jnp.swapaxes(xs, 0, 1), (zeros, zeros))
        return jnp.swapaxes(ys, 0, 1)

    return apply


# -- forward: the same arithmetic scheduled other ways ---------------------------------------


def _loop(preactivations, xs, features: int, unroll: int = 1):
    """The LSTM over axis 1 of ``xs``, ``(batch, time, features)``, each step's four
    pre-activations from ``preactivations(x, h)``."""

    def step(carry, x):
        c, h = carry
        i, f, g, o = preactivations(x, h)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (c, h), h

    zeros = jnp.zeros((xs.shape[0], features), xs.dtype)
    _, ys = jax.lax.scan(step, (zeros, zeros), jnp.swapaxes(xs, 0, 1), unroll=unroll)
    return jnp.swapaxes(ys, 0, 1)


def _scheduled(name: str):
    """``apply(params, xs)`` for one of ``FORWARD``."""

    def apply(p, xs):
        cell = p["cell"]
        w_i = [cell[n]["kernel"] for n in _INPUT]
        w_h = [cell[n]["kernel"] for n in _HIDDEN]
        b = [cell[n]["bias"] for n in _HIDDEN]
        fused_i, fused_h = jnp.concatenate(w_i, -1), jnp.concatenate(w_h, -1)
        fused_b = jnp.concatenate(b, -1)
        features = fused_h.shape[0]

        def split(a):
            return jnp.split(a, 4, axis=-1)

        if name == PER_GATE:
            return _loop(
                lambda x, h: [x @ wi + (h @ wh + bh) for wi, wh, bh in zip(w_i, w_h, b)],
                xs,
                features,
            )
        if name == PER_GATE_HIDDEN:

            def preactivations(x, h):
                return [xi + (h @ wh + bh) for xi, wh, bh in zip(split(x @ fused_i), w_h, b)]

            return _loop(preactivations, xs, features)
        if name == STACKED:
            stacked = jnp.concatenate([fused_i, fused_h], axis=0)
            return _loop(
                lambda x, h: split(jnp.concatenate([x, h], -1) @ stacked + fused_b), xs, features
            )
        if name == HOISTED:
            projected = (xs.reshape(-1, xs.shape[-1]) @ fused_i).reshape(xs.shape[:2] + (-1,))
            return _loop(lambda xw, h: split(xw + (h @ fused_h + fused_b)), projected, features)
        assert name == UNROLLED
        return _loop(
            lambda x, h: split(x @ fused_i + (h @ fused_h + fused_b)), xs, features, unroll=4
        )

    return apply
