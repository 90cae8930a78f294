"""MIG008 (review): what the checker cannot prove safe, said with a line and a reason.

A run that ends in status 0 must mean the checker knows of nothing that breaks, so the cases it
cannot settle are reported rather than passed over:

* ``nn.scan(X, ...)`` or ``X()`` where ``X`` is a class it cannot resolve (a field without a
  default, a parameter) whose name or annotation says it is a cell (``cell``, ``lstm``, ``gru``,
  ``rnn``, ``RNNCellBase``): a 0.6-era cell there would need ``features``;
* an ``nn.scan`` of a 0.6-era cell class that is not built where the checker can see it (passed
  on, stored in a container, returned from a function it does not follow): wherever it is built,
  it needs ``features``.

(Old-shaped ``initialize_carry`` calls on objects of unknown type are reported by
:mod:`rnnlib.migrate.rule_instance_carry`.)
"""

from __future__ import annotations

import ast
import re

from rnnlib.migrate.names import _FEATURELESS_CELLS, _SCANS
from rnnlib.migrate.resolve import CLASS, SCAN

_CELLISH = re.compile(r"cell|lstm|gru|rnn", re.IGNORECASE)


def check(ctx, calls):
    for call in calls:
        if ctx.names.qualname(call.func) in _SCANS and call.args:
            target = call.args[0]
            kind = ctx.kinds.kind(call)
            if kind is None and ctx.kinds.kind(target) is None:
                hint = _cellish(ctx, target)
                if hint:
                    _unresolved(ctx, call, target, hint, scanned=True)
            elif kind is not None and kind.tag == SCAN and kind.cell in _FEATURELESS_CELLS:
                if kind.family == "flax" and not _built_here(ctx, call):
                    ctx.add(
                        call,
                        "MIG008",
                        f"this nn.scan of {kind.cell} is built somewhere the checker does not "
                        f"follow; wherever it is built, it needs features (Flax 0.6 cells "
                        f"took none)",
                        "build it as ScannedCell(features=<hidden size>, ...)",
                        reason="the place where the scanned class is built is not in view",
                    )
        elif not call.args and all(kw.arg is None for kw in call.keywords):
            # Built with no arguments, or only from **kwargs, which may or may not hold
            # features.
            unpacked = [ctx.src.segment(kw.value) for kw in call.keywords]
            kind = ctx.kinds.kind(call.func)
            if kind is None:
                owner = ctx.kinds.self_attr(call.func)
                field = owner is not None and owner[1] in ctx.kinds.fields.get(id(owner[0]), ())
                method = owner is not None and owner[1] in ctx.kinds.returns.get(id(owner[0]), {})
                hint = _cellish(ctx, call.func) if field and not method else None
                if hint:
                    _unresolved(ctx, call, call.func, hint, scanned=False, unpacked=unpacked)
            elif unpacked and kind.tag in (CLASS, SCAN) and kind.cell in _FEATURELESS_CELLS:
                if kind.family == "flax":
                    _from_mapping(ctx, call, kind.cell, unpacked)


def _from_mapping(ctx, call, cell, unpacked):
    spelled = ctx.src.segment(call.func)
    mapping = ", ".join(f"**{u}" for u in unpacked)
    ctx.add(
        call,
        "MIG008",
        f"{spelled}({mapping}) builds a {cell} from keyword arguments the checker cannot see; "
        f"the current API requires features, which Flax 0.6 cells took none of",
        f"make sure {mapping} holds features=<hidden size>, or write it: "
        f"{spelled}(features=<hidden size>, {mapping})",
        reason=f"what {mapping} holds is not known here",
    )


def _unresolved(ctx, call, target, hint, scanned, unpacked=()):
    spelled = ctx.src.segment(target)
    args = ", ".join(f"**{u}" for u in unpacked)
    what = f"nn.scan({spelled}, ...)" if scanned else f"{spelled}({args})"
    built = (
        f"built without features unless {args} holds them"
        if unpacked
        else ("built without features")
    )
    ctx.add(
        call,
        "MIG008",
        f"{what}: the checker cannot tell which class {spelled} holds ({hint}); if it is a "
        f"Flax 0.6-era cell, it is {built} and its initialize_carry is static",
        "make sure the class is built with features=<hidden size> and its carry with "
        "cell.initialize_carry(rng, <one input step>.shape)",
        reason=f"the class {spelled} holds is not known here",
    )


def _cellish(ctx, node) -> str | None:
    """Why `node` looks like a cell class: its name or its annotation, or None (also for a
    class the file defines itself, which is not a Flax 0.6 cell)."""
    if isinstance(node, ast.Name) and node.id in ctx.names.classes:
        if ctx.kinds.values_of(node) is None and not ctx.kinds.is_param(node):
            return None
    if isinstance(node, ast.Attribute):
        name = node.attr
        annotation = _field_annotation(ctx, node)
    elif isinstance(node, ast.Name):
        name = node.id
        annotation = _param_annotation(ctx, node)
    else:
        return None
    if annotation is not None and re.search(r"RNNCellBase|Cell\b", annotation):
        return f"annotated {annotation}"
    if _CELLISH.search(name):
        return f"its name says cell: {name}"
    return None


def _field_annotation(ctx, node):
    owner = ctx.kinds.self_attr(node)
    if owner is None:
        return None
    cls, attr = owner
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and getattr(stmt.target, "id", None) == attr:
            return ctx.src.segment(stmt.annotation)
    return None


def _param_annotation(ctx, node):
    scope = ctx.kinds.scope_of(node)
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        args = scope.args
        for arg in args.posonlyargs + args.args + args.kwonlyargs:
            if arg.arg == node.id and getattr(arg, "annotation", None) is not None:
                return ctx.src.segment(arg.annotation)
    return None


def _built_here(ctx, scan: ast.Call) -> bool:
    """True when every way the scanned class leaves `scan` ends in a call the checker sees
    (an instance, which MIG003 checks, or an initialize_carry on the class, MIG001's)."""
    return _consumed(ctx, scan, depth=0)


def _consumed(ctx, node, depth) -> bool:
    if depth > 4:
        return False
    parent = ctx.parents.get(id(node))
    if isinstance(parent, ast.Call) and parent.func is node:
        return True
    if isinstance(parent, ast.Attribute) and parent.value is node:
        return parent.attr == "initialize_carry"
    if isinstance(parent, (ast.Assign, ast.AnnAssign)) and parent.value is node:
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        if not all(isinstance(t, (ast.Name, ast.Attribute)) for t in targets):
            return False
        for target in targets:
            if isinstance(target, ast.Attribute) and ctx.kinds.self_attr(target) is None:
                return False
            loads = list(ctx.kinds.loads(target, node))
            if not all(_consumed(ctx, load, depth + 1) for load in loads):
                return False
        return True
    if isinstance(parent, ast.Return):
        func = ctx.kinds.scope_of(parent)
        cls = ctx.parents.get(id(func))
        if not isinstance(cls, ast.ClassDef):
            return False
        sites = [
            n
            for n in ast.walk(cls)
            if isinstance(n, ast.Call)
            and ctx.kinds.self_attr(n.func) == (cls, getattr(func, "name", None))
        ]
        return bool(sites) and all(_consumed(ctx, site, depth + 1) for site in sites)
    return False
