"""``Bidirectional``: two RNNs over the same sequence, one forward and one backward."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from rnnlib.module import Module, check_params, describe
from rnnlib.rnn import RNN


def concatenate(forward, backward):
    """The default ``merge_fn``: ``forward`` and ``backward`` side by side on the last axis."""
    return jnp.concatenate([forward, backward], axis=-1)


@dataclasses.dataclass(frozen=True, repr=False)
class Bidirectional(Module):
    """Runs ``forward_rnn`` left to right and ``backward_rnn`` right to left, then merges.

    The backward direction reads each sequence from its last *valid* step (it is
    called with ``reverse=True, keep_order=True`` and the same ``seq_lengths``), so
    its output at step ``t`` summarises steps ``t .. length - 1`` and lines up with
    the forward output at ``t``. Example::

        bi = Bidirectional(RNN(GRUCell(features=8)), RNN(GRUCell(features=8)))
        x = jnp.ones((4, 10, 3))                      # (batch, time, channels)
        variables = bi.init(jax.random.key(0), x)
        y = bi.apply(variables, x, seq_lengths=jnp.array([10, 3, 7, 1]))  # (4, 10, 16)
        (carry_fwd, carry_bwd), y = bi.apply(variables, x, return_carry=True)

    Arguments:
        forward_rnn: an ``RNN``, or anything with its public calling convention, for the
            forward pass: ``init(key, inputs, time_major=...) -> {'params': ...}`` and
            ``apply(variables, inputs, *, initial_carry, init_key, seq_lengths,
            return_carry, time_major, reverse, keep_order)``. Only these two are called
            (and ``.cell``, where there is one, to tell whether the directions share it).
        backward_rnn: the same for the backward pass. When both directions share one cell
            object (the same ``RNN``, or two ``RNN``s around the same cell), they share its
            parameters, which then live under ``forward_rnn`` only, as in Flax.
        merge_fn: combines the two output sequences (default: concatenate on the last axis).
        time_major: whether time is the first axis.
        return_carry: also return ``(carry_forward, carry_backward)``.

    The call takes ``initial_carry`` as a ``(forward, backward)`` pair, ``init_key``
    (split in two, one key per direction) and ``seq_lengths``. ``reverse`` and
    ``keep_order`` are accepted for signature compatibility with ``RNN`` and ignored.
    """

    forward_rnn: RNN
    backward_rnn: RNN
    merge_fn: Callable[[Any, Any], Any] = concatenate
    time_major: bool = False
    return_carry: bool = False

    @property
    def shares_parameters(self) -> bool:
        """Whether both directions use one cell object, and so one set of parameters."""
        if self.forward_rnn is self.backward_rnn:
            return True
        cell = getattr(self.forward_rnn, "cell", None)
        return cell is not None and cell is getattr(self.backward_rnn, "cell", None)

    def _directions(self, params):
        backward = "forward_rnn" if self.shares_parameters else "backward_rnn"
        return params["forward_rnn"], params[backward]

    def _init(self, key, inputs, *, time_major=None, **unused):
        time_major = self.time_major if time_major is None else time_major
        key_forward, key_backward = jax.random.split(key)
        params = {"forward_rnn": _params(self.forward_rnn, key_forward, inputs, time_major)}
        if not self.shares_parameters:
            params["backward_rnn"] = _params(self.backward_rnn, key_backward, inputs, time_major)
        return params

    def _call(
        self,
        params,
        inputs,
        *,
        initial_carry=None,
        init_key=None,
        seq_lengths=None,
        return_carry: bool | None = None,
        time_major: bool | None = None,
        reverse: bool | None = None,
        keep_order: bool | None = None,
    ):
        return_carry = self.return_carry if return_carry is None else return_carry
        time_major = self.time_major if time_major is None else time_major
        expected = (
            {"forward_rnn": {}}
            if self.shares_parameters
            else {
                "forward_rnn": {},
                "backward_rnn": {},
            }
        )
        check_params(self, params, expected)
        key_forward = key_backward = None
        if init_key is not None:
            key_forward, key_backward = jax.random.split(init_key)
        carry_forward = carry_backward = None
        if initial_carry is not None:
            if not isinstance(initial_carry, (tuple, list)) or len(initial_carry) != 2:
                raise ValueError(
                    f"{describe(self)} expects initial_carry as a (forward, backward) pair of "
                    f"carries; got {type(initial_carry).__name__} of length "
                    f"{len(initial_carry) if hasattr(initial_carry, '__len__') else 'n/a'}."
                )
            carry_forward, carry_backward = initial_carry

        params_forward, params_backward = self._directions(params)
        shared = dict(seq_lengths=seq_lengths, return_carry=True, time_major=time_major)
        carry_forward, outputs_forward = self.forward_rnn.apply(
            {"params": params_forward},
            inputs,
            initial_carry=carry_forward,
            init_key=key_forward,
            reverse=False,
            **shared,
        )
        carry_backward, outputs_backward = self.backward_rnn.apply(
            {"params": params_backward},
            inputs,
            initial_carry=carry_backward,
            init_key=key_backward,
            reverse=True,
            keep_order=True,
            **shared,
        )
        outputs = jax.tree_util.tree_map(self.merge_fn, outputs_forward, outputs_backward)
        carry = (carry_forward, carry_backward)
        return (carry, outputs) if return_carry else outputs


def _params(rnn, key, inputs, time_major):
    """The parameters ``rnn.init`` creates (its ``'params'`` collection).

    ``StackedRNN`` initialises its layers from their inputs' shapes alone
    (``jax.ShapeDtypeStruct``); ``init`` is public API and takes arrays, so it gets zeros
    of that shape (the parameters do not depend on the input's values).
    """
    if isinstance(inputs, jax.ShapeDtypeStruct):
        inputs = jnp.zeros(inputs.shape, inputs.dtype)
    return rnn.init(key, inputs, time_major=time_major)["params"]
