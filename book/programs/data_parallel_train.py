"""Train the scaling_out chapter's LSTM data-parallel over several processes.

One copy of this program runs in every process; on a cluster, one process per host.
The processes join through ``jax.distributed``, build one mesh over all their devices,
and each reads only its own rows of every global batch from the dataset folder. The
jitted train step is the chapter's, unchanged: the compiler adds the all-reduce of the
gradients, which now crosses processes. Process 0 writes the checkpoint.

Two commands::

    python data_parallel_train.py make-data DATA          # the chapter's synthetic batch
    python data_parallel_train.py train --data DATA --coordinator HOST:PORT \\
        --num-processes N --process-id I [--checkpoint ckpt.npz]

``launch_local.py`` runs N processes of ``train`` on this machine, on loopback, each
with simulated CPU devices; README.md says what changes on real hosts.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import sys
import threading
import time
import traceback
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

ARRAYS = ("x", "seq_lengths", "y")  # one .npy file each in the dataset folder


# ---- The model, loss and train step: the chapter's. ---------------------------------


def init_params(rnn, key, time_steps, channels):
    """The LSTM's parameters under 'rnn', a linear readout's under 'head'."""
    key_rnn, key_head = jax.random.split(key)
    features = rnn.cell.features
    kernel = jax.random.normal(key_head, (features, 1)) / jnp.sqrt(features)
    head = {"kernel": kernel, "bias": jnp.zeros((1,))}
    example = jnp.zeros((1, time_steps, channels))  # shapes only: values do not matter
    return {"rnn": rnn.init(key_rnn, example)["params"], "head": head}


def loss_fn(rnn, params, x, seq_lengths, y):
    """Mean squared error of the readout of the carry after each sequence's last step."""
    (c, h), _ = rnn.apply(
        {"params": params["rnn"]}, x, seq_lengths=seq_lengths, return_carry=True
    )
    prediction = (h @ params["head"]["kernel"] + params["head"]["bias"])[:, 0]
    return jnp.mean((prediction - y) ** 2)


def make_train_step(rnn):
    @jax.jit
    def train_step(state, x, seq_lengths, y):
        grad_fn = jax.value_and_grad(lambda p: loss_fn(rnn, p, x, seq_lengths, y))
        loss, grads = grad_fn(state.params)
        return state.apply_gradients(grads=grads), loss

    return train_step


# ---- Data: a folder of .npy files, read one process's rows at a time. --------------


def synthetic_data(key, size, time_steps, channels):
    """The chapter's task: padded sequences, target the mean of channel 0 over the
    valid steps. Returns ``x (size, time, channels)``, ``seq_lengths``, ``y (size,)``."""
    key_x, key_len = jax.random.split(key)
    x = jax.random.normal(key_x, (size, time_steps, channels))
    seq_lengths = jax.random.randint(key_len, (size,), 4, time_steps + 1)
    valid = jnp.arange(time_steps) < seq_lengths[:, None]
    x = jnp.where(valid[..., None], x, 0.0)
    y = x[..., 0].sum(axis=1) / seq_lengths
    return x, seq_lengths, y


def write_dataset(folder, x, seq_lengths, y):
    """Store a dataset as ``x.npy``, ``seq_lengths.npy`` and ``y.npy`` in ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, array in zip(ARRAYS, (x, seq_lengths, y)):
        np.save(folder / f"{name}.npy", np.asarray(array))


def open_dataset(folder):
    """The dataset's arrays, memory-mapped: slicing one reads only those rows."""
    folder = Path(folder)
    missing = [name for name in ARRAYS if not (folder / f"{name}.npy").is_file()]
    if missing:
        raise FileNotFoundError(
            f"dataset folder {folder} should hold x.npy, seq_lengths.npy and y.npy; "
            f"missing: {', '.join(m + '.npy' for m in missing)}"
        )
    arrays = [np.load(folder / f"{name}.npy", mmap_mode="r") for name in ARRAYS]
    sizes = {name: len(a) for name, a in zip(ARRAYS, arrays)}
    if len(set(sizes.values())) != 1:
        raise ValueError(
            f"the dataset's arrays hold different numbers of rows: {sizes}"
        )
    return arrays


def rows_of_this_process(sharding, global_batch):
    """The slice of a global batch that this process's devices hold, asked of the
    sharding itself (on a mesh ordered by process, it is one contiguous block)."""
    blocks = sharding.addressable_devices_indices_map((global_batch,)).values()
    starts = sorted(index[0].start or 0 for index in blocks)
    stops = sorted(
        global_batch if index[0].stop is None else index[0].stop for index in blocks
    )
    if any(stop != start for stop, start in zip(stops, starts[1:])):
        raise ValueError(f"this process's rows are not one block: starts {starts}")
    return slice(starts[0], stops[-1])


# ---- Joining the other processes. --------------------------------------------------


