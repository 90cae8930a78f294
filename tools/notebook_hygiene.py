#!/usr/bin/env python3
"""Notebook hygiene: what strict nbval cannot check by itself, for any Jupyter notebook.

nbval re-runs each code cell and compares the fresh outputs with the stored ones. A cell that was
never executed stores no output, so nbval has nothing to compare and passes it; execution counts
are not compared at all. This check fails a committed notebook when:

- a non-empty code cell has no ``execution_count``, or the counts are not 1, 2, 3, ... in order,
  so the stored outputs do not come from one top-to-bottom run;
- a cell stores a stderr stream (warnings and other noise, which often name paths of one machine);
- a cell stores an error but is not marked as expected to raise (the ``raises-exception`` or
  ``nbval-raises-exception`` tag, or a ``# NBVAL_RAISES_EXCEPTION`` comment line);
- a cell carries a misspelt nbval marker, a tag or a comment line that nbval reads as nothing
  (``nbval_skip``, ``# NBVAL-SKIP``, ``nbval-ignore_output``, ``# NBVAL_SKIP because ...``);
- a line of a code cell is longer than 88 characters (``--max-line-length``; 0 turns it off);
- the file is over 2 MB, or is not a readable notebook.

Each problem comes with what to do. For a stale notebook that is the command that runs it again
top to bottom, with the kernel the notebook names in its metadata (``--kernel-name`` names
another, such as ``python3`` for the current environment's Python).

This is one file that needs nothing but Python 3.8 or newer and its standard library: copy it into
your repository and run it, or let pre-commit run it (a ``repo: local`` hook, or this book's
repository as a remote hook)::

    python3 notebook_hygiene.py notebooks/             # a folder: every notebook below it
    python3 notebook_hygiene.py a.ipynb b.ipynb --max-line-length=100

A folder is searched with its subfolders, skipping hidden ones (``.ipynb_checkpoints``, ``.venv``),
``_build`` and notebooks whose name starts with ``_``; a notebook named explicitly is always
checked. With no path, the
current folder is searched. The exit status is 1 when a notebook has a problem, 0 otherwise.

From Carry On, a book on recurrent networks in JAX and Flax (Apache-2.0), where it checks every
chapter: https://github.com/carry-on-book/carry-on
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

MAX_BYTES = 2_000_000
# The width of a code block on the book's rendered page; ruff's default line length is 88 too.
MAX_LINE_LENGTH = 88
SKIPPED_DIRS = {"_build", ".ipynb_checkpoints"}
# The tags and the comment marker under which nbval lets a cell raise.
RAISES_TAGS = {"raises-exception", "nbval-raises-exception"}
RAISES_MARKER = "NBVAL_RAISES_EXCEPTION"
# What nbval reads, exactly as it reads it: a comment line that is one of these markers alone,
# and a tag that is one of these. Anything that differs only in case, '-', '_' or spaces, or has
# words after the marker, nbval ignores without a word: the check reports it.
COMMENT_MARKERS = (
    "NBVAL_IGNORE_OUTPUT",
    "NBVAL_CHECK_OUTPUT",
    "NBVAL_RAISES_EXCEPTION",
    "NBVAL_SKIP",
    "PYTEST_VALIDATE_IGNORE_OUTPUT",
)
MARKER_TAGS = (
    "nbval-ignore-output",
    "nbval-check-output",
    "nbval-raises-exception",
    "nbval-skip",
    "pytest-validate-ignore-output",
    "raises-exception",
)
# The kernel a hint names for a notebook that names none.
DEFAULT_KERNEL = "python3"
DESCRIPTION = "Check that committed notebooks hold the outputs of one clean run."


def cell_source(cell: dict) -> str:
    """A cell's text, whether the file stores it as one string or as a list of lines."""
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def cell_tags(cell: dict) -> set:
    metadata = cell.get("metadata")
    tags = metadata.get("tags", []) if isinstance(metadata, dict) else []
    return set(tags) if isinstance(tags, list) else set()


