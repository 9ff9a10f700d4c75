"""A run's record in its workdir, for every binary: written one way, read back one way.

- config.json, the run's config: the very record the binary claims its workdir with
  (`posattn.ownership.claim`), as plain JSON (`as_json`), written by `write_config` once the run's
  checks pass and read by `read_config`. The claim's marker (workdir.json) keeps a copy of it, so that a
  workdir whose config.json is lost or damaged still names the run it holds.
- run.json, what the run found rather than chose: the devices it ran on, and what its binary adds (an
  image run's dataset as read and augmentation as resolved: `posattn.vision.runs`); `write_run` and
  `read_run`.

Two records are compared field by field on dotted names (`dotted`, `differing_fields`). The metrics of a
run go through `posattn.metric_log`.
"""

import dataclasses
import json
import math

import jax
from etils import epath

from posattn import io
from posattn.errors import ConfigError, first_line

CONFIG_FILE = "config.json"
RUN_FILE = "run.json"
ABSENT = "(absent)"  # the value `differing_fields` shows for a field one record lacks


def as_json(config) -> dict:
    """`config` (an ml_collections.ConfigDict, a dict, a dataclass, nested) as the plain JSON object
    config.json and the marker hold: dicts, lists (tuples too), numbers, strings, None."""

    def plain(x):
        if hasattr(x, "to_json_best_effort"):
            return json.loads(x.to_json_best_effort())
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            return dataclasses.asdict(x)
        return str(x)

    return json.loads(json.dumps(io.jsonable(config), sort_keys=True, default=plain))


def dotted(tree: dict, prefix: str = "") -> dict:
    """A nested record flattened: {"optimizer": {"lr": 1}} -> {"optimizer.lr": 1}."""
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(dotted(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _same(a, b) -> bool:
    # NaN is a value a config can hold (a diverging learning rate) and compares unequal to itself
    return a == b or (
        isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
    )


def differing_fields(old: dict, new: dict) -> dict:
    """{dotted field: (old value, new value)} of the fields where two records differ, in order of name.

    A field present in only one record differs, with `ABSENT` ("(absent)") for the missing value.
    """
    a, b = dotted(old), dotted(new)
    return {
        k: (a.get(k, ABSENT), b.get(k, ABSENT))
        for k in sorted(a.keys() | b.keys())
        if not (k in a and k in b and _same(a[k], b[k]))
    }


def write_config(workdir, config) -> None:
    """Write `config` (`as_json`) as the workdir's config.json (process 0; whole or not at all)."""
    io.write_json(epath.Path(workdir) / CONFIG_FILE, as_json(config))


def read_config(workdir) -> dict | None:
    """The JSON object of `workdir`/config.json (None if there is none); ConfigError, naming the fault,
    if it is empty, cut short or not a JSON object, so that no reader of the run meets a traceback."""
    return _read(workdir, CONFIG_FILE, "config")


def write_run(workdir, facts: dict | None = None) -> None:
    """Write run.json: the devices the run had ("jax_devices": `jax.devices()`, every process's), and
    `facts`."""
    record = {"jax_devices": [str(d) for d in jax.devices()], **(facts or {})}
    io.write_json(epath.Path(workdir) / RUN_FILE, record)


def read_run(workdir) -> dict | None:
    """The JSON object of `workdir`/run.json (None if there is none: a run of an older version);
    ConfigError as in `read_config`."""
    return _read(workdir, RUN_FILE, "run record")


def _read(workdir, name: str, what: str) -> dict | None:
    path = epath.Path(workdir) / name
    try:
        if not path.exists():
            return None
        record = json.loads(path.read_text())
    except Exception as e:  # noqa: BLE001 - JSONDecodeError, UnicodeDecodeError, the file system's own
        raise ConfigError(
            f"--workdir={workdir}: its {name} is damaged ({type(e).__name__}: {first_line(e)}): "
            "restore it from a copy, or use a new --workdir"
        ) from e
    if not isinstance(record, dict):
        raise ConfigError(
            f"--workdir={workdir}: its {name} holds a {type(record).__name__}, not a {what}: "
            "restore it from a copy, or use a new --workdir"
        )
    return record
