"""How well ``rnnlib.migrate`` does on Flax's own migration, measured.

Run from the repository root::

    .venv/bin/python tests/migrate_corpus_report.py [CORPUS]

``CORPUS`` (default ``../shared/flax-migration-corpus``) holds ``before/``, files of the Flax
repository at the parent of its migration commit (plus two older versions without a pair), and
``after/``, the same files as Flax's maintainers migrated them by hand. The hand migration is the
answer key:

* A *site* is one hunk of the line diff from ``before/X`` to ``after/X`` whose old lines hold a
  construct of the 0.6 recurrent API (see ``OLD_API``: a cell class, ``initialize_carry``,
  ``RNN(``, ``cell_size``, ``nn.scan``, ``RNNCellBase``, a module built with no arguments but a
  name, as scanned classes were), read in the whole statements the hunk touches, or an
  insertion of ``num_feature_axes``. Every other hunk is listed with why it is left out:
  whitespace, an insertion serving another site (a constructor moved up, a ``features`` field
  added for a cell fixed elsewhere), lines only moved, names only changed (``Cell`` renamed
  ``ScanLSTM``), or old lines with no such construct once the corpus's own classes are hidden
  (fields renamed, tests added, and the calls of a wrapper whose own API the maintainers chose
  to change, such as ``SimpleLSTM.initialize_carry``: they break nothing when the wrapper is
  migrated by ``--fix``, which keeps that API).
* A finding *hits* a site when the statement it is reported on (for a class-level rule, the
  class) overlaps the hunk's lines in ``before/X`` (an insertion counts at the lines around it).
* **recall** = sites hit by an ``error`` or ``review`` finding / sites;
  **precision** = ``error``/``review`` findings that hit a site / ``error``/``review`` findings.
  ``advice`` is counted apart: it says something works but could be simpler.
* For ``--fix``, the same on a copy: **fix recall** = sites whose lines the fixer changed /
  sites; **fix precision** = changed hunks (``before`` to fixed) that overlap a site / changed
  hunks. How many fixed hunks read exactly as the maintainers wrote them (spaces aside) is shown,
  though a different correct edit is not wrong (the maintainers also reshaped the code).
* **called clean**: files where the checker exits 0 although the hand migration changed them
  (this must be none), before and after ``--fix``.

The script changes nothing in the corpus (it fixes a temporary copy) and needs no network.
"""

from __future__ import annotations

import ast
import difflib
import io
import json
import re
import shutil
import sys
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rnnlib.migrate import main  # noqa: E402

# What an old line must contain for its hunk to be a site: a construct of the 0.6 recurrent API
# (a cell class, initialize_carry, RNN, cell_size, nn.scan, RNNCellBase) or a module built with
# no arguments but a name, as scanned cell classes were (``Cell()``, ``LSTM(name="lstm")``).
OLD_API = re.compile(
    r"initialize_carry|LSTMCell|GRUCell|ConvLSTM|RNNCellBase|\bRNN\(|cell_size|\bscan\b|"
    r"\b[A-Z]\w*\((name=[^()]*)?\)"
)
CLASS_RULES = {"MIG004", "MIG006"}
MIGRATE_COMMENT = "# rnnlib.migrate:"


def run_tool(*args):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        status = main([str(a) for a in args] + ["--format", "json"])
    return status, json.loads(out.getvalue())


def lines_of(path: Path) -> list[str]:
    return [line.rstrip() for line in path.read_text(encoding="utf-8").splitlines()]


def hunks(old: list[str], new: list[str]):
    """(i1, i2, j1, j2) for each changed hunk, 0-based half-open line ranges."""
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    return [op[1:] for op in matcher.get_opcodes() if op[0] != "equal"]


def touches(lo: int, hi: int, i1: int, i2: int) -> bool:
    """1-based inclusive [lo, hi] overlaps the 0-based half-open hunk [i1, i2); an insertion
    (i1 == i2) counts at the lines on both sides of it."""
    if i1 == i2:
        return lo <= i1 + 1 and hi >= i1
    return lo <= i2 and hi >= i1 + 1


