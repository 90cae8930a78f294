"""MIG006: a subclass of ``nn.RNNCellBase`` that current ``nn.RNN`` cannot drive.

``nn.RNN`` reads the cell's ``num_feature_axes`` (how many trailing axes of one input step are
features: 1 for vectors, more for a ConvLSTM's signal and channels) and builds the carry with
``cell.initialize_carry(rng, input_shape)``. A 0.6-era subclass has neither: the first is a
``NotImplementedError``, the second a wrong call. The fix adds ``num_feature_axes`` returning 1
when nothing in the class mentions a convolution (so its carry and input are plain vectors);
an old ``initialize_carry`` is reported for you to rewrite.

Only ``nn.RNN`` needs either: a custom cell that the file scans with ``nn.scan`` (and whose own
static ``initialize_carry`` its callers use) runs unchanged under current Flax. So the severity
follows where the class goes: ``error`` when the file (any cell of a notebook) hands it to
``nn.RNN``, directly, through a variable, an attribute or a field default; ``review`` when an
``nn.RNN`` in the file takes a cell the checker cannot follow; ``advice`` otherwise.
"""

from __future__ import annotations

import ast
import re

from rnnlib.migrate.source import _cell_arg

_BASES = {"flax.linen.RNNCellBase", "flax.linen.recurrent.RNNCellBase"}
_CONVOLUTION = re.compile(r"Conv|kernel_size")
_OLD_CARRY_PARAMS = {"batch_dims", "size", "hidden_size", "init_fn"}


def check(ctx, cls: ast.ClassDef):
    if not any(ctx.names.qualname(base) in _BASES for base in cls.bases):
        return
    severity, where = _reach(ctx, cls)
    defined = set()
    for stmt in cls.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defined.add(stmt.name)
            if stmt.name == "initialize_carry":
                _old_initialize_carry(ctx, cls, stmt, severity, where)
        elif isinstance(stmt, ast.Assign):
            defined |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            defined.add(stmt.target.id)
    if "num_feature_axes" in defined:
        return
    mentions = {
        n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else n.arg
        for n in ast.walk(cls)
        if isinstance(n, (ast.Name, ast.Attribute, ast.arg, ast.keyword))
    }
    convolution = sorted(m for m in mentions if m and _CONVOLUTION.search(m))
    message = (
        f"class {cls.name} subclasses nn.RNNCellBase without num_feature_axes; current nn.RNN "
        f"reads it and raises NotImplementedError ({where})"
    )
    suggestion = (
        f"add to {cls.name}: @property def num_feature_axes(self) -> int: return 1 "
        f"(the number of trailing feature axes of one input step: 1 for vectors)"
    )
    edits, reason = None, None
    if convolution:
        reason = (
            f"the class mentions {', '.join(convolution)}: its inputs may have signal axes, "
            f"so the number of feature axes is not known to be 1"
        )
    else:
        edits = [_property_edit(ctx, cls)]
    ctx.add(cls, "MIG006", message, suggestion, edits=edits, reason=reason, severity=severity)


def _old_initialize_carry(ctx, cls, func, severity, where):
    params = [a.arg for a in func.args.posonlyargs + func.args.args]
    decorators = {getattr(d, "id", None) for d in func.decorator_list}
    decorators &= {"staticmethod", "classmethod"}
    if "staticmethod" not in decorators and params:
        params = params[1:]
    if len(params) < 3 and not (set(params) & _OLD_CARRY_PARAMS) and not decorators:
        return
    ctx.add(
        func,
        "MIG006",
        f"{cls.name}.initialize_carry takes ({', '.join(params)}); current nn.RNN calls "
        f"cell.initialize_carry(rng, input_shape), on an instance ({where})",
        "def initialize_carry(self, rng, input_shape): batch_dims = input_shape[:-1]; "
        "build the carry with the cell's own width",
        reason="the carry's construction is the class's own code; rewrite it by hand",
        severity=severity,
    )


