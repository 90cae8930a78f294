"""What the checker reports: a Finding (one use of the old API) and an Error (unreadable input)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Finding:
    """One use of the old API: where it is, what it is, and how to write it now."""

    path: str
    cell: int | None
    line: int
    col: int
    code: str
    message: str
    suggestion: str
    fixable: bool
    reason: str | None = None
    fixed: bool = False
    severity: str = "error"  # "error", "review" or "advice" (rnnlib.migrate.rules)
    # Private: (start, end, replacement) character spans in the file or cell text.
    edits: list = dataclasses.field(default_factory=list, repr=False)
    # The finding whose edits fix this one too (a cell's features written by its RNN's fix).
    partner: Finding | None = dataclasses.field(default=None, repr=False)
    # The node that gives the cell its width once fixed (MIG003), for the rules that join it.
    width: object = dataclasses.field(default=None, repr=False)
    # MIG002 on a cell built elsewhere: (constructor, cell_size, removal edits), for MIG003.
    pending: object = dataclasses.field(default=None, repr=False)

    def blocks(self, strict: bool = False) -> bool:
        """True when this finding, left unfixed, makes the run fail."""
        return not self.fixed and (self.severity != "advice" or strict)

    def location(self) -> str:
        cell = f"cell{self.cell}:" if self.cell is not None else ""
        return f"{self.path}:{cell}{self.line}:{self.col}"

    def as_json(self) -> dict:
        names = ("path", "cell", "line", "col", "code", "message", "suggestion", "fixable")
        out = {name: getattr(self, name) for name in names}
        out["severity"] = self.severity
        out["reason"] = self.reason
        out["fixed"] = self.fixed
        return out


@dataclasses.dataclass
class Error:
    """An input that could not be read or parsed."""

    path: str
    message: str
    cell: int | None = None
    line: int | None = None
    col: int | None = None

    def location(self) -> str:
        parts = [self.path]
        if self.cell is not None:
            parts.append(f"cell{self.cell}")
        if self.line is not None:
            parts.append(str(self.line))
            if self.col is not None:
                parts.append(str(self.col))
        return ":".join(parts)

    def as_json(self) -> dict:
        return dataclasses.asdict(self)
