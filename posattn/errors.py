"""The error type that means "the user asked for something invalid", the check of a name, and the
exception of a run that stopped on purpose before its end."""
import difflib


class ConfigError(ValueError):
    """Invalid configuration or input: binaries report it in one line and exit with status 2."""


class RunStopped(Exception):
    """A run stopped on purpose before its end, its work saved (e.g. on a preemption notice): binaries
    report it in one line and exit with `exit_status`, which tells a scheduler the run is unfinished."""

    exit_status = 1


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
