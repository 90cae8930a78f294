"""Find, and where it is safe fix, code written for Flax 0.6's recurrent API.

Flax 0.7 changed how recurrent cells are configured. Up to Flax 0.6.11 a cell such as
``nn.LSTMCell()`` took no ``features``: its width came from the carry, which a *static*
method built from the class, ``nn.LSTMCell.initialize_carry(rng, batch_dims, size)``, and
``nn.RNN(cell, cell_size)`` needed the size again. In the current API the cell is configured
with ``features``, and ``initialize_carry`` is an instance method that reads the batch dims from
the shape of one input step: ``nn.LSTMCell(features=64).initialize_carry(rng, (16, 8))``.

``python -m rnnlib.migrate`` reads ``.py`` files and Jupyter notebooks (``.ipynb``, the code
cells), parses them with Python's ``ast`` module (never with regular expressions), and reports:

``MIG001`` static ``initialize_carry``
    ``SomeCell.initialize_carry(rng, batch_dims, size[, init_fn])`` called on a cell *class*,
    spelled ``nn.LSTMCell``, ``linen.GRUCell``, ``flax.linen.OptimizedLSTMCell``, a bare name
    imported from ``flax.linen``, or ``rnnlib.legacy.X`` / ``legacy.X``. Calls on an instance,
    ``LSTMCell(features=4).initialize_carry(rng, x.shape)`` or ``cell.initialize_carry(...)``,
    are the current API and are not reported.
``MIG002`` ``RNN(..., cell_size=...)``
    The current ``RNN`` has no ``cell_size``; worse, a second positional argument is now
    ``time_major``.
``MIG003`` cell without ``features``
    ``LSTMCell()``, ``GRUCell()``, ``OptimizedLSTMCell()`` (or an ``nn.scan`` of one) built
    without ``features``, which the current API requires.
``MIG004`` ``nn.scan`` over a cell with a class-level ``initialize_carry``
    The 0.6-era wrapper module that scans a cell over time with ``nn.scan`` and builds its
    carry in a ``@staticmethod``/``@classmethod`` ``initialize_carry``. ``nn.RNN`` replaces it.

Names are resolved through the file's imports (``import flax.linen as nn``,
``from flax import linen as nn``, ``from flax.linen import LSTMCell``, ``from rnnlib import
legacy``); in a notebook the imports of every code cell count. ``nn``, ``linen`` and ``legacy``
keep their usual meaning when the file never binds them. A name bound to something else
(``import torch.nn as nn``) is not Flax, and nothing is reported for it.

Usage::

    python -m rnnlib.migrate PATH... [--format text|json] [--fix]
    rnnlib-migrate PATH...          # the same, as a console script

Directories are searched recursively for ``*.py`` and ``*.ipynb`` (skipping hidden
directories, ``__pycache__``, ``site-packages``, ``node_modules`` and ``venv``); a file named
on the command line is always read, as a notebook when it ends in ``.ipynb`` and as Python
otherwise.

Each finding is printed as ``path:line:col: CODE message`` followed by a suggested rewrite in
the current API. Lines and columns count from 1 (columns in characters). In a notebook the
location is ``path:cellN:line:col``, where ``N`` counts every cell of the notebook from 1,
markdown cells included (so it is ``cells[N-1]`` in the JSON), and ``line`` counts within
that cell. Line magics and shell escapes (``%time``, ``!pip``) are read as comments.

``--format json`` prints one object: ``{"findings": [...], "errors": [...],
"fixed_files": [...], "fully_fixed_files": [...]}``. Each finding has ``path``, ``cell`` (an
int, or null outside notebooks), ``line``, ``col``, ``code``, ``message``, ``suggestion``,
``fixable``, ``reason`` (why it is not fixable, or null) and ``fixed``. Each error has
``path``, ``cell``, ``line``, ``col`` (null where they do not apply) and ``message``.

``--fix`` rewrites, in place, the cases whose meaning is unambiguous:

* ``X.initialize_carry(rng, batch_dims, size[, init_fn])`` for ``X`` a Flax ``LSTMCell``,
  ``OptimizedLSTMCell`` or ``GRUCell`` becomes
  ``X(features=size[, carry_init=init_fn], parent=None).initialize_carry(rng, batch_dims + (1,))``.
  ``parent=None`` matters when the call runs inside a ``@nn.compact`` method (as a static
  ``initialize_carry`` called from ``__call__`` does): without it linen would make the new cell
  a child of the enclosing module, where it takes an auto-name such as ``LSTMCell_0`` and
  shifts the auto-names of the cells built after it, so an old checkpoint would no longer
  match. Outside a module it changes nothing.
  The trailing ``1`` stands for the input feature count, which the current API wants in the
  input shape but which the carry of these three cells does not depend on, so any positive
  number gives the same carry; the fixer writes a comment saying so above the statement.
  The keys are used as before: the LSTMs split ``rng`` into one key for ``c`` and one for
  ``h``, in 0.6.11 and now, and the GRU uses it whole, in both. ``init_fn`` is carried over
  only when it is a ``flax``/``jax`` initializer, because the current API calls it as
  ``carry_init(key, shape, dtype)``, with one argument more than 0.6 did.
* ``RNN(Cell(), cell_size=n)`` becomes ``RNN(Cell(features=n))`` for the three cells above,
  and ``cell_size`` is dropped when the cell already has a matching ``features`` (when both are
  int literals that differ, the finding says so and the fixer does not choose between them).

It does not fix ``ConvLSTMCell.initialize_carry``, because the current call needs the cell's
``kernel_size`` and takes the carry's signal dims from the input, neither of which the old
call shows (so a wrong ``size`` that 0.6 accepted, as in FLIP 3099, surfaces here), nor a
cell whose width is not written in the same call, nor ``rnnlib.legacy`` code (the old API on
purpose; its suggestions name rnnlib's own cells, such as ``rnnlib.LSTMCell``), nor the
``nn.scan`` wrapper (a structural change). Every finding it leaves has a reason. The fixer never touches a file it cannot parse, leaves every byte outside the edited
spans as it was, re-parses its result before writing, and in a notebook edits only code
cells and writes the JSON back in the layout it was read in (a notebook whose layout it
cannot reproduce byte for byte is left alone, with that reason).

Exit status: ``0`` nothing found (or, with ``--fix``, everything fixed), ``1`` findings
remain, ``2`` some input could not be read or parsed (a missing path, a syntax error, a
notebook that is not valid JSON); it is reported and the other files are still scanned.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import io
import json
import os
import re
import shutil
import sys
import tokenize

# 0.6-era cells that took no `features`; their carry does not depend on the input features.
_FEATURELESS_CELLS = frozenset({"LSTMCell", "OptimizedLSTMCell", "GRUCell"})
# ConvLSTM was spelled `ConvLSTM` in early linen releases and `ConvLSTMCell` later.
_CONV_CELLS = frozenset({"ConvLSTMCell", "ConvLSTM"})
_FAMILIES = (
    ("flax.linen.recurrent.", "flax"),
    ("flax.linen.", "flax"),
    ("rnnlib.legacy.", "legacy"),
)
_SCANS = frozenset({"flax.linen.scan", "flax.linen.transforms.scan"})
# Names a star import (`from flax.linen import *`) is trusted to provide.
_STAR_NAMES = _FEATURELESS_CELLS | _CONV_CELLS | {"RNN", "scan"}
_INITIALIZER_MODULES = ("flax.linen.initializers.", "jax.nn.initializers.")
# What `nn`, `linen` and `legacy` mean in a file that never binds them.
_CONVENTIONAL = {
    "nn": "flax.linen",
    "linen": "flax.linen",
    "legacy": "rnnlib.legacy",
    "flax": "flax",
    "rnnlib": "rnnlib",
    "jax": "jax",
    "functools": "functools",
}
_SKIP_DIRS = frozenset({"__pycache__", "site-packages", "node_modules", "venv"})
_LEGACY_REASON = (
    "rnnlib.legacy is the old API on purpose; move this code to the current API "
    "(flax.linen or rnnlib) by hand"
)
_PLACEHOLDER_COMMENT = (
    "# rnnlib.migrate: the last 1 in input_shape stands for the input features; "
    "the carry ignores it."
)
_CELL_ERR = "code cell could not be parsed"
# Why the rewrite builds a linen cell with parent=None (said once in every such suggestion).
_PARENT_NONE_WHY = (
    "parent=None keeps the new cell from becoming a submodule of an enclosing compact "
    "module, where its auto-name would shift later cells' parameter names"
)


@dataclasses.dataclass
class Finding:
    """One use of the old API: where it is, what it is, and how to write it now."""

    path: str
    cell: int | None
    line: int
    col: int
    code: str
    message: str
    suggestion: str
    fixable: bool
    reason: str | None = None
    fixed: bool = False
    # Private: (start, end, replacement) character spans in the file or cell text.
    edits: list = dataclasses.field(default_factory=list, repr=False)
    partner: Finding | None = dataclasses.field(default=None, repr=False)

    def location(self) -> str:
        cell = f"cell{self.cell}:" if self.cell is not None else ""
        return f"{self.path}:{cell}{self.line}:{self.col}"

    def as_json(self) -> dict:
        names = ("path", "cell", "line", "col", "code", "message", "suggestion", "fixable")
        out = {name: getattr(self, name) for name in names}
        out["reason"] = self.reason
        out["fixed"] = self.fixed
        return out


@dataclasses.dataclass
class Error:
    """An input that could not be read or parsed."""

    path: str
    message: str
    cell: int | None = None
    line: int | None = None
    col: int | None = None

    def location(self) -> str:
        parts = [self.path]
        if self.cell is not None:
            parts.append(f"cell{self.cell}")
        if self.line is not None:
            parts.append(str(self.line))
            if self.col is not None:
                parts.append(str(self.col))
        return ":".join(parts)

    def as_json(self) -> dict:
        return dataclasses.asdict(self)


# --------------------------------------------------------------------------- source text


class _Source:
    """Text of one file or notebook cell, with ast positions mapped to string offsets."""

    def __init__(self, text: str, parse_text: str | None = None):
        self.text = text
        self.parse_text = text if parse_text is None else parse_text
        self.line_starts = [0]
        for match in re.finditer(r"\r\n|\r|\n", text):
            self.line_starts.append(match.end())

    def offset(self, lineno: int, col_bytes: int) -> int:
        start = self.line_starts[lineno - 1]
        end = self.line_starts[lineno] if lineno < len(self.line_starts) else len(self.text)
        line = self.text[start:end]
        return start + len(line.encode("utf-8")[:col_bytes].decode("utf-8", "replace"))

    def start(self, node) -> int:
        return self.offset(node.lineno, node.col_offset)

    def end(self, node) -> int:
        return self.offset(node.end_lineno, node.end_col_offset)

    def segment(self, node) -> str:
        return self.text[self.start(node) : self.end(node)]

    def column(self, node) -> int:
        return self.start(node) - self.line_starts[node.lineno - 1] + 1

    def line_start_of(self, offset: int) -> int:
        return max(s for s in self.line_starts if s <= offset)


def _has_comment(text: str) -> bool:
    """True when `text` holds a comment token, or cannot be tokenized at all."""
    try:
        tokens = tokenize.generate_tokens(io.StringIO(text).readline)
        return any(tok.type == tokenize.COMMENT for tok in tokens)
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return True


# --------------------------------------------------------------------------- names


class _Names:
    """What the names of one file (or all cells of one notebook) refer to."""

    def __init__(self, trees):
        self.bound: dict[str, str] = {}
        self.local: set[str] = set()
        self.star: list[str] = []
        self.scanned: dict[str, tuple[str, str]] = {}
        # The `nn.scan(...)` call each name in `scanned` was bound to (for its in_axes).
        self.scan_calls: dict[str, ast.Call] = {}
        for tree in trees:
            for node in ast.walk(tree):
                self._bind(node)
        for tree in trees:
            for node in ast.walk(tree):
                self._bind_scan(node)

    def _bind(self, node):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    self.bound[alias.asname] = alias.name
                else:
                    root = alias.name.split(".")[0]
                    self.bound[root] = root
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if alias.name == "*":
                    self.star.append(node.module)
                else:
                    self.bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            self.local.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            self.local.add(node.id)
        elif isinstance(node, ast.arg):
            self.local.add(node.arg)

    def _bind_scan(self, node):
        if not isinstance(node, ast.Assign):
            return
        targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
        if isinstance(node.value, ast.Call):
            cell = self.scanned_cell(node.value)
            for target in targets if cell else ():
                self.scanned[target] = cell
                self.scan_calls[target] = node.value
        elif self.cell_class(node.value):  # an alias such as `Cell = nn.LSTMCell`
            for target in targets:
                self.bound[target] = self.qualname(node.value)

    def qualname(self, node) -> str | None:
        if isinstance(node, ast.Name):
            if node.id in self.bound:
                return self.bound[node.id]
            if node.id in self.local:
                return None
            if node.id in _CONVENTIONAL:
                return _CONVENTIONAL[node.id]
            for module in self.star:
                found = _family(f"{module}.{node.id}")
                if found and found[1] in _STAR_NAMES:
                    return f"{module}.{node.id}"
            return None
        if isinstance(node, ast.Attribute):
            base = self.qualname(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def cell_class(self, node) -> tuple[str, str] | None:
        """(family, class name) when `node` names a recurrent cell class."""
        found = _family(self.qualname(node))
        if found and found[1] in _FEATURELESS_CELLS | _CONV_CELLS:
            return found
        return None

    def scanned_cell(self, call: ast.Call) -> tuple[str, str] | None:
        """The cell that `nn.scan(Cell, ...)` lifts, when `call` is such a call."""
        if self.qualname(call.func) in _SCANS and call.args:
            return self.cell_class(call.args[0])
        return None

    def is_rnn(self, node) -> str | None:
        found = _family(self.qualname(node))
        return found[0] if found and found[1] == "RNN" else None


def _current_name(name: str) -> str:
    """The current API's name for cell class `name`: Flax 0.6's `ConvLSTM` is `ConvLSTMCell`."""
    return "ConvLSTMCell" if name == "ConvLSTM" else name


def _family(qualname: str | None) -> tuple[str, str] | None:
    if not qualname:
        return None
    for prefix, family in _FAMILIES:
        rest = qualname[len(prefix) :]
        if qualname.startswith(prefix) and rest.isidentifier():
            return family, rest
    return None


# --------------------------------------------------------------------------- edits


def _open_paren(src: _Source, call: ast.Call) -> int | None:
    """Offset of the `(` that opens the argument list of `call`."""
    pos = src.end(call.func)
    text = src.text
    while pos < len(text) and text[pos] in " \t\r\n\\":
        pos += 1
    return pos if pos < len(text) and text[pos] == "(" else None


def _arg_spans(src: _Source, call: ast.Call) -> list[tuple[int, int, object]] | None:
    """(start, end, node) of every argument of `call` in source order, parentheses included."""
    lo = _open_paren(src, call)
    if lo is None:
        return None
    lo += 1
    hi = src.end(call) - 1
    spans = []
    for node in list(call.args) + list(call.keywords):
        start, end = src.start(node), src.end(node)
        if isinstance(node, ast.keyword) or isinstance(node, ast.Starred):
            spans.append((start, end, node))
            continue
        while True:  # widen over parentheses that wrap the argument itself
            left = src.text[lo:start].rstrip()
            right_text = src.text[end:hi]
            right = right_text.lstrip()
            if left.endswith("(") and right.startswith(")"):
                start = lo + len(left) - 1
                end = end + (len(right_text) - len(right)) + 1
            else:
                break
        spans.append((start, end, node))
    spans.sort(key=lambda span: span[0])
    return spans


def _removal_edits(src: _Source, call: ast.Call, remove: list) -> list | None:
    """Edits deleting the arguments `remove` from `call`, with their commas; None if unsafe."""
    spans = _arg_spans(src, call)
    if spans is None:
        return None
    gone = [any(node is r for r in remove) for _, _, node in spans]
    edits = []
    i = 0
    while i < len(spans):
        if not gone[i]:
            i += 1
            continue
        j = i
        while j + 1 < len(spans) and gone[j + 1]:
            j += 1
        if i > 0:
            start, end = spans[i - 1][1], spans[j][1]
        elif j + 1 < len(spans):
            start, end = spans[i][0], spans[j + 1][0]
        else:
            start, end = spans[i][0], spans[j][1]
        gaps = [
            src.text[spans[k][1] : spans[k + 1][0]]
            for k in range(max(i - 1, 0), j + 1)
            if k + 1 < len(spans)
        ]
        if any("#" in gap or "\\" in gap for gap in gaps):
            return None
        edits.append((start, end, ""))
        i = j + 1
    return edits


def _comment_edit(src: _Source, stmt) -> tuple[int, int, str] | None:
    """An edit putting the placeholder comment on its own line above `stmt`, when safe."""
    begin = src.line_start_of(src.start(stmt))
    indent = src.text[begin : src.start(stmt)]
    if indent.strip():
        return None
    if begin > 0 and src.text[:begin].rstrip("\r\n").endswith("\\"):
        return None
    newline = re.search(r"\r\n|\r|\n", src.text[begin:])
    newline = newline.group(0) if newline else "\n"
    return begin, begin, f"{indent}{_PLACEHOLDER_COMMENT}{newline}"


# --------------------------------------------------------------------------- the checks


def _is_int_like(node) -> bool:
    if isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict, ast.JoinedStr, ast.Lambda)):
        return False
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int) and not isinstance(node.value, bool)
    return True


def _int_literal(node) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int)
        and not isinstance(node.value, bool)
    )


def _same(a, b) -> bool:
    return a is not None and b is not None and ast.dump(a) == ast.dump(b)


def _keyword(call: ast.Call, name: str):
    for kw in call.keywords:
        if kw.arg == name:
            return kw
    return None


def _has_star(call: ast.Call) -> bool:
    return any(isinstance(a, ast.Starred) for a in call.args) or any(
        kw.arg is None for kw in call.keywords
    )


def _with_placeholder(src: _Source, node, placeholder: str) -> str:
    """Source of `batch_dims + (placeholder,)`, folded into a tuple literal where there is one."""
    text = src.segment(node)
    if isinstance(node, ast.Tuple) and text.startswith("(") and text.endswith(")"):
        inner = text[1:-1].rstrip()
        if not inner:
            return f"({placeholder},)"
        return f"({inner} {placeholder})" if inner.endswith(",") else f"({inner}, {placeholder})"
    if not isinstance(node, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)) and not (
        isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)
    ):
        text = f"({text})"
    return f"{text} + ({placeholder},)"


class _Checker:
    def __init__(self, path: str, cell: int | None, src: _Source, tree, names: _Names):
        self.path, self.cell, self.src, self.tree, self.names = path, cell, src, tree, names
        self.findings: list[Finding] = []
        self.parents: dict[int, object] = {}
        for parent in ast.walk(tree):
            for child in ast.iter_child_nodes(parent):
                self.parents[id(child)] = parent

    def run(self) -> list[Finding]:
        rnn_findings = {}
        calls = [n for n in ast.walk(self.tree) if isinstance(n, ast.Call)]
        for call in calls:
            if self.names.is_rnn(call.func):
                finding = self._rnn(call)
                if finding:
                    rnn_findings[id(call)] = finding
        for call in calls:
            func = call.func
            if isinstance(func, ast.Attribute) and func.attr == "initialize_carry":
                self._static_initialize_carry(call)
            self._featureless(call, rnn_findings)
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ClassDef):
                self._scan_idiom(node)
        self.findings.sort(key=lambda f: (f.line, f.col, f.code))
        return self.findings

    def _add(self, node, code, message, suggestion, *, edits=None, reason=None) -> Finding:
        finding = Finding(
            self.path,
            self.cell,
            node.lineno,
            self.src.column(node),
            code,
            message,
            suggestion,
            fixable=reason is None,
            reason=reason,
            edits=edits or [],
        )
        self.findings.append(finding)
        return finding

    def _statement(self, node):
        while not isinstance(node, ast.stmt):
            node = self.parents[id(node)]
        return node

    # MIG001 ---------------------------------------------------------------------------
    def _static_initialize_carry(self, call: ast.Call):
        owner = call.func.value
        cell = self.names.cell_class(owner)
        scanned = None
        if cell is None and isinstance(owner, ast.Name) and owner.id in self.names.scanned:
            scanned = self.names.scanned[owner.id]
        if cell is None and scanned is None:
            return
        family, name = cell or scanned
        spelled = self.src.segment(owner)
        new_name = _current_name(name)
        new_spelled = spelled
        if family == "legacy":
            # A legacy class takes no features: the new call is on rnnlib's own cell, the
            # one that computes for it (and, not being linen, it has no parent to set).
            new_spelled = f"rnnlib.{new_name}"
        elif scanned:
            new_spelled = name
        elif spelled.endswith(name):
            new_spelled = spelled[: len(spelled) - len(name)] + new_name
        message = (
            f"{spelled}.initialize_carry(...) is called on the class (Flax 0.6 API); the current "
            f"API builds the carry from a configured cell and the shape of one input step"
        )
        args = self._old_args(call)
        if args is None or "size" not in args or "batch_dims" not in args:
            return self._add(
                call,
                "MIG001",
                message,
                f"{new_spelled}(features=<features>).initialize_carry(rng, <input shape>)",
                reason="the call does not have the old (rng, batch_dims, size) arguments",
            )
        rng, batch, size, init = (args.get(k) for k in ("rng", "batch_dims", "size", "init_fn"))
        seg = self.src.segment
        rng_src = seg(rng) if rng is not None else "rng"
        init_part = f", carry_init={seg(init)}" if init is not None else ""
        if name in _CONV_CELLS:
            return self._conv_suggestion(
                call, message, new_spelled, rng_src, batch, size, init_part, family
            )
        parent_part = ", parent=None" if family == "flax" else ""
        # Only Flax cells are ever rewritten, so only their suggestion says what --fix writes.
        fix_note = f"; --fix writes 1; {_PARENT_NONE_WHY}" if family == "flax" else ""
        suggestion = (
            f"{new_spelled}(features={seg(size)}{init_part}{parent_part}).initialize_carry("
            f"{rng_src}, {_with_placeholder(self.src, batch, '<input features>')})"
            f"  # any positive <input features> gives the same carry, since the carry of "
            f"{new_name} does not depend on it{fix_note}"
        )
        reason = None
        if family == "legacy":
            reason = _LEGACY_REASON
        elif scanned:
            reason = (
                f"{spelled} is an nn.scan of {name}; build the carry from the cell itself, "
                f"{name}(features=...).initialize_carry(...)"
            )
        elif not _is_int_like(size):
            reason = f"size {seg(size)} is not an int, which {name} needs"
        elif init is not None and not self._known_initializer(init):
            reason = (
                f"init_fn {seg(init)} becomes carry_init, which the current API calls as "
                f"(key, shape, dtype); check that it accepts dtype, then edit by hand"
            )
        elif _has_comment(seg(batch)):
            reason = "batch_dims contains a comment, which an automatic edit could misplace"
        edits = None
        if reason is None:
            edits = self._static_edits(call, owner, args, size, init, batch)
            if edits is None:
                reason = "the arguments are laid out in a way the fixer does not rewrite"
        return self._add(call, "MIG001", message, suggestion, edits=edits, reason=reason)

    def _old_args(self, call: ast.Call) -> dict | None:
        if _has_star(call):
            return None
        names = ("rng", "batch_dims", "size", "init_fn")
        if len(call.args) > len(names):
            return None
        args = dict(zip(names, call.args))
        for kw in call.keywords:
            if kw.arg not in names or kw.arg in args:
                return None
            args[kw.arg] = kw.value
        return args

    def _known_initializer(self, node) -> bool:
        target = node.func if isinstance(node, ast.Call) else node
        qual = self.names.qualname(target) or ""
        return qual.startswith(_INITIALIZER_MODULES)

    def _static_edits(self, call, owner, args, size, init, batch):
        seg = self.src.segment
        features = f"(features={seg(size)}"
        if init is not None:
            features += f", carry_init={seg(init)}"
        features += ", parent=None)"  # only Flax cells get here; see _PARENT_NONE_WHY
        edits = [(self.src.end(owner), self.src.end(owner), features)]
        batch_kw = _keyword(call, "batch_dims")
        shape = _with_placeholder(self.src, batch, "1")
        if batch_kw is not None:
            edits.append((self.src.start(batch_kw), self.src.end(batch_kw), f"input_shape={shape}"))
        else:
            spans = _arg_spans(self.src, call)
            if spans is None:
                return None
            start, end = next((s, e) for s, e, node in spans if node is batch)
            edits.append((start, end, shape))
        remove = [_keyword(call, "size") or size]
        if init is not None:
            remove.append(_keyword(call, "init_fn") or init)
        removals = _removal_edits(self.src, call, remove)
        if removals is None:
            return None
        comment = _comment_edit(self.src, self._statement(call))
        return edits + removals + ([comment] if comment else [])

    def _conv_suggestion(self, call, message, spelled, rng_src, batch, size, init_part, family):
        seg = self.src.segment
        if isinstance(size, ast.Tuple) and size.elts:
            features = seg(size.elts[-1])
            signal = ", ".join(seg(e) for e in size.elts[:-1])
            kernel = ", ".join("<k>" for _ in size.elts[:-1])
            kernel = f"({kernel},)" if len(size.elts) == 2 else f"({kernel})"
            if isinstance(batch, ast.Tuple):
                dims = ", ".join([seg(e) for e in batch.elts] + ([signal] if signal else []))
                shape = f"({dims}, <input channels>)"
            else:
                shape = f"{seg(batch)} + ({signal}, <input channels>)"
        else:
            features, kernel = f"{seg(size)}[-1]", "<kernel_size>"
            shape = f"{seg(batch)} + {seg(size)}[:-1] + (<input channels>,)"
        parent_part = ", parent=None" if family == "flax" else ""
        why = f"  # {_PARENT_NONE_WHY}" if parent_part else ""
        suggestion = (
            f"{spelled}(features={features}, kernel_size={kernel}{init_part}{parent_part})"
            f".initialize_carry({rng_src}, {shape}){why}"
        )
        return self._add(
            call,
            "MIG001",
            message,
            suggestion,
            reason=(
                "a ConvLSTM carry now takes its signal dims from the input shape and needs the "
                "cell's kernel_size, which this call does not show; check both against the "
                "inputs the cell sees (FLIP 3099)"
            ),
        )

    # MIG002 ---------------------------------------------------------------------------
    def _rnn(self, call: ast.Call) -> Finding | None:
        size_kw = _keyword(call, "cell_size")
        if size_kw is not None:
            size, size_node = size_kw.value, size_kw
        elif len(call.args) >= 2 and not isinstance(call.args[1], ast.Starred):
            size = size_node = call.args[1]
        else:
            return None
        cell = call.args[0] if call.args else getattr(_keyword(call, "cell"), "value", None)
        seg = self.src.segment
        family = self.names.is_rnn(call.func)
        message = (
            "RNN(..., cell_size=...) is the Flax 0.6 signature; the current RNN takes the carry "
            "size from the cell's features"
        )
        if size_kw is None:
            message += " (and reads a second positional argument as time_major)"
        cell_call = cell if isinstance(cell, ast.Call) else None
        cell_info = self.names.cell_class(cell_call.func) if cell_call else None
        featureless = (
            cell_info and cell_info[1] in _FEATURELESS_CELLS and _lacks_features(cell_call)
        )
        if cell_call is not None and cell_info:
            cell_text = self._cell_with_features(cell_call, seg(size), featureless)
        else:
            cell_text = "<cell with features=...>"
        rnn_text = self._current_spelling(call.func)
        suggestion = f"{rnn_text}({cell_text}, ...)  # without cell_size"
        reason = None
        insert = []
        legacy_cell = bool(cell_info) and cell_info[0] == "legacy"
        if family == "legacy":
            reason = _LEGACY_REASON
        elif legacy_cell:
            # A legacy cell takes no features, so the fixer cannot give it the width; the
            # suggestion builds rnnlib's current cell instead.
            reason = (
                f"the cell is rnnlib.legacy's {cell_info[1]}, which takes no features; build "
                f"the current cell with features={seg(size)} and drop cell_size"
            )
        elif _has_star(call):
            reason = "the call unpacks *args or **kwargs"
        elif size_kw is None and len(call.args) > 2:
            reason = "positional arguments after cell_size would change meaning"
        elif cell_call is None or cell_info is None:
            reason = (
                "the cell is built elsewhere; give it features where it is built, then drop "
                "cell_size"
            )
        elif featureless:
            if not _is_int_like(size):
                reason = f"cell_size {seg(size)} is not an int, which {cell_info[1]} needs"
            else:
                paren = _open_paren(self.src, cell_call)
                if paren is None:
                    reason = "the cell call is laid out in a way the fixer does not rewrite"
                else:
                    more = ", " if cell_call.keywords else ""
                    insert = [(paren + 1, paren + 1, f"features={seg(size)}{more}")]
        else:
            features = _features_of(cell_call)
            last = size.elts[-1] if isinstance(size, ast.Tuple) and size.elts else size
            if _int_literal(features) and _int_literal(last) and features.value != last.value:
                said = f"is {last.value}" if last is size else f"{seg(size)} ends in {last.value}"
                reason = (
                    f"cell_size {said}, but the cell's features is {features.value}; "
                    f"the fixer will not choose between them: set features to the width you "
                    f"mean, then drop cell_size"
                )
            elif not _same(features, last):
                reason = (
                    "cannot tell that cell_size agrees with the cell's features; drop cell_size "
                    "once they agree"
                )
        removal = _removal_edits(self.src, call, [size_node])
        edits = None
        if removal is None:
            reason = reason or "a comment sits next to cell_size; drop it by hand"
        else:
            if cell_call is not None and cell_info and featureless and not insert:
                paren = _open_paren(self.src, cell_call)
                if paren is not None:
                    more = ", " if cell_call.keywords else ""
                    # Legacy code is never fixed, but its cell_size is still the width.
                    legacy = family == "legacy" or legacy_cell
                    known = reason is None or (legacy and _is_int_like(size))
                    hint = seg(size) if known else "<hidden size>"
                    insert = [(paren + 1, paren + 1, f"features={hint}{more}")]
            # Legacy classes take no features: the suggestion names rnnlib's own classes,
            # as MIG001's does. These renames are shown only; the fixer never edits legacy code.
            renames = [
                (self.src.start(func), self.src.end(func), self._current_spelling(func))
                for func in (call.func, cell_call.func if cell_info else None)
                if func is not None and self._current_spelling(func) != seg(func)
            ]
            suggestion = _one_line(
                _apply(
                    self.src.text,
                    renames + insert + removal,
                    self.src.start(call),
                    self.src.end(call),
                )
            )
            if cell_call is None or cell_info is None:
                built = "an rnnlib cell built" if family == "legacy" else "the cell built"
                suggestion += f"  # with {built} with features={seg(size)}"
            if reason is None:
                edits = insert + removal
        return self._add(call, "MIG002", message, suggestion, edits=edits, reason=reason)

    def _current_spelling(self, func) -> str:
        """How the current API spells the class `func` names: rnnlib's own for a legacy one."""
        found = _family(self.names.qualname(func))
        if found and found[0] == "legacy":
            return f"rnnlib.{_current_name(found[1])}"
        return self.src.segment(func)

    def _cell_with_features(self, cell_call, size_src, featureless) -> str:
        text = self.src.segment(cell_call)
        if not featureless:
            return text
        func = self._current_spelling(cell_call.func)
        rest = ", ".join(self.src.segment(kw) for kw in cell_call.keywords)
        return f"{func}(features={size_src}{', ' + rest if rest else ''})"

    # MIG003 ---------------------------------------------------------------------------
    def _featureless(self, call: ast.Call, rnn_findings):
        info = self.names.cell_class(call.func)
        scanned = None
        if info is None and isinstance(call.func, ast.Name):
            scanned = self.names.scanned.get(call.func.id)
        if info is None and scanned is None:
            return
        family, name = info or scanned
        if name not in _FEATURELESS_CELLS or not _lacks_features(call) or _has_star(call):
            return
        spelled = self.src.segment(call.func)
        message = (
            f"{spelled}() is built without features (Flax 0.6 API); the current API requires "
            f"features, the width of the carry and of the output"
        )
        parent = self.parents.get(id(call))
        partner = None
        if isinstance(parent, ast.keyword) and parent.arg == "cell":
            parent = self.parents.get(id(parent))
        if isinstance(parent, ast.Call) and id(parent) in rnn_findings:
            rnn = rnn_findings[id(parent)]
            if _cell_arg(parent) is call:
                partner = rnn
        size = None
        if partner is not None:
            size = _keyword(parent, "cell_size")
            size = size.value if size is not None else parent.args[1]
        if partner is not None and partner.fixable:
            finding = self._add(
                call,
                "MIG003",
                message,
                self._cell_with_features(call, self.src.segment(size), True)
                + f"  # fixed together with the RNN at line {partner.line}",
            )
            finding.partner = partner
            return
        if partner is not None:
            reason = f"the RNN at line {partner.line} is not fixable: {partner.reason}"
        elif family == "legacy":
            reason = _LEGACY_REASON
        elif scanned:
            reason = f"the width of the scanned {name} is not written here"
        else:
            reason = "the width of the carry is not written in this call"
        # The RNN's cell_size, when it is there and could be an int, is the width to give.
        hint = self.src.segment(size) if size is not None and _is_int_like(size) else None
        self._add(
            call,
            "MIG003",
            message,
            self._cell_with_features(call, hint or "<hidden size>", True),
            reason=reason,
        )

    # MIG004 ---------------------------------------------------------------------------
    def _scan_idiom(self, cls: ast.ClassDef):
        carry_def = None
        for stmt in cls.body:
            if isinstance(stmt, ast.FunctionDef) and stmt.name == "initialize_carry":
                decorators = {
                    self.names.qualname(d) or getattr(d, "id", "") for d in stmt.decorator_list
                }
                if decorators & {"staticmethod", "classmethod"}:
                    carry_def = stmt
        if carry_def is None:
            return
        scan = self._find_scan(cls)
        if scan is None:
            return
        cell_name, scan_node, in_axes = scan
        # nn.scan's in_axes defaults to 0: it scans over the leading axis, which nn.RNN calls
        # time_major. One input step is x[0] then, and x[:, 0] when time is axis 1.
        axis = in_axes.value if isinstance(in_axes, ast.Constant) else None
        axis = 0 if in_axes is None else axis
        if axis == 0:
            time_major, step = ", time_major=True", "x[0]"
        elif axis == 1:
            time_major, step = "", "x[:, 0]"
        else:
            time_major = ", time_major=<True if time is axis 0>"
            step = "<x[0] if time is axis 0, x[:, 0] if axis 1>"
        message = (
            f"class {cls.name} scans {cell_name} over time with nn.scan (line {scan_node.lineno}) "
            f"and builds its carry in a class-level initialize_carry (line {carry_def.lineno}), "
            f"the Flax 0.6 idiom"
        )
        # Only the carry's cell gets parent=None, as the MIG001 fix writes it: the cell that
        # nn.RNN scans must stay a submodule, since its parameters live there.
        suggestion = (
            f"nn.RNN(nn.{cell_name}(features=<hidden size>){time_major}) scans the cell and "
            f"builds the carry itself; where a carry is needed, call "
            f"nn.{cell_name}(features=<hidden size>, parent=None)"
            f".initialize_carry(key, {step}.shape) on a configured cell; {_PARENT_NONE_WHY}"
        )
        self._add(
            cls,
            "MIG004",
            message,
            suggestion,
            reason="replacing the scan wrapper with nn.RNN changes the module's "
            "structure and its parameter names; do it by hand",
        )

    def _find_scan(self, cls: ast.ClassDef):
        for node in ast.walk(cls):
            if isinstance(node, ast.Call):
                cell = self.names.scanned_cell(node)
                if cell:
                    return cell[1], node, _in_axes(node, 5)
            if isinstance(node, ast.Name) and node.id in self.names.scanned:
                call = self.names.scan_calls[node.id]
                return self.names.scanned[node.id][1], node, _in_axes(call, 5)
            if isinstance(node, ast.FunctionDef):
                for dec in node.decorator_list:
                    if not isinstance(dec, ast.Call):
                        continue
                    is_partial = self.names.qualname(dec.func) == "functools.partial"
                    target = dec.args[0] if is_partial and dec.args else dec.func
                    if self.names.qualname(target) not in _SCANS:
                        continue
                    for inner in ast.walk(node):
                        if isinstance(inner, ast.Call):
                            cell = self.names.cell_class(inner.func)
                            if cell:
                                return cell[1], dec, _in_axes(dec, 6 if is_partial else 5)
        return None


