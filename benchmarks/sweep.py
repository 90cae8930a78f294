"""rnnlib against flax.linen over a grid of batch sizes and widths.

Usage (from the repository root)::

    make bench-sweep                                # the full sweep (see README for its time)
    .venv/bin/python -m benchmarks.sweep --quick    # a coarse grid, a few minutes

What it times. For every batch size ``B`` in ``GRID.batches`` and width ``H`` (the
cell's features) in ``GRID.widths``, with the input ``I = H / 2`` and ``I = H``, and
``T = 64`` steps: the LSTM (rnnlib's ``LSTMCell`` against the faster of flax.linen's
``LSTMCell`` and ``OptimizedLSTMCell`` at that point and in that mode) and the GRU
(``GRUCell``); and the ConvLSTM at two sizes (``CONV_SIZES``). Both modes, the forward
pass and forward plus backward, as ``benchmarks.run`` times them: each point is one
``benchmarks.run.measure`` call, so the contenders take turns in rotating rounds, and
each point's first calls (trace, compile and run, JAX's caches cleared before each) are
timed too. Each linen program is also compiled a second time and timed as a contender
of its own (``flax.linen:again``, and ``flax.linen:OptimizedLSTMCell:again`` for the
LSTM): its ratio to the original is that point's A/A range, what the machine's noise
alone makes of one program against itself.

What it writes to ``--out`` (default ``benchmarks/results``): ``<name>.json`` with
every measurement, ``<name>.md`` with the misses by the standing rule (``standing_misses``:
above the run's highest A/A ratio, or, given ``--previous``, above a point's own A/A range in
two sweeps in a row), the targets, the run's noise (``run_noise``) and one ratio table
per cell, mode and input width, and ``<name>.png``, the heat map of rnnlib / linen over the
grid. ``--render`` writes the last two again from a saved ``<name>.json``.
Benchmarks are not tests: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import time
from pathlib import Path

import jax
import numpy as np

from benchmarks.contenders import AGAIN, OPTIMIZED, OPTIMIZED_AGAIN
from benchmarks.run import MAX_ROUNDS, MODES, _geomean, chosen_settings, describe_machine, measure


@dataclasses.dataclass(frozen=True)
class Grid:
    """The points a sweep times: dense cells over ``batches x widths x inputs`` with
    ``steps`` time steps, and the ConvLSTM at the sizes named in ``conv``.

    ``inputs`` holds divisors of the width: ``2`` is ``I = H / 2``, ``1`` is ``I = H``.
    """

    batches: tuple[int, ...]
    widths: tuple[int, ...]
    inputs: tuple[int, ...]
    steps: int
    conv: tuple[str, ...]


# Two ConvLSTM sizes, both B8 T16 with a 3 x 3 kernel. The small one is where a step's
# fixed costs and the compilation weigh most; the large one is the ConvLSTM row of
# `make bench` (benchmarks/run.py), so the two harnesses can be checked against each
# other, and already takes flax.linen about 2.7 s per training step on 2 CPU cores.
CONV_SIZES = {
    "B8 T16 16x16x4 H8": dict(B=8, T=16, signal=(16, 16), I=4, H=8),
    "B8 T16 32x32x8 H16": dict(B=8, T=16, signal=(32, 32), I=8, H=16),
}
GRID = Grid(
    batches=(8, 16, 32, 64, 128, 256),
    widths=(32, 64, 128, 256, 512),
    inputs=(2, 1),
    steps=64,
    conv=tuple(CONV_SIZES),
)
QUICK_GRID = Grid(batches=(8, 64), widths=(32, 256), inputs=(2,), steps=64, conv=(GRID.conv[0],))

# Per cell of the sweep: the rnnlib / flax.linen cell timed, and the contenders.
CELLS = {
    "LSTM": ("LSTMCell", ("rnnlib", "flax.linen", AGAIN, OPTIMIZED, OPTIMIZED_AGAIN)),
    "GRU": ("GRUCell", ("rnnlib", "flax.linen", AGAIN)),
    "ConvLSTM": ("ConvLSTMCell", ("rnnlib", "flax.linen", AGAIN)),
}
DENSE = ("LSTM", "GRU")
# Each flax.linen program, and its A/A copy: the same program compiled a second time.
LINEN = {"flax.linen": AGAIN, OPTIMIZED: OPTIMIZED_AGAIN}
LINEN_LETTER = {"flax.linen": "L", OPTIMIZED: "O"}

# Sized so the full sweep fits in about an hour on an idle 2-core CPU machine (it took
# 35-44 minutes there; README): 5 rounds as in --quick of benchmarks.run, 3 first calls (a
# median of 3 moves by about 10% between runs; the A/A copies show by how much at each
# point), no memory analysis (a compilation per contender), and short calls timed until
# 0.5 s instead of 1 s.
FULL_SETTINGS = dict(runs=5, first_calls=3, min_timed_s=0.5, memory=False)
QUICK_SETTINGS = dict(runs=5, first_calls=1, min_timed_s=0.2, memory=False)
GEOMEAN_LIMIT = 0.85


def points(grid: Grid) -> list[dict]:
    """Every point of ``grid``: ``{"cell", "label", "config"}``, dense cells first."""
    out = []
    for cell in DENSE:
        for d in grid.inputs:
            for b in grid.batches:
                for h in grid.widths:
                    config = dict(B=b, T=grid.steps, I=h // d, H=h)
                    out.append(dict(cell=cell, label=_label(config), config=config))
    for size in grid.conv:
        out.append(dict(cell="ConvLSTM", label=size, config=dict(CONV_SIZES[size])))
    return out


def _label(config):
    return f"B{config['B']} T{config['T']} I{config['I']} H{config['H']}"


def _input_name(divisor):
    return "I = H" if divisor == 1 else f"I = H/{divisor}"


@dataclasses.dataclass(frozen=True)
class Comparison:
    """rnnlib / flax.linen at one point, in one mode, of one measure (``median_s`` or
    ``first_call_s``)."""

    ratio: float
    linen: str  # the flax.linen contender in the denominator: the faster one
    aa: tuple[float, float] | None  # lowest and highest linen copy / linen original

    @property
    def limit(self) -> float:
        """The highest ratio that counts as level: 1.0, or the top of the A/A range."""
        return max(1.0, self.aa[1]) if self.aa else 1.0

    @property
    def met(self) -> bool:
        return self.ratio <= self.limit

    @property
    def outside_aa(self) -> bool:
        """Whether the ratio lies outside the A/A range stretched to include 1.0: a
        difference from linen this point's noise does not explain."""
        low = min(1.0, self.aa[0]) if self.aa else 1.0
        return not low <= self.ratio <= self.limit


