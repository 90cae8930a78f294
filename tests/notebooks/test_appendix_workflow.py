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
- do it all again in a repository of another layout (notebooks in docs/examples/, drafts in its
  scratch/, no Makefile), fresh-clone check included;
- check that the commit the appendix pins holds the hook and the tool these tests run, and that
  the appendix reads nothing else of this repository, so that it runs from any folder.

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

from tests.book_hygiene import REPO_ROOT, load_repository

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


def environment(layout: dict | None = None) -> dict[str, str]:
    """The environment the appendix runs its commands in: this one, less the variables that
    change what a run prints (the appendix's UNSET: PYTHONWARNINGS, PYTHONDEVMODE, PYTEST_*),
    with this environment's tools first on the PATH."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(C["UNSET"])}
    env["PATH"] = os.pathsep.join([str(BIN), os.environ["PATH"]])
    env.update(layout or C["LAYOUT"])  # the appendix's export line
    for role in ["AUTHOR", "COMMITTER"]:  # git commit in a reader's repository
        env[f"GIT_{role}_NAME"], env[f"GIT_{role}_EMAIL"] = "A. Reader", "reader@example.com"
    return env


def shell(
    command: str, cwd: Path, timeout: int = 600, layout: dict | None = None
) -> subprocess.CompletedProcess:
    """A command line of the appendix, in a shell, with this environment's tools first."""
    env = environment(layout)
    return subprocess.run(
        command, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def nbval(command: str, cwd: Path, layout: dict | None = None) -> tuple[int, list[str], str]:
    """Run a pytest command: its exit code, its failing tests (sorted) and its output."""
    done = shell(f"{command} -p no:cacheprovider --color=no", cwd, layout=layout)
    lines = done.stdout.splitlines()
    failing = sorted(
        line.split(" - ")[0] for line in lines if line.startswith(("FAILED ", "ERROR "))
    )
    return done.returncode, failing, done.stdout + done.stderr


# --- the files and commands a reader copies -------------------------------------------------------


def test_the_appendix_defines_every_file_and_command_it_tells_a_reader_to_use():
    names = ["INSTALL", "REEXECUTE", "PYTEST", "SANITIZE", "PRECOMMIT", "PRECOMMIT_LOCAL"]
    for name in [*names, "HYGIENE", "WORKFLOW", "CLONE", "PIN", "HOOK"]:
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
    runs = [" ".join(step["run"].replace("\\\n", " ").split()) for step in steps[2:]]
    # Everything is installed under the constraints file, the requirements and the tools.
    assert runs[0].startswith('python -m pip install -r "$REQUIREMENTS" -c "$CONSTRAINTS" ')
    # The pip line, the hygiene command and the test command, word for word as the page says.
    tools = " ".join(C["INSTALL"].replace("\\\n", " ").split()).split("install ")[1]
    assert runs[0].endswith(f'python -m pip install -c "$CONSTRAINTS" {tools}')
    assert runs[1:] == [C["HYGIENE"], " ".join(C["PYTEST"].replace("\\\n", " ").split())]
    # nbval runs when the hygiene hook failed (a failed step skips the next by default), but
    # not when the installation failed or the run was cancelled.
    install, hygiene, tests = steps[2:]
    assert "if" not in hygiene and install["id"] == "install"
    assert tests["if"] == "${{ !cancelled() && steps.install.outcome == 'success' }}"


def test_this_repositorys_workflows_report_nbval_whatever_ran_before_it():
    # The appendix's rule, kept by this repository too: a step that runs strict nbval is
    # either the first check of its job, or runs when an earlier one failed.
    found = 0
    for path in sorted((REPO_ROOT / ".github" / "workflows").glob("*.yml")):
        for job in yaml.safe_load(path.read_text())["jobs"].values():
            runs = [step.get("run", "") for step in job.get("steps", [])]
            for index, step in enumerate(job.get("steps", [])):
                if "--nbval" in step.get("run", "") and any(runs[:index]):
                    found += 1
                    assert "!cancelled()" in step.get("if", ""), (path.name, step["name"])
    assert found >= 1
    # make test runs the hygiene check and strict nbval in one pytest run: one never hides the
    # other. And the reference test needs the whole history (tests/notebooks/test_references.py).
    tests = yaml.safe_load((REPO_ROOT / ".github" / "workflows" / "tests.yml").read_text())
    (checkout,) = [s for s in tests["jobs"]["test"]["steps"] if "checkout" in s.get("uses", "")]
    assert checkout["with"]["fetch-depth"] == 0


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


def test_the_sanitize_file_holds_the_books_own_and_the_timings():
    from nbval.plugin import get_sanitize_patterns

    book = (REPO_ROOT / "tests" / "nbval_sanitize.cfg").read_text()
    assert C["SANITIZE"].startswith(book)
    assert stdout(defining_cell("SANITIZE")) == C["SANITIZE"]
    sections = C["SANITIZE"][len(book) :]
    patterns = get_sanitize_patterns(sections)
    assert len(patterns) == 1

    def sanitize(text):
        for regex, replacement in patterns:
            text = re.sub(regex, replacement, text)
        return text

    # What IPython's %time and %%time print, from nanoseconds to minutes.
    for fast, slow in [
        ("CPU times: user 2.35 \u00b5s, sys: 0 ns, total: 2.35 \u00b5s", "CPU times: user 1.2 s, "
         "sys: 12 ms, total: 1.21 s"),
        ("Wall time: 12.3 ms", "Wall time: 1.5 s"),
        ("Wall time: 3.1 us", "Wall time: 870 ms"),
        ("trained 3 epochs in 12.7 s", "trained 3 epochs in 9 s"),
    ]:  # fmt: skip
        assert sanitize(fast) == sanitize(slow) != fast, (fast, slow)
    assert sanitize("Wall time: 1min 3s") == "Wall time: TIME TIME"
    # Numbers that are not durations are still compared.
    for text in ["3 steps", "12 MB", "mean 22.00", "x is 3", "5 samples in 2 sets"]:
        assert sanitize(text) == text, text
    assert sanitize("trained 4 epochs in 1 s") != sanitize("trained 3 epochs in 1 s")


def test_the_timing_pattern_matches_what_time_really_prints(tmp_path):
    # Two runs of %%time and %time, in fresh kernels: different times, the same sanitized text.
    from nbclient import NotebookClient
    from nbformat.v4 import new_code_cell, new_notebook
    from nbval.plugin import get_sanitize_patterns

    patterns = get_sanitize_patterns(C["SANITIZE"])
    sources = ["%%time\nimport time\ntime.sleep(0.02)", "%time time.sleep(1.05)"]
    runs = []
    for _ in range(2):
        notebook = new_notebook(cells=[new_code_cell(text) for text in sources])
        NotebookClient(notebook, timeout=60, kernel_name="python3").execute()
        texts = ["".join(o["text"] for o in cell.outputs) for cell in notebook.cells]
        runs.append(texts)
    (ms, s), again = runs
    assert re.search(r"Wall time: \d+(\.\d+)? ms\n", ms) and "CPU times: user " in ms, ms
    assert re.search(r"Wall time: \d+(\.\d+)? s\n", s), s
    assert runs[0] != runs[1]
    for text in [*runs[0], *runs[1]]:
        clean = text
        for regex, replacement in patterns:
            clean = re.sub(regex, replacement, clean)
        assert clean == "CPU times: user TIME, sys: TIME, total: TIME\nWall time: TIME\n", text


def markdown() -> str:
    cells = json.loads(APPENDIX.read_text(encoding="utf-8"))["cells"]
    return "".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "markdown")