def _in_axes(call: ast.Call, position: int):
    """The node `call` passes as nn.scan's in_axes (at `position` when positional); None when
    it is left at nn.scan's default, 0. Unpacked **kwargs give a node that is not a constant."""
    kw = _keyword(call, "in_axes")
    if kw is not None:
        return kw.value
    if len(call.args) > position and not _has_star(call):
        return call.args[position]
    unpacked = [kw.value for kw in call.keywords if kw.arg is None]
    unpacked += [a for a in call.args if isinstance(a, ast.Starred)]
    return unpacked[0] if unpacked else None


def _lacks_features(call: ast.Call) -> bool:
    return not call.args and _keyword(call, "features") is None


def _features_of(call: ast.Call):
    kw = _keyword(call, "features")
    if kw is not None:
        return kw.value
    return call.args[0] if call.args else None


def _cell_arg(rnn: ast.Call):
    if rnn.args:
        return rnn.args[0]
    kw = _keyword(rnn, "cell")
    return kw.value if kw is not None else None


def _one_line(text: str) -> str:
    """`text` with its line breaks and the indentation after them folded into single spaces."""
    text = re.sub(r"\s*(\r\n|\r|\n)\s*", " ", text)
    return re.sub(r" ([)\]}])", r"\1", re.sub(r"([(\[{]) ", r"\1", text))


