"""Config schemas and config files: what a binary's `--config=FILE[:ARG]` means, for any code.

A config file imports only ml_collections and the standard library and returns the fields it changes;
`load_config` merges them onto a `Schema` (the library's fields, defaults and types). This module needs
only ml_collections, so the library's tools (presets, the image config, sweeps) load configs without the
command line: `posattn.cli` defines the flags and parses argv on top of it.
"""

import dataclasses
import difflib
import importlib.util
import json
import os
import pathlib
import traceback
import typing
from collections.abc import Callable

import ml_collections

from posattn.errors import ConfigError, first_line

# Where a relative config path such as "tpu_configs/digits.py" or "posattn/theory/presets.py" is looked
# for when the current directory does not hold it: the repository (a checkout or an editable install),
# and the installed package, where setup.py puts tpu_configs/ as posattn/tpu_configs/.
ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIG_ROOTS = (ROOT, ROOT / "posattn")


def find_config_file(path: str) -> str:
    """`path` if it exists from the current directory, else the same relative path under the repository
    or the installed package (`CONFIG_ROOTS`), so config files are found from any directory; `path`
    unchanged when none holds it (the caller reports it)."""
    if os.path.isabs(path) or os.path.exists(path):
        return path
    return next((str(root / path) for root in CONFIG_ROOTS if (root / path).is_file()), path)


SMOKE_TOKENS = ("quick",)  # the smoke run's token of every binary, its one spelling (`FILE:quick`)


@dataclasses.dataclass(frozen=True)
class Schema:
    """The fields a binary's config files build on.

    A config file imports only ml_collections and the standard library (big_vision's rule: reading a config
    never imports JAX, the models or the datasets, so any script can load one), and its `get_config(arg)`
    returns only the fields it changes. The library owns the rest: `base(fields)` gives every field with
    its default and type (it may read the file's own fields, e.g. the theory preset it names),
    `load_config` merges the file's fields onto it, refusing a field the schema lacks, and the values are
    validated where the library builds its dataclasses or resolves the run. `smoke(config)` shrinks a
    config in place to the binary's smoke run, asked for by the token `quick` (`--config=FILE:quick`),
    which never reaches the file; a file may add a `smoke` section of fields set after it.

    A file that changes no field (its binary's defaults) would fit any schema, so it says whose it is:
    `schema="KIND"`, checked against `kind` (a file of another kind is refused instead of running this
    binary's defaults).

    The schema is also where a field's default lives for a run recorded before the field existed:
    `complete` fills such a record in (`former_defaults` where the default has changed since).
    """

    name: str  # what the config is, for messages ("an image config (...)")
    base: Callable[[ml_collections.ConfigDict], ml_collections.ConfigDict]
    smoke: Callable[[ml_collections.ConfigDict], object] | None = None
    kind: str = ""  # what a config file names in `schema` to say it is this schema's
    # {dotted field: the value a run recorded before the field existed ran with}, for the fields whose
    # default has changed since they joined the schema (the others joined with a default that keeps
    # the former behaviour)
    former_defaults: typing.Mapping[str, object] = dataclasses.field(default_factory=dict)

    def complete(self, recorded: dict) -> dict:
        """A run's recorded config (the JSON object of its config.json or its marker) with every field of
        the schema it lacks (a run of an older version), at the value it was trained with: that of
        `former_defaults`, else the schema's default (`base` of the record's own fields, e.g. the theory
        preset it names); sections included. The one place an older record is filled in. A new dict;
        `recorded` is unchanged."""

        def fill(record: dict, base: dict, prefix: str) -> dict:
            out = dict(record)
            for key, default in base.items():
                if key not in out:
                    out[key] = self.former_defaults.get(f"{prefix}{key}", default)
                elif isinstance(default, dict) and isinstance(out[key], dict):
                    out[key] = fill(out[key], default, f"{prefix}{key}.")
            return out

        # (to_json_best_effort: the record's own shape, JSON lists for the tuple fields)
        return fill(recorded, json.loads(self.base(recorded).to_json_best_effort()), "")


def is_smoke(arg: str | None) -> bool:
    """Whether a config file's argument (FILE:ARG) holds the smoke token."""
    return any(t.strip() in SMOKE_TOKENS for t in (arg or "").split(","))


