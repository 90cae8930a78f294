"""The calling convention every rnnlib module shares: ``init`` and ``apply``.

A module is a frozen dataclass of configuration (annotated attributes, as in Flax). ``init(key,
*args)`` makes its variables, ``{'params': {...}}`` laid out as flax.linen's, ``apply(variables,
*args)`` runs it; a subclass writes ``_init(key, ...)`` and ``_call(params, ...)``.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np


class Module:
    """Base class of rnnlib's modules: configuration in, ``init``/``apply`` out."""

    def __init_subclass__(cls, eq: bool = True, **kwargs):
        super().__init_subclass__(**kwargs)
        # Fields without a decorator, frozen to hash under jit; freezing is the base's __setattr__,
        # so @dataclasses.dataclass(frozen=True) on a subclass, as older code writes, still applies.
        dataclasses.dataclass(cls, frozen=True, repr=False, eq=eq)
        del cls.__setattr__, cls.__delattr__
        if "_call" in vars(cls) and "apply" not in vars(cls):  # apply, shown with _call's arguments

            def apply(self, variables, *args, **kwargs):
                return Module.apply(self, variables, *args, **kwargs)

            signature = inspect.signature(cls._call)
            self_, _, *rest = signature.parameters.values()
            variables = inspect.Parameter("variables", inspect.Parameter.POSITIONAL_OR_KEYWORD)
            apply.__signature__ = signature.replace(parameters=[self_, variables, *rest])
            cls.apply, apply.__doc__ = apply, Module.apply.__doc__

    def __setattr__(self, name, *value):
        raise dataclasses.FrozenInstanceError(f"cannot assign to or delete field {name!r}")

    __delattr__ = __setattr__

    def __repr__(self) -> str:  # Name(field=value, ...), the fields that differ from defaults
        return describe(self)

    def init(self, key, *args, **kwargs) -> dict:
        """This module's variables, ``{'params': {...}}``, for ``apply``'s arguments; ``key`` is a
        ``jax.random.key``, a raw ``jax.random.PRNGKey`` or Flax's ``{'params': key}``."""
        self._check_arguments("init", args, kwargs)
        params = self._init(_params_key(key), *args, **kwargs)
        # Trace the forward pass without running it, so bad arguments fail here, as in Flax.
        jax.eval_shape(lambda p: self._call(p, *args, **kwargs), params)
        return {"params": params}

    def init_with_output(self, key, *args, **kwargs) -> tuple[Any, dict]:
        """Like ``init``, but also returns the output of applying the new variables."""
        self._check_arguments("init_with_output", args, kwargs)
        params = self._init(_params_key(key), *args, **kwargs)
        return self._call(params, *args, **kwargs), {"params": params}

    def apply(self, variables: Mapping[str, Any], *args, **kwargs) -> Any:
        """Runs the module with ``variables`` (a dict or Flax ``FrozenDict``)."""
        self._check_arguments("apply", args, kwargs)
        return self._call(params_of(variables, self), *args, **kwargs)

    def _check_arguments(self, method: str, args, kwargs) -> None:
        """Raises a ``TypeError`` showing what ``apply`` takes when the arguments do not fit."""
        signature = inspect.signature(self._call)
        try:
            signature.bind(None, *args, **kwargs)
        except TypeError as error:
            rest = [p.replace(annotation=p.empty) for p in signature.parameters.values()][1:]
            raise TypeError(
                f"{describe(self)}.{method}: {error}; it takes the "
                f"{'variables' if method == 'apply' else 'key'}, then "
                f"{signature.replace(parameters=rest, return_annotation=signature.empty)}."
            ) from None


