"""MIG003: a 0.6-era cell, or an ``nn.scan`` of one, built without ``features``.

``LSTMCell``, ``OptimizedLSTMCell`` and ``GRUCell`` took no ``features`` up to Flax 0.6.11: the
width came from the carry. Now ``features`` is required, and so it is for a class lifted with
``nn.scan(nn.GRUCell, ...)``, whether it is built inline, stored on ``self`` in ``setup`` or
returned from a helper method (:mod:`rnnlib.migrate.resolve` follows the class there).

The fixer writes ``features=`` when it can read the width, in this order:

1. the ``cell_size`` of the ``nn.RNN`` the cell is built in (fixed together with MIG002);
2. a width written in the file: the ``size`` of an old ``initialize_carry`` called on this cell
   (``cell.initialize_carry(rng, (b,), n)``), or of the one that made the carry the cell is
   called with (``carry = nn.LSTMCell.initialize_carry(rng, (b,), n); Scan()(carry, xs)``), or
   the ``cell_size`` of an ``nn.RNN`` the cell is handed to;
3. the carry the cell is called with right where it is built (``nn.GRUCell()(h, x)``,
   ``Scan(name="s")(carry, xs)``, ``nn.LSTMCell().apply(v, carry, x)``): ``h.shape[-1]`` for a
   GRU, ``carry[0].shape[-1]`` for an LSTM, whose carry is ``(c, h)``.

A width is used only where every name in it is bound before the cell is built; two different
written widths are reported, not chosen between.
"""

from __future__ import annotations

import ast

from rnnlib.migrate.names import _FEATURELESS_CELLS, _LEGACY_REASON
from rnnlib.migrate.resolve import CARRY, CLASS, SCAN
from rnnlib.migrate.source import (
    _cell_arg,
    _has_star,
    _is_int_like,
    _keyword,
    _lacks_features,
    _open_paren,
)

_CALLS_WITH_CARRY = {"apply": 1, "init": 1, "init_with_output": 1}


def check(ctx, call: ast.Call):
    kind = ctx.kinds.kind(call.func)
    if kind is None or kind.tag not in (CLASS, SCAN):
        return
    family, name = kind.family, kind.cell
    if name not in _FEATURELESS_CELLS or not _lacks_features(call) or _has_star(call):
        return
    spelled = ctx.src.segment(call.func)
    what = f"an nn.scan of {name}" if kind.tag == SCAN else spelled
    message = (
        f"{_short(spelled)}() is built without features (Flax 0.6 API); the current API "
        f"requires features, the width of the carry and of the output"
    )
    if kind.tag == SCAN and _short(spelled) != spelled:
        message = f"{_short(spelled)}() ({what}) " + message.split("() ", 1)[1]
    parent = ctx.parents.get(id(call))
    partner = None
    if isinstance(parent, ast.keyword) and parent.arg == "cell":
        parent = ctx.parents.get(id(parent))
    if isinstance(parent, ast.Call) and id(parent) in ctx.rnn_findings:
        if _cell_arg(parent) is call:
            partner = ctx.rnn_findings[id(parent)]
    size = None
    if partner is not None:
        size = _keyword(parent, "cell_size")
        size = size.value if size is not None else parent.args[1]
    if partner is not None and partner.fixable:
        finding = ctx.add(
            call,
            "MIG003",
            message,
            ctx.cell_with_features(call, ctx.src.segment(size), True)
            + f"  # fixed together with the RNN at line {partner.line}",
        )
        finding.partner, finding.width = partner, size
        ctx.ctor_findings[id(call)] = finding
        return
    width, where, conflict = None, None, None
    if partner is None and family == "flax":
        width, where, conflict = _read_width(ctx, call, name)
    reason = None
    if partner is not None:
        reason = f"the RNN at line {partner.line} is not fixable: {partner.reason}"
    elif family == "legacy":
        reason = _LEGACY_REASON
    elif conflict:
        reason = f"two widths are written for this cell, {conflict}; choose one by hand"
    elif width is None:
        lstm = "LSTM" in name
        last = "carry[0].shape[-1] for an LSTM's (c, h)" if lstm else "carry.shape[-1]"
        reason = (
            f"the width of the carry is not written where this cell is built or used: write "
            f"{ctx.cell_with_features(call, '<hidden size>', True)} at line {call.lineno}, "
            f"<hidden size> being the last dimension of the carry it is called with "
            f"({last}), the size its old initialize_carry was given"
        )
    # The RNN's cell_size, when it is there and could be an int, is the width to give.
    if size is not None and _is_int_like(size):
        hint = ctx.src.segment(size)
    elif width is not None:
        hint = width if isinstance(width, str) else ctx.src.segment(width)
    else:
        hint = "<hidden size>"
    suggestion = ctx.cell_with_features(call, hint, True)
    if where:
        suggestion += f"  # the width {where}"
    edits = None
    if reason is None:
        paren = _open_paren(ctx.src, call)
        if paren is None:
            reason = "the cell call is laid out in a way the fixer does not rewrite"
        else:
            more = ", " if call.args or call.keywords else ""
            edits = [(paren + 1, paren + 1, f"features={hint}{more}")]
    finding = ctx.add(call, "MIG003", message, suggestion, edits=edits, reason=reason)
    finding.width = width
    ctx.ctor_findings[id(call)] = finding


