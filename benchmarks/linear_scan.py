"""Linear cells step by step against one associative scan, and against the LSTM.

Usage (from the repository root)::

    .venv/bin/python -m benchmarks.linear_scan            # T from 64 to 16,384 at two widths
    .venv/bin/python -m benchmarks.linear_scan --quick    # three lengths at one width, ~2 min
    .venv/bin/python -m benchmarks.linear_scan --batches 8 16 32 64 --lengths 256 1024

What it measures: the choice ``rnnlib.Plan(scan=...)`` makes for a cell whose step is linear in
its carry (``rnnlib.LinearCellBase``), so that the plan's default on a backend is the faster
one there. At each sequence length ``T``, width ``H`` and batch ``B`` (8 unless ``--batches``
names others; input ``I = H``), forward and forward plus backward (``jax.grad`` of ``mean(outputs ** 2)`` with respect to the
parameters), all jitted, the contenders are:

- ``minGRU:sequential``: ``RNN(MinGRUCell(H), plan=Plan(scan="sequential"))``, the loop with
  the plan's other choices left to the backend; every ratio is over its time.
- ``minGRU:sequential:again``: the same program compiled and timed a second time, in the same
  rotation: its ratio, one program against itself, is the point's A/A column, what this
  machine's noise alone does to a ratio.
- ``minGRU:hoisted``: the loop with both layers run for every step before it
  (``Plan(scan="sequential", hoist_inputs=True)``).
- ``minGRU:associative``: ``Plan(scan="associative")``, one ``jax.lax.associative_scan``.
- ``RGLRU:sequential`` and ``RGLRU:associative``: the RG-LRU both ways (the same
  denominator, so the two columns compare with each other and with minGRU's).
- ``LSTMCell``: ``RNN(LSTMCell(H))`` with the default plan, what a cell that is not linear in
  its carry costs at the same width.

Each point is ``benchmarks.run``'s timing: one warm-up call each, then rotating rounds (at
least ``--runs``, more for short calls), medians reported. Before that, each program's first
call (trace, compile, run, of a program jitted afresh) is timed once, and reported over the
reference's in the ``first call`` tables: one sample each, so read them for gaps of several
times, not for a few percent (the A/A copy is left out there, as XLA may reuse the reference's
compiled program). Results go to ``benchmarks/results/linear_scan.{json,md,png}``
(``linear_scan-quick`` with ``--quick``, ``linear_scan-batches`` with ``--batches``,
``linear_scan-batches-quick`` with both). Benchmarks are not tests: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import jax
import jax.numpy as jnp

import rnnlib
from benchmarks.contenders import Contender, _loss_grad

LENGTHS = (64, 256, 1024, 4096, 16384)
WIDTHS = (32, 256)
QUICK_LENGTHS, QUICK_WIDTHS = (64, 256, 1024), (32,)
BATCHES = (8,)
MODES = ("forward", "train")
REFERENCE = "minGRU:sequential"
AGAIN = "minGRU:sequential:again"
SEQUENTIAL, ASSOCIATIVE = rnnlib.Plan(scan="sequential"), rnnlib.Plan(scan="associative")
# name: (the cell for width H, the plan)
CONTENDERS = {
    REFERENCE: (rnnlib.MinGRUCell, SEQUENTIAL),
    AGAIN: (rnnlib.MinGRUCell, SEQUENTIAL),
    "minGRU:hoisted": (rnnlib.MinGRUCell, rnnlib.Plan(scan="sequential", hoist_inputs=True)),
    "minGRU:associative": (rnnlib.MinGRUCell, ASSOCIATIVE),
    "RGLRU:sequential": (rnnlib.RGLRUCell, SEQUENTIAL),
    "RGLRU:associative": (rnnlib.RGLRUCell, ASSOCIATIVE),
    "LSTMCell": (rnnlib.LSTMCell, rnnlib.Plan()),
}
SHOWN = tuple(name for name in CONTENDERS if name not in (REFERENCE, AGAIN))


def build(name: str, features: int, x) -> Contender:
    """The contender ``name`` at ``features``, its variables initialised for ``x``; each call
    jits anew, so two contenders never share a compiled program."""
    make, plan = CONTENDERS[name]
    rnn = rnnlib.RNN(make(features), plan=plan)

    def apply(params, x):
        return rnn.apply({"params": params}, x)

    params = rnn.init(jax.random.key(0), x)["params"]
    return Contender(name, jax.jit(apply), _loss_grad(apply), params)


def measure(features: int, steps: int, runs: int, min_timed_s: float, batch: int = 8) -> dict:
    """Every contender's timing at one point, per mode: ``{mode: {name: timing}}``, each
    timing with ``first_s``, its first call."""
    from benchmarks.run import _timed, timed_rounds

    x = jax.random.normal(jax.random.key(1), (batch, steps, features), jnp.float32)
    contenders = [build(name, features, x) for name in CONTENDERS]
    result = {}
    for mode in MODES:
        fns = {c.name: (getattr(c, mode), c.params) for c in contenders}
        first = {name: _timed(fn, params, x) for name, (fn, params) in fns.items()}
        result[mode] = timed_rounds(fns, x, runs, min_timed_s)
        for name, timing in result[mode].items():
            timing["first_s"] = first[name]
    return result


def ratios(result: dict) -> dict:
    """Per mode, each shown contender's median over ``minGRU:sequential``'s, the A/A ratio
    (``aa``) and the reference's median in ms (``ms``); under ``first``, the same for the first
    calls (``ms`` the reference's, no A/A)."""
    out = {}
    for mode, entry in result.items():
        reference = entry[REFERENCE]["median_s"]
        out[mode] = {name: entry[name]["median_s"] / reference for name in SHOWN}
        out[mode].update(aa=entry[AGAIN]["median_s"] / reference, ms=1e3 * reference)
        first = entry[REFERENCE]["first_s"]
        out[mode]["first"] = {name: entry[name]["first_s"] / first for name in SHOWN}
        out[mode]["first"]["ms"] = 1e3 * first
    return out


def markdown(points: list[dict], header: str) -> str:
    lines = [
        "# Linear cells: the loop against the associative scan",
        "",
        header,
        "",
        "Batch B, input width = H. Each entry is a median time over "
        f"`{REFERENCE}`'s at that point (below 1.0: faster); `{REFERENCE}` in ms; A/A: the same "
        "program compiled again, over itself. The first-call tables: one first call (trace, "
        "compile, run) of each program over the reference's.",
        "",
    ]
    names = " | ".join(f"`{n}`" for n in SHOWN)
    for mode in MODES:
        title = "forward + backward (jax.grad)" if mode == "train" else "forward"
        lines += [
            f"## {title}",
            "",
            f"| B | H | T | `{REFERENCE}` (ms) | A/A | {names} |",
            "|---:|---:|---:|---:|---:|" + "---:|" * len(SHOWN),
        ]
        for point in points:
            r = point["ratios"][mode]
            shown = " | ".join(f"{r[name]:.2f}" for name in SHOWN)
            where = f"| {point['B']} | {point['H']} | {point['T']} |"
            lines.append(f"{where} {r['ms']:.2f} | {r['aa']:.2f} | {shown} |")
        lines += [
            "",
            f"### {title}: first call",
            "",
            f"| B | H | T | `{REFERENCE}` (ms) | {names} |",
            "|---:|---:|---:|---:|" + "---:|" * len(SHOWN),
        ]
        for point in points:
            r = point["ratios"][mode]["first"]
            shown = " | ".join(f"{r[name]:.2f}" for name in SHOWN)
            lines.append(
                f"| {point['B']} | {point['H']} | {point['T']} | {r['ms']:.0f} | {shown} |"
            )
        lines.append("")
    return "\n".join(lines)


def plot(points: list[dict], path: Path) -> None:
    """Milliseconds against ``T`` (log-log), one panel per width and mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(p["B"], p["H"]) for p in points})
    fig, axes = plt.subplots(len(MODES), len(panels), figsize=(4.5 * len(panels), 6.5),
                             squeeze=False)  # fmt: skip
    for row, mode in enumerate(MODES):
        for col, (batch, features) in enumerate(panels):
            ax = axes[row][col]
            mine = [p for p in points if (p["B"], p["H"]) == (batch, features)]
            steps = [p["T"] for p in mine]
            for name in (REFERENCE,) + SHOWN:
                ms = [1e3 * p["result"][mode][name]["median_s"] for p in mine]
                ax.plot(steps, ms, "o-", label=name, markersize=3)
            kind = "forward + backward" if mode == "train" else "forward"
            title = f"B {batch}, H {features}, {kind}"
            ax.set(xscale="log", yscale="log", xlabel="T", ylabel="ms", title=title)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="T 64, 256, 1024 at H 32 only")
    parser.add_argument("--runs", type=int, default=7, help="timed rounds (at least 5)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--lengths", type=int, nargs="+", help="override the sequence lengths")
    parser.add_argument("--widths", type=int, nargs="+", help="override the widths")
    parser.add_argument("--batches", type=int, nargs="+", help="batch sizes (default: 8)")
    args = parser.parse_args(argv)
    if args.runs < 5:
        parser.error(f"--runs must be at least 5 for a meaningful median; got {args.runs}")
    lengths = args.lengths or (QUICK_LENGTHS if args.quick else LENGTHS)
    widths = args.widths or (QUICK_WIDTHS if args.quick else WIDTHS)
    min_timed_s = 0.2 if args.quick else 1.0
    start = time.perf_counter()
    points = []
    for batch in args.batches or BATCHES:
        for features in widths:
            for steps in lengths:
                result = measure(features, steps, args.runs, min_timed_s, batch)
                point = dict(B=batch, H=features, T=steps, result=result, ratios=ratios(result))
                points.append(point)
                print(f"B {batch} H {features} T {steps}:", json.dumps(point["ratios"]), flush=True)
    minutes = (time.perf_counter() - start) / 60
    header = (
        f"{os.cpu_count()} CPU cores, {jax.device_count()} x {jax.devices()[0].device_kind} "
        f"({jax.default_backend()}), jax {jax.__version__}; {len(points)} points in "
        f"{minutes:.1f} minutes, medians of at least {args.runs} rotating rounds (more for "
        f"calls under {min_timed_s:g} s in all)."
    )
    stem = "linear_scan" + ("-batches" if args.batches else "") + ("-quick" if args.quick else "")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.json").write_text(json.dumps(dict(header=header, points=points)))
    (args.out / f"{stem}.md").write_text(markdown(points, header))
    plot(points, args.out / f"{stem}.png")
    print(markdown(points, header))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
