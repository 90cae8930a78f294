"""The LSTM's forward pass on CPU, scheduled five other ways: is there a faster one?

The sweep's targets once asked rnnlib's forward pass to beat flax.linen's faster LSTM
by 15% on average. rnnlib's forward pass on CPU is the plain loop
(``benchmarks.contenders``' ``lax.scan``: the gate kernels joined once before the loop,
``x @ W_i + h @ W_h + b`` in each step), which is flax.linen's ``OptimizedLSTMCell``'s
program with the join moved out of the loop. The same arithmetic can be scheduled
other ways, each a contender here (``benchmarks.lstm_programs``):

- ``lax.scan:per-gate``: eight matmuls per step, one per gate and side, as flax.linen's
  ``LSTMCell`` computes them.
- ``lax.scan:per-gate-hidden``: the input side fused, the hidden side one matmul per gate.
- ``lax.scan:stacked``: one matmul per step, ``[x, h] @ [[W_i], [W_h]]``.
- ``lax.scan:hoisted``: every step's input projection in one matmul before the loop.
- ``lax.scan:unroll-4``: the plain loop, four steps per iteration.

``python -m benchmarks.forward`` times them, rnnlib, the plain loop and both linen cells
(each compiled twice, for the A/A range) in the forward pass over the sweep's LSTM grid
(``I = H / 2``), with ``benchmarks.run.measure``, and writes
``benchmarks/results/forward.{json,md}``; each ratio is over the faster of the two linen
cells at that point. ``--quick`` times four points. The report adds the best of all
programs at each point, chosen after the fact: no rule could do better than that column.
"""

from __future__ import annotations

from benchmarks import lstm_grid
from benchmarks.contenders import AGAIN, OPTIMIZED, OPTIMIZED_AGAIN
from benchmarks.lstm_programs import FORWARD as PROGRAMS

LINEN = ("flax.linen", OPTIMIZED)
AGAINS = (AGAIN, OPTIMIZED_AGAIN)
SHOWN = ("rnnlib", "lax.scan") + PROGRAMS
TIMED = LINEN + AGAINS + SHOWN


def ratios(result: dict) -> dict:
    """Each contender's forward median over the faster flax.linen LSTM's, the best of the
    programs (``best``), and the A/A range (``aa``: each linen cell compiled again, over
    itself)."""
    medians = {name: entry["median_s"] for name, entry in result["forward"].items()}
    linen = min(medians[n] for n in LINEN)
    out = {name: medians[name] / linen for name in SHOWN}
    out["best"] = min(out[name] for name in ("lax.scan",) + PROGRAMS)
    out["aa"] = sorted(medians[again] / medians[n] for n, again in zip(LINEN, AGAINS))
    return out


def markdown(points: list[dict], header: str) -> str:
    columns = SHOWN + ("best",)
    lines = [
        "# The LSTM's forward pass, scheduled six ways",
        "",
        header,
        "",
        "Forward pass, each entry a time over the faster of flax.linen's `LSTMCell` and "
        "`OptimizedLSTMCell` at that point (below 1.0: faster). `best`: the fastest of the "
        "six `lax.scan` programs at that point, chosen after the fact. A/A: each linen "
        "cell compiled a second time, over itself.",
        "",
        "| B | T | I | H | " + " | ".join(f"`{n}`" for n in columns) + " | A/A |",
        "|---:|---:|---:|---:|" + "---:|" * (len(columns) + 1),
    ]
    for point in points:
        c, r = point["config"], point["ratios"]
        cells = " | ".join(f"{r[n]:.2f}" for n in columns)
        aa = "-".join(f"{v:.2f}" for v in r["aa"])
        lines.append(f"| {c['B']} | {c['T']} | {c['I']} | {c['H']} | {cells} | {aa} |")
    lines.append("")
    for name in columns:
        mean = lstm_grid.geomean(p["ratios"][name] for p in points)
        lines.append(f"Geometric mean, `{name}`: {mean:.2f}  ")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    return lstm_grid.main(
        argv,
        description=__doc__.splitlines()[0],
        stem="forward",
        mode="forward",
        names=TIMED,
        ratios=ratios,
        markdown=markdown,
        min_timed_s=0.5,
    )


if __name__ == "__main__":
    raise SystemExit(main())
