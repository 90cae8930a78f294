"""Reference results from the real Flax 0.6.11, for tests/parity/test_legacy_oracle.py.

This script runs in the side environment .venv-flax06 (Flax 0.6.11, JAX 0.4.13; see
requirements-flax06.txt), never in the book's environment::

    .venv-flax06/bin/python tests/oracle/flax06_reference.py OUT.npz --partitionable 1

For every case it builds the 0.6.11 modules, initialises their variables, replaces
every parameter by random numbers (so biases are not all zero), runs the modules
and stores inputs, variables and results in one ``.npz``. The test feeds the same
variables and inputs to ``rnnlib.legacy`` and compares. Array trees are flattened
into keys such as ``rnn/GRUCell/plain/variables/params/cell/hn/bias`` (dicts by key,
tuples by index). Inputs come from NumPy, so they do not depend on the JAX version.

``--partitionable`` sets ``jax_threefry_partitionable`` to the value of the JAX that
runs the test (it became the default in JAX 0.5), so that carries drawn from the
same key hold the same numbers on both sides.

The cases, by name, are mirrored in tests/parity/test_legacy_oracle.py.
"""

from __future__ import annotations

import argparse

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax.core import unfreeze

CELLS = {"LSTMCell": nn.LSTMCell, "OptimizedLSTMCell": nn.OptimizedLSTMCell, "GRUCell": nn.GRUCell}
NORMAL = jax.nn.initializers.normal(1.0)

# RNN call options, by name: (constructor fields, call keywords, input shape).
LENGTHS = np.array([5, 2, 4], np.int32)
RNN_CASES = {
    "plain": ({}, {}, (3, 5, 4)),
    "return_carry": ({"return_carry": True}, {}, (3, 5, 4)),
    "reverse": ({"reverse": True}, {}, (3, 5, 4)),
    "reverse_keep_order": ({"reverse": True, "keep_order": True}, {}, (3, 5, 4)),
    "time_major": ({"time_major": True, "return_carry": True}, {}, (5, 3, 4)),
    "seq_lengths": ({"return_carry": True}, {"seq_lengths": LENGTHS}, (3, 5, 4)),
    "seq_lengths_reverse": (
        {"return_carry": True, "reverse": True, "keep_order": True},
        {"seq_lengths": LENGTHS},
        (3, 5, 4),
    ),
    "initial_carry": ({"return_carry": True}, {"initial_carry": True}, (3, 5, 4)),
}


