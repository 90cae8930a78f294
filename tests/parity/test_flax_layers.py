"""rnnlib.linen: rnnlib's layers inside flax.linen models, checked against real Flax."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

import rnnlib
from rnnlib import linen as rl
from tests import tolerance

VOCAB, EMBED, FEATURES, CLASSES = 20, 6, 5, 3
# Terms summed into one number: a gradient sums over 4 sequences of 7 steps, each step's
# matmul over the embedding, the carry and a bias.
TERMS = 4 * 7 * (EMBED + FEATURES + 1)

PAIRS = {  # rnnlib's cell and linen's of the same name
    "LSTMCell": (rnnlib.LSTMCell, nn.LSTMCell),
    "OptimizedLSTMCell": (rnnlib.OptimizedLSTMCell, nn.OptimizedLSTMCell),
    "GRUCell": (rnnlib.GRUCell, nn.GRUCell),
    "MGUCell": (rnnlib.MGUCell, nn.MGUCell),
    "SimpleCell": (rnnlib.SimpleCell, nn.SimpleCell),
}


class Tagger(nn.Module):
    """Embedding, one recurrent layer, a dense head: the model a Flax user writes."""

    make_layer: object

    @nn.compact
    def __call__(self, tokens, lengths=None):
        x = nn.Embed(VOCAB, EMBED)(tokens)
        x = self.make_layer()(x, seq_lengths=lengths)
        return nn.Dense(CLASSES)(x)


def linen_tagger(name):
    return Tagger(lambda: nn.RNN(PAIRS[name][1](FEATURES)))


def rnnlib_tagger(name):
    return Tagger(lambda: rl.RNN(PAIRS[name][0](FEATURES)))


def tokens_and_lengths(batch=4, steps=7):
    tokens = jax.random.randint(jax.random.key(1), (batch, steps), 0, VOCAB)
    return tokens, jnp.array([7, 3, 5, 1])[:batch]


def loss(model):
    def value(variables, tokens, lengths):
        logits = model.apply(variables, tokens, lengths)
        mask = jnp.arange(tokens.shape[1]) < lengths[:, None]
        return jnp.sum(jnp.where(mask[..., None], logits**2, 0.0))

    return value


def shapes(tree):
    return jax.tree.map(jnp.shape, tree)


def close(actual, expected):
    tolerance.assert_close(actual, expected, terms=TERMS)


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_same_tree_and_numbers_as_linen(name):
    tokens, lengths = tokens_and_lengths()
    ours, theirs = rnnlib_tagger(name), linen_tagger(name)
    linen_vars = theirs.init(jax.random.key(0), tokens, lengths)
    our_vars = ours.init(jax.random.key(0), tokens, lengths)
    assert shapes(our_vars) == shapes(linen_vars)
    assert f"{name}_0" in our_vars["params"]
    # linen's variables load unchanged, and rnnlib's into linen's model
    for variables in (linen_vars, our_vars):
        expected = jax.jit(theirs.apply)(variables, tokens, lengths)
        actual = jax.jit(ours.apply)(variables, tokens, lengths)
        assert actual.shape == (4, 7, CLASSES)
        close(actual, expected)
    grads = jax.jit(jax.grad(loss(ours)))(linen_vars, tokens, lengths)
    expected = jax.jit(jax.grad(loss(theirs)))(linen_vars, tokens, lengths)
    assert shapes(grads) == shapes(linen_vars)
    close(grads, expected)
    assert all(np.abs(g).max() > 0 for g in jax.tree.leaves(grads["params"][f"{name}_0"]))


class Layouts(nn.Module):
    """Every way a linen model names its cells: setup, explicit name, two layers, bidirectional."""

    flax: bool

    def setup(self):
        rnn, lstm = (nn.RNN, nn.LSTMCell) if self.flax else (rl.RNN, rnnlib.LSTMCell)
        self.encoder = rnn(lstm(FEATURES))

    @nn.compact
    def __call__(self, x, lengths):
        rnn, lstm, gru = (
            (nn.RNN, nn.LSTMCell, nn.GRUCell)
            if self.flax
            else (rl.RNN, rnnlib.LSTMCell, rnnlib.GRUCell)
        )
        x = self.encoder(x, seq_lengths=lengths)
        x = rnn(gru(FEATURES), name="decoder")(x, seq_lengths=lengths)
        both = nn.Bidirectional(rnn(lstm(FEATURES)), rnn(gru(FEATURES)))
        x = both(x, seq_lengths=lengths)
        shared = lstm(FEATURES) if self.flax else rl.linen_cell(lstm(FEATURES))
        return nn.Bidirectional(rnn(shared), rnn(shared))(x, seq_lengths=lengths)


def test_layouts_match_linen_setup_names_bidirectional_and_shared_cells():
    x = jax.random.normal(jax.random.key(2), (4, 7, 3))
    lengths = jnp.array([7, 2, 5, 6])
    linen_vars = Layouts(True).init(jax.random.key(0), x, lengths)
    our_vars = Layouts(False).init(jax.random.key(0), x, lengths)
    assert shapes(our_vars) == shapes(linen_vars)
    assert sorted(our_vars["params"]) == [
        "GRUCell_0",
        "GRUCell_1",
        "LSTMCell_0",
        "LSTMCell_1",
        "encoder",
    ]
    assert sorted(our_vars["params"]["encoder"]) == ["cell"]
    expected = Layouts(True).apply(linen_vars, x, lengths)
    assert expected.shape == (4, 7, 2 * FEATURES)
    close(Layouts(False).apply(linen_vars, x, lengths), expected)


def test_cell_built_outside_the_model_goes_under_rnn_cell_as_in_linen():
    x = jnp.ones((2, 4, 3))
    cells = {True: nn.GRUCell(FEATURES), False: rl.linen_cell(rnnlib.GRUCell(FEATURES))}

    class Outside(nn.Module):
        flax: bool

        @nn.compact
        def __call__(self, x):
            return (nn.RNN if self.flax else rl.RNN)(cells[self.flax])(x)

    linen_vars = Outside(True).init(jax.random.key(0), x)
    our_vars = Outside(False).init(jax.random.key(0), x)
    assert list(our_vars["params"]) == ["RNN_0"]
    assert shapes(our_vars) == shapes(linen_vars)
    close(Outside(False).apply(linen_vars, x), Outside(True).apply(linen_vars, x))


def test_remat_keeps_tree_and_numbers():
    tokens, lengths = tokens_and_lengths()
    ours = Tagger(lambda: nn.remat(rl.RNN)(rnnlib.LSTMCell(FEATURES)))
    theirs = Tagger(lambda: nn.remat(nn.RNN)(nn.LSTMCell(FEATURES)))
    linen_vars = theirs.init(jax.random.key(0), tokens, lengths)
    assert shapes(ours.init(jax.random.key(0), tokens, lengths)) == shapes(linen_vars)
    close(ours.apply(linen_vars, tokens, lengths), theirs.apply(linen_vars, tokens, lengths))
    grads = jax.jit(jax.grad(loss(ours)))(linen_vars, tokens, lengths)
    close(grads, jax.jit(jax.grad(loss(theirs)))(linen_vars, tokens, lengths))


def test_orbax_round_trip(tmp_path):
    tokens, lengths = tokens_and_lengths()
    model = rnnlib_tagger("LSTMCell")
    variables = model.init(jax.random.key(0), tokens, lengths)
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(tmp_path / "ckpt", variables)
    checkpointer.wait_until_finished()
    restored = checkpointer.restore(tmp_path / "ckpt", jax.tree.map(jnp.zeros_like, variables))
    assert shapes(restored) == shapes(variables)
    jax.tree.map(np.testing.assert_array_equal, restored, variables)
    np.testing.assert_array_equal(
        model.apply(restored, tokens, lengths), model.apply(variables, tokens, lengths)
    )
    # and the checkpoint loads into the same model written with nn.RNN
    close(
        linen_tagger("LSTMCell").apply(restored, tokens, lengths),
        model.apply(variables, tokens, lengths),
    )


@pytest.mark.parametrize("cell", [rnnlib.MinGRUCell(FEATURES), rnnlib.MinLSTMCell(FEATURES)])
def test_linear_cells_scan_and_loop_agree_inside_a_model(cell):
    tokens, lengths = tokens_and_lengths()
    plans = [rnnlib.Plan(scan=s) for s in ("sequential", "associative")]
    loop, scan = [Tagger(lambda p=p: rl.RNN(cell, plan=p)) for p in plans]
    variables = loop.init(jax.random.key(0), tokens, lengths)
    assert type(cell).__name__ + "_0" in variables["params"]
    expected = jax.jit(loop.apply)(variables, tokens, lengths)
    close(jax.jit(scan.apply)(variables, tokens, lengths), expected)
    # the same numbers as rnnlib.RNN run by hand on the embedded tokens
    params = variables["params"]
    x = nn.Embed(VOCAB, EMBED).apply({"params": params["Embed_0"]}, tokens)
    cell_params = {"params": {"cell": params[type(cell).__name__ + "_0"]}}
    y = rnnlib.RNN(cell).apply(cell_params, x, seq_lengths=lengths)
    close(nn.Dense(CLASSES).apply({"params": params["Dense_0"]}, y), expected)


def test_seq_lengths_with_two_batch_dims():
    x = jax.random.normal(jax.random.key(4), (2, 3, 6, 4))  # (batch, batch, time, channels)
    lengths = jnp.array([[6, 1, 4], [2, 5, 3]])

    class Model(nn.Module):
        @nn.compact
        def __call__(self, x, lengths):
            return rl.RNN(rnnlib.GRUCell(FEATURES), return_carry=True)(x, seq_lengths=lengths)

    variables = Model().init(jax.random.key(0), x, lengths)
    carry, y = Model().apply(variables, x, lengths)
    assert carry.shape == (2, 3, FEATURES) and y.shape == (2, 3, 6, FEATURES)
    flat = {"params": {"cell": variables["params"]["GRUCell_0"]}}
    rnn = rnnlib.RNN(rnnlib.GRUCell(FEATURES), return_carry=True)
    for i in range(2):
        for j in range(3):
            c, _ = rnn.apply(flat, x[i, j, None], seq_lengths=lengths[i, j, None])
            close(carry[i, j], c[0])


DROPPED = rnnlib.RecurrentDropoutCell(rnnlib.LSTMCell(FEATURES), recurrent_rate=0.5, input_rate=0.3)


class Dropped(nn.Module):
    deterministic: bool | None = None

    @nn.compact
    def __call__(self, x, deterministic=None):
        return rl.RNN(DROPPED, deterministic=self.deterministic)(x, deterministic=deterministic)


def test_recurrent_dropout_follows_the_dropout_stream_and_deterministic():
    x = jax.random.normal(jax.random.key(5), (3, 6, 4))
    variables = Dropped().init(jax.random.key(0), x, deterministic=True)
    assert sorted(variables["params"]) == ["RecurrentDropoutCell_0"]
    evaluation = Dropped().apply(variables, x, deterministic=True)
    plain = {"params": {"cell": variables["params"]["RecurrentDropoutCell_0"]}}
    close(evaluation, rnnlib.RNN(DROPPED.with_masks()).apply(plain, x))
    close(Dropped(deterministic=True).apply(variables, x), evaluation)

    def train(seed):
        rngs = {"dropout": jax.random.key(seed)}
        return Dropped().apply(variables, x, deterministic=False, rngs=rngs)

    np.testing.assert_array_equal(train(1), train(1))
    assert np.abs(train(1) - train(2)).max() > 1e-3
    assert np.abs(train(1) - evaluation).max() > 1e-3
    with pytest.raises(ValueError, match="deterministic"):
        Dropped().apply(variables, x)
    with pytest.raises(ValueError, match="deterministic"):
        Dropped(deterministic=True).apply(variables, x, deterministic=True)
    with pytest.raises(flax_errors().InvalidRngError, match="dropout"):
        Dropped().apply(variables, x, deterministic=False)


def flax_errors():
    import flax.errors

    return flax.errors


LAYERS = (rnnlib.RNN(rnnlib.LSTMCell(FEATURES)), rnnlib.RNN(rnnlib.GRUCell(FEATURES)))


def stack(dropout_rate=0.0, deterministic=None):
    return rl.StackedRNN(LAYERS, dropout_rate, (False, True), deterministic)


def test_stacked_rnn_in_a_model():
    tokens, lengths = tokens_and_lengths()
    model = Tagger(lambda: stack(0.5))
    with pytest.raises(ValueError, match="deterministic"):
        model.init(jax.random.key(0), tokens, lengths)
    evaluating = Tagger(lambda: stack(0.5, True))
    variables = evaluating.init(jax.random.key(0), tokens, lengths)
    params = variables["params"]
    assert sorted(params["StackedRNN_0"]) == ["layers_0", "layers_1"]
    ones = jnp.ones((1, FEATURES))
    gru = nn.GRUCell(FEATURES).init(jax.random.key(0), ones, ones)["params"]
    assert shapes(params["StackedRNN_0"]["layers_1"]["cell"]) == shapes(gru)
    x = nn.Embed(VOCAB, EMBED).apply({"params": params["Embed_0"]}, tokens)
    y = rnnlib.StackedRNN(LAYERS, 0.5, (False, True)).apply(
        {"params": params["StackedRNN_0"]}, x, seq_lengths=lengths, deterministic=True
    )
    expected = nn.Dense(CLASSES).apply({"params": params["Dense_0"]}, y)
    close(jax.jit(evaluating.apply)(variables, tokens, lengths), expected)
    dropping = Tagger(lambda: stack(0.5, False))
    trained = dropping.apply(variables, tokens, lengths, rngs={"dropout": jax.random.key(3)})
    assert np.abs(trained - expected).max() > 1e-3
    grads = jax.grad(lambda v: jnp.sum(evaluating.apply(v, tokens, lengths) ** 2))(variables)
    assert shapes(grads) == shapes(variables)


def test_the_linen_stack_passes_resets_to_every_layer():
    # resets go through rnnlib.linen.StackedRNN to rnnlib.StackedRNN: after a reset the
    # outputs are those of the stack run on the rest of the sequence alone.
    x = jax.random.normal(jax.random.key(5), (2, 7, EMBED))
    resets = jnp.zeros((2, 7), bool).at[:, 4].set(True)
    layer = stack(deterministic=True)
    variables = layer.init(jax.random.key(0), x)
    y = layer.apply(variables, x, resets=resets)
    fresh = layer.apply(variables, x[:, 4:])
    close(y[:, 4:], fresh)
    assert np.abs(y[:, 4:] - layer.apply(variables, x)[:, 4:]).max() > 1e-3


def test_a_linen_cell_is_refused_with_a_clear_error():
    with pytest.raises(TypeError, match=r"rnnlib cell.*Flax cell flax\.linen.*LSTMCell"):
        rl.RNN(nn.LSTMCell(FEATURES))
    with pytest.raises(TypeError, match=r"RNNCellBase cell.*got builtins\.int"):
        rl.RNN(8)
    with pytest.raises(TypeError, match=r"linen_cell expects.*got the Flax cell"):
        rl.linen_cell(nn.GRUCell(FEATURES))


def test_a_linen_layer_in_a_stack_is_refused_with_a_clear_error():
    x = jnp.ones((2, 4, 3))
    layer = nn.RNN(nn.LSTMCell(FEATURES))
    with pytest.raises(TypeError, match=r"layer 0 is the linen module flax\.linen.*RNN"):
        rl.StackedRNN((layer,)).init(jax.random.key(0), x, deterministic=True)


@pytest.mark.parametrize("cell", ["LSTMCell", "GRUCell"])
def test_the_model_step_benchmark_contenders_compute_the_same_step(cell):
    from benchmarks.model_step import contenders

    config = dict(batch=3, steps=5, vocab=11, embed=4, features=6)
    fns, batch = contenders(cell, config, jax.random.key(2))
    assert sorted(fns) == ["flax.linen", "flax.linen (A/A)", "rnnlib.linen"]
    (step, variables), (ours, same) = fns["flax.linen"], fns["rnnlib.linen"]
    assert same is variables
    loss, new = step(variables, batch)
    our_loss, our_new = ours(variables, batch)
    assert np.isfinite(loss) and loss > 0
    close(our_loss, loss)
    close(our_new, new)
    assert (
        np.abs(new["params"]["Dense_0"]["kernel"] - variables["params"]["Dense_0"]["kernel"]).max()
        > 0
    )
