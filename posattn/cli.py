"""Entry-point plumbing shared by the absl binaries in `experiments/`.

Bad input (a flag that does not parse; a config file that does not exist, does not compile, raises,
has no get_config or returns no ConfigDict; a `ConfigError` raised while loading or validating a config
or claiming the workdir; running out of memory) ends the program with one line on stderr and exit
status 2, never a traceback; a `RunStopped` (a run that saved its work and stopped early, e.g. on
SIGTERM) ends with one line and its own exit status, and so do SIGINT (130) and SIGTERM (143) at any
other moment (`posattn.signals`); anything else is a bug and keeps its traceback. The workdir's marker
records how the run ended.

Every binary takes one ml_collections config file, `--config=FILE[:ARG]` (`define_config`: a default
file, `--config.FIELD=VALUE` overrides, the smoke run `:quick`), which states only the fields it
changes and imports only ml_collections; `load_config` merges it onto the binary's `Schema`. A smoke
run compiles every program at LLVM level 1 (`compile_options.fast_compile_everywhere`). --help lists the
config's fields with the values its file gives them (`config_fields`); `--dry_run` makes every check a run
makes, prints the resolved config and exits 0 where the run would claim its workdir (`claim`), so nothing
is written or compiled.
"""

import os
import sys

import jax
from absl import app, flags, logging
from ml_collections import config_flags
from ml_collections.config_flags.config_flags import ConfigFileFlagParser

from posattn import compile_options, mesh, ownership, signals

# the config schemas and their loading, which need only ml_collections (library modules import them from
# posattn.configs; they stay reachable here as the binaries and users spell them)
from posattn.configs import (
    CONFIG_ROOTS,
    ROOT,
    Schema,
    config_fields,  # noqa: F401
    dataclass_section,
    find_config_file,
    is_smoke,
    load_config,
)
from posattn.errors import ConfigError, first_line
from posattn.signals import RunStopped

flags.DEFINE_string(
    "compilation_cache",
    None,
    f"JAX's persistent compilation cache: a directory, or 'off'. Default: ${compile_options.CACHE_ENV}, "
    f"else $JAX_COMPILATION_CACHE_DIR, else ~/.cache/posattn/jax (per user)",
)
_DRY_RUN = flags.DEFINE_bool(
    "dry_run",
    False,
    "Check the command as a run would (the config file, :ARG, --config.FIELD overrides, "
    "the binary's checks, the workdir's), print the resolved config as JSON and exit 0 before the run claims "
    "its workdir: nothing is written, nothing compiled",
)


_DISTRIBUTED_FLAGS = ("coordinator_address", "num_processes", "process_id")


def define_distributed_flags() -> None:
    """Define --coordinator_address, --num_processes and --process_id, `jax.distributed.initialize`'s own
    arguments for clusters it does not detect (docs/distributed.md); `run` starts this process of the run
    from them (`posattn.mesh.initialize_distributed`) before it calls the binary's main."""
    flags.DEFINE_string(
        "coordinator_address",
        None,
        "Multi-process run without a cluster JAX "
        "detects: host:port of process 0 (or set JAX_COORDINATOR_ADDRESS).",
    )
    flags.DEFINE_integer(
        "num_processes",
        None,
        "Multi-process run without a detected cluster: the number of processes.",
    )
    flags.DEFINE_integer(
        "process_id",
        None,
        "Multi-process run without a detected cluster: this process's index, from 0.",
    )


def define_workdir(help_text: str):
    """Define the binary's `--workdir=DIR`, where it writes (`run` requires it); returns its FlagHolder."""
    return flags.DEFINE_string("workdir", None, help_text)


class _SchemaFileParser(ConfigFileFlagParser):
    """ml_collections' config-file flag parser, loading FILE[:ARG] with `load_config` onto a schema."""

    def __init__(self, name: str, schema: Schema, default: str, help_text: str):
        super().__init__(name)
        self.schema, self.default, self.help = (
            schema,
            default,
            help_text,
        )  # (the flag's, without its fields)

    def parse(self, path):
        file, colon, arg = path.partition(":")
        config = load_config(file, arg if colon else None, self.schema)
        config.lock()
        return config


def define_config(default: str, schema: Schema, help_text: str):
    """Define the binary's `--config=FILE[:ARG]` flag (ml_collections' config file, `--config.FIELD=VALUE`
    overrides) with `default` (a path `find_config_file` finds from any directory) when none is given, its
    files merged onto `schema` (`load_config`); returns its FlagHolder. Only `run` reads the default, so a
    bad override of it still ends in one line."""
    help_text = (
        f"{help_text}: FILE[:ARG] (default {default}; ARG `quick`: the smoke run), its fields "
        "overridden by --config.FIELD=VALUE"
    )
    holder = config_flags.DEFINE_config_file("config", None, help_text)
    flags.FLAGS["config"].parser = _SchemaFileParser("config", schema, default, help_text)
    return holder