def git(*args: str, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=60)


def test_the_pinned_commit_holds_the_hook_and_the_tool_these_tests_run():
    # What a reader downloads or pre-commit checks out at the pin is what is tested here. A
    # change to either file needs a new pin, in a later commit (tests/notebooks/test_references.py checks
    # that the pin is a commit of main).
    pin = C["PIN"]
    assert re.fullmatch(r"[0-9a-f]{40}", pin), pin
    for path in [".pre-commit-hooks.yaml", "tools/notebook_hygiene.py"]:
        pinned = git("show", f"{pin}:{path}")
        assert pinned.returncode == 0, pinned.stderr
        assert pinned.stdout == (REPO_ROOT / path).read_bytes(), f"{path} changed since {pin}"
    mode = git("ls-tree", pin, "tools/notebook_hygiene.py").stdout.decode()
    assert mode.startswith("100755 "), mode  # pre-commit runs it as a script


def test_the_remote_hook_is_this_repositorys_pinned_to_a_commit_and_scoped():
    config = yaml.safe_load(C["PRECOMMIT"])
    (repository,) = config["repos"]
    assert repository["repo"] == load_repository().url
    assert repository["rev"] == C["PIN"]  # the one the setup cell fetches, never a branch
    assert f"rev: {C['PIN']}" in source(defining_cell("PRECOMMIT"))
    (hook,) = repository["hooks"]
    (manifest,) = yaml.safe_load(HOOKS.read_text())
    assert hook["id"] == manifest["id"]
    assert hook["args"] == ["--kernel-name=python3"]  # what the re-execution command runs
    assert "--kernel_name=python3" in C["REEXECUTE"]
    assert C["HOOK"] == f"python3 {manifest['entry']} {' '.join(hook['args'])}"
    assert C["HYGIENE"] == f"pre-commit run {hook['id']} --all-files"
    assert stdout(defining_cell("PRECOMMIT")) == C["PRECOMMIT"]
    # The scope: the layout's folder; checkpoints (which the reader's exclude must name again,
    # since it replaces the hook's own) and drafts left out.
    local = yaml.safe_load(C["PRECOMMIT_LOCAL"])["repos"][0]["hooks"][0]
    for scoped in [hook, local]:
        assert scoped["files"] == f"^{C['LAYOUT']['NOTEBOOKS']}/"
        exclude = re.compile(scoped["exclude"])
        assert exclude.search("notebooks/.ipynb_checkpoints/a-checkpoint.ipynb")
        assert exclude.search("notebooks/scratch/draft.ipynb")
        assert not exclude.search("notebooks/reports/03_report.ipynb")
    assert re.search(manifest["exclude"], "notebooks/.ipynb_checkpoints/a-checkpoint.ipynb")
    assert ".ipynb_checkpoints/" in re.search(r"^printf '(.*)' >> \.gitignore", markdown(), re.M)[1]


