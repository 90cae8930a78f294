"""Repository checks that CI enforces and pre-commit suggests.

- actionlint passes on every workflow, and the workflows do what the README promises;
- ruff lint and ruff format pass on rnnlib/, tests/, benchmarks/ and the chapters' code in book/
  (formatted to 88 characters there, by book/ruff.toml);
- .pre-commit-config.yaml runs the same ruff version as requirements.txt, on the same folders
  (notebooks included), plus the notebook hygiene check and the jupytext sync of each chapter
  with its Markdown pair;
- the README badges and CITATION.cff point at the repository named in _config.yml.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.book_hygiene import REPO_ROOT, floor_versions, load_repository, setup_cell_source

pytestmark = pytest.mark.pinned_env

WORKFLOWS = sorted((REPO_ROOT / ".github" / "workflows").glob("*.yml"))
LINTED = ["rnnlib", "tests", "benchmarks", "book", "tools"]


def tool(name: str) -> str:
    """A command-line tool installed in the running environment (the pinned .venv)."""
    path = Path(sys.executable).parent / name
    found = str(path) if path.exists() else shutil.which(name)
    assert found, f"{name} is not installed; it is pinned in requirements.txt (run `make env`)."
    return found


def run(*command: str, input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, input=input
    )


def workflow(name: str) -> dict:
    data = yaml.safe_load((REPO_ROOT / ".github" / "workflows" / f"{name}.yml").read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def steps(data: dict) -> list[dict]:
    return [step for job in data["jobs"].values() for step in job.get("steps", [])]


def pinned(package: str) -> str:
    lines = (REPO_ROOT / "requirements.txt").read_text().splitlines()
    versions = [line.split("==")[1] for line in lines if line.startswith(f"{package}==")]
    assert len(versions) == 1, f"requirements.txt should pin {package} exactly once"
    return versions[0]


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_actionlint_passes(path):
    # shellcheck and pyflakes are turned off so the result does not depend on what else is
    # installed on the machine; .github/upstream.sh is kept shellcheck-clean by hand.
    result = run(tool("actionlint"), "-shellcheck=", "-pyflakes=", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_catches_a_broken_workflow(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: push\njobs:\n  x:\n    runs-on: ubuntu-latest\n"
        "    steps:\n      - run: echo ${{ matrix.nope }}\n"
    )
    result = run(tool("actionlint"), "-shellcheck=", "-pyflakes=", str(broken))
    assert result.returncode == 1
    assert "matrix" in result.stdout


def test_workflows_are_the_three_promised():
    assert [p.name for p in WORKFLOWS] == ["book.yml", "tests.yml", "upstream.yml"]


def test_tests_workflow_runs_make_test_on_311_and_312_for_pushes_and_pull_requests():
    data = workflow("tests")
    assert {"push", "pull_request"} <= set(data["on"])
    (job,) = data["jobs"].values()
    assert job["runs-on"] == "ubuntu-latest"
    assert job["strategy"]["matrix"]["python-version"] == ["3.11", "3.12"]
    assert any(step.get("run", "").startswith("make test") for step in steps(data))


def test_book_workflow_builds_with_warnings_as_errors_and_deploys_with_official_pages_actions():
    data = workflow("book")
    assert data["on"]["push"]["branches"] == ["main"]
    uses = [step["uses"].split("@")[0] for step in steps(data) if "uses" in step]
    for action in ["configure-pages", "upload-pages-artifact", "deploy-pages"]:
        assert f"actions/{action}" in uses
    assert any(step.get("run", "").startswith("make book") for step in steps(data))
    assert "-W" in re.search(r"^book:.*\n\t(.*)", (REPO_ROOT / "Makefile").read_text(), re.M)[1]
    deploy = data["jobs"]["deploy"]
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert deploy["environment"]["name"] == "github-pages"


def test_upstream_workflow_runs_weekly_and_by_hand_and_uploads_its_report():
    data = workflow("upstream")
    assert "schedule" in data["on"] and "workflow_dispatch" in data["on"]
    assert any("upstream.sh" in step.get("run", "") for step in steps(data))
    (upload,) = [s for s in steps(data) if s.get("uses", "").startswith("actions/upload-artifact")]
    assert upload["if"] == "always()"
    script = (REPO_ROOT / ".github" / "upstream.sh").read_text()
    assert f"REPORT={upload['with']['path'].rstrip('/')}" in script


def test_workflows_use_no_secrets_beyond_the_pages_token():
    for path in WORKFLOWS:
        assert "secrets." not in path.read_text(), path.name


def test_ruff_lint_passes():
    result = run(tool("ruff"), "check", *LINTED)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_passes():
    result = run(tool("ruff"), "format", "--check", *LINTED)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_sees_every_chapter_notebook_but_not_their_markdown_pairs():
    result = run(tool("ruff"), "check", "--show-files", "book")
    seen = {Path(line).resolve() for line in result.stdout.splitlines() if line.strip()}
    notebooks = {path.resolve() for path in (REPO_ROOT / "book").glob("*.ipynb")}
    assert notebooks and notebooks <= seen
    # book/md holds the same cells as text, which ruff checks in the notebooks; left in, ruff
    # format would reformat the code quoted in their prose and break the pairs' sync.
    pairs = sorted(str(path) for path in (REPO_ROOT / "book" / "md").glob("*.md"))
    result = run(tool("ruff"), "format", "--check", "--force-exclude", *pairs)
    assert pairs and result.returncode == 0, result.stdout
    assert "No Python files found" in result.stderr


def test_ruff_lint_checks_the_chapters_code(tmp_path):
    # A copy of a chapter with an unused import, checked under book/'s settings.
    chapter = json.loads((REPO_ROOT / "book" / "_template.ipynb").read_text())
    cell = next(c for c in chapter["cells"] if c["cell_type"] == "code")
    cell["source"] = ["import os\n", *cell["source"]]
    broken = tmp_path / "broken.ipynb"
    broken.write_text(json.dumps(chapter))
    config = str(REPO_ROOT / "book" / "ruff.toml")
    result = run(tool("ruff"), "check", "--config", config, str(broken))
    assert result.returncode == 1 and "F401" in result.stdout, result.stdout + result.stderr


def test_ruff_formats_the_chapters_to_88_characters_and_the_library_to_100():
    line = "x = [" + ", ".join(["1000"] * 15) + "]\n"
    assert len(line.rstrip()) == 94

    def formatted(path):
        result = run(tool("ruff"), "format", "--stdin-filename", path, "-", input=line)
        assert result.returncode == 0, result.stderr
        return result.stdout

    assert formatted("rnnlib/x.py") == line
    assert formatted("book/x.py") != line and all(
        len(wrapped) <= 88 for wrapped in formatted("book/x.py").splitlines()
    )


def test_the_colab_setup_cell_is_already_formatted():
    # tests.book_hygiene's canonical cell must survive ruff format at the book's 88
    # characters, or formatting the chapters would make them disagree with it.
    source = setup_cell_source() + "\n"
    result = run(tool("ruff"), "format", "--stdin-filename", "book/x.py", "-", input=source)
    assert result.returncode == 0, result.stderr
    assert result.stdout == source


def test_pre_commit_runs_the_same_checks_as_the_test_command():
    config = yaml.safe_load((REPO_ROOT / ".pre-commit-config.yaml").read_text())
    hooks = {hook["id"]: hook for repo in config["repos"] for hook in repo["hooks"]}
    for hook_id, command in [("ruff-check", "check"), ("ruff-format", "format")]:
        hook = hooks[hook_id]
        assert hook["entry"].startswith(f".venv/bin/ruff {command}")  # the pinned ruff
        assert "--force-exclude" in hook["entry"]  # so book/ruff.toml's exclusions hold
        assert all(re.match(hook["files"], f"{folder}/x.py") for folder in LINTED)
        # Notebooks too: ruff formats their code cells and leaves the outputs alone.
        assert {"python", "jupyter"} <= set(hook["types_or"])
        assert re.match(hook["files"], "book/the_carry.ipynb")
    assert pinned("ruff")
    hook = hooks["notebook-hygiene"]
    assert hook["entry"] == ".venv/bin/python -m tests.book_hygiene"
    assert re.match(hook["files"], "book/the_carry.ipynb")
    assert not any("strip" in hook_id for hook_id in hooks)


def test_pre_commit_syncs_each_chapter_with_its_markdown_pair():
    config = yaml.safe_load((REPO_ROOT / ".pre-commit-config.yaml").read_text())
    hooks = [hook for repo in config["repos"] for hook in repo["hooks"]]
    ids = [hook["id"] for hook in hooks]
    sync = hooks[ids.index("jupytext-sync")]
    # The pinned jupytext; in pre-commit mode the staged file of a pair is its source, whatever
    # the files' modification times.
    entry = shlex.split(sync["entry"])
    assert entry[:2] == [".venv/bin/jupytext", "--sync"] and "--pre-commit-mode" in entry
    assert pinned("jupytext")
    # Formatting goes through jupytext, so that the notebook and its pair get the same code: the
    # pinned ruff, formatting a notebook (--pipe-fmt ipynb) under book/'s settings.
    assert entry[entry.index("--pipe-fmt") + 1] == "ipynb"
    pipe = shlex.split(entry[entry.index("--pipe") + 1])
    assert pipe[:2] == [".venv/bin/ruff", "format"]
    assert pipe[pipe.index("--stdin-filename") + 1].startswith("book/") and pipe[-1] == "-"
    for path in ["book/the_carry.ipynb", "book/_template.ipynb", "book/md/the_carry.md"]:
        assert re.match(sync["files"], path), path
    for path in ["book/intro.md", "book/api.md", "README.md", "tests/x.ipynb"]:
        assert not re.match(sync["files"], path), path
    # Synced first, so ruff and the hygiene check see the notebook that will be committed.
    assert ids.index("jupytext-sync") < min(ids.index(i) for i in ["ruff-check", "ruff-format"])


def test_readme_badges_point_at_the_configured_repository():
    readme = (REPO_ROOT / "README.md").read_text()
    repository = load_repository()
    for name in ["tests", "book"]:
        assert f"{repository.url}/actions/workflows/{name}.yml/badge.svg" in readme
    assert repository.pages_url in readme
    assert "](CONTRIBUTING.md)" in readme
    # The two commands stay the first thing a reader runs.
    first_block = re.search(r"```bash\n(.*?)```", readme, re.S)[1]
    assert [line.split()[:2] for line in first_block.splitlines()] == [
        ["make", "book"],
        ["make", "test"],
    ]


def test_citation_file_is_valid_and_agrees_with_config_and_pyproject():
    citation = yaml.safe_load((REPO_ROOT / "CITATION.cff").read_text())
    assert citation["cff-version"] == "1.2.0"
    assert citation["message"] and citation["title"]
    assert citation["authors"] == [{"name": "The Carry On authors"}]
    assert citation["repository-code"] == load_repository().url
    pyproject = (REPO_ROOT / "pyproject.toml").read_text()
    assert f'\nversion = "{citation["version"]}"\n' in pyproject
    assert citation["license"] == "Apache-2.0"
    assert re.search(r'^license = (\{ text = )?"Apache-2.0"', pyproject, re.M)


def test_license_is_the_apache_2_license():
    text = (REPO_ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


DOCS = ["README.md", "CONTRIBUTING.md", "book/intro.md"]


def _make_targets() -> set[str]:
    text = (REPO_ROOT / "Makefile").read_text()
    return set(re.findall(r"^([a-z][a-z-]*):", text, flags=re.MULTILINE))


def test_every_make_command_the_documentation_gives_is_a_target():
    targets = _make_targets()
    for doc in DOCS:
        for target in re.findall(r"`make ([a-z][a-z-]*)", (REPO_ROOT / doc).read_text()):
            assert target in targets, f"{doc} tells readers to run `make {target}`"


def test_every_tool_the_documentation_and_makefile_run_from_the_venv_is_installed():
    """What `make lab` (and the docs' `.venv/bin/...` commands) start is in the pinned
    environment, so a reader does not meet 'Jupyter command not found'."""
    texts = [(REPO_ROOT / name).read_text() for name in [*DOCS, "Makefile"]]
    tools = {t for text in texts for t in re.findall(r"(?:\.venv|\$\(VENV\))/bin/([\w.-]+)", text)}
    assert {"jupyter-lab", "jupyter-book", "python", "ruff"} <= tools
    # A tool the same documents install first (pre-commit, optional) is not expected here,
    # nor JupyterLab, which `make lab` installs itself (pinned) before starting it.
    installed_by_hand = {t for text in texts for t in re.findall(r"pip install ([\w-]+)", text)}
    installed_by_hand.add("jupyter-lab")
    bin_dir = Path(sys.executable).parent
    missing = sorted(t for t in tools - installed_by_hand if not (bin_dir / t).exists())
    assert not missing, f"documented but not installed by requirements.txt: {missing}"
    makefile = (REPO_ROOT / "Makefile").read_text()
    recipe = makefile.split("\nlab:", 1)[1].split("\n\n", 1)[0]
    assert recipe.startswith(" $(VENV)/.lab-stamp") and "$(VENV)/bin/jupyter-lab book/" in recipe
    assert re.search(r"^JUPYTERLAB := jupyterlab==[0-9.]+$", makefile, flags=re.MULTILINE)
    assert "$(call install,$(VENV),$(JUPYTERLAB))" in makefile


def test_binder_and_live_code_run_the_pinned_environment():
    config = yaml.safe_load((REPO_ROOT / "_config.yml").read_text())
    buttons = config["launch_buttons"]
    assert buttons["binderhub_url"] == "https://mybinder.org" and buttons["thebe"] is True
    # Binder installs requirements.txt (the pins) with the Python that runtime.txt names.
    runtime = (REPO_ROOT / "runtime.txt").read_text().strip()
    assert runtime == "python-3.11", runtime
    assert "Python 3.11" in (REPO_ROOT / "README.md").read_text()
    intro = (REPO_ROOT / "book" / "intro.md").read_text()
    assert "Binder" in intro and "Live Code" in intro and "`make lab`" in intro


def test_every_rnnlib_marker_in_the_chapters_carries_the_marker_class():
    """The book's one marker for rnnlib's own behaviour looks the same on every page."""
    found = 0
    for path in sorted((REPO_ROOT / "book" / "md").glob("*.md")):
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines):
            if line.startswith("```{admonition}") and "rnnlib" in line:
                found += 1
                assert line == "```{admonition} rnnlib's own", f"{path.name}:{number + 1}"
                # open, or collapsed (a dropdown keeps the marker's colours)
                marker = lines[number + 1]
                assert marker in (":class: rnnlib", ":class: rnnlib, dropdown"), (
                    f"{path.name}:{number + 2}"
                )
    assert found >= 8, found
    css = (REPO_ROOT / "_static" / "rnnlib.css").read_text()
    assert "div.admonition.rnnlib" in css


def _run_setup_cell(monkeypatch, versions):
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "version", versions.__getitem__)
    namespace = {}
    exec(setup_cell_source(), namespace)
    return namespace


def test_the_setup_cell_stops_with_what_to_install_when_jax_or_flax_is_too_old(monkeypatch):
    with pytest.raises(RuntimeError) as old:
        _run_setup_cell(monkeypatch, {"jax": "0.7.2", "flax": "0.11.2"})
    message = str(old.value)
    assert "than jax 0.7.2, flax 0.11.2" in message
    assert 'pip install -U "jax>=0.8.1" "flax>=0.12.1"' in message
    assert "Restart session" in message
    with pytest.raises(RuntimeError, match=r'-U "flax>=0\.12\.1" \('):  # only what is old
        _run_setup_cell(monkeypatch, {"jax": "0.10.2", "flax": "0.12.0"})


def test_the_setup_cell_lets_the_floor_and_newer_releases_through(monkeypatch):
    floor = dict(floor_versions())
    assert _run_setup_cell(monkeypatch, floor)["OLDEST"] == floor
    _run_setup_cell(monkeypatch, {"jax": "0.10.2", "flax": "0.12.8"})
    _run_setup_cell(monkeypatch, {"jax": "0.11.0.dev20261201", "flax": "1.0.0rc1"})


def test_the_intro_links_every_chapter_in_the_order_of_the_table_of_contents():
    toc = yaml.safe_load((REPO_ROOT / "_toc.yml").read_text())
    chapters = [
        Path(entry["file"]).name
        for part in toc["parts"]
        for entry in part["chapters"]
        if (REPO_ROOT / f"{entry['file']}.ipynb").exists()
    ]
    intro = (REPO_ROOT / "book" / "intro.md").read_text()
    guide = intro.split("## How to read it", 1)[1].split("\n## ", 1)[0]
    linked = re.findall(r"\]\(([\w-]+)\.ipynb\)", guide)
    assert linked == chapters
