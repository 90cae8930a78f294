"""The LSTM's training step with its kernel gradients taken after the backward loop.

JAX differentiates a ``lax.scan`` step by step. Its backward loop adds each step's share
of every parameter's gradient into a running sum: for an LSTM, ``h.T @ d_gates`` into
the ``(H, 4H)`` recurrent kernel and ``x.T @ d_gates`` into the input kernel, two
matmuls per step whose inner dimension is only the batch. Neither sum feeds anything
later in the loop, so both can wait: keep each step's ``d_gates`` and take each kernel's
gradient after the loop, as one matmul over all ``T * B`` rows (the input's gradient
too, ``d_gates @ W_i.T``). Only ``d_gates @ W_h.T`` has to stay in the loop, since the
step before needs it.

Two programs do that (``benchmarks.lstm_programs``), next to the plain scan
(``benchmarks.contenders``' ``lax.scan``, the same equations and fused kernels,
differentiated by JAX):

- ``lax.scan:custom_vjp``: a ``jax.custom_vjp`` whose forward loop stores the gate
  activations and whose backward loop is written by hand. Reverse mode only: ``jax.jvp``
  of it raises, so rnnlib could not use it as it stands.
- ``lax.scan:custom_jvp``: a ``jax.custom_jvp`` whose tangent is a loop that is linear in
  the tangents, reading the forward loop's stored activations, with the kernels' and the
  inputs' tangents entering as one matmul over all steps. JAX transposes it into a
  backward loop of the same shape, and forward mode keeps working. rnnlib runs this
  program on CPU for every cell (``rnnlib.plan.sequence``, its tangent derived from the
  cell's own ``update`` by ``jax.linearize``); this hand-written copy is kept apart so the
  comparison does not change when rnnlib does.

``python -m benchmarks.backward`` times both, the plain scan and flax.linen's two LSTM
cells in training (``jax.grad``) over the sweep's LSTM grid (``I = H / 2``), with
``benchmarks.run.measure``, and writes ``benchmarks/results/backward.{json,md}``; each
ratio is over the faster of the two linen cells. ``--quick`` times four points.
"""

from __future__ import annotations

from benchmarks import lstm_grid
from benchmarks.lstm_programs import JVP, VJP

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