def is_loopback(host):
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def bind_cpu_collectives_to_loopback():
    """Make gloo, jax's CPU collectives, listen and connect on 127.0.0.1 only.

    jax builds gloo's sockets on the address this host's name resolves to, which on
    many machines is a network card, not loopback (jaxlib does not read
    GLOO_SOCKET_IFNAME). There is no public switch, so this registers jax's own CPU
    backend, built with gloo bound to 127.0.0.1, through jax's internal
    ``make_cpu_client``. Call it before jax creates its backends.
    """
    try:
        from jax._src import distributed, xla_bridge
        from jax._src.lib import _jax
        from jax.extend.backend import register_backend_factory
    except ImportError:  # another jax layout: accept only a host name on loopback
        address = socket.gethostbyname(socket.gethostname())
        if not is_loopback(address):
            raise RuntimeError(
                f"cannot keep the CPU collectives on loopback with this jax: they bind "
                f"to {address}, the address of this host's name"
            ) from None
        return

    def cpu_backend():
        gloo = _jax.make_gloo_tcp_collectives(
            distributed_client=distributed.global_state.client, hostname="127.0.0.1"
        )
        return xla_bridge.make_cpu_client(collectives=gloo)

    register_backend_factory("cpu", cpu_backend, priority=0, fail_quietly=False)


def wait_for_coordinator(host, port, deadline, process_id):
    """Return once something listens at ``host:port``; TimeoutError at ``deadline``."""
    while True:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError as error:
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"process {process_id}: no coordinator answered at {host}:{port} "
                    f"within the timeout ({error.strerror or error}); expected process "
                    f"0 to be listening there"
                ) from None
            time.sleep(0.2)


def join(coordinator, num_processes, process_id, timeout):
    """``jax.distributed.initialize``, with clear errors instead of a crash or a hang.

    When the coordinator never answers, or some processes never register, jax's client
    ends the whole process after ``initialization_timeout`` (it cannot be caught). So
    non-coordinators first check that the coordinator listens, and the join itself
    runs in a thread that we stop waiting for, raising TimeoutError, before jax would.
    """
    host, _, port = coordinator.rpartition(":")
    host = host.strip("[]")
    if not port.isdigit() or not host:
        raise ValueError(f"--coordinator should be HOST:PORT, got {coordinator!r}")
    deadline = time.monotonic() + timeout
    if process_id != 0:
        wait_for_coordinator(host, int(port), deadline, process_id)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    options = {}
    if is_loopback(host):
        # One machine: the coordinator listens on loopback only (by default it listens
        # on every address), and so do the collectives.
        options["coordinator_bind_address"] = f"{host}:{port}"
        bind_cpu_collectives_to_loopback()
    failure = []

    def initialize():
        try:
            jax.distributed.initialize(
                coordinator_address=coordinator,
                num_processes=num_processes,
                process_id=process_id,
                initialization_timeout=int(timeout) + 60,  # ours expires first
                **options,
            )
        except BaseException as error:  # handed to the main thread below
            failure.append(error)

    joining = threading.Thread(target=initialize, daemon=True)
    joining.start()
    joining.join(max(deadline - time.monotonic(), 0.0))
    if joining.is_alive():
        raise TimeoutError(
            f"process {process_id}: not all {num_processes} processes registered with "
            f"the coordinator at {coordinator} within {timeout:g} s; check that every "
            f"process was started with --num-processes {num_processes} and its own "
            f"--process-id in 0..{num_processes - 1}"
        )
    if failure:
        raise RuntimeError(
            f"process {process_id}: could not join the {num_processes} processes at "
            f"{coordinator}: {failure[0]}"
        ) from failure[0]


def check_process_count(num_processes):
    """Every process compares the count it was given with the others' and jax's."""
    claimed = multihost_utils.process_allgather(np.int32(num_processes)).tolist()
    if any(n != jax.process_count() for n in claimed):
        said = ", ".join(f"process {i} says {n}" for i, n in enumerate(claimed))
        raise ValueError(
            f"the processes disagree on how many they are: {said}; "
            f"{jax.process_count()} joined the coordinator"
        )


# ---- Training. ---------------------------------------------------------------------


def flat(params):
    """``{'rnn/cell/hi/kernel': array, ...}``: a parameter tree as named numpy arrays."""
    leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    return {
        "/".join(str(k.key) for k in path): np.asarray(leaf.addressable_data(0))
        for path, leaf in leaves
    }


def describe(name, array):
    """One process's view of a global array: its shape, spec, and the local shards."""
    rows = ", ".join(
        f"device {s.device.id} rows {s.index[0].start}..{s.index[0].stop - 1}"
        for s in array.addressable_shards
    )
    return f"{name} {array.shape} {array.sharding.spec}: {rows}"


