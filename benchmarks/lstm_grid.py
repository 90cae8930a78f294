"""The driver the LSTM studies share (``benchmarks.backward``, ``benchmarks.forward``).

Each study times a set of contenders in one mode over the sweep's LSTM grid
(``I = H / 2``, ``T = 64``) with ``benchmarks.run.measure``, turns every point's result
into ratios and writes ``benchmarks/results/{stem}.{json,md}`` (``{stem}-quick`` for
``--quick``, four points).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import jax

GRID = dict(B=(8, 16, 32, 64, 128, 256), H=(32, 64, 128, 256, 512))
QUICK_GRID = dict(B=(8, 64), H=(64, 256))


def geomean(values) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def main(
    argv,
    *,
    description: str,
    stem: str,
    mode: str,
    names: tuple,
    ratios: Callable[[dict], dict],
    markdown: Callable[[list, str], str],
    min_timed_s: float | None = None,
) -> int:
    from benchmarks.run import MIN_TIMED_S, measure

    min_timed_s = MIN_TIMED_S if min_timed_s is None else min_timed_s
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="four points instead of 30")
    parser.add_argument("--runs", type=int, default=7, help="timed rounds (at least 5)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args(argv)
    if args.runs < 5:
        parser.error(f"--runs must be at least 5; got {args.runs}")
    grid = QUICK_GRID if args.quick else GRID
    start = time.perf_counter()
    points = []
    for batch in grid["B"]:
        for features in grid["H"]:
            config = dict(B=batch, T=64, I=features // 2, H=features)
            result = measure(
                config,
                "LSTMCell",
                args.runs,
                names,
                first_calls=0,
                min_timed_s=min_timed_s,
                memory=False,
                modes=(mode,),
            )
            points.append(dict(config=config, result=result, ratios=ratios(result)))
            shown = {k: round(v, 2) for k, v in points[-1]["ratios"].items() if k != "aa"}
            print(config, shown, flush=True)
    minutes = (time.perf_counter() - start) / 60
    header = (
        f"{os.cpu_count()} x {jax.devices()[0].device_kind} cores, jax {jax.__version__}; "
        f"{len(points)} points in {minutes:.1f} minutes, medians of at least {args.runs} "
        f"rotating rounds (more for calls under {min_timed_s:g} s in all)."
    )
    stem = f"{stem}-quick" if args.quick else stem
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.json").write_text(json.dumps(dict(header=header, points=points)))
    (args.out / f"{stem}.md").write_text(markdown(points, header))
    print(markdown(points, header))
    return 0
