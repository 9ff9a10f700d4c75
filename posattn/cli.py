"""Entry-point plumbing shared by the absl binaries in `experiments/`.

Bad input (a flag that does not parse, a config file that does not exist, a `ConfigError` raised while
loading or validating a config) ends the program with one line on stderr and exit status 2, never a
traceback; a `RunStopped` (a run that saved its work and stopped early, e.g. on SIGTERM) ends with one
line and its own exit status; anything else is a bug and keeps its traceback. `load_config` and `int_list` read what
binaries take besides `--config` flags: config files named in their own flags, and lists of integers.
"""
import importlib.util
import os
import pathlib
import sys

from absl import app, flags
from ml_collections.config_flags.config_flags import ConfigFileFlagParser

from posattn.errors import ConfigError, RunStopped


ROOT = pathlib.Path(__file__).resolve().parents[1]  # the repository, where tpu_configs/ lies


def load_config(path: str, arg: str | None = None):
    """`get_config(arg)` of a config file such as "tpu_configs/digits.py" (relative to the current
    directory, else to the repository)."""
    file = pathlib.Path(path)
    if not file.is_absolute() and not file.exists():
        file = ROOT / file
    if not file.is_file():
        raise ConfigError(f"config file {path} not found: use one of tpu_configs/*.py")
    spec = importlib.util.spec_from_file_location(file.stem, file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(arg)


def int_list(text: str, what: str) -> list[int]:
    """"2,4,8" -> [2, 4, 8]; ConfigError for anything that is not a list of positive integers."""
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    if not items or not all(t.isdigit() and int(t) > 0 for t in items):
        raise ConfigError(f"--{what}={text!r} must be a comma-separated list of positive integers")
    return [int(t) for t in items]


def fail(message: str, status: int = 2, prefix: str = "error") -> None:
    """Print `PREFIX: message` on one line and exit with `status` (2: bad input)."""
    sys.stderr.write(f"{prefix}: {' '.join(str(message).split())}\n")
    sys.exit(status)


def _flag_value(argv, name: str) -> str | None:
    """The last value argv gives flag `name` (`--NAME=VALUE` or `--NAME VALUE`), None if none."""
    value = None
    for i, arg in enumerate(argv[1:], 1):
        if arg == "--":
            break
        key, eq, given = arg.lstrip("-").partition("=")
        if arg.startswith("-") and key == name:
            value = given if eq else (argv[i + 1] if i + 1 < len(argv) else None)
    return value


def _check_config_files(argv) -> None:
    """Fail unless the file of every ml_collections config-file flag (FILE[:ARG]) exists.

    ml_collections keeps a missing file as a placeholder that raises only when the config is first
    used (or, with `--config.FIELD` overrides, while the flags parse), with a traceback either way.
    """
    for name in list(flags.FLAGS):
        flag = flags.FLAGS[name]
        if not isinstance(flag.parser, ConfigFileFlagParser):
            continue
        value = _flag_value(argv, name) or getattr(flag, "default_unparsed", None)
        path = (value or "").split(":", 1)[0]
        if value is not None and not os.path.isfile(path):
            where = "" if os.path.isabs(path) else f" (relative to the current directory {os.getcwd()})"
            fail(f"--{name}={value}: config file {path!r} not found{where}")


def _config_error(e: BaseException) -> ConfigError | None:
    """The innermost ConfigError behind `e`, if any.

    ml_collections re-raises an error of a config file's `get_config` with the whole traceback in its
    message, and absl wraps that again: the innermost one holds the message meant for the user.
    """
    found = None
    while e is not None:
        found = e if isinstance(e, ConfigError) else found
        e = e.__cause__ or e.__context__
    return found


def _parse_flags(argv):
    _check_config_files(argv)
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        fail(_config_error(e) or e)
    except (AttributeError, KeyError) as e:  # ml_collections: an override of a field the config lacks
        while e.args and isinstance(e.args[0], BaseException):  # its KeyError, wrapped
            e = e.args[0]
        overrides = [a.split("=")[0] for a in argv[1:] if a.startswith("--config.")]
        fail(f"no such config field {e.args[0] if e.args else e} (overrides given: {', '.join(overrides)})")


def run(main) -> None:
    """`absl.app.run(main)` with bad flags, missing config files and `ConfigError` turned into exit 2."""

    def guarded(argv):
        try:
            return main(argv)
        except ConfigError as e:
            fail(e)
        except RunStopped as e:
            fail(e, e.exit_status, prefix="stopped")

    app.run(guarded, flags_parser=_parse_flags)