def _short(spelled: str) -> str:
    """`spelled` on one line, an inline `nn.scan(...)` shortened to `nn.scan(...)`."""
    if "\n" in spelled or len(spelled) > 40:
        head = spelled.split("(", 1)[0]
        return f"{head}(...)"
    return spelled


# --------------------------------------------------------------------------- reading the width


def _read_width(ctx, call: ast.Call, name: str):
    """(width, where it was read, conflict): width is a node (written in the file) or a string
    (read from a carry's shape); conflict names two written widths that differ."""
    written, shapes = [], []
    for use, node in _uses(ctx, call):
        if use == "initialize_carry":
            args = ctx.old_args(node)
            if args and "size" in args and "batch_dims" in args:
                written.append(
                    (args["size"], f"is the size given to initialize_carry at line {node.lineno}")
                )
        elif use == "rnn":
            written.append((node, f"is the cell_size of the RNN at line {node.lineno}"))
        elif use in ("carry", "carry_now"):
            size = _written_carry_size(ctx, node)
            if size is not None:
                written.append((size, f"is the size its carry was made with (line {size.lineno})"))
            elif use == "carry_now":
                text = _carry_width(ctx, node, name)
                if text:
                    shapes.append((text, "is read from the carry it is called with"))
    usable = [(w, where) for w, where in written if _available(ctx, w, call)]
    distinct = {ast.dump(w): (w, where) for w, where in usable}
    if len(distinct) > 1:
        texts = sorted({ctx.src.segment(w) for w, _ in distinct.values()})
        return None, None, " and ".join(texts)
    if distinct:
        width, where = next(iter(distinct.values()))
        return width, where, None
    if shapes:
        return shapes[0][0], shapes[0][1], None
    return None, None, None


def _uses(ctx, call: ast.Call):
    """(use, node) for what happens to the cell `call` builds: ("carry_now", carry) when it is
    called right away, ("carry", carry) when it is called later, ("initialize_carry", call),
    ("rnn", cell_size) when it is handed to an nn.RNN with a cell_size."""
    yield from _use_of(ctx, call, now=True)
    parent = ctx.parents.get(id(call))
    if not isinstance(parent, (ast.Assign, ast.AnnAssign)) or parent.value is not call:
        return
    targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
    for target in targets:
        for load in ctx.kinds.loads(target, call):
            yield from _use_of(ctx, load, now=False)


