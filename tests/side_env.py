"""Reference scripts run in a side environment: another Python with its own pinned packages
(Flax 0.6.11 for ``rnnlib.legacy``, recurrentgemma 1.0.1 for ``RGLRUCell``), whose outputs the
oracle tests compare rnnlib against. A missing environment fails a test, never skips it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest


def require_python(python: Path, what: str, venv: str) -> Path:
    """``python`` if it exists; otherwise the test fails, naming the make target that builds
    ``venv``, the side environment of ``what``."""
    if not python.exists():
        pytest.fail(
            f"The {what} side environment is missing ({python}). "
            f"Build it with `make {venv}/.stamp`."
        )
    return python


def environment() -> dict:
    """This process's environment for a side-environment child: on the CPU, quiet, without
    this process's JAX and XLA settings or the user's site-packages."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    env.update(JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3", PYTHONNOUSERSITE="1")
    return env


def run_reference(python: Path, script: Path, out: Path, *args, what: str) -> dict:
    """Runs ``script OUT *args`` with ``python`` in ``environment()`` and returns every array
    it stored in the ``.npz`` ``out``, by key."""
    command = [str(python), str(script), str(out), *map(str, args)]
    result = subprocess.run(command, capture_output=True, text=True, env=environment(), timeout=900)
    if result.returncode != 0:
        pytest.fail(f"The {what} reference script failed:\n{result.stderr[-4000:]}")
    with np.load(out) as data:
        return {key: data[key] for key in data.files}
