"""Re-execute notebooks in place, top to bottom, so their stored outputs come from a real run.

Usage, from the repository root (``make notebooks`` runs the first form)::

    python -m tests.execute_notebooks book                  # every notebook under book/
    python -m tests.execute_notebooks book/ch1.ipynb ...    # just these
    python -m tests.execute_notebooks book/md/ch1.md        # the notebook paired with this file

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
changes only what really changed. It is then checked with tests.book_hygiene, and the exit
status is 1 if anything failed.

Paired notebooks. A notebook whose metadata pairs it with a MyST Markdown file through jupytext
(``"jupytext": {"formats": "ipynb,md//md:myst"}``: ``book/NAME.ipynb`` and ``book/md/NAME.md``)
keeps its outputs in the .ipynb and the text of its cells in both. Before the run, the cells' text
is taken from whichever of the two was edited; after a successful run the .md is rewritten from the
executed notebook, so the pair is in sync again. Which one was edited is decided without file
modification times, which a fresh clone sets arbitrarily: the side whose text differs from the last
commit (``git show HEAD:...``) is the edited one; when neither does (a pair committed out of sync),
the .md wins, since it is the file contributors edit; when both do, nothing is run and
``--inputs-from md`` or ``--inputs-from ipynb`` chooses. Only for a pair that git does not know (a
new chapter, or no repository), whose files were both written on this machine, is the file modified
last taken as the edited one.
"""

from __future__ import annotations

import argparse
import copy
import difflib
import os
import subprocess
import sys
import time
from pathlib import Path

import jupytext
import nbformat
from jupytext.combine import combine_inputs_with_outputs
from jupytext.config import load_jupytext_config
from jupytext.paired_paths import InconsistentPath, paired_paths
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError

from tests.book_hygiene import REPO_ROOT, SKIPPED_DIRS, check_notebook, expects_error

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
# The chapters' pairing: book/NAME.ipynb with book/md/NAME.md, in jupytext's MyST Markdown. The
# filter keeps jupytext's version out of the .md header, so that another jupytext (a contributor's
# JupyterLab) does not rewrite it; it lives in each notebook's metadata, as the pairing does, so
# that every tool that syncs the pair (this module, the jupytext command, JupyterLab) writes the
# same text.
PAIRING = "ipynb,md//md:myst"
TEXT_FORMAT = "md:myst"
PAIR_METADATA = {
    "formats": PAIRING,
    "notebook_metadata_filter": "-jupytext.text_representation.jupytext_version",
}
PAIR_COMMAND = (
    f".venv/bin/jupytext --set-formats {PAIRING} --update-metadata "
    f'\'{{"jupytext": {{"notebook_metadata_filter": '
    f'"{PAIR_METADATA["notebook_metadata_filter"]}"}}}}\''
)


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
        elif path.suffix == ".md" and path.is_file() and paired_notebook(path):
            found.append(paired_notebook(path))
        else:
            raise SystemExit(
                f"{path}: expected a notebook (.ipynb), its paired .md, or a folder of notebooks."
            )
    return found


# --- notebooks paired with a Markdown file ------------------------------------------------------


class PairConflict(RuntimeError):
    """Both files of a pair were edited since the last commit, and they disagree."""


def shown(path: Path) -> str:
    """``path`` relative to the repository root when it is inside it, as commands take it."""
    try:
        return Path(path).resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return str(path)


def paired_markdown(path: Path, notebook: nbformat.NotebookNode | None = None) -> Path | None:
    """The .md file that the notebook at ``path`` is paired with by its metadata, or None."""
    if notebook is None:
        notebook = nbformat.read(path, as_version=4)
    formats = notebook.metadata.get("jupytext", {}).get("formats")
    if not formats:
        return None
    pairs = paired_paths(str(path), "ipynb", formats)
    return next((Path(alt) for alt, fmt in pairs if fmt["extension"] == ".md"), None)


def paired_notebook(md: Path) -> Path | None:
    """The .ipynb that the .md file ``md`` names as its pair in its header, or None."""
    formats = jupytext.read(md, fmt=TEXT_FORMAT).metadata.get("jupytext", {}).get("formats")
    if not formats:
        return None
    try:
        pairs = paired_paths(str(md), TEXT_FORMAT, formats)
    except InconsistentPath:  # the .md is not where its own pairing would put it
        return None
    return next((Path(alt) for alt, fmt in pairs if fmt["extension"] == ".ipynb"), None)


def markdown_text(notebook: nbformat.NotebookNode, md: Path) -> str:
    """The text jupytext writes at ``md`` for ``notebook``: every cell's text, no outputs."""
    # A copy: jupytext.writes can add the settings of a configuration file to the metadata.
    config = load_jupytext_config(str(md.parent))
    return jupytext.writes(copy.deepcopy(notebook), fmt=TEXT_FORMAT, config=config)


def pair_problems(path: Path) -> list[str]:
    """Why the notebook at ``path`` and its .md are not in sync, with the command that fixes it."""
    notebook = nbformat.read(path, as_version=4)
    md = paired_markdown(path, notebook)
    fix = f"Run `.venv/bin/python -m tests.execute_notebooks {shown(path)}` to fix it."
    if md is None:
        return [
            f"{shown(path)} is not paired with a Markdown file. Run "
            f"`{PAIR_COMMAND} {shown(path)}` to pair it."
        ]
    if not md.is_file():
        return [f"{shown(md)}, the Markdown pair of {shown(path)}, is missing. {fix}"]
    expected = markdown_text(notebook, md).splitlines(keepends=True)
    actual = md.read_text(encoding="utf-8").splitlines(keepends=True)
    if actual == expected:
        return []
    diff = difflib.unified_diff(expected, actual, f"written from {shown(path)}", shown(md), n=1)
    lines = [line.rstrip("\n") for line in diff]
    excerpt = "\n".join(lines[:24] + (["..."] if len(lines) > 24 else []))
    return [
        f"{shown(md)} is out of sync with {shown(path)}: its text differs from what jupytext "
        f"writes from the notebook. {fix} It takes the text from the side you edited, "
        f"executes the notebook and rewrites the .md.\n{excerpt}"
    ]


