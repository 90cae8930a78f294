"""Every chapter runs top to bottom on the oldest jax and flax the book states (tests/floor.txt).

The stored outputs are not compared here (strict nbval does that on the pinned versions): an
older release may word an error message or round a printed number differently. What must hold
is that no cell raises unless it is meant to, so that a Colab reader whose preinstalled jax and
flax pass the setup cell's check can run the whole chapter. Run it with ``make test-floor``.
"""

from __future__ import annotations

import os
from importlib.metadata import version
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.book_hygiene import expects_error

pytestmark = pytest.mark.floor_env

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "book").glob("*.ipynb"))
FLOOR = {
    line.split("==")[0]: line.split("==")[1].strip()
    for line in (ROOT / "tests" / "floor.txt").read_text().splitlines()
    if line.split("==")[0] in ("jax", "flax")
}


def test_this_environment_is_the_floor():
    assert {name: version(name) for name in FLOOR} == FLOOR


def test_the_intro_states_the_floor():
    intro = (ROOT / "book" / "intro.md").read_text()
    assert f"jax {FLOOR['jax']} and flax {FLOOR['flax']}" in intro


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_chapter_runs_on_the_oldest_supported_jax_and_flax(chapter):
    notebook = nbformat.read(chapter, as_version=4)
    for cell in notebook.cells:  # cells meant to raise may raise; any other error fails
        if cell.cell_type == "code" and expects_error(cell):
            cell.metadata.setdefault("tags", []).append("raises-exception")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    # Figures as the chapters store them (inline), so cells that read them find them.
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    client = NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(chapter.parent)}},
    )
    client.execute()  # raises CellExecutionError, with the cell and its traceback
