"""Notebook hygiene for this book: the generic rules for any notebook, and the book's own.

The generic rules live in ``tools/notebook_hygiene.py``, one file that needs only the Python
standard library, which readers copy into their own repositories (the appendix on testing
notebooks shows how) and which ``.pre-commit-hooks.yaml`` offers as the pre-commit hook
``notebook-hygiene``. They catch what nbval cannot see by itself: code cells never executed or not
executed in order, stored stderr, errors in cells not marked as raising, code lines over 88
characters (the width of a code block on the rendered page; ``book/ruff.toml`` formats the
chapters to it), notebooks over 2 MB.

This module imports those rules, so the book and its readers run the same code, and adds the
rules of the book's own chapters (notebooks in the ``book/`` folder of the repository that holds
this file, when it has a ``_config.yml``):

- the first code cell is the Colab setup cell: it installs only when running in Colab, and pins
  neither jax nor flax (Colab ships its own); a chapter that imports rnnlib installs rnnlib
  from the repository (the one that does not, the appendix on testing notebooks, installs only
  the tools it teaches);
- the setup cell is collapsed, and no cell of asserts only is shown open;
- the first markdown cell has an "Open in Colab" badge pointing at this very notebook.

:func:`reader_view_problems` holds one more set of the book's rules, for what the reader sees
(cells not tagged ``remove-cell`` or ``remove-input``): no nbval comment markers, no version gate
outside the setup cell, no prose about what is tested, no assert that pins printed digits, and
hidden cells that store no output. ``tests/notebooks/test_reader_view.py`` applies it to every chapter but
the appendix on testing notebooks, whose subject is testing.

The repository address comes from ``_config.yml`` (``repository.url`` and ``repository.branch``),
the one place it lives. :func:`badge_markdown` and :func:`setup_cell_source` give the canonical
text, so chapter authors and the template paste exactly what the check expects. The hint for a
stale chapter is ``make notebooks``; elsewhere it is the generic ``jupyter execute`` command.

Command line, from this repository's root::

    python -m tests.book_hygiene              # every notebook under book/
    python -m tests.book_hygiene book/ch1.ipynb other_dir/
    python -m tests.book_hygiene --generic some/notebooks/   # as tools/notebook_hygiene.py

A folder is searched recursively, skipping ``_build``, ``.ipynb_checkpoints`` and files whose name
starts with ``_`` (such as ``book/_template.ipynb``). A file named explicitly is always checked.
``--generic`` leaves out the book's own rules even for the book's chapters. The exit status is 1
when any problem is found.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from tools import notebook_hygiene as generic
from tools.notebook_hygiene import (
    MAX_BYTES,
    MAX_LINE_LENGTH,
    RAISES_MARKER,
    RAISES_TAGS,
    SKIPPED_DIRS,
    expects_error,
    find_notebooks,
    generic_problems,
)
from tools.notebook_hygiene import cell_source as _source

__all__ = [
    "MAX_BYTES",
    "MAX_LINE_LENGTH",
    "RAISES_MARKER",
    "RAISES_TAGS",
    "SKIPPED_DIRS",
    "expects_error",
    "find_notebooks",
    "generic_problems",
]

REPO_ROOT = Path(__file__).resolve().parents[1]
COLAB_BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"
_COLAB_LINK = re.compile(r"https://colab\.research\.google\.com/github/[^\s)\"'>\]]+")
_COLAB_GUARD = re.compile(r"""["']google\.colab["']\s+in\s+sys\.modules""")
_PINNED_PACKAGES = re.compile(r"\b(jax|jaxlib|flax)\b")
_IMPORTS_RNNLIB = re.compile(r"^\s*(?:from|import)\s+rnnlib\b", re.M)
# How to get outputs from one clean run, in this book.
RERUN_BOOK = "Run `make notebooks`."


@dataclass(frozen=True)
class Repository:
    """Where the book lives on GitHub, as ``_config.yml`` states it."""

    url: str
    branch: str

    @property
    def slug(self) -> str:
        """``owner/name``, the part of the URL after ``github.com/``."""
        match = re.fullmatch(r"https://github\.com/([^/\s]+/[^/\s]+?)(?:\.git)?/?", self.url)
        if match is None:
            raise ValueError(
                f"_config.yml repository.url must look like https://github.com/OWNER/NAME; "
                f"got {self.url!r}."
            )
        return match.group(1)

    @property
    def pages_url(self) -> str:
        """Where GitHub Pages publishes the book."""
        owner, name = self.slug.split("/")
        return f"https://{owner.lower()}.github.io/{name}/"


def load_repository(root: Path = REPO_ROOT) -> Repository:
    """Read ``repository.url`` and ``repository.branch`` from ``root/_config.yml``."""
    # Imported here: only the book's own rules read _config.yml, and the generic rules need
    # nothing outside the standard library.
    import yaml

    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    repository = config.get("repository") or {}
    url, branch = repository.get("url"), repository.get("branch", "main")
    if not url:
        raise ValueError(f"{root / '_config.yml'} has no repository.url.")
    return Repository(url=str(url).rstrip("/"), branch=str(branch))


def _relative_posix(notebook: Path, root: Path) -> str:
    try:
        return Path(notebook).resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        raise ValueError(f"{notebook} is not inside the repository at {root}.") from None


def is_book_notebook(notebook: Path | str, root: Path = REPO_ROOT) -> bool:
    """Whether ``notebook`` is one of this book's chapters, which get the book's own rules.

    That is, it lies in the ``book/`` folder of ``root``, a repository with a ``_config.yml``. A
    reader's notebooks, checked through the pre-commit hook, never lie inside the copy of this
    repository that pre-commit keeps.
    """
    if not (root / "_config.yml").is_file():
        return False
    try:
        Path(notebook).resolve().relative_to((root / "book").resolve())
    except ValueError:
        return False
    return True


def colab_url(notebook: Path | str, root: Path = REPO_ROOT) -> str:
    """The Colab address that opens ``notebook`` straight from the repository."""
    repo = load_repository(root)
    path = _relative_posix(Path(notebook), root)
    return f"https://colab.research.google.com/github/{repo.slug}/blob/{repo.branch}/{path}"


def badge_markdown(notebook: Path | str, root: Path = REPO_ROOT) -> str:
    """The "Open in Colab" badge for ``notebook``, to put in its first markdown cell."""
    return f"[![Open In Colab]({COLAB_BADGE_IMAGE})]({colab_url(notebook, root)})"


def floor_versions(root: Path = REPO_ROOT) -> dict[str, str]:
    """The oldest jax and flax the chapters run on, from tests/floor.txt."""
    lines = (root / "tests" / "floor.txt").read_text().splitlines()
    pins = dict(line.split("==", 1) for line in lines if "==" in line)
    return {name: pins[name].strip() for name in ("jax", "flax")}


def setup_cell_source(root: Path = REPO_ROOT) -> str:
    """The Colab setup cell: the first code cell of every chapter.

    In Colab it installs rnnlib and keeps Colab's jax and flax; anywhere, it stops with
    what to install when jax or flax is older than the book's floor (tests/floor.txt,
    which make test-floor runs every chapter on).
    """
    repo = load_repository(root)
    oldest = floor_versions()
    return (
        "# Setup. In Colab: install rnnlib, keeping Colab's own jax and flax. Anywhere:\n"
        "# stop here, saying what to install, if jax or flax is older than the book needs.\n"
        "import subprocess\n"
        "import sys\n"
        "from importlib.metadata import version as _installed\n"
        "\n"
        'if "google.colab" in sys.modules:\n'
        f'    RNNLIB = "git+{repo.url}@{repo.branch}"\n'
        '    pip_install = [sys.executable, "-m", "pip", "install", "--quiet", RNNLIB]\n'
        "    subprocess.run(pip_install, check=True)\n"
        f'OLDEST = {{"jax": "{oldest["jax"]}", "flax": "{oldest["flax"]}"}}\n'
        "\n"
        "\n"
        "def _release(text):  # (0, 12, 1) from '0.12.1' or '0.12.1rc1'\n"
        '    digits = "".join(c if c.isdigit() else " " for c in text).split()\n'
        "    return tuple(int(n) for n in digits[:3])\n"
        "\n"
        "\n"
        "old = [name for name in OLDEST if _release(_installed(name)) < _release(OLDEST[name])]\n"
        "if old:\n"
        '    found = ", ".join(f"{name} {_installed(name)}" for name in old)\n'
        '    needed = " ".join(f\'"{name}>={OLDEST[name]}"\' for name in old)\n'
        "    raise RuntimeError(\n"
        '        f"This book needs newer releases than {found}. Run: pip install -U {needed}"\n'
        '        " (in Colab, then Runtime > Restart session)."\n'
        "    )"
    )


def _code_without_comments(source: str) -> str:
    return "\n".join(line.split("#", 1)[0] for line in source.splitlines())


COLLAPSED_TAGS = {"hide-input", "hide-cell", "remove-input", "remove-cell"}


def only_checks(cell: dict) -> bool:
    """Whether a code cell does nothing but ``assert``: the reader has seen its facts printed."""
    try:
        body = ast.parse(_source(cell)).body
    except SyntaxError:  # IPython magics and the like: not a plain check
        return False
    return bool(body) and all(isinstance(statement, ast.Assert) for statement in body)


def uses_rnnlib(cells: list[dict]) -> bool:
    """Whether a code cell imports rnnlib: then the setup cell must install it in Colab."""
    return any(
        _IMPORTS_RNNLIB.search(_source(cell)) for cell in cells if cell.get("cell_type") == "code"
    )


def _setup_cell_problems(cell: dict, repo: Repository, installs_rnnlib: bool = True) -> list[str]:
    source = _source(cell)
    code = _code_without_comments(source)
    problems = []
    if not _COLAB_GUARD.search(code):
        problems.append('it must install only in Colab: test `"google.colab" in sys.modules`')
    install = re.search(rf"git\+{re.escape(repo.url)}(?:\.git)?(?:@[\w./-]+)?(?=[\"'\s]|$)", code)
    if installs_rnnlib and ("pip" not in code or "install" not in code or install is None):
        problems.append(f"it must pip-install rnnlib from git+{repo.url}")
    install_lines = "\n".join(line for line in code.splitlines() if "pip" in line)
    pinned = sorted(set(_PINNED_PACKAGES.findall(install_lines.replace(repo.url, ""))))
    if pinned:
        problems.append(
            f"it must not install or pin {', '.join(pinned)}: Colab ships its own jax and flax"
        )
    return problems


# What the reader sees: cells not tagged remove-cell or remove-input.
HIDDEN_TAGS = {"remove-cell", "remove-input"}
# The appendix on testing notebooks is about tests, so these rules leave it out.
READER_VIEW_EXEMPT = {"appendix_testing_notebooks"}
_NBVAL_COMMENT = re.compile(r"^\s*#\s*(NBVAL|PYTEST_VALIDATE)\w*", re.I | re.M)
_VERSION_FUNCTIONS = {"version", "_installed", "_release", "parse_version", "Version"}
# Prose about this book's own testing; a chapter may still teach the reader to test code.
_TEST_PROSE = re.compile(
    r"\b(?:are|is|gets?|being)\s+(?:also\s+)?tested(?:\s+too)?\b|\bthe\s+test\s+suite\b"
    r"|\bnbval\b|\bthis\s+book'?s?\s+(?:tests|checks|CI)\b",
    re.I,
)
# A string that is nothing but printed numbers: "0.10", "0.65 1.44", "-3", "12%". A
# tolerance such as "< 1e-6" says how close two things are, which the reader learns from.
_NUMBERS_ONLY = re.compile(r"^[\s\d.,:+\-eE%]*\d[\s\d.,:+\-eE%]*$")


def _is_number(node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


def _reads_version(node: ast.AST) -> bool:
    for inner in ast.walk(node):
        if isinstance(inner, ast.Attribute) and inner.attr == "__version__":
            return True
        if isinstance(inner, ast.Call):
            func = inner.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if name in _VERSION_FUNCTIONS:
                return True
    return False


def version_gates(source: str) -> list[str]:
    """The comparisons in ``source`` that depend on an installed version, such as
    ``if _release(_installed("flax")) >= (0, 12, 8):``. Printing a version is not a gate."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return [
        ast.get_source_segment(source, node) or ast.dump(node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare) and _reads_version(node)
    ]


def _pins_digits(node: ast.AST) -> bool:
    """Whether a literal spells out printed digits: a string of numbers only, or a list, set
    or dict literal of numbers or such strings (a tuple is usually a shape, and stays)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and bool(_NUMBERS_ONLY.match(node.value))
    if isinstance(node, (ast.List, ast.Set)):
        return bool(node.elts) and all(_pins_digits(e) or _is_number(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return any(_pins_digits(v) or _is_number(v) for v in node.values)
    return False


def _is_rounding(node: ast.AST) -> bool:
    """``round(x, 2)`` or an f-string with a format spec: a value cut to its printed digits."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return node.func.id == "round"
    if isinstance(node, ast.JoinedStr):
        return any(
            isinstance(v, ast.FormattedValue) and v.format_spec is not None for v in node.values
        )
    return False


def pinned_digit_asserts(source: str) -> list[str]:
    """The asserts in ``source`` that compare a value for equality with its printed digits,
    such as ``assert peaks == [42, 46]``, ``assert f"{x:.2f}" == "0.10"`` or
    ``assert round(x, 1) == 1.1``. Shapes (tuples), counts, tolerances and the words of an
    error message are not flagged."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assert):
            continue
        for compare in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
            operands = [compare.left, *compare.comparators]
            pairs = zip(operands, operands[1:], compare.ops)
            if any(
                isinstance(op, (ast.Eq, ast.NotEq))
                and (
                    _pins_digits(a)
                    or _pins_digits(b)
                    or (_is_rounding(a) and (_is_number(b) or isinstance(b, ast.Constant)))
                    or (_is_rounding(b) and (_is_number(a) or isinstance(a, ast.Constant)))
                )
                for a, b, op in pairs
            ):
                found.append(ast.get_source_segment(source, node) or ast.dump(node))
                break
    return found


def reader_view_problems(cells: list[dict]) -> list[str]:
    """What must not be in the cells a reader sees: the test suite's own checks and markers.

    Checks that only pin printed numbers belong in a cell tagged ``remove-cell`` right after
    the cell they check; nbval markers are cell tags; version gates live in the setup cell;
    the prose does not talk about what is tested. A ``remove-cell`` stores no outputs, since
    the reader could not see them.
    """
    problems = []
    code_cells = [c for c in cells if c.get("cell_type") == "code" and _source(c).strip()]
    setup = code_cells[0] if code_cells else None
    for index, cell in enumerate(cells):
        tags = set(cell.get("metadata", {}).get("tags", []))
        source = _source(cell)
        if "remove-cell" in tags and cell.get("outputs"):
            problems.append(
                f"cell {index} is tagged remove-cell but stores outputs: the reader cannot see"
                " them, so a hidden cell must print nothing"
            )
        previous = cells[index - 1] if index else {}
        if "remove-cell" in tags and previous.get("cell_type") != "code":
            problems.append(
                f"cell {index} is tagged remove-cell but follows no code cell: a hidden check"
                " goes right after the cell whose output it checks"
            )
        if tags & HIDDEN_TAGS:
            continue
        if cell.get("cell_type") == "markdown":
            problems += [
                f"cell {index} tells the reader what is tested ({m.group(0)!r})"
                for m in _TEST_PROSE.finditer(source)
            ]
            continue
        if cell.get("cell_type") != "code":
            continue
        problems += [
            f"cell {index} has the nbval comment {m.group(0).strip()!r}: use the cell tag"
            f" {m.group(1).lower()}-... (e.g. nbval-ignore-output) instead"
            for m in _NBVAL_COMMENT.finditer(source)
        ]
        if cell is not setup:
            problems += [
                f"cell {index} gates on an installed version in `{text.splitlines()[0]}`:"
                " only the setup cell may do that"
                for text in version_gates(source)
            ]
        problems += [
            f"cell {index} pins printed digits in `{text.splitlines()[0]}`: move it to a cell"
            " tagged remove-cell right after, or assert a shape, tolerance or property"
            for text in pinned_digit_asserts(source)
        ]
    return problems


def book_problems(path: Path, cells: list[dict], root: Path) -> list[str]:
    """The problems of one of this book's chapters under the book's own rules."""
    problems = []
    repo = load_repository(root)
    code_cells = [c for c in cells if c.get("cell_type") == "code" and _source(c).strip()]
    setup = code_cells[0] if code_cells else None
    if setup is None or not re.search(r"google\.colab|\bpip\b", _source(setup)):
        problems.append(
            "the Colab setup cell is missing: the first code cell must be the one that "
            "tests.book_hygiene.setup_cell_source() returns"
        )
    else:
        problems += [
            f"the Colab setup cell is wrong: {p}"
            for p in _setup_cell_problems(setup, repo, installs_rnnlib=uses_rnnlib(cells))
        ]
        if "hide-input" not in setup.get("metadata", {}).get("tags", []):
            problems.append(
                "the Colab setup cell must be tagged hide-input, so the book shows it collapsed"
            )

    for index, cell in enumerate(cells):
        tags = set(cell.get("metadata", {}).get("tags", []))
        if cell.get("cell_type") == "code" and only_checks(cell) and not tags & COLLAPSED_TAGS:
            problems.append(
                f"cell {index} only asserts: move its asserts into the cell that prints the"
                " values, or tag it hide-input so the book shows it collapsed"
            )

    markdown = [c for c in cells if c.get("cell_type") == "markdown"]
    try:
        expected_url = colab_url(path, root)
    except ValueError as error:
        return [*problems, str(error)]
    links = _COLAB_LINK.findall(_source(markdown[0])) if markdown else []
    if not links:
        problems.append(
            f"the first markdown cell has no Open in Colab badge; expected {expected_url}"
        )
    problems += [
        f"the Colab badge points at {link}; expected {expected_url}"
        for link in links
        if link != expected_url
    ]
    return problems


def check_notebook(
    path: Path | str,
    root: Path = REPO_ROOT,
    *,
    book_rules: bool | None = None,
    max_line_length: int = MAX_LINE_LENGTH,
    kernel: str | None = None,
) -> list[str]:
    """Every hygiene problem of one notebook, each as a readable sentence. Empty when clean.

    ``book_rules`` adds this book's own rules (the Colab setup cell and badge); by default they
    apply exactly to the book's chapters (:func:`is_book_notebook`). Without them, this is
    exactly ``tools/notebook_hygiene.py``'s check (``kernel`` is the kernel its hints name).
    """
    path = Path(path)
    if book_rules is None:
        book_rules = is_book_notebook(path, root)
    if not book_rules:
        return generic.check_notebook(path, max_line_length=max_line_length, kernel=kernel)
    notebook, problems = generic.read_notebook(path)
    if notebook is None:
        return problems
    cells = notebook["cells"]
    problems += generic_problems(cells, RERUN_BOOK, max_line_length)
    return problems + book_problems(path, cells, root)


def main(argv: list[str] | None = None) -> int:
    parser = generic.argument_parser()
    parser.add_argument(
        "--generic",
        action="store_true",
        help="only the rules for any notebook (tools/notebook_hygiene.py's), even for this "
        "book's chapters",
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    return generic.report(
        find_notebooks(args.paths or [REPO_ROOT / "book"]),
        lambda notebook: check_notebook(
            notebook,
            REPO_ROOT,
            book_rules=False if args.generic else None,
            max_line_length=args.max_line_length,
            kernel=args.kernel_name,
        ),
    )


if __name__ == "__main__":
    sys.exit(main())
