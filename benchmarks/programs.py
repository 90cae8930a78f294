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
"""

from __future__ import annotations

import argparse
import collections
import re

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


def main(argv=None) -> int:
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
