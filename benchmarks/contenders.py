"""The implementations the benchmark compares, each built for one (cell, configuration).

Every contender is a pair of jitted functions over the same kind of arguments:
``forward(params, x) -> outputs`` and ``train(params, x) -> grads`` (the gradient of
a scalar loss, ``mean(outputs ** 2)``, with respect to the parameters). The rnnlib,
flax.linen and hand-written contenders share one set of linen-layout variables, so
their outputs are equal (``tests/tools/test_benchmarks.py`` checks it); flax.nnx has its own
parameter layout and gets its own initialisation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp

import rnnlib
from benchmarks import lstm_programs

DENSE_CELLS = ("LSTMCell", "OptimizedLSTMCell", "GRUCell")
CONV_CELLS = ("ConvLSTMCell",)
# AGAIN is flax.linen built and jitted a second time: the same program, timed as a
# contender of its own in the same rotation. Its ratio to flax.linen is what this
# machine's noise alone makes of two equal programs (an A/A comparison), the yardstick
# for any other ratio near 1.0.
AGAIN = "flax.linen:again"
NAMES = ("rnnlib", "flax.linen", "flax.nnx", "lax.scan", AGAIN)
# flax.linen's other LSTM, OptimizedLSTMCell, for the LSTMCell rows (it takes LSTMCell's
# parameters as they are), and its own A/A copy. The sweep (benchmarks/sweep.py) times
# both linen LSTMs and compares rnnlib's LSTMCell with the faster one. Not run unless asked.
OPTIMIZED = "flax.linen:OptimizedLSTMCell"
OPTIMIZED_AGAIN = "flax.linen:OptimizedLSTMCell:again"
# rnnlib with its input projection forced before the loop or into it (``Plan.hoist_inputs``);
# plain "rnnlib" lets the backend decide. Not run unless asked for (``--contenders``).
RNNLIB_HOISTING = {"rnnlib": None, "rnnlib:hoisted": True, "rnnlib:in-loop": False}
# The LSTM with its kernel gradients taken after the backward loop, two ways, and its
# forward pass scheduled other ways (benchmarks/lstm_programs.py, timed by
# benchmarks/backward.py and benchmarks/forward.py). Not run unless asked for.
BACKWARD = lstm_programs.BACKWARD
FORWARD = lstm_programs.FORWARD
ALL_NAMES = (
    NAMES + ("rnnlib:hoisted", "rnnlib:in-loop", OPTIMIZED, OPTIMIZED_AGAIN) + BACKWARD + FORWARD
)


@dataclasses.dataclass
class Contender:
    name: str
    forward: Callable
    train: Callable
    params: object


def _loss_grad(apply):
    return jax.jit(jax.grad(lambda params, x: jnp.mean(apply(params, x) ** 2)))


def _cell_kwargs(cell_name, config):
    if cell_name == "ConvLSTMCell":
        return dict(features=config["H"], kernel_size=(3,) * len(config["signal"]))
    return dict(features=config["H"])


def inputs_for(config, key):
    if "signal" in config:
        shape = (config["B"], config["T"], *config["signal"], config["I"])
    else:
        shape = (config["B"], config["T"], config["I"])
    return jax.random.normal(key, shape, jnp.float32)


def build(name: str, cell_name: str, config: dict, x, linen_variables=None) -> Contender | None:
    """The contender ``name`` for ``cell_name``; ``None`` where it has no such cell."""
    import flax.linen as nn

    kwargs = _cell_kwargs(cell_name, config)
    if linen_variables is None:
        linen_variables = nn.RNN(getattr(nn, cell_name)(**kwargs)).init(jax.random.key(0), x)
    params = linen_variables["params"]

    if name in RNNLIB_HOISTING:
        plan = rnnlib.Plan(hoist_inputs=RNNLIB_HOISTING[name])
        rnn = rnnlib.RNN(getattr(rnnlib, cell_name)(**kwargs), plan=plan)

        def apply(p, x):
            return rnn.apply({"params": p}, x)

    elif name in ("flax.linen", AGAIN):
        rnn = nn.RNN(getattr(nn, cell_name)(**kwargs))

        def apply(p, x):
            return rnn.apply({"params": p}, x)

    elif name in (OPTIMIZED, OPTIMIZED_AGAIN):
        if cell_name != "LSTMCell":
            return None
        rnn = nn.RNN(nn.OptimizedLSTMCell(**kwargs))

        def apply(p, x):
            return rnn.apply({"params": p}, x)

    elif name == "lax.scan":
        apply = _hand_written(cell_name)
        if apply is None:
            return None
    elif name in BACKWARD + FORWARD:
        if cell_name not in ("LSTMCell", "OptimizedLSTMCell"):
            return None
        apply = lstm_programs.apply_for(name)
    elif name == "flax.nnx":
        return _nnx(cell_name, config, x)
    else:
        raise ValueError(f"unknown contender {name!r}; expected one of {ALL_NAMES}")
    # A fresh jax.jit per contender: AGAIN gets its own traced and compiled executables,
    # not flax.linen's.
    return Contender(name, jax.jit(apply), _loss_grad(apply), params)


def _nnx(cell_name, config, x):
    from flax import nnx

    if not hasattr(nnx, cell_name):
        return None  # NNX has no ConvLSTMCell
    cell = getattr(nnx, cell_name)(config["I"], config["H"], rngs=nnx.Rngs(0))
    # The carry is made once, outside jit: an NNX RNN that draws it inside would
    # mutate its RNG stream from within the traced function.
    carry = cell.initialize_carry(x.shape[:1] + x.shape[2:], rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(nnx.RNN(cell, rngs=False))

    def apply(params, x):
        return nnx.merge(graphdef, params)(x, initial_carry=carry)

    return Contender("flax.nnx", jax.jit(apply), _loss_grad(apply), params)


def _hand_written(cell_name):
    """A plain ``lax.scan`` over the time axis, one fused matmul per side and step.

    This is the code a careful reader would write without a library: the gate
    kernels are concatenated once, and each step computes ``x W_i + h W_h + b``.
    """
    if cell_name in ("LSTMCell", "OptimizedLSTMCell"):
        names_i, names_h = ("ii", "if", "ig", "io"), ("hi", "hf", "hg", "ho")

        def apply(p, xs):
            w_i = jnp.concatenate([p["cell"][n]["kernel"] for n in names_i], -1)
            w_h = jnp.concatenate([p["cell"][n]["kernel"] for n in names_h], -1)
            b = jnp.concatenate([p["cell"][n]["bias"] for n in names_h], -1)
            batch, hidden = xs.shape[0], w_h.shape[0]

            def step(carry, x):
                c, h = carry
                i, f, g, o = jnp.split(x @ w_i + h @ w_h + b, 4, axis=-1)
                c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
                h = jax.nn.sigmoid(o) * jnp.tanh(c)
                return (c, h), h

            zeros = jnp.zeros((batch, hidden), xs.dtype)
            _, ys = jax.lax.scan(step, (zeros, zeros), jnp.swapaxes(xs, 0, 1))
            return jnp.swapaxes(ys, 0, 1)

        return apply
    if cell_name == "GRUCell":

        def apply(p, xs):
            cell = p["cell"]
            w_i = jnp.concatenate([cell[n]["kernel"] for n in ("ir", "iz", "in")], -1)
            b_i = jnp.concatenate([cell[n]["bias"] for n in ("ir", "iz", "in")], -1)
            w_h = jnp.concatenate([cell[n]["kernel"] for n in ("hr", "hz", "hn")], -1)
            b_hn = cell["hn"]["bias"]
            batch, hidden = xs.shape[0], w_h.shape[0]

            def step(h, x):
                x_r, x_z, x_n = jnp.split(x @ w_i + b_i, 3, axis=-1)
                h_r, h_z, h_n = jnp.split(h @ w_h, 3, axis=-1)
                r = jax.nn.sigmoid(x_r + h_r)
                z = jax.nn.sigmoid(x_z + h_z)
                n = jnp.tanh(x_n + r * (h_n + b_hn))
                h = (1.0 - z) * n + z * h
                return h, h

            _, ys = jax.lax.scan(step, jnp.zeros((batch, hidden), xs.dtype), jnp.swapaxes(xs, 0, 1))
            return jnp.swapaxes(ys, 0, 1)

        return apply
    if cell_name == "ConvLSTMCell":

        def apply(p, xs):
            cell = p["cell"]
            rank = xs.ndim - 3
            spec = "N" + "DHW"[-rank:] + "C"
            numbers = jax.lax.conv_dimension_numbers(
                xs.shape[:1] + xs.shape[2:],
                cell["ih"]["kernel"].shape,
                (spec, "DHW"[-rank:] + "IO", spec),
            )

            def conv(x, layer):
                y = jax.lax.conv_general_dilated(
                    x, layer["kernel"], (1,) * rank, "SAME", dimension_numbers=numbers
                )
                return y + layer["bias"]

            features = cell["hh"]["kernel"].shape[-2]
            zeros = jnp.zeros(xs.shape[:1] + xs.shape[2:-1] + (features,), xs.dtype)

            def step(carry, x):
                c, h = carry
                i, g, f, o = jnp.split(conv(x, cell["ih"]) + conv(h, cell["hh"]), 4, axis=-1)
                c = jax.nn.sigmoid(f + 1) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
                h = jax.nn.sigmoid(o) * jnp.tanh(c)
                return (c, h), h

            _, ys = jax.lax.scan(step, (zeros, zeros), jnp.swapaxes(xs, 0, 1))
            return jnp.swapaxes(ys, 0, 1)

        return apply
    return None
