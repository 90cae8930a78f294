"""rnnlib.nnx: rnnlib's layers inside flax.nnx models, checked against real Flax NNX."""

import inspect
import re
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest
from flax import nnx

import rnnlib
from rnnlib import nnx as rx
from tests import tolerance

VOCAB, EMBED, FEATURES, CLASSES = 20, 6, 5, 3
# Terms summed into one number: a gradient sums over 4 sequences of 7 steps, each step's
# matmul over the embedding, the carry and a bias.
TERMS = 4 * 7 * (EMBED + FEATURES + 1)
NNX_CELLS = ["LSTMCell", "OptimizedLSTMCell", "GRUCell", "SimpleCell"]


class Tagger(nnx.Module):
    """Embedding, one recurrent layer, a linear head: the model an NNX user writes."""

    def __init__(self, make_layer, rngs):
        self.embed = nnx.Embed(VOCAB, EMBED, rngs=rngs)
        self.rnn = make_layer(rngs)
        self.head = nnx.Linear(FEATURES, CLASSES, rngs=rngs)

    def __call__(self, tokens, lengths=None):
        return self.head(self.rnn(self.embed(tokens), seq_lengths=lengths))


def nnx_tagger(name, seed=0):
    cell = getattr(nnx, name)
    return Tagger(lambda rngs: nnx.RNN(cell(EMBED, FEATURES, rngs=rngs)), nnx.Rngs(seed))


def rnnlib_tagger(name, seed=1, **options):
    cell = getattr(rnnlib, name)(FEATURES)
    return Tagger(lambda rngs: rx.RNN(cell, EMBED, rngs=rngs, **options), nnx.Rngs(seed))


def tokens_and_lengths(batch=4, steps=7):
    tokens = jax.random.randint(jax.random.key(1), (batch, steps), 0, VOCAB)
    return tokens, jnp.array([7, 3, 5, 1])[:batch]


def loss(model, tokens, lengths):
    mask = jnp.arange(tokens.shape[1]) < lengths[:, None]
    return jnp.sum(jnp.where(mask[..., None], model(tokens, lengths) ** 2, 0.0))


def layout(state):
    """``{path: (variable type, shape)}`` of every array in an NNX state (any flax version)."""

    def is_variable(x):  # flax 0.10's state holds VariableStates, later ones Variables
        return isinstance(x, nnx.Variable) or type(x).__name__ == "VariableState"

    out = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(state, is_leaf=is_variable):
        kind = getattr(leaf, "type", type(leaf))
        value = leaf.get_value() if hasattr(leaf, "get_value") else leaf.value
        out[jax.tree_util.keystr(path)] = (kind.__name__, None if value is None else value.shape)
    return out


def pure(state):
    """An NNX state as a nested dict of arrays (no variable objects)."""
    if hasattr(nnx, "to_pure_dict"):
        return nnx.to_pure_dict(state)
    return state.to_pure_dict()  # flax 0.10


def params(model):
    """The parameters as a pure nested dict of arrays."""
    return pure(nnx.state(model, nnx.Param))


def close(actual, expected):
    tolerance.assert_close(actual, expected, terms=TERMS)


def optimizer(model, tx):
    return nnx.Optimizer(model, tx, wrt=nnx.Param)


def update(opt, model, grads):
    """``Optimizer.update`` takes the model since flax 0.11, the gradients alone in 0.10."""
    if "model" in inspect.signature(opt.update).parameters:
        opt.update(model, grads)
    else:
        opt.update(grads)


@nnx.jit
def forward(model, tokens, lengths):
    return model(tokens, lengths)


@nnx.jit
def gradients(model, tokens, lengths):
    return nnx.grad(loss)(model, tokens, lengths)