def _apply(text: str, edits, lo: int = 0, hi: int | None = None) -> str:
    """`text[lo:hi]` with the edits that fall inside it applied."""
    hi = len(text) if hi is None else hi
    out, pos = [], lo
    for start, end, new in sorted(e for e in edits if lo <= e[0] and e[1] <= hi):
        out.append(text[pos:start])
        out.append(new)
        pos = end
    out.append(text[pos:hi])
    return "".join(out)


# --------------------------------------------------------------------------- reading files


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


def _check(path: str, doc: dict) -> list[Finding]:
    names = _Names([unit.tree for unit in doc["units"]])
    findings = []
    for unit in doc["units"]:
        findings += _Checker(path, unit.cell, unit.src, unit.tree, names).run()
    return findings


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


# --------------------------------------------------------------------------- fixing


def _json_style(text: str, data):
    """json.dumps options (and trailing text) that reproduce `text` exactly, or None."""
    for indent in (1, 2, 4, None):
        for sort_keys in (True, False):
            for ensure_ascii in (False, True):
                style = {"indent": indent, "sort_keys": sort_keys, "ensure_ascii": ensure_ascii}
                dumped = json.dumps(data, **style)
                for tail in ("\n", ""):
                    if dumped + tail == text:
                        return style, tail
    return None


