"""rnnlib against another checkout of rnnlib and flax.linen, side by side in one process.

For a change inside rnnlib, at a handful of points, when the full sweep
(``benchmarks/sweep.py``) cannot run on an idle machine::

    git worktree add /tmp/main main          # or any checkout of the old code
    .venv/bin/python -m benchmarks.against /tmp/main --quick

The other checkout's ``rnnlib`` is copied into a temporary directory as a package named
``rnnlib_other`` and imported next to this tree's. Every point times, in rotating rounds:
rnnlib, rnnlib again (an A/A copy, compiled apart), the other rnnlib, flax.linen and
flax.linen again; for the LSTM both linen cells, against the faster one. It reports
medians of wall time and of process CPU time (all threads), each over flax.linen's and
over the other rnnlib's: on a machine other jobs share, CPU time moves less than wall
time. ``--first-calls N`` also times N first calls (trace, compile and run, JAX's caches
cleared) per contender and mode. Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import importlib
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp

POINTS = [  # cell, B, I, H (T = 64)
    ("LSTMCell", 8, 32, 64),
    ("LSTMCell", 64, 128, 256),
    ("LSTMCell", 16, 128, 256),
    ("LSTMCell", 128, 64, 128),
    ("GRUCell", 8, 32, 64),
    ("GRUCell", 64, 128, 256),
    ("GRUCell", 16, 128, 256),
    ("GRUCell", 128, 64, 128),
]
CONV = ("ConvLSTMCell", 8, 8, 16)  # make bench's ConvLSTM point: B8 T16 32x32x8, 16 features
QUICK = [POINTS[0], POINTS[1], POINTS[4], POINTS[5]]


def import_other(checkout: Path):
    """The ``rnnlib`` package of ``checkout``, imported as ``rnnlib_other``."""
    target = Path(tempfile.mkdtemp()) / "rnnlib_other"
    shutil.copytree(checkout / "rnnlib", target)
    for path in target.rglob("*.py"):
        path.write_text(re.sub(r"\brnnlib\b", "rnnlib_other", path.read_text()))
    sys.path.insert(0, str(target.parent))
    return importlib.import_module("rnnlib_other")


def _rounds(fns, args, rounds, first_calls=False):
    """Per contender, the median wall and process CPU time of ``rounds`` calls in rotating order:
    after a warm-up, or with ``first_calls`` each a first call (JAX's caches cleared before it)."""
    if not first_calls:
        for fn in fns.values():
            jax.block_until_ready(fn(*args))
    wall = {k: [] for k in fns}
    cpu = {k: [] for k in fns}
    order = list(fns)
    for r in range(rounds):
        for name in order[r % len(order) :] + order[: r % len(order)]:
            if first_calls:
                jax.clear_caches()
            start, start_cpu = time.perf_counter(), time.process_time()
            jax.block_until_ready(fns[name](*args))
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
    return {k: statistics.median(v) for k, v in wall.items()}, {
        k: statistics.median(v) for k, v in cpu.items()
    }


def point(other, cell_name, B, I, H, T=64, rounds=21, first_calls=0):  # noqa: E741
    """Per mode: ``{contender: (wall_s, cpu_s)}``; with ``first_calls``, also per mode
    ``'first ' + mode``, the first calls' medians."""
    import flax.linen as nn

    import rnnlib

    conv = cell_name == "ConvLSTMCell"  # B8 I8 H16 stands for B8 T16 32x32x8, 16 features
    x = jax.random.normal(jax.random.key(1), (B, 16, 32, 32, I) if conv else (B, T, I))
    args = (H, (3, 3)) if conv else (H,)
    params = nn.RNN(getattr(nn, cell_name)(*args)).init(jax.random.key(0), x)["params"]
    modules = {
        "rnnlib": rnnlib.RNN(getattr(rnnlib, cell_name)(*args)),
        "rnnlib:again": rnnlib.RNN(getattr(rnnlib, cell_name)(*args)),
        "other": other.RNN(getattr(other, cell_name)(*args)),
        "linen": nn.RNN(getattr(nn, cell_name)(*args)),
        "linen:again": nn.RNN(getattr(nn, cell_name)(*args)),
    }
    if cell_name == "LSTMCell":
        modules["linen:O"] = nn.RNN(nn.OptimizedLSTMCell(H))
        modules["linen:O:again"] = nn.RNN(nn.OptimizedLSTMCell(H))
    results = {}
    for mode in ("train", "forward"):
        fns = {}
        for name, module in modules.items():

            def apply(p, x, module=module):
                return module.apply({"params": p}, x)

            if mode == "train":
                fns[name] = jax.jit(jax.grad(lambda p, x, f=apply: jnp.mean(f(p, x) ** 2)))
            else:
                fns[name] = jax.jit(apply)
        if first_calls:
            wall, cpu = _rounds(fns, (params, x), first_calls, first_calls=True)
            results["first " + mode] = {name: (wall[name], cpu[name]) for name in fns}
        wall, cpu = _rounds(fns, (params, x), rounds)
        results[mode] = {name: (wall[name], cpu[name]) for name in fns}
    return results


def ratios(times: dict) -> dict:
    """rnnlib, its A/A copy and the other rnnlib over the faster linen cell, and rnnlib
    over the other, in wall time and in CPU time."""
    out = {}
    for i, measure in enumerate(("wall", "cpu")):
        linen = min(t[i] for n, t in times.items() if n in ("linen", "linen:O"))
        aa = [
            times[n][i] / times[n.replace(":again", "")][i] for n in times if n.endswith(":again")
        ]
        out[measure] = {
            "rnnlib/linen": times["rnnlib"][i] / linen,
            "other/linen": times["other"][i] / linen,
            "rnnlib/other": times["rnnlib"][i] / times["other"][i],
            "A/A": aa,
        }
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", type=Path, help="a checkout holding the other rnnlib/")
    parser.add_argument("--quick", action="store_true", help="four points instead of eight")
    parser.add_argument("--conv", action="store_true", help="also the ConvLSTM's point")
    parser.add_argument("--only", nargs="*", type=int, help="these points (indexes) only")
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--first-calls", type=int, default=0, help="first calls per contender")
    args = parser.parse_args(argv)
    other = import_other(args.checkout)
    points = QUICK if args.quick else POINTS
    points = [points[i] for i in args.only] if args.only else points
    for cell_name, B, I, H in points + ([CONV] if args.conv else []):  # noqa: E741
        result = point(other, cell_name, B, I, H, rounds=args.rounds, first_calls=args.first_calls)
        for mode, times in result.items():
            r = ratios(times)
            line = " ".join(
                f"{measure}: "
                + " ".join(f"{k} {v:.2f}" for k, v in r[measure].items() if k != "A/A")
                + " A/A "
                + "/".join(f"{v:.2f}" for v in r[measure]["A/A"])
                for measure in ("wall", "cpu")
            )
            print(f"{cell_name} B{B} I{I} H{H} {mode:13s} {line}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
