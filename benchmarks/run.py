"""Side-by-side speed of rnnlib, flax.linen, flax.nnx and a hand-written ``lax.scan``.

Usage (from the repository root)::

    make bench                          # the full run, about 27 minutes on 2 CPU cores
    .venv/bin/python -m benchmarks.run --quick   # smaller shapes, about 100 s

Method. For every configuration and cell, each contender is jitted twice: the
forward pass, and forward plus backward (``jax.grad`` of a scalar loss). The first
call of each (trace and compile included) is timed on its own, ``--first-calls`` times
with JAX's caches cleared before each and the contenders in rotating order, and the
median is reported; then one warm-up call; then timed rounds in which the contenders
take turns, in a rotating order, so slow drifts of the machine hit all of them alike:
at least ``--runs`` rounds, and more (up to 60) until each contender has spent a
second in timed calls. We report the median and the
spread (min and max) of the timed rounds, and the compiled program's temporary
memory as XLA reports it (``memory_analysis``). One contender, ``flax.linen:again``,
is flax.linen compiled a second time: its ratio to flax.linen is the run's noise
floor (the report's "Noise floor" section), the yardstick for other ratios near 1.0.

Results go to ``--out`` (default ``benchmarks/results``): ``<name>.json`` with every
measurement, ``<name>.md`` with the ratio tables against flax.linen, and
``<name>.png`` with the ratios drawn. Benchmarks are not tests: nothing here
asserts a time.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.contenders import (
    AGAIN,
    ALL_NAMES,
    CONV_CELLS,
    DENSE_CELLS,
    NAMES,
    build,
    inputs_for,
)

CONFIGS = {
    "overhead B8 T1000 H32": dict(B=8, T=1000, I=32, H=32, cells=DENSE_CELLS),
    "compute B64 T128 H256": dict(B=64, T=128, I=128, H=256, cells=DENSE_CELLS),
    "compute B256 T64 H512": dict(B=256, T=64, I=512, H=512, cells=DENSE_CELLS),
    "convlstm B8 T16 32x32x8": dict(B=8, T=16, signal=(32, 32), I=8, H=16, cells=CONV_CELLS),
}
QUICK = {
    "overhead B8 T200 H32": dict(B=8, T=200, I=32, H=32, cells=DENSE_CELLS),
    "compute B16 T32 H256": dict(B=16, T=32, I=128, H=256, cells=DENSE_CELLS),
    "convlstm B2 T8 16x16x8": dict(B=2, T=8, signal=(16, 16), I=8, H=16, cells=CONV_CELLS),
}
MODES = ("forward", "train")
MIN_TIMED_S = 1.0
# --quick trades coverage for time. At small shapes compiling is most of a run: each timed
# first call, the warm-up after it (first calls clear JAX's caches) and each memory
# analysis is a compilation. So it times no first calls, skips the memory analysis, and
# times rounds until 0.2 s instead of 1 s.
QUICK_SETTINGS = dict(runs=5, first_calls=0, min_timed_s=0.2, memory=False)
FULL_SETTINGS = dict(runs=7, first_calls=9, min_timed_s=MIN_TIMED_S, memory=True)
MAX_ROUNDS = 60


def _block(tree):
    return jax.tree_util.tree_map(lambda a: a.block_until_ready(), tree)


def _timed(fn, *args):
    start = time.perf_counter()
    _block(fn(*args))
    return time.perf_counter() - start


def _temp_bytes(fn, *args):
    try:
        analysis = fn.lower(*args).compile().memory_analysis()
        return int(analysis.temp_size_in_bytes)
    except Exception:  # not every backend reports memory
        return None


def _first_calls(fns, x, repeats):
    """Median time of a call that must trace and compile, per contender (``None`` for
    every contender when ``repeats`` is 0).

    ``jax.clear_caches()`` before every call makes each one a first call. The order
    rotates between rounds, so no contender always pays for the process's first
    compilation of something.
    """
    order = list(fns)
    samples = {name: [] for name in order}
    for r in range(repeats):
        for name in order[r % len(order) :] + order[: r % len(order)]:
            fn, p = fns[name]
            jax.clear_caches()
            samples[name].append(_timed(fn, p, x))
    return {name: statistics.median(t) if t else None for name, t in samples.items()}


def measure(
    config: dict,
    cell_name: str,
    runs: int,
    names=NAMES,
    first_calls: int = 5,
    min_timed_s: float = MIN_TIMED_S,
    memory: bool = True,
    modes=MODES,
) -> dict:
    """Every contender's first-call time, temp memory (unless not ``memory``) and timed
    runs, for each of ``modes`` (both by default)."""
    x = inputs_for(config, jax.random.key(1))
    import flax.linen as nn

    from benchmarks.contenders import _cell_kwargs

    linen_variables = nn.RNN(getattr(nn, cell_name)(**_cell_kwargs(cell_name, config))).init(
        jax.random.key(0), x
    )
    contenders = [c for n in names if (c := build(n, cell_name, config, x, linen_variables))]
    result = {}
    for mode in modes:
        fns = {c.name: (getattr(c, mode), c.params) for c in contenders}
        first = _first_calls(fns, x, first_calls)
        entry = {name: {"first_call_s": first[name]} for name in fns}
        for name, (fn, p) in fns.items():
            entry[name]["temp_bytes"] = _temp_bytes(fn, p, x) if memory else None
        for name, timing in timed_rounds(fns, x, runs, min_timed_s).items():
            entry[name].update(timing)
        result[mode] = entry
    return result


def timed_rounds(fns: dict, x, runs: int, min_timed_s: float = MIN_TIMED_S) -> dict:
    """Each ``fn(params, x)`` of ``fns`` (``{name: (fn, params)}``), after one warm-up call,
    timed in rounds in which the contenders take turns in a rotating order: at least ``runs``
    rounds, more (up to ``MAX_ROUNDS``) until each has spent ``min_timed_s`` in timed calls.
    Returns ``{name: {median_s, min_s, max_s, runs}}``."""
    for fn, p in fns.values():
        _timed(fn, p, x)  # warm-up
    order = list(fns)
    samples = {name: [] for name in order}
    r = 0
    # At least `runs` rounds; short calls get more, until each contender has spent
    # min_timed_s in timed calls (or MAX_ROUNDS), so a millisecond-scale median rests
    # on enough samples to outlast the machine's jitter.
    while r < runs or (r < MAX_ROUNDS and min(map(sum, samples.values())) < min_timed_s):
        for name in order[r % len(order) :] + order[: r % len(order)]:
            fn, p = fns[name]
            samples[name].append(_timed(fn, p, x))
        r += 1
    return {
        name: dict(median_s=statistics.median(t), min_s=min(t), max_s=max(t), runs=t)
        for name, t in samples.items()
    }


def seq_lengths_memory(steps=(256, 1024, 4096), batch=8, features=32) -> list[dict]:
    """Extra temporary memory that ``seq_lengths`` with ``return_carry`` costs, per library.

    Flax stacks every step's carry and gathers the last valid one afterwards, so its
    extra memory grows with time; rnnlib keeps one running selection of the carry.
    """
    import flax.linen as nn

    rows = []
    for t in steps:
        x = jnp.ones((batch, t, features))
        lengths = jnp.full((batch,), t // 2)
        row = {"T": t, "B": batch, "H": features}
        for name, rnn in (
            ("rnnlib", rnnlib_rnn(features)),
            ("flax.linen", nn.RNN(nn.LSTMCell(features))),
        ):
            variables = nn.RNN(nn.LSTMCell(features)).init(jax.random.key(0), x)
            plain = jax.jit(lambda v, x, rnn=rnn: rnn.apply(v, x, return_carry=True))
            masked = jax.jit(
                lambda v, x, rnn=rnn, n=lengths: rnn.apply(v, x, return_carry=True, seq_lengths=n)
            )
            row[name] = {
                "without_seq_lengths": _temp_bytes(plain, variables, x),
                "with_seq_lengths": _temp_bytes(masked, variables, x),
            }
        rows.append(row)
    return rows


def rnnlib_rnn(features):
    import rnnlib

    return rnnlib.RNN(rnnlib.LSTMCell(features))


def _ratio(results, config, cell, mode, name, key="median_s", over="flax.linen"):
    entry = results[config][cell][mode]
    if name not in entry or over not in entry:
        return None
    if entry[name][key] is None or entry[over][key] is None:
        return None  # not measured in this run
    return entry[name][key] / entry[over][key]


def _present(results) -> list[str]:
    """The contenders measured anywhere in ``results``, in the harness's order."""
    seen = {
        n
        for cells in results.values()
        for modes in cells.values()
        for e in modes.values()
        for n in e
    }
    return [n for n in ALL_NAMES if n in seen]