def orphan_problems(folder: Path) -> list[str]:
    """Every .md file under ``folder`` whose paired notebook is missing or does not pair back."""
    problems = []
    for md in sorted(folder.rglob("*.md")):
        if not SKIPPED_DIRS.isdisjoint(md.relative_to(folder).parts):
            continue
        text = md.read_text(encoding="utf-8")
        if not text.startswith("---\njupytext:"):
            continue  # a page of the book (intro.md), not a notebook's pair
        notebook = paired_notebook(md)
        if notebook is None or not notebook.is_file():
            problems.append(
                f"{shown(md)} has no notebook: {shown(notebook) if notebook else 'its header'} "
                "is missing. Delete the .md, or restore its notebook "
                f"(`.venv/bin/jupytext --to ipynb {shown(md)}` recreates one, without outputs)."
            )
        elif paired_markdown(notebook) != md:
            problems.append(
                f"{shown(md)} names {shown(notebook)} as its notebook, but that notebook is not "
                f"paired with it. Run `{PAIR_COMMAND} {shown(notebook)}`."
            )
    return problems


def _committed_text(path: Path) -> str | None:
    """The text of ``path`` at git's HEAD, or None where git does not know it."""
    try:
        result = subprocess.run(
            ["git", "show", f"HEAD:./{path.name}"],
            cwd=path.parent,
            capture_output=True,
            text=True,
            encoding="utf-8",
        )
    except OSError:  # no git
        return None
    return result.stdout if result.returncode == 0 else None


def edited_side(path: Path, md: Path) -> str:
    """``"md"`` or ``"ipynb"``: which file of a pair that disagrees holds the edits to keep."""
    committed_md, committed_notebook = _committed_text(md), _committed_text(path)
    if committed_md is None or committed_notebook is None:
        # A pair git does not know: both files were written on this machine, so their
        # modification times are meaningful (unlike those of a fresh clone).
        return "md" if md.stat().st_mtime >= path.stat().st_mtime else "ipynb"
    md_edited = md.read_text(encoding="utf-8") != committed_md
    committed = markdown_text(nbformat.reads(committed_notebook, as_version=4), md)
    notebook_edited = markdown_text(nbformat.read(path, as_version=4), md) != committed
    if md_edited and notebook_edited:
        raise PairConflict(
            f"{shown(path)} and {shown(md)} were both edited since the last commit, and their "
            "text differs. Keep one side with --inputs-from md or --inputs-from ipynb (the "
            "other side's edits to the cells' text are lost), after copying any edits you want "
            "into that file."
        )
    return "ipynb" if notebook_edited else "md"


def read_inputs(path: Path, inputs_from: str | None = None) -> nbformat.NotebookNode:
    """The notebook at ``path``, its cells' text taken from its .md where that side was edited.

    Outputs always come from the .ipynb. ``inputs_from`` ("md" or "ipynb") overrides the choice
    described in the module's docstring.
    """
    notebook = nbformat.read(path, as_version=4)
    md = paired_markdown(path, notebook)
    if md is None or not md.is_file():
        return notebook
    text = md.read_text(encoding="utf-8")
    if text == markdown_text(notebook, md):
        return notebook
    if (inputs_from or edited_side(path, md)) == "ipynb":
        return notebook
    print(f"  taking the cells' text from {shown(md)}", flush=True)
    inputs = jupytext.reads(text, fmt=TEXT_FORMAT)
    return combine_inputs_with_outputs(inputs, notebook, fmt=TEXT_FORMAT)


def write_pair(notebook: nbformat.NotebookNode, path: Path) -> Path | None:
    """Write ``notebook`` at ``path``, and its .md pair when that text changed; return the .md
    if it was written."""
    nbformat.write(notebook, path)
    md = paired_markdown(path, notebook)
    if md is None:
        return None
    # From the file just written, as the pair check reads it (the JSON sorts metadata keys).
    text = markdown_text(nbformat.read(path, as_version=4), md)
    if md.is_file() and md.read_text(encoding="utf-8") == text:
        return None
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text(text, encoding="utf-8")
    return md


# --- running ----------------------------------------------------------------------------------


def execute(
    path: Path, timeout: int = CELL_TIMEOUT_S, inputs_from: str | None = None
) -> nbformat.NotebookNode:
    """Run ``path`` top to bottom and return the executed notebook; raise if a cell fails.

    The cells' text comes from :func:`read_inputs`: from the paired .md where that was edited.
    """
    notebook = read_inputs(path, inputs_from)
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
        # One stream output per cell and stream: a re-run then stores prints the same way
        # whatever chunks the kernel sent them in.
        coalesce_streams=True,
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
    parser.add_argument(
        "--inputs-from",
        choices=["md", "ipynb"],
        help="for paired notebooks whose two files disagree: take the cells' text from this side, "
        "instead of from the side edited since the last commit",
    )
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
            notebook = execute(path, args.timeout, args.inputs_from)
        except (CellExecutionError, CellTimeoutError, RuntimeError) as error:
            print(f"FAILED {path}; left unchanged.\n{error}", file=sys.stderr)
            failed.append(path)
            continue
        md = write_pair(notebook, path)
        print(f"  wrote {path} in {time.perf_counter() - start:.1f} s")
        if md is not None:
            print(f"  wrote {md}, from the executed notebook")
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