def _fix_unit(
    unit: _Unit, findings: list[Finding], names: _Names, path: str, errors: list
) -> str | None:
    """The unit's new text with every fixable finding applied, or None when nothing changed."""
    taken = []
    for finding in findings:
        if not finding.fixable or not finding.edits:
            continue
        new = [edit for edit in finding.edits if edit not in taken]  # a shared comment once
        if any(a[0] < b[1] and b[0] < a[1] for a in new for b in taken):
            finding.fixable = False
            finding.reason = "its edit overlaps another fix; run --fix again"
            continue
        taken += new
        finding.fixed = True
    for finding in findings:
        if finding.partner is not None:
            finding.fixed = finding.partner.fixed
            if not finding.fixed:
                finding.fixable, finding.reason = False, finding.partner.reason
    if not taken:
        return None
    new_text = _apply(unit.src.text, taken)
    # Re-parse and re-check the result before anything is written: what is left must be
    # exactly the findings that were not fixed.
    parse_text = new_text if unit.src.parse_text == unit.src.text else _mask_magics(new_text)
    left = sum(1 for f in findings if not f.fixed)
    try:
        tree = _parse(parse_text)
        again = _Checker(path, unit.cell, _Source(new_text, parse_text), tree, names).run()
        ok = len(again) == left
    except (SyntaxError, ValueError, TypeError):
        ok = False
    if not ok:
        for finding in findings:
            if finding.fixed:
                finding.fixed, finding.fixable = False, False
                finding.reason = "the rewritten code did not check out; left untouched"
        errors.append(
            Error(path, "internal check of the rewrite failed; file left untouched", unit.cell)
        )
        return None
    return new_text


