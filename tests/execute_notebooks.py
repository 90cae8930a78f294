"""Re-execute notebooks in place, top to bottom, so their stored outputs come from a real run.

Usage, from the repository root (``make notebooks`` runs the first form)::

    python -m tests.execute_notebooks book                  # every notebook under book/
    python -m tests.execute_notebooks book/ch1.ipynb ...    # just these

A folder is searched recursively, skipping ``_build`` and ``.ipynb_checkpoints``; files whose name
starts with ``_`` (the chapter template) are executed too, because ``pytest book --nbval`` checks
them as well.

Each notebook runs in a fresh ``python3`` kernel of the interpreter running this script (the
project's .venv), with the notebook's own folder as the working directory and 120 s allowed per
cell. The environment is made quiet and repeatable: JAX on the CPU only (``JAX_PLATFORMS=cpu``, so
it prints no "no GPU found" warning), matplotlib's inline backend (figures are stored as PNG, which
nbval does not compare byte for byte), and a fixed ``PYTHONHASHSEED``.

A cell that raises stops the run and the notebook is left untouched, unless the cell is expected to
raise (the ``raises-exception`` tag or a ``# NBVAL_RAISES_EXCEPTION`` comment); a cell expected to
raise that does not raise is an error too. On success the notebook is written back with clean
execution counts (1, 2, 3, ...) and without volatile metadata (execution timestamps), so a re-run
changes only what really changed. It is then checked with tests.notebook_hygiene, and the exit
status is 1 if anything failed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError

from tests.notebook_hygiene import SKIPPED_DIRS, check_notebook, expects_error

CELL_TIMEOUT_S = 120
KERNEL_ENV = {
    "JAX_PLATFORMS": "cpu",
    "MPLBACKEND": "module://matplotlib_inline.backend_inline",
    "PYTHONHASHSEED": "0",
    # The debugger's "frozen modules" notice goes to the kernel's stderr.
    "PYDEVD_DISABLE_FILE_VALIDATION": "1",
}
# Cell metadata that changes on every run and carries no meaning for readers.
VOLATILE_CELL_METADATA = ("execution", "ExecuteTime", "collapsed", "scrolled")


def find_notebooks(paths: list[str]) -> list[Path]:
    found = []
    for path in map(Path, paths):
        if path.is_dir():
            found += [
                nb
                for nb in sorted(path.rglob("*.ipynb"))
                if SKIPPED_DIRS.isdisjoint(nb.relative_to(path).parts)
            ]
        elif path.suffix == ".ipynb" and path.is_file():
            found.append(path)
        else:
            raise SystemExit(f"{path}: expected a notebook (.ipynb) or a folder of notebooks.")
    return found


def execute(path: Path, timeout: int = CELL_TIMEOUT_S) -> nbformat.NotebookNode:
    """Run ``path`` top to bottom and return the executed notebook; raise if a cell fails."""
    notebook = nbformat.read(path, as_version=4)
    marked = []  # nbclient knows the tag, not nbval's comment marker: tag such cells for the run.
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        cell.outputs, cell.execution_count = [], None
        tags = cell.metadata.setdefault("tags", [])
        if expects_error(cell) and "raises-exception" not in tags:
            tags.append("raises-exception")
            marked.append(cell)
        if not tags:
            del cell.metadata["tags"]
    client = NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": str(path.parent.resolve())}},
    )
    client.execute()
    for cell in marked:
        cell.metadata.tags.remove("raises-exception")
        if not cell.metadata.tags:
            del cell.metadata["tags"]
    for index, cell in enumerate(notebook.cells):
        for key in VOLATILE_CELL_METADATA:
            cell.metadata.pop(key, None)
        if cell.cell_type == "code" and cell.source.strip() and expects_error(cell):
            if not any(output.output_type == "error" for output in cell.outputs):
                raise RuntimeError(
                    f"code cell {index} is marked as raising an exception, but it ran without one."
                )
    notebook.metadata.pop("widgets", None)
    return notebook


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", help="notebooks, or folders to search for them")
    parser.add_argument("--timeout", type=int, default=CELL_TIMEOUT_S, help="seconds per cell")
    args = parser.parse_args(argv)
    os.environ.update(KERNEL_ENV)
    # The kernel is this interpreter: jupyter_client swaps the spec's "python" for sys.executable,
    # and anything the kernel starts by name should come from the same environment.
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])

    failed = []
    for path in find_notebooks(args.paths):
        start = time.perf_counter()
        print(f"executing {path} ...", flush=True)
        try:
            notebook = execute(path, args.timeout)
        except (CellExecutionError, CellTimeoutError, RuntimeError) as error:
            print(f"FAILED {path}; left unchanged.\n{error}", file=sys.stderr)
            failed.append(path)
            continue
        nbformat.write(notebook, path)
        print(f"  wrote {path} in {time.perf_counter() - start:.1f} s")
        problems = check_notebook(path)
        if problems:
            failed.append(path)
            print(f"  {path} fails the hygiene check:", file=sys.stderr)
            for problem in problems:
                print(f"    - {problem}", file=sys.stderr)
    if failed:
        print(f"{len(failed)} notebook(s) failed: {', '.join(map(str, failed))}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
