"""Packaging: a wheel built from a clean copy of the repository installs and imports on its own.

This is what the chapters' Colab setup cell relies on (`pip install git+<repository>`): pip builds
a wheel from the repository and installs it with its declared dependencies. Here the copy holds
only the files git knows about (tracked, plus untracked ones that .gitignore does not exclude), so
build outputs and virtual environments cannot leak into the wheel; the wheel goes into a fresh
virtual environment whose jax and numpy come from the package index (or pip's cache), and rnnlib
is imported from there, not from the working tree.

Slow by design (a wheel build and a venv install: a few seconds with uv and its cache, which
the Makefile's environments have; about 30-60 s with pip once the wheelhouse under
~/.cache/carry-on holds jax, jaxlib and numpy), and pinned_env only.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from tests.book_hygiene import REPO_ROOT

pytestmark = pytest.mark.pinned_env


def run(*command, cwd, timeout=300):
    result = subprocess.run(
        [str(c) for c in command], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, f"{' '.join(map(str, command))}\n{result.stdout}{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A fresh venv with the wheel installed: (its python, the wheel, the venv, the source copy)."""
    tmp = tmp_path_factory.mktemp("packaging")
    source = tmp / "source"
    files = run(
        "git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=REPO_ROOT
    )
    for name in filter(None, files.split("\0")):
        if (REPO_ROOT / name).is_file():  # skip files deleted in the working tree
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / name, source / name)
    dist = tmp / "dist"
    env_dir = tmp / "venv"
    venv.create(env_dir, with_pip=False)  # the installer runs from outside, with --python
    python = env_dir / "bin" / "python"
    if importlib.util.find_spec("uv"):
        # The Makefile puts uv in each environment: the same build and the same index as
        # pip's, in a fraction of the time (this fixture took about 50 s with pip).
        uv = [sys.executable, "-m", "uv"]
        run(*uv, "build", "--wheel", "--quiet", "--out-dir", dist, source, cwd=tmp)
        (wheel,) = dist.glob("rnnlib-*.whl")
        run(
            *uv,
            "pip",
            "install",
            "--quiet",
            "--compile-bytecode",
            "--python",
            python,
            wheel,
            cwd=tmp,
        )
        return python, wheel, env_dir, source

    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", dist, source, cwd=tmp)
    (wheel,) = dist.glob("rnnlib-*.whl")
    # Dependencies are resolved against the package index every time, but their files are kept
    # in a wheelhouse outside the repository, so a second run downloads nothing.
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    wheelhouse = cache / "carry-on" / "wheelhouse"
    pip = [sys.executable, "-m", "pip"]
    run(*pip, "download", "--quiet", "--only-binary=:all:", "-d", wheelhouse, wheel, cwd=tmp)
    (wheelhouse / wheel.name).unlink(missing_ok=True)  # pip download copies the wheel itself too
    run(
        *pip,
        "--python",
        python,
        "install",
        "--quiet",
        "--no-index",
        "--find-links",
        wheelhouse,
        wheel,
        cwd=tmp,
    )
    return python, wheel, env_dir, source


def probe(python, code):
    """Run ``code`` in the fresh venv, away from the repository, with no PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [str(python), "-c", code],
        cwd=python.parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_wheel_holds_every_rnnlib_module(installed):
    _, wheel, _, source = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = [p.relative_to(source).as_posix() for p in sorted((source / "rnnlib").rglob("*.py"))]
    assert modules, "rnnlib/ has no Python files"
    assert [m for m in modules if m not in names] == []


def test_installed_wheel_imports_outside_the_repository(installed):
    python, _, env_dir, _ = installed
    location = probe(python, "import rnnlib; print(rnnlib.__file__)")
    assert Path(location).is_relative_to(env_dir), location
    version = re.search(r'^version = "(.+)"', (REPO_ROOT / "pyproject.toml").read_text(), re.M)[1]
    assert (
        probe(python, "from importlib.metadata import version; print(version('rnnlib'))") == version
    )
    assert probe(python, "import rnnlib; print(rnnlib.__version__)") == version


def test_console_script_resolves(installed):
    python, _, env_dir, _ = installed
    assert (env_dir / "bin" / "rnnlib-migrate").exists()
    code = (
        "from importlib.metadata import entry_points; "
        "(ep,) = entry_points(group='console_scripts', name='rnnlib-migrate'); "
        "print(callable(ep.load()))"
    )
    assert probe(python, code) == "True"


def test_installed_wheel_exposes_the_cells(installed):
    python, _, _, _ = installed
    assert probe(python, "import rnnlib; print(rnnlib.LSTMCell.__name__)") == "LSTMCell"


def test_installed_wheel_needs_no_flax(installed):
    python, _, _, _ = installed
    # rnnlib's core depends on jax and numpy only; Flax is an optional extra.
    assert probe(python, "import importlib.util as u; print(u.find_spec('flax') is None)") == "True"
    assert probe(python, "import jax, numpy; print('ok')") == "ok"
