"""``Dropout`` and the way rnnlib draws dropout masks: the flax.linen way, key for key.

Randomness follows flax.linen's calling convention: a module that drops values takes
``deterministic`` (as a field or at call time, exactly one of the two) and, when
``deterministic=False``, a key at apply time as ``rngs={'dropout': key}``::

    drop = Dropout(rate=0.25)
    y = drop.apply({}, x, deterministic=False, rngs={"dropout": jax.random.key(1)})
    y = drop.apply({}, x, deterministic=True)          # x unchanged, no key needed

A mask keeps each value with probability ``1 - rate`` and scales the kept values by
``1 / (1 - rate)``, so the mean of the output is the mean of the input.

flax.linen never hands a module the key passed in ``rngs``: ``make_rng`` gives the
module at ``path`` (the names of the modules from the root down) on its ``n``-th call
``fold_in(key, h)``, where ``h`` is the first 4 bytes of the SHA-1 hash of the names and
``n``. ``linen_key`` computes the same key, so rnnlib draws exactly the masks that the
same model written in flax.linen draws from the same ``rngs``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rnnlib.module import Module, _is_key, describe


def linen_key(key, *path: str | int):
    """The key flax.linen's ``make_rng`` derives from ``key`` for ``path``.

    ``path`` is the module names from the root down, then the call count (1 for a
    module's first ``make_rng`` call). ``linen_key(key, 'Dropout_0', 1)`` is the key the
    first ``nn.Dropout`` of a compact root module draws its mask from; a root
    ``nn.Dropout`` itself draws from ``linen_key(key, 1)``. (Flax folds the names without
    separators, its default while ``flax_fix_rng_separator`` is off.)
    """
    digest = hashlib.sha1()
    for part in path:
        if isinstance(part, str):
            digest.update(part.encode("utf-8"))
        else:
            digest.update(int(part).to_bytes((int(part).bit_length() + 7) // 8, byteorder="big"))
    number = int.from_bytes(digest.digest()[:4], byteorder="big")
    return jax.random.fold_in(key, jnp.uint32(number))


def dropout_mask(key, shape, rate: float):
    """Booleans of ``shape``, each ``True`` (kept) with probability ``1 - rate``."""
    return jax.random.bernoulli(key, p=1.0 - rate, shape=tuple(shape))


def apply_mask(x, mask, rate: float):
    """``x / (1 - rate)`` where ``mask`` is ``True``, 0 elsewhere; ``mask`` broadcasts."""
    mask = jnp.broadcast_to(mask, jnp.shape(x))
    return jax.lax.select(mask, x / (1.0 - rate), jnp.zeros_like(x))


def check_rate(owner: Any, name: str, rate: Any) -> None:
    """Raises unless ``rate`` is a number in ``[0, 1)``."""
    if isinstance(rate, bool) or not isinstance(rate, (int, float, np.integer, np.floating)):
        raise TypeError(
            f"{type(owner).__name__} expects {name} to be a number in [0, 1); got {rate!r}."
        )
    if not 0.0 <= float(rate) < 1.0:
        raise ValueError(
            f"{type(owner).__name__} expects {name} in [0, 1) (the probability of dropping "
            f"a value); got {rate!r}. A rate of 1 would drop every value."
        )


def _name(owner: Any) -> str:
    return owner if isinstance(owner, str) else describe(owner)


def merge_deterministic(owner: Any, field: bool | None, call: bool | None) -> bool:
    """The ``deterministic`` flag, given once: as a field or at call time, not both.

    ``owner`` (a module, or its name) names the module in error messages.
    """
    if field is not None and call is not None:
        raise ValueError(
            f"{_name(owner)} got deterministic both as a field and at call time; give it once."
        )
    value = call if field is None else field
    if value is None:
        raise ValueError(
            f"{_name(owner)} needs deterministic=True (no dropout, for evaluation) or "
            "deterministic=False (dropout, for training), as a field or at call time."
        )
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{_name(owner)} expects deterministic to be a bool; got {value!r}.")
    return bool(value)


def dropout_key(owner: Any, rngs: Mapping[str, Any] | None):
    """``rngs['dropout']``, or an error saying how to pass it (``owner`` as above)."""
    if rngs is None or not isinstance(rngs, Mapping) or "dropout" not in rngs:
        if rngs is None:
            got = "no rngs"
        elif isinstance(rngs, Mapping):
            got = f"rngs with keys {sorted(rngs)}"
        else:  # a key itself, say, where a dict of keys by name belongs
            got = f"rngs of type {type(rngs).__name__} (not a dict)"
        raise ValueError(
            f"{_name(owner)} drops values (deterministic=False), so apply needs a key: "
            f"rngs={{'dropout': jax.random.key(seed)}}; got {got}. Pass deterministic=True "
            "to run without dropout."
        )
    key = rngs["dropout"]
    if not _is_key(key):
        raise TypeError(
            f"{_name(owner)} expects rngs['dropout'] to be a PRNG key "
            f"(jax.random.key(seed)); got {type(key).__name__} with shape {np.shape(key)}."
        )
    return key


def variables_of(owner: Any, variables: Any) -> dict:
    """``variables['params']``, or ``{}``: a module without parameters accepts ``{}``."""
    if not isinstance(variables, Mapping):
        raise TypeError(
            f"{describe(owner)}.apply expects variables as a dict (as returned by init); "
            f"got {type(variables).__name__}."
        )
    return variables.get("params", {})


class Dropout(Module):
    """Zeroes each value with probability ``rate`` and scales the rest by ``1 / (1 - rate)``.

    Example::

        drop = Dropout(rate=0.5)
        x = jnp.ones((4, 10, 8))                             # any shape
        y = drop.apply({}, x, deterministic=False, rngs={"dropout": jax.random.key(0)})
        # y has shape (4, 10, 8): about half zeros, the rest 2.0

    Arguments:
        rate: the probability of dropping a value, in ``[0, 1)``.
        deterministic: ``True`` to return the input unchanged, ``False`` to drop; give it
            here or at call time, not both.
        broadcast_dims: axes along which one mask value is shared (the mask has size 1
            there), as in ``flax.linen.Dropout``.

    A root ``Dropout`` draws its mask from ``linen_key(key, 1)``, the key a root
    ``flax.linen.Dropout`` draws from, so both drop the same values.
    """

    rate: float
    deterministic: bool | None = None
    broadcast_dims: tuple[int, ...] = ()

    def __post_init__(self):
        check_rate(self, "rate", self.rate)

    def init(self, key, *args, **kwargs):
        """``{'params': {}}``: dropout has no parameters."""
        return {"params": {}}

    def apply(self, variables, x, *, deterministic=None, rngs=None):
        """``x`` with values dropped, or unchanged when deterministic."""
        variables_of(self, variables)
        return self._call({}, x, deterministic=deterministic, rngs=rngs)

    def _call(self, params, x, *, deterministic=None, rngs=None, key=None):
        if merge_deterministic(self, self.deterministic, deterministic) or self.rate == 0:
            return x
        if key is None:
            key = linen_key(dropout_key(self, rngs), 1)
        shape = [
            1 if axis in self._broadcast_axes(np.ndim(x)) else n
            for axis, n in enumerate(np.shape(x))
        ]
        return apply_mask(x, dropout_mask(key, shape, self.rate), self.rate)

    def _broadcast_axes(self, ndim: int) -> set[int]:
        return {axis % ndim for axis in self.broadcast_dims}
