"""How well ``rnnlib.migrate`` does on real old-Flax code, measured against lines marked by hand.

Run from the repository root::

    .venv/bin/python tests/migrate_real_corpus_report.py [CORPUS]

The corpus is the one ``tests/migrate_real_corpus.json`` describes: real public files from
projects of the Flax 0.6 era that use recurrent cells, each with its repository, path, commit,
license and SHA-256, and the lines that break under flax>=0.7 marked by reading the code (and,
where the file could be run on its own, by running it under Flax 0.6.11 and the pinned Flax).
The files themselves are third-party code and are not part of this repository; ``CORPUS`` is a
folder holding them under ``files/`` (their licenses under ``LICENSES/``), looked for, in
order, in ``$MIGRATE_REAL_CORPUS``, ``tests/migrate_real_corpus/`` and
``../shared/migrate-real-corpus`` (beside the repository, as the Flax corpus of
``tests/migrate_corpus_report.py``). A file whose SHA-256 differs from the manifest's is an
error, not a measurement.

What is measured:

* A *site* is one marked span (``breaks``): a statement or call of the recurrent API that
  breaks. A finding *hits* a site when the line it is reported on falls in the span.
* **recall** = sites hit by an ``error`` or ``review`` finding / sites; **precision** =
  ``error``/``review`` findings that hit a site / ``error``/``review`` findings. ``advice`` is
  counted apart. Lines marked ``outside_scope`` (they break for reasons the tool does not look
  for, such as a module attribute Flax no longer has) are listed, and counted in a second,
  wider recall.
* **called clean**: files with a site on which the checker exits 0 (this must be none), before
  and after ``--fix``; after ``--fix``, a file must also not exit 0 while one of its sites is
  untouched.
* For ``--fix``, on a temporary copy: **fix recall** = sites whose lines the fixer changed /
  sites; **fix precision** = changed hunks that overlap a site / changed hunks.

The script changes nothing in the corpus and needs no network.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.migrate_corpus_report import MIGRATE_COMMENT, hunks, lines_of, run_tool  # noqa: E402

MANIFEST = ROOT / "tests" / "migrate_real_corpus.json"


def find_corpus(given: str | None = None) -> Path | None:
    """The first corpus folder (one with files/) among the places the docstring names."""
    candidates = [given, os.environ.get("MIGRATE_REAL_CORPUS")]
    candidates += [
        ROOT / "tests" / "migrate_real_corpus",
        ROOT.parent / "shared" / "migrate-real-corpus",
    ]
    for candidate in candidates:
        if candidate and (Path(candidate) / "files").is_dir():
            return Path(candidate)
    return None


def load_manifest() -> list[dict]:
    return json.loads(MANIFEST.read_text(encoding="utf-8"))["files"]


def check_files(corpus: Path, entries) -> list[str]:
    """Problems with the corpus: files missing, or not the bytes the manifest names."""
    problems = []
    for entry in entries:
        path = corpus / "files" / entry["file"]
        if not path.is_file():
            problems.append(f"{entry['file']}: missing")
        elif hashlib.sha256(path.read_bytes()).hexdigest() != entry["sha256"]:
            problems.append(f"{entry['file']}: not the file of {entry['url']} (SHA-256 differs)")
        if not (corpus / entry["license_file"]).is_file():
            problems.append(f"{entry['license_file']}: missing")
    return problems


def _hits(span, findings) -> list[dict]:
    lo, hi = span
    return [f for f in findings if lo <= f["line"] <= hi]


def _changed(span, fix_hunks) -> bool:
    lo, hi = span
    for i1, i2, _, _ in fix_hunks:
        if i1 == i2:  # lines inserted before old line i1 + 1
            if lo <= i1 + 1 <= hi + 1:
                return True
        elif i1 + 1 <= hi and i2 >= lo:
            return True
    return False


def measure(corpus: Path, entries, out=None) -> dict:
    """Run the checker and the fixer over the corpus; print a report to `out`; return the
    totals (see the module docstring)."""
    out = out or sys.stdout
    totals = dict(sites=0, hit=0, findings=0, true=0, advice=0, fixed_sites=0)
    totals.update(fix_hunks=0, fix_true=0, outside=0, outside_hit=0, files=len(entries))
    totals["repositories"] = len({e["repository"] for e in entries})
    called_clean, clean_after_fix, misses, false_findings = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for entry in entries:
            path = corpus / "files" / entry["file"]
            work = Path(tmp) / entry["file"]
            shutil.copyfile(path, work)
            status, result = run_tool(path)
            blocking = [f for f in result["findings"] if f["severity"] != "advice"]
            advice = len(result["findings"]) - len(blocking)
            sites = [tuple(b["lines"]) for b in entry["breaks"]]
            outside = [tuple(b["lines"]) for b in entry.get("outside_scope", [])]
            run_tool(work, "--fix")
            left_status, left = run_tool(work)
            old = lines_of(path)
            fixed = [line for line in lines_of(work) if MIGRATE_COMMENT not in line]
            fix_hunks = hunks(old, fixed)
            print(
                f"{entry['repository']} {entry['path']} @ {entry['commit'][:10]} "
                f"({entry['license']}): {len(sites)} site(s); exit {status}, "
                f"{len(blocking)} error/review finding(s), {advice} advice; "
                f"after --fix exit {left_status}",
                file=out,
            )
            for span in sites:
                hit = _hits(span, blocking)
                changed = _changed(span, fix_hunks)
                codes = ", ".join(sorted({f"{f['code']} {f['severity']}" for f in hit}))
                mark = f"found ({codes})" if hit else "MISSED"
                print(
                    f"  site lines {span[0]}-{span[1]}: {mark}{', fixed' if changed else ''}",
                    file=out,
                )
                totals["hit"] += bool(hit)
                totals["fixed_sites"] += changed
                if not hit:
                    misses.append(f"{entry['file']}:{span[0]}")
            for span in outside:
                hit = _hits(span, blocking)
                totals["outside_hit"] += bool(hit)
                print(
                    f"  outside the tool's scope, lines {span[0]}-{span[1]}: {'found' if hit else 'not found'}",
                    file=out,
                )
            for finding in blocking:
                if not any(_hits(span, [finding]) for span in sites + outside):
                    false_findings.append(f"{entry['file']}:{finding['line']} {finding['code']}")
                    print(
                        f"  finding on no marked line: {finding['line']} {finding['code']} {finding['severity']}",
                        file=out,
                    )
            totals["sites"] += len(sites)
            totals["outside"] += len(outside)
            totals["findings"] += len(blocking)
            totals["true"] += sum(1 for f in blocking if any(_hits(s, [f]) for s in sites))
            totals["advice"] += advice
            totals["fix_hunks"] += len(fix_hunks)
            totals["fix_true"] += sum(1 for h in fix_hunks if any(_changed(s, [h]) for s in sites))
            if sites and status == 0:
                called_clean.append(entry["file"])
            untouched = [s for s in sites if not _changed(s, fix_hunks)]
            if sites and left_status == 0 and untouched:
                clean_after_fix.append(entry["file"])
    totals.update(
        called_clean=called_clean,
        clean_after_fix=clean_after_fix,
        misses=misses,
        false_findings=false_findings,
    )

    def ratio(a, b):
        return f"{a}/{b} = {a / b:.0%}" if b else "n/a"

    print(
        f"\nsummary ({totals['files']} files from {totals['repositories']} repositories):", file=out
    )
    print(f"  recall     {ratio(totals['hit'], totals['sites'])} sites found", file=out)
    print(
        f"  precision  {ratio(totals['true'], totals['findings'])} error/review findings", file=out
    )
    print(f"  advice     {totals['advice']} finding(s), not counted", file=out)
    print(
        f"  with the lines outside the tool's scope: recall "
        f"{ratio(totals['hit'] + totals['outside_hit'], totals['sites'] + totals['outside'])}",
        file=out,
    )
    print(
        f"  fix recall     {ratio(totals['fixed_sites'], totals['sites'])} sites changed by --fix",
        file=out,
    )
    print(
        f"  fix precision  {ratio(totals['fix_true'], totals['fix_hunks'])} fixer hunks on a site",
        file=out,
    )
    print(f"  missed: {misses or 'none'}", file=out)
    print(f"  findings on no marked line: {false_findings or 'none'}", file=out)
    print(f"  called clean with a site: {called_clean or 'none'}", file=out)
    print(f"  exit 0 after --fix with a site untouched: {clean_after_fix or 'none'}", file=out)
    return totals


def main(argv) -> int:
    corpus = find_corpus(argv[0] if argv else None)
    if corpus is None:
        print(
            "no corpus found: give its folder, or set MIGRATE_REAL_CORPUS (see this script's "
            "docstring and tests/migrate_real_corpus.json)",
            file=sys.stderr,
        )
        return 2
    entries = load_manifest()
    problems = check_files(corpus, entries)
    if problems:
        print(
            "the corpus is not the one the manifest names:", *problems, sep="\n  ", file=sys.stderr
        )
        return 2
    print(f"corpus: {corpus}\n")
    totals = measure(corpus, entries)
    return 1 if totals["called_clean"] or totals["clean_after_fix"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