def compare(entry: dict, key: str = "median_s") -> Comparison | None:
    """rnnlib / the faster flax.linen contender in ``entry`` (one mode of a
    ``measure`` result); ``None`` where ``key`` was not measured."""

    def value(name):
        return entry.get(name, {}).get(key)

    linens = [name for name in LINEN if value(name) is not None]
    if value("rnnlib") is None or not linens:
        return None
    faster = min(linens, key=value)
    aa = [
        value(again) / value(name) for name, again in LINEN.items() if value(name) and value(again)
    ]
    return Comparison(value("rnnlib") / value(faster), faster, (min(aa), max(aa)) if aa else None)


@dataclasses.dataclass(frozen=True)
class Target:
    what: str
    measured: str
    limit: str
    met: bool | None
    misses: tuple[str, ...] = ()


def _comparisons(report, mode, key="median_s", cells=None):
    """``(point, Comparison)`` for every point of ``report`` measured in ``mode``."""
    out = []
    for point in report["points"]:
        if cells is None or point["cell"] in cells:
            c = compare(point["result"][mode], key)
            if c is not None:
                out.append((point, c))
    return out


def _name(point):
    return f"{point['cell']} {point['label']}"


def _dense_geomean(report: dict, mode: str):
    """The geometric mean of rnnlib / linen's running time over the LSTM and GRU points."""
    return _geomean(c.ratio for _, c in _comparisons(report, mode, cells=DENSE))


def _first_calls(report: dict) -> list:
    """``(point, Comparison)`` of the first calls, both modes, every cell."""
    return [pc for mode in MODES for pc in _comparisons(report, mode, "first_call_s")]


