"""The calling convention every rnnlib module shares: ``init`` and ``apply``.

A module is a frozen dataclass that holds configuration only. Its parameters live
outside it, in a plain nested dict laid out exactly like flax.linen's, so
``variables`` move between rnnlib and Flax unchanged::

    variables = module.init(key, *args)          # {'params': {...}}
    outputs = module.apply(variables, *args)
    outputs, variables = module.init_with_output(key, *args)

Subclasses implement two methods: ``_init(key, *args, **kwargs)`` returns the
parameter dict, and ``_call(params, *args, **kwargs)`` computes the output.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

Params = dict[str, Any]


class Module:
    """Base class of rnnlib's modules: configuration in, ``init``/``apply`` out."""

    def __repr__(self) -> str:
        return describe(self)

    def init(self, key, *args, **kwargs) -> dict[str, Params]:
        """Creates this module's variables, ``{'params': {...}}``, for the given arguments.

        ``key`` is a ``jax.random.key`` or a raw ``jax.random.PRNGKey``; a Flax-style
        ``{'params': key}`` dict is accepted too.
        """
        params = self._init(_params_key(key), *args, **kwargs)
        # Trace the forward pass without running it, so bad arguments fail here, as in
        # Flax, at the cost of a trace rather than a full eager computation.
        jax.eval_shape(lambda p: self._call(p, *args, **kwargs), params)
        return {"params": params}

    def init_with_output(self, key, *args, **kwargs) -> tuple[Any, dict[str, Params]]:
        """Like ``init``, but also returns the output of applying the new variables."""
        params = self._init(_params_key(key), *args, **kwargs)
        variables = {"params": params}
        return self._call(params, *args, **kwargs), variables

    def apply(self, variables: Mapping[str, Any], *args, **kwargs) -> Any:
        """Runs the module with ``variables`` (a dict or Flax ``FrozenDict``)."""
        return self._call(params_of(variables, self), *args, **kwargs)

    def _init(self, key, *args, **kwargs) -> Params:
        raise NotImplementedError

    def _call(self, params: Params, *args, **kwargs) -> Any:
        raise NotImplementedError


def describe(module) -> str:
    """``Name(field=value, ...)``, showing the required fields and those changed from
    their defaults; rnnlib's modules use it as their ``repr`` and in error messages.
    A Flax module is named with its library and the fields that shape its input,
    ``flax.linen.RNN(cell=LSTMCell(features=8))``."""
    family = flax_family(module)
    if family:
        return f"{family}.{_describe_flax(module)}"
    if not dataclasses.is_dataclass(module):
        return type(module).__name__
    shown = []
    for field in dataclasses.fields(module):
        value = getattr(module, field.name)
        if field.default is dataclasses.MISSING or value is not field.default:
            if field.default is dataclasses.MISSING or value != field.default:
                shown.append(f"{field.name}={_short(value)}")
    return f"{type(module).__name__}({', '.join(shown)})"


def flax_family(module) -> str | None:
    """``'flax.linen'`` or ``'flax.nnx'`` for a Flax module (a subclass of one included)."""
    for family in ("flax.nnx", "flax.linen"):
        if any(kind.__module__.startswith(family + ".") for kind in type(module).__mro__):
            return family
    return None


def _describe_flax(module) -> str:
    names = ("in_features", "hidden_features", "features", "kernel_size", "cell")
    names += ("forward_rnn", "backward_rnn", "time_major")
    shown = []
    for name in names:
        value = getattr(module, name, None)
        if value is not None and value is not False:
            text = _describe_flax(value) if flax_family(value) else repr(value)
            shown.append(f"{name}={text}")
    return f"{type(module).__qualname__}({', '.join(shown)})"


def _short(value) -> str:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return describe(value)
    if callable(value) and not isinstance(value, type):
        return getattr(value, "__name__", None) or repr(value)
    return repr(value)


def params_of(variables: Mapping[str, Any], module) -> Params:
    """Returns ``variables['params']``, or a clear error naming what was given instead."""
    if not isinstance(variables, Mapping):
        raise TypeError(
            f"{describe(module)}.apply expects variables shaped {{'params': {{...}}}} "
            f"(a dict, as returned by init); got {type(variables).__name__}."
        )
    if "params" not in variables:
        raise ValueError(
            f"{describe(module)}.apply expects variables with a 'params' collection, "
            f"as returned by init; got a mapping with keys {sorted(variables)}."
        )
    return variables["params"]


def check_params(module, params: Params, expected: Params, path: str = "params") -> None:
    """Compares a parameter tree with the shapes ``module`` expects; raises on a mismatch.

    ``expected`` holds ``jax.ShapeDtypeStruct`` leaves (from ``jax.eval_shape``).
    Extra entries in ``params`` are allowed, as in Flax.
    """
    if not isinstance(params, Mapping):
        raise TypeError(
            f"{describe(module)} expects {path} to be a dict of parameters; "
            f"got {type(params).__name__}."
        )
    for name, want in expected.items():
        where = f"{path}/{name}"
        if name not in params:
            raise ValueError(
                f"{describe(module)} needs the parameter {where}, but the variables have "
                f"no entry {name!r} there (found: {sorted(params)}). Were these variables "
                "made for a different module?"
            )
        got = params[name]
        if isinstance(want, Mapping):
            check_params(module, got, want, where)
        elif tuple(np.shape(got)) != tuple(want.shape):
            raise ValueError(
                f"{describe(module)} expects {where} with shape {tuple(want.shape)} for these "
                f"inputs; the variables hold shape {tuple(np.shape(got))}. Were the variables "
                "made for inputs with a different feature size?"
            )


def _params_key(key):
    if isinstance(key, Mapping):
        if "params" not in key:
            raise ValueError(
                f"init expects a key or a {{'params': key}} dict; got keys {sorted(key)}."
            )
        key = key["params"]
    if not _is_key(key):
        raise TypeError(
            "init expects a PRNG key (jax.random.key(seed) or jax.random.PRNGKey(seed)); "
            f"got {type(key).__name__} with shape {np.shape(key)}."
        )
    return key


def _is_key(key) -> bool:
    dtype = getattr(key, "dtype", None)
    if dtype is None:
        return False
    if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        return True
    return dtype == np.uint32 and np.shape(key) == (2,)