def _geomean(values):
    values = [v for v in values if v is not None]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _fmt(value):
    return "n/a" if value is None else f"{value:.2f}"


def targets(results) -> list[tuple[str, float | None, float, bool | None]]:
    """The performance targets, as ``(what, measured, limit, met)``; ``met`` is None
    when the run lacks a contender the target needs.

    A ratio to flax.linen inside this run's noise floor (``noise_floor``: flax.linen's
    program against itself) counts as level: the limit of a "worst ratio" target is 1.0
    or the top of that range, whichever is higher.
    """
    every = [(c, cell) for c in results for cell in results[c]]

    def worst(values):
        values = [v for v in values if v is not None]
        return max(values) if values else None

    def row(what, value, limit):
        return (what, value, limit, None if value is None else value <= limit)

    def level(*modes, key="median_s"):
        tops = [floor[1] for m in modes if (floor := noise_floor(results, m, key))]
        return max([1.0, *tops])

    def rnnlib_over_linen(mode, key="median_s"):
        return [_ratio(results, c, cell, mode, "rnnlib", key) for c, cell in every]

    train = rnnlib_over_linen("train")
    return [
        row("worst rnnlib / flax.linen, forward + backward", worst(train), level("train")),
        row(
            "worst rnnlib / flax.linen, forward",
            worst(rnnlib_over_linen("forward")),
            level("forward"),
        ),
        row("geometric mean rnnlib / flax.linen, forward + backward", _geomean(train), 0.80),
        row(
            "worst rnnlib / lax.scan, any mode",
            worst(
                _ratio(results, c, cell, mode, "rnnlib", over="lax.scan")
                for c, cell in every
                for mode in MODES
            ),
            1.10,
        ),
        row(
            "worst first call rnnlib / flax.linen, any mode",
            worst(r for mode in MODES for r in rnnlib_over_linen(mode, "first_call_s")),
            level(*MODES, key="first_call_s"),
        ),
    ]


