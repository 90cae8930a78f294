"""The text of one file or cell: ast positions as string offsets, and the edits made on it."""

from __future__ import annotations

import ast
import io
import re
import tokenize

_PLACEHOLDER_COMMENT = (
    "# rnnlib.migrate: the last 1 in input_shape stands for the input channels; "
    "the carry ignores it."
)


class _Source:
    """Text of one file or notebook cell, with ast positions mapped to string offsets."""

    def __init__(self, text: str, parse_text: str | None = None):
        self.text = text
        self.parse_text = text if parse_text is None else parse_text
        self.line_starts = [0]
        for match in re.finditer(r"\r\n|\r|\n", text):
            self.line_starts.append(match.end())

    def offset(self, lineno: int, col_bytes: int) -> int:
        start = self.line_starts[lineno - 1]
        end = self.line_starts[lineno] if lineno < len(self.line_starts) else len(self.text)
        line = self.text[start:end]
        return start + len(line.encode("utf-8")[:col_bytes].decode("utf-8", "replace"))

    def start(self, node) -> int:
        return self.offset(node.lineno, node.col_offset)

    def end(self, node) -> int:
        return self.offset(node.end_lineno, node.end_col_offset)

    def segment(self, node) -> str:
        return self.text[self.start(node) : self.end(node)]

    def column(self, node) -> int:
        return self.start(node) - self.line_starts[node.lineno - 1] + 1

    def line_start_of(self, offset: int) -> int:
        return max(s for s in self.line_starts if s <= offset)


def _has_comment(text: str) -> bool:
    """True when `text` holds a comment token, or cannot be tokenized at all."""
    try:
        tokens = tokenize.generate_tokens(io.StringIO(text).readline)
        return any(tok.type == tokenize.COMMENT for tok in tokens)
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return True


def _open_paren(src: _Source, call: ast.Call) -> int | None:
    """Offset of the `(` that opens the argument list of `call`."""
    pos = src.end(call.func)
    text = src.text
    while pos < len(text) and text[pos] in " \t\r\n\\":
        pos += 1
    return pos if pos < len(text) and text[pos] == "(" else None


def _arg_spans(src: _Source, call: ast.Call) -> list[tuple[int, int, object]] | None:
    """(start, end, node) of every argument of `call` in source order, parentheses included."""
    lo = _open_paren(src, call)
    if lo is None:
        return None
    lo += 1
    hi = src.end(call) - 1
    spans = []
    for node in list(call.args) + list(call.keywords):
        start, end = src.start(node), src.end(node)
        if isinstance(node, ast.keyword) or isinstance(node, ast.Starred):
            spans.append((start, end, node))
            continue
        while True:  # widen over parentheses that wrap the argument itself
            left = src.text[lo:start].rstrip()
            right_text = src.text[end:hi]
            right = right_text.lstrip()
            if left.endswith("(") and right.startswith(")"):
                start = lo + len(left) - 1
                end = end + (len(right_text) - len(right)) + 1
            else:
                break
        spans.append((start, end, node))
    spans.sort(key=lambda span: span[0])
    return spans


def _removal_edits(src: _Source, call: ast.Call, remove: list) -> list | None:
    """Edits deleting the arguments `remove` from `call`, with their commas; None if unsafe."""
    spans = _arg_spans(src, call)
    if spans is None:
        return None
    gone = [any(node is r for r in remove) for _, _, node in spans]
    edits = []
    i = 0
    while i < len(spans):
        if not gone[i]:
            i += 1
            continue
        j = i
        while j + 1 < len(spans) and gone[j + 1]:
            j += 1
        if i > 0:
            start, end = spans[i - 1][1], spans[j][1]
        elif j + 1 < len(spans):
            start, end = spans[i][0], spans[j + 1][0]
        else:
            start, end = spans[i][0], spans[j][1]
        gaps = [
            src.text[spans[k][1] : spans[k + 1][0]]
            for k in range(max(i - 1, 0), j + 1)
            if k + 1 < len(spans)
        ]
        if any("#" in gap or "\\" in gap for gap in gaps):
            return None
        edits.append((start, end, ""))
        i = j + 1
    return edits


