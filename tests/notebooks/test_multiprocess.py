"""Data-parallel training over several processes (book/programs/data_parallel_train.py).

The launcher (book/programs/launch_local.py) starts 2 processes on this machine, each
with 2 simulated CPU devices, joined by ``jax.distributed`` on 127.0.0.1. Their losses
and parameters must be those of one process on one device, trained here with the same
model, data and optimizer, up to the order of the gradient sums. While they run, the
test reads every socket they hold: all must be on loopback. Bad setups must stop with
the error that names the problem. Every process is started with a timeout and stopped
whatever happens (the launcher kills them in all cases; ``subprocess.run`` on timeout).
"""

from __future__ import annotations

import importlib.util
import ipaddress
import re
import subprocess
import sys
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import psutil  # installed with ipykernel (requirements.txt)
import pytest

from tests.tolerance import assert_close

PROGRAMS = Path(__file__).resolve().parents[2] / "book" / "programs"
SCRIPT = PROGRAMS / "data_parallel_train.py"
PROCESSES, LOCAL_DEVICES = 2, 2
BATCH, TIME, CHANNELS, FEATURES, STEPS, SEED, LEARNING_RATE = 8, 6, 3, 8, 3, 1, 1e-2
TIMEOUT = 300  # seconds for a whole run; a hang fails the test instead of blocking it


