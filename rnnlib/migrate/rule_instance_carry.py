"""MIG007 (and MIG008's unknown receivers): ``x.initialize_carry(rng, batch_dims, size)``, the old
three arguments, called on something that is not a cell class.

When ``x`` is a cell instance (a variable holding ``nn.LSTMCell(...)``, ``self.cell``, ``rnn.cell``
of an ``nn.RNN``, an instance of a scanned class) the call breaks: the current method takes
``(rng, input_shape)``. The fixer drops ``size`` and appends the placeholder input width to
``batch_dims`` when the cell's width is the same ``size`` expression, whether the cell already
has that ``features`` or MIG002/MIG003 give it (then the two are fixed together).

When the checker cannot tell what ``x`` is, the call is reported for review (MIG008), unless the
file defines an ``initialize_carry`` of its own that takes these arguments (a wrapper's own
static method is the user's API, not Flax's).
"""

from __future__ import annotations

import ast

from rnnlib.migrate.names import _CONV_CELLS, _FEATURELESS_CELLS
from rnnlib.migrate.resolve import INSTANCE
from rnnlib.migrate.source import (
    _arg_spans,
    _comment_edit,
    _features_of,
    _has_comment,
    _is_int_like,
    _keyword,
    _removal_edits,
    _with_placeholder,
)
from rnnlib.migrate.x64 import float64_spelling

# Libraries whose recurrent cells have an initialize_carry-free API of their own.
_OTHER_LIBRARIES = frozenset(
    {"torch", "tensorflow", "keras", "haiku", "equinox", "mxnet", "paddle", "numpy"}
)