def spans(path: Path, findings):
    """1-based line span of the statement each finding sits in (the class for class rules)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = [n for n in ast.walk(tree) if isinstance(n, ast.stmt)]
    out = []
    for f in findings:
        if f["code"] in CLASS_RULES:
            found = [n for n in nodes if isinstance(n, ast.ClassDef) and n.lineno == f["line"]]
        else:
            found = [n for n in nodes if n.lineno <= f["line"] <= n.end_lineno]
            found = [n for n in found if not isinstance(n, (ast.ClassDef, ast.FunctionDef))]
        node = min(found, key=lambda n: n.end_lineno - n.lineno) if found else None
        out.append((node.lineno, node.end_lineno) if node else (f["line"], f["line"]))
    return out


def shape(line: str) -> str:
    """`line` with every name replaced by one letter: equal shapes differ only in names."""
    return re.sub(r"[A-Za-z_]\w*", "N", line.strip())


def statements(path: Path, old: list[str], i1: int, i2: int) -> str:
    """The old lines i1..i2, widened to the whole simple statements they belong to (a
    compound statement's header, such as a def line, stays as it is)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    lo, hi = i1 + 1, i2
    for node in ast.walk(tree):
        compound = isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        compound = compound or hasattr(node, "body")
        if isinstance(node, ast.stmt) and not compound:
            if node.lineno <= i2 and node.end_lineno >= i1 + 1:
                lo, hi = min(lo, node.lineno), max(hi, node.end_lineno)
    return "\n".join(old[lo - 1 : hi])


def mask(text: str, here, elsewhere) -> str:
    """`text` with definitions and uses of the corpus's own classes hidden (those of this
    file by name, those of another file as ``module.Name``): calls of a wrapper's own API
    (``SimpleLSTM.initialize_carry(...)``) are the project's, not Flax's."""
    text = re.sub(r"\bdef \w+", "def own", text)
    if here:
        names = "|".join(map(re.escape, sorted(here)))
        text = re.sub(rf"(?<![\w.])(?:{names})\b(?:\.\w+)*", "own", text)
    if elsewhere:
        names = "|".join(map(re.escape, sorted(elsewhere)))
        text = re.sub(rf"\b\w+\.(?:{names})\b(?:\.\w+)*", "own", text)
    return text


def report(corpus: Path) -> int:
    before_dir, after_dir = corpus / "before", corpus / "after"
    totals = dict(sites=0, hit=0, findings=0, true=0, advice=0, fixed_sites=0)
    totals.update(fix_hunks=0, fix_true=0, same=0)
    called_clean, fixed_clean_but_left = [], []
    print(f"corpus: {corpus}\n")
    own = {
        path.name: {
            node.name
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.ClassDef)
        }
        for path in before_dir.glob("*.py")
    }
    own_all = set().union(*own.values())
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "before"
        # A writable copy: the corpus may be read-only, and --fix refuses read-only files.
        shutil.copytree(before_dir, work, copy_function=shutil.copyfile)
        for path in [work, *work.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        for path in sorted(before_dir.iterdir()):
            if path.suffix != ".py":
                print(f"{path.name}: not Python (.py or .ipynb); the tool does not read it\n")
                continue
            status, result = run_tool(path)
            findings = result["findings"]
            blocking = [f for f in findings if f["severity"] != "advice"]
            advice = len(findings) - len(blocking)
            pair = after_dir / path.name
            fix_status, fixed = run_tool(work / path.name, "--fix")
            left_status, left = run_tool(work / path.name)
            left_blocking = [f for f in left["findings"] if f["severity"] != "advice"]
            print(
                f"{path.name}: {len(blocking)} error/review finding(s), {advice} advice; "
                f"exit {status}; after --fix {len(left_blocking)} left, exit {left_status}"
            )
            if not pair.exists():
                print("  (no hand-migrated pair: counted for 'called clean' only)\n")
                if status == 0:
                    called_clean.append(path.name)
                continue
            old, new = lines_of(path), lines_of(pair)
            sites = []
            added = {line.strip() for line in new} - {line.strip() for line in old}
            for i1, i2, j1, j2 in hunks(old, new):
                gone, came = old[i1:i2], new[j1:j2]
                where = f"before lines {i1 + 1}-{max(i2, i1 + 1)}"
                if not "".join(gone + came).strip():
                    continue  # whitespace only
                if not gone:
                    if any("num_feature_axes" in line for line in came):
                        sites.append((i1, i2, j1, j2))
                    else:
                        print(f"  left out (an insertion that serves another site): {where}")
                    continue
                moved_to = added if came else {line.strip() for line in new}
                if all(line.strip() in moved_to or not line.strip() for line in gone):
                    print(f"  left out (lines moved, not changed): {where}")
                    continue
                if [shape(line) for line in gone] == [shape(line) for line in came]:
                    print(f"  left out (names changed, nothing else): {where}")
                    continue
                old_text = mask(statements(path, old, i1, i2), own[path.name], own_all)
                if not OLD_API.search(old_text):
                    print(f"  left out (no 0.6 recurrent construct in the old lines): {where}")
                    continue
                sites.append((i1, i2, j1, j2))
            if sites and status == 0:
                called_clean.append(path.name)
            if sites and left_status == 0 and left_blocking:
                fixed_clean_but_left.append(path.name)
            found_spans = spans(path, blocking)
            hit = [any(touches(lo, hi, i1, i2) for lo, hi in found_spans) for i1, i2, _, _ in sites]
            true = [
                any(touches(lo, hi, i1, i2) for i1, i2, _, _ in sites) for lo, hi in found_spans
            ]
            fixed_lines = [
                line for line in lines_of(work / path.name) if MIGRATE_COMMENT not in line
            ]
            fix_hunks = hunks(old, fixed_lines)
            fixed_sites = [
                any(touches(f1 + 1, max(f2, f1 + 1), i1, i2) for f1, f2, _, _ in fix_hunks)
                for i1, i2, _, _ in sites
            ]
            fix_true = [
                any(touches(f1 + 1, max(f2, f1 + 1), i1, i2) for i1, i2, _, _ in sites)
                for f1, f2, _, _ in fix_hunks
            ]
            same = sum(
                1
                for f1, f2, g1, g2 in fix_hunks
                if any(
                    (i1, i2) == (f1, f2)
                    and [s.replace(" ", "") for s in new[j1:j2]]
                    == [s.replace(" ", "") for s in fixed_lines[g1:g2]]
                    for i1, i2, j1, j2 in sites
                )
            )
            for i, (i1, i2, _, _) in enumerate(sites):
                marks = ("found" if hit[i] else "MISSED") + (", fixed" if fixed_sites[i] else "")
                print(f"  site before lines {i1 + 1}-{max(i2, i1 + 1)}: {marks}")
            for (lo, _hi), ok, f in zip(found_spans, true, blocking):
                if not ok:
                    print(f"  finding off the hand migration: line {lo} {f['code']}")
            print()
            totals["sites"] += len(sites)
            totals["hit"] += sum(hit)
            totals["findings"] += len(blocking)
            totals["true"] += sum(true)
            totals["advice"] += advice
            totals["fixed_sites"] += sum(fixed_sites)
            totals["fix_hunks"] += len(fix_hunks)
            totals["fix_true"] += sum(fix_true)
            totals["same"] += same

    def ratio(a, b):
        return f"{a}/{b} = {a / b:.0%}" if b else "n/a"

    print("summary (paired files):")
    print(f"  recall     {ratio(totals['hit'], totals['sites'])} sites found")
    print(f"  precision  {ratio(totals['true'], totals['findings'])} error/review findings")
    print(f"  advice     {totals['advice']} finding(s), not counted")
    print(f"  fix recall     {ratio(totals['fixed_sites'], totals['sites'])} sites fixed")
    print(f"  fix precision  {ratio(totals['fix_true'], totals['fix_hunks'])} fixer hunks")
    print(f"  fixed exactly as the maintainers wrote: {totals['same']} hunk(s)")
    print(f"  called clean while changed by hand: {called_clean or 'none'}")
    print(f"  exit 0 after --fix with errors left: {fixed_clean_but_left or 'none'}")
    return 1 if called_clean or fixed_clean_but_left else 0


if __name__ == "__main__":
    default = ROOT.parent / "shared" / "flax-migration-corpus"
    sys.exit(report(Path(sys.argv[1]) if len(sys.argv) > 1 else default))
