"""Repository checks that CI enforces and pre-commit suggests.

- actionlint passes on every workflow, and the workflows do what the README promises;
- ruff lint and ruff format pass on rnnlib/, tests/ and benchmarks/;
- .pre-commit-config.yaml runs the same ruff version as requirements.txt, on the same folders,
  plus the notebook hygiene check;
- the README badges and CITATION.cff point at the repository named in _config.yml.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.notebook_hygiene import REPO_ROOT, load_repository

pytestmark = pytest.mark.pinned_env

WORKFLOWS = sorted((REPO_ROOT / ".github" / "workflows").glob("*.yml"))
LINTED = ["rnnlib", "tests", "benchmarks"]


def tool(name: str) -> str:
    """A command-line tool installed in the running environment (the pinned .venv)."""
    path = Path(sys.executable).parent / name
    found = str(path) if path.exists() else shutil.which(name)
    assert found, f"{name} is not installed; it is pinned in requirements.txt (run `make env`)."
    return found


def run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)


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


def test_pre_commit_runs_the_same_checks_as_the_test_command():
    config = yaml.safe_load((REPO_ROOT / ".pre-commit-config.yaml").read_text())
    hooks = {hook["id"]: (repo, hook) for repo in config["repos"] for hook in repo["hooks"]}
    for hook_id, command in [("ruff-check", "check"), ("ruff-format", "format")]:
        _, hook = hooks[hook_id]
        assert hook["entry"].startswith(f".venv/bin/ruff {command}")  # the pinned ruff
        assert all(re.match(hook["files"], f"{folder}/x.py") for folder in LINTED)
        assert not re.match(hook["files"], "book/ch.ipynb")  # notebooks keep their outputs
    assert pinned("ruff")
    _, hook = hooks["notebook-hygiene"]
    assert hook["entry"] == ".venv/bin/python -m tests.notebook_hygiene"
    assert re.match(hook["files"], "book/01_the_carry.ipynb")
    assert not any("strip" in hook_id for hook_id in hooks)


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