def test_the_copy_is_downloaded_at_the_pin_and_run_by_a_local_hook():
    (raw,) = re.findall(r"^RAW=(\S+)$", markdown(), re.M)
    (download,) = re.findall(
        r'^mkdir -p (\S+)\ncurl -fsSL -o (\S+) "\$RAW/(\S+)"$', markdown(), re.M
    )
    folder, target, path = download
    repository = load_repository()
    assert raw == f"https://raw.githubusercontent.com/{repository.slug}/{C['PIN']}"
    # The setup cell fetches the same file from the same place, in Colab.
    assert 'RAW = f"https://raw.githubusercontent.com/carry-on-book/carry-on/{PIN}"' in source(
        code_cells()[0]
    )
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


def commit_all(repo: Path, message: str = "notebooks") -> None:
    """git add everything (as a reader does; .gitignore applies) and commit."""
    for command in [["init", "-q"], ["add", "."], ["commit", "-qm", message]]:
        if command[0] == "init" and (repo / ".git").exists():
            continue
        done = subprocess.run(["git", *command], cwd=repo, env=environment(), capture_output=True)
        assert done.returncode == 0, done.stderr


def hook_files(repo: Path, config: str) -> list[str]:
    """The files pre-commit hands a hook: tracked (`--all-files`), matching its `types` (here
    .ipynb), `files` and not `exclude` (the config's, else the hook's own)."""
    (repository,) = yaml.safe_load(C[config] if config in C else config)["repos"]
    (wanted,) = repository["hooks"]
    (manifest,) = yaml.safe_load(HOOKS.read_text())
    files = wanted.get("files", "")
    exclude = wanted.get("exclude", manifest["exclude"])
    tracked = git("ls-files", cwd=repo).stdout.decode().splitlines()
    return [
        path
        for path in tracked
        if path.endswith(".ipynb") and re.search(files, path) and not re.search(exclude, path)
    ]