def config_file() -> str:
    """The --config of this run as given (FILE[:ARG], the file found by `find_config_file`)."""
    return flags.FLAGS["config"].config_filename


def claim(workdir, binary: str, record, **options):
    """`ownership.claim(workdir, binary, record, **options)`: where a binary, its checks done, starts its
    work. Under --dry_run instead `ownership.check_claim` (it reads the workdir and changes nothing, so a workdir
    the run would refuse is refused now, in one line) and `end_dry_run`."""
    if _DRY_RUN.value:
        ownership.check_claim(workdir, binary, record, **options)
        end_dry_run()
    return ownership.claim(workdir, binary, record, **options)


def end_dry_run() -> None:
    """Under --dry_run, print the resolved config of --config (every field, as JSON, the way workdir.json
    records a config) and exit 0; nothing otherwise. Binaries call it through `claim`, after every check
    a run makes and before anything is written or compiled."""
    if _DRY_RUN.value:
        print(flags.FLAGS["config"].value.to_json_best_effort(indent=2, sort_keys=True), flush=True)
        sys.exit(0)


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


def _replace_flag_value(argv: list[str], name: str, value: str) -> None:
    """Set the last value argv gives flag `name` (as `_flag_value` reads it) to `value`, in place; a
    flag given only by its default is added."""
    last = None
    for i, arg in enumerate(argv[1:], 1):
        if arg == "--":
            break
        if arg.startswith("-") and arg.lstrip("-").partition("=")[0] == name:
            last = i
    if last is None:
        argv.insert(1, f"--{name}={value}")
    elif "=" in argv[last]:
        argv[last] = f"--{name}={value}"
    else:
        argv[last + 1] = value


def _resolve_config_files(argv) -> list[str]:
    """argv with every ml_collections config-file flag's FILE (of FILE[:ARG]) found by
    `find_config_file`; fail unless each exists. A smoke run (`quick`) turns on
    `compile_options.fast_compile_everywhere` here, before JAX starts its backends.

    ml_collections keeps a missing file as a placeholder that raises only when the config is first
    used (or, with `--config.FIELD` overrides, while the flags parse), with a traceback either way.
    """
    argv = list(argv)
    for name in list(flags.FLAGS):
        flag = flags.FLAGS[name]
        if not isinstance(flag.parser, _SchemaFileParser):
            continue
        value = _flag_value(argv, name) or flag.parser.default
        path, colon, arg = value.partition(":")
        if is_smoke(arg):  # before JAX starts its backends: a smoke run's programs run briefly
            compile_options.fast_compile_everywhere()
        found = find_config_file(path)
        if not os.path.isfile(found):
            where = (
                "" if os.path.isabs(path) else f" (relative to the current directory {os.getcwd()})"
            )
            fail(f"--{name}={value}: config file {path!r} not found{where}")
        try:  # here, in one line, rather than as ml_collections' traceback while the flags parse
            config = load_config(found, arg if colon else None, flag.parser.schema)
        except ConfigError as e:
            fail(e)
        # --help lists the fields this config file gives (its defaults, before --config.FIELD overrides)
        flag.help = (
            f"{flag.parser.help}\nIts fields, as --config={value} gives them (set one with "
            f"--config.FIELD=VALUE):\n" + "\n".join(config_fields(config))
        )
        _replace_flag_value(
            argv, name, f"{found}{colon}{arg}"
        )  # also the default, if it was not given
    return argv


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
    argv = _resolve_config_files(argv)
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        fail(_config_error(e) or e)
    except (
        AttributeError,
        KeyError,
    ) as e:  # ml_collections: an override of a field the config lacks
        while e.args and isinstance(e.args[0], BaseException):  # its KeyError, wrapped
            e = e.args[0]
        overrides = [a.split("=")[0] for a in argv[1:] if a.startswith("--config.")]
        fail(
            f"no such config field {e.args[0] if e.args else e} (overrides given: {', '.join(overrides)})"
        )


