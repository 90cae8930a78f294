"""The book's equations render offline: MathJax is a file of the built book, not a CDN script.

Jupyter Book 1.x leaves Sphinx's default in place, a MathJax URL on a CDN, so a book built and
read without a network shows raw TeX. `_config.yml` enables the `sphinx-mathjax-offline`
extension (pinned in requirements.txt), which copies MathJax 3 from its wheel into
`_build/html/_static/mathjax`, and sets `mathjax_path` to that copy. These tests check the
configuration Jupyter Book hands to Sphinx, and build a one-page Sphinx project with the same
extension and path (about a second), without building the whole book.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from urllib.parse import urlparse

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
EXTENSION = "sphinx-mathjax-offline"


def _is_remote(path):
    parsed = urlparse(path)
    return bool(parsed.scheme or parsed.netloc or path.startswith("//"))


@pytest.fixture(scope="module")
def final_config():
    """The Sphinx configuration Jupyter Book builds from _config.yml."""
    from jupyter_book.config import get_final_config

    config, _ = get_final_config(
        user_yaml=REPO_ROOT / "_config.yml",
        cli_config={"latex_individualpages": False},
        sourcedir=REPO_ROOT,
    )
    return config


@pytest.mark.parametrize(
    "path, remote",
    [
        ("https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js", True),
        ("//cdn.jsdelivr.net/npm/mathjax@3/es5/tex-chtml.js", True),
        ("mathjax/tex-chtml.js", False),
        ("_static/mathjax/tex-chtml.js", False),
    ],
)
def test_is_remote_tells_a_cdn_address_from_a_file_of_the_book(path, remote):
    assert _is_remote(path) is remote


def test_the_book_configuration_loads_mathjax_from_a_local_path(final_config):
    path = final_config.get("mathjax_path")
    assert path, "_config.yml sets no sphinx.config.mathjax_path: Sphinx would use its CDN"
    assert not _is_remote(path), f"mathjax_path must be a file of the book, got {path!r}"
    assert EXTENSION in final_config["extensions"], (
        f"{EXTENSION} (which copies MathJax into the built book) is not in "
        f"_config.yml's sphinx.extra_extensions: {final_config['extensions']}"
    )


def test_the_extension_is_pinned_and_ships_the_configured_file(final_config):
    pins = re.findall(rf"^{EXTENSION}==(\S+)$", (REPO_ROOT / "requirements.txt").read_text(), re.M)
    assert len(pins) == 1, f"requirements.txt should pin {EXTENSION} exactly once"
    shipped = Path(importlib.import_module(EXTENSION).__file__).parent / "static"
    assert (shipped / final_config["mathjax_path"]).is_file(), (
        f"{EXTENSION} ships no {final_config['mathjax_path']} under {shipped}"
    )


def test_a_built_page_references_the_local_copy_of_mathjax(final_config, tmp_path):
    from sphinx.application import Sphinx

    source, out = tmp_path / "source", tmp_path / "html"
    source.mkdir()
    (source / "conf.py").write_text("")
    (source / "index.rst").write_text("Math\n====\n\n:math:`h_t = \\tanh(W h_{t-1})`\n")
    app = Sphinx(
        str(source),
        str(source),
        str(out),
        str(tmp_path / "doctrees"),
        "html",
        confoverrides={
            "extensions": ["sphinx.ext.mathjax", EXTENSION],
            "mathjax_path": final_config["mathjax_path"],
        },
        status=None,
        warning=None,
    )
    app.build()
    page = (out / "index.html").read_text()
    scripts = [src for src in re.findall(r'<script[^>]*src="([^"]+)"', page) if "mathjax" in src]
    assert scripts, "the page loads no MathJax script"
    assert not any(_is_remote(src) for src in scripts), f"remote MathJax: {scripts}"
    for src in scripts:
        assert (out / src.split("?")[0]).is_file(), f"{src} is not in the built page's folder"
