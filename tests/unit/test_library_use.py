"""What a user meets who takes rnnlib as a library from its README and API page alone, and the
bad input an adversarial review found: each works, or is refused at once with a message that
says what was expected, what was given and what to do."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
import re
import subprocess
import sys
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rnnlib
from rnnlib import RNN, Bidirectional, ConvLSTMCell, GRUCell, LSTMCell, StackedRNN
from rnnlib.linear import Dense
from tests.parity_helpers import random_array, random_variables
from tests.tolerance import assert_close, assert_identical, recurrent_terms

ROOT = Path(__file__).resolve().parents[2]
KEY = jax.random.key(0)
X = jnp.asarray(np.random.default_rng(0).standard_normal((2, 5, 3)), jnp.float32)


def _raises(exc, *fragments):
    return pytest.raises(exc, match="(?s)" + "".join(f"(?=.*{re.escape(f)})" for f in fragments))


class MyCell(rnnlib.RNNCellBase):
    """A user's cell, written as the README says: no decorator."""

    features: int
    scale: float = 1.0

    def initialize_carry(self, rng, input_shape):
        return jnp.zeros(tuple(input_shape[:-1]) + (self.features,))

    def layers(self, input_shape):
        init = jax.nn.initializers.lecun_normal()
        n = self.features
        return {"i": Dense("x", input_shape[-1], n, init), "h": Dense("h", n, n, init)}

    def update(self, h, a):
        h = jnp.tanh(self.scale * (a["i"] + a["h"]))
        return h, h


# -- the library-user points ------------------------------------------------------------------


def test_a_cell_subclass_gets_frozen_hashable_fields_without_a_decorator():
    cell = MyCell(4)
    assert (cell.features, cell.scale) == (4, 1.0)
    assert cell == MyCell(4) and hash(cell) == hash(MyCell(4)) and cell != MyCell(4, 2.0)
    assert repr(cell) == "MyCell(features=4)"
    with pytest.raises(dataclasses.FrozenInstanceError):
        cell.features = 5
    with _raises(TypeError, "features"):
        MyCell()
    variables = RNN(cell).init(KEY, X)

    @jax.jit
    def apply(variables, x):
        return RNN(cell).apply(variables, x)

    run = jax.jit(lambda c, v, x: RNN(c).apply(v, x), static_argnums=0)  # the cell hashes
    assert_identical(run(cell, variables, X), apply(variables, X))


def test_a_subclass_decorated_as_older_code_was_still_works():
    @dataclasses.dataclass(frozen=True, repr=False)
    class Old(MyCell):
        offset: float = 0.0

    @dataclasses.dataclass(frozen=True)
    class Older(Old):
        pass

    cell = Older(4, offset=1.0)
    assert hash(cell) == hash(Older(4, offset=1.0))
    with pytest.raises(dataclasses.FrozenInstanceError):
        cell.offset = 2.0
    assert RNN(cell).apply(RNN(cell).init(KEY, X), X).shape == (2, 5, 4)


def test_recurrent_dropout_in_a_plain_rnn_says_how_and_runs_as_it_says():
    cell = rnnlib.RecurrentDropoutCell(LSTMCell(4), recurrent_rate=0.5, input_rate=0.3)
    how = "RNN(cell.with_masks(*cell.draw_masks(key, step_shape)))"
    with _raises(ValueError, "has no dropout masks", "StackedRNN", how, "cell.with_masks()"):
        RNN(cell).init(KEY, X)
    evaluation = RNN(cell.with_masks())
    variables = evaluation.init(KEY, X)
    dropped = RNN(cell.with_masks(*cell.draw_masks(jax.random.key(1), (2, 3))))
    assert jax.tree_util.tree_structure(dropped.init(KEY, X)) == jax.tree_util.tree_structure(
        variables
    )
    assert float(jnp.abs(dropped.apply(variables, X) - evaluation.apply(variables, X)).max()) > 1e-3


