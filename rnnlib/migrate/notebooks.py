"""Parsing the inputs (their bytes, as ``rnnlib.migrate.files`` read them): ``.py`` files and
Jupyter notebooks, each as parsed units. What cannot be decoded or parsed is one Error.

A ``.py`` file is one unit. A notebook (``.ipynb``) is one unit per code cell, numbered by its
place among all cells from 1 (markdown cells count, so cell ``N`` is ``cells[N-1]`` in the
JSON); IPython line magics and shell escapes (``%time``, ``!pip``) are masked as comments of the
same length so that positions stay right, and a cell magic such as ``%%bash`` is not Python and
is skipped. The imports of every cell count for every other cell, as they do in a kernel. A
notebook is read as Python unless ``metadata.language_info.name`` says otherwise (absent or
null, it says nothing); ``metadata`` or ``language_info`` of the wrong JSON type is an error.
"""

from __future__ import annotations

import ast
import io
import json
import re
import tokenize

from rnnlib.migrate.checker import Checker
from rnnlib.migrate.findings import Error, Finding
from rnnlib.migrate.names import _Names
from rnnlib.migrate.source import _Source

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


_TOO_DEEP = "nested too deeply for Python's parser (RecursionError)"


def _parse_python(path: str, raw: bytes, errors: list):
    """The file's one unit, or None (with an Error) when it cannot be decoded or parsed."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
        text = raw.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError) as exc:
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
    except (RecursionError, MemoryError):
        errors.append(Error(path, f"cannot parse: {_TOO_DEEP}"))
        return None
    return {"kind": "py", "encoding": encoding, "units": [_Unit(None, _Source(text), tree)]}


def _type_name(value) -> str:
    return {dict: "an object", list: "a list", str: "a string", type(None): "null"}.get(
        type(value), f"a {type(value).__name__}"
    )


def _language(data: dict) -> tuple[str | None, str | None]:
    """(language, problem): the notebook's language ("python" when it does not say), or the
    problem with its metadata that keeps it from being read."""
    metadata = data.get("metadata", {})
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        return None, f"'metadata' is {_type_name(metadata)}, not an object"
    info = metadata.get("language_info")
    if info is None:  # absent, or null: the notebook does not say
        return "python", None
    if not isinstance(info, dict):
        return None, f"'metadata.language_info' is {_type_name(info)}, not an object"
    name = info.get("name", "python")
    if not isinstance(name, str):
        return None, f"'metadata.language_info.name' is {_type_name(name)}, not a string"
    return name, None


def _parse_notebook(path: str, raw: bytes, errors: list):
    """The notebook's code cells as units, or None (with an Error) when it cannot be read."""
    try:
        text = raw.decode("utf-8")
        data = json.loads(text)
    except UnicodeDecodeError as exc:
        errors.append(Error(path, f"cannot read: not UTF-8 ({exc.reason} at byte {exc.start})"))
        return None
    except json.JSONDecodeError as exc:
        errors.append(
            Error(
                path, f"not a valid notebook: invalid JSON ({exc.msg})", None, exc.lineno, exc.colno
            )
        )
        return None
    except (RecursionError, MemoryError):
        errors.append(Error(path, "not a valid notebook: its JSON is nested too deeply"))
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
    language, problem = _language(data)
    if problem:
        errors.append(Error(path, f"not a valid notebook: {problem}"))
        return None
    if language != "python":
        return {"kind": "ipynb", "text": text, "data": data, "units": []}
    units, failed = [], False
    for index, cell in enumerate(data["cells"], start=1):
        if not isinstance(cell, dict):
            errors.append(Error(path, f"cell is {_type_name(cell)}, not an object", index))
            failed = True
            continue
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        if isinstance(source, list) and all(isinstance(part, str) for part in source):
            source = "".join(source)
        if not isinstance(source, str):
            errors.append(Error(path, "cell source is neither a string nor a list", index))
            failed = True
            continue
        try:
            tree, parse_text = _parse(source), source
        except (RecursionError, MemoryError):
            errors.append(Error(path, f"{_CELL_ERR}: {_TOO_DEEP}", index))
            failed = True
            continue
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
            except (RecursionError, MemoryError):
                errors.append(Error(path, f"{_CELL_ERR}: {_TOO_DEEP}", index))
                failed = True
                continue
        units.append(_Unit(index, _Source(source, parse_text), tree))
    return {"kind": "ipynb", "text": text, "data": data, "units": units, "failed": failed}


def parse_input(path: str, raw: bytes, errors: list):
    """The parsed document of one input (a notebook when it ends in .ipynb), or None."""
    if path.endswith(".ipynb"):
        return _parse_notebook(path, raw, errors)
    return _parse_python(path, raw, errors)


def check_document(path: str, doc: dict) -> list[Finding]:
    names = _Names([unit.tree for unit in doc["units"]])
    findings = []
    for unit in doc["units"]:
        findings += Checker(path, unit.cell, unit.src, unit.tree, names).run()
    return findings
