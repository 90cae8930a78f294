"""Papercuts a user met: each gives linen's behaviour or a clear error naming what was
expected and what was received."""

import builtins
import re

import jax
import jax.numpy as jnp
import pytest

from rnnlib import RNN, MinGRUCell, layout


def _raises(exc, *fragments):
    return pytest.raises(exc, match="(?s)" + "".join(f"(?=.*{re.escape(f)})" for f in fragments))


def test_mingru_initialises_its_gate_bias_apart_from_its_candidates():
    cell = MinGRUCell(4, gate_bias_init=jax.nn.initializers.constant(-4.0))
    params = RNN(cell).init(jax.random.key(0), jnp.ones((2, 3, 5)))["params"]["cell"]
    assert bool((params["gate"]["bias"] == -4.0).all())
    assert bool((params["candidate"]["bias"] == 0.0).all())
    default = RNN(MinGRUCell(4)).init(jax.random.key(0), jnp.ones((2, 3, 5)))["params"]["cell"]
    assert bool((default["gate"]["bias"] == 0.0).all())  # bias_init for both by default


def test_layout_plot_without_matplotlib_says_to_install_it(monkeypatch):
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with _raises(ImportError, "Layout.plot", "matplotlib", "pip install matplotlib"):
        layout(RNN(MinGRUCell(4)), (2, 3, 5)).plot()
