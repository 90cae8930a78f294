"""The Flax API page's tables, read against the installed Flax.

book/md/flax_api.md states, in markdown tables, which recurrent classes linen and NNX have,
the leading constructor and ``initialize_carry`` arguments, and defaults that differ. Each
row is checked here by introspecting the installed classes, so the page fails the day Flax
changes under it.
"""

import inspect
from pathlib import Path

import flax.linen as nn
import pytest
from flax import nnx

PAGE = Path(__file__).resolve().parents[2] / "book" / "md" / "flax_api.md"
LIBRARIES = {"flax.linen": nn, "flax.nnx": nnx}


def tables(text):
    """Each markdown table in ``text`` as a (header, rows) pair of string lists."""
    found, block = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            block.append([cell.strip() for cell in line.strip("|").split("|")])
            continue
        if block:
            found.append((block[0], block[2:]))
        block = []
    return found


def table(text, header):
    """The rows of the one table in ``text`` whose header is ``header``."""
    matches = [rows for head, rows in tables(text) if head == header]
    assert len(matches) == 1, f"expected one table headed {header}; found {len(matches)}"
    return matches[0]


def arguments(cls):
    params = inspect.signature(cls.__init__).parameters.values()
    return {p.name: p for p in params if p.name != "self"}


def leading(cls):
    params = arguments(cls).values()
    skip = {"rngs"}
    return [p.name for p in params if p.default is p.empty and p.name not in skip]


def carry_args(cls):
    params = inspect.signature(cls.initialize_carry).parameters
    return [name for name in params if name != "self"]


def default(cls, arg):
    param = arguments(cls).get(arg)
    if param is None:
        return "absent"
    value = param.default
    return getattr(value, "__qualname__", repr(value)).split(".")[0]


def class_rows_wrong(text):
    rows = table(text, ["class", "flax.linen", "flax.nnx"])
    wrong = []
    for name, *cells in rows:
        for library, cell in zip(LIBRARIES.values(), cells):
            has = "yes" if hasattr(library, name) else "no"
            if cell != has:
                wrong.append(f"{library.__name__}.{name}: page says {cell}, Flax {has}")
    return wrong


def signature_rows_wrong(text):
    header = ["library", "constructor's leading arguments", "initialize_carry's arguments"]
    wrong = []
    for library, ctor, carry in table(text, header):
        cls = LIBRARIES[library].LSTMCell
        found = (", ".join(leading(cls)), ", ".join(carry_args(cls)))
        if (ctor, carry) != found:
            wrong.append(f"{library}: page says {(ctor, carry)}, Flax {found}")
    return wrong


def default_rows_wrong(text):
    wrong = []
    for name, arg, *cells in table(text, ["class", "argument", "flax.linen", "flax.nnx"]):
        for library, cell in zip(LIBRARIES.values(), cells):
            found = default(getattr(library, name), arg)
            if cell != found:
                wrong.append(f"{library.__name__}.{name}({arg}): page {cell}, Flax {found}")
    return wrong


CHECKS = [class_rows_wrong, signature_rows_wrong, default_rows_wrong]


@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__)
def test_every_row_of_the_page_matches_the_installed_flax(check):
    assert check(PAGE.read_text()) == []


@pytest.mark.parametrize(
    ("check", "row", "altered"),
    [
        (class_rows_wrong, "| MGUCell | yes | no |", "| MGUCell | yes | yes |"),
        (
            signature_rows_wrong,
            "| flax.linen | features | rng, input_shape |",
            "| flax.linen | features | input_shape, rng |",
        ),
        (
            default_rows_wrong,
            "| SimpleCell | dtype | None | float32 |",
            "| SimpleCell | dtype | None | None |",
        ),
    ],
    ids=["classes", "signatures", "defaults"],
)
def test_a_deliberately_altered_row_is_reported(check, row, altered):
    text = PAGE.read_text()
    assert row in text
    wrong = check(text.replace(row, altered))
    assert len(wrong) == 1


def test_a_missing_table_is_an_error_naming_its_header():
    with pytest.raises(AssertionError, match="expected one table headed"):
        class_rows_wrong("no tables here")