def _reach(ctx, cls: ast.ClassDef) -> tuple[str, str]:
    """(severity, why) for `cls`: error when a flax nn.RNN in the document is built with it,
    review when one is built with a cell the checker cannot follow, advice when none is."""
    handed, unknown = _rnn_cells(ctx.names)
    if cls.name in handed:
        return "error", f"nn.RNN is built with it at line {handed[cls.name]}"
    if unknown:
        return "review", (
            f"the checker cannot tell which cell the nn.RNN at line {unknown[0]} takes; "
            f"if it is {cls.name}, this breaks"
        )
    return "advice", (
        "nothing here hands it to nn.RNN, and a cell scanned with nn.scan runs without it; "
        "add it before handing the cell to nn.RNN"
    )


def _rnn_cells(names):
    """({class name: line of the nn.RNN built with it}, [lines of nn.RNNs whose cell the
    checker cannot follow]) over every tree of the document (every cell of a notebook)."""
    cached = getattr(names, "_rnn_cells", None)
    if cached is not None:
        return cached
    handed, unknown = {}, []
    for tree in names.trees:
        bindings = _bindings(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or names.is_rnn(node.func) != "flax":
                continue
            cell = _cell_arg(node)
            found = _class_names(cell, bindings, depth=0) if cell is not None else None
            if found is None:
                unknown.append(node.lineno)
                continue
            for name in found:
                handed.setdefault(name, node.lineno)
    names._rnn_cells = (handed, sorted(unknown))
    return names._rnn_cells


def _bindings(tree) -> dict:
    """name -> values assigned to it anywhere in `tree`: `x = v`, `self.x = v` (as "self.x"),
    and class-level `x = v` / `x: T = v` (as "self.x", what a method reads)."""
    out: dict[str, list] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        for target in targets:
            if isinstance(target, ast.Name):
                out.setdefault(target.id, []).append(value)
                out.setdefault(f"self.{target.id}", []).append(value)
            elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                out.setdefault(f"self.{target.attr}", []).append(value)
    return out


def _class_names(node, bindings, depth) -> set[str] | None:
    """The class names `node` (a cell argument of nn.RNN) is built from, or None when it
    cannot be followed (a parameter, a field without a default, a call it does not read)."""
    if depth > 6:
        return None
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name):
            return {func.id} | (_class_names(func, bindings, depth + 1) or set())
        if isinstance(func, ast.Attribute):
            found = {func.attr}
            if isinstance(func.value, ast.Name) and func.value.id == "self":
                found |= _class_names(func, bindings, depth + 1) or set()
            return found
        return None
    if isinstance(node, ast.Name):
        key = node.id
    elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        key = f"{node.value.id}.{node.attr}" if node.value.id == "self" else None
        if key is None:
            return {node.attr}
    else:
        return None
    values = bindings.get(key)
    if not values:
        return None
    found = set()
    for value in values:
        more = _class_names(value, bindings, depth + 1)
        if more is None:
            if isinstance(value, (ast.Name, ast.Attribute)):
                found.add(value.id if isinstance(value, ast.Name) else value.attr)
                continue
            return None
        found |= more
    return found


def _property_edit(ctx, cls: ast.ClassDef):
    """An edit appending a num_feature_axes property after the last line of the class body."""
    src = ctx.src
    first, last = cls.body[0], cls.body[-1]
    body_indent = src.text[src.line_start_of(src.start(first)) : src.start(first)]
    class_indent = src.text[src.line_start_of(src.start(cls)) : src.start(cls)]
    step = body_indent[len(class_indent) :] or "    "
    newline = "\r\n" if "\r\n" in src.text else "\n"
    if last.end_lineno < len(src.line_starts):
        at, lead = src.line_starts[last.end_lineno], ""
    else:
        at, lead = len(src.text), newline
        if src.text.endswith(("\n", "\r")):
            lead = ""
    lines = [
        "",
        f"{body_indent}@property",
        f"{body_indent}def num_feature_axes(self) -> int:",
        f"{body_indent}{step}return 1  # rnnlib.migrate: inputs and carries are vectors",
    ]
    return at, at, lead + newline.join(lines) + newline
