"""MIG001: ``Cell.initialize_carry(rng, batch_dims, size)`` called on a cell class.

Up to Flax 0.6.11 ``initialize_carry`` was a static method; now it is an instance method of a
configured cell that reads the batch dims from the shape of one input step. The receiver may be
the class spelled out, an alias, a class held in a variable, an attribute or a dataclass field
(:mod:`rnnlib.migrate.resolve` follows those), or an ``nn.scan`` of a cell class. Only a Flax
``LSTMCell``, ``OptimizedLSTMCell`` or ``GRUCell`` spelled out is rewritten; see
:func:`_static_edits` for what is written and why.
"""

from __future__ import annotations

import ast

from rnnlib.migrate.names import _CONV_CELLS, _LEGACY_REASON, _PARENT_NONE_WHY, _current_name
from rnnlib.migrate.resolve import CLASS, SCAN
from rnnlib.migrate.source import (
    _arg_spans,
    _comment_edit,
    _has_comment,
    _is_int_like,
    _keyword,
    _removal_edits,
    _with_placeholder,
)
from rnnlib.migrate.x64 import float64_spelling


def check(ctx, call: ast.Call):
    """Reports `call` when it is initialize_carry on a cell class; returns the finding (None
    when the receiver is not a cell class, which MIG007/MIG008 then look at)."""
    owner = call.func.value
    kind = ctx.kinds.kind(owner)
    if kind is None or kind.tag not in (CLASS, SCAN):
        return None
    cell = (kind.family, kind.cell) if kind.tag == CLASS else None
    scanned = (kind.family, kind.cell) if kind.tag == SCAN else None
    held = kind.via in ("field", "attribute", "helper") or (
        kind.via == "variable" and not isinstance(owner, ast.Name)
    )
    family, name = cell or scanned
    spelled = ctx.src.segment(owner)
    new_name = _current_name(name)
    new_spelled = spelled
    if family == "legacy":
        # A legacy class takes no features: the new call is on rnnlib's own cell, the
        # one that computes for it (and, not being linen, it has no parent to set).
        new_spelled = f"rnnlib.{new_name}"
    elif scanned or held or not spelled.endswith(name):
        new_spelled = name
    elif spelled.endswith(name):
        new_spelled = spelled[: len(spelled) - len(name)] + new_name
    message = (
        f"{spelled}.initialize_carry(...) is called on the class (Flax 0.6 API); the current "
        f"API builds the carry from a configured cell and the shape of one input step"
    )
    args = ctx.old_args(call)
    if args is None or "size" not in args or "batch_dims" not in args:
        return ctx.add(
            call,
            "MIG001",
            message,
            f"{new_spelled}(features=<features>).initialize_carry(rng, <input shape>)",
            reason="the call does not have the old (rng, batch_dims, size) arguments",
        )
    rng, batch, size, init = (args.get(k) for k in ("rng", "batch_dims", "size", "init_fn"))
    seg = ctx.src.segment
    rng_src = seg(rng) if rng is not None else "rng"
    init_part = _carry_init(ctx, init)
    if name in _CONV_CELLS:
        return _conv_suggestion(
            ctx, call, message, new_spelled, rng_src, batch, size, init_part, family
        )
    dtype_part, x64_reason = "", None
    if init is None or ctx.known_initializer(init):  # a wrapped init_fn keeps its own dtype
        dtype_part, x64_reason = _x64(ctx, family, new_spelled, seg(size), init_part)
    parent_part = ", parent=None" if family == "flax" else ""
    # Only Flax cells are ever rewritten, so only their suggestion says what --fix writes.
    fix_note = f"; --fix writes 1; {_PARENT_NONE_WHY}" if family == "flax" else ""
    suggestion = (
        f"{new_spelled}(features={seg(size)}{init_part}{dtype_part}{parent_part})"
        f".initialize_carry("
        f"{rng_src}, {_with_placeholder(ctx.src, batch, '<input channels>')})"
        f"  # any positive <input channels> gives the same carry, since the carry of "
        f"{new_name} does not depend on it{fix_note}"
    )
    reason = None
    if family == "legacy":
        reason = _LEGACY_REASON
    elif held:
        reason = (
            f"{spelled} holds {name} here, but a caller may set another cell class; "
            f"build the carry from a configured cell, as the suggestion shows"
        )
    elif scanned:
        reason = (
            f"{spelled} is an nn.scan of {name}; build the carry from the cell itself, "
            f"{name}(features=...).initialize_carry(...)"
        )
    elif not _is_int_like(size):
        reason = f"size {seg(size)} is not an int, which {name} needs"
    elif _has_comment(seg(batch)):
        reason = "batch_dims contains a comment, which an automatic edit could misplace"
    elif x64_reason is not None:
        reason = x64_reason
    edits = None
    if reason is None:
        edits = _static_edits(ctx, call, owner, args, size, init, batch, dtype_part)
        if edits is None:
            reason = "the arguments are laid out in a way the fixer does not rewrite"
    return ctx.add(call, "MIG001", message, suggestion, edits=edits, reason=reason)


