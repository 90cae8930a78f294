"""MIG005: ``nn.ConvLSTM``, the name early linen releases gave ``ConvLSTMCell``.

Current Flax has no ``ConvLSTM``, so any use of the name is an ``AttributeError`` (or an
``ImportError`` for ``from flax.linen import ConvLSTM``). The fix renames an attribute in place
and rewrites an import as ``ConvLSTMCell as ConvLSTM``, so the rest of the file keeps its name.
"""

from __future__ import annotations

import ast

_OLD, _NEW = "ConvLSTM", "ConvLSTMCell"
_MODULES = ("flax.linen", "flax.linen.recurrent")
_MESSAGE = (
    "{spelled} is Flax's old name for ConvLSTMCell; current Flax has no ConvLSTM (AttributeError)"
)


def check(ctx):
    for node in ast.walk(ctx.tree):
        if isinstance(node, ast.Attribute) and node.attr == _OLD:
            if ctx.names.qualname(node) not in {f"{m}.{_OLD}" for m in _MODULES}:
                continue
            spelled = ctx.src.segment(node)
            end = ctx.src.end(node)
            if not spelled.endswith(_OLD):
                edits, reason = None, "the name is split over lines; rename it by hand"
            else:
                edits, reason = [(end - len(_OLD), end, _NEW)], None
            ctx.add(
                node,
                "MIG005",
                _MESSAGE.format(spelled=spelled),
                spelled[: -len(_OLD)] + _NEW,
                edits=edits,
                reason=reason,
            )
        elif isinstance(node, ast.ImportFrom) and node.module in _MODULES and not node.level:
            for alias in node.names:
                if alias.name != _OLD:
                    continue
                start = ctx.src.start(alias)
                text = ctx.src.segment(alias)
                new = f"{_NEW} as {alias.asname or _OLD}"
                ctx.add(
                    alias,
                    "MIG005",
                    _MESSAGE.format(spelled=f"from {node.module} import {_OLD}"),
                    f"from {node.module} import {new}",
                    edits=[(start, start + len(text), new)],
                )