def noise_floor(results, mode: str, key: str = "median_s") -> tuple[float, float] | None:
    """The lowest and highest ``flax.linen:again / flax.linen`` over the rows of
    ``mode`` (of ``key``: running time, or ``first_call_s``): one program against
    itself, so the spread this run's noise alone gives a ratio. ``None`` when the run
    did not time that contender."""
    ratios = [
        r
        for c in results
        for cell in results[c]
        if (r := _ratio(results, c, cell, mode, AGAIN, key)) is not None
    ]
    return (min(ratios), max(ratios)) if ratios else None


def markdown(report: dict) -> str:
    results = report["results"]
    others = [n for n in _present(results) if n != "flax.linen"]
    first_calls = report.get("first_calls", 1)
    lines = [
        f"# Benchmark: {report['name']}",
        "",
        f"{report['machine']}; jax {report['versions']['jax']}, flax "
        f"{report['versions']['flax']}; median of at least {report['runs']} alternating runs "
        f"(up to {MAX_ROUNDS} for short calls); "
        + (
            f"first calls (trace + compile + run): median of {first_calls}."
            if first_calls
            else "first calls not timed in this run."
        ),
        "",
        "Ratios are time / flax.linen's time: below 1.0 is faster than flax.linen.",
        "",
    ]
    for mode in MODES:
        title = "forward + backward (jax.grad)" if mode == "train" else "forward"
        lines += [f"## {title}", ""]
        lines += [
            "| configuration | cell | flax.linen (ms) | "
            + " | ".join(others)
            + " | rnnlib / lax.scan | first call: rnnlib / linen |",
            "|---|---|---:|" + "---:|" * (len(others) + 2),
        ]
        for config, cells in results.items():
            for cell, modes in cells.items():
                entry = modes[mode]
                ratios = [_fmt(_ratio(results, config, cell, mode, n)) for n in others]
                vs_scan = _ratio(results, config, cell, mode, "rnnlib", over="lax.scan")
                first = _ratio(results, config, cell, mode, "rnnlib", "first_call_s")
                lines.append(
                    f"| {config} | {cell} | {entry['flax.linen']['median_s'] * 1e3:.1f} | "
                    + " | ".join(ratios)
                    + f" | {_fmt(vs_scan)} | {_fmt(first)} |"
                )
        lines.append("")
        for name in others:
            geo = _geomean(
                _ratio(results, c, cell, mode, name) for c in results for cell in results[c]
            )
            lines.append(f"Geometric mean of {name} / flax.linen ({title}): **{_fmt(geo)}**  ")
        lines.append("")
    lines += ["## Targets", "", "| target | measured | limit | met |", "|---|---:|---:|---|"]
    for what, value, limit, met in targets(results):
        verdict = "n/a" if met is None else ("yes" if met else "**no**")
        lines.append(f"| {what} | {_fmt(value)} | {limit:.2f} | {verdict} |")
    lines += [
        "",
        "A limit above 1.00 is the top of this run's noise floor (below): a ratio inside it "
        "counts as level with flax.linen.",
        "",
    ]
    floors = {mode: noise_floor(results, mode) for mode in MODES}
    if all(floors.values()):
        (train_lo, train_hi), (fwd_lo, fwd_hi) = floors["train"], floors["forward"]
        lines += [
            "## Noise floor",
            "",
            f"`{AGAIN}` is flax.linen's program compiled and timed a second time, in the same "
            f"rotation as the others. Its ratio to flax.linen, one program against itself, went "
            f"from {train_lo:.2f} to {train_hi:.2f} in training and from {fwd_lo:.2f} to "
            f"{fwd_hi:.2f} forward in this run: ratios inside that range do not tell two "
            "programs apart.",
            "",
        ]
    if report.get("seq_lengths_memory"):
        lines += [
            "## Extra memory for `seq_lengths` with `return_carry` (LSTM, forward)",
            "",
            "| T | B x H | flax.linen extra | rnnlib extra |",
            "|---:|---:|---:|---:|",
        ]
        for row in report["seq_lengths_memory"]:

            def extra(name, row=row):
                m = row[name]
                if m["with_seq_lengths"] is None or m["without_seq_lengths"] is None:
                    return "n/a"
                return f"{(m['with_seq_lengths'] - m['without_seq_lengths']) / 1024:.0f} KiB"

            lines.append(
                f"| {row['T']} | {row['B']} x {row['H']} | {extra('flax.linen')} | "
                f"{extra('rnnlib')} |"
            )
        lines.append("")
    return "\n".join(lines)


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = report["results"]
    labels = [f"{cfg}\n{cell}" for cfg in results for cell in results[cfg]]
    fig, axes = plt.subplots(1, 2, figsize=(12, 0.5 * len(labels) + 2), sharey=True)
    for ax, mode in zip(axes, MODES):
        y = np.arange(len(labels))
        others = [n for n in _present(results) if n != "flax.linen"]
        width = 0.8 / len(others)
        for k, name in enumerate(others):
            values = [
                _ratio(results, cfg, cell, mode, name) or np.nan
                for cfg in results
                for cell in results[cfg]
            ]
            ax.barh(y + width * (k - (len(others) - 1) / 2), values, height=width, label=name)
        ax.axvline(1.0, color="black", lw=1, ls="--")
        ax.set_yticks(y, labels, fontsize=7)
        ax.set_xlabel("time / flax.linen time")
        ax.set_title("forward + backward" if mode == "train" else "forward")
    axes[0].legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def chosen_settings(parser, args, quick: dict, full: dict) -> dict:
    """The run's settings: ``quick`` or ``full``, with ``--runs`` and ``--first-calls``
    where given; too few runs for a median is a usage error."""
    settings = dict(quick if args.quick else full)
    given = {"runs": args.runs, "first_calls": args.first_calls}
    settings.update({key: value for key, value in given.items() if value is not None})
    if settings["runs"] < 5:
        parser.error(f"--runs must be at least 5 for a meaningful median; got {settings['runs']}")
    return settings


