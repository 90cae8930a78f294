"""Whether two contenders compile to the same program: their operations, side by side.

Usage (from the repository root)::

    .venv/bin/python -m benchmarks.programs LSTMCell "compute B256 T64 H512"
    .venv/bin/python -m benchmarks.programs GRUCell "compute B256 T64 H512" --mode forward

For one cell and one configuration of ``benchmarks.run.CONFIGS``, this compiles the
training step (or the forward pass) of rnnlib and of flax.linen, reads the program XLA
optimised for this machine's backend, and counts its operations by opcode and result
shape. Names, metadata and the order of a tuple's elements are left out, since they
change nothing that runs. It prints the totals and the operations only one side has; an
empty difference means the two run the same operations, so their times can differ only
by the machine's noise. Nothing is timed here.

For a change to rnnlib itself, ``--dump FILE`` records rnnlib's operation counts for
every cell and configuration of the harness (forward pass and training step, the
backend's choice of hoisting and the input projection forced before the loop), and
``--against FILE`` compares a new run with such a record, row by row::

    .venv/bin/python -m benchmarks.programs --dump before.json     # before the change
    .venv/bin/python -m benchmarks.programs --against before.json  # after it
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys

import jax

from benchmarks.contenders import build, inputs_for
from benchmarks.run import CONFIGS

# Operations that only name or regroup values; they compute nothing.
_BOOKKEEPING = {"parameter", "get-tuple-element", "tuple", "constant"}
_OPERATION = re.compile(r"^\s*(?:ROOT )?%\S+ = (.+?) ([a-z][\w-]*)\(")


def _shape(text: str) -> str:
    """A result shape, with a tuple's elements sorted (a loop's state can hold the same
    arrays in another order without computing anything differently)."""
    text = re.sub(r"/\*index=\d+\*/", "", text)
    if not text.startswith("("):
        return text
    parts, depth, start = [], 0, 1
    for i, char in enumerate(text[1:-1], 1):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(_shape(text[start:i].strip()))
            start = i + 1
    parts.append(_shape(text[start:-1].strip()))
    return "(" + ", ".join(sorted(p for p in parts if p)) + ")"


def operations(hlo_text: str) -> collections.Counter:
    """``(opcode, result shape)`` -> count, over every computation of an HLO module's text."""
    counts = collections.Counter()
    for line in hlo_text.splitlines():
        match = _OPERATION.match(line)
        if match and match.group(2) not in _BOOKKEEPING:
            counts[(match.group(2), _shape(match.group(1)))] += 1
    return counts


def compiled_operations(fn, *args) -> collections.Counter:
    """The operations of ``fn`` (a jitted function) as XLA compiles it for ``args``."""
    return operations(fn.lower(*args).compile().as_text())


def compare(cell: str, config: dict, mode: str = "train", names=("rnnlib", "flax.linen")):
    """The operation counts of each contender in ``names``, sharing one set of variables."""
    x = inputs_for(config, jax.random.key(1))
    linen = build("flax.linen", cell, config, x)
    counts = {}
    for name in names:
        contender = (
            linen if name == linen.name else build(name, cell, config, x, {"params": linen.params})
        )
        counts[name] = compiled_operations(getattr(contender, mode), contender.params, x)
    return counts


# Cells recorded by --dump beyond each configuration's own: the other dense cells.
_EXTRA_DENSE_CELLS = ("SimpleCell", "MGUCell")
_RNNLIB_VARIANTS = ("rnnlib", "rnnlib:hoisted")


def rnnlib_programs(configs=CONFIGS) -> dict:
    """``{row: {"opcode shape": count}}`` for rnnlib's programs, one row per configuration,
    cell, variant (``rnnlib``: the backend's choice of hoisting; ``rnnlib:hoisted``) and
    mode (``forward``, ``train``)."""
    rows = {}
    for config_name, config in configs.items():
        cells = tuple(config["cells"])
        if "signal" not in config:
            cells += _EXTRA_DENSE_CELLS
        for cell in cells:
            counts = compare(cell, config, "forward", names=_RNNLIB_VARIANTS)
            counts = {(n, "forward"): c for n, c in counts.items()}
            train = compare(cell, config, "train", names=_RNNLIB_VARIANTS)
            counts.update({(n, "train"): c for n, c in train.items()})
            for (name, mode), ops in sorted(counts.items()):
                row = f"{config_name} | {cell} | {name} | {mode}"
                rows[row] = {f"{op} {shape}": n for (op, shape), n in sorted(ops.items())}
                print(f"{row}: {sum(ops.values())} operations", file=sys.stderr, flush=True)
    return rows


def differences(before: dict, after: dict) -> list[str]:
    """One line per row whose operations differ (or that only one record has)."""
    lines = []
    for row in sorted(set(before) | set(after)):
        if row not in before or row not in after:
            lines.append(f"{row}: only {'after' if row in after else 'before'}")
            continue
        old, new = collections.Counter(before[row]), collections.Counter(after[row])
        if old == new:
            continue
        lines.append(f"{row}: {sum(old.values())} -> {sum(new.values())} operations")
        for op, n in sorted((old - new).items()):
            lines.append(f"  - {n} x {op}")
        for op, n in sorted((new - old).items()):
            lines.append(f"  + {n} x {op}")
    return lines


def main(argv=None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] in ("--dump", "--against"):
        if len(argv) != 2:
            raise SystemExit(f"usage: python -m benchmarks.programs {argv[0]} FILE")
        rows = rnnlib_programs()
        if argv[0] == "--dump":
            with open(argv[1], "w") as f:
                json.dump(rows, f, indent=1, sort_keys=True)
            print(f"{len(rows)} rows written to {argv[1]}")
            return 0
        with open(argv[1]) as f:
            lines = differences(json.load(f), rows)
        print(f"{len(rows)} rows; {sum(not s.startswith(' ') for s in lines)} differ")
        print("\n".join(lines))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cell", help="LSTMCell, OptimizedLSTMCell, GRUCell or ConvLSTMCell")
    parser.add_argument("config", choices=list(CONFIGS), help="a configuration of the harness")
    parser.add_argument("--mode", choices=("train", "forward"), default="train")
    args = parser.parse_args(argv)
    if args.cell not in CONFIGS[args.config]["cells"]:
        parser.error(
            f"{args.config!r} runs the cells {CONFIGS[args.config]['cells']}; got {args.cell!r}"
        )
    (a, ca), (b, cb) = compare(args.cell, CONFIGS[args.config], args.mode).items()
    print(f"{a}: {sum(ca.values())} operations; {b}: {sum(cb.values())} operations")
    for left, right, only in ((ca, cb, a), (cb, ca, b)):
        extra = left - right
        print(f"only in {only}:", "none" if not extra else "")
        for (opcode, shape), n in sorted(extra.items()):
            print(f"  {n} x {opcode} {shape}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