def _comment_edit(src: _Source, stmt) -> tuple[int, int, str] | None:
    """An edit putting the placeholder comment on its own line above `stmt`, when safe."""
    begin = src.line_start_of(src.start(stmt))
    indent = src.text[begin : src.start(stmt)]
    if indent.strip():
        return None
    if begin > 0 and src.text[:begin].rstrip("\r\n").endswith("\\"):
        return None
    newline = re.search(r"\r\n|\r|\n", src.text[begin:])
    newline = newline.group(0) if newline else "\n"
    return begin, begin, f"{indent}{_PLACEHOLDER_COMMENT}{newline}"


def _is_int_like(node) -> bool:
    if isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict, ast.JoinedStr, ast.Lambda)):
        return False
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int) and not isinstance(node.value, bool)
    return True


def _int_literal(node) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int)
        and not isinstance(node.value, bool)
    )


def _same(a, b) -> bool:
    return a is not None and b is not None and ast.dump(a) == ast.dump(b)


def _keyword(call: ast.Call, name: str):
    for kw in call.keywords:
        if kw.arg == name:
            return kw
    return None


def _has_star(call: ast.Call) -> bool:
    return any(isinstance(a, ast.Starred) for a in call.args) or any(
        kw.arg is None for kw in call.keywords
    )


def _with_placeholder(src: _Source, node, placeholder: str) -> str:
    """Source of `batch_dims + (placeholder,)`, folded into a tuple literal where there is one."""
    text = src.segment(node)
    if isinstance(node, ast.Tuple) and text.startswith("(") and text.endswith(")"):
        inner = text[1:-1].rstrip()
        if not inner:
            return f"({placeholder},)"
        return f"({inner} {placeholder})" if inner.endswith(",") else f"({inner}, {placeholder})"
    if not isinstance(node, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)) and not (
        isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)
    ):
        text = f"({text})"
    return f"{text} + ({placeholder},)"


def _in_axes(call: ast.Call, position: int):
    """The node `call` passes as nn.scan's in_axes (at `position` when positional); None when
    it is left at nn.scan's default, 0. Unpacked **kwargs give a node that is not a constant."""
    kw = _keyword(call, "in_axes")
    if kw is not None:
        return kw.value
    if len(call.args) > position and not _has_star(call):
        return call.args[position]
    unpacked = [kw.value for kw in call.keywords if kw.arg is None]
    unpacked += [a for a in call.args if isinstance(a, ast.Starred)]
    return unpacked[0] if unpacked else None


def _lacks_features(call: ast.Call) -> bool:
    return not call.args and _keyword(call, "features") is None


def _features_of(call: ast.Call):
    kw = _keyword(call, "features")
    if kw is not None:
        return kw.value
    return call.args[0] if call.args else None


def _cell_arg(rnn: ast.Call):
    if rnn.args:
        return rnn.args[0]
    kw = _keyword(rnn, "cell")
    return kw.value if kw is not None else None


def _one_line(text: str) -> str:
    """`text` with its line breaks and the indentation after them folded into single spaces."""
    text = re.sub(r"\s*(\r\n|\r|\n)\s*", " ", text)
    return re.sub(r" ([)\]}])", r"\1", re.sub(r"([(\[{]) ", r"\1", text))


def _apply(text: str, edits, lo: int = 0, hi: int | None = None) -> str:
    """`text[lo:hi]` with the edits that fall inside it applied."""
    hi = len(text) if hi is None else hi
    out, pos = [], lo
    for start, end, new in sorted(e for e in edits if lo <= e[0] and e[1] <= hi):
        out.append(text[pos:start])
        out.append(new)
        pos = end
    out.append(text[pos:hi])
    return "".join(out)
