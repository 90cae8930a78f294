"""MIG006: a subclass of ``nn.RNNCellBase`` that current ``nn.RNN`` cannot drive.

``nn.RNN`` reads the cell's ``num_feature_axes`` (how many trailing axes of one input step are
features: 1 for vectors, more for a ConvLSTM's signal and channels) and builds the carry with
``cell.initialize_carry(rng, input_shape)``. A 0.6-era subclass has neither: the first is a
``NotImplementedError``, the second a wrong call. The fix adds ``num_feature_axes`` returning 1
when nothing in the class mentions a convolution (so its carry and input are plain vectors);
an old ``initialize_carry`` is reported for you to rewrite.
"""

from __future__ import annotations

import ast
import re

_BASES = {"flax.linen.RNNCellBase", "flax.linen.recurrent.RNNCellBase"}
_CONVOLUTION = re.compile(r"Conv|kernel_size")
_OLD_CARRY_PARAMS = {"batch_dims", "size", "hidden_size", "init_fn"}


def check(ctx, cls: ast.ClassDef):
    if not any(ctx.names.qualname(base) in _BASES for base in cls.bases):
        return
    defined = set()
    for stmt in cls.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defined.add(stmt.name)
            if stmt.name == "initialize_carry":
                _old_initialize_carry(ctx, cls, stmt)
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
        f"reads it and raises NotImplementedError"
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
    ctx.add(cls, "MIG006", message, suggestion, edits=edits, reason=reason)


def _old_initialize_carry(ctx, cls, func):
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
        f"cell.initialize_carry(rng, input_shape), on an instance",
        "def initialize_carry(self, rng, input_shape): batch_dims = input_shape[:-1]; "
        "build the carry with the cell's own width",
        reason="the carry's construction is the class's own code; rewrite it by hand",
    )


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
