"""Every reference into this repository that the book hands a reader resolves in its history.

A reader copies `rev: <commit>` into a pre-commit configuration, downloads a raw file at a commit,
installs `git+https://github.com/OWNER/NAME@main`, opens a notebook in Colab at `blob/main/...`
or follows a link to a source file. Each names a ref (a commit or a branch) and often a path; a
ref that does not exist, or a path missing at it, fails for every reader. These tests collect
every such reference from the book (its Markdown pairs, its notebooks, api.md, intro.md,
programs/README.md) and the README, and check each against this repository's git history:
the ref is a commit here (pins: a full hash, on main), and each path exists at it.

They need the whole history. In a shallow clone (actions/checkout's default depth of 1) a pinned
commit is missing although it exists upstream, so they fail and say how to fetch it, rather than
skip: a skipped check here would pass a broken pin.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.book_hygiene import REPO_ROOT, load_repository

SLUG = re.escape(load_repository().slug)
BRANCH = load_repository().branch
REF = r"[\w.-]+"
PATH = r"[\w./-]*[\w/-]"


def sources() -> list[Path]:
    """The files whose references a reader follows."""
    book = REPO_ROOT / "book"
    files = [*sorted((book / "md").glob("*.md")), *sorted(book.glob("*.ipynb"))]
    files += [book / "api.md", book / "intro.md", book / "programs" / "README.md"]
    return [*files, REPO_ROOT / "README.md"]


@dataclass(frozen=True)
class Reference:
    file: str
    text: str  # as it stands in the file
    ref: str
    path: str | None  # None: the ref alone (pip's git+ URL: the package at its root)
    pin: bool  # a pin a reader keeps: must be a full commit hash, on the main branch


def readable(path: Path) -> str:
    """What a reader reads in a file: a notebook's cells and outputs, as text."""
    text = path.read_text(encoding="utf-8")
    if path.suffix != ".ipynb":
        return text
    parts = []
    for cell in json.loads(text)["cells"]:
        parts.append("".join(cell["source"]))
        for output in cell.get("outputs", []):
            shown = output.get("text") or output.get("data", {}).get("text/plain", "")
            parts.append("".join(shown))
    return "\n".join(parts)


def references_in(text: str, file: str) -> list[Reference]:
    found = []

    def add(match, ref, path, pin):
        found.append(Reference(file, match.group(0), ref, path and path.rstrip("/"), pin))

    # pre-commit: `repo: <this repository>` and the `rev:` under it.
    revs = list(re.finditer(r"^\s*rev: *(\S+)", text, re.M))
    pairs = list(re.finditer(rf"repo: https://github\.com/{SLUG}\s*\n\s*rev: *({REF})", text))
    assert len(pairs) == len(revs), (
        f"{file}: a `rev:` that is not under `repo: https://github.com/{load_repository().slug}`"
        f" cannot be checked against this repository: {[m.group(0) for m in revs]}"
    )
    for match in pairs:
        add(match, match.group(1), ".pre-commit-hooks.yaml", True)
    # Raw files, written whole or as RAW=<base> and "$RAW/<path>".
    raw = rf"https://raw\.githubusercontent\.com/{SLUG}/({REF})"
    for match in re.finditer(rf"{raw}/({PATH})", text):
        add(match, match.group(1), match.group(2), True)
    bases = list(re.finditer(rf"^RAW={raw}$", text, re.M))
    uses = list(re.finditer(rf"\$RAW/({PATH})", text))
    assert bases or not uses, f"{file}: $RAW is used but never set: {uses[0].group(0)}"
    for base in bases:
        add(base, base.group(1), None, True)
        for use in uses:
            add(use, base.group(1), use.group(1), True)
    # pip's git URLs: @ref, or none (the default branch).
    for match in re.finditer(rf"git\+https://github\.com/{SLUG}(?:\.git)?(?:@({REF}))?", text):
        add(match, match.group(1) or BRANCH, "pyproject.toml", False)
    # Links to a file or folder at a ref, on GitHub or in Colab.
    for host in [r"github\.com", r"colab\.research\.google\.com/github"]:
        for match in re.finditer(rf"https://{host}/{SLUG}/(?:blob|tree)/({REF})/({PATH})", text):
            add(match, match.group(1), match.group(2), False)
    return found


def all_references() -> list[Reference]:
    found = []
    for path in sources():
        relative = path.relative_to(REPO_ROOT).as_posix()
        found += references_in(readable(path), relative)
    return found


def git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def history():
    """Fails, not skips, where the history these checks need is not here."""
    inside = git("rev-parse", "--is-inside-work-tree")
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        pytest.fail(
            f"{REPO_ROOT} is not a git checkout; the book's references are checked against "
            "this repository's history. Run these tests in a clone (git clone)."
        )
    if git("rev-parse", "--is-shallow-repository").stdout.strip() != "false":
        pytest.fail(
            "this clone is shallow, so the commits the book pins may be missing from it. "
            "Fetch the whole history (`git fetch --unshallow`, or actions/checkout with "
            "`fetch-depth: 0`) and run again."
        )