def expects_error(cell: dict) -> bool:
    """Whether nbval is told that this cell raises (by a tag or a comment line)."""
    if cell_tags(cell) & RAISES_TAGS:
        return True
    return any(
        line.strip().startswith("#") and line.strip().lstrip("#").strip() == RAISES_MARKER
        for line in cell_source(cell).splitlines()
    )


def _words(text: str) -> str:
    """Marker text in one spelling: upper case, '-', '_' and spaces read as one '_'."""
    return "_".join(part for part in re.split(r"[\s_-]+", text.upper()) if part)


def _meant(text: str, markers: Iterable[str]) -> str | None:
    """The marker that ``text`` was meant to be, if it is one misspelt (or followed by words)."""
    words = _words(text.lstrip("#"))
    for marker in markers:
        if words == _words(marker) or words.startswith(_words(marker) + "_"):
            return None if text == marker else marker
    return None


def marker_problems(cell: dict, where: str) -> list[str]:
    """Tags and comment lines of a code cell that look like nbval markers but are not."""
    problems = []
    for tag in sorted(cell_tags(cell), key=str):
        meant = _meant(str(tag), MARKER_TAGS)
        if meant:
            problems.append(
                f"{where} has the tag {tag!r}, which nbval ignores: it reads {meant!r}. "
                "Rename the tag; as it is, the cell is tested as if it had none."
            )
    for number, line in enumerate(cell_source(cell).splitlines(), start=1):
        comment = line.strip()
        if not comment.startswith("#"):
            continue
        meant = _meant(comment.lstrip("#").strip(), COMMENT_MARKERS)
        if meant:
            problems.append(
                f"{where}, line {number} is {comment!r}, which nbval ignores: it reads "
                f"`# {meant}` alone on its line. Write that, or give the cell the tag "
                f"{meant.lower().replace('_', '-')!r}."
            )
    return problems


def kernel_name(notebook: dict) -> str:
    """The kernel the notebook names in its metadata (``kernelspec.name``), or ``python3``."""
    metadata = notebook.get("metadata")
    spec = metadata.get("kernelspec") if isinstance(metadata, dict) else None
    name = spec.get("name") if isinstance(spec, dict) else None
    return name if isinstance(name, str) and name else DEFAULT_KERNEL


def rerun_hint(path: Path | str, kernel: str) -> str:
    """What to do about outputs that do not come from one clean run."""
    command = f"jupyter execute --inplace --kernel_name={kernel} {shlex.quote(str(path))}"
    return (
        "Run it again top to bottom in a fresh kernel and save it: Restart & Run All in "
        f"Jupyter, or `{command}`."
    )


def generic_problems(cells: list, rerun: str, max_line_length: int = MAX_LINE_LENGTH) -> list[str]:
    """The problems of a notebook's cells; ``rerun`` says how to run the notebook again."""
    problems = []
    expected_count = 1
    never_executed = []
    for index, cell in enumerate(cells):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        where = f"code cell {index}"
        count = cell.get("execution_count")
        source = cell_source(cell)
        if source.strip():
            if count is None:
                never_executed.append(index)
            elif count != expected_count:
                problems.append(
                    f"{where} has execution_count {count}, expected {expected_count}: the "
                    f"outputs are not from one top-to-bottom run. {rerun}"
                )
            expected_count += 1
        for number, line in enumerate(source.splitlines(), start=1):
            if max_line_length and len(line) > max_line_length:
                problems.append(
                    f"{where}, line {number} is {len(line)} characters long; the limit is "
                    f"{max_line_length}, the width of the rendered page. Format the code "
                    "(ruff format), and wrap long comments and strings by hand."
                )
        problems += marker_problems(cell, where)
        outputs = cell.get("outputs", [])
        for output in outputs if isinstance(outputs, list) else []:
            if not isinstance(output, dict):
                continue
            kind = output.get("output_type")
            if kind == "stream" and output.get("name") == "stderr":
                text = output.get("text", "")
                first = ("".join(text) if isinstance(text, list) else str(text)).strip()
                shown = first.splitlines()[0] if first else ""
                problems.append(f"{where} stores stderr output: {shown!r}")
            elif kind == "error" and not expects_error(cell):
                problems.append(
                    f"{where} stores an error ({output.get('ename')}: {output.get('evalue')}) "
                    "but is not tagged raises-exception"
                )

    if never_executed:
        which = ", ".join(map(str, never_executed))
        one = len(never_executed) == 1
        cells_have = f"code cell {which} has" if one else f"code cells {which} have"
        problems.insert(
            0,
            f"{cells_have} no execution_count: never executed, so nbval would pass "
            f"{'it' if one else 'them'} without checking anything. {rerun}",
        )
    return problems