def run_hook(repo: Path, config: str = "PRECOMMIT") -> subprocess.CompletedProcess:
    """A hook of one of the appendix's .pre-commit-config.yaml files, run as pre-commit runs it.

    The entry, then the hook's args, then the files pre-commit selects (`hook_files`), in the
    reader's repository. For the remote hook (`language: unsupported_script`), the entry is a
    file of pre-commit's copy of the hook's repository (here, this checkout, which the pinned
    commit matches); for the local one (`language: unsupported`), a command in the reader's
    repository, which holds the copy the appendix downloads.
    """
    (repository,) = yaml.safe_load(C[config] if config in C else config)["repos"]
    (wanted,) = repository["hooks"]
    files = hook_files(repo, config)
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


def write_notebook(
    repo: Path, name: str, sources: list[str], kernel="python3", tags=None, folder="notebooks"
):
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    cells = [new_code_cell(text) for text in sources]
    for index, cell_tags in (tags or {}).items():
        cells[index].metadata["tags"] = cell_tags
    spec = {"name": kernel, "display_name": f"Python ({kernel})", "language": "python"}
    path = repo / folder / f"{name}.ipynb"
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
    timed = "%%time\ny = sorted(range(200_000), key=str)"  # %%time's output, sanitized
    write_notebook(repo, "data", ["x = 41", "print(x + 1)", "print(x * 2)", timed])
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
    # Jupyter's copy of a notebook, as it was before it ran, committed by mistake, and a draft:
    # neither is executed, by the appendix's command, nor tested, by nbval or the hook.
    write_notebook(repo, "data-checkpoint", ["x = 41"], folder="notebooks/.ipynb_checkpoints")
    write_notebook(repo, "idea", ["print('a draft')"], folder="scratch")
    done = shell(C["REEXECUTE"], repo)
    assert done.returncode == 0, done.stderr
    commit_all(repo)
    notebooks = (repo / "notebooks").rglob("*.ipynb")
    executed = sorted(path for path in notebooks if ".ipynb_checkpoints" not in path.parts)
    assert [path.relative_to(repo).as_posix() for path in executed] == [
        "notebooks/data.ipynb",
        "notebooks/model.ipynb",
        "notebooks/reports/report.ipynb",
    ]
    for path in executed:
        notebook = nbformat.read(path, as_version=4)
        assert [cell.execution_count for cell in notebook.cells] == [1, 2, 3, 4][
            : len(notebook.cells)
        ]
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
    assert re.search(r"\b7 passed, 1 skipped\b", output), output
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

    def misspelt(cells):  # markers nbval ignores, and the cells after them edited
        cells[0].source = "# NBVAL-SKIP\nx = 40"
        cells[1].metadata["tags"] = ["nbval_skip"]

    variant("data", "stale", stale)
    variant("data", "never", never)
    variant("data", "misspelt", misspelt)
    variant("model", "order", rerun)  # it names the kernel my-project-env
    variant("model", "error", untagged)
    variant("reports/report", "reports/report", skipped_stale)
    write_notebook(repo, "stderr", ["import warnings\n\nwarnings.warn('check the units')"])
    for unchanged in ["data", "model"]:  # passed both checks in the clean repository
        (folder / f"{unchanged}.ipynb").unlink()
    done = shell("jupyter execute --inplace --kernel_name=python3 notebooks/stderr.ipynb", repo)
    assert done.returncode == 0, done.stderr
    commit_all(repo, "faults")  # the hook sees tracked files only
    return repo


