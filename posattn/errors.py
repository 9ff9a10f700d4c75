"""The error type that means "the user asked for something invalid" and the checks that raise it (a
name, the types of a config dataclass's fields)."""

import dataclasses
import difflib
import math
import numbers
import types
import typing

import jax
import numpy as np


class ConfigError(ValueError):
    """Invalid configuration or input: binaries report it in one line and exit with status 2."""


def first_line(e: BaseException, default: str = "") -> str:
    """The first non-empty line of an exception's message (`default` if it has none): what a one-line
    report quotes of an error from a library (orbax, XLA, the file system)."""
    return (str(e).strip().splitlines() or [default])[0]


def check_choice(value, allowed, what: str):
    """`value` if it is one of `allowed`, else ConfigError naming the nearest valid name.

    E.g. check_choice("posit", ("vanilla", "positional"), "attention") raises
    "unknown attention 'posit': did you mean 'positional'? (valid: 'vanilla', 'positional')".
    """
    allowed = list(allowed)
    if value in allowed:
        return value
    near = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1, cutoff=0.0)
    hint = f"did you mean {near[0]!r}? " if near else ""
    raise ConfigError(f"unknown {what} {value!r}: {hint}(valid: {', '.join(map(repr, allowed))})")


INT32_MAX = 2**31 - 1  # JAX's default integer: a larger count overflows where it becomes an array
_BOOLS = (bool, np.bool_)


def check_seed(seed, what: str = "seed") -> int:
    """`seed` if it is an integer JAX can make a key of (int64: [-2**63, 2**63)), else ConfigError."""
    if (
        isinstance(seed, _BOOLS)
        or not isinstance(seed, numbers.Integral)
        or not -(2**63) <= seed < 2**63
    ):
        raise ConfigError(f"{what}={seed!r}: give an integer in [-2**63, 2**63)")
    return seed


def check_sign_labels(y, what: str) -> None:
    """ConfigError unless every label in `y` is -1 or +1, the convention of the margin losses y F(X)
    (logistic, hinge): a label 0 gives y F(X) = 0, a constant loss with no gradient, and {0, 1} labels
    train on half the data. Values are read only where `y` is concrete: under jit, vmap or grad it is a
    tracer, whose values are not known until it runs (its shape is the caller's to check)."""
    if isinstance(y, jax.core.Tracer):
        return
    values = np.unique(np.asarray(y))
    if np.isin(values, (-1, 1)).all():
        return
    fix = (
        "convert labels in {0, 1} with 2 * y - 1"
        if np.isin(values, (0, 1)).all()
        else "give -1 or +1"
    )
    raise ConfigError(
        f"{what}: labels must be -1 or +1, got values {values[:4].tolist()}"
        f"{'...' if values.size > 4 else ''}: {fix}"
    )


def check_field_types(config) -> None:
    """Raise ConfigError unless every field of the dataclass instance `config` holds a value of its
    annotated type: `int` an integer (not a bool, nor 16.0 or "16") of at most `INT32_MAX`; `float` a
    finite real number (an int will do); `bool` True or False; `str` and `Literal[...]` a string;
    `X | None` None or an X. The message names the class, the field and the value, and says what would do.

    Called first in the `__post_init__` of the library's frozen config dataclasses, so that the range
    checks after it compare numbers, and no NaN, inf or fractional count reaches a compiled program.
    """
    hints = typing.get_type_hints(type(config))
    for field in dataclasses.fields(config):
        value, kind = getattr(config, field.name), hints[field.name]
        options = typing.get_args(kind) if isinstance(kind, types.UnionType) else (kind,)
        if value is None and type(None) in options:
            continue
        kind = next(k for k in options if k is not type(None))
        kind = str if typing.get_origin(kind) is typing.Literal else kind
        name = f"{type(config).__name__}.{field.name}={value!r}"
        or_none = " or None" if type(None) in options else ""
        if kind is bool:
            ok, want = isinstance(value, _BOOLS), "True or False"
        elif kind in (int, float):
            number = numbers.Integral if kind is int else numbers.Real
            ok = isinstance(value, number) and not isinstance(value, _BOOLS)
            want = "an integer" if kind is int else "a number"
        else:
            ok, want = isinstance(value, typing.get_origin(kind) or kind), f"a {kind.__name__}"
        if not ok:
            whole = _whole(value) if kind is int and not isinstance(value, _BOOLS) else None
            raise ConfigError(
                f"{name}: give {want}{or_none} (got a {type(value).__name__}"
                + ("" if whole is None else f"; e.g. {field.name}={whole}")
                + ")"
            )
        if kind is int and abs(int(value)) > INT32_MAX:
            raise ConfigError(f"{name}: give at most {INT32_MAX:,} (JAX counts in int32)")
        if kind is float and not math.isfinite(float(value)):
            raise ConfigError(f"{name}: give a finite number{or_none}")


def _whole(value) -> int | None:
    """The integer that `value` (16.0, "16") spells, else None."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if number.is_integer() else None