def _use_of(ctx, node, now: bool):
    parent = ctx.parents.get(id(node))
    if isinstance(parent, ast.Call) and parent.func is node and parent.args:
        yield ("carry_now" if now else "carry"), parent.args[0]
    elif isinstance(parent, ast.Attribute) and parent.value is node:
        outer = ctx.parents.get(id(parent))
        if isinstance(outer, ast.Call) and outer.func is parent:
            if parent.attr == "initialize_carry":
                yield "initialize_carry", outer
            elif parent.attr in _CALLS_WITH_CARRY and len(outer.args) > 1:
                yield ("carry_now" if now else "carry"), outer.args[_CALLS_WITH_CARRY[parent.attr]]
    elif isinstance(parent, (ast.Call, ast.keyword)):
        rnn = ctx.parents.get(id(parent)) if isinstance(parent, ast.keyword) else parent
        if isinstance(rnn, ast.Call) and ctx.names.is_rnn(rnn.func) and _cell_arg(rnn) is node:
            size = _keyword(rnn, "cell_size")
            size = size.value if size is not None else (rnn.args[1] if len(rnn.args) > 1 else None)
            if size is not None and not isinstance(size, ast.Starred):
                yield "rnn", size


def _written_carry_size(ctx, carry):
    """The `size` of the old initialize_carry call that made `carry`, when it can be read."""
    if isinstance(carry, (ast.Tuple, ast.List)) and carry.elts:
        carry = carry.elts[0]
    kind = ctx.kinds.kind(carry)
    if kind is None and isinstance(carry, ast.Name):
        # Bound more than once: the last binding on an earlier line (straight-line code).
        values = ctx.kinds.values_of(carry) or []
        before = [v for v in values if (_line(v) or carry.lineno) < carry.lineno]
        if before:
            kind = ctx.kinds.kind(max(before, key=_line))
    if kind is None or kind.tag != CARRY:
        return None
    args = ctx.old_args(kind.node)
    if args and "size" in args and "batch_dims" in args and _is_int_like(args["size"]):
        return args["size"]
    return None


def _carry_width(ctx, carry, name: str) -> str | None:
    """`carry`'s width as an expression: `h.shape[-1]` (`hidden[i].shape[-1]`), or
    `c[0].shape[-1]` for an LSTM, whose carry is `(c, h)`. Only a carry spelled as a plain
    reference on one line is used (names, attributes, and subscripts by names or constants):
    it is read once more where the cell is built, so it must have no effects of its own."""
    if isinstance(carry, (ast.Tuple, ast.List)) and carry.elts:
        first = carry.elts[0]
        if not _plain_reference(first):
            return None
        text = ctx.src.segment(first)
        return f"{text}.shape[-1]" if "\n" not in text and "\r" not in text else None
    if not _plain_reference(carry):
        return None
    text = ctx.src.segment(carry)
    if "\n" in text or "\r" in text:
        return None
    return f"{text}.shape[-1]" if name == "GRUCell" else f"{text}[0].shape[-1]"


def _plain_reference(node) -> bool:
    """True for `h`, `self.h`, `hidden[i]`, `state[0][-1]`, `carries[i + 1]`: reading it again
    calls nothing and binds nothing."""
    if isinstance(node, ast.Name):
        return True
    if isinstance(node, ast.Attribute):
        return _plain_reference(node.value)
    if isinstance(node, ast.Subscript):
        return _plain_reference(node.value) and _plain_index(node.slice)
    return False


def _plain_index(node) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int) and not isinstance(node.value, bool)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return _plain_index(node.operand)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        return _plain_index(node.left) and _plain_index(node.right)
    return isinstance(node, (ast.Name, ast.Attribute)) and _plain_reference(node)


def _available(ctx, node, at) -> bool:
    """True when every name `node` reads is bound before `at` (the cell's constructor): a
    parameter, a name this unit does not assign (an import, a global of another cell), or a
    name assigned on an earlier line."""
    here = ctx.kinds.scope_of(at)
    for name in (n for n in ast.walk(node) if isinstance(n, ast.Name)):
        values = ctx.kinds.values_of(name)
        if values is None:
            continue
        if values is not ctx.kinds.lookup(name.id, here):  # a local of another function
            return False
        if not any(line is not None and line < at.lineno for line in map(_line, values)):
            return False
    return True


def _line(value):
    if isinstance(value, tuple):
        value = value[2]
    return getattr(value, "lineno", None)