def load_config(path: str, arg: str | None, schema: Schema) -> ml_collections.ConfigDict:
    """The config of a config file such as "tpu_configs/digits.py" (`find_config_file`) with its argument
    (FILE:ARG; None without a colon), merged onto `schema`: `get_config(arg)` without the smoke token
    (`get_config()` when no other token is left, as ml_collections calls it), the fields it returns merged
    onto `schema.base`, then `schema.smoke` and the file's `smoke` section if `quick` was given.
    ConfigError, in one line naming the file, for a file that is missing, does not compile, raises while
    it loads or in get_config, defines no get_config, returns no ml_collections.ConfigDict, names
    another schema's kind in `schema`, or sets a field the schema lacks or a value of the wrong type."""
    tokens = [t.strip() for t in (arg or "").split(",") if t.strip()]
    quick = is_smoke(arg)
    fields = _config_file_fields(path, ",".join(t for t in tokens if t not in SMOKE_TOKENS) or None)
    smoke, kind = (
        fields.get(k) for k in ("smoke", "schema")
    )  # (no schema has fields of these names)
    for key in ("smoke", "schema"):
        if key in fields:
            del fields[key]
    if kind is not None and kind != schema.kind:
        raise ConfigError(
            f"config file {path} is a {kind} config, not {schema.name}: give this binary one of "
            "its own config files (its --help names the default)"
        )
    config = schema.base(fields)
    _merge(config, fields, f"config file {path}", schema.name)
    if quick:
        if schema.smoke is None:
            raise ConfigError(f"--config={path}:{arg}: this binary has no `quick` smoke run")
        schema.smoke(config)
        _merge(config, smoke or {}, f"config file {path} (its smoke section)", schema.name)
    return config


def _merge(
    config: ml_collections.ConfigDict, fields, where: str, schema: str, prefix: str = ""
) -> None:
    """Set `fields` (nested) in `config`, in place; ConfigError for a field `config` lacks or a value of
    another type than its field's."""
    for key, value in fields.items():
        if key not in config:
            close = difflib.get_close_matches(key, list(config.keys()), 1)
            hint = (
                f"; did you mean {prefix}{close[0]}?"
                if close
                else f" (its fields: {', '.join(config.keys())})"
            )
            raise ConfigError(f"{where}: {prefix}{key} is not a field of {schema}{hint}")
        if isinstance(config[key], ml_collections.ConfigDict) and isinstance(
            value, (dict, ml_collections.ConfigDict)
        ):
            _merge(config[key], value, where, schema, f"{prefix}{key}.")
            continue
        try:
            config[key] = value
        except TypeError as e:
            raise ConfigError(
                f"{where}: {prefix}{key}={value!r}: {' '.join(str(e).split())}"
            ) from e


def _config_file_fields(path: str, arg: str | None) -> ml_collections.ConfigDict:
    """`get_config(arg)` (`get_config()` when arg is None) of a config file, checked (`load_config`)."""
    file = pathlib.Path(find_config_file(path))
    if not file.is_file():
        raise ConfigError(f"config file {path} not found: use one of tpu_configs/*.py")
    call = "get_config()" if arg is None else f"get_config({arg!r})"
    spec = importlib.util.spec_from_file_location(file.stem, file)
    module = importlib.util.module_from_spec(spec)
    _config_file_step(file, path, "loading it", lambda: spec.loader.exec_module(module))
    if not callable(getattr(module, "get_config", None)):
        raise ConfigError(
            f"config file {path} defines no get_config(arg): a config file returns its "
            "ml_collections.ConfigDict from get_config (e.g. tpu_configs/digits.py)"
        )
    config = _config_file_step(
        file, path, call, lambda: module.get_config() if arg is None else module.get_config(arg)
    )
    if not isinstance(config, ml_collections.ConfigDict):
        raise ConfigError(
            f"config file {path}: {call} returned {type(config).__name__}, not an "
            "ml_collections.ConfigDict: end get_config with `return config`"
        )
    return config


def dataclass_section(instance) -> ml_collections.ConfigDict:
    """A dataclass's fields as a section of a schema; a field left None keeps its type (a placeholder), so
    that `--config.SECTION.FIELD=VALUE` still type-checks."""
    fields = {}
    for field in dataclasses.fields(instance):
        value = getattr(instance, field.name)
        if value is None:
            value = ml_collections.config_dict.placeholder(
                next(t for t in typing.get_args(field.type) if t is not type(None))
            )
        fields[field.name] = value
    return ml_collections.ConfigDict(fields)


def config_fields(config: ml_collections.ConfigDict, prefix: str = "") -> list[str]:
    """`FIELD=VALUE` of every field of `config`, dotted into its sections (as --config.FIELD sets it)."""
    lines = []
    for key, value in config.items():
        if isinstance(value, ml_collections.ConfigDict):
            lines += config_fields(value, f"{prefix}{key}.")
        else:
            lines.append(f"{prefix}{key}={value!r}")
    return lines


def _config_file_step(file: pathlib.Path, path: str, what: str, step):
    """`step()`, with whatever the config file's own code raises (a ConfigError aside) as a ConfigError
    naming the file, its line and `what` was running."""
    try:
        return step()
    except ConfigError:
        raise
    except SyntaxError as e:
        raise ConfigError(
            f"config file {path}, line {e.lineno}: {e.msg} (it does not compile)"
        ) from e
    except Exception as e:  # noqa: BLE001 - whatever the file's code raises, it is the file's fault
        lines = [f.lineno for f in traceback.extract_tb(e.__traceback__) if f.filename == str(file)]
        where = f", line {lines[-1]}" if lines else ""
        first = first_line(e)
        raise ConfigError(
            f"config file {path}{where}: {what} raised {type(e).__name__}: {first}"
        ) from e