def commit_of(ref: str) -> str | None:
    """The commit a ref names here: a branch as a local or remote-tracking one, or a hash."""
    for name in [ref, f"origin/{ref}"]:
        done = git("rev-parse", "--verify", "--quiet", f"{name}^{{commit}}")
        if done.returncode == 0:
            return done.stdout.strip()
    return None


def test_the_book_hands_out_references_of_every_kind():
    # The collection itself works: each kind the book uses is found at least once.
    references = all_references()
    kinds = {
        "rev": any(r.text.startswith("repo:") for r in references),
        "raw": any("raw.githubusercontent" in r.text for r in references),
        "pip": any(r.text.startswith("git+") for r in references),
        "colab": any("colab.research" in r.text for r in references),
        "link": any(r.text.startswith("https://github.com/") for r in references),
    }
    assert all(kinds.values()), kinds
    assert any(r.file == "README.md" for r in references)


def test_the_collection_reads_each_kind_of_reference_and_its_path():
    slug = load_repository().slug
    text = (
        f"  - repo: https://github.com/{slug}\n    rev: {'a' * 40}\n"
        f"RAW=https://raw.githubusercontent.com/{slug}/{'b' * 40}\n"
        'curl -o x "$RAW/tools/x.py"\n'
        f"pip install 'rnnlib @ git+https://github.com/{slug}@main'\n"
        f"pip install git+https://github.com/{slug}\n"
        f"[badge](https://colab.research.google.com/github/{slug}/blob/main/book/a.ipynb)\n"
        f"see [here](https://github.com/{slug}/blob/main/rnnlib/rnn.py#L10).\n"
    )
    found = [(r.ref, r.path, r.pin) for r in references_in(text, "x.md")]
    assert found == [
        ("a" * 40, ".pre-commit-hooks.yaml", True),
        ("b" * 40, None, True),
        ("b" * 40, "tools/x.py", True),
        ("main", "pyproject.toml", False),
        (BRANCH, "pyproject.toml", False),
        ("main", "rnnlib/rnn.py", False),
        ("main", "book/a.ipynb", False),
    ]
    # A rev of someone else's hooks cannot be checked here, and says so.
    with pytest.raises(AssertionError, match="cannot be checked against this repository"):
        references_in("  - repo: https://github.com/astral-sh/ruff-pre-commit\n    rev: v1\n", "y")


def test_every_reference_names_a_commit_of_this_repository(history):
    missing = [r for r in all_references() if commit_of(r.ref) is None]
    assert missing == [], "\n".join(
        f"{r.file}: {r.text}: no commit {r.ref!r} here" for r in missing
    )


def test_every_pin_is_a_full_hash_of_a_commit_on_main(history):
    main = commit_of(BRANCH)
    assert main, f"no branch {BRANCH!r} here (nor origin/{BRANCH})"
    pins = [r for r in all_references() if r.pin]
    assert pins, "the book pins nothing; the appendix's hook and download should"
    wrong = []
    for r in pins:
        if not re.fullmatch(r"[0-9a-f]{40}", r.ref):
            wrong.append(f"{r.file}: {r.text}: {r.ref!r} is not a full commit hash")
        elif git("merge-base", "--is-ancestor", r.ref, main).returncode != 0:
            wrong.append(f"{r.file}: {r.text}: {r.ref} is not on {BRANCH}")
    assert wrong == [], "\n".join(wrong)


def test_every_path_exists_at_the_ref_that_names_it(history):
    missing = []
    for r in all_references():
        commit = commit_of(r.ref)
        if commit and r.path and git("cat-file", "-e", f"{commit}:{r.path}").returncode != 0:
            missing.append(f"{r.file}: {r.text}: no {r.path} at {r.ref}")
    assert missing == [], "\n".join(missing)


def test_a_shallow_clone_fails_these_checks_and_says_why(history, tmp_path):
    # What actions/checkout makes by default: one commit, no history. The checks fail there,
    # with the way out; none of them is skipped.
    clone = tmp_path / "shallow"
    done = subprocess.run(
        ["git", "clone", "--quiet", "--depth", "1", REPO_ROOT.as_uri(), str(clone)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/notebooks/test_references.py", "-k", "not shallow"]
        + ["-q", "-rfE", "-p", "no:cacheprovider", "--color=no"],
        cwd=clone,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 1, run.stdout
    assert "this clone is shallow" in run.stdout and "fetch-depth: 0" in run.stdout
    assert " skipped" not in run.stdout, run.stdout
