"""A training step of a whole flax.linen model, with ``nn.RNN`` or ``rnnlib.linen.RNN`` inside.

The model is what a Flax user writes: ``nn.Embed``, the recurrent layer, ``nn.Dense``. Both
versions share one set of variables (the parameter trees are the same), and each step is
``jax.jit`` of the loss's gradient and an SGD update. An A/A pair (the linen model timed twice
as two contenders) gives the noise floor of the ratios. Run it with
``python -m benchmarks.model_step [--quick] [--out benchmarks/results/model_step]``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp

import rnnlib
from benchmarks.run import describe_machine, timed_rounds
from rnnlib import linen as rl

CELLS = {"LSTMCell": (nn.LSTMCell, rnnlib.LSTMCell), "GRUCell": (nn.GRUCell, rnnlib.GRUCell)}


class Model(nn.Module):
    """Tokens ``(batch, time)`` to logits ``(batch, time, vocab)``."""

    vocab: int
    embed: int
    layer: object

    @nn.compact
    def __call__(self, tokens, lengths):
        x = nn.Embed(self.vocab, self.embed)(tokens)
        x = self.layer()(x, seq_lengths=lengths)
        return nn.Dense(self.vocab)(x)


def train_step(model, learning_rate=0.1):
    """``step(variables, (tokens, lengths))``: next-token loss, its gradient, an SGD update."""

    def loss(variables, tokens, lengths):
        logits = model.apply(variables, tokens[:, :-1], lengths - 1)
        targets = jax.nn.one_hot(tokens[:, 1:], logits.shape[-1])
        mask = jnp.arange(logits.shape[1]) < (lengths - 1)[:, None]
        nll = -jnp.sum(targets * jax.nn.log_softmax(logits), -1)
        return jnp.sum(jnp.where(mask, nll, 0.0)) / jnp.sum(mask)

    @jax.jit
    def step(variables, batch):
        value, grads = jax.value_and_grad(loss)(variables, *batch)
        new = jax.tree.map(lambda v, g: v - learning_rate * g, variables, grads)
        return value, new

    return step


def contenders(cell_name, config, key):
    """``{name: (step, variables)}`` and the batch, all on one set of variables."""
    linen_cell, rnnlib_cell = CELLS[cell_name]
    features, vocab, embed = config["features"], config["vocab"], config["embed"]
    linen = Model(vocab, embed, lambda: nn.RNN(linen_cell(features)))
    ours = Model(vocab, embed, lambda: rl.RNN(rnnlib_cell(features)))
    tokens = jax.random.randint(key, (config["batch"], config["steps"] + 1), 0, vocab)
    lengths = jnp.full((config["batch"],), config["steps"] + 1)
    variables = linen.init(jax.random.key(0), tokens[:, :-1], lengths - 1)
    fns = {
        "flax.linen": (train_step(linen), variables),
        "flax.linen (A/A)": (train_step(linen), variables),
        "rnnlib.linen": (train_step(ours), variables),
    }
    return fns, (tokens, lengths)


def measure(config, runs) -> dict:
    results = {}
    for cell_name in CELLS:
        fns, batch = contenders(cell_name, config, jax.random.key(1))
        times = timed_rounds(fns, batch, runs, min_timed_s=config["min_timed_s"])
        base = times["flax.linen"]["median_s"]
        results[cell_name] = {
            "median_s": {name: t["median_s"] for name, t in times.items()},
            "ratio_to_linen": {name: t["median_s"] / base for name, t in times.items()},
            "rounds": len(times["flax.linen"]["runs"]),
        }
    return results


def markdown(report) -> str:
    config = report["config"]
    lines = [
        f"Training step of Embed({config['vocab']}, {config['embed']}) -> RNN("
        f"{config['features']} features) -> Dense({config['vocab']}), batch {config['batch']}, "
        f"{config['steps']} steps; median of timed rounds (contenders in rotating order).",
        "",
        f"Machine: {report['machine']}.",
        "",
        "| cell | flax.linen (ms) | rnnlib.linen (ms) | rnnlib / linen | A/A | rounds |",
        "|---|---|---|---|---|---|",
    ]
    for cell, r in report["results"].items():
        ms, ratio = r["median_s"], r["ratio_to_linen"]
        lines.append(
            f"| {cell} | {1e3 * ms['flax.linen']:.2f} | {1e3 * ms['rnnlib.linen']:.2f} | "
            f"{ratio['rnnlib.linen']:.2f} | {ratio['flax.linen (A/A)']:.2f} | {r['rounds']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small model, few rounds")
    parser.add_argument("--out", type=Path, help="write OUT.json and OUT.md")
    args = parser.parse_args(argv)
    config = dict(batch=32, steps=64, vocab=256, embed=32, features=128, min_timed_s=1.0)
    runs = 10
    if args.quick:
        config.update(batch=4, steps=8, vocab=16, embed=4, features=8, min_timed_s=0.0)
        runs = 2
    report = {"config": config, "machine": describe_machine(), "results": measure(config, runs)}
    text = markdown(report)
    print(text)
    if args.out:
        args.out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
        args.out.with_suffix(".md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
