"""rnnlib's core reads in one sitting: its import graph, and where the cells' equations
live. (No physical-line budget: one shaped the code by folding lines.)"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import rnnlib

PACKAGE = Path(rnnlib.__file__).parent
# The cells, their base, RNN, Bidirectional, the layers, the module convention, flip and
# the speed module: what a reader opens next to the book's chapters.
CELLS = ("lstm", "gru", "simple", "conv_lstm")
CORE = CELLS + ("cell_base", "rnn", "bidirectional", "linear", "module", "flip", "plan")
CELL_CLASSES = ("LSTMCell", "OptimizedLSTMCell", "GRUCell", "MGUCell", "SimpleCell", "ConvLSTMCell")
# The linear cells and their base: RNN picks their scan by a capability (coefficients), not a class.
LINEAR_CLASSES = ("LinearCellBase", "MinGRUCell", "MinLSTMCell", "RGLRUCell")


def _modules() -> list[str]:
    """Every module of rnnlib, as ``rnnlib.x.y``."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _imports(module: str) -> set[str]:
    """The rnnlib modules ``module`` imports (at any depth of its code)."""
    path = PACKAGE.parent.joinpath(*module.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rnnlib"):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in _modules() else node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("rnnlib")}
    return found - {module}


def _names_in_code(path: Path) -> set[str]:
    """Every name and attribute the code of ``path`` uses (docstrings and messages left out)."""
    tree = ast.parse(path.read_text())
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    names |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    return names | {
        a.name.split(".")[-1]
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom)
        for a in n.names
    }


def test_no_core_module_outside_the_cells_names_a_cell_class_or_an_activation():
    """RNN and the plan never ask what a cell is, and a cell's equations live in it alone:
    outside the cells, no code names a cell class or a cell's activation."""
    for name in set(CORE) - set(CELLS):
        used = _names_in_code(PACKAGE / f"{name}.py")
        for word in CELL_CLASSES + LINEAR_CLASSES + ("sigmoid", "tanh", "logistic", "relu"):
            assert word not in used, f"rnnlib/{name}.py names {word}"


def test_the_import_graph_of_rnnlib_has_no_cycle():
    graph = {m: {i for i in _imports(m) if i in _modules() and i != "rnnlib"} for m in _modules()}
    done, path = set(), []

    def visit(module):
        assert module not in path, "import cycle: " + " -> ".join(path + [module])
        if module in done:
            return
        path.append(module)
        for other in graph[module]:
            visit(other)
        path.pop()
        done.add(module)

    for module in graph:
        visit(module)


@pytest.mark.parametrize("module", [m for m in _modules() if m.count(".") == 1])
def test_every_module_imports_on_its_own(module):
    """In a fresh interpreter, importing the module first (an import cycle would fail)."""
    done = subprocess.run(
        [sys.executable, "-c", f"import {module}"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
