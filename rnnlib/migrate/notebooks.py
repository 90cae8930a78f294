"""Reading the inputs: ``.py`` files and Jupyter notebooks, each as parsed units.

A ``.py`` file is one unit. A notebook (``.ipynb``) is one unit per code cell, numbered by its
place among all cells from 1 (markdown cells count, so cell ``N`` is ``cells[N-1]`` in the
JSON); IPython line magics and shell escapes (``%time``, ``!pip``) are masked as comments of the
same length so that positions stay right, and a cell magic such as ``%%bash`` is not Python and
is skipped. The imports of every cell count for every other cell, as they do in a kernel.
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import tokenize

from rnnlib.migrate.checker import Checker
from rnnlib.migrate.findings import Error, Finding
from rnnlib.migrate.names import _Names
from rnnlib.migrate.source import _Source

_SKIP_DIRS = frozenset({"__pycache__", "site-packages", "node_modules", "venv"})
_CELL_ERR = "code cell could not be parsed"


def _parse(text: str):
    return ast.parse(text)


_MAGIC = re.compile(r"\s*([%!]|[\w.]+\s*=\s*[%!])")
_PYTHON_CELL_MAGICS = frozenset({"%%time", "%%timeit", "%%capture"})


def _mask_magics(text: str) -> str | None:
    """The cell with IPython magics turned into comments of the same length; None if not Python."""
    first = text.lstrip().split(None, 1)[0] if text.strip() else ""
    if first.startswith("%%") and first not in _PYTHON_CELL_MAGICS:
        return None
    lines = re.split(r"(\r\n|\r|\n)", text)
    for i in range(0, len(lines), 2):
        line = lines[i]
        if _MAGIC.match(line) or line.rstrip().endswith("?"):
            stripped = len(line) - len(line.lstrip())
            lines[i] = line[:stripped] + "#" + line[stripped + 1 :]
    return "".join(lines)


class _Unit:
    """One parsed piece of Python: a whole .py file, or one code cell of a notebook."""

    def __init__(self, cell: int | None, src: _Source, tree):
        self.cell, self.src, self.tree = cell, src, tree


def _read_python(path: str, errors: list):
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
        text = raw.decode(encoding)
    except (OSError, SyntaxError, UnicodeDecodeError, LookupError) as exc:
        errors.append(Error(path, f"cannot read: {exc}"))
        return None
    try:
        tree = _parse(text)
    except SyntaxError as exc:
        errors.append(Error(path, f"cannot parse: {exc.msg}", None, exc.lineno, exc.offset))
        return None
    except ValueError as exc:  # e.g. null bytes on older Pythons
        errors.append(Error(path, f"cannot parse: {exc}"))
        return None
    return {"kind": "py", "encoding": encoding, "units": [_Unit(None, _Source(text), tree)]}


def _read_notebook(path: str, errors: list):
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
        text = raw.decode("utf-8")
        data = json.loads(text)
    except (OSError, UnicodeDecodeError) as exc:
        errors.append(Error(path, f"cannot read: {exc}"))
        return None
    except json.JSONDecodeError as exc:
        errors.append(
            Error(
                path, f"not a valid notebook: invalid JSON ({exc.msg})", None, exc.lineno, exc.colno
            )
        )
        return None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        got = (
            "nbformat 3 worksheets"
            if isinstance(data, dict) and "worksheets" in data
            else ("no 'cells' list")
        )
        errors.append(
            Error(path, f"not an nbformat 4 notebook: expected a 'cells' list, got {got}")
        )
        return None
    language = data.get("metadata", {}).get("language_info", {}).get("name", "python")
    if language != "python":
        return {"kind": "ipynb", "text": text, "data": data, "units": []}
    units, failed = [], False
    for index, cell in enumerate(data["cells"], start=1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else source
        if not isinstance(source, str):
            errors.append(Error(path, "cell source is neither a string nor a list", index))
            failed = True
            continue
        try:
            tree, parse_text = _parse(source), source
        except (SyntaxError, ValueError):
            parse_text = _mask_magics(source)
            if parse_text is None:
                continue  # a cell magic such as %%bash: not Python
            try:
                tree = _parse(parse_text)
            except SyntaxError as exc:
                errors.append(Error(path, f"{_CELL_ERR}: {exc.msg}", index, exc.lineno, exc.offset))
                failed = True
                continue
            except ValueError as exc:
                errors.append(Error(path, f"{_CELL_ERR}: {exc}", index))
                failed = True
                continue
        units.append(_Unit(index, _Source(source, parse_text), tree))
    return {"kind": "ipynb", "text": text, "data": data, "units": units, "failed": failed}


def _iter_files(paths, errors):
    for path in paths:
        if os.path.isdir(path):
            found = []
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS)
                found += [os.path.join(root, f) for f in files if f.endswith((".py", ".ipynb"))]
            yield from sorted(found)
        elif os.path.exists(path):
            yield path
        else:
            errors.append(Error(path, "no such file or directory"))


def check_document(path: str, doc: dict) -> list[Finding]:
    names = _Names([unit.tree for unit in doc["units"]])
    findings = []
    for unit in doc["units"]:
        findings += Checker(path, unit.cell, unit.src, unit.tree, names).run()
    return findings