def _write(path: str, data: bytes):
    tmp = f"{path}.rnnlib-migrate.tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
    shutil.copymode(path, tmp)
    os.replace(tmp, path)


def _fix_file(path: str, doc: dict, findings: list[Finding], errors: list) -> bool:
    """Rewrite `path` in place; True when the file changed."""
    if doc["kind"] == "ipynb" and doc.get("failed"):
        for finding in findings:
            finding.fixable, finding.reason = False, "another cell of this notebook does not parse"
        return False
    style = None
    if doc["kind"] == "ipynb":
        style = _json_style(doc["text"], doc["data"])
        if style is None:
            for finding in findings:
                if finding.fixable:
                    finding.fixable = False
                    finding.reason = (
                        "the notebook's JSON layout cannot be reproduced byte for "
                        "byte; fix it by hand or re-save it with Jupyter first"
                    )
            return False
    new_texts = {}
    names = _Names([unit.tree for unit in doc["units"]])
    for unit in doc["units"]:
        mine = [f for f in findings if f.cell == unit.cell]
        new = _fix_unit(unit, mine, names, path, errors)
        if new is not None:
            new_texts[unit.cell] = new
    if not new_texts:
        return False
    if doc["kind"] == "py":
        _write(path, new_texts[None].encode(doc["encoding"]))
        return True
    for index, new in new_texts.items():
        cell = doc["data"]["cells"][index - 1]
        old = cell["source"]
        if isinstance(old, list):
            cell["source"] = new.splitlines(True) if "".join(old).splitlines(True) == old else [new]
        else:
            cell["source"] = new
    options, tail = style
    _write(path, (json.dumps(doc["data"], **options) + tail).encode("utf-8"))
    return True