def targets(report: dict) -> list[Target]:
    """The targets, checked on ``report``: (1) at every point rnnlib at or
    below linen, or inside that point's A/A range, forward + backward and forward;
    (2) the geometric mean over the dense grid at most ``GEOMEAN_LIMIT``, each mode;
    (3) every first call at or below linen's, or inside its A/A range."""
    out = []
    titles = {"train": "forward + backward", "forward": "forward"}
    for mode in ("train", "forward"):
        pairs = _comparisons(report, mode)
        misses = tuple(
            f"{_name(p)}: {c.ratio:.2f} (level up to {c.limit:.2f})" for p, c in pairs if not c.met
        )
        worst = max((c.ratio for _, c in pairs), default=None)
        out.append(
            Target(
                f"(1) every point at or below linen or inside its A/A range, {titles[mode]}",
                f"{len(pairs) - len(misses)} of {len(pairs)} points; worst {_fmt(worst)}",
                "all points",
                None if not pairs else not misses,
                misses,
            )
        )
    for mode in ("train", "forward"):
        geo = _dense_geomean(report, mode)
        out.append(
            Target(
                f"(2) geometric mean over the grid (LSTM and GRU), {titles[mode]}",
                _fmt(geo),
                f"{GEOMEAN_LIMIT:.2f}",
                None if geo is None else geo <= GEOMEAN_LIMIT,
            )
        )
    pairs = _first_calls(report)
    misses = tuple(
        f"{_name(p)}: {c.ratio:.2f} (level up to {c.limit:.2f})" for p, c in pairs if not c.met
    )
    worst = max((c.ratio for _, c in pairs), default=None)
    geo = _geomean(c.ratio for _, c in pairs)
    out.append(
        Target(
            "(3) first call at or below linen or inside its A/A range, both modes",
            f"{len(pairs) - len(misses)} of {len(pairs)}; worst {_fmt(worst)}, "
            f"geometric mean {_fmt(geo)}",
            "all first calls",
            None if not pairs else not misses,
            misses,
        )
    )
    return out


@dataclasses.dataclass(frozen=True)
class RunNoise:
    """One mode and measure over a whole run: the A/A ratios of every point (each linen
    copy over its original) next to rnnlib / linen, and how many points would miss
    against the run's noise rather than each point's own."""

    aa: tuple[float, float, float]  # lowest, 95th percentile, highest
    aa_spread: tuple[float, float, float]  # 10th percentile, median, 90th percentile
    ratio_spread: tuple[float, float, float]  # the same of rnnlib / linen
    misses: tuple[int, int, int]  # against each point's range, the 95th percentile, the top


def run_noise(report: dict, mode: str, key: str = "median_s") -> RunNoise | None:
    """The run's noise in ``mode`` for ``key`` (``None`` where no point has an A/A copy).

    A point's A/A range is one sample per linen cell of what the machine's noise does
    to a ratio, so two equal programs land above it about as often as below it. Over
    all the run's points, the A/A ratios show how far that noise reaches."""
    pairs = _comparisons(report, mode, key)
    aa = [a for _, c in pairs if c.aa for a in c.aa]
    if not aa:
        return None
    ratios = [c.ratio for _, c in pairs]
    top, p95 = max(aa), float(np.percentile(aa, 95))

    def spread(values):
        return tuple(float(v) for v in np.percentile(values, (10, 50, 90)))

    return RunNoise(
        aa=(min(aa), p95, top),
        aa_spread=spread(aa),
        ratio_spread=spread(ratios),
        misses=(
            sum(not c.met for _, c in pairs),
            sum(c.ratio > max(1.0, p95) for _, c in pairs),
            sum(c.ratio > max(1.0, top) for _, c in pairs),
        ),
    )


def repeated_misses(report: dict, previous: dict, mode: str, key: str = "median_s"):
    """``(point, Comparison now, Comparison before)`` for the points above 1.0 and above their
    own A/A range in ``report`` and, at the same label, in ``previous`` too."""
    before = {_name(p): c for p, c in _comparisons(previous, mode, key)}
    return [
        (p, c, before[_name(p)])
        for p, c in _comparisons(report, mode, key)
        if not c.met and _name(p) in before and not before[_name(p)].met
    ]


def standing_misses(report: dict, previous: dict | None, mode: str) -> dict[str, list[str]]:
    """The running-time misses of ``mode`` by the standing rule: a point above the run's highest
    A/A ratio, or above its own A/A range in this sweep and in ``previous`` (when given)."""
    noise = run_noise(report, mode)
    top = max(1.0, noise.aa[2]) if noise else 1.0
    out = {
        "above the run's highest A/A ratio": [
            f"{_name(p)} {c.ratio:.3f}" for p, c in _comparisons(report, mode) if c.ratio > top
        ]
    }
    if previous is not None:
        out["above their own A/A range in both sweeps"] = [
            f"{_name(p)} {now.ratio:.3f} (before {then.ratio:.3f})"
            for p, now, then in repeated_misses(report, previous, mode)
        ]
    return out