def describe_machine(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The processor by name, family, model and cache (the plan's bands are where XLA:CPU ran
    slowly on one machine, so a report says which), its cores, and JAX's devices."""
    try:
        with open(cpuinfo) as info:  # the first processor's fields
            lines = info.read().split("\n\n")[0].splitlines()
        fields = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    except OSError:
        fields = {}
    cpu = platform.processor() or platform.machine()
    if "model name" in fields:
        cpu = f"{fields['model name']} (family {fields.get('cpu family')}, model "
        cpu += f"{fields.get('model')}, cache {fields.get('cache size')}), {platform.machine()}"
    cores = f"{os.cpu_count()} CPU cores"
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if usable != os.cpu_count():  # pinned (taskset): XLA:CPU's threads share only these cores
        cores += f" ({usable} usable by this process)"
    return f"{cpu}, {cores}, {jax.device_count()} x {jax.devices()[0].device_kind} ({jax.default_backend()})"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small shapes, no first calls or memory analysis, about 100 s",
    )
    # Defaults sized on this 2-core machine: with 5 rounds, one program timed twice in the
    # same run (rnnlib's LSTMCell and OptimizedLSTMCell) differed by 15% at B256; a median
    # of 3 first calls moved by 10% between runs, and a median of 5 still read 0.87 and
    # 1.22 of flax.linen's for one rnnlib program in two rows of the same run.
    parser.add_argument(
        "--runs", type=int, default=None, help="timed rounds (at least 5; default 7, quick 5)"
    )
    parser.add_argument(
        "--first-calls",
        type=int,
        default=None,
        help="first calls timed per contender, the median reported (default 9; quick 0, not timed)",
    )
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--name", default=None, help="file name stem (default: full or quick)")
    parser.add_argument(
        "--contenders",
        nargs="+",
        default=list(NAMES),
        choices=ALL_NAMES,
        help="what to compare (flax.linen is always included: the ratios are against it); "
        "rnnlib:hoisted and rnnlib:in-loop force RNN(plan=Plan(hoist_inputs=True/False))",
    )
    args = parser.parse_args(argv)
    settings = chosen_settings(parser, args, QUICK_SETTINGS, FULL_SETTINGS)
    if settings["first_calls"] < 0:
        parser.error(f"--first-calls must be 0 (not timed) or more; got {settings['first_calls']}")

    import flax

    names = ["flax.linen"] + [n for n in args.contenders if n != "flax.linen"]
    configs = QUICK if args.quick else CONFIGS
    name = args.name or ("quick" if args.quick else "full")
    results = {}
    for config_name, config in configs.items():
        results[config_name] = {}
        for cell in config["cells"]:
            print(f"{config_name} / {cell} ...", flush=True)
            results[config_name][cell] = measure(config, cell, names=names, **settings)
    report = {
        "name": name,
        "machine": describe_machine(),
        "versions": {"jax": jax.__version__, "flax": flax.__version__},
        "runs": settings["runs"],
        "first_calls": settings["first_calls"],
        "configs": {
            k: {kk: vv for kk, vv in v.items() if kk != "cells"} for k, v in configs.items()
        },
        "results": results,
        "seq_lengths_memory": seq_lengths_memory((128, 512) if args.quick else (256, 1024, 4096)),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{name}.json").write_text(json.dumps(report, indent=1))
    (args.out / f"{name}.md").write_text(markdown(report))
    plot(report, args.out / f"{name}.png")
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
