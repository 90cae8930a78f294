"""The rules of ``rnnlib.migrate``: one table, from which the module docstring, ``--help`` and the
migration chapter's table are made.

Each rule has a code, a severity and three sentences: what it finds, what happens to such code
under current Flax, and what ``--fix`` does about it. Severities:

``error``
    The code breaks under current Flax (an exception, or a different computation).
``review``
    The checker cannot prove the code safe: a cell class it cannot resolve, or an old-shaped
    call on an object whose type it does not know. It says where and why; a person decides.
``advice``
    Nothing breaks; there is a simpler current idiom. Advice never fails a run unless
    ``--strict`` is given.
"""

from __future__ import annotations

import dataclasses

ERROR, REVIEW, ADVICE = "error", "review", "advice"
SEVERITIES = (ERROR, REVIEW, ADVICE)


@dataclasses.dataclass(frozen=True)
class Rule:
    code: str
    severity: str
    title: str
    finds: str
    breaks: str
    fix: str
    # Lower severities some of its findings take, where `breaks` says when (MIG006).
    also: tuple[str, ...] = ()

    @property
    def severities(self) -> str:
        """The severity, or every severity its findings can take (``error/review/advice``)."""
        return "/".join((self.severity, *self.also))


RULES = (
    Rule(
        "MIG001",
        ERROR,
        "static initialize_carry",
        "`Cell.initialize_carry(rng, batch_dims, size)` called on a cell class: spelled out "
        "(`nn.LSTMCell`), through an alias, held in a variable, an attribute or a dataclass "
        "field (`self.cell_type`), or an `nn.scan` of one.",
        "`TypeError`: `initialize_carry` is an instance method taking `(rng, input_shape)`.",
        "rewritten to `Cell(features=size, parent=None).initialize_carry(rng, batch_dims + (1,))` "
        "for LSTMCell, OptimizedLSTMCell and GRUCell spelled out; a suggestion otherwise "
        "(ConvLSTM needs kernel_size; a held class may be set to another cell).",
    ),
    Rule(
        "MIG002",
        ERROR,
        "RNN cell_size",
        "`nn.RNN(cell, cell_size)` or `nn.RNN(cell, cell_size=n)`.",
        "`TypeError` for the keyword; a second positional argument is read as `time_major`.",
        "`cell_size` moved into the cell as `features` (or dropped when the cell's features "
        "is the same expression).",
    ),
    Rule(
        "MIG003",
        ERROR,
        "cell without features",
        "`LSTMCell()`, `GRUCell()`, `OptimizedLSTMCell()` or a scanned class "
        "(`nn.scan(nn.GRUCell, ...)()`, inline, stored on `self`, returned from a helper) built "
        "without `features`.",
        "`TypeError: ... missing 1 required positional argument: 'features'`.",
        "`features=` added when the width is written in the file (the RNN's `cell_size`, the "
        "`size` of an old `initialize_carry` on the same cell or on the carry it is called "
        "with) or readable from that carry (`carry[0].shape[-1]`, `hidden[i].shape[-1]`).",
    ),
    Rule(
        "MIG004",
        ADVICE,
        "hand-written scan",
        "A module that scans a cell with `nn.scan` and builds its carry in a class-level "
        "`initialize_carry` with the old API (on a cell class, or with `size`), the Flax 0.6 "
        "idiom; the same wrapper written against the current API is not reported.",
        "Nothing, once its cells have `features`: `nn.RNN` is shorter, but not a drop-in "
        "replacement for a step that resets the carry (RL code at episode boundaries).",
        "none (a structural change; parameter paths move); the advice goes, marked fixed, "
        "when `--fix` rewrites the carry (MIG001).",
    ),
    Rule(
        "MIG005",
        ERROR,
        "ConvLSTM renamed",
        "`nn.ConvLSTM`, the name `ConvLSTMCell` had in early linen releases.",
        "`AttributeError: module 'flax.linen' has no attribute 'ConvLSTM'`.",
        "renamed to `ConvLSTMCell` (an import becomes `ConvLSTMCell as ConvLSTM`).",
    ),
    Rule(
        "MIG006",
        ERROR,
        "RNNCellBase subclass",
        "A subclass of `nn.RNNCellBase` without `num_feature_axes`, or with an "
        "`initialize_carry` of the old `(rng, batch_dims, size)` form.",
        "Only inside `nn.RNN` (and so `nn.Bidirectional`): `nn.RNN` raises "
        "`NotImplementedError` (it reads `num_feature_axes`) or calls "
        "`initialize_carry(rng, input_shape)` with the wrong arguments. An error where the file "
        "hands the class to `nn.RNN`, review where an `nn.RNN` takes a cell the checker cannot "
        "see, advice otherwise (a cell scanned with `nn.scan` runs as it is).",
        "a `num_feature_axes` property returning 1 added when nothing in the class mentions a "
        "convolution (its carry and input are plain vectors); the old `initialize_carry` is "
        "left to you.",
        also=(REVIEW, ADVICE),
    ),
    Rule(
        "MIG007",
        ERROR,
        "old initialize_carry on an instance",
        "`cell.initialize_carry(rng, batch_dims, size)` on a cell instance (a variable, "
        "`self.cell`, `rnn.cell` of an `nn.RNN`, an instance of a scanned class).",
        "`TypeError`: the current method takes `(rng, input_shape)`.",
        "rewritten to `cell.initialize_carry(rng, batch_dims + (1,))` when the cell's width "
        "is the same `size` (the cell is given it by MIG002/MIG003 if need be).",
    ),
    Rule(
        "MIG008",
        REVIEW,
        "cannot prove safe",
        "An `nn.scan` over a class it cannot resolve whose name says it is a cell; an `nn.scan` "
        "of a 0.6 cell that leaves the function unbuilt; a cell built only from `**kwargs`, "
        "which may lack `features`; an `initialize_carry` call with the old three arguments on "
        "an object whose type it does not know (also inside a wrapper's own "
        "`initialize_carry` that hands them on to its cells).",
        "Breaks if the object is a Flax cell, as MIG001, MIG003 or MIG007 say.",
        "none; the message says what to check.",
    ),
)

BY_CODE = {rule.code: rule for rule in RULES}


def rules_text() -> str:
    """The rules as reStructuredText definitions, for the module docstring."""
    out = []
    for rule in RULES:
        out.append(f"``{rule.code}`` {rule.title} ({rule.severities})")
        for label, text in (("finds", rule.finds), ("breaks", rule.breaks), ("--fix", rule.fix)):
            out.append(f"    *{label}*: {text.replace('`', '``')}")
    return "\n".join(out)


def rules_help() -> str:
    """The rules in one line each, for ``--help``."""
    return "\n".join(
        f"  {rule.code} {rule.severities:<6} {rule.title}: --fix: {rule.fix}" for rule in RULES
    )


def rules_markdown() -> str:
    """The rules as a Markdown table, for the migration chapter."""
    rows = [
        "| Code | Severity | Finds | Under current Flax | `--fix` |",
        "| --- | --- | --- | --- | --- |",
    ]
    for rule in RULES:
        rows.append(
            f"| {rule.code} {rule.title} | {rule.severities} | {rule.finds} | {rule.breaks} "
            f"| {rule.fix} |"
        )
    return "\n".join(rows)
