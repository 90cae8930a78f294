"""The appendix on testing notebooks, applied to a reader's repository as the appendix says.

book/appendix_testing_notebooks.ipynb tells a reader what to install, which files to add and which
commands to run, and claims what each check catches. These tests take the commands and files from
the notebook itself (the string constants its code cells define, and the workflow file as the page
prints it), so they cannot drift from what a reader copies. Then they:

- lint the GitHub Actions workflow with actionlint and parse it as YAML, as a reader would copy it;
- check the pip line against requirements.txt and the sanitize file against the book's own;
- build a small repository of notebooks in a temporary folder (written with nbformat, executed
  with the appendix's `jupyter execute` command), run the appendix's strict nbval command on it
  and its pre-commit hygiene hook the way pre-commit runs it, clean and then with one fault per
  notebook, and check that each fault is caught by the check the appendix names, and only by it;
- check that the appendix reads nothing of this repository, so that it runs from any folder.

Everything runs offline, in subprocesses of the pinned environment, with timeouts.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.notebook_hygiene import REPO_ROOT, load_repository

# nbformat and nbval exist only in the pinned env; they are imported inside the tests.
pytestmark = pytest.mark.pinned_env

APPENDIX = REPO_ROOT / "book" / "appendix_testing_notebooks.ipynb"
HOOKS = REPO_ROOT / ".pre-commit-hooks.yaml"
# The pinned environment's bin folder: its python, jupyter and actionlint, first on PATH, as
# actions/setup-python puts the job's Python first.
BIN = Path(sys.executable).parent


def code_cells() -> list[dict]:
    cells = json.loads(APPENDIX.read_text(encoding="utf-8"))["cells"]
    return [cell for cell in cells if cell["cell_type"] == "code"]


def source(cell: dict) -> str:
    return "".join(cell["source"])


def stdout(cell: dict) -> str:
    return "".join(
        "".join(output["text"])
        for output in cell["outputs"]
        if output["output_type"] == "stream" and output["name"] == "stdout"
    )


def constants() -> dict:
    """Every `NAME = "text"` (or a tuple or dict of texts) at the top level of the appendix."""
    found = {}
    for cell in code_cells():
        for node in ast.parse(source(cell)).body:
            if isinstance(node, ast.Assign) and [type(t) for t in node.targets] == [ast.Name]:
                try:
                    value = ast.literal_eval(node.value)
                except ValueError:
                    continue
                if (
                    isinstance(value, str)
                    or (isinstance(value, tuple) and all(isinstance(v, str) for v in value))
                    or (isinstance(value, dict) and all(isinstance(v, str) for v in value.values()))
                ):
                    found[node.targets[0].id] = value
    return found


C = constants()


def defining_cell(name: str) -> dict:
    (cell,) = [c for c in code_cells() if re.search(rf"^{name} = ", source(c), re.M)]
    return cell


def environment() -> dict[str, str]:
    """The environment the appendix runs its commands in: this one, less the variables that
    change what a run prints (the appendix's UNSET: PYTHONWARNINGS, PYTHONDEVMODE, PYTEST_*),
    with this environment's tools first on the PATH."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(C["UNSET"])}
    env["PATH"] = os.pathsep.join([str(BIN), os.environ["PATH"]])
    env.update(C["LAYOUT"])  # the appendix's export line
    return env


def shell(command: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    """A command line of the appendix, in a shell, with this environment's tools first."""
    env = environment()
    return subprocess.run(
        command, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def nbval(command: str, cwd: Path) -> tuple[int, list[str], str]:
    """Run a pytest command: its exit code, its failing tests (sorted) and its output."""
    done = shell(f"{command} -p no:cacheprovider --color=no", cwd)
    lines = done.stdout.splitlines()
    failing = sorted(
        line.split(" - ")[0] for line in lines if line.startswith(("FAILED ", "ERROR "))
    )
    return done.returncode, failing, done.stdout + done.stderr


# --- the files and commands a reader copies -------------------------------------------------------


def test_the_appendix_defines_every_file_and_command_it_tells_a_reader_to_use():
    names = ["INSTALL", "REEXECUTE", "PYTEST", "SANITIZE", "PRECOMMIT", "PRECOMMIT_LOCAL"]
    for name in [*names, "HYGIENE", "WORKFLOW"]:
        assert C.get(name), name


def test_the_workflow_is_shown_whole_and_passes_actionlint_as_copied(tmp_path):
    workflow = C["WORKFLOW"]
    # What the page shows is the cell's output: exactly the file, nothing around it.
    assert stdout(defining_cell("WORKFLOW")) == workflow
    path = tmp_path / ".github" / "workflows" / "notebooks.yml"
    path.parent.mkdir(parents=True)
    path.write_text(workflow)
    lint = subprocess.run(
        [str(BIN / "actionlint"), "-no-color", str(path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (lint.returncode, lint.stdout) == (0, ""), lint.stdout + lint.stderr
    # actionlint does fail a broken workflow: the same file without its runner.
    path.write_text(workflow.replace("    runs-on: ubuntu-latest\n", ""))
    lint = subprocess.run(
        [str(BIN / "actionlint"), "-no-color", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert lint.returncode == 1 and "runs-on" in lint.stdout, lint.stdout


def test_the_workflow_checks_out_sets_up_python_installs_and_runs_both_checks():
    workflow = yaml.safe_load(C["WORKFLOW"])
    assert set(workflow[True]) == {"push", "pull_request"}  # YAML 1.1 reads `on` as True
    assert workflow["permissions"] == {"contents": "read"}
    (job,) = workflow["jobs"].values()
    steps = job["steps"]
    assert [step.get("uses", "").split("@")[0] for step in steps[:2]] == [
        "actions/checkout",
        "actions/setup-python",
    ]
    # The layout, named once at the top, is the appendix's, and the setup takes its Python and
    # the cache's key from the reader's own files.
    assert workflow["env"] == C["LAYOUT"]
    assert steps[1]["with"] == {
        "python-version-file": "${{ env.PYTHON_VERSION_FILE }}",
        "cache": "pip",
        "cache-dependency-path": "${{ env.REQUIREMENTS }}",
    }
    assert "python-version:" not in C["WORKFLOW"]  # no Python of the workflow's own
    runs = [" ".join(step["run"].split()) for step in steps[2:]]
    assert runs[0].startswith('python -m pip install -r "$REQUIREMENTS" ')
    # The pip line, the hygiene command and the test command, word for word as the page says.
    assert runs[0].endswith(" ".join(C["INSTALL"].split()))
    assert runs[1:] == [C["HYGIENE"], " ".join(C["PYTEST"].split())]


def test_the_pip_line_pins_the_versions_this_book_is_tested_with():
    words = shlex.split(C["INSTALL"].replace("\\\n", " "))
    assert words[:4] == ["python", "-m", "pip", "install"]
    pins = dict(word.split("==") for word in words[4:])
    assert set(pins) == {
        "nbval",
        "pytest",
        "pytest-xdist",
        "ipykernel",
        "nbclient",
        "nbformat",
        "pre-commit",
    }
    requirements = dict(
        line.split("==")
        for line in (REPO_ROOT / "requirements.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    assert {name: requirements[name] for name in pins if name in requirements} == {
        name: version for name, version in pins.items() if name != "pre-commit"
    }


def test_the_sanitize_file_is_the_books_own():
    assert C["SANITIZE"] == (REPO_ROOT / "tests" / "nbval_sanitize.cfg").read_text()
    assert stdout(defining_cell("SANITIZE")) == C["SANITIZE"]


def release_tag() -> str:
    """The tag of this release: v + the version in pyproject.toml (CONTRIBUTING.md, Releasing)."""
    pyproject = (REPO_ROOT / "pyproject.toml").read_text()
    (version,) = re.findall(r'^version = "([^"]+)"$', pyproject, re.M)
    return f"v{version}"


def markdown() -> str:
    cells = json.loads(APPENDIX.read_text(encoding="utf-8"))["cells"]
    return "".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "markdown")


def test_the_remote_hook_is_this_repositorys_pinned_to_this_releases_tag():
    config = yaml.safe_load(C["PRECOMMIT"])
    (repository,) = config["repos"]
    assert repository["repo"] == load_repository().url
    # A release tag, never a branch: pre-commit warns about a `rev` that can move.
    assert repository["rev"] == release_tag()
    assert f"rev: {release_tag()}" in HOOKS.read_text()  # the example in the hooks file
    citation = (REPO_ROOT / "CITATION.cff").read_text()
    assert f'\nversion: "{release_tag()[1:]}"\n' in citation  # one version everywhere
    (hook,) = repository["hooks"]
    assert hook["id"] in {hook["id"] for hook in yaml.safe_load(HOOKS.read_text())}
    assert hook["args"] == ["--kernel-name=python3"]  # what the re-execution command runs
    assert "--kernel_name=python3" in C["REEXECUTE"]
    assert C["HYGIENE"] == f"pre-commit run {hook['id']} --all-files"
    assert stdout(defining_cell("PRECOMMIT")) == C["PRECOMMIT"]


def test_the_copy_is_downloaded_from_this_releases_tag_and_run_by_a_local_hook():
    (raw,) = re.findall(r"^RAW=(\S+)$", markdown(), re.M)
    (download,) = re.findall(
        r'^mkdir -p (\S+)\ncurl -fsSL -o (\S+) "\$RAW/(\S+)"$', markdown(), re.M
    )
    folder, target, path = download
    repository = load_repository()
    assert raw == f"https://raw.githubusercontent.com/{repository.slug}/{release_tag()}"
    (hook,) = yaml.safe_load(HOOKS.read_text())
    # The file the remote hook runs, saved at the same path in the reader's repository.
    assert path == target == hook["entry"] and Path(target).parent.as_posix() == folder
    config = yaml.safe_load(C["PRECOMMIT_LOCAL"])
    (local,) = config["repos"]
    (local_hook,) = local["hooks"]
    assert local["repo"] == "local" and local_hook["id"] == hook["id"]
    assert shlex.split(local_hook["entry"]) == ["python3", target]
    assert local_hook["args"] == ["--kernel-name=python3"]
    assert local_hook["language"] == "unsupported" and local_hook["types"] == ["jupyter"]
    # `unsupported` is pre-commit 4.4's name for `system`; older releases reject it.
    assert config["minimum_pre_commit_version"] == hook["minimum_pre_commit_version"] == "4.4.0"
    assert stdout(defining_cell("PRECOMMIT_LOCAL")) == C["PRECOMMIT_LOCAL"]
    assert f'`python3 {target} "$NOTEBOOKS"`' in markdown()


# --- a reader's repository, tested as the appendix says -------------------------------------------


def run_hook(repo: Path, config: str = "PRECOMMIT") -> subprocess.CompletedProcess:
    """A hook of one of the appendix's .pre-commit-config.yaml files, run as pre-commit runs it.

    The entry, then the hook's args, then every file of the reader's repository that matches the
    hook's `types` (`pre-commit run --all-files`), in the reader's repository. For the remote
    hook (`language: unsupported_script`), the entry is a file of pre-commit's copy of the hook's
    repository (here, this checkout); for the local one (`language: unsupported`), a command in
    the reader's repository, which holds the copy the appendix downloads.
    """
    (repository,) = yaml.safe_load(C[config])["repos"]
    (wanted,) = repository["hooks"]
    files = sorted(path.relative_to(repo).as_posix() for path in repo.rglob("*.ipynb"))
    if repository["repo"] == "local":
        assert wanted["language"] == "unsupported" and wanted["types"] == ["jupyter"]
        entry = shlex.split(wanted["entry"])
        copy = repo / entry[1]
        copy.parent.mkdir(exist_ok=True)
        copy.write_bytes((REPO_ROOT / entry[1]).read_bytes())  # the appendix's curl, offline
        entry[0] = str(BIN / "python")  # python3 of the pinned environment
    else:
        (hook,) = [h for h in yaml.safe_load(HOOKS.read_text()) if h["id"] == wanted["id"]]
        assert hook["language"] == "unsupported_script" and hook["types"] == ["jupyter"]
        entry = shlex.split(hook["entry"])
        entry[0] = str(REPO_ROOT / entry[0])
    command = [*entry, *wanted.get("args", []), *files]
    return subprocess.run(
        command, cwd=repo, env=environment(), capture_output=True, text=True, timeout=120
    )


def flagged(hook_output: str) -> dict[str, list[str]]:
    """The hook's problems by notebook name."""
    problems: dict[str, list[str]] = {}
    current = None
    for line in hook_output.splitlines():
        if line.endswith(".ipynb:"):
            current = Path(line[:-1]).stem
            problems[current] = []
        elif line.startswith("  - ") and current:
            problems[current].append(line[4:])
    return problems


def write_notebook(repo: Path, name: str, sources: list[str], kernel="python3", tags=None):
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    cells = [new_code_cell(text) for text in sources]
    for index, cell_tags in (tags or {}).items():
        cells[index].metadata["tags"] = cell_tags
    spec = {"name": kernel, "display_name": f"Python ({kernel})", "language": "python"}
    path = repo / "notebooks" / f"{name}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(new_notebook(cells=cells, metadata={"kernelspec": spec}), path)
    return path


@pytest.fixture(scope="module")
def clean_repo(tmp_path_factory) -> Path:
    """Three executed notebooks, the sanitize file and the pre-commit config of the appendix."""
    import nbformat

    repo = tmp_path_factory.mktemp("reader") / "my-notebooks"
    (repo / "notebooks").mkdir(parents=True)
    (repo / "nbval_sanitize.cfg").write_text(C["SANITIZE"])
    (repo / ".pre-commit-config.yaml").write_text(C["PRECOMMIT"])
    write_notebook(repo, "data", ["x = 41", "print(x + 1)", "print(x * 2)"])
    # Saved from a kernel that only its author has; raises on purpose; repr with an address.
    write_notebook(
        repo,
        "model",
        ["class Box:\n    pass\n\n\nBox()", "1 / 0"],
        kernel="my-project-env",
        tags={1: ["raises-exception"]},
    )
    write_notebook(  # in a subfolder, which the re-execution command must find
        repo,
        "reports/report",
        ["# NBVAL_SKIP\nprint('slow step')", "# NBVAL_IGNORE_OUTPUT\nimport time\ntime.time()"],
    )
    checkpoint = repo / "notebooks" / ".ipynb_checkpoints" / "data-checkpoint.ipynb"
    checkpoint.parent.mkdir()
    checkpoint.write_text("not a notebook")  # Jupyter's copy: neither executed nor tested
    done = shell(C["REEXECUTE"], repo)
    assert done.returncode == 0, done.stderr
    checkpoint.unlink()
    executed = sorted((repo / "notebooks").rglob("*.ipynb"))
    assert [path.relative_to(repo).as_posix() for path in executed] == [
        "notebooks/data.ipynb",
        "notebooks/model.ipynb",
        "notebooks/reports/report.ipynb",
    ]
    for path in executed:
        notebook = nbformat.read(path, as_version=4)
        assert [cell.execution_count for cell in notebook.cells] == [1, 2, 3][: len(notebook.cells)]
    model = nbformat.read(repo / "notebooks" / "model.ipynb", as_version=4)
    assert model.metadata.kernelspec.name == "my-project-env"  # jupyter execute keeps it
    assert model.cells[1].outputs[0].ename == "ZeroDivisionError"
    return repo


def test_a_clean_repository_passes_strict_nbval_and_the_hygiene_hook(clean_repo, monkeypatch):
    # Whatever the caller's shell sets: the appendix runs its commands without these, and says
    # why (a kernel that inherits PYTHONWARNINGS=error raises where CI warns).
    monkeypatch.setenv("PYTHONWARNINGS", "error")
    monkeypatch.setenv("PYTHONDEVMODE", "1")
    monkeypatch.setenv("PYTEST_ADDOPTS", "--collect-only")
    assert set(C["UNSET"]) == {"PYTHONWARNINGS", "PYTHONDEVMODE", "PYTEST_"}
    exit_code, failing, output = nbval(C["PYTEST"], clean_repo)
    assert (exit_code, failing) == (0, []), output
    assert re.search(r"\b6 passed, 1 skipped\b", output), output
    for config in ["PRECOMMIT", "PRECOMMIT_LOCAL"]:
        hook = run_hook(clean_repo, config)
        assert hook.returncode == 0, hook.stdout + hook.stderr
        assert hook.stdout == "notebook hygiene: 3 checked, 0 with problems\n"


@pytest.fixture(scope="module")
def broken_repo(clean_repo, tmp_path_factory) -> Path:
    """The clean repository's notebooks, each with one fault the appendix names."""
    import nbformat

    repo = tmp_path_factory.mktemp("broken") / "my-notebooks"
    shutil.copytree(clean_repo, repo)
    folder = repo / "notebooks"

    def variant(base, name, change):
        notebook = nbformat.read(folder / f"{base}.ipynb", as_version=4)
        change(notebook.cells)
        nbformat.write(notebook, folder / f"{name}.ipynb")

    def stale(cells):  # edited after the last run
        cells[0].source = "x = 40"

    def never(cells):  # added (or cleared) and saved without running
        cells[2].execution_count, cells[2].outputs = None, []

    def rerun(cells):  # run again by hand after the others
        cells[1].execution_count = 5

    def untagged(cells):  # the error stays, the raises-exception tag is gone
        cells[1].metadata["tags"] = []

    def skipped_stale(cells):  # a skipped cell edited after the last run
        cells[0].source = "# NBVAL_SKIP\nprint('a slower step')"

    variant("data", "stale", stale)
    variant("data", "never", never)
    variant("model", "order", rerun)  # it names the kernel my-project-env
    variant("model", "error", untagged)
    variant("reports/report", "reports/report", skipped_stale)
    write_notebook(repo, "stderr", ["import warnings\n\nwarnings.warn('check the units')"])
    for unchanged in ["data", "model"]:  # passed both checks in the clean repository
        (folder / f"{unchanged}.ipynb").unlink()
    done = shell("jupyter execute --inplace --kernel_name=python3 notebooks/stderr.ipynb", repo)
    assert done.returncode == 0, done.stderr
    return repo


def test_each_fault_is_caught_by_the_check_the_appendix_names(broken_repo):
    exit_code, failing, output = nbval(C["PYTEST"], broken_repo)
    assert exit_code == 1, output
    # Strict nbval: the stale outputs, the error that now stops the run, the warning whose path
    # names this kernel's process. It passes the never-executed cell, the out-of-order counts and
    # the stale output of the skipped cell.
    assert failing == [
        "FAILED notebooks/error.ipynb::Cell 1",
        "FAILED notebooks/stale.ipynb::Cell 1",
        "FAILED notebooks/stale.ipynb::Cell 2",
        "FAILED notebooks/stderr.ipynb::Cell 0",
    ], output
    assert "mismatch 'stderr'" in output and "mismatch 'stdout'" in output

    hook = run_hook(broken_repo)
    assert hook.returncode == 1
    # The copied-in file, run by the local hook, says exactly what the remote hook says.
    assert run_hook(broken_repo, "PRECOMMIT_LOCAL").stdout == hook.stdout
    problems = flagged(hook.stdout)
    assert sorted(problems) == ["error", "never", "order", "stderr"], hook.stdout
    (never,) = problems["never"]
    assert never.startswith("code cell 2 has no execution_count")
    # The hint names the kernel of the environment (the hook's --kernel-name=python3), not the
    # one the notebook names, which the re-execution command does not use either.
    assert problems["order"] == [
        "code cell 1 has execution_count 5, expected 2: the outputs are not from one "
        "top-to-bottom run. Run it again top to bottom in a fresh kernel and save it: Restart "
        "& Run All in Jupyter, or `jupyter execute --inplace --kernel_name=python3 "
        "notebooks/order.ipynb`."
    ]
    (error,) = problems["error"]
    assert error.startswith("code cell 1 stores an error (ZeroDivisionError: division by zero)")
    (stderr,) = problems["stderr"]
    warning = r"'\S*ipykernel_\d+/\d+\.py:3: UserWarning: check the units'"
    assert re.fullmatch(rf"code cell 0 stores stderr output: {warning}", stderr), stderr
    # The stale outputs, and the skipped cell's, are no concern of the hygiene check: its
    # counts are 1, 2, 3. The appendix says both blind spots plainly.
    assert "stale" not in problems and "report" not in problems


def appendix_function(*names: str):
    """Functions defined in the appendix's code cells, compiled here with the imports they use."""
    import nbformat

    namespace = {"nbformat": nbformat}
    for cell in code_cells():
        for node in ast.parse(source(cell)).body:
            if isinstance(node, ast.FunctionDef) and node.name in names:
                exec(compile(ast.Module([node], []), str(APPENDIX), "exec"), namespace)
    return [namespace[name] for name in names]


def test_the_appendix_short_hygiene_flags_the_notebooks_the_hook_flags(clean_repo, broken_repo):
    hygiene, _ = appendix_function("hygiene", "cell_problems")
    for repo in [clean_repo, broken_repo]:
        notebooks = (repo / "notebooks").rglob("*.ipynb")
        short = {path.stem for path in notebooks if hygiene(path) != []}
        assert short == set(flagged(run_hook(repo).stdout)), repo


# --- the appendix itself ------------------------------------------------------------------------


def test_the_appendix_reads_nothing_of_this_repository():
    # It runs from any folder (a reader's repository, Colab): whatever it needs, it writes into
    # a temporary folder of its own first.
    forbidden = [
        r"\.\./",
        r"Path\.cwd\(",
        r"os\.getcwd\(",
        r"(?<![\w.])__file__",
        r"(?<![\w./-])tests/",  # not in carry-on-book/carry-on, the repository's address
        r"(?<![\w./-])book/",
        r"_config\.yml",
        r"\.github/workflows/\w+\.yml",
        r"sys\.path",
    ]
    for number, cell in enumerate(code_cells()):
        for pattern in forbidden:
            assert not re.search(pattern, source(cell)), (number, pattern)
    # Not even through its setup cell: it neither installs nor checks jax, flax or rnnlib.
    assert not re.search(r"\b(jax|flax|rnnlib)\b", source(code_cells()[0]))


def run_setup_cell(monkeypatch, missing=()):
    """The appendix's setup cell, outside Colab, where these packages are not installed."""
    import importlib.metadata

    real = importlib.metadata.version

    def version(name):
        if name in missing:
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    namespace = {}
    exec(source(code_cells()[0]), namespace)
    return namespace


def test_the_setup_runs_anywhere_with_the_tools_and_needs_nothing_of_this_book(monkeypatch):
    # A reader's environment next to their own notebooks: no jax, flax or rnnlib.
    namespace = run_setup_cell(monkeypatch, missing={"jax", "jaxlib", "flax", "rnnlib"})
    # What it checks is what the page runs: the pip line's tools, numpy and matplotlib.
    assert namespace["missing"] == []
    pins = shlex.split(C["INSTALL"].replace("\\\n", " "))[4:]
    assert {pin.split("==")[0] for pin in pins} - set(namespace["TOOLS"]) == {"pre-commit"}


def test_the_setup_stops_with_the_pip_command_when_a_tool_is_missing(monkeypatch):
    with pytest.raises(RuntimeError) as stopped:
        run_setup_cell(monkeypatch, missing={"nbval", "pytest-xdist", "matplotlib"})
    assert str(stopped.value) == (
        "This page needs nbval, pytest-xdist, matplotlib: pip install nbval pytest-xdist matplotlib"
    )


def test_in_colab_the_appendix_installs_what_it_imports_and_runs():
    # Colab ships nbformat, numpy, matplotlib, pytest and ipykernel; nbval, nbclient and
    # pytest-xdist are installed by the appendix's setup cell, only in Colab.
    setup = source(code_cells()[0])
    assert 'if "google.colab" in sys.modules:' in setup
    (tools,) = [
        node.value
        for node in ast.walk(ast.parse(setup))
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "tools"
    ]
    installed = set(ast.literal_eval(tools))
    assert installed == {"nbval", "pytest-xdist", "nbclient"}
    imported = set()
    for cell in code_cells():
        for node in ast.walk(ast.parse(source(cell))):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                imported.add(node.module.split(".")[0])
    third_party = imported - set(sys.stdlib_module_names)
    assert third_party == {"nbformat", "nbval", "numpy", "matplotlib"}
    assert " -n 2" in C["PYTEST"]  # pytest-xdist