def _outcome(e: BaseException) -> tuple[str, int, str, str] | None:
    """How a binary that raised `e` ends: (marker status, exit status, prefix, one-line message), or
    None for a bug (its traceback is kept)."""
    if isinstance(e, ConfigError):
        return ownership.FAILED, 2, "error", str(e)
    if isinstance(e, RunStopped):
        return ownership.INTERRUPTED, e.exit_status, "stopped", str(e)
    text = str(e)
    if isinstance(e, MemoryError) or (
        isinstance(e, jax.errors.JaxRuntimeError)
        and ("RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower())
    ):
        first = first_line(e, type(e).__name__)
        return (
            ownership.FAILED,
            2,
            "error",
            f"out of memory ({first}): choose smaller sizes (batch, samples "
            "N, model) or a device with more memory",
        )
    return None


def _start(argv, cpu_cores: bool):
    """The binary's flags as its main takes them, `(config, workdir)`, once the checks every binary makes
    have passed: no positional argument, a --workdir given; library logs quiet unless --verbosity is given
    (orbax logs every save); with `cpu_cores` one CPU device per core (`compile_options.use_cpu_cores`); with the
    distributed flags defined, this process of a multi-process run started (`mesh.initialize_distributed`).
    The last two come before JAX starts its backends, and so before main."""
    if len(argv) > 1:
        raise ConfigError(f"unexpected arguments {argv[1:]}: pass everything as --flags")
    if flags.FLAGS.workdir is None:
        raise ConfigError("--workdir=DIR is required")
    if not flags.FLAGS["verbosity"].present:  # --verbosity=0 shows them
        logging.set_verbosity(logging.ERROR)
    if cpu_cores:
        compile_options.use_cpu_cores()
    if _DISTRIBUTED_FLAGS[0] in flags.FLAGS:
        mesh.initialize_distributed(*(flags.FLAGS[name].value for name in _DISTRIBUTED_FLAGS))
    config = flags.FLAGS["config"].value if "config" in flags.FLAGS else None
    return config, flags.FLAGS.workdir


def run(main, *, cpu_cores: bool = False) -> None:
    """Run a binary: `main(config, workdir)` with its --config and --workdir (`define_config`,
    `define_workdir`), once `_start` has made the checks every binary makes, under `absl.app.run` with bad
    flags, missing or broken config files, `ConfigError` and running out of memory turned into one line and
    exit 2, a `RunStopped` into its line and exit status, SIGINT and SIGTERM into one line and 130 or 143
    (`signals.install`, a no-op where the binaries' package already made it); the claimed workdir's marker
    records how the run ended. JAX's persistent compilation cache is on (`compile_options.enable_compilation_cache`,
    `--compilation_cache`). `cpu_cores`: one CPU device per core (`compile_options.use_cpu_cores`), for the theory
    regime's binaries."""
    signals.install()
    # --help lists the flags the binary defines and those defined for it here (--config, the distributed
    # flags), also when it runs as a console script, whose main module is not the binary's
    main_module = sys.argv[0] if main.__module__ == "__main__" else main.__module__
    for module in {main_module, __name__}:
        for flag in flags.FLAGS.get_key_flags_for_module(module) + flags.FLAGS.get_flags_for_module(
            module
        ):
            flags.FLAGS.register_key_flag_for_module(sys.argv[0], flag)
    for name in ("config", "workdir"):
        if name in flags.FLAGS:
            flags.FLAGS.register_key_flag_for_module(sys.argv[0], flags.FLAGS[name])

    def guarded(argv):
        compile_options.enable_compilation_cache(flags.FLAGS.compilation_cache)
        try:
            main(*_start(argv, cpu_cores))
        except SystemExit as e:
            ownership.release(ownership.COMPLETE if not e.code else ownership.FAILED)
            raise
        except BaseException as e:
            outcome = _outcome(e)
            if outcome is None:  # a bug: recorded, and its traceback kept
                ownership.release(ownership.FAILED, f"{type(e).__name__}: {e}")
                raise
            status, exit_status, prefix, message = outcome
            ownership.release(status, message)
            fail(message, exit_status, prefix=prefix)
        ownership.release(ownership.COMPLETE)

    app.run(guarded, flags_parser=_parse_flags)


def run_tool(main) -> None:
    """Run a tool binary that writes no run (`experiments.TOOLS`, e.g. prepare_images): `main()` with
    its own absl flags, under `absl.app.run`, a flag that does not parse, a positional argument or a
    `ConfigError` ending in one line on stderr and exit 2 (as `run`'s binaries), SIGINT and SIGTERM in
    one line and 130 or 143 (`signals.install`)."""
    signals.install()

    def guarded(argv):
        try:
            if len(argv) > 1:
                raise ConfigError(f"unexpected arguments {argv[1:]}: pass everything as --flags")
            main()
        except ConfigError as e:
            fail(e)

    app.run(guarded, flags_parser=_parse_flags)