def check(ctx, call: ast.Call):
    args = ctx.old_args(call)
    positional = len(call.args) + sum(1 for kw in call.keywords if kw.arg is not None)
    old_shaped = (args is not None and "size" in args) or positional >= 3
    if not old_shaped:
        return None
    receiver = call.func.value
    spelled = ctx.src.segment(receiver)
    kind = ctx.kinds.kind(receiver)
    if kind is None or kind.tag != INSTANCE:
        if kind is not None or _own_method_takes(ctx, call, positional):
            return None
        if _other_library(ctx, call):
            return None
        message = (
            f"{spelled}.initialize_carry(...) is called with three or more arguments, the shape "
            f"of Flax 0.6's (rng, batch_dims, size); the checker cannot tell what {spelled} is"
        )
        wrapper = _wrapper_method(ctx, call)
        if wrapper is not None:
            message += (
                f" (inside {wrapper}, which takes these arguments and hands them on, as Flax 0.6 "
                f"wrappers of cells did)"
            )
        suggestion = (
            f"if {spelled} is a Flax cell: {spelled}.initialize_carry(rng, <one input step>"
            f".shape), with the cell built with features=<size>"
        )
        if args is not None and "init_fn" in args:
            suggestion += f" and carry_init={ctx.src.segment(args['init_fn'])}"
        return ctx.add(
            call,
            "MIG008",
            message,
            suggestion,
            reason=f"the type of {spelled} is not known here",
        )
    name = kind.cell
    message = (
        f"{spelled}.initialize_carry(...) passes (rng, batch_dims, size), the Flax 0.6 "
        f"arguments, to a {name} instance; the current method takes (rng, input_shape)"
    )
    if args is None or "size" not in args or "batch_dims" not in args:
        return ctx.add(
            call,
            "MIG007",
            message,
            f"{spelled}.initialize_carry(rng, <one input step>.shape)",
            reason="the call does not have the old (rng, batch_dims, size) arguments",
        )
    rng, batch, size, init = (args.get(k) for k in ("rng", "batch_dims", "size", "init_fn"))
    seg = ctx.src.segment
    rng_src = seg(rng) if rng is not None else "rng"
    if name in _FEATURELESS_CELLS:
        suggestion = (
            f"{spelled}.initialize_carry({rng_src}, "
            f"{_with_placeholder(ctx.src, batch, '<input channels>')}), with {spelled} built "
            f"with features={seg(size)}"
        )
    elif name in _CONV_CELLS:
        suggestion = (
            f"{spelled}.initialize_carry({rng_src}, <one input step>.shape), the step shaped "
            f"batch dims + signal dims + (input channels,); {spelled} carries its own features "
            f"(the last entry of the old size) and kernel_size"
        )
    else:
        suggestion = (
            f"{spelled}.initialize_carry({rng_src}, <one input step>.shape), with {spelled} "
            f"built with features={seg(size)[0:60]}"
        )
    ctor = kind.node
    width, owner = _planned_width(ctx, ctor)
    reason = None
    if kind.family != "flax" or name not in _FEATURELESS_CELLS:
        reason = f"a {name} carry needs the input's shape, which this call does not show"
    elif init is not None:
        reason = (
            f"init_fn has no place in the current call: build {spelled} (line {ctor.lineno}) "
            f"with carry_init=lambda key, shape, dtype, init_fn={seg(init)}: init_fn(key, "
            f"shape), which calls it as 0.6 did, and drop init_fn here"
        )
    elif _dtype_reason(ctx, ctor, spelled, name, seg(size), rng_src, batch) is not None:
        reason = _dtype_reason(ctx, ctor, spelled, name, seg(size), rng_src, batch)
    elif not _is_int_like(size):
        reason = f"size {seg(size)} is not an int, which {name} needs"
    elif width is None:
        reason = f"the {name} this is called on has no width the fixer can give it"
    elif ast.dump(width) != ast.dump(size):
        reason = (
            f"size {seg(size)} is not written as the cell's width {seg(width)}; check they "
            f"agree, then drop size"
        )
    elif _has_comment(seg(batch)):
        reason = "batch_dims contains a comment, which an automatic edit could misplace"
    edits = None
    if reason is None:
        edits = _edits(ctx, call, batch, size)
        if edits is None:
            reason = "the arguments are laid out in a way the fixer does not rewrite"
        elif owner is not None and not owner.fixable:
            reason = f"the cell's width is not fixed yet: {owner.reason}"
            edits = None
    if owner is not None and edits is not None:
        # The width comes with another fix (features given by MIG002/MIG003): one edit.
        owner.edits += edits
        finding = ctx.add(call, "MIG007", message, suggestion)
        finding.partner = owner
        return finding
    return ctx.add(call, "MIG007", message, suggestion, edits=edits, reason=reason)


def _dtype_reason(ctx, ctor, spelled, name, size_src, rng_src, batch) -> str | None:
    """Why the carry's dtype may change when it comes from the instance (None if it cannot).

    The old call filled the carry with JAX's default float (float64 under jax_enable_x64);
    the instance's own initialize_carry uses its param_dtype, and giving the instance
    param_dtype=float64 would change its parameters too. A cell of its own keeps both."""
    state, line, what = ctx.x64
    dtype = next((k for k in getattr(ctor, "keywords", []) if k.arg == "param_dtype"), None)
    if state is None and dtype is None:
        return None
    why = (
        f"{spelled} is built with param_dtype={ctx.src.segment(dtype.value)}"
        if dtype is not None
        else f"this file {'turns on' if state == 'on' else 'may run with'} jax_enable_x64 "
        f"(line {line}: {what})"
    )
    wide = float64_spelling(ctx.names) or "jnp.float64"
    wide = wide if dtype is None or state is not None else "jnp.float32"
    return (
        f"{why}: the old carry had JAX's default float and the new one would have "
        f"{spelled}'s param_dtype; build it from a cell of its own instead, "
        f"nn.{name}(features={size_src}, param_dtype={wide}, parent=None)"
        f".initialize_carry({rng_src}, {_with_placeholder(ctx.src, batch, '1')})"
        + ("" if state == "on" else " (float32 where x64 is off)")
    )