@pytest.mark.parametrize("name", NNX_CELLS)
def test_same_state_and_numbers_as_nnx_rnn(name):
    tokens, lengths = tokens_and_lengths()
    theirs, ours = nnx_tagger(name), rnnlib_tagger(name)
    assert layout(nnx.state(ours)) == layout(nnx.state(theirs))
    assert "['rnn']['cell']" in next(p for p in layout(nnx.state(ours)) if "cell" in p)
    # NNX's state loads into the rnnlib model unchanged, and computes NNX's numbers
    nnx.update(ours, nnx.state(theirs))
    expected = forward(theirs, tokens, lengths)
    assert expected.shape == (4, 7, CLASSES)
    close(forward(ours, tokens, lengths), expected)
    grads, expected_grads = gradients(ours, tokens, lengths), gradients(theirs, tokens, lengths)
    assert layout(grads) == layout(expected_grads)
    grads, expected_grads = pure(grads), pure(expected_grads)
    close(grads, expected_grads)
    assert all(np.abs(g).max() > 0 for g in jax.tree.leaves(grads["rnn"]))
    # and the other way: a fresh rnnlib model's state into NNX's, through split and merge
    fresh = rnnlib_tagger(name, seed=2)
    graphdef, _ = nnx.split(theirs)
    loaded = nnx.merge(graphdef, nnx.state(fresh))
    assert type(loaded.rnn) is nnx.RNN
    close(loaded(tokens, lengths), fresh(tokens, lengths))
    our_graph, _ = nnx.split(fresh)
    back = nnx.merge(our_graph, nnx.state(loaded))
    tolerance.assert_identical(params(back), params(fresh))  # the same arrays, moved twice


def test_a_training_step_with_nnx_optimizer_follows_nnx():
    tokens, lengths = tokens_and_lengths()
    theirs, ours = nnx_tagger("LSTMCell"), rnnlib_tagger("LSTMCell")
    nnx.update(ours, nnx.state(theirs))
    losses = {}
    for label, model in (("nnx", theirs), ("rnnlib", ours)):
        opt = optimizer(model, optax.adam(1e-2))

        @nnx.jit
        def step(model, opt, tokens, lengths):
            value, grads = nnx.value_and_grad(loss)(model, tokens, lengths)
            update(opt, model, grads)
            return value

        losses[label] = [float(step(model, opt, tokens, lengths)) for _ in range(3)]
    assert losses["rnnlib"][-1] < losses["rnnlib"][0]
    # Adam divides by the gradient's size, so rounding differences grow with each step.
    close(np.array(losses["rnnlib"]), np.array(losses["nnx"]))
    tolerance.assert_close(params(ours), params(theirs), terms=3 * TERMS)


def test_remat_keeps_numbers_and_gradients():
    tokens, lengths = tokens_and_lengths()
    model = rnnlib_tagger("GRUCell")

    @nnx.remat
    def run_rnn(rnn, x):
        return rnn(x, seq_lengths=lengths)

    def remat_loss(model):
        y = model.head(run_rnn(model.rnn, model.embed(tokens)))
        mask = jnp.arange(tokens.shape[1]) < lengths[:, None]
        return jnp.sum(jnp.where(mask[..., None], y**2, 0.0))

    close(remat_loss(model), loss(model, tokens, lengths))
    grads = nnx.jit(nnx.grad(remat_loss))(model)
    expected = gradients(model, tokens, lengths)
    close(pure(grads), pure(expected))


def test_orbax_round_trip_into_either_model(tmp_path):
    tokens, lengths = tokens_and_lengths()
    ours = rnnlib_tagger("OptimizedLSTMCell")
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(tmp_path / "ckpt", params(ours))
    checkpointer.wait_until_finished()
    for model in (rnnlib_tagger("OptimizedLSTMCell", seed=5), nnx_tagger("OptimizedLSTMCell")):
        target = jax.tree.map(jnp.zeros_like, params(model))
        restored = checkpointer.restore(tmp_path / "ckpt", target)
        nnx.update(model, restored)
        tolerance.assert_identical(params(model), params(ours))  # arrays saved and read back
        close(model(tokens, lengths), ours(tokens, lengths))


@pytest.mark.parametrize("name", ["MinGRUCell", "MinLSTMCell"])
def test_linear_cells_keep_linen_names_and_scan_in_parallel(name):
    tokens, lengths = tokens_and_lengths()
    loop = rnnlib_tagger(name, plan=rnnlib.Plan(scan="sequential"))
    scan = rnnlib_tagger(name, plan=rnnlib.Plan(scan="associative"))
    nnx.update(scan, nnx.state(loop))
    cell = getattr(rnnlib, name)(FEATURES)
    linen_tree = rnnlib.RNN(cell).init(jax.random.key(0), jnp.ones((1, 2, EMBED)))["params"]
    rnn_tree = params(loop)["rnn"]
    assert jax.tree.map(jnp.shape, rnn_tree) == jax.tree.map(jnp.shape, dict(linen_tree))
    expected = forward(loop, tokens, lengths)
    close(forward(scan, tokens, lengths), expected)