def test_each_fault_is_caught_by_the_check_the_appendix_names(broken_repo):
    exit_code, failing, output = nbval(C["PYTEST"], broken_repo)
    assert exit_code == 1, output
    # Strict nbval: the stale outputs, the error that now stops the run, the warning whose path
    # names this kernel's process. It passes the never-executed cell, the out-of-order counts and
    # the stale output of the skipped cell.
    assert failing == [
        "FAILED notebooks/error.ipynb::Cell 1",
        "FAILED notebooks/misspelt.ipynb::Cell 1",  # both run, although meant to be skipped
        "FAILED notebooks/misspelt.ipynb::Cell 2",
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
    assert sorted(problems) == ["error", "misspelt", "never", "order", "stderr"], hook.stdout
    assert problems["misspelt"] == [
        "code cell 0, line 1 is '# NBVAL-SKIP', which nbval ignores: it reads `# NBVAL_SKIP` "
        "alone on its line. Write that, or give the cell the tag 'nbval-skip'.",
        "code cell 1 has the tag 'nbval_skip', which nbval ignores: it reads 'nbval-skip'. "
        "Rename the tag; as it is, the cell is tested as if it had none.",
    ]
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


# --- the appendix itself ------------------------------------------------------------------------


def test_the_appendix_reads_nothing_of_this_repository_but_the_tool():
    # It runs from any folder (a reader's repository, Colab): whatever it needs, it writes into
    # a temporary folder of its own first. The one file it takes is the hygiene tool, which it
    # copies into its reader's repository as the reader's curl line would.
    uses = [
        m.group(0) for cell in code_cells()[1:] for m in re.finditer(r".*\bTOOL\b.*", source(cell))
    ]
    assert uses == [
        'shutil.copy(TOOL, REPO / "tools" / "notebook_hygiene.py")  # the curl line, offline'
    ]
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


def test_the_setup_finds_the_hygiene_tool_above_it_or_names_where_to_download_it(
    monkeypatch, tmp_path
):
    monkeypatch.chdir(REPO_ROOT / "book")  # where the notebook runs, in this repository
    assert run_setup_cell(monkeypatch)["TOOL"] == REPO_ROOT / "tools" / "notebook_hygiene.py"
    monkeypatch.chdir(tmp_path)  # a reader's folder, outside Colab, without the file
    with pytest.raises(RuntimeError) as stopped:
        run_setup_cell(monkeypatch)
    url = f"https://raw.githubusercontent.com/carry-on-book/carry-on/{C['PIN']}"
    assert str(stopped.value) == (
        f"This page runs tools/notebook_hygiene.py; download it: {url}/tools/notebook_hygiene.py"
    )


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


# --- the recipe in a repository of another layout -------------------------------------------------


def test_the_recipe_works_in_another_layout_with_no_makefile(tmp_path):
    """Notebooks in docs/examples/, drafts in docs/examples/scratch/, data next to a notebook.

    The reader changes what the appendix says to change: the layout's values (the export line,
    the workflow's env:) and the hook's files:, plus the --ignore-glob the appendix names for a
    scratch/ folder inside NOTEBOOKS. Then its commands run as printed, and a fresh clone shows
    the data file that was never committed.
    """
    layout = {**C["LAYOUT"], "NOTEBOOKS": "docs/examples"}
    repo = tmp_path / "project"
    (repo / "src").mkdir(parents=True)
    (repo / "nbval_sanitize.cfg").write_text(C["SANITIZE"])
    (repo / ".gitignore").write_text(".venv/\n.ipynb_checkpoints/\n*.csv\n")
    folder = "docs/examples"
    write_notebook(repo, "intro", ["x = 41", "print(x + 1)", "%%time\ny = x * 2"], folder=folder)
    csv = "print(open('stations.csv').read().split()[0])"
    write_notebook(repo, "data", [csv], folder=f"{folder}/reports")
    (repo / folder / "reports" / "stations.csv").write_text("station,t\nA,21.5\n")
    assert shell(C["REEXECUTE"], repo, layout=layout).returncode == 0
    # After the run: a draft never executed, and Jupyter's copy of it.
    write_notebook(repo, "draft", ["print('later')"], folder=f"{folder}/scratch")
    write_notebook(repo, "draft", ["print('later')"], folder=f"{folder}/scratch/.ipynb_checkpoints")
    commit_all(repo)
    checkpoints = f"{folder}/scratch/.ipynb_checkpoints"  # ignored, committed all the same
    subprocess.run(["git", "add", "-f", checkpoints], cwd=repo, check=True)
    commit_all(repo, "checkpoint")
    assert not (repo / "Makefile").exists()

    pytest_command = f"{C['PYTEST']} --ignore-glob='*/scratch/*'"
    exit_code, failing, output = nbval(pytest_command, repo, layout)
    assert (exit_code, failing) == (0, []), output
    assert re.search(r"\b4 passed\b", output), output  # intro's three cells, data's one

    config = C["PRECOMMIT"].replace("files: ^notebooks/", f"files: ^{folder}/")
    assert config != C["PRECOMMIT"]
    assert hook_files(repo, config) == [
        "docs/examples/intro.ipynb",
        "docs/examples/reports/data.ipynb",
    ]
    hook = run_hook(repo, config)
    assert (hook.returncode, hook.stdout) == (0, "notebook hygiene: 2 checked, 0 with problems\n")
    # Without the scope it would check the draft and the checkpoint, and fail.
    everything = run_hook(repo, C["PRECOMMIT"].replace("files: ^notebooks/", "files: ''"))
    assert everything.returncode == 0  # the config's exclude still leaves both out
    unscoped = re.sub(r"\n +exclude: .*", "", C["PRECOMMIT"]).replace(
        "files: ^notebooks/", "files: ''"
    )
    assert "exclude" not in unscoped
    # The hook's own exclude leaves out the checkpoint, not the draft.
    assert hook_files(repo, unscoped) == [
        "docs/examples/intro.ipynb",
        "docs/examples/reports/data.ipynb",
        "docs/examples/scratch/draft.ipynb",
    ]
    assert run_hook(repo, unscoped).returncode == 1

    # The workflow, with the layout's one line changed, is still valid and runs the same.
    workflow = C["WORKFLOW"].replace("NOTEBOOKS: notebooks", f"NOTEBOOKS: {folder}")
    assert yaml.safe_load(workflow)["env"] == layout

    # The fresh clone: the *.csv rule kept the data file out, so the clone fails where the
    # working tree passed; committed, it passes.
    in_temp = {**layout, "TMPDIR": str(tmp_path)}  # where mktemp makes the clone's folder
    clone = C["CLONE"].replace(" --nbval ...", C["PYTEST"].split('"$NOTEBOOKS"')[1])
    assert clone != C["CLONE"]
    exit_code, failing, output = nbval(f"{clone} --ignore-glob='*/scratch/*' -n 0", repo, in_temp)
    assert failing == ["FAILED docs/examples/reports/data.ipynb::Cell 0"], output
    assert "FileNotFoundError" in output
    subprocess.run(["git", "add", "-f", f"{folder}/reports/stations.csv"], cwd=repo, check=True)
    commit_all(repo, "data")
    exit_code, failing, output = nbval(f"{clone} --ignore-glob='*/scratch/*' -n 0", repo, in_temp)
    assert (exit_code, failing) == (0, []), output
