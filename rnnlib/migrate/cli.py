"""The command line: ``python -m rnnlib.migrate PATH... [--fix] [--format json] [--strict]``."""

from __future__ import annotations

import argparse
import json
import os
import sys

from rnnlib.migrate.files import Refused, iter_inputs, read_bytes
from rnnlib.migrate.findings import Error, Finding
from rnnlib.migrate.fixer import _fix_file
from rnnlib.migrate.notebooks import check_document, parse_input
from rnnlib.migrate.rules import rules_help

# Measured by tests/migrate_corpus_report.py on Flax's own migration and by
# tests/migrate_real_corpus_report.py on real code; shown in --help and in the module docstring.
# Update it when the rules change (the scripts print these numbers). It speaks of the tool only:
# a user running --help does not have this repository's tests/ folder.
MEASURED = (
    "Measured on Flax's own migration (the 7 Python files "
    "Flax's maintainers migrated by hand in commit b6ab7d69, compared hunk by hunk with what "
    "this tool reports and fixes on the files before it): recall 52/52 sites, precision 74/74 "
    "error/review findings; --fix changed 51 of the 52 sites (the one left is a ConvLSTM "
    "carry, which needs kernel_size) and nothing else (51/51 hunks). No file is called clean "
    "that the maintainers had to change (examples/sst2/models_test.py changed only because "
    "they changed their own SimpleLSTM wrapper; it runs unchanged against models.py as --fix "
    "migrates it). Limits: a site is a hunk whose old statements hold a 0.6 construct, a "
    "definition tuned on this corpus; the corpus is Flax's own code (tests, examples), not "
    "the RL or research code of the period; a MyST Markdown notebook (the "
    "Flax docs' linen_intro.md) is not read at all. "
    "Measured on real code of the period (17 public files "
    "from 10 projects, breaking lines marked by hand): recall 33/33 sites, precision 33/34 "
    "error/review findings (one review of a call on a project's own wrapper); --fix changes 24 "
    "of the sites and nothing else, and each file it leaves with exit 0 that runs on its own "
    "gives Flax 0.6.11's outputs under current Flax. That corpus was gathered while these "
    "rules were improved (recall 31/33 before), so it is not held out."
)


def _report_text(findings, errors, fixed_files, fix: bool, strict: bool, out, err):
    for finding in findings:
        status = ""
        if fix:
            status = " [fixed]" if finding.fixed else " [not fixed]"
        print(
            f"{finding.location()}: {finding.code} {finding.severity}: {finding.message}{status}",
            file=out,
        )
        print(f"    suggestion: {finding.suggestion}", file=out)
        if not finding.fixed:
            if finding.fixable:
                print("    fix: available with --fix", file=out)
            else:
                print(f"    fix: not automatic: {finding.reason}", file=out)
    for error in errors:
        print(f"{error.location()}: error: {error.message}", file=err)
    files = len({f.path for f in findings})
    summary = f"{len(findings)} finding(s) in {files} file(s)"
    if fix:
        fixed = sum(f.fixed for f in findings)
        summary += f"; fixed {fixed} in {len(fixed_files)} file(s), {len(findings) - fixed} left"
    else:
        summary += f"; {sum(f.fixable for f in findings)} fixable with --fix"
    advice = sum(1 for f in findings if not f.fixed and f.severity == "advice")
    if advice and not strict:
        summary += f"; {advice} of them advice, which fails a run only with --strict"
    unwritten = sum(1 for e in errors if e.message.startswith("--fix:"))
    if len(errors) > unwritten:
        summary += f"; {len(errors) - unwritten} input(s) could not be read"
    if unwritten:
        summary += f"; {unwritten} file(s) not rewritten by --fix"
    print(summary, file=out)


def _one_file(path: str, st, fix: bool, errors: list) -> tuple[list[Finding], bool]:
    """Check (and with `fix`, rewrite) one file: (its findings, whether it changed). What goes
    wrong with it is one Error; the run goes on with the next file."""
    try:
        raw = read_bytes(path, st)
    except Refused as exc:
        errors.append(Error(path, str(exc)))
        return [], False
    doc = parse_input(path, raw, errors)
    if doc is None:
        return [], False
    doc["raw"], doc["stat"] = raw, st
    found: list[Finding] = []
    try:
        found = check_document(path, doc)
        return found, bool(fix and found and _fix_file(path, doc, found, errors))
    except (RecursionError, MemoryError):
        errors.append(Error(path, "cannot check: its code is nested too deeply (RecursionError)"))
    except Exception as exc:  # a fault of the checker's: report it, keep the user's run going
        errors.append(
            Error(
                path,
                f"internal error of rnnlib.migrate ({type(exc).__name__}: {exc}); "
                "the file is unchanged; please report this",
            )
        )
    for finding in found:
        if finding.fixed:
            finding.fixed, finding.fixable = False, False
            finding.reason = "not written: the run failed on this file"
    return found, False


def main(argv: list[str] | None = None) -> int:
    """Run the migration checker; returns the exit status: 0 when nothing that breaks (or
    needs review) is left, 1 when something is, 2 when an input could not be read or --fix
    could not write a file."""
    parser = argparse.ArgumentParser(
        prog="python -m rnnlib.migrate",
        description="Find (and with --fix, rewrite) code that uses Flax 0.6's recurrent API.",
        epilog=(
            "rules (severity: error breaks under current Flax, review cannot be proved safe, "
            "advice breaks nothing):\n" + rules_help() + "\n\n" + MEASURED + "\n\n"
            "exit status: 0 nothing left that breaks or needs review (advice too with "
            "--strict), 1 something is left, 2 an input could not be read or --fix could not "
            "write a file (each said on stderr; the other files are still checked)"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help=".py/.ipynb files or folders")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--fix", action="store_true", help="rewrite the unambiguous cases")
    parser.add_argument("--strict", action="store_true", help="advice fails the run too (for CI)")
    args = parser.parse_args(argv)
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):  # paths that are not valid UTF-8 print escaped
            stream.reconfigure(errors="backslashreplace")
    try:
        return _run(args)
    except KeyboardInterrupt:
        print(
            "rnnlib.migrate: interrupted; every file is whole (written, or as it was)",
            file=sys.stderr,
        )
        return 130
    except BrokenPipeError:  # the reader of the report went away (| head)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def _run(args) -> int:
    errors: list[Error] = []
    findings: list[Finding] = []
    fixed_files, fully_fixed = [], []
    for path, st in iter_inputs(args.paths, errors):
        found, changed = _one_file(path, st, args.fix, errors)
        if changed:
            fixed_files.append(path)
            if not any(f.blocks(args.strict) for f in found):
                fully_fixed.append(path)
        findings += found

    if args.format == "json":
        payload = {
            "findings": [f.as_json() for f in findings],
            "errors": [e.as_json() for e in errors],
            "fixed_files": fixed_files,
            "fully_fixed_files": fully_fixed,
        }
        print(json.dumps(payload, indent=2))
    else:
        _report_text(findings, errors, fixed_files, args.fix, args.strict, sys.stdout, sys.stderr)
    if errors:
        return 2
    return 1 if any(f.blocks(args.strict) for f in findings) else 0


if __name__ == "__main__":
    sys.exit(main())