def test_rglru_runs_as_an_associative_scan_in_a_model():
    x = jax.random.normal(jax.random.key(3), (2, 9, FEATURES))
    rnns = [
        rx.RNN(rnnlib.RGLRUCell(FEATURES), FEATURES, plan=rnnlib.Plan(scan=s), rngs=nnx.Rngs(0))
        for s in ("sequential", "associative")
    ]
    assert sorted(params(rnns[0])["cell"]) == ["a_gate", "a_param", "input_gate"]
    loop, scan = (nnx.jit(lambda rnn, x: rnn(x))(rnn, x) for rnn in rnns)
    tolerance.assert_close(scan, loop, terms=9 * (FEATURES + 1))


@pytest.mark.parametrize("name", ["MGUCell", "SimpleCell"])
def test_cells_without_an_nnx_twin_compute_flax_linens_numbers(name):
    # MGU has no NNX cell: its tree and numbers are linen's. layout='linen' gives the same
    # for a cell NNX has.
    x = jax.random.normal(jax.random.key(4), (3, 6, 4))
    linen_rnn = nn.RNN(getattr(nn, name)(FEATURES))
    variables = linen_rnn.init(jax.random.key(0), x)
    ours = rx.RNN(getattr(rnnlib, name)(FEATURES), 4, layout="linen", rngs=nnx.Rngs(0))
    tree = params(ours)
    assert jax.tree.map(jnp.shape, tree) == jax.tree.map(jnp.shape, dict(variables["params"]))
    nnx.update(ours, jax.tree.map(jnp.asarray, dict(variables["params"])))
    tolerance.assert_close(ours(x), linen_rnn.apply(variables, x), terms=6 * (4 + FEATURES + 1))


def test_conv_lstm_in_a_model_has_linens_tree_and_numbers():
    x = jax.random.normal(jax.random.key(5), (2, 3, 4, 4, 2))  # (batch, time, h, w, channels)
    linen_rnn = nn.RNN(nn.ConvLSTMCell(FEATURES, (3, 3)))
    variables = linen_rnn.init(jax.random.key(0), x)
    ours = rx.RNN(rnnlib.ConvLSTMCell(FEATURES, (3, 3)), 2, rngs=nnx.Rngs(0))
    assert jax.tree.map(jnp.shape, params(ours)) == jax.tree.map(
        jnp.shape, dict(variables["params"])
    )
    nnx.update(ours, jax.tree.map(jnp.asarray, dict(variables["params"])))
    expected = linen_rnn.apply(variables, x)
    assert expected.shape == (2, 3, 4, 4, FEATURES)
    tolerance.assert_close(ours(x), expected, terms=3 * (9 * (2 + FEATURES) + 1))


def test_seq_lengths_with_two_batch_dims_and_resets():
    rnn = rx.RNN(rnnlib.GRUCell(FEATURES), 4, return_carry=True, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(6), (2, 3, 6, 4))  # (batch, batch, time, channels)
    lengths = jnp.array([[6, 1, 4], [2, 5, 3]])
    carry, y = rnn(x, seq_lengths=lengths)
    assert carry.shape == (2, 3, FEATURES) and y.shape == (2, 3, 6, FEATURES)
    # each sequence's carry is the one it gets in a batch of one dim (NNX's only kind)
    flat_carry, _ = rnn(x.reshape(6, 6, 4), seq_lengths=lengths.reshape(6))
    close(carry, flat_carry.reshape(2, 3, FEATURES))
    alone, _ = rnn(x[1, 0, None, :2])  # and the one it gets alone, cut to its length
    close(carry[1, 0], alone[0])
    # a reset before step 2: from there on, the outputs of a fresh run of the rest
    resets = jnp.zeros((2, 3, 6), bool).at[..., 2].set(True)
    _, y = rnn(x, resets=resets)
    _, rest = rnn(x[..., 2:, :])
    close(y[..., 2:, :], rest)


def test_bidirectional_of_rnnlib_layers_is_nnx_bidirectional():
    x = jax.random.normal(jax.random.key(7), (3, 6, 4))
    lengths = jnp.array([6, 2, 4])
    rngs = nnx.Rngs(0)
    theirs = nnx.Bidirectional(
        nnx.RNN(nnx.LSTMCell(4, FEATURES, rngs=rngs)), nnx.RNN(nnx.GRUCell(4, FEATURES, rngs=rngs))
    )
    rngs = nnx.Rngs(1)
    ours = nnx.Bidirectional(
        rx.RNN(rnnlib.LSTMCell(FEATURES), 4, rngs=rngs),
        rx.RNN(rnnlib.GRUCell(FEATURES), 4, rngs=rngs),
    )
    assert layout(nnx.state(ours, nnx.Param)) == layout(nnx.state(theirs, nnx.Param))
    nnx.update(ours, nnx.state(theirs, nnx.Param))
    expected = theirs(x, seq_lengths=lengths)
    assert expected.shape == (3, 6, 2 * FEATURES)
    tolerance.assert_close(ours(x, seq_lengths=lengths), expected, terms=6 * (4 + FEATURES + 1))


