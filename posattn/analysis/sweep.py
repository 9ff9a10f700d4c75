"""Sweeps of image runs (JSL22 Figures 5-7, SPEC 2.2): load a `tpu_configs/` file, train one config per
(model, g, attention, seed) cell in its own sub-workdir, and gather the test accuracies.

Each cell is an ordinary `posattn.vision.train.train_and_evaluate` run, so a sweep interrupted anywhere
resumes: a finished cell of the same config is read back from its `summary.json`, one with a checkpoint
continues from it.
"""
import importlib.util
import json
import os
import pathlib

import numpy as np

from posattn.errors import ConfigError
from posattn.vision import config as config_lib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def load_config(path: str, arg: str | None = None):
    """`get_config(arg)` of a config file such as "tpu_configs/digits.py" (relative to the repo root)."""
    file = pathlib.Path(path)
    if not file.is_absolute() and not file.exists():
        file = ROOT / file
    if not file.is_file():
        raise ConfigError(f"config file {path} not found: use one of tpu_configs/*.py")
    spec = importlib.util.spec_from_file_location(file.stem, file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(arg)


def run_cell(config, workdir: str, say=print) -> dict:
    """The summary of `config` trained in `workdir`: read back if finished, trained (or resumed) if not.

    A summary is read back only when the workdir's config.json is `config` to the last field and the run
    reached its total_steps; otherwise training runs, and refuses (ConfigError) a workdir that holds a run
    of another config.
    """
    path, stored = os.path.join(workdir, "summary.json"), config_lib.read_record(workdir)
    if os.path.exists(path) and stored is not None:
        with open(path) as f:
            summary = json.load(f)
        if (summary.get("steps") == config.total_steps
                and not config_lib.differing_fields(stored, config_lib.record(config))):
            return summary
    from posattn.vision import train  # imported late: flags are parsed before jax starts

    say(f"== {workdir}")
    return train.train_and_evaluate(config, workdir)


def spread(values) -> dict:
    """Mean, standard deviation (ddof 1 when there are 2+ values), median, quartiles, min, max; in %."""
    v = 100.0 * np.asarray(values, dtype=np.float64)
    q1, med, q3 = np.percentile(v, [25, 50, 75])
    return {
        "values": v.round(4).tolist(), "n": int(v.size), "mean": float(v.mean()),
        "std": float(v.std(ddof=1)) if v.size > 1 else 0.0, "median": float(med),
        "q1": float(q1), "q3": float(q3), "iqr": float(q3 - q1), "min": float(v.min()),
        "max": float(v.max()),
    }


def write_json(path: str, obj) -> None:
    """Whole or not at all: a temporary file renamed into place."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def int_list(text: str, what: str) -> list[int]:
    """"2,4,8" -> [2, 4, 8]; ConfigError for anything that is not a list of positive integers."""
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    if not items or not all(t.isdigit() and int(t) > 0 for t in items):
        raise ConfigError(f"--{what}={text!r} must be a comma-separated list of positive integers")
    return [int(t) for t in items]
