"""Whether a file runs JAX with 64-bit floats, which decides the dtype of an old carry.

Flax 0.6.11's static ``initialize_carry`` filled the carry with ``init_fn(key, shape)``, whose
default dtype is JAX's default float: float32, or float64 once ``jax_enable_x64`` is on. The
current ``initialize_carry`` passes the cell's ``param_dtype``, float32 unless set. So a rewrite
keeps the carry's dtype only if it says ``param_dtype=jnp.float64`` where x64 is on, and
nothing where it is off (float64 would then be refused with a warning).

:func:`x64_state` reads the file (every cell of a notebook) for the ways code of the period
turned x64 on, and says ``"on"`` when a top-level statement does it unconditionally
(``jax.config.update("jax_enable_x64", True)``), ``"maybe"`` when the file shows x64 another way
(a flag named ``jax_enable_x64``, ``JAX_ENABLE_X64`` in the environment, ``enable_x64()``, a
conditional update) or names a 64-bit JAX dtype (``jnp.float64``, ``dtype="float64"``), and None
otherwise. A file may be run with x64 turned on from outside (``JAX_ENABLE_X64=1`` in the shell,
another module); nothing in the file shows that, and the rewrite then gives a float32 carry.
"""

from __future__ import annotations

import ast

_FLAG = "jax_enable_x64"
_TRUE = (True, 1, "1", "true", "True", "TRUE")
_WIDE = frozenset({"float64", "complex128", "float_", "complex_"})


def x64_state(names) -> tuple[str | None, int | None, str]:
    """("on" | "maybe" | None, the line that shows it, what it is) for the file `names` read."""
    maybe = None
    for tree in names.trees:
        top = {id(stmt.value) for stmt in tree.body if isinstance(stmt, ast.Expr)}
        for node in ast.walk(tree):
            found = _signal(names, node)
            if found is None:
                continue
            strength, what = found
            if strength == "on" and id(node) in top:
                return "on", node.lineno, what
            if maybe is None:
                maybe = ("maybe", node.lineno, what)
    return maybe or (None, None, "")


def _signal(names, node):
    if isinstance(node, ast.Call) and _is_config_update(names, node.func):
        if node.args and _constant(node.args[0]) == _FLAG:
            value = _constant(node.args[1]) if len(node.args) > 1 else None
            if value in _TRUE:
                return "on", f"{_FLAG} set to {value!r}"
            if value is None:
                return "maybe", f"{_FLAG} set to a value known only when it runs"
            return None
    if isinstance(node, ast.Call):
        func = names.qualname(node.func) or ""
        if func.endswith("enable_x64") and func.startswith("jax"):
            return "maybe", f"{func}()"
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        if _FLAG in node.value.lower():
            return "maybe", f"the string {node.value!r}"
    if isinstance(node, ast.Attribute) and node.attr == _FLAG:
        return "maybe", f"the attribute {_FLAG}"
    if isinstance(node, ast.Attribute) and node.attr in _WIDE:
        if (names.qualname(node.value) or "") == "jax.numpy":
            return "maybe", f"the 64-bit dtype jax.numpy.{node.attr}"
    if isinstance(node, ast.keyword) and node.arg in ("dtype", "param_dtype"):
        if _constant(node.value) in _WIDE:
            return "maybe", f"{node.arg}={node.value.value!r}"
    return None


def _is_config_update(names, func) -> bool:
    if not isinstance(func, ast.Attribute) or func.attr != "update":
        return False
    qual = names.qualname(func.value) or ""
    return qual.startswith("jax") and qual.endswith("config")


def _constant(node):
    return node.value if isinstance(node, ast.Constant) else None


def float64_spelling(names) -> str | None:
    """How the file can write jax.numpy.float64: through its own name for jax.numpy, or
    through ``jax``; None when it has neither."""
    for alias, target in sorted(names.bound.items()):
        if target == "jax.numpy":
            return f"{alias}.float64"
    if names.bound.get("jax") == "jax":
        return "jax.numpy.float64"
    return None
