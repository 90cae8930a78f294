"""Run the tests that compare two orders of arithmetic again under other orders of arithmetic.

Usage, from the repository root (``make test-arithmetic`` runs the first form)::

    python -m tests.arithmetic                  # every setting below, the comparison tests
    python -m tests.arithmetic fast-math        # one setting
    python -m tests.arithmetic --tests tests    # every setting, the whole test folder
    python -m tests.arithmetic avx --make-test  # one setting, the whole of `make test`

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

# The lowest supported jaxlib (tests/lowest.txt, 0.4.30) predates --xla_cpu_max_isa and stops
# at start-up on a flag it does not know, so under an instruction-set cap `--make-test` runs
# the lowest-version tests without it (and says so); the pinned and floor runs take it whole.
LOWEST_UNKNOWN_FLAGS = ("--xla_cpu_max_isa",)

# `make test`, target by target, so that each can get its own XLA_FLAGS.
MAKE_TEST_TARGETS = ("test-pinned", "test-lowest", "test-floor")

# Every test module that compares two computations of the same numbers.
COMPARISON_TESTS = [
    "tests/unit/test_tolerance.py",
    "tests/parity/test_parity_cells.py",
    "tests/parity/test_parity_rnn.py",
    "tests/parity/test_parity_bidirectional.py",
    "tests/property/test_properties.py",
    "tests/property/test_transforms.py",
    "tests/unit/test_speed_paths.py",
    "tests/parity/test_interop.py",
    "tests/unit/test_sharding.py",
    "tests/unit/test_module.py",
    "tests/parity/test_legacy.py",
    "tests/parity/test_legacy_oracle.py",
    "tests/unit/test_linear_rnn.py",
    "tests/parity/test_rglru_oracle.py",
    "tests/tools/test_benchmarks.py",
    "tests/tools/test_migrate.py",
    "tests/notebooks/test_multiprocess.py",
    "tests/tools/test_migrate_idioms.py",
    "tests/unit/test_stacked.py",
    "tests/unit/test_dropout.py",
    "tests/notebooks/test_exercises_cell_equations.py",
    "tests/unit/test_library_use.py",
    "tests/parity/test_flax_layers.py",
    "tests/parity/test_torch_weights.py",
    "tests/unit/test_silent_cases.py",
    "tests/unit/test_composition.py",
    "tests/unit/test_resets.py",
    "tests/parity/test_nnx_layers.py",
    "tests/notebooks/test_exercises_attention.py",
    "tests/unit/test_linear_precision.py",
    "tests/notebooks/test_exercises_flax_api.py",
]


def environment(flags: str) -> dict[str, str]:
    """This process's environment with ``flags`` added to whatever XLA_FLAGS it already has."""
    return dict(os.environ, XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} {flags}".strip())


def run_make_test(flags: str) -> int:
    """`make test` under ``flags``, one target at a time; the first failing target's status."""
    for target in MAKE_TEST_TARGETS:
        target_flags = flags
        if target == "test-lowest":
            kept = [f for f in flags.split() if not f.startswith(LOWEST_UNKNOWN_FLAGS)]
            if len(kept) < len(flags.split()):
                print(f"-- {target}: jaxlib 0.4.30 has no instruction-set cap; run without it")
            target_flags = " ".join(kept)
        print(f"-- make {target}  XLA_FLAGS='{target_flags}'", flush=True)
        returncode = subprocess.run(["make", target], env=environment(target_flags)).returncode
        if returncode:
            return returncode
    return 0


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
    parser.add_argument(
        "--make-test",
        action="store_true",
        help="run the whole test command (make test) under each setting instead of --tests",
    )
    args = parser.parse_args(argv)
    failed = []
    for name in args.settings or SETTINGS:
        print(f"== {name}: XLA_FLAGS='{SETTINGS[name]}'", flush=True)
        start = time.monotonic()
        if args.make_test:
            returncode = run_make_test(SETTINGS[name])
        else:
            command = [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadscope", "-q"]
            command += ["-p", "no:cacheprovider", *args.tests]
            returncode = subprocess.run(command, env=environment(SETTINGS[name])).returncode
        print(f"== {name}: exit {returncode} in {time.monotonic() - start:.0f} s\n")
        if returncode:
            failed.append(name)
    print("failed under: " + ", ".join(failed) if failed else "passed under every setting")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