def test_without_flax_the_interop_module_names_a_command_that_installs_it():
    program = "import sys; sys.modules['flax'] = None; import rnnlib.interop"
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert done.returncode != 0
    assert "pip install flax" in done.stderr
    assert "'rnnlib[flax] @ git+https://github.com/carry-on-book/carry-on'" in done.stderr
    readme, pyproject = (ROOT / "README.md").read_text(), (ROOT / "pyproject.toml").read_text()
    assert "rnnlib[flax] @ git+https://github.com/carry-on-book/carry-on" in readme
    assert re.search(r"^flax = \[\"flax>=", pyproject, re.MULTILINE)


@pytest.mark.parametrize(
    "module, args",
    [
        (RNN(GRUCell(4)), (X,)),
        (Bidirectional(RNN(GRUCell(4)), RNN(GRUCell(4))), (X,)),
    ],
    ids=["RNN", "Bidirectional"],
)
def test_a_misspelt_keyword_names_the_keywords_apply_takes(module, args):
    variables = module.init(KEY, *args)
    keywords = "initial_carry=None, init_key=None, seq_lengths=None, return_carry=None"
    with _raises(TypeError, "unexpected keyword argument 'seq_length'", keywords):
        module.apply(variables, *args, seq_length=jnp.array([5, 3]))
    with _raises(TypeError, ".init: ", "'seq_length'", "it takes the key, then (inputs"):
        module.init(KEY, *args, seq_length=jnp.array([5, 3]))
    shown = list(inspect.signature(type(module).apply).parameters)
    assert shown[:3] == ["self", "variables", "inputs"] and "seq_lengths" in shown


def test_a_cells_apply_shows_its_arguments():
    assert list(inspect.signature(LSTMCell.apply).parameters) == [
        "self",
        "variables",
        "carry",
        "inputs",
    ]


@pytest.mark.filterwarnings("ignore:Sharding info not provided when restoring")
def test_variables_survive_pickle_flax_serialization_and_orbax(tmp_path):
    import flax.serialization
    import orbax.checkpoint as ocp

    rnn = RNN(LSTMCell(4))
    variables = rnn.init(KEY, X)
    want = rnn.apply(variables, X)
    restored = {
        "pickle": pickle.loads(pickle.dumps(jax.device_get(variables))),
        "flax.serialization": flax.serialization.from_bytes(
            rnn.init(jax.random.key(9), X), flax.serialization.to_bytes(variables)
        ),
    }
    checkpointer = ocp.PyTreeCheckpointer()
    checkpointer.save(tmp_path / "variables", variables)
    restored["orbax"] = checkpointer.restore(tmp_path / "variables")
    for how, back in restored.items():
        assert_identical(rnn.apply(back, X), want, label=how)


def test_the_api_pages_own_cell_example_runs_and_gets_the_rule():
    page = (ROOT / "book" / "api.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", page, re.S) if "IndRNNCell" in b)
    namespace = {}
    exec(block, namespace)
    rnn = RNN(namespace["IndRNNCell"](4))
    variables = rnn.init(KEY, X)
    assert set(variables["params"]["cell"]) == {"i", "u"}
    grads = jax.grad(lambda v: jnp.sum(rnn.apply(v, X) ** 2))(variables)
    assert np.isfinite(np.asarray(grads["params"]["cell"]["u"])).all()


def test_the_api_page_shows_the_public_api_only():
    page = (ROOT / "book" / "api.md").read_text()
    assert "rnnlib.fast" not in page and "rnnlib.plan._" not in page
    for name in ("rnnlib.Plan", "rnnlib.plan.REFERENCE", "rnnlib.dropout.linen_key"):
        assert name in page
    assert "with_masks" in page and "Saving and restoring variables" in page
    assert "LINEN_SCAN_DRAW" not in rnnlib.RecurrentDropoutCell.__doc__
    assert "``RNN``s" not in Bidirectional.__doc__


def test_the_empty_sequence_difference_from_linen_is_stated_where_users_read():
    for text in (RNN.__doc__, (ROOT / "README.md").read_text()):
        assert "length 0" in " ".join(text.split())
        assert "flax.linen" in text and "initial carry" in text


