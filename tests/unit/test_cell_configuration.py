"""The configuration every rnnlib cell shares is declared once, on RNNCellBase."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest

import rnnlib
from rnnlib.linear import Dense

SHIPPED = [
    rnnlib.SimpleCell(3),
    rnnlib.LSTMCell(3),
    rnnlib.GRUCell(3),
    rnnlib.MGUCell(3),
    rnnlib.ConvLSTMCell(3, kernel_size=(3,)),
    rnnlib.MinGRUCell(3),
    rnnlib.MinLSTMCell(3),
    rnnlib.RGLRUCell(3),
]
SHARED = ("dtype", "param_dtype", "carry_init")


@pytest.mark.parametrize("cell", SHIPPED, ids=lambda c: type(c).__name__)
def test_every_cell_takes_the_shared_fields_from_the_base_keyword_only(cell):
    fields = {f.name: f for f in dataclasses.fields(cell)}
    for name in SHARED:
        assert fields[name].kw_only, name
        assert name not in vars(type(cell)).get("__annotations__", {}), name
    changed = type(cell)(
        3,
        **({"kernel_size": (3,)} if "kernel_size" in fields else {}),
        dtype=jnp.bfloat16,
        param_dtype=jnp.bfloat16,
    )
    assert (changed.dtype, changed.param_dtype) == (jnp.bfloat16, jnp.bfloat16)
    parameters = inspect.signature(type(cell)).parameters
    assert all(parameters[name].kind is inspect.Parameter.KEYWORD_ONLY for name in SHARED)


def test_carry_init_and_param_dtype_reach_the_initial_carry():
    ones = jax.nn.initializers.ones
    cell = rnnlib.GRUCell(4, carry_init=ones, param_dtype=jnp.bfloat16)
    h = cell.initialize_carry(jax.random.key(0), (2, 3))
    assert h.dtype == jnp.bfloat16 and h.shape == (2, 4)
    assert bool(jnp.all(h == 1))


class _OwnCell(rnnlib.RNNCellBase):
    """An Elman cell of one's own, that stores its parameters in bfloat16 by default."""

    features: int
    param_dtype: Any = jnp.bfloat16
    scale: float = 1.0

    def layers(self, input_shape):
        init = jax.nn.initializers.lecun_normal()
        return {
            "i": Dense("x", input_shape[-1], self.features, init),
            "h": Dense("h", self.features, self.features, init),
        }

    def update(self, h, a):
        h = jnp.tanh(self.scale * (a["i"] + a["h"]))
        return h, h


def test_an_own_cell_may_give_a_shared_field_a_new_default():
    cell = _OwnCell(4, 0.5)  # features, then its own fields; the shared ones stay keyword-only
    assert (cell.features, cell.scale, cell.param_dtype) == (4, 0.5, jnp.bfloat16)
    x = jnp.ones((2, 5, 3))
    variables = rnnlib.RNN(cell).init(jax.random.key(0), x)
    assert variables["params"]["cell"]["i"]["kernel"].dtype == jnp.bfloat16
    assert _OwnCell(4, param_dtype=jnp.float32).param_dtype == jnp.float32


@pytest.mark.parametrize(
    "misspelt, meant",
    [
        ("param_dtyp", "param_dtype"),
        ("feature", "features"),
        ("carry_int", "carry_init"),
        ("dtpye", "dtype"),
    ],
)
def test_a_field_misspelt_from_a_shared_one_is_refused(misspelt, meant):
    with pytest.raises(TypeError, match=f"declares a field '{misspelt}'.*did you mean '{meant}'"):
        type(
            "Misspelt",
            (rnnlib.RNNCellBase,),
            {"__annotations__": {misspelt: "Any"}, misspelt: None},
        )


@pytest.mark.parametrize("name", ["in_features", "num_features", "hidden_dtype", "scale", "kind"])
def test_names_built_on_a_shared_one_are_fields_of_their_own(name):
    cls = type("Own", (rnnlib.RNNCellBase,), {"__annotations__": {name: "Any"}, name: 1})
    assert getattr(cls(), name) == 1


def test_a_wrapper_reports_the_configuration_of_the_cell_it_wraps():
    inner = rnnlib.GRUCell(4, dtype=jnp.bfloat16, carry_init=jax.nn.initializers.ones)
    cell = rnnlib.RecurrentDropoutCell(inner, recurrent_rate=0.25)
    masked = cell.with_masks()
    for wrapper in (cell, masked):
        assert wrapper.inner is inner
        assert (wrapper.features, wrapper.dtype, wrapper.carry_init) == (
            4,
            jnp.bfloat16,
            inner.carry_init,
        )
        assert wrapper.param_dtype == inner.param_dtype
    with pytest.raises(TypeError, match="dtype"):
        rnnlib.RecurrentDropoutCell(inner, dtype=jnp.float32)  # set on the cell, not the wrapper
    assert "dtype" not in repr(rnnlib.RecurrentDropoutCell(rnnlib.GRUCell(4)))


PROBED = ["cell_base", "plan", "linear_rnn", "recurrent_dropout"]


@pytest.mark.parametrize("module", PROBED)
def test_the_core_reads_configuration_it_declares_without_probing(module):
    source = Path(rnnlib.__file__).parent / f"{module}.py"
    probes = [
        f"line {node.lineno}"
        for node in ast.walk(ast.parse(source.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and (node.func.id == "hasattr" or (node.func.id == "getattr" and len(node.args) == 3))
    ]
    assert not probes, f"rnnlib/{module}.py probes with getattr(..., default) or hasattr: {probes}"
