"""``--fix``: applying the findings' edits to files and notebooks, safely.

Each finding that can be fixed carries character-span edits in its unit's text. The fixer
applies them unit by unit, never two that overlap, then re-parses the result and checks it
again: what is left must be exactly the findings it did not fix, or nothing is written. It never
touches a file it cannot parse, leaves every byte outside the edited spans as it was, and
writes a notebook's JSON back in the layout it read (a notebook whose layout it cannot reproduce
byte for byte is left alone, with that reason). The bytes go to disk through
``rnnlib.migrate.files.write_back``; when it refuses, the findings stay unfixed with its reason.
"""

from __future__ import annotations

import json

from rnnlib.migrate.checker import Checker
from rnnlib.migrate.files import Refused, write_back
from rnnlib.migrate.findings import Error, Finding
from rnnlib.migrate.names import _Names
from rnnlib.migrate.notebooks import _mask_magics, _parse, _Unit
from rnnlib.migrate.source import _apply, _Source


def _json_style(text: str, data):
    """json.dumps options (and trailing text) that reproduce `text` exactly, or None."""
    for indent in (1, 2, 4, None):
        for sort_keys in (True, False):
            for ensure_ascii in (False, True):
                style = {"indent": indent, "sort_keys": sort_keys, "ensure_ascii": ensure_ascii}
                dumped = json.dumps(data, **style)
                for tail in ("\n", ""):
                    if dumped + tail == text:
                        return style, tail
    return None


def _wrapper(finding: Finding) -> str:
    """The class a MIG004 finding is about (its message starts with ``class NAME ``)."""
    return finding.message.split(" ", 2)[1]


def _checks_out(left: list[Finding], again: list[Finding]) -> bool:
    """Whether re-checking the rewritten text found exactly the findings left unfixed, except
    that a scan wrapper's advice (MIG004) goes once its carry is built the current way; such
    an advice is marked fixed, since the next run does not make it."""
    kept = [f for f in left if f.code != "MIG004"]
    if sorted(f.code for f in again if f.code != "MIG004") != sorted(f.code for f in kept):
        return False
    still = [_wrapper(f) for f in again if f.code == "MIG004"]
    advice = [f for f in left if f.code == "MIG004"]
    if not set(still) <= {_wrapper(f) for f in advice}:
        return False
    for finding in advice:
        if _wrapper(finding) not in still:
            finding.fixed = True
            finding.reason = None
    return True


def _fix_unit(
    unit: _Unit, findings: list[Finding], names: _Names, path: str, errors: list
) -> str | None:
    """The unit's new text with every fixable finding applied, or None when nothing changed."""
    taken = []
    for finding in findings:
        if not finding.fixable or not finding.edits:
            continue
        new = [edit for edit in finding.edits if edit not in taken]  # a shared comment once
        if any(a[0] < b[1] and b[0] < a[1] for a in new for b in taken):
            finding.fixable = False
            finding.reason = "its edit overlaps another fix; run --fix again"
            continue
        taken += new
        finding.fixed = True
    for finding in findings:
        if finding.partner is not None:
            finding.fixed = finding.partner.fixed
            if not finding.fixed:
                finding.fixable, finding.reason = False, finding.partner.reason
    if not taken:
        return None
    new_text = _apply(unit.src.text, taken)
    # Re-parse and re-check the result before anything is written: what is left must be
    # exactly the findings that were not fixed.
    parse_text = new_text if unit.src.parse_text == unit.src.text else _mask_magics(new_text)
    left = [f for f in findings if not f.fixed]
    try:
        tree = _parse(parse_text)
        again = Checker(path, unit.cell, _Source(new_text, parse_text), tree, names).run()
        ok = _checks_out(left, again)
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError):
        ok = False
    if not ok:
        for finding in findings:
            if finding.fixed:
                finding.fixed, finding.fixable = False, False
                finding.reason = "the rewritten code did not check out; left untouched"
        errors.append(
            Error(path, "internal check of the rewrite failed; file left untouched", unit.cell)
        )
        return None
    return new_text


def _write(path: str, doc: dict, data: bytes, findings: list[Finding], errors: list) -> bool:
    """Write `data` over the file `path` was read from (rnnlib.migrate.files); when that is
    refused, the findings it would have fixed are left, with the reason."""
    try:
        write_back(path, data, doc["raw"], doc["stat"])
    except Refused as exc:
        errors.append(Error(path, f"--fix: {exc}"))
        for finding in findings:
            if finding.fixed:
                finding.fixed, finding.fixable = False, False
                finding.reason = f"--fix did not write the file: {exc}"
        return False
    return True


def _fix_file(path: str, doc: dict, findings: list[Finding], errors: list) -> bool:
    """Rewrite `path` in place; True when the file changed."""
    if doc["kind"] == "ipynb" and doc.get("failed"):
        for finding in findings:
            finding.fixable, finding.reason = False, "another cell of this notebook does not parse"
        return False
    style = None
    if doc["kind"] == "ipynb":
        style = _json_style(doc["text"], doc["data"])
        if style is None:
            for finding in findings:
                if finding.fixable:
                    finding.fixable = False
                    finding.reason = (
                        "the notebook's JSON layout cannot be reproduced byte for "
                        "byte; fix it by hand or re-save it with Jupyter first"
                    )
            return False
    new_texts = {}
    names = _Names([unit.tree for unit in doc["units"]])
    for unit in doc["units"]:
        mine = [f for f in findings if f.cell == unit.cell]
        new = _fix_unit(unit, mine, names, path, errors)
        if new is not None:
            new_texts[unit.cell] = new
    if not new_texts:
        return False
    if doc["kind"] == "py":
        return _write(path, doc, new_texts[None].encode(doc["encoding"]), findings, errors)
    for index, new in new_texts.items():
        cell = doc["data"]["cells"][index - 1]
        old = cell["source"]
        if isinstance(old, list):
            cell["source"] = new.splitlines(True) if "".join(old).splitlines(True) == old else [new]
        else:
            cell["source"] = new
    options, tail = style
    return _write(
        path, doc, (json.dumps(doc["data"], **options) + tail).encode("utf-8"), findings, errors
    )
