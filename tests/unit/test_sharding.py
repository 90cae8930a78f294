"""Data-parallel training of an rnnlib RNN over 8 simulated CPU devices (chapter 11's path).

XLA reads ``--xla_force_host_platform_device_count`` once, when jax starts, and the pytest
process has jax imported (with one device) long before this test runs. So the sharded training
runs in a fresh Python subprocess whose environment sets the flag before jax is imported. The
script trains a few steps of plain SGD (optax is not in the lowest environment) twice, sharded
over a ``'data'`` mesh axis and on one device, and exits non-zero if any check fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    import rnnlib
    from tests.tolerance import assert_close

    DEVICES, BATCH, TIME, CHANNELS, FEATURES, STEPS, LR = 8, 16, 6, 3, 8, 3, 0.1
    assert jax.device_count() == DEVICES, f"expected 8 devices, got {jax.device_count()}"

    key_x, key_len, key_rnn, key_head = jax.random.split(jax.random.key(0), 4)
    x = jax.random.normal(key_x, (BATCH, TIME, CHANNELS))
    seq_lengths = jax.random.randint(key_len, (BATCH,), 2, TIME + 1)
    y = x[:, 0, 0]  # the first step is valid for every sequence

    rnn = rnnlib.RNN(rnnlib.LSTMCell(features=FEATURES))
    params = {
        "rnn": rnn.init(key_rnn, x)["params"],
        "head": jax.random.normal(key_head, (FEATURES,)) / FEATURES**0.5,
    }

    def loss_fn(params, x, seq_lengths, y):
        (_, h), _ = rnn.apply(
            {"params": params["rnn"]}, x, seq_lengths=seq_lengths, return_carry=True
        )
        return jnp.mean((h @ params["head"] - y) ** 2)

    @jax.jit
    def train_step(params, x, seq_lengths, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, seq_lengths, y)
        return jax.tree_util.tree_map(lambda p, g: p - LR * g, params, grads), loss

    def train(params, x, seq_lengths, y):
        losses = []
        for _ in range(STEPS):
            params, loss = train_step(params, x, seq_lengths, y)
            losses.append(float(loss))
        return params, np.array(losses)

    mesh = Mesh(np.array(jax.devices()), axis_names=("data",))
    batch_sharded, replicated = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
    x_8, lengths_8, y_8 = (jax.device_put(a, batch_sharded) for a in (x, seq_lengths, y))
    params_8 = jax.device_put(params, replicated)

    # The batch, and seq_lengths with it, is split in 8 equal blocks, one per device.
    per_device = BATCH // DEVICES
    for array, shape in ((x_8, (per_device, TIME, CHANNELS)), (lengths_8, (per_device,))):
        shards = array.addressable_shards
        assert len({s.device for s in shards}) == DEVICES, [s.device for s in shards]
        assert all(s.data.shape == shape for s in shards), [s.data.shape for s in shards]
        starts = sorted(s.index[0].start for s in shards)
        assert starts == list(range(0, BATCH, per_device)), starts
    for shard in lengths_8.addressable_shards:
        assert np.array_equal(shard.data, seq_lengths[shard.index[0]])

    # The sharded program combines the per-device gradients with a collective.
    hlo = train_step.lower(params_8, x_8, lengths_8, y_8).compile().as_text()
    assert "all-reduce" in hlo, "the sharded train step has no all-reduce"

    params_one, losses_one = train(params, x, seq_lengths, y)
    params_eight, losses_eight = train(params_8, x_8, lengths_8, y_8)
    assert losses_one[-1] < losses_one[0], losses_one  # SGD made progress: a real comparison
    # The 8 devices sum their gradients in another order than one device does. Rounded
    # terms per element (tests/tolerance.py): each step's LSTM chain and the rows its
    # gradients sum, over every training step.
    terms = STEPS * ((CHANNELS + FEATURES + 1) * TIME + BATCH * TIME)
    assert_close(np.float32(losses_eight), np.float32(losses_one), terms=terms)
    for one, eight in zip(jax.tree_util.tree_leaves(params_one),
                          jax.tree_util.tree_leaves(params_eight)):
        assert eight.sharding.is_fully_replicated, eight.sharding
    assert_close(params_eight, params_one, terms=terms)
    print("sharded training over 8 devices matches one device")
    """
)


def test_data_parallel_training_on_8_cpu_devices_matches_one_device(tmp_path):
    script = tmp_path / "sharded_training.py"
    script.write_text(SCRIPT)
    env = dict(os.environ)
    # Kept: XLA settings from the caller's environment (CONTRIBUTING, "Orders of arithmetic").
    # The device count goes first: XLA stops reading flags at a word without "--" (such as
    # the "intra_op_parallelism_threads=1" of the one-thread setting).
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count=8 {env.get('XLA_FLAGS', '')}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env["JAX_PLATFORMS"] = "cpu"
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, (
        f"sharded training script exited with {result.returncode}\n"
        f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"
    )
    assert "matches one device" in result.stdout
