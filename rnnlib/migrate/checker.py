"""Runs every rule over one parsed unit (a ``.py`` file or one notebook cell).

The rules live in their own modules (``rule_*.py``) as functions of a :class:`Checker`, the
context they share: the unit's source and tree, each node's parent, what its names refer to
(:mod:`rnnlib.migrate.names`) and what its expressions hold (:mod:`rnnlib.migrate.resolve`).
They run in an order that lets a later rule join its fix to an earlier one: the RNN's
``cell_size`` (MIG002) before the cell it moves into (MIG003), and both before an old
``initialize_carry`` on that cell (MIG007), whose width they settle.
"""

from __future__ import annotations

import ast

from rnnlib.migrate import (
    rule_cell_base,
    rule_cell_size,
    rule_convlstm,
    rule_features,
    rule_instance_carry,
    rule_review,
    rule_scan_wrapper,
    rule_static_carry,
)
from rnnlib.migrate.findings import Finding
from rnnlib.migrate.names import _INITIALIZER_MODULES, _current_name, _family, _Names
from rnnlib.migrate.resolve import Kinds
from rnnlib.migrate.rules import BY_CODE
from rnnlib.migrate.source import _has_star, _Source
from rnnlib.migrate.x64 import x64_state


class Checker:
    def __init__(self, path: str, cell: int | None, src: _Source, tree, names: _Names):
        self.path, self.cell, self.src, self.tree, self.names = path, cell, src, tree, names
        self.findings: list[Finding] = []
        self.parents: dict[int, object] = {}
        for parent in ast.walk(tree):
            for child in ast.iter_child_nodes(parent):
                self.parents[id(child)] = parent
        self.kinds = Kinds(tree, names, self.parents)
        # Findings the later rules join: by id of the nn.RNN call (MIG002) and of the cell
        # constructor call (MIG003).
        self.rnn_findings: dict[int, Finding] = {}
        self.ctor_findings: dict[int, Finding] = {}
        # Whether the file turns on 64-bit floats (rnnlib.migrate.x64), which old carries follow.
        self.x64 = x64_state(names)

    def run(self) -> list[Finding]:
        calls = [n for n in ast.walk(self.tree) if isinstance(n, ast.Call)]
        for call in calls:
            if self.names.is_rnn(call.func):
                finding = rule_cell_size.check(self, call)
                if finding:
                    self.rnn_findings[id(call)] = finding
        for call in calls:
            rule_features.check(self, call)
        self.join_pending()
        for call in calls:
            func = call.func
            if isinstance(func, ast.Attribute) and func.attr == "initialize_carry":
                if not rule_static_carry.check(self, call):
                    rule_instance_carry.check(self, call)
        rule_convlstm.check(self)
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ClassDef):
                rule_scan_wrapper.check(self, node)
                rule_cell_base.check(self, node)
        rule_review.check(self, calls)
        self.findings.sort(key=lambda f: (f.line, f.col, f.code))
        return self.findings

    def join_pending(self):
        """An RNN whose cell is built elsewhere loses cell_size in the same edit that gives
        that cell the same width (MIG002 joined to MIG003)."""
        for finding in list(self.rnn_findings.values()):
            if finding.pending is None:
                continue
            ctor, size, removal = finding.pending
            cell = self.ctor_findings.get(id(ctor))
            if cell is None or not cell.fixable or not isinstance(cell.width, ast.AST):
                continue
            if ast.dump(cell.width) != ast.dump(size):
                continue
            owner = cell.partner if cell.partner is not None else cell
            owner.edits += removal
            finding.fixable, finding.reason, finding.partner = True, None, owner

    # ------------------------------------------------------------------ shared by the rules

    def add(
        self, node, code, message, suggestion, *, edits=None, reason=None, severity=None
    ) -> Finding:
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
            severity=severity or BY_CODE[code].severity,
            edits=edits or [],
        )
        self.findings.append(finding)
        return finding

    def statement(self, node):
        while not isinstance(node, ast.stmt):
            node = self.parents[id(node)]
        return node

    def old_args(self, call: ast.Call) -> dict | None:
        """{rng, batch_dims, size, init_fn: node} of an old-style initialize_carry call."""
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

    def known_initializer(self, node) -> bool:
        target = node.func if isinstance(node, ast.Call) else node
        qual = self.names.qualname(target) or ""
        return qual.startswith(_INITIALIZER_MODULES)

    def current_spelling(self, func) -> str:
        """How the current API spells the class `func` names: rnnlib's own for a legacy one."""
        found = _family(self.names.qualname(func))
        if found and found[0] == "legacy":
            return f"rnnlib.{_current_name(found[1])}"
        return self.src.segment(func)

    def cell_with_features(self, cell_call, size_src, featureless) -> str:
        text = self.src.segment(cell_call)
        if not featureless:
            return text
        func = self.current_spelling(cell_call.func)
        rest = ", ".join(self.src.segment(kw) for kw in cell_call.keywords)
        return f"{func}(features={size_src}{', ' + rest if rest else ''})"