def _carry_init(ctx, init) -> str:
    """The carry_init part of the new cell for the old call's `init_fn` ("" when none).

    0.6 called ``init_fn(key, shape)``; the current API calls ``carry_init(key, shape, dtype)``
    with the cell's param_dtype. A Flax or JAX initializer takes that dtype, and is passed as it
    is. Anything else (a ``functools.partial`` that already sets ``dtype``, a function of two
    arguments) is wrapped so that it is called exactly as before, once bound as a default:
    ``lambda key, shape, dtype, init_fn=OLD: init_fn(key, shape)``."""
    if init is None:
        return ""
    seg = ctx.src.segment
    if ctx.known_initializer(init):
        return f", carry_init={seg(init)}"
    return f", carry_init=lambda key, shape, dtype, init_fn={seg(init)}: init_fn(key, shape)"


def _x64(ctx, family, spelled, size_src, init_part):
    """(the param_dtype part the new cell needs, a reason not to fix) under 64-bit floats.

    The old carry had JAX's default float (float64 with x64 on); the new one has the cell's
    param_dtype, float32 unless set. The cell built here only makes the carry (parent=None), so
    its param_dtype changes nothing else."""
    state, line, what = ctx.x64
    if family != "flax" or state is None:
        return "", None
    wide = float64_spelling(ctx.names)
    part = f", param_dtype={wide or 'jnp.float64'}"
    if state == "on" and wide is not None:
        return part, None
    edit = f"{spelled}(features={size_src}{init_part}{part}, parent=None).initialize_carry(...)"
    if state == "on":
        return part, (
            f"this file turns on jax_enable_x64 (line {line}), so the old carry was float64, "
            f"and the new one follows param_dtype (float32 unless set); write {edit} and "
            f"import jax.numpy as jnp"
        )
    return part, (
        f"this file may run with jax_enable_x64 on (line {line}: {what}); the old carry "
        f"was then float64, and the new one follows param_dtype (float32 unless set): "
        f"where x64 is on, write {edit}; where it is off, the same without param_dtype"
    )


def _static_edits(ctx, call, owner, args, size, init, batch, dtype_part=""):
    seg = ctx.src.segment
    features = f"(features={seg(size)}"
    features += f"{_carry_init(ctx, init)}{dtype_part}, parent=None)"  # only Flax cells get here; see _PARENT_NONE_WHY
    edits = [(ctx.src.end(owner), ctx.src.end(owner), features)]
    batch_kw = _keyword(call, "batch_dims")
    shape = _with_placeholder(ctx.src, batch, "1")
    if batch_kw is not None:
        edits.append((ctx.src.start(batch_kw), ctx.src.end(batch_kw), f"input_shape={shape}"))
    else:
        spans = _arg_spans(ctx.src, call)
        if spans is None:
            return None
        start, end = next((s, e) for s, e, node in spans if node is batch)
        edits.append((start, end, shape))
    remove = [_keyword(call, "size") or size]
    if init is not None:
        remove.append(_keyword(call, "init_fn") or init)
    removals = _removal_edits(ctx.src, call, remove)
    if removals is None:
        return None
    comment = _comment_edit(ctx.src, ctx.statement(call))
    return edits + removals + ([comment] if comment else [])


def _conv_suggestion(ctx, call, message, spelled, rng_src, batch, size, init_part, family):
    seg = ctx.src.segment
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
    return ctx.add(
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
