"""The LSTM's training step with its kernel gradients taken after the backward loop.

Measured for issue 24; the second program below became rule 6 of ``rnnlib.fast``, the LSTM's
own rule, and since issue 40 the generic rule of ``rnnlib.plan.sequence``, for every cell.

JAX differentiates a ``lax.scan`` step by step. Its backward loop adds each step's share
of every parameter's gradient into a running sum: for an LSTM, ``h.T @ d_gates`` into
the ``(H, 4H)`` recurrent kernel and ``x.T @ d_gates`` into the input kernel, two
matmuls per step whose inner dimension is only the batch. Neither sum feeds anything
later in the loop, so both can wait: keep each step's ``d_gates`` and take each kernel's
gradient after the loop, as one matmul over all ``T * B`` rows (the input's gradient
too, ``d_gates @ W_i.T``). Only ``d_gates @ W_h.T`` has to stay in the loop, since the
step before needs it.

Two programs do that, next to the plain scan (``benchmarks.contenders``' ``lax.scan``,
the same equations and fused kernels, differentiated by JAX):

- ``lax.scan:custom_vjp``: a ``jax.custom_vjp`` whose forward loop stores the gate
  activations and whose backward loop is written by hand. Reverse mode only: ``jax.jvp``
  of it raises, so rnnlib could not use it as it stands.
- ``lax.scan:custom_jvp``: a ``jax.custom_jvp`` whose tangent is a loop that is linear in
  the tangents, reading the forward loop's stored activations, with the kernels' and the
  inputs' tangents entering as one matmul over all steps. JAX transposes it into a
  backward loop of the same shape, and forward mode keeps working. rnnlib runs this program
  on CPU for every cell (``rnnlib.plan.sequence``, its tangent derived from the cell's own
  ``update`` by ``jax.linearize``); this hand-written copy is kept apart so the comparison
  does not change when rnnlib does.

``python -m benchmarks.backward`` times both, the plain scan and flax.linen's two LSTM
cells in training (``jax.grad``) over the sweep's LSTM grid (``I = H / 2``), with
``benchmarks.run.measure``, and writes ``benchmarks/results/backward.{json,md}``; each
ratio is over the faster of the two linen cells. ``--quick`` times four points.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from benchmarks import lstm_grid

_INPUT = ("ii", "if", "ig", "io")
_HIDDEN = ("hi", "hf", "hg", "ho")
VJP = "lax.scan:custom_vjp"
JVP = "lax.scan:custom_jvp"


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


# -- contenders in flax.linen's parameter layout ---------------------------------------------


def apply_for(name):
    """``apply(params, xs)`` for contender ``name``: flax.linen's LSTM parameters, inputs
    ``(batch, time, features)``."""
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


# -- the measurement -------------------------------------------------------------------------

TIMED = ("flax.linen", "flax.linen:OptimizedLSTMCell", "lax.scan", VJP, JVP)


def ratios(result: dict) -> dict:
    """Each contender's training median over the faster flax.linen LSTM's."""
    medians = {name: entry["median_s"] for name, entry in result["train"].items()}
    linen = min(medians["flax.linen"], medians["flax.linen:OptimizedLSTMCell"])
    return {name: medians[name] / linen for name in medians}


def markdown(points: list[dict], header: str) -> str:
    others = ("lax.scan", VJP, JVP)
    lines = [
        "# The LSTM's kernel gradients after the backward loop",
        "",
        header,
        "",
        "Training step (`jax.grad`), each entry a time over the faster of flax.linen's "
        "`LSTMCell` and `OptimizedLSTMCell` at that point (below 1.0: faster).",
        "",
        "| B | T | I | H | " + " | ".join(f"`{n}`" for n in others) + " |",
        "|---:|---:|---:|---:|" + "---:|" * len(others),
    ]
    for point in points:
        c, r = point["config"], point["ratios"]
        cells = " | ".join(f"{r[n]:.2f}" for n in others)
        lines.append(f"| {c['B']} | {c['T']} | {c['I']} | {c['H']} | {cells} |")
    lines.append("")
    for name in others:
        mean = lstm_grid.geomean(p["ratios"][name] for p in points)
        lines.append(f"Geometric mean, `{name}`: {mean:.2f}  ")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    return lstm_grid.main(
        argv,
        description=__doc__.splitlines()[0],
        stem="backward",
        mode="train",
        names=TIMED,
        ratios=ratios,
        markdown=markdown,
    )


if __name__ == "__main__":
    raise SystemExit(main())
