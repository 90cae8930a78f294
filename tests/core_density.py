"""How dense rnnlib's core is: ``python -m tests.core_density`` prints it, against the bar.

The core of rnnlib is judged at the density of the codebases it is compared with.

The core is what ``rnnlib.RNN`` imports, directly or not, plus the classic cells (Elman,
LSTM, GRU, MGU, ConvLSTM), the linear recurrences' base and the initialisers. Its code lines
(docstrings, comments and blank lines left out) are measured as written:

- a mean of at most 46 characters a line (Flax's ``recurrent.py`` averages about 38),
- at most 7% of lines at 90 columns or more,
- at most 1,100 lines.

A number here is a symptom, not a goal: a line folded to meet it is no simpler. The report names
the first lines at 90 columns or more, and the exit status is 1 while the core misses the bar.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGE = REPO_ROOT / "rnnlib"
ENTRY_MODULES = ["rnn", "simple", "lstm", "gru", "conv_lstm", "linear_rnn", "initializers"]

MEAN_CHARACTERS = 46
WIDE_COLUMNS = 90
WIDE_SHARE = 0.07
CODE_LINES = 1100


def module_path(name: str) -> Path | None:
    """The file of ``rnnlib.<name>``, or None when ``name`` is not a module of the package."""
    path = PACKAGE / f"{name.replace('.', '/')}.py"
    return path if path.is_file() else None


def imported_modules(path: Path) -> set[str]:
    """The rnnlib modules ``path`` imports, at module level or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "rnnlib" or node.module.startswith("rnnlib."):
                base = node.module.removeprefix("rnnlib").lstrip(".")
                for alias in node.names:
                    full = f"{base}.{alias.name}" if base else alias.name
                    if module_path(full):
                        found.add(full)
                if base and module_path(base):
                    found.add(base)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("rnnlib."):
                    name = alias.name.removeprefix("rnnlib.")
                    if module_path(name):
                        found.add(name)
    return found


def core_modules() -> list[str]:
    """The entry modules and everything in rnnlib they import, transitively."""
    seen: set[str] = set()
    todo = list(ENTRY_MODULES)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(imported_modules(module_path(name)) - seen)
    return sorted(seen)


def docstring_lines(tree: ast.Module) -> set[int]:
    """Line numbers taken by the docstrings of the module, its classes and its functions."""
    taken = set()
    for node in ast.walk(tree):
        kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        if isinstance(node, kinds) and node.body:
            first = node.body[0]
            value = getattr(first, "value", None)
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                taken.update(range(first.lineno, first.end_lineno + 1))
    return taken


def code_lines(path: Path) -> list[tuple[int, str]]:
    """``(number, line)`` for each line of code: not blank, not a comment, not a docstring."""
    source = path.read_text()
    skipped = docstring_lines(ast.parse(source))
    lines = []
    for number, line in enumerate(source.splitlines(), start=1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#") and number not in skipped:
            lines.append((number, line.rstrip()))
    return lines


def measure() -> tuple[list[str], list[str]]:
    """The core's code lines, and ``rnnlib/NAME.py:LINE`` for each at 90 columns or more."""
    per_module = {name: code_lines(module_path(name)) for name in core_modules()}
    lines = [line for found in per_module.values() for _, line in found]
    wide = [
        f"rnnlib/{name}.py:{number}"
        for name, found in per_module.items()
        for number, line in found
        if len(line) >= WIDE_COLUMNS
    ]
    return lines, wide


def misses(lines: list[str], wide: list[str]) -> list[str]:
    """Each part of the bar the core misses, in words; empty when it meets all three."""
    mean = sum(map(len, lines)) / len(lines)
    found = []
    if len(lines) > CODE_LINES:
        found.append(f"{len(lines)} code lines, above {CODE_LINES}")
    if mean > MEAN_CHARACTERS:
        found.append(f"{mean:.1f} characters a line on average, above {MEAN_CHARACTERS}")
    if len(wide) > WIDE_SHARE * len(lines):
        share = len(wide) / len(lines)
        found.append(f"{share:.1%} of lines at {WIDE_COLUMNS}+ columns, above {WIDE_SHARE:.0%}")
    return found


def main() -> int:
    lines, wide = measure()
    mean = sum(map(len, lines)) / len(lines)
    print(f"core: {', '.join(core_modules())}")
    print(
        f"{len(lines)} code lines (bar {CODE_LINES}), {mean:.1f} characters on average "
        f"(bar {MEAN_CHARACTERS}), {len(wide) / len(lines):.1%} at {WIDE_COLUMNS}+ columns "
        f"(bar {WIDE_SHARE:.0%})"
    )
    for miss in misses(lines, wide):
        print(f"misses: {miss}")
    if wide:
        print("widest first lines:", ", ".join(wide[:12]))
    return 1 if misses(lines, wide) else 0


if __name__ == "__main__":
    raise SystemExit(main())