# --------------------------------------------------------------------------- command line


def _report_text(findings, errors, fixed_files, fix: bool, out, err):
    for finding in findings:
        status = ""
        if fix:
            status = " [fixed]" if finding.fixed else " [not fixed]"
        print(f"{finding.location()}: {finding.code} {finding.message}{status}", file=out)
        print(f"    suggestion: {finding.suggestion}", file=out)
        if not finding.fixed:
            if finding.fixable:
                print("    fix: available with --fix", file=out)
            else:
                print(f"    fix: not automatic: {finding.reason}", file=out)
    for error in errors:
        print(f"{error.location()}: error: {error.message}", file=err)
    files = len({f.path for f in findings})
    summary = f"{len(findings)} finding(s) in {files} file(s)"
    if fix:
        fixed = sum(f.fixed for f in findings)
        summary += f"; fixed {fixed} in {len(fixed_files)} file(s), {len(findings) - fixed} left"
    else:
        summary += f"; {sum(f.fixable for f in findings)} fixable with --fix"
    if errors:
        summary += f"; {len(errors)} input(s) could not be read"
    print(summary, file=out)


def main(argv: list[str] | None = None) -> int:
    """Run the migration checker; returns the exit status (0 clean, 1 findings, 2 errors)."""
    parser = argparse.ArgumentParser(
        prog="python -m rnnlib.migrate",
        description="Find (and with --fix, rewrite) code that uses Flax 0.6's recurrent API.",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help=".py/.ipynb files or folders")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--fix", action="store_true", help="rewrite the unambiguous cases")
    args = parser.parse_args(argv)

    errors: list[Error] = []
    findings: list[Finding] = []
    fixed_files, fully_fixed = [], []
    for path in _iter_files(args.paths, errors):
        if path.endswith(".ipynb"):
            doc = _read_notebook(path, errors)
        else:
            doc = _read_python(path, errors)
        if doc is None:
            continue
        found = _check(path, doc)
        if args.fix and found and _fix_file(path, doc, found, errors):
            fixed_files.append(path)
            if all(f.fixed for f in found):
                fully_fixed.append(path)
        findings += found

    if args.format == "json":
        payload = {
            "findings": [f.as_json() for f in findings],
            "errors": [e.as_json() for e in errors],
            "fixed_files": fixed_files,
            "fully_fixed_files": fully_fixed,
        }
        print(json.dumps(payload, indent=2))
    else:
        _report_text(findings, errors, fixed_files, args.fix, sys.stdout, sys.stderr)
    if errors:
        return 2
    remaining = [f for f in findings if not f.fixed]
    return 1 if remaining else 0


if __name__ == "__main__":
    sys.exit(main())