def _standing_section(report: dict, previous: dict | None) -> list[str]:
    against = (
        f", or above its own A/A range here and in the sweep before it "
        f"(`{previous['name']}`, {len(previous['points'])} points)"
        if previous
        else " (no previous sweep given: `--previous JSON` adds the second clause)"
    )
    lines = [
        "## Misses by the standing rule",
        "",
        f"A running-time point misses when its ratio lies above the run's highest A/A ratio"
        f"{against}. Geometric means over the LSTM and GRU points:",
        "",
    ]
    for mode in ("train", "forward"):
        lines.append(f"- {TITLES[mode]}: geometric mean {_fmt(_dense_geomean(report, mode))}")
        for what, names in standing_misses(report, previous, mode).items():
            lines.append(f"  - {what}: {len(names)}" + (f" ({'; '.join(names)})" if names else ""))
    first = _geomean(c.ratio for _, c in _first_calls(report))
    return lines + [f"- first calls, both modes: geometric mean {_fmt(first)}", ""]


def _fmt(value):
    return "n/a" if value is None else f"{value:.2f}"


def _cell_text(c: Comparison | None, letter: bool) -> str:
    if c is None:
        return "n/a"
    text = f"{c.ratio:.2f}" if c.met else f"**{c.ratio:.2f}**"
    if letter:
        text += f" {LINEN_LETTER[c.linen]}"
    if c.aa:
        low, high = c.aa
        text += f" [{low:.2f}]" if low == high else f" [{low:.2f}-{high:.2f}]"
    return text


