"""Checker for the scaling-out chapter's exercise: which rows of the global batch a process reads."""

from __future__ import annotations

from rnnlib.exercises._check import Feedback, attempt, case_problems

# (global_batch, num_devices, process_count): every process_index is tried.
CASES = [(32, 4, 2), (24, 8, 4), (12, 4, 1), (64, 8, 2)]


def _want(global_batch, num_devices, process_index, process_count):
    per_process = global_batch // process_count
    return process_index * per_process, (process_index + 1) * per_process


def check_local_rows(local_rows) -> Feedback:
    """Check ``local_rows(global_batch, num_devices, process_index, process_count)``.

    The batch is sharded with ``P('data')`` over a 1-D mesh of all ``num_devices`` devices,
    listed process by process (as ``jax.devices()`` lists them), each process owning
    ``num_devices // process_count`` of them. The attempt returns ``(start, stop)``, the rows
    process ``process_index`` must read, and raises ``ValueError`` when the global batch does
    not divide over the devices.
    """
    cases = _cases()
    problems = case_problems(local_rows, cases, _judge)
    got, error = attempt(local_rows, 10, 4, 0, 2)
    if error is None or not error.startswith("calling it raised ValueError"):
        what = error or f"it returned {got!r}"
        problems.append(
            "case 'batch 10 over 4 devices': 10 rows do not divide over 4 devices, so this must"
            f" raise ValueError (naming both numbers); {what}"
        )
    return Feedback("check_local_rows", len(cases) + 1, tuple(problems))


def _cases():
    """``(name, args)`` for every process of every entry of ``CASES``."""
    return [
        (
            f"batch {global_batch}, {num_devices} devices, process {process_index}"
            f" of {process_count}",
            (global_batch, num_devices, process_index, process_count),
        )
        for global_batch, num_devices, process_count in CASES
        for process_index in range(process_count)
    ]


def _judge(got, *args) -> str | None:
    want = _want(*args)
    if _pair(got) != want:
        return f"got {got!r}; expected {want}{_diagnosis(got, args)}"
    return None


def _pair(got):
    try:
        start, stop = got
        return int(start), int(stop)
    except (TypeError, ValueError):
        return None


def _diagnosis(got, args) -> str:
    global_batch, num_devices, process_index, process_count = args
    pair = _pair(got)
    if pair is None:
        return " (return a pair of ints, (start, stop))"
    per_device = global_batch // num_devices
    if pair == (process_index * per_device, (process_index + 1) * per_device):
        return (
            " (that is one device's block; a process holds"
            f" {num_devices // process_count} devices, so it reads that many blocks)"
        )
    if pair[1] - pair[0] == global_batch // process_count:
        return " (the right number of rows, from the wrong place: processes take blocks in order)"
    return ""
