"""MIG004 (advice): a hand-written ``nn.scan`` wrapper with a class-level ``initialize_carry``.

The Flax 0.6 way to run a cell over time: a module whose ``__call__`` is (or calls) an
``nn.scan`` of a cell, and whose ``initialize_carry`` is a ``@staticmethod`` or
``@classmethod`` building the carry. Once its cells have ``features`` (MIG003) and its carry is
built from a configured cell (MIG001), it runs under current Flax: this is advice, which fails a
run only with ``--strict``. ``nn.RNN`` does the same, but it is not a drop-in replacement for a
scan whose step resets or edits the carry, and it moves parameter paths.

A wrapper is reported only while its ``initialize_carry`` still calls the old API (a static
``Cell.initialize_carry`` on a class, or the old ``(rng, batch_dims, size)`` arguments): the
same structure written against the current API (``Cell(features=n).initialize_carry(rng,
shape)``, as JaxMARL's ``ScannedRNN`` does) needs no change, so it must not fail ``--strict``.
Once ``--fix`` has rewritten the carry, the finding is gone from the next run.
"""

from __future__ import annotations

import ast

from rnnlib.migrate.names import _PARENT_NONE_WHY, _SCANS
from rnnlib.migrate.resolve import CLASS, SCAN
from rnnlib.migrate.source import _in_axes


def check(ctx, cls: ast.ClassDef):
    carry_def = None
    for stmt in cls.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == "initialize_carry":
            decorators = {
                ctx.names.qualname(d) or getattr(d, "id", "") for d in stmt.decorator_list
            }
            if decorators & {"staticmethod", "classmethod"}:
                carry_def = stmt
    if carry_def is None or not _old_carry(ctx, carry_def):
        return
    scan = _find_scan(ctx, cls)
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
        f"the Flax 0.6 idiom; it still runs once its cells have features, but nn.RNN "
        f"does the same in one line"
    )
    width = _width_name(ctx, cls, carry_def)
    # Only the carry's cell gets parent=None, as the MIG001 fix writes it: the cell that
    # nn.RNN scans must stay a submodule, since its parameters live there.
    suggestion = (
        f"nn.RNN(nn.{cell_name}(features={width}){time_major}) scans the cell and "
        f"builds the carry itself; where a carry is needed, call "
        f"nn.{cell_name}(features={width}, parent=None)"
        f".initialize_carry(key, {step}.shape) on a configured cell; {_PARENT_NONE_WHY}. "
        f"Keep the scan if its step resets or edits the carry (as at episode boundaries): "
        f"nn.RNN only passes the carry from step to step"
    )
    ctx.add(
        cls,
        "MIG004",
        message,
        suggestion,
        reason="replacing the scan wrapper with nn.RNN changes the module's "
        "structure and its parameter names; do it by hand, or keep it (it is advice)",
    )


def _old_carry(ctx, carry_def) -> bool:
    """Whether `carry_def` builds its carry with the Flax 0.6 API: initialize_carry called on
    a cell class, or with the old (rng, batch_dims, size) arguments."""
    for node in ast.walk(carry_def):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        if node.func.attr != "initialize_carry":
            continue
        kind = ctx.kinds.kind(node.func.value)
        if kind is not None and kind.tag in (CLASS, SCAN):
            return True
        args = ctx.old_args(node)
        if args and "size" in args:
            return True
    return False


def _width_name(ctx, cls, carry_def) -> str:
    """What the wrapper calls its width: the size its initialize_carry hands the cell."""
    for node in ast.walk(carry_def):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "initialize_carry":
                args = ctx.old_args(node)
                if args and "size" in args:
                    size = ctx.src.segment(args["size"])
                    return f"<the {size} given to {cls.name}.initialize_carry>"
    return "<hidden size>"


def _find_scan(ctx, cls: ast.ClassDef):
    for node in ast.walk(cls):
        if isinstance(node, ast.Call):
            cell = ctx.names.scanned_cell(node)
            if cell:
                return cell[1], node, _in_axes(node, 5)
        if isinstance(node, ast.Name) and node.id in ctx.names.scanned:
            call = ctx.names.scan_calls[node.id]
            return ctx.names.scanned[node.id][1], node, _in_axes(call, 5)
        if isinstance(node, ast.FunctionDef):
            for dec in node.decorator_list:
                if not isinstance(dec, ast.Call):
                    continue
                is_partial = ctx.names.qualname(dec.func) == "functools.partial"
                target = dec.args[0] if is_partial and dec.args else dec.func
                if ctx.names.qualname(target) not in _SCANS:
                    continue
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Call):
                        cell = ctx.names.cell_class(inner.func)
                        if cell:
                            return cell[1], dec, _in_axes(dec, 6 if is_partial else 5)
    return None
