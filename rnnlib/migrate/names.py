"""What the names of a file refer to: Flax's cell classes, nn.scan, nn.RNN, rnnlib.legacy."""

from __future__ import annotations

import ast

# 0.6-era cells that took no `features`; their carry does not depend on the input channels.
_FEATURELESS_CELLS = frozenset({"LSTMCell", "OptimizedLSTMCell", "GRUCell"})
# ConvLSTM was spelled `ConvLSTM` in early linen releases and `ConvLSTMCell` later.
_CONV_CELLS = frozenset({"ConvLSTMCell", "ConvLSTM"})
_FAMILIES = (
    ("flax.linen.recurrent.", "flax"),
    ("flax.linen.", "flax"),
    ("rnnlib.legacy.", "legacy"),
)
_SCANS = frozenset({"flax.linen.scan", "flax.linen.transforms.scan"})
# Names a star import (`from flax.linen import *`) is trusted to provide.
_STAR_NAMES = _FEATURELESS_CELLS | _CONV_CELLS | {"RNN", "scan"}
_INITIALIZER_MODULES = ("flax.linen.initializers.", "jax.nn.initializers.")
# What `nn`, `linen` and `legacy` mean in a file that never binds them.
_CONVENTIONAL = {
    "nn": "flax.linen",
    "linen": "flax.linen",
    "legacy": "rnnlib.legacy",
    "flax": "flax",
    "rnnlib": "rnnlib",
    "jax": "jax",
    "functools": "functools",
}
_LEGACY_REASON = (
    "rnnlib.legacy is the old API on purpose; move this code to the current API "
    "(flax.linen or rnnlib) by hand"
)
# Why the rewrite builds a linen cell with parent=None (said once in every such suggestion).
_PARENT_NONE_WHY = (
    "parent=None keeps the new cell from becoming a submodule of an enclosing compact "
    "module, where its auto-name would shift later cells' parameter names"
)


class _Names:
    """What the names of one file (or all cells of one notebook) refer to."""

    def __init__(self, trees):
        self.bound: dict[str, str] = {}
        self.local: set[str] = set()
        self.star: list[str] = []
        self.classes: set[str] = set()  # classes the file defines: its own, not Flax's
        self.scanned: dict[str, tuple[str, str]] = {}
        # The `nn.scan(...)` call each name in `scanned` was bound to (for its in_axes).
        self.scan_calls: dict[str, ast.Call] = {}
        self.trees = list(trees)
        for tree in trees:
            for node in ast.walk(tree):
                self._bind(node)
        for tree in trees:
            for node in ast.walk(tree):
                self._bind_scan(node)

    def _bind(self, node):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    self.bound[alias.asname] = alias.name
                else:
                    root = alias.name.split(".")[0]
                    self.bound[root] = root
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if alias.name == "*":
                    self.star.append(node.module)
                else:
                    self.bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            self.local.add(node.name)
            if isinstance(node, ast.ClassDef):
                self.classes.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            self.local.add(node.id)
        elif isinstance(node, ast.arg):
            self.local.add(node.arg)

    def _bind_scan(self, node):
        if not isinstance(node, ast.Assign):
            return
        targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
        if isinstance(node.value, ast.Call):
            cell = self.scanned_cell(node.value)
            for target in targets if cell else ():
                self.scanned[target] = cell
                self.scan_calls[target] = node.value
        elif self.cell_class(node.value):  # an alias such as `Cell = nn.LSTMCell`
            for target in targets:
                self.bound[target] = self.qualname(node.value)

    def qualname(self, node) -> str | None:
        if isinstance(node, ast.Name):
            if node.id in self.bound:
                return self.bound[node.id]
            if node.id in self.local:
                return None
            if node.id in _CONVENTIONAL:
                return _CONVENTIONAL[node.id]
            for module in self.star:
                found = _family(f"{module}.{node.id}")
                if found and found[1] in _STAR_NAMES:
                    return f"{module}.{node.id}"
            return None
        if isinstance(node, ast.Attribute):
            base = self.qualname(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def cell_class(self, node) -> tuple[str, str] | None:
        """(family, class name) when `node` names a recurrent cell class."""
        found = _family(self.qualname(node))
        if found and found[1] in _FEATURELESS_CELLS | _CONV_CELLS:
            return found
        return None

    def scanned_cell(self, call: ast.Call) -> tuple[str, str] | None:
        """The cell that `nn.scan(Cell, ...)` lifts, when `call` is such a call."""
        if self.qualname(call.func) in _SCANS and call.args:
            return self.cell_class(call.args[0])
        return None

    def is_rnn(self, node) -> str | None:
        found = _family(self.qualname(node))
        return found[0] if found and found[1] == "RNN" else None


def _current_name(name: str) -> str:
    """The current API's name for cell class `name`: Flax 0.6's `ConvLSTM` is `ConvLSTMCell`."""
    return "ConvLSTMCell" if name == "ConvLSTM" else name


def _family(qualname: str | None) -> tuple[str, str] | None:
    if not qualname:
        return None
    for prefix, family in _FAMILIES:
        rest = qualname[len(prefix) :]
        if qualname.startswith(prefix) and rest.isidentifier():
            return family, rest
    return None
