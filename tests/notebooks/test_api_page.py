"""The API page's hand-written class signatures say what the classes are.

``book/api.md`` spells each cell's signature by hand (``.. autoclass:: rnnlib.LSTMCell(features,
gate_fn=jax.nn.sigmoid, ...)``), so that a default reads as the source writes it instead of as a
function's repr. Nothing ties those lines to the code, so this test does: every field in order,
which fields have a default, and that each default is the object the class really uses.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

import rnnlib

API_PAGE = Path(__file__).resolve().parents[2] / "book" / "api.md"
SIGNED = re.compile(r"^\.\. autoclass:: ([\w.]+)\((.*)\)\s*$", re.MULTILINE)


def signed_classes() -> list[tuple[str, str]]:
    """``(dotted class name, signature text)`` for every autoclass line with a signature."""
    return SIGNED.findall(API_PAGE.read_text())


def resolve(dotted: str):
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def written_parameters(signature: str) -> list[tuple[str, ast.expr | None]]:
    """The page's parameters in order, each with its default expression (None if none)."""
    arguments = ast.parse(f"def f({signature}): pass").body[0].args
    names = [arg.arg for arg in arguments.args]
    defaults = [None] * (len(names) - len(arguments.defaults)) + list(arguments.defaults)
    keyword = [arg.arg for arg in arguments.kwonlyargs]  # after the page's "*"
    return list(zip(names + keyword, defaults + list(arguments.kw_defaults)))


def written_keyword_only(signature: str) -> set[str]:
    """The parameters the page writes after ``*``: keyword-only."""
    return {arg.arg for arg in ast.parse(f"def f({signature}): pass").body[0].args.kwonlyargs}


def same_default(written: ast.expr, actual, module) -> bool:
    """Whether the page's default expression names the object the class uses: the same
    object, or for an initializer built by a call (``lecun_normal()``), a function of the
    same name built with the same arguments."""
    namespace = {"jax": jax, "jnp": jnp, "rnnlib": rnnlib, **vars(module)}
    if callable(actual) and hasattr(actual, "__module__"):  # a bare name, from its own module
        namespace.update(vars(importlib.import_module(actual.__module__)))
    value = eval(compile(ast.Expression(written), "<api.md>", "eval"), namespace)
    if isinstance(written, ast.Call):
        return _same_built_function(value, actual)
    return value is actual or (not callable(actual) and value == actual)


def _same_built_function(a, b) -> bool:
    """Two closures from the same factory, closing over equal values (closures in turn)."""
    if not (callable(a) and callable(b) and getattr(a, "__closure__", None) is not None):
        return a is b or (not callable(a) and a == b)
    if a.__qualname__ != b.__qualname__ or len(a.__closure__) != len(b.__closure__):
        return False
    return all(
        _same_built_function(x.cell_contents, y.cell_contents)
        for x, y in zip(a.__closure__, b.__closure__)
    )


def test_the_page_signs_the_cells_of_rnnlib_and_of_legacy():
    names = {name for name, _ in signed_classes()}
    for cell in ("LSTMCell", "GRUCell", "MGUCell", "SimpleCell", "ConvLSTMCell"):
        assert f"rnnlib.{cell}" in names
    assert "rnnlib.legacy.LSTMCell" in names


@pytest.mark.parametrize("dotted, signature", signed_classes(), ids=lambda v: v[:40])
def test_a_written_signature_matches_the_class_fields_and_defaults(dotted, signature):
    cls = resolve(dotted)
    fields = [field for field in dataclasses.fields(cls) if field.init]
    fields.sort(key=lambda field: field.kw_only is True)  # the constructor's order
    written = written_parameters(signature)
    assert [name for name, _ in written] == [field.name for field in fields], (
        f"{dotted}: the page lists {[name for name, _ in written]}, "
        f"the class's fields are {[field.name for field in fields]}"
    )
    keyword_only = {field.name for field in fields if field.kw_only is True}
    assert written_keyword_only(signature) == keyword_only, f"{dotted}: keyword-only fields"
    module = importlib.import_module(cls.__module__)
    for (name, default), field in zip(written, fields):
        has_default = field.default is not dataclasses.MISSING
        assert (default is not None) == has_default, f"{dotted}.{name}: default on one side only"
        if has_default:
            assert same_default(default, field.default, module), (
                f"{dotted}.{name}: the page writes {ast.unparse(default)}, "
                f"the class's default is {field.default!r}"
            )
