"""Entry-point plumbing shared by the absl binaries in `experiments/`.

Bad input (a flag that does not parse, a `ConfigError` raised while validating a config) ends the
program with one line on stderr and exit status 2, never a traceback; anything else is a bug and keeps
its traceback.
"""
import sys

from absl import app, flags

from posattn.errors import ConfigError


def fail(message: str) -> None:
    """Print `error: message` on one line and exit with status 2."""
    sys.stderr.write(f"error: {' '.join(str(message).split())}\n")
    sys.exit(2)


def _parse_flags(argv):
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        fail(e)
    except (AttributeError, KeyError) as e:  # ml_collections: an override of a field the config lacks
        while e.args and isinstance(e.args[0], BaseException):  # its KeyError, wrapped
            e = e.args[0]
        overrides = [a.split("=")[0] for a in argv[1:] if a.startswith("--config.")]
        fail(f"no such config field {e.args[0] if e.args else e} (overrides given: {', '.join(overrides)})")


def run(main) -> None:
    """`absl.app.run(main)` with bad flags and `ConfigError` turned into exit status 2."""

    def guarded(argv):
        try:
            return main(argv)
        except ConfigError as e:
            fail(e)

    app.run(guarded, flags_parser=_parse_flags)