def train(args):
    rank = args.process_id
    join(args.coordinator, args.num_processes, rank, args.init_timeout)
    check_process_count(args.num_processes)
    devices = jax.device_count()
    if args.global_batch % devices:
        raise ValueError(
            f"--global-batch {args.global_batch} does not split over {devices} devices "
            f"({jax.process_count()} processes x {jax.local_device_count()} local "
            f"devices): use a multiple of {devices}"
        )
    x_all, lengths_all, y_all = open_dataset(args.data)
    if len(x_all) % args.global_batch:
        raise ValueError(
            f"the dataset's {len(x_all)} rows do not make whole global batches of "
            f"{args.global_batch}"
        )
    _, time_steps, channels = x_all.shape

    mesh = Mesh(np.array(jax.devices()), axis_names=("data",))
    batch_sharded, replicated = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
    mine = rows_of_this_process(batch_sharded, args.global_batch)
    local = [str(d.id) for d in jax.local_devices()]
    print(
        f"process {rank} of {jax.process_count()}: local devices {', '.join(local)} "
        f"of {devices}; reads rows {mine.start}..{mine.stop - 1} of each batch"
    )

    def global_batch(step):
        """Read this process's rows of batch ``step`` and join them into global arrays."""
        first = (step * args.global_batch) % len(x_all)
        rows = slice(first + mine.start, first + mine.stop)
        return [
            jax.make_array_from_process_local_data(
                batch_sharded, np.asarray(a[rows]), (args.global_batch, *a.shape[1:])
            )
            for a in (x_all, lengths_all, y_all)
        ]

    rnn = nn.RNN(nn.LSTMCell(features=args.features))
    train_step = make_train_step(rnn)
    key = jax.random.key(args.seed)

    def init_state(key):
        params = init_params(rnn, key, time_steps, channels)
        tx = optax.adam(args.learning_rate)
        return train_state.TrainState.create(apply_fn=rnn.apply, params=params, tx=tx)

    # the same values on every process, replicated over the mesh
    state = jax.jit(init_state, out_shardings=replicated)(key)
    losses = []
    for step in range(args.steps):
        x, seq_lengths, y = global_batch(step)
        if step == 0:
            for name, array in (("x", x), ("seq_lengths", seq_lengths)):
                print(f"process {rank}: {describe(name, array)}")
        state, loss = train_step(state, x, seq_lengths, y)
        losses.append(np.asarray(loss.addressable_data(0)))  # replicated: any copy
    print(f"process {rank}: losses " + " ".join(f"{v:.4f}" for v in losses))
    if rank == 0 and args.checkpoint:
        path = Path(args.checkpoint)
        partial = path.with_name(path.name + ".partial.npz")
        np.savez(
            partial, losses=np.array(losses), steps=args.steps, **flat(state.params)
        )
        os.replace(partial, path)  # readers never see a half-written file
        print(f"process {rank}: wrote {path.name}")
    jax.distributed.shutdown()


def make_data(args):
    arrays = synthetic_data(
        jax.random.key(args.seed), args.size, args.time, args.channels
    )
    write_dataset(args.folder, *arrays)
    print(f"wrote {args.size} sequences to {args.folder}")


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    data = commands.add_parser(
        "make-data", help="write the chapter's synthetic dataset"
    )
    data.add_argument("folder")
    data.add_argument("--size", type=int, default=32, help="sequences (32)")
    data.add_argument("--time", type=int, default=12, help="steps per sequence (12)")
    data.add_argument("--channels", type=int, default=3, help="input channels (3)")
    data.add_argument("--seed", type=int, default=0)
    run = commands.add_parser("train", help="train; run one copy per process")
    run.add_argument("--data", required=True, help="dataset folder (make-data)")
    run.add_argument("--coordinator", required=True, help="HOST:PORT of process 0")
    run.add_argument("--num-processes", type=int, required=True)
    run.add_argument("--process-id", type=int, required=True)
    run.add_argument("--global-batch", type=int, default=32)
    run.add_argument("--steps", type=int, default=10)
    run.add_argument("--features", type=int, default=16)
    run.add_argument("--learning-rate", type=float, default=1e-2)
    run.add_argument("--seed", type=int, default=1, help="parameter key (1)")
    run.add_argument("--checkpoint", help="where process 0 writes params and losses")
    run.add_argument(
        "--init-timeout",
        type=float,
        default=60.0,
        help="seconds to wait for every process to join (60)",
    )
    return parser.parse_args(argv)


def stdout_for_the_report_only():
    """Send what native libraries print (gloo, when it connects) to stderr.

    They write to the process's stdout from their own threads, which can cut into this
    program's lines; afterwards stdout carries only the lines printed here.
    """
    sys.stdout.flush()
    report = os.fdopen(os.dup(1), "w", buffering=1)  # line-buffered: one write a line
    os.dup2(2, 1)
    sys.stdout = report


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.command == "make-data":
        make_data(args)
        return
    stdout_for_the_report_only()
    try:
        train(args)
    except Exception:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        # Not sys.exit: at exit jax would wait, in jax.distributed.shutdown, for
        # processes that failed too or never joined, for up to five minutes.
        os._exit(1)


if __name__ == "__main__":
    main()