def test_one_cell_shared_by_two_layers_is_one_set_of_parameters_as_in_nnx():
    cell = rx.Cell(rnnlib.GRUCell(FEATURES), 4, rngs=nnx.Rngs(0))
    ours = nnx.Bidirectional(rx.RNN(cell, rngs=nnx.Rngs(1)), rx.RNN(cell, rngs=nnx.Rngs(2)))
    nnx_cell = nnx.GRUCell(4, FEATURES, rngs=nnx.Rngs(0))
    theirs = nnx.Bidirectional(nnx.RNN(nnx_cell), nnx.RNN(nnx_cell))
    shared = layout(nnx.state(ours, nnx.Param))
    assert shared == layout(nnx.state(theirs, nnx.Param))
    arrays = [path for path, (_, shape) in shared.items() if shape is not None]
    assert len(arrays) == 3  # dense_i's kernel and bias, dense_h's kernel: stored once
    nnx.update(ours, nnx.state(theirs, nnx.Param))
    x = jax.random.normal(jax.random.key(9), (2, 5, 4))
    tolerance.assert_close(ours(x), theirs(x), terms=5 * (4 + FEATURES + 1))


DROPPED = rnnlib.RecurrentDropoutCell(rnnlib.LSTMCell(FEATURES), recurrent_rate=0.5, input_rate=0.3)


def test_recurrent_dropout_draws_from_the_dropout_stream_and_eval_turns_it_off():
    x = jax.random.normal(jax.random.key(8), (3, 6, 4))
    model = rx.RNN(DROPPED, 4, rngs=nnx.Rngs(params=0, dropout=1))
    inner = rx.RNN(rnnlib.LSTMCell(FEATURES), 4, layout="linen", rngs=nnx.Rngs(0))
    nnx.update(inner, {"cell": params(model)["cell"]["cell"]})
    first, second = model(x), model(x)  # training: the stream moves on between calls
    assert np.abs(first - second).max() > 1e-3
    model.eval()
    assert model.deterministic is True
    evaluation = model(x)
    close(evaluation, inner(x))  # no dropout: the wrapped cell alone
    assert np.abs(first - evaluation).max() > 1e-3
    model.train()
    again = rx.RNN(DROPPED, 4, rngs=nnx.Rngs(params=0, dropout=1))
    tolerance.assert_identical(again(x), first)  # the same seeds draw the same masks
    with_rngs = model(x, rngs=nnx.Rngs(dropout=3))
    tolerance.assert_identical(with_rngs, model(x, rngs=nnx.Rngs(dropout=3)))
    close(model(x, deterministic=True), evaluation)


def test_dropout_without_a_dropout_stream_says_how_to_give_one():
    x = jnp.ones((2, 4, 4))
    model = rx.RNN(DROPPED, 4, rngs=nnx.Rngs(params=0))
    with pytest.raises(ValueError, match=r"no 'dropout'.*nnx\.Rngs\(params=0, dropout=1\)"):
        model(x)
    assert model(x, deterministic=True).shape == (2, 4, FEATURES)
    with pytest.raises(
        TypeError, match=r"call's rngs to be an nnx\.Rngs or an nnx\.RngStream.*got builtins\.int"
    ):
        model(x, rngs=3)
    with pytest.raises(ValueError, match=r"call's rngs, which have no 'dropout'"):
        model(x, rngs=nnx.Rngs(params=1))


LAYERS = (rnnlib.RNN(rnnlib.LSTMCell(FEATURES)), rnnlib.RNN(rnnlib.GRUCell(FEATURES)))