# -- adversarial findings ---------------------------------------------------------------------

CELLS = [LSTMCell, rnnlib.OptimizedLSTMCell, GRUCell, rnnlib.MGUCell, rnnlib.SimpleCell]


@pytest.mark.parametrize("field", ["dtype", "param_dtype"])
@pytest.mark.parametrize("dtype", [jnp.int32, jnp.bool_, "int8"])
@pytest.mark.parametrize("make", [*CELLS, lambda **kw: ConvLSTMCell(4, (3,), **kw)])
def test_a_non_float_dtype_is_refused_at_construction(make, field, dtype):
    with _raises(TypeError, f"needs {field} to be a floating or complex dtype", f"{field}="):
        make(**({"features": 4} if make in CELLS else {}), **{field: dtype})


def test_an_integer_dtype_no_longer_computes_with_truncated_kernels():
    """The review's case: SimpleCell(4, dtype=jnp.int32) ran, its kernels cut to integers."""
    with _raises(TypeError, "SimpleCell needs dtype to be a floating", "int32"):
        RNN(rnnlib.SimpleCell(4, dtype=jnp.int32))


def test_a_conv_lstm_with_negative_padding_has_flax_linens_gradient():
    config = dict(features=3, kernel_size=(3,), padding=((3, -1),))
    flax_rnn, rnn = nn.RNN(nn.ConvLSTMCell(**config)), RNN(ConvLSTMCell(**config))
    x = random_array(0, (2, 4, 6, 2))
    variables = random_variables(flax_rnn, 1, x)

    def gradients(module):
        return jax.grad(lambda v, x: jnp.sum(jnp.sin(module.apply(v, x))), argnums=(0, 1))

    got, want = gradients(rnn)(variables, x), gradients(flax_rnn)(variables, x)
    terms = recurrent_terms(rnn.cell, x.shape, steps=4, gradient=True)
    assert_close(got, want, terms=terms)


@pytest.mark.parametrize(
    "layers, words",
    [
        ((RNN(LSTMCell(4), time_major=True), RNN(LSTMCell(4))), "time_major=True"),
        (
            (RNN(LSTMCell(4)), Bidirectional(RNN(LSTMCell(4)), RNN(LSTMCell(4)), time_major=True)),
            "time_major=False",
        ),
        ((RNN(ConvLSTMCell(4, (3,))), RNN(LSTMCell(4))), "outputs 2 feature axes"),
    ],
    ids=["time-major-then-batch-major", "batch-major-then-time-major", "convlstm-then-dense"],
)
def test_stacked_rnn_refuses_layers_whose_axes_disagree_naming_both(layers, words):
    with _raises(ValueError, "layer 0, " + repr(layers[0]), "layer 1, " + repr(layers[1]), words):
        StackedRNN(layers)


@pytest.mark.parametrize(
    "build, words",
    [
        (lambda: Bidirectional(GRUCell(4), GRUCell(4)), "got the cell GRUCell(features=4)"),
        (lambda: Bidirectional(RNN(GRUCell(4)), 3), "backward_rnn to be an rnnlib.RNN"),
        (lambda: Bidirectional(nn.RNN(nn.GRUCell(4)), RNN(GRUCell(4))), "flax.linen.RNN"),
        (lambda: Bidirectional(RNN(GRUCell(4)), RNN(GRUCell(4)), merge_fn=3), "merge_fn"),
        (
            lambda: Bidirectional(RNN(GRUCell(4)), RNN(GRUCell(4)), merge_fn=nn.Dense(4)),
            "got flax.linen.Dense(features=4). A merge with parameters goes in a layer after",
        ),
        (lambda: Bidirectional(RNN(GRUCell(4)), RNN(GRUCell(4)), time_major=1), "a bool"),
    ],
    ids=["cells", "not-a-module", "flax-rnn", "merge-fn", "flax-merge", "time-major"],
)
def test_bidirectional_checks_its_arguments_at_construction(build, words):
    with _raises(TypeError, "Bidirectional expects", words):
        build()