def flatten(tree, prefix, out):
    """Stores the leaves of ``tree`` in ``out`` under ``prefix/key/...`` keys."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            flatten(value, f"{prefix}/{key}", out)
    elif isinstance(tree, (tuple, list)):
        for i, value in enumerate(tree):
            flatten(value, f"{prefix}/{i}", out)
    else:
        out[prefix] = np.asarray(tree)


def randomise(variables, rs):
    """Every parameter replaced by normal draws of its shape, so every path is exercised."""
    return jax.tree_util.tree_map(
        lambda p: jnp.asarray(0.5 * rs.normal(size=p.shape), p.dtype), unfreeze(variables)
    )


def cell_cases(out, rs):
    configs = {name: (cls(), 5) for name, cls in CELLS.items()}
    configs["GRUCell_custom"] = (
        nn.GRUCell(gate_fn=jax.nn.hard_sigmoid, activation_fn=jax.nn.soft_sign),
        5,
    )
    for name, (cell, size) in configs.items():
        carry = type(cell).initialize_carry(jax.random.PRNGKey(1), (3,), size, NORMAL)
        x = rs.normal(size=(3, 4)).astype(np.float32)
        variables = randomise(cell.init(jax.random.PRNGKey(2), carry, x), rs)
        result = cell.apply(variables, carry, x)
        flatten(
            {"carry": carry, "x": x, "variables": variables, "out": result}, f"cell/{name}", out
        )

    conv = {
        "ConvLSTM2d": (nn.ConvLSTMCell(3, kernel_size=(3, 3)), (5, 4, 3), (2, 5, 4, 2)),
        "ConvLSTM1d": (nn.ConvLSTMCell(2, kernel_size=(3,), use_bias=False), (6, 2), (2, 6, 3)),
    }
    for name, (cell, size, x_shape) in conv.items():
        carry = nn.ConvLSTMCell.initialize_carry(jax.random.PRNGKey(1), (2,), size, NORMAL)
        x = rs.normal(size=x_shape).astype(np.float32)
        variables = randomise(cell.init(jax.random.PRNGKey(2), carry, x), rs)
        result = cell.apply(variables, carry, x)
        flatten(
            {"carry": carry, "x": x, "variables": variables, "out": result}, f"cell/{name}", out
        )


def rnn_cases(out, rs):
    for name, cls in CELLS.items():
        for option, (fields, call, x_shape) in RNN_CASES.items():
            rnn = nn.RNN(cls(), 6, **fields)
            x = rs.normal(size=x_shape).astype(np.float32)
            variables = randomise(rnn.init(jax.random.PRNGKey(2), x), rs)
            call = dict(call)
            if call.get("initial_carry"):
                call["initial_carry"] = cls.initialize_carry(jax.random.PRNGKey(3), (3,), 6, NORMAL)
            result = rnn.apply(variables, x, **call)
            flatten(
                {"x": x, "variables": variables, "call": call, "out": result},
                f"rnn/{name}/{option}",
                out,
            )

    rnn = nn.RNN(nn.ConvLSTMCell(3, kernel_size=(3, 3)), (5, 4, 3), return_carry=True)
    x = rs.normal(size=(2, 3, 5, 4, 2)).astype(np.float32)
    variables = randomise(rnn.init(jax.random.PRNGKey(2), x), rs)
    flatten({"x": x, "variables": variables, "out": rnn.apply(variables, x)}, "rnn/ConvLSTM2d", out)


def bidirectional_cases(out, rs):
    shared = nn.GRUCell()
    cases = {
        "lstm_gru": (nn.RNN(nn.LSTMCell(), 5), nn.RNN(nn.GRUCell(), 4), {}, (3, 6, 4)),
        "shared_cell": (nn.RNN(shared, 4), nn.RNN(shared, 4), {}, (3, 6, 4)),
        "time_major": (
            nn.RNN(nn.OptimizedLSTMCell(), 5),
            nn.RNN(nn.LSTMCell(), 3),
            {"time_major": True},
            (6, 3, 4),
        ),
    }
    for name, (forward, backward, fields, x_shape) in cases.items():
        bi = nn.Bidirectional(forward, backward, return_carry=True, **fields)
        x = rs.normal(size=x_shape).astype(np.float32)
        variables = randomise(bi.init(jax.random.PRNGKey(2), x), rs)
        call = {} if fields else {"seq_lengths": np.array([6, 1, 4], np.int32)}
        result = bi.apply(variables, x, **call)
        flatten({"x": x, "variables": variables, "call": call, "out": result}, f"bi/{name}", out)


def carry_cases(out):
    """The static initialize_carry: which key each part of the carry gets, and its values."""
    rng = jax.random.PRNGKey(7)
    sizes = {"LSTMCell": 3, "OptimizedLSTMCell": 3, "GRUCell": 3, "ConvLSTMCell": (4, 3)}
    classes = dict(CELLS, ConvLSTMCell=nn.ConvLSTMCell)
    for name, size in sizes.items():
        seen = []

        def recording(key, shape, seen=seen):
            seen.append(np.asarray(key))
            return jnp.zeros(shape)

        zeros = classes[name].initialize_carry(rng, (2,), size)
        classes[name].initialize_carry(rng, (2,), size, recording)
        normal = classes[name].initialize_carry(rng, (2,), size, NORMAL)
        flatten(
            {
                "rng": rng,
                "keys": seen,
                "split": jax.random.split(rng),
                "zeros": zeros,
                "normal": normal,
            },
            f"carry/{name}",
            out,
        )


def failure_cases(out):
    """What 0.6.11 raised: the FLIP 3099 ConvLSTM example, and seq_lengths without return_carry."""
    key1, key2 = jax.random.split(jax.random.PRNGKey(0))
    carry = nn.ConvLSTMCell.initialize_carry(key1, (16,), (64, 64, 16))
    try:
        nn.ConvLSTMCell(features=6, kernel_size=(3, 3)).init_with_output(
            key2, carry, jnp.ones((2, 4, 4, 3))
        )
    except Exception as error:  # the type is what is recorded
        out["flip/error_type"] = np.array(type(error).__name__)
        out["flip/message"] = np.array(str(error))
    fixed = nn.ConvLSTMCell.initialize_carry(key1, (2,), (4, 4, 6))
    result, _ = nn.ConvLSTMCell(features=6, kernel_size=(3, 3)).init_with_output(
        key2, fixed, jnp.ones((2, 4, 4, 3))
    )
    (c, h), y = result
    out["flip/fixed/shapes"] = np.array([c.shape, h.shape, y.shape])

    rnn = nn.RNN(nn.GRUCell(), 4)
    x = jnp.ones((3, 5, 2))
    try:
        rnn.apply(rnn.init(jax.random.PRNGKey(0), x), x, seq_lengths=jnp.array(LENGTHS))
        out["seq_lengths_without_return_carry/error_type"] = np.array("")
    except Exception as error:
        out["seq_lengths_without_return_carry/error_type"] = np.array(type(error).__name__)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="the .npz file to write")
    parser.add_argument("--partitionable", type=int, choices=(0, 1), default=1)
    args = parser.parse_args()
    jax.config.update("jax_threefry_partitionable", bool(args.partitionable))

    import flax

    out = {"versions/flax": np.array(flax.__version__), "versions/jax": np.array(jax.__version__)}
    rs = np.random.RandomState(0)
    cell_cases(out, rs)
    rnn_cases(out, rs)
    bidirectional_cases(out, rs)
    carry_cases(out)
    failure_cases(out)
    np.savez(args.out, **out)


if __name__ == "__main__":
    main()