def test_stacked_rnn_in_a_model():
    tokens, lengths = tokens_and_lengths()

    def make(rngs):
        return rx.StackedRNN(LAYERS, EMBED, dropout_rate=0.5, residual=(False, True), rngs=rngs)

    model = Tagger(make, nnx.Rngs(params=0, dropout=1))
    tree = params(model)["rnn"]
    stack = rnnlib.StackedRNN(LAYERS, 0.5, (False, True))
    expected_tree = stack.init(jax.random.key(0), jnp.ones((1, 2, EMBED)))["params"]
    assert jax.tree.map(jnp.shape, tree) == jax.tree.map(jnp.shape, expected_tree)
    trained = forward(model, tokens, lengths)
    model.eval()
    evaluation = forward(model, tokens, lengths)
    x = model.embed(tokens)
    y = stack.apply({"params": tree}, x, seq_lengths=lengths, deterministic=True)
    close(evaluation, model.head(y))
    assert np.abs(trained - evaluation).max() > 1e-3
    grads = gradients(model, tokens, lengths)
    assert layout(grads) == layout(nnx.state(model, nnx.Param))


def test_a_flax_cell_or_other_object_is_refused_with_a_clear_error():
    rngs = nnx.Rngs(0)
    with pytest.raises(TypeError, match=r"rnnlib cell.*Flax cell flax\.nnx.*LSTMCell"):
        rx.RNN(nnx.LSTMCell(4, FEATURES, rngs=rngs), 4, rngs=rngs)
    with pytest.raises(TypeError, match=r"rnnlib cell.*Flax cell flax\.linen.*GRUCell"):
        rx.RNN(nn.GRUCell(FEATURES), 4, rngs=rngs)
    with pytest.raises(TypeError, match=r"RNNCellBase cell.*got builtins\.int"):
        rx.RNN(8, 4, rngs=rngs)
    with pytest.raises(TypeError, match=r"rnnlib\.RNN or rnnlib\.Bidirectional.*layer 0 is flax"):
        rx.StackedRNN((nnx.RNN(nnx.GRUCell(4, FEATURES, rngs=rngs)),), 4, rngs=rngs)


def test_wrong_rngs_in_features_or_layout_are_refused_with_a_clear_error():
    cell = rnnlib.LSTMCell(FEATURES)
    with pytest.raises(TypeError, match=r"rngs to be a flax\.nnx\.Rngs.*got builtins\.int"):
        rx.RNN(cell, 4, rngs=0)
    with pytest.raises(TypeError, match=r"rngs to be a flax\.nnx\.Rngs.*got jax"):
        rx.RNN(cell, 4, rngs=jax.random.key(0))
    with pytest.raises(TypeError, match=r"needs in_features.*RNN\(cell, in_features"):
        rx.RNN(cell, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"in_features >= 1.*got 0"):
        rx.RNN(cell, 0, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match=r"in_features >= 1.*got 4\.0"):
        rx.StackedRNN(LAYERS, 4.0, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"layout 'nnx'.*or 'linen'.*got 'torch'"):
        rx.RNN(cell, 4, layout="torch", rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match=r"deterministic to be a bool.*got 'yes'"):
        rx.RNN(cell, 4, deterministic="yes", rngs=nnx.Rngs(0))
    stack = rx.StackedRNN(LAYERS, 4, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match=r"StackedRNN expects the call's rngs.*got builtins\.int"):
        stack(jnp.ones((2, 3, 4)), rngs=1)


def test_inputs_of_the_wrong_rank_or_width_are_refused_with_a_clear_error():
    rnn = rx.RNN(rnnlib.LSTMCell(FEATURES), 4, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"\(\*batch, time, channels\).*got shape \(4,\)"):
        rnn(jnp.ones((4,)))
    with pytest.raises(ValueError, match=r"in_features=4.*shaped \(2, 5, 3\), with 3 channels"):
        rnn(jnp.ones((2, 5, 3)))
    conv = rx.RNN(rnnlib.ConvLSTMCell(FEATURES, (3, 3)), 2, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"height, width, channels.*got shape \(5, 4, 2\)"):
        conv(jnp.ones((5, 4, 2)))


def test_the_api_pages_nnx_example_runs_and_gets_nnxs_numbers():
    page = (Path(__file__).resolve().parents[2] / "book" / "api.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    block = next(b for b in blocks if "from rnnlib import nnx as rx" in b)
    namespace = {}
    exec(block, namespace)
    ours, theirs = namespace["our_model"], namespace["flax_model"]
    assert layout(nnx.state(ours)) == layout(nnx.state(theirs))
    assert namespace["y"].shape == (2, 4, 3)
    tokens, lengths = namespace["tokens"], namespace["lengths"]
    tolerance.assert_close(namespace["y"], theirs(tokens, lengths), terms=4 * (8 + 16 + 1))
