"""Sweeps of image runs: each cell (one config) trained in its own sub-workdir, the seeds of a cell
vmapped where they fit, the spread of the cells' accuracies and the gap between two sets of cells (JSL22's
sweeps, Figures 5-7, are `posattn.papers.jsl22.permuted` and `attention_comparison`).

Each cell is an ordinary `posattn.vision.train.train_and_evaluate` run, so a sweep interrupted anywhere
resumes: a finished cell of the same config is read back from its `summary.json`, one with a checkpoint
continues from it.
"""

import json

import numpy as np
from etils import epath

from posattn import run_record
from posattn.analysis import bootstrap
from posattn.vision import device_memory, resume, seeds, train


def finished_summary(config, workdir: str) -> dict | None:
    """The summary.json of `workdir` if it holds `config` (its config.json to the last field) trained to
    its total_steps, else None."""
    # (epath: a cell's workdir may be on gs://, where os.path sees nothing)
    path, stored = epath.Path(workdir) / "summary.json", resume.read_record(workdir)
    if path.exists() and stored is not None:
        summary = json.loads(path.read_text())
        if summary.get("steps") == config.total_steps and not run_record.differing_fields(
            stored, run_record.as_json(config)
        ):
            return summary
    return None


def run_cell(config, workdir: str, say=print, *, dataset=None) -> dict:
    """The summary of `config` trained in `workdir`: read back if finished, trained (or resumed) if not.

    A summary is read back only when the workdir's config.json is `config` to the last field and the run
    reached its total_steps; otherwise training runs, and refuses (ConfigError) a workdir that holds a run
    of another config. `dataset` (one of your own arrays, named by config.dataset) as in `train.train`.
    """
    summary = finished_summary(config, workdir)
    if summary is not None:
        return summary
    say(f"== {workdir}")
    return train.train_and_evaluate(config, workdir, dataset=dataset)


def run_seeds(configs, workdirs, say=print, *, vmap: bool = True, dataset=None) -> list[dict]:
    """`run_cell` of every (config, workdir), for configs that differ only in the seed: the finished ones
    read back, the others (two or more) trained in one vmapped program (`seeds.train_seeds`) where it can
    run them, else one after another; `say` tells which path ran, and why it fell back (checkpoints of
    different steps, programs that do not fit the devices' memory, or ran out of it before their end: the
    separate runs resume from the checkpoints the seeds share). vmap=False: one after another.
    ConfigError unless each config has its own workdir and they differ only in the seed."""
    seeds.check_seed_configs(configs, workdirs)
    summaries = [finished_summary(c, w) for c, w in zip(configs, workdirs)]
    todo = [i for i, s in enumerate(summaries) if s is None]
    if vmap and len(todo) > 1:
        say(
            f"== {len(todo)} seeds in one vmapped program: {', '.join(str(workdirs[i]) for i in todo)}"
        )
        try:
            for i, s in zip(
                todo,
                seeds.train_seeds(
                    [configs[i] for i in todo], [workdirs[i] for i in todo], dataset=dataset
                ),
            ):
                summaries[i] = s
            return summaries
        except (seeds.NotVmapped, device_memory.OutOfMemory) as e:
            say(f"== separate runs instead: {e}")
    for i in todo:
        summaries[i] = run_cell(configs[i], workdirs[i], say, dataset=dataset)
    return summaries


def spread(values) -> dict:
    """Mean, standard deviation (ddof 1 when there are 2+ values), median, quartiles, min, max; in %."""
    v = 100.0 * np.asarray(values, dtype=np.float64)
    q1, med, q3 = np.percentile(v, [25, 50, 75])
    return {
        "values": v.round(4).tolist(),
        "n": int(v.size),
        "mean": float(v.mean()),
        "std": float(v.std(ddof=1)) if v.size > 1 else 0.0,
        "median": float(med),
        "q1": float(q1),
        "q3": float(q3),
        "iqr": float(q3 - q1),
        "min": float(v.min()),
        "max": float(v.max()),
    }


def gap(values_a, values_b) -> dict:
    """b - a in points (values are fractions): the difference of the means over seeds, its standard error
    sqrt(s_a^2 / n_a + s_b^2 / n_b) (sample variances; 0 with one value each) and the difference of
    the medians; with 2+ values each, the 95% intervals of the difference of the means over the seeds
    (Welch's t, "welch_95", and the bootstrap, "bootstrap_95")."""
    a, b = (100.0 * np.asarray(v, dtype=np.float64) for v in (values_a, values_b))
    var = sum(v.var(ddof=1) / v.size for v in (a, b) if v.size > 1)
    out = {
        "mean": float(b.mean() - a.mean()),
        "stderr": float(np.sqrt(var)),
        "median": float(np.median(b) - np.median(a)),
    }
    if min(a.size, b.size) > 1:  # 95% intervals over the seeds (bootstrap.difference_of_means)
        diff = bootstrap.difference_of_means(a, b)
        out.update(welch_95=list(diff["welch"]), bootstrap_95=list(diff["bootstrap"]))
    return out