def read_notebook(path: Path | str) -> tuple[dict | None, list[str]]:
    """The notebook at ``path`` as a dict, and the problems of the file itself.

    The notebook is None when the file cannot be read as one; the problems then say why.
    """
    path = Path(path)
    problems = []
    if path.exists() and not path.is_file():
        return None, ["it is not a regular file"]
    try:
        size = path.stat().st_size
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        return None, [f"it cannot be read ({error.strerror or error})"]
    except UnicodeDecodeError as error:
        return None, [f"it is not a readable notebook (not UTF-8: {error})"]
    if size > MAX_BYTES:
        problems.append(
            f"the file is {size:,} bytes; the limit is {MAX_BYTES:,}. Make figures smaller or "
            "print less."
        )
    try:
        notebook = json.loads(text)
    except json.JSONDecodeError as error:
        return None, [*problems, f"it is not a readable notebook (invalid JSON: {error})"]
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        return None, [*problems, "it is not a notebook: no list of cells at its top level"]
    return notebook, problems


def check_notebook(
    path: Path | str, *, max_line_length: int = MAX_LINE_LENGTH, kernel: str | None = None
) -> list[str]:
    """Every problem of one notebook, each as a sentence that says what to do. Empty if clean.

    ``kernel`` is the kernel the hints name; by default the one the notebook names.
    """
    notebook, problems = read_notebook(path)
    if notebook is None:
        return problems
    rerun = rerun_hint(path, kernel or kernel_name(notebook))
    return problems + generic_problems(notebook["cells"], rerun, max_line_length)


def find_notebooks(paths: Iterable[Path | str]) -> Iterator[Path]:
    """Notebooks named by ``paths``: files as given, folders searched with their subfolders."""
    for path in map(Path, paths):
        if path.is_dir():
            for notebook in sorted(path.rglob("*.ipynb")):
                folders = notebook.relative_to(path).parts[:-1]
                hidden = any(folder.startswith(".") for folder in folders)
                if not hidden and SKIPPED_DIRS.isdisjoint(folders) and notebook.name[0] != "_":
                    yield notebook
        else:
            yield path


def argument_parser(description: str = DESCRIPTION) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "paths", nargs="*", help="notebooks, or folders to search (default: the current folder)"
    )
    parser.add_argument(
        "--max-line-length",
        type=int,
        default=MAX_LINE_LENGTH,
        help=f"the longest code line allowed (default {MAX_LINE_LENGTH}; 0: no limit)",
    )
    parser.add_argument(
        "--kernel-name",
        default=None,
        help="the kernel that the hints' jupyter execute command names (default: the kernel "
        "each notebook names in its metadata, or python3)",
    )
    return parser


def report(notebooks: Iterable[Path], check: Callable[[Path], list]) -> int:
    """Print the problems that ``check`` finds in each notebook; 1 if there were any, else 0."""
    checked = failed = 0
    for notebook in notebooks:
        checked += 1
        problems = check(notebook)
        if problems:
            failed += 1
            print(f"{notebook}:")
            for problem in problems:
                print(f"  - {problem}")
    print(f"notebook hygiene: {checked} checked, {failed} with problems")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    args = argument_parser().parse_args(sys.argv[1:] if argv is None else argv)
    return report(
        find_notebooks(args.paths or ["."]),
        lambda notebook: check_notebook(
            notebook, max_line_length=args.max_line_length, kernel=args.kernel_name
        ),
    )


if __name__ == "__main__":
    sys.exit(main())