def _panels(report):
    """``(cell, input divisor)`` of every dense table the report holds, in order, and
    whether it holds ConvLSTM points."""
    seen = []
    for point in report["points"]:
        if point["cell"] in DENSE:
            key = (point["cell"], point["config"]["H"] // point["config"]["I"])
            if key not in seen:
                seen.append(key)
    return seen, any(p["cell"] == "ConvLSTM" for p in report["points"])


def _table(report, cell, divisor, mode, key):
    """Rows B, columns H: ``{(B, H): Comparison}`` and the sorted B and H values."""
    cells = {}
    for point in report["points"]:
        config = point["config"]
        if point["cell"] == cell and config["H"] // config["I"] == divisor:
            cells[config["B"], config["H"]] = compare(point["result"][mode], key)
    batches = sorted({b for b, _ in cells})
    widths = sorted({h for _, h in cells})
    return cells, batches, widths


TITLES = {"train": "forward + backward (jax.grad)", "forward": "forward"}


def markdown(report: dict, previous: dict | None = None) -> str:
    settings = report["settings"]
    lines = [
        f"# Sweep: {report['name']}",
        "",
        f"{report['machine']}; jax {report['versions']['jax']}, flax "
        f"{report['versions']['flax']}. Each point: median of at least {settings['runs']} "
        f"rotating rounds (up to {MAX_ROUNDS} for calls shorter than "
        f"{settings['min_timed_s']} s in all); first calls (trace + compile + run) the median "
        f"of {settings['first_calls']}. {len(report['points'])} points in "
        f"{report['wall_s'] / 60:.1f} minutes.",
        "",
        "Every entry is rnnlib's time / flax.linen's time (below 1.0: rnnlib is faster), "
        "followed by the point's A/A range in brackets: each flax.linen program compiled a "
        "second time, over the original. For the LSTM the denominator is the faster of "
        "flax.linen's `LSTMCell` (L) and `OptimizedLSTMCell` (O) at that point, in that mode "
        "and for that measure, named by the letter; its A/A range spans both linen cells' "
        "copies. **Bold**: above 1.0 and above the A/A range, a miss (of target 1 in the "
        "running-time tables, of target 3 in the first-call tables).",
        "",
        *_standing_section(report, previous),
        "## Targets",
        "",
        "| target | measured | limit | met |",
        "|---|---|---|---|",
    ]
    checked = targets(report)
    for t in checked:
        verdict = "n/a" if t.met is None else ("yes" if t.met else "**no**")
        lines.append(f"| {t.what} | {t.measured} | {t.limit} | {verdict} |")
    lines.append("")
    for t in checked:
        if t.misses:
            lines += [f"Misses of {t.what}:", ""]
            lines += [f"- {m}" for m in t.misses] + [""]
    lines += [
        "A point is level with linen when its ratio is at most 1.0 or at most the top of its "
        "A/A range; the geometric mean (2) is over the LSTM and GRU points (the ConvLSTM's "
        "points are not on the grid, their mean is below).",
        "",
    ]
    for mode in ("train", "forward"):
        geos = []
        for cell in CELLS:
            geo = _geomean(c.ratio for _, c in _comparisons(report, mode, cells=(cell,)))
            if geo is not None:
                geos.append(f"{cell} {geo:.2f}")
        lines.append(f"Geometric mean per cell, {TITLES[mode]}: {', '.join(geos)}  ")
    lines.append("")
    lines += _noise_section(report)

    dense, conv = _panels(report)
    for measure_key, heading in (("median_s", "Running time"), ("first_call_s", "First calls")):
        lines += [f"## {heading}", ""]
        for cell, divisor in dense:
            for mode in ("train", "forward"):
                cells, batches, widths = _table(report, cell, divisor, mode, measure_key)
                lines += [
                    f"### {cell}, {TITLES[mode]}, {_input_name(divisor)}",
                    "",
                    "| B \\ H | " + " | ".join(str(h) for h in widths) + " |",
                    "|---:|" + "---:|" * len(widths),
                ]
                for b in batches:
                    row = [_cell_text(cells.get((b, h)), cell == "LSTM") for h in widths]
                    lines.append(f"| {b} | " + " | ".join(row) + " |")
                lines.append("")
        if conv:
            lines += [
                "### ConvLSTM",
                "",
                "| size | " + " | ".join(TITLES[m] for m in ("train", "forward")) + " |",
                "|---|---:|---:|",
            ]
            for point in report["points"]:
                if point["cell"] == "ConvLSTM":
                    row = [
                        _cell_text(compare(point["result"][m], measure_key), False)
                        for m in ("train", "forward")
                    ]
                    lines.append(f"| {point['label']} | " + " | ".join(row) + " |")
            lines.append("")
    return "\n".join(lines)


def _noise_section(report) -> list[str]:
    rows = []
    for key, what in (("median_s", "running time"), ("first_call_s", "first calls")):
        for mode in ("train", "forward"):
            noise = run_noise(report, mode, key)
            if noise is None:
                continue
            low, p95, top = noise.aa
            spreads = [
                f"{middle:.2f} ({q10:.2f}-{q90:.2f})"
                for q10, middle, q90 in (noise.aa_spread, noise.ratio_spread)
            ]
            rows.append(
                f"| {what}, {TITLES[mode]} | {low:.2f}-{top:.2f} (95% at most {p95:.2f}) | "
                + " | ".join(spreads)
                + " | "
                + " / ".join(str(m) for m in noise.misses)
                + " |"
            )
    if not rows:
        return []
    return [
        "## The run's noise",
        "",
        "Each point's A/A range is one sample (two for the LSTM) of what this machine's noise "
        "does to a ratio: between two equal programs, rnnlib / linen lands above it about as "
        "often as below it. Over every point of the run, the A/A ratios reach as far as "
        "this table shows, with the median and the 10th-90th percentiles of the A/A "
        "ratios and of rnnlib / linen. The last column counts the points above 1.0 and "
        "above, in turn, their own A/A range (the targets above), the 95th percentile of "
        "the run's A/A ratios, and the highest of them.",
        "",
        "| measure, mode | A/A over the run | A/A: median (10th-90th) | "
        "rnnlib / linen: median (10th-90th) | misses: own range / 95th percentile / highest |",
        "|---|---|---|---|---|",
        *rows,
        "",
    ]


# The heat map's colours run from 1 / RANGE (darkest blue) to RANGE (darkest red).
RANGE = 1.5


def plot(report: dict, path: Path) -> None:
    """The heat map: one panel per cell (and input width) and mode, rows B, columns H,
    coloured by rnnlib / linen on a log scale centred at 1.0 (blue: rnnlib faster,
    red: slower; ratios beyond ``1 / RANGE`` and ``RANGE`` take the end colours) and annotated with the ratio; a square outlined in black lies outside
    its point's A/A range."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm
    from matplotlib.patches import Rectangle
    from matplotlib.ticker import NullLocator

    dense, conv = _panels(report)
    rows = [(cell, d) for cell, d in dense] + ([("ConvLSTM", None)] if conv else [])
    heights = [
        len(_table(report, cell, d, "train", "median_s")[1])
        if cell != "ConvLSTM"
        else sum(p["cell"] == cell for p in report["points"])
        for cell, d in rows
    ]
    fig, axes = plt.subplots(
        len(rows),
        2,
        figsize=(11, 0.5 * sum(heights) + 0.9 * len(rows) + 0.8),
        squeeze=False,
        layout="constrained",
        height_ratios=heights,
    )
    norm = LogNorm(vmin=1 / RANGE, vmax=RANGE)
    cmap = plt.get_cmap("RdBu_r")
    image = None
    for (cell, divisor), panel_row in zip(rows, axes):
        for ax, mode in zip(panel_row, ("train", "forward")):
            if cell == "ConvLSTM":
                labels = [p["label"] for p in report["points"] if p["cell"] == cell]
                found = [compare(p["result"][mode]) for p in report["points"] if p["cell"] == cell]
                grid = [[c] for c in found]
                ax.set_yticks(range(len(labels)), labels)
                ax.set_xticks([])
                title = f"ConvLSTM, {TITLES[mode]}"
            else:
                cells, batches, widths = _table(report, cell, divisor, mode, "median_s")
                grid = [[cells.get((b, h)) for h in widths] for b in batches]
                ax.set_yticks(range(len(batches)), batches)
                ax.set_xticks(range(len(widths)), widths)
                ax.set_ylabel("batch B")
                ax.set_xlabel("features H")
                title = f"{cell}, {TITLES[mode]}, {_input_name(divisor)}"
            values = np.array([[np.nan if c is None else c.ratio for c in row] for row in grid])
            image = ax.imshow(values, cmap=cmap, norm=norm, aspect="auto")
            for i, row in enumerate(grid):
                for j, c in enumerate(row):
                    if c is None:
                        continue
                    dark = abs(math.log(c.ratio)) > 0.6 * math.log(RANGE)
                    ax.text(
                        j,
                        i,
                        f"{c.ratio:.2f}",
                        ha="center",
                        va="center",
                        fontsize=8,
                        color="white" if dark else "black",
                        fontweight="bold" if c.outside_aa else "normal",
                    )
                    if c.outside_aa:
                        ax.add_patch(
                            Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, ec="black", lw=2)
                        )
            ax.set_title(title, fontsize=9)
    if image is not None:
        bar = fig.colorbar(image, ax=axes, shrink=0.6, label="rnnlib time / flax.linen time")
        ticks = [1 / RANGE, 0.8, 0.9, 1.0, 1.1, 1.25, RANGE]
        bar.ax.yaxis.set_minor_locator(NullLocator())
        bar.set_ticks(ticks, labels=[f"{t:.2f}" for t in ticks])
    fig.suptitle(
        f"{report['name']}: rnnlib / flax.linen (blue: rnnlib faster; outlined: outside the "
        "point's A/A range)",
        fontsize=10,
    )
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _step_work(config):
    """Multiply-adds of one step of the forward pass, up to a constant factor per cell."""
    return (
        config["B"]
        * math.prod(config.get("signal", ()))
        * (config["I"] + config["H"])
        * config["H"]
    )


# Time a point costs besides its compilations and timed calls (inputs, flax.linen's
# init, building the contenders), when the run the estimate comes from cannot tell.
POINT_OVERHEAD_S = 2.0


@dataclasses.dataclass(frozen=True)
class Sample:
    """What one measured (cell, mode) tells the estimate: flax.linen's running time at
    ``config`` and the compilation time of one call (a first call less a timed one)."""

    cell: str
    mode: str
    config: dict
    run_s: float
    compile_s: float


def samples_from_sweep(report: dict) -> tuple[list[Sample], float]:
    """The samples of a sweep's report, and its time per point besides compilations and
    timed calls (the largest seen)."""
    samples, overhead = [], 0.0
    repeats = report["settings"]["first_calls"]
    for point in report["points"]:
        spent = 0.0
        for mode in MODES:
            entry = point["result"][mode]
            run_s = max(entry[n]["median_s"] for n in LINEN if n in entry)
            compile_s = max(e["first_call_s"] - e["median_s"] for e in entry.values())
            samples.append(Sample(point["cell"], mode, point["config"], run_s, compile_s))
            # each first call, and the warm-up after them, traces and compiles
            spent += sum((repeats + 1) * e["first_call_s"] + sum(e["runs"]) for e in entry.values())
        overhead = max(overhead, point["wall_s"] - spent)
    return samples, overhead


def samples_from_bench(report: dict) -> list[Sample]:
    """The samples of a ``benchmarks.run`` report that timed first calls (``make bench``)."""
    cells = {"LSTMCell": "LSTM", "OptimizedLSTMCell": "LSTM", "GRUCell": "GRU"}
    cells["ConvLSTMCell"] = "ConvLSTM"
    samples = []
    for config_name, by_cell in report["results"].items():
        config = report["configs"][config_name]
        for cell, modes in by_cell.items():
            for mode, entry in modes.items():
                if cell in cells and entry["flax.linen"]["first_call_s"] is not None:
                    compile_s = max(e["first_call_s"] - e["median_s"] for e in entry.values())
                    run_s = entry["flax.linen"]["median_s"]
                    samples.append(Sample(cells[cell], mode, config, run_s, compile_s))
    return samples


def estimate_seconds(
    samples: list[Sample], grid: Grid, settings: dict, overhead_s: float = POINT_OVERHEAD_S
) -> float | None:
    """The wall time a sweep of ``grid`` with ``settings`` would take, on the machine
    (and under the load) the ``samples`` were measured on; ``None`` when they lack a
    cell or mode the grid needs.

    Per cell and mode: a call compiles in the longest compilation time seen, and runs
    ``T * (a + b * w)`` seconds, ``w`` one step's multiply-adds (``_step_work``), the line
    through the samples with the least and the most work per step (through the origin
    when only one was measured). Every contender is taken to run as long as flax.linen
    (the slower of its LSTMs); a point calls each contender once per first call, once to
    warm up, and in each round, with ``measure``'s rule for the number of rounds.
    """
    model = {}
    for cell, mode in {(s.cell, s.mode) for s in samples}:
        mine = sorted(
            (_step_work(s.config), s.run_s / s.config["T"], s.compile_s)
            for s in samples
            if (s.cell, s.mode) == (cell, mode)
        )
        (w0, t0, _), (w1, t1, _) = mine[0], mine[-1]
        slope = (t1 - t0) / (w1 - w0) if w1 > w0 else t1 / w1
        slope = max(slope, 0.0)
        model[cell, mode] = (max(t0 - slope * w0, 0.0), slope, max(c for *_, c in mine))
    total = 0.0
    for point in points(grid):
        cell, config = point["cell"], point["config"]
        contenders = len(CELLS[cell][1])
        total += overhead_s
        for mode in MODES:
            if (cell, mode) not in model:
                return None
            step_s, slope, compile_s = model[cell, mode]
            run_s = config["T"] * (step_s + slope * _step_work(config))
            # measure()'s rule: `runs` rounds, more until min_timed_s, at most MAX_ROUNDS
            short = min(MAX_ROUNDS, math.ceil(settings["min_timed_s"] / run_s))
            rounds = max(settings["runs"], short)
            calls = settings["first_calls"] + 1
            total += contenders * (calls * (compile_s + run_s) + rounds * run_s)
    return total


def own_grid(parser, args, grid: Grid) -> Grid:
    """``grid`` with the batch sizes, widths and input divisors given on the command
    line in place of its own, and no ConvLSTM; ``grid`` itself when none is given."""
    changes = {
        field: tuple(values)
        for field in ("batches", "widths", "inputs")
        if (values := getattr(args, field)) is not None
    }
    if not changes:
        return grid
    if not args.name:
        parser.error("a grid of your own (--batches, --widths, --inputs) needs a --name")
    for field, values in changes.items():
        if min(values) < 1:
            parser.error(f"--{field} must be positive integers; got {list(values)}")
    for h in changes.get("widths", grid.widths):
        for d in changes.get("inputs", grid.inputs):
            if h % d:
                parser.error(f"width {h} is not divisible by input divisor {d}")
    return dataclasses.replace(grid, conv=(), **changes)


def _load():
    try:
        return list(os.getloadavg())
    except OSError:  # not every system reports it
        return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="B in {8, 64}, H in {32, 256}, I = H/2, one ConvLSTM size, 1 first call",
    )
    parser.add_argument("--runs", type=int, default=None, help="timed rounds (at least 5)")
    parser.add_argument(
        "--first-calls", type=int, default=None, help="first calls per contender (at least 1)"
    )
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument(
        "--name", default=None, help="file name stem (default: sweep or quick-sweep)"
    )
    parser.add_argument(
        "--only",
        nargs="+",
        default=None,
        metavar="LABEL",
        help="time only the points whose name ends so (e.g. 'GRU B8 T64 I16 H32'), to try one",
    )
    for flag, what in (
        ("--batches", "batch sizes"),
        ("--widths", "widths (features)"),
        ("--inputs", "input widths, as divisors of the width (2: I = H / 2)"),
    ):
        parser.add_argument(
            flag,
            type=int,
            nargs="+",
            default=None,
            metavar="N",
            help=f"{what} of a grid of your own, in place of the chosen grid's; with any "
            "of these three the ConvLSTM is left out and --name is required",
        )
    parser.add_argument(
        "--previous",
        type=Path,
        default=None,
        metavar="JSON",
        help="the sweep before this one: its points above their own A/A range are checked "
        "against this run's (a miss in two sweeps in a row)",
    )
    parser.add_argument(
        "--render",
        type=Path,
        default=None,
        metavar="JSON",
        help="time nothing: write the markdown and heat map of a sweep's report again "
        "(with --previous, next to the sweep before it)",
    )
    parser.add_argument(
        "--estimate-from",
        type=Path,
        default=None,
        metavar="JSON",
        help="time nothing: estimate the full sweep's duration from a report of "
        "benchmarks.run with first calls (make bench) or of a sweep, and print it",
    )
    args = parser.parse_args(argv)
    settings = chosen_settings(parser, args, QUICK_SETTINGS, FULL_SETTINGS)
    if settings["first_calls"] < 1:
        parser.error(
            f"--first-calls must be at least 1 (target 3 checks first calls); "
            f"got {settings['first_calls']}"
        )
    if args.estimate_from:
        source = json.loads(args.estimate_from.read_text())
        if "points" in source:
            samples, overhead = samples_from_sweep(source)
        else:
            samples, overhead = samples_from_bench(source), POINT_OVERHEAD_S
        grid = QUICK_GRID if args.quick else GRID
        estimate = estimate_seconds(samples, grid, settings, overhead)
        if estimate is None:
            parser.error(f"{args.estimate_from} lacks a cell or mode the sweep times")
        print(
            f"{'--quick' if args.quick else 'full'} sweep, {len(points(grid))} points, "
            f"{settings}: about {estimate / 60:.0f} minutes on the machine of "
            f"{args.estimate_from}"
        )
        return 0

    # The sweep before is named by its file: two sweeps may share a run name.
    previous = (
        dict(json.loads(args.previous.read_text()), name=args.previous.stem)
        if args.previous
        else None
    )
    if args.render:
        report = json.loads(args.render.read_text())
        args.render.with_suffix(".md").write_text(text := markdown(report, previous))
        plot(report, args.render.with_suffix(".png"))
        print(text)
        return 0

    import flax

    grid = own_grid(parser, args, QUICK_GRID if args.quick else GRID)
    todo = points(grid)
    if args.only:
        todo = [p for p in todo if any(_name(p).endswith(o) for o in args.only)]
    name = args.name or ("quick-sweep" if args.quick else "sweep")
    start, load = time.perf_counter(), _load()
    for k, point in enumerate(todo, 1):
        cell_name, names = CELLS[point["cell"]]
        began, cpu = time.perf_counter(), time.process_time()
        point["result"] = measure(point["config"], cell_name, names=names, **settings)
        point["wall_s"] = time.perf_counter() - began
        point["cpu_s"] = time.process_time() - cpu  # every thread of this process
        train = compare(point["result"]["train"])
        print(
            f"[{k}/{len(todo)}] {_name(point)}: rnnlib / linen in training {train.ratio:.2f}; "
            f"{point['wall_s']:.0f} s, CPU {point['cpu_s']:.0f} s "
            f"(total {(time.perf_counter() - start) / 60:.1f} min)",
            flush=True,
        )
    report = {
        "name": name,
        "machine": describe_machine(),
        "versions": {"jax": jax.__version__, "flax": flax.__version__},
        "settings": settings,
        "grid": dataclasses.asdict(grid),
        "wall_s": time.perf_counter() - start,
        "load_average": {"start": load, "end": _load()},
        "points": todo,
    }
    if args.quick and not args.only:
        samples, overhead = samples_from_sweep(report)
        report["full_sweep_estimate_s"] = estimate_seconds(samples, GRID, FULL_SETTINGS, overhead)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{name}.json").write_text(json.dumps(report, indent=1))
    (args.out / f"{name}.md").write_text(text := markdown(report, previous))
    plot(report, args.out / f"{name}.png")
    print(text)
    if report.get("full_sweep_estimate_s"):
        print(
            f"\nEstimated full sweep on this machine, under the load of this run: "
            f"{report['full_sweep_estimate_s'] / 60:.0f} minutes"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