def _load(name):
    spec = importlib.util.spec_from_file_location(name, PROGRAMS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


launch_local = _load("launch_local")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """Two global batches of padded sequences (the script alternates between them)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2 * BATCH, TIME, CHANNELS)).astype(np.float32)
    seq_lengths = rng.integers(2, TIME + 1, size=2 * BATCH).astype(np.int32)
    x[np.arange(TIME) >= seq_lengths[:, None]] = 0.0
    y = (x[..., 0].sum(axis=1) / seq_lengths).astype(np.float32)
    folder = tmp_path_factory.mktemp("data")
    for name, array in (("x", x), ("seq_lengths", seq_lengths), ("y", y)):
        np.save(folder / f"{name}.npy", array)
    return folder, x, seq_lengths, y


def _train_args(folder, *more):
    return [
        "--data", str(folder), "--global-batch", str(BATCH), "--steps", str(STEPS),
        "--features", str(FEATURES), "--seed", str(SEED),
        "--learning-rate", str(LEARNING_RATE), "--init-timeout", "60", *more,
    ]  # fmt: skip


def _one_device_run(x, seq_lengths, y):
    """The chapter's model and train step, on one device, written out independently."""
    rnn = nn.RNN(nn.LSTMCell(features=FEATURES))
    key_rnn, key_head = jax.random.split(jax.random.key(SEED))
    head = jax.random.normal(key_head, (FEATURES, 1)) / jnp.sqrt(FEATURES)
    params = {
        "rnn": rnn.init(key_rnn, jnp.asarray(x[:BATCH]))["params"],
        "head": {"kernel": head, "bias": jnp.zeros((1,))},
    }

    def loss_fn(params, x, seq_lengths, y):
        (_, h), _ = rnn.apply(
            {"params": params["rnn"]}, x, seq_lengths=seq_lengths, return_carry=True
        )
        prediction = (h @ params["head"]["kernel"] + params["head"]["bias"])[:, 0]
        return jnp.mean((prediction - y) ** 2)

    optimizer = optax.adam(LEARNING_RATE)

    @jax.jit
    def train_step(params, opt_state, x, seq_lengths, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, seq_lengths, y)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    opt_state, losses = optimizer.init(params), []
    for step in range(STEPS):
        rows = slice((step % 2) * BATCH, (step % 2 + 1) * BATCH)
        params, opt_state, loss = train_step(params, opt_state, x[rows], seq_lengths[rows], y[rows])
        losses.append(loss)
    return params, np.array(losses)


def _is_loopback(ip):
    address = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


class SocketWatch:
    """Called by the launcher ten times a second: records every socket of its processes."""

    def __init__(self):
        self.seen = {}  # pid -> set of (local ip, remote ip or None, status)

    def __call__(self, pids):
        for pid in pids:
            try:
                process = psutil.Process(pid)
                sockets = process.net_connections(kind="inet")
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue  # it finished between the launcher's poll and ours
            for s in sockets:
                remote = s.raddr.ip if s.raddr else None
                self.seen.setdefault(pid, set()).add((s.laddr.ip, remote, s.status))


def test_two_processes_of_two_devices_train_like_one_device_on_loopback_only(dataset, tmp_path):
    folder, x, seq_lengths, y = dataset
    checkpoint = tmp_path / "checkpoint.npz"
    watch = SocketWatch()
    results = launch_local.launch(
        _train_args(folder, "--checkpoint", str(checkpoint)),
        num_processes=PROCESSES,
        local_devices=LOCAL_DEVICES,
        timeout=TIMEOUT,
        on_poll=watch,
    )
    # Each process saw its own 2 devices of 4 and read its own half of the batch.
    for rank, result in enumerate(results):
        assert f"process {rank} of 2: local devices" in result.stdout, result.stdout
        half = f"rows {rank * BATCH // 2}..{(rank + 1) * BATCH // 2 - 1} of each batch"
        assert half in result.stdout, result.stdout
        assert f"of {PROCESSES * LOCAL_DEVICES}; reads" in result.stdout, result.stdout

    # Every socket, listening or connected, local and remote end, was on loopback,
    # and the watch saw connections in every process (so it was looking).
    assert len(watch.seen) == PROCESSES, watch.seen
    for pid, sockets in watch.seen.items():
        assert any(remote for _, remote, _ in sockets), (pid, sockets)
        outside = [s for s in sockets if not all(map(_is_loopback, filter(None, s[:2])))]
        assert not outside, f"process {pid} used non-loopback addresses: {outside}"

    # Process 0 wrote the checkpoint; the training matches one device's.
    saved = np.load(checkpoint)
    params_one, losses_one = _one_device_run(x, seq_lengths, y)
    assert losses_one[-1] < losses_one[0], losses_one  # a run that learns: a real check
    # Rounded terms per element (tests/tolerance.py): one LSTM step's sum over the
    # time steps, plus the rows the gradients sum, for every training step; 4 devices
    # add their partial sums in another order than one device does.
    terms = STEPS * ((CHANNELS + FEATURES + 1) * TIME + BATCH * TIME)
    assert_close(saved["losses"], losses_one, terms=terms, label="losses")
    flat_one = {
        "/".join(str(k.key) for k in path): leaf
        for path, leaf in jax.tree_util.tree_flatten_with_path(params_one)[0]
    }
    flat_saved = {name: saved[name] for name in flat_one}
    assert set(saved.files) == {*flat_one, "losses", "steps"}, saved.files
    assert_close(flat_saved, flat_one, terms=terms, label="params")


def _expect_failure(folder, more=(), extra_args=None):
    with pytest.raises(launch_local.LaunchError) as caught:
        launch_local.launch(
            _train_args(folder, *more),
            num_processes=PROCESSES,
            local_devices=LOCAL_DEVICES,
            timeout=TIMEOUT,
            extra_args=extra_args,
        )
    return caught.value


def test_a_global_batch_that_does_not_split_over_the_devices_is_a_value_error(dataset):
    error = _expect_failure(dataset[0], ["--global-batch", "6"])
    expected = (
        "ValueError: --global-batch 6 does not split over 4 devices "
        "(2 processes x 2 local devices): use a multiple of 4"
    )
    assert expected in str(error), str(error)


def test_processes_that_disagree_on_their_count_stop_with_a_value_error(dataset):
    error = _expect_failure(dataset[0], extra_args={1: ["--num-processes", "3"]})
    expected = (
        "ValueError: the processes disagree on how many they are: process 0 says 2, "
        "process 1 says 3; 2 joined the coordinator"
    )
    assert expected in str(error), str(error)


def test_a_coordinator_waiting_for_more_processes_than_started_times_out(dataset):
    more = ["--init-timeout", "5"]
    error = _expect_failure(dataset[0], more, extra_args={0: ["--num-processes", "3"]})
    expected = (
        "TimeoutError: process 1: not all 2 processes registered with the coordinator at 127.0.0.1:"
    )
    assert expected in str(error), str(error)
    assert " within 5 s; check that every process was started" in str(error), str(error)
    # Process 0 expects 3: it times out too, or hears first that the join was called off.
    assert re.search(
        r"process 0 exited with 1: \w+Error: process 0: .*\b3 processes", str(error)
    ), str(error)


def test_an_unreachable_coordinator_is_a_timeout_error_naming_it(dataset):
    port = launch_local.free_port()  # nothing listens there
    command = [
        sys.executable, str(SCRIPT), "train", "--data", str(dataset[0]),
        "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2",
        "--process-id", "1", "--init-timeout", "2",
    ]  # fmt: skip
    result = subprocess.run(
        command,
        env=launch_local.child_environment(LOCAL_DEVICES),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 1, (result.returncode, result.stderr)
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"TimeoutError: process 1: no coordinator answered at 127.0.0.1:{port} within the timeout"
    ), last
    assert "expected process 0 to be listening there" in last, last