def _planned_width(ctx, ctor):
    """(width node, finding that writes it) of the cell built by `ctor`: its own features
    (no finding), or the width MIG002/MIG003 give it (that finding)."""
    if not isinstance(ctor, ast.Call):
        return None, None
    features = _features_of(ctor)
    if features is not None:
        return features, None
    finding = ctx.ctor_findings.get(id(ctor))
    if finding is None or not isinstance(finding.width, ast.AST):
        return None, None
    owner = finding.partner if finding.partner is not None else finding
    return finding.width, owner


def _edits(ctx, call, batch, size):
    shape = _with_placeholder(ctx.src, batch, "1")
    batch_kw = _keyword(call, "batch_dims")
    if batch_kw is not None:
        edits = [(ctx.src.start(batch_kw), ctx.src.end(batch_kw), f"input_shape={shape}")]
    else:
        spans = _arg_spans(ctx.src, call)
        if spans is None:
            return None
        start, end = next((s, e) for s, e, node in spans if node is batch)
        edits = [(start, end, shape)]
    removals = _removal_edits(ctx.src, call, [_keyword(call, "size") or size])
    if removals is None:
        return None
    comment = _comment_edit(ctx.src, ctx.statement(call))
    return edits + removals + ([comment] if comment else [])


def _other_library(ctx, call) -> bool:
    """True when the receiver is imported from a library that is not Flax (torch.nn...)."""
    node = call.func.value
    while isinstance(node, ast.Attribute):
        node = node.value
    qual = ctx.names.qualname(node) if isinstance(node, ast.Name) else None
    return qual is not None and qual.split(".")[0] in _OTHER_LIBRARIES


def _own_method_takes(ctx, call, count: int) -> bool:
    """True when the file defines an initialize_carry that accepts `count` arguments, and
    that method could be the one `call` reaches. The method `call` sits in does not count
    unless `call` is made on its own receiver (``self`` or the class): a wrapper's
    ``initialize_carry(self, rng, batch_dims, size, init_fn)`` that hands those arguments on to
    ``cell.initialize_carry(...)`` is the Flax 0.6 pattern, not evidence that ``cell`` is the
    wrapper."""
    enclosing = _enclosing_functions(ctx, call)
    for tree in ctx.names.trees:
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if node.name != "initialize_carry":
                continue
            if any(node is f for f in enclosing) and not _on_own_receiver(ctx, call, node):
                continue
            params = node.args.posonlyargs + node.args.args
            decorators = {getattr(d, "id", None) for d in node.decorator_list}
            if "staticmethod" not in decorators and params:
                params = params[1:]
            most = len(params) + len(node.args.kwonlyargs)
            least = len(params) - len(node.args.defaults)
            if least <= count and (count <= most or node.args.vararg is not None):
                return True
    return False


def _enclosing_functions(ctx, node) -> list:
    found = []
    scope = ctx.kinds.scope_of(node)
    while scope is not None and not isinstance(scope, ast.Module):
        if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.append(scope)
        scope = ctx.kinds.scope_of(scope)
    return found


def _on_own_receiver(ctx, call, method) -> bool:
    """True when `call` is made on `method`'s first parameter or on its class by name."""
    receiver = call.func.value
    if not isinstance(receiver, ast.Name):
        return False
    params = method.args.posonlyargs + method.args.args
    decorators = {getattr(d, "id", None) for d in method.decorator_list}
    if params and "staticmethod" not in decorators and receiver.id == params[0].arg:
        return True
    owner = ctx.parents.get(id(method))
    return isinstance(owner, ast.ClassDef) and receiver.id == owner.name


def _wrapper_method(ctx, call) -> str | None:
    """`Class.initialize_carry` (or `initialize_carry`) when `call` sits in a method of that
    name that does not call itself on its own receiver, else None."""
    for func in _enclosing_functions(ctx, call):
        if func.name == "initialize_carry" and not _on_own_receiver(ctx, call, func):
            owner = ctx.parents.get(id(func))
            return f"{owner.name}.{func.name}" if isinstance(owner, ast.ClassDef) else func.name
    return None