def describe(module) -> str:
    """``Name(field=value, ...)`` with the required fields and those changed from their defaults:
    rnnlib's ``repr``, and how errors name a module. A Flax module is named with its library and
    the fields that shape its input, ``flax.linen.RNN(cell=LSTMCell(features=8))``."""
    if family := flax_family(module):  # a user's subclass is not named as if Flax shipped it
        own = type(module).__module__.startswith(family)
        return f"{family}{'.' if own else ' module '}{_describe_flax(module)}"
    if not dataclasses.is_dataclass(module) or type(module).__repr__ is not Module.__repr__:
        return repr(module) if dataclasses.is_dataclass(module) else type(module).__name__
    arguments = sorted(
        (f for f in dataclasses.fields(module) if f.init), key=lambda f: f.kw_only is True
    )  # in the order the constructor takes them
    fields = [(f.name, getattr(module, f.name), f.default) for f in arguments]
    shown = [
        f"{n}={_short(v)}"
        for n, v, d in fields
        if d is dataclasses.MISSING or not (v is d or v == d)
    ]
    return f"{type(module).__name__}({', '.join(shown)})"


def _short(value) -> str:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return describe(value)
    named = callable(value) and not isinstance(value, type)
    return (getattr(value, "__name__", None) if named else None) or repr(value)


def flax_family(module) -> str | None:
    """``'flax.linen'`` or ``'flax.nnx'`` for a Flax module (a subclass of one included)."""
    for family in ("flax.nnx", "flax.linen"):
        if any(kind.__module__.startswith(family + ".") for kind in type(module).__mro__):
            return family
    return None


def _describe_flax(module) -> str:
    names = ("in_features", "hidden_features", "features", "kernel_size", "cell")
    shown = []
    for name in names + ("forward_rnn", "backward_rnn", "time_major"):
        value = getattr(module, name, None)
        if value is not None and value is not False:
            shown.append(f"{name}={_describe_flax(value) if flax_family(value) else repr(value)}")
    return f"{type(module).__qualname__}({', '.join(shown)})"


def params_of(variables: Mapping[str, Any], module) -> dict:
    """Returns ``variables['params']``, or a clear error naming what was given instead."""
    if not isinstance(variables, Mapping) or "params" not in variables:
        mapping = isinstance(variables, Mapping)
        got = f"keys {sorted(variables)}" if mapping else type(variables).__name__
        raise (ValueError if mapping else TypeError)(
            f"{describe(module)}.apply expects variables shaped {{'params': {{...}}}}, as init "
            f"returns them (a dict with a 'params' collection); got {got}."
        )
    return variables["params"]


def check_params(module, params: dict, expected: dict, path: str = "params") -> None:
    """Raises unless ``params`` holds every entry of ``expected`` (``jax.ShapeDtypeStruct``
    leaves) at its shape; extra entries are allowed, as in Flax."""
    if not isinstance(params, Mapping):
        got = type(params).__name__
        raise TypeError(f"{describe(module)} expects {path} to be a dict of parameters; got {got}.")
    for name, want in expected.items():
        where, got = f"{path}/{name}", params.get(name)
        if name not in params:
            raise ValueError(
                f"{describe(module)} needs the parameter {where}, but the variables have no entry "
                f"{name!r} there (found: {sorted(params)}). Were they made for another module?"
            )
        if isinstance(want, Mapping):
            check_params(module, got, want, where)
        elif tuple(np.shape(got)) != tuple(want.shape):
            raise ValueError(
                f"{describe(module)} expects {where} with shape {tuple(want.shape)} for these "
                f"inputs; the variables hold shape {tuple(np.shape(got))}. Were the variables "
                "made for inputs with a different feature size?"
            )


def _params_key(key):
    if isinstance(key, Mapping) and "params" not in key:
        raise ValueError(f"init expects a key or a {{'params': key}} dict; got keys {sorted(key)}.")
    key = key["params"] if isinstance(key, Mapping) else key
    if not _is_key(key):
        raise TypeError(
            "init expects a PRNG key (jax.random.key(seed) or jax.random.PRNGKey(seed)); "
            f"got {type(key).__name__} with shape {np.shape(key)}."
        )
    return key


def _is_key(key) -> bool:
    dtype = getattr(key, "dtype", None)
    typed = dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)
    return typed or (dtype == np.uint32 and np.shape(key) == (2,))
