"""Notebook hygiene: checks that nbval cannot make by itself.

nbval compares a fresh run of each cell with the output stored in the notebook. A cell that was
never executed stores no output, so nbval has nothing to compare and passes it silently. This
module catches that and the other ways a committed notebook can be stale or noisy:

- every non-empty code cell has an ``execution_count``, and the counts run 1, 2, 3, ... in order,
  so the stored outputs come from one top-to-bottom run;
- no stored stderr stream (warnings and other noise);
- no stored error, unless the cell is marked as expected to raise (the ``raises-exception`` tag,
  or a ``# NBVAL_RAISES_EXCEPTION`` comment);
- the file is at most 2 MB;
- no line of a code cell is longer than 88 characters, the width of a code block on the rendered
  page (``book/ruff.toml`` formats the chapters to it; comments and strings are wrapped by hand);
- the first code cell is the Colab setup cell: it installs rnnlib from the repository only when
  running in Colab, and pins neither jax nor flax (Colab ships its own);
- the first markdown cell has an "Open in Colab" badge pointing at this very notebook.

The repository address comes from ``_config.yml`` (``repository.url`` and ``repository.branch``),
the one place it lives. :func:`badge_markdown` and :func:`setup_cell_source` give the canonical
text, so chapter authors and the template paste exactly what the check expects.

Command line, from the repository root::

    python -m tests.notebook_hygiene              # every notebook under book/
    python -m tests.notebook_hygiene book/ch1.ipynb other_dir/

A folder is searched recursively, skipping ``_build``, ``.ipynb_checkpoints`` and files whose name
starts with ``_`` (such as ``book/_template.ipynb``). A file named explicitly is always checked.
The exit status is 1 when any problem is found.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
MAX_BYTES = 2_000_000
# The line-length of book/ruff.toml: wider code lines scroll sideways on the rendered page.
MAX_LINE_LENGTH = 88
SKIPPED_DIRS = {"_build", ".ipynb_checkpoints"}
# Tags and comment markers under which nbval expects a cell to raise.
RAISES_TAGS = {"raises-exception", "nbval-raises-exception"}
RAISES_MARKER = "NBVAL_RAISES_EXCEPTION"
COLAB_BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"
_COLAB_LINK = re.compile(r"https://colab\.research\.google\.com/github/[^\s)\"'>\]]+")
_COLAB_GUARD = re.compile(r"""["']google\.colab["']\s+in\s+sys\.modules""")
_PINNED_PACKAGES = re.compile(r"\b(jax|jaxlib|flax)\b")


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


def colab_url(notebook: Path | str, root: Path = REPO_ROOT) -> str:
    """The Colab address that opens ``notebook`` straight from the repository."""
    repo = load_repository(root)
    path = _relative_posix(Path(notebook), root)
    return f"https://colab.research.google.com/github/{repo.slug}/blob/{repo.branch}/{path}"


def badge_markdown(notebook: Path | str, root: Path = REPO_ROOT) -> str:
    """The "Open in Colab" badge for ``notebook``, to put in its first markdown cell."""
    return f"[![Open In Colab]({COLAB_BADGE_IMAGE})]({colab_url(notebook, root)})"


def setup_cell_source(root: Path = REPO_ROOT) -> str:
    """The Colab setup cell: the first code cell of every chapter."""
    repo = load_repository(root)
    return (
        "# Colab only: install rnnlib from the repository.\n"
        "# Colab ships its own jax and flax, so nothing else is installed or pinned.\n"
        "import subprocess\n"
        "import sys\n"
        "\n"
        'if "google.colab" in sys.modules:\n'
        f'    RNNLIB = "git+{repo.url}@{repo.branch}"\n'
        '    pip_install = [sys.executable, "-m", "pip", "install", "--quiet", RNNLIB]\n'
        "    subprocess.run(pip_install, check=True)"
    )


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def _code_without_comments(source: str) -> str:
    return "\n".join(line.split("#", 1)[0] for line in source.splitlines())


def expects_error(cell: dict) -> bool:
    """Whether nbval is told that this cell raises (by a tag or a comment marker)."""
    tags = set(cell.get("metadata", {}).get("tags", []))
    if tags & RAISES_TAGS:
        return True
    return any(
        line.strip().startswith("#") and line.strip().lstrip("#").strip() == RAISES_MARKER
        for line in _source(cell).splitlines()
    )


def _setup_cell_problems(cell: dict, repo: Repository) -> list[str]:
    source = _source(cell)
    code = _code_without_comments(source)
    problems = []
    if not _COLAB_GUARD.search(code):
        problems.append('it must install only in Colab: test `"google.colab" in sys.modules`')
    install = re.search(rf"git\+{re.escape(repo.url)}(?:\.git)?(?:@[\w./-]+)?(?=[\"'\s]|$)", code)
    if "pip" not in code or "install" not in code or install is None:
        problems.append(f"it must pip-install rnnlib from git+{repo.url}")
    pinned = sorted(set(_PINNED_PACKAGES.findall(code.replace(repo.url, ""))))
    if pinned:
        problems.append(
            f"it must not install or pin {', '.join(pinned)}: Colab ships its own jax and flax"
        )
    return problems


def check_notebook(path: Path | str, root: Path = REPO_ROOT) -> list[str]:
    """Every hygiene problem of one notebook, each as a readable sentence. Empty when clean."""
    path = Path(path)
    problems = []
    size = path.stat().st_size
    if size > MAX_BYTES:
        problems.append(
            f"the file is {size:,} bytes; the limit is {MAX_BYTES:,}. Make figures smaller or "
            "print less."
        )
    try:
        notebook = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        return [*problems, f"it is not a readable notebook (invalid JSON: {error})"]
    cells = notebook.get("cells", [])

    expected_count = 1
    never_executed = []
    for index, cell in enumerate(cells):
        if cell.get("cell_type") != "code":
            continue
        where = f"code cell {index}"
        count = cell.get("execution_count")
        if _source(cell).strip():
            if count is None:
                never_executed.append(index)
            elif count != expected_count:
                problems.append(
                    f"{where} has execution_count {count}, expected {expected_count}: the "
                    "outputs are not from one top-to-bottom run. Run `make notebooks`."
                )
            expected_count += 1
        for number, line in enumerate(_source(cell).splitlines(), start=1):
            if len(line) > MAX_LINE_LENGTH:
                problems.append(
                    f"{where}, line {number} is {len(line)} characters long; the limit is "
                    f"{MAX_LINE_LENGTH}, the width of the rendered page. Run `ruff format` on "
                    "the notebook, and wrap long comments and strings by hand."
                )
        for output in cell.get("outputs", []):
            kind = output.get("output_type")
            if kind == "stream" and output.get("name") == "stderr":
                first = "".join(output.get("text", "")).strip().splitlines()[:1]
                problems.append(f"{where} stores stderr output: {first[0] if first else ''!r}")
            elif kind == "error" and not expects_error(cell):
                problems.append(
                    f"{where} stores an error ({output.get('ename')}: {output.get('evalue')}) "
                    "but is not tagged raises-exception"
                )

    if never_executed:
        which = ", ".join(map(str, never_executed))
        cells_have = (
            f"code cell {which} has" if len(never_executed) == 1 else f"code cells {which} have"
        )
        problems.insert(
            0,
            f"{cells_have} no execution_count: never executed, so nbval would pass them "
            "without checking anything. Run `make notebooks`.",
        )

    repo = load_repository(root)
    code_cells = [c for c in cells if c.get("cell_type") == "code" and _source(c).strip()]
    setup = code_cells[0] if code_cells else None
    if setup is None or not re.search(r"google\.colab|\bpip\b", _source(setup)):
        problems.append(
            "the Colab setup cell is missing: the first code cell must be the one that "
            "tests.notebook_hygiene.setup_cell_source() returns"
        )
    else:
        problems += [
            f"the Colab setup cell is wrong: {p}" for p in _setup_cell_problems(setup, repo)
        ]

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


def find_notebooks(paths: Iterable[Path | str]) -> Iterator[Path]:
    """Notebooks named by ``paths``: files as given; folders searched as described above."""
    for path in map(Path, paths):
        if path.is_dir():
            for notebook in sorted(path.rglob("*.ipynb")):
                parts = notebook.relative_to(path).parts
                if SKIPPED_DIRS.isdisjoint(parts) and not notebook.name.startswith("_"):
                    yield notebook
        else:
            yield path


def main(argv: list[str] | None = None) -> int:
    paths = (sys.argv[1:] if argv is None else argv) or [str(REPO_ROOT / "book")]
    failed = 0
    checked = 0
    for notebook in find_notebooks(paths):
        checked += 1
        problems = check_notebook(notebook, REPO_ROOT)
        if problems:
            failed += 1
            print(f"{notebook}:")
            for problem in problems:
                print(f"  - {problem}")
    print(f"notebook hygiene: {checked} checked, {failed} with problems")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
