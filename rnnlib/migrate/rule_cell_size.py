"""MIG002: ``nn.RNN(cell, cell_size)``, the Flax 0.6 signature.

The current ``RNN`` has no ``cell_size``; worse, a second positional argument is now
``time_major``. The fix moves the size into the cell as ``features`` when the cell is built in
the call without one, and drops it when the cell's ``features`` is the same expression.
"""

from __future__ import annotations

import ast

from rnnlib.migrate.findings import Finding
from rnnlib.migrate.names import _FEATURELESS_CELLS, _LEGACY_REASON
from rnnlib.migrate.resolve import INSTANCE
from rnnlib.migrate.source import (
    _apply,
    _features_of,
    _has_star,
    _int_literal,
    _is_int_like,
    _keyword,
    _lacks_features,
    _one_line,
    _open_paren,
    _removal_edits,
    _same,
)


def check(ctx, call: ast.Call) -> Finding | None:
    size_kw = _keyword(call, "cell_size")
    if size_kw is not None:
        size, size_node = size_kw.value, size_kw
    elif len(call.args) >= 2 and not isinstance(call.args[1], ast.Starred):
        size = size_node = call.args[1]
    else:
        return None
    cell = call.args[0] if call.args else getattr(_keyword(call, "cell"), "value", None)
    seg = ctx.src.segment
    family = ctx.names.is_rnn(call.func)
    message = (
        "RNN(..., cell_size=...) is the Flax 0.6 signature; the current RNN takes the carry "
        "size from the cell's features"
    )
    if size_kw is None:
        message += " (and reads a second positional argument as time_major)"
    cell_call = cell if isinstance(cell, ast.Call) else None
    cell_info = ctx.names.cell_class(cell_call.func) if cell_call else None
    featureless = cell_info and cell_info[1] in _FEATURELESS_CELLS and _lacks_features(cell_call)
    if cell_call is not None and cell_info:
        cell_text = ctx.cell_with_features(cell_call, seg(size), featureless)
    else:
        cell_text = "<cell with features=...>"
    rnn_text = ctx.current_spelling(call.func)
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
            "the cell is built elsewhere; give it features where it is built, then drop cell_size"
        )
    elif featureless:
        if not _is_int_like(size):
            reason = f"cell_size {seg(size)} is not an int, which {cell_info[1]} needs"
        else:
            paren = _open_paren(ctx.src, cell_call)
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
    removal = _removal_edits(ctx.src, call, [size_node])
    edits = None
    if removal is None:
        reason = reason or "a comment sits next to cell_size; drop it by hand"
    else:
        if cell_call is not None and cell_info and featureless and not insert:
            paren = _open_paren(ctx.src, cell_call)
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
            (ctx.src.start(func), ctx.src.end(func), ctx.current_spelling(func))
            for func in (call.func, cell_call.func if cell_info else None)
            if func is not None and ctx.current_spelling(func) != seg(func)
        ]
        suggestion = _one_line(
            _apply(
                ctx.src.text,
                renames + insert + removal,
                ctx.src.start(call),
                ctx.src.end(call),
            )
        )
        if cell_call is None or cell_info is None:
            built = "an rnnlib cell built" if family == "legacy" else "the cell built"
            suggestion += f"  # with {built} with features={seg(size)}"
        if reason is None:
            edits = insert + removal
    finding = ctx.add(call, "MIG002", message, suggestion, edits=edits, reason=reason)
    if removal is not None and cell is not None and cell_call is None and family == "flax":
        _built_elsewhere(ctx, finding, cell, size, removal)
    return finding


def _built_elsewhere(ctx, finding, cell, size, removal):
    """`cell` is a name for a cell built elsewhere: cell_size can go when that cell's width is
    the same expression, now (its features) or once MIG003 gives it one (joined later)."""
    kind = ctx.kinds.kind(cell)
    if kind is None or kind.tag != INSTANCE or kind.family != "flax":
        return
    features = _features_of(kind.node)
    if features is not None:
        if _same(features, size):
            finding.fixable, finding.reason, finding.edits = True, None, list(removal)
        return
    # Joined to the cell's MIG003 finding by Checker.join_pending, once that has run.
    finding.pending = (kind.node, size, removal)
