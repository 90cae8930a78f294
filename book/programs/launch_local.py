"""Run N processes of data_parallel_train.py on this machine, on the loopback interface.

    python launch_local.py --num-processes 2 --local-devices 2 --timeout 300 -- \\
        --data DATA --checkpoint ckpt.npz

Everything after ``--`` goes to ``data_parallel_train.py train``; the launcher adds
``--coordinator 127.0.0.1:PORT`` (a free port), ``--num-processes`` and each process's
``--process-id``. Each process sees ``--local-devices`` simulated CPU devices. The
launcher collects every process's output and fails if any process fails or if they run
past the timeout; it stops all of them in every case.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "data_parallel_train.py"
REPOSITORY = HERE.parents[1]
DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


@dataclass
class Finished:
    """One process's outcome: its exit code (None if it was stopped) and its output."""

    process_id: int
    returncode: int | None
    stdout: str
    stderr: str

    def last_error_line(self):
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        return lines[-1] if lines else "(no output on stderr)"


class LaunchError(RuntimeError):
    """A process failed or the processes ran past the timeout; ``results`` has them all."""

    def __init__(self, message, results):
        super().__init__(message)
        self.results = results


def free_port(host="127.0.0.1"):
    """A TCP port nothing listens on now, on ``host``: the operating system picks it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def child_environment(local_devices):
    """The environment of each process: ``local_devices`` CPU devices, no proxies.

    XLA reads XLA_FLAGS when jax starts, so the device count must be in the environment
    before the child imports jax. Other XLA flags of the caller are kept, after the
    device count (XLA stops reading at a word without ``--``). Proxy variables go:
    the processes talk to each other on loopback, never through a proxy.
    """
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    inherited = [
        flag
        for flag in env.get("XLA_FLAGS", "").split()
        if not flag.startswith(DEVICE_COUNT_FLAG)
    ]
    env["XLA_FLAGS"] = " ".join([f"{DEVICE_COUNT_FLAG}={local_devices}", *inherited])
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPOSITORY), env.get("PYTHONPATH")])
    )
    return env


def _stop(process):
    """Kill ``process`` and anything it started (its own process group), if it still
    runs; say whether it had to be killed."""
    running = process.poll() is None
    if running:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait()
    return running


def launch(
    train_args,
    *,
    num_processes=2,
    local_devices=2,
    timeout=300.0,
    extra_args=None,
    on_poll=None,
    grace=5.0,
):
    """Run ``num_processes`` trainers on loopback and return their ``Finished`` results.

    ``extra_args`` maps a process id to arguments appended to its command line only
    (they override the common ones). ``on_poll(pids)`` is called about ten times a
    second with the ids of the processes still running. When one process fails, the
    others get ``grace`` seconds to finish before they are stopped. Raises LaunchError
    when any process fails or when they are not all done after ``timeout`` seconds.
    """
    coordinator = f"127.0.0.1:{free_port()}"
    env = child_environment(local_devices)
    processes, outputs, stopped = [], [], set()
    try:
        for rank in range(num_processes):
            command = [
                sys.executable, str(SCRIPT), "train", *train_args,
                "--coordinator", coordinator,
                "--num-processes", str(num_processes),
                "--process-id", str(rank),
                *(extra_args or {}).get(rank, []),
            ]  # fmt: skip
            out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
            outputs.append((out, err))
            processes.append(
                subprocess.Popen(
                    command, stdout=out, stderr=err, env=env, start_new_session=True
                )
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            running = [p.pid for p in processes if p.poll() is None]
            if not running:
                break
            if any(p.returncode for p in processes):  # one failed: the rest may hang
                deadline = min(deadline, time.monotonic() + grace)
            if on_poll is not None:
                on_poll(running)
            time.sleep(0.1)
        timed_out = [rank for rank, p in enumerate(processes) if p.poll() is None]
    finally:
        stopped = {rank for rank, p in enumerate(processes) if _stop(p)}
        results = []
        for rank, (process, (out, err)) in enumerate(zip(processes, outputs)):
            out.seek(0)
            err.seek(0)
            results.append(
                Finished(
                    rank,
                    None if rank in stopped else process.returncode,
                    out.read().decode(errors="replace"),
                    err.read().decode(errors="replace"),
                )
            )
            out.close()
            err.close()
    failed = [r for r in results if r.returncode]
    if failed:
        reasons = "; ".join(
            f"process {r.process_id} exited with {r.returncode}: {r.last_error_line()}"
            for r in failed
        )
        stopped_too = [r for r in results if r.returncode is None]
        if stopped_too:
            reasons += "; stopped " + "; ".join(
                f"process {r.process_id}, last: {r.last_error_line()}"
                for r in stopped_too
            )
        raise LaunchError(reasons, results)
    if timed_out:
        names = ", ".join(map(str, timed_out))
        raise LaunchError(
            f"process(es) {names} still running after {timeout:g} s; stopped them all",
            results,
        )
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-processes", type=int, default=2)
    parser.add_argument("--local-devices", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds (300)")
    parser.add_argument(
        "train_args",
        nargs=argparse.REMAINDER,
        help="-- then the options of data_parallel_train.py train",
    )
    args = parser.parse_args(argv)
    train_args = (
        args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    )
    try:
        results = launch(
            train_args,
            num_processes=args.num_processes,
            local_devices=args.local_devices,
            timeout=args.timeout,
        )
    except LaunchError as error:
        for result in error.results:
            print(
                f"--- process {result.process_id} stderr ---\n{result.stderr}",
                file=sys.stderr,
            )
        print(f"launch failed: {error}", file=sys.stderr)
        return 1
    for result in results:
        print(f"--- process {result.process_id} ---\n{result.stdout}", end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
