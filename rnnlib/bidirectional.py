"""``Bidirectional``: two RNNs over the same sequence, one forward and one backward."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from rnnlib.module import Module, check_params, describe, flax_family
from rnnlib.rnn import RNN, check_flags


def concatenate(forward, backward):
    """The default ``merge_fn``: ``forward`` and ``backward`` side by side on the last axis."""
    return jnp.concatenate([forward, backward], axis=-1)


class Bidirectional(Module):
    """Runs ``forward_rnn`` left to right and ``backward_rnn`` right to left, then merges.

    The backward direction reads each sequence from its last *valid* step (it is called with
    ``reverse=True, keep_order=True`` and the same ``seq_lengths``), so its output at step ``t``
    summarises steps ``t .. length - 1`` and lines up with the forward output at ``t``. Example::

        bi = Bidirectional(RNN(GRUCell(features=8)), RNN(GRUCell(features=8)))
        x = jnp.ones((4, 10, 3))                      # (batch, time, channels)
        variables = bi.init(jax.random.key(0), x)
        y = bi.apply(variables, x, seq_lengths=jnp.array([10, 3, 7, 1]))  # (4, 10, 16)
        (carry_fwd, carry_bwd), y = bi.apply(variables, x, return_carry=True)

    Arguments:
        forward_rnn: an ``RNN`` (or a module with its ``init`` and ``apply``) for the forward pass.
        backward_rnn: the same for the backward pass. When both directions share one cell object
            (the same ``RNN``, or two ``RNN`` modules around one cell), they share its parameters,
            which then live under ``forward_rnn`` only, as in Flax.
        merge_fn: a function, not a module, of the two output sequences (default: concatenate).
        time_major: whether time is the first axis.
        return_carry: also return ``(carry_forward, carry_backward)``.

    ``apply`` takes ``initial_carry`` as a ``(forward, backward)`` pair, ``init_key`` (one split per
    direction), ``seq_lengths`` and ``resets``; ``reverse`` and ``keep_order``, as ``RNN``'s, are
    ignored. ``resets`` (``(*batch, time)`` bools, ``True`` where a step starts an episode) goes
    to both directions as it is: ``RNN`` with ``reverse=True`` enters each episode at its last
    step, so each direction reads every episode on its own, and both give the outputs of
    running that episode alone.
    """

    forward_rnn: RNN
    backward_rnn: RNN
    merge_fn: Callable[[Any, Any], Any] = concatenate
    time_major: bool = False
    return_carry: bool = False

    def __post_init__(self):
        for name in ("forward_rnn", "backward_rnn"):
            rnn = getattr(self, name)
            runs = all(callable(getattr(rnn, m, None)) for m in ("init", "apply"))
            cell = hasattr(rnn, "initialize_carry")
            if cell or flax_family(rnn) or not runs:
                hint = " Wrap each cell in an RNN: Bidirectional(RNN(cell), RNN(cell))." * cell
                raise TypeError(
                    f"Bidirectional expects {name} to be an rnnlib.RNN (or a module with its init "
                    f"and apply); got {'the cell ' * cell}{describe(rnn)}.{hint}"
                )
        if not callable(merge := self.merge_fn) or flax_family(merge):  # no parameters here
            raise TypeError(
                "Bidirectional expects merge_fn to be a function of the two output sequences, "
                "such as rnnlib.bidirectional.concatenate; got "
                f"{describe(merge) if flax_family(merge) else repr(merge)}. A merge with "
                "parameters goes in a layer after a concatenating Bidirectional."
            )
        check_flags("Bidirectional", self, flags=("time_major", "return_carry"))

    @property
    def shares_parameters(self) -> bool:
        """Whether both directions use one cell object, and so one set of parameters."""
        cell = getattr(self.forward_rnn, "cell", None)
        shared = cell is not None and cell is getattr(self.backward_rnn, "cell", None)
        return self.forward_rnn is self.backward_rnn or shared

    def _init(self, key, inputs, *, time_major=None, **unused):
        time_major = self.time_major if time_major is None else time_major
        if isinstance(inputs, jax.ShapeDtypeStruct):  # StackedRNN initialises from shapes
            inputs = jnp.zeros(inputs.shape, inputs.dtype)
        keys = dict(zip(("forward_rnn", "backward_rnn"), jax.random.split(key)))
        names = ("forward_rnn",) if self.shares_parameters else tuple(keys)
        return {
            n: getattr(self, n).init(keys[n], inputs, time_major=time_major)["params"]
            for n in names
        }

    def _call(
        self,
        params,
        inputs,
        *,
        initial_carry=None,
        init_key=None,
        seq_lengths=None,
        return_carry=None,
        time_major=None,
        reverse=None,
        keep_order=None,
        resets=None,
    ):
        return_carry = self.return_carry if return_carry is None else return_carry
        time_major = self.time_major if time_major is None else time_major
        backward = "forward_rnn" if self.shares_parameters else "backward_rnn"
        check_params(self, params, {"forward_rnn": {}, backward: {}})
        keys = (None, None) if init_key is None else jax.random.split(init_key)
        carries = (None, None) if initial_carry is None else initial_carry
        if not isinstance(carries, (tuple, list)) or len(carries) != 2:
            raise ValueError(
                f"{describe(self)} expects initial_carry as a (forward, backward) pair of "
                f"carries; got {type(carries).__name__}"
                + (f" of length {len(carries)}." if hasattr(carries, "__len__") else ".")
            )
        flags = dict(return_carry=True, time_major=time_major, seq_lengths=seq_lengths)
        if resets is not None:  # an own module with RNN's init and apply may not take resets
            flags["resets"] = resets
        sides = zip((self.forward_rnn, self.backward_rnn), ("forward_rnn", backward), carries, keys)
        flips = [dict(reverse=r, keep_order=r) for r in (False, True)]  # backward: reversed
        (carry_forward, forward), (carry_backward, backward) = [
            rnn.apply({"params": params[n]}, inputs, initial_carry=c, init_key=k, **flags, **flip)
            for (rnn, n, c, k), flip in zip(sides, flips)
        ]
        outputs = jax.tree_util.tree_map(self.merge_fn, forward, backward)
        return ((carry_forward, carry_backward), outputs) if return_carry else outputs
