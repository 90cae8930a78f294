"""Run the tests that compare two orders of arithmetic again under other orders of arithmetic.

Usage, from the repository root (``make test-arithmetic`` runs the first form)::

    python -m tests.arithmetic                  # every setting below, the comparison tests
    python -m tests.arithmetic fast-math        # one setting
    python -m tests.arithmetic --tests tests    # every setting, the whole test folder

XLA picks kernels, vector widths and how work is split by CPU, so a sum can be rounded
differently on a contributor's machine than on ours. Each setting below makes this machine
round the way another CPU (or XLA configuration) would, through ``XLA_FLAGS``; the tests
must pass under every one of them, which is what tests/tolerance.py's rule is for.
CONTRIBUTING.md ("Orders of arithmetic") lists the same settings with what they change.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

SETTINGS = {
    # 128-bit vectors and no fused multiply-add: an older x86 CPU.
    "sse4.2": "--xla_cpu_max_isa=SSE4_2",
    # 256-bit vectors without AVX2's integer ops or FMA.
    "avx": "--xla_cpu_max_isa=AVX",
    # LLVM may reassociate and contract floating-point operations.
    "fast-math": "--xla_cpu_enable_fast_math=true",
    # One thread: matmuls and convolutions split no work across cores.
    "one-thread": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
}

# Every test module that compares two computations of the same numbers.
COMPARISON_TESTS = [
    "tests/test_tolerance.py",
    "tests/test_parity_cells.py",
    "tests/test_parity_rnn.py",
    "tests/test_parity_bidirectional.py",
    "tests/test_properties.py",
    "tests/test_transforms.py",
    "tests/test_speed_paths.py",
    "tests/test_interop.py",
    "tests/test_sharding.py",
    "tests/test_module.py",
    "tests/test_legacy.py",
    "tests/test_legacy_oracle.py",
    "tests/test_benchmarks.py",
    "tests/test_migrate.py",
    "tests/test_multiprocess.py",
    "tests/test_migrate_idioms.py",
    "tests/test_stacked.py",
    "tests/test_dropout.py",
    "tests/test_exercises_cell_equations.py",
]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "settings",
        nargs="*",
        choices=[[], *SETTINGS],
        default=[],
        metavar="SETTING",
        help=f"any of {', '.join(SETTINGS)} (default: all)",
    )
    parser.add_argument("--tests", nargs="+", default=COMPARISON_TESTS)
    args = parser.parse_args(argv)
    failed = []
    for name in args.settings or SETTINGS:
        env = dict(os.environ, XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} {SETTINGS[name]}")
        command = [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadscope", "-q"]
        print(f"== {name}: XLA_FLAGS='{SETTINGS[name]}'", flush=True)
        start = time.monotonic()
        result = subprocess.run([*command, "-p", "no:cacheprovider", *args.tests], env=env)
        print(f"== {name}: exit {result.returncode} in {time.monotonic() - start:.0f} s\n")
        if result.returncode:
            failed.append(name)
    print("failed under: " + ", ".join(failed) if failed else "passed under every setting")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
