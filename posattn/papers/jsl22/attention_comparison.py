"""Vanilla against positional attention over seeds, JSL22 Figures 6 and 7 (`experiments/compare_attention.py`):
its config (an image config and the seeds), one cell per (attention, seed), and the driver that trains
them and writes the summary beside the paper's numbers.
"""

import copy
import os

import jax
import ml_collections

from posattn import configs, io
from posattn.analysis import bootstrap
from posattn.errors import ConfigError
from posattn.papers.jsl22 import image_tables, published
from posattn.plots import save_png
from posattn.plots import vision as plots
from posattn.vision import config as config_lib
from posattn.vision import resume, setup, sharding, sweep

ATTENTIONS = ("vanilla", "positional")
# Figure 7's claim as docs/image_results.md fixed it before its runs: positional attention is comparable
# with vanilla attention, the gap positional - vanilla within this many points of accuracy.
COMPARABLE_WITHIN = 1.0
# The paper's numbers (Figures 6 and 7), each beside the config file that runs its dataset here.
CONFIG_FILES = {
    "cifar10": "tpu_configs/cifar10.py",
    "cifar100": "tpu_configs/cifar100.py",
    "svhn_cropped": "tpu_configs/svhn.py",
    "imagenet2012": "tpu_configs/imagenet.py",
}
PAPER = {
    name: {**ref, "config": CONFIG_FILES[name]}
    for name, ref in published.ATTENTION_ACCURACY.items()
}


def _schema(fields) -> ml_collections.ConfigDict:
    """The image config of every cell (posattn.vision.config) and the comparison's own fields."""
    c = config_lib.base_config()
    c.seeds = 10  # seeds 0..N-1 per attention kind
    # train the seeds of an attention kind in one vmapped program where they fit in memory (else, or
    # with False, one after another)
    c.vmap_seeds = True
    return c


OWN_FIELDS = ("seeds", "vmap_seeds")  # not the cells': each cell is a train_images config
# an image config file (tpu_configs/) with the comparison's fields; `:quick` shrinks every cell
SCHEMA = configs.Schema(
    "a compare_attention config (an image config, seeds and vmap_seeds)",
    _schema,
    config_lib.SCHEMA.smoke,
)


def attention_cell_configs(base, seeds: int, attentions=("vanilla", "positional")) -> dict:
    """{(attention, seed): config}: a ViT config with model.attention and seed set (Figures 6/7)."""
    config_lib.check_schema(base)
    if base.model.name != "vit":
        raise ConfigError(
            f"model.name={base.model.name!r}: compare_attention compares ViTs; use a ViT config"
        )
    out = {}
    for attention in attentions:
        for seed in range(seeds):
            c = copy.deepcopy(base)
            c.model.attention, c.seed = attention, seed
            out[(attention, seed)] = c
    return out


def comparable_verdict(gap: dict, within: float = COMPARABLE_WITHIN) -> str | None:
    """Figure 7's verdict on `gap` (`sweep.gap`, positional - vanilla in points), by the criterion of
    docs/image_results.md: "reproduced" where its Welch and bootstrap 95% intervals both lie inside
    [-within, +within]; "not reproduced" where both lie wholly outside it on one side; else "not
    decidable"; each followed by the reason (the side, for not reproduced). None without intervals
    (one seed a kind)."""
    if "welch_95" not in gap:
        return None
    intervals = (gap["welch_95"], gap["bootstrap_95"])
    # the sign both intervals agree on, relative to +within and to -within
    above = bootstrap.agreed_sign(*((lo - within, hi - within) for lo, hi in intervals))
    below = bootstrap.agreed_sign(*((lo + within, hi + within) for lo, hi in intervals))
    band = f"[-{within:g}, +{within:g}]"
    if above == -1 and below == 1:
        return f"reproduced: both intervals inside {band}"
    if above == 1:
        return f"not reproduced: both intervals above {band} (positional better)"
    if below == -1:
        return f"not reproduced: both intervals below {band} (positional worse)"
    return f"not decidable: the intervals are neither both inside {band} nor both outside it on one side"


def _completed(record: dict) -> dict:
    """A comparison's recorded config with its image config completed (`config_lib.SCHEMA.complete`);
    a record of another shape as it is (it then differs, and the claim refuses it)."""
    if not isinstance(record.get("config"), dict):
        return record
    return {**record, "config": config_lib.SCHEMA.complete(record["config"])}


def run(config, workdir: str, claim) -> None:
    """Check `config` (SCHEMA) and every cell's config, `claim(workdir, "compare_attention", ...)` (the
    binary's `cli.claim`), train the seeds of each attention kind (vmapped where they fit, unless
    config.vmap_seeds is off) and write summary.json, compare.png and summary.md into `workdir`."""
    if config.seeds < 1:
        raise ConfigError(f"seeds={config.seeds} must be at least 1")
    base = copy.deepcopy(config)  # every cell's image config
    with base.unlocked():
        for field in OWN_FIELDS:
            del base[field]
    cells = attention_cell_configs(base, config.seeds, ATTENTIONS)
    # every cell's batch divides by this run's devices; the cells differ only in attention and seed, so
    # they evaluate the same splits (the test set's, unless the config reads no test image)
    splits = [
        setup.resolve(c, sharding.batch_shards_of(c.mesh, jax.device_count()))
        for c in cells.values()
    ][-1].eval_splits
    # its own (its cells resume), writable and locked, before any training
    # A workdir of an older version (its record lacks fields added since) resumes with them at the values
    # it trained with (`SCHEMA.complete`); what a resumed image run may change (resume.RESUMABLE, e.g.
    # evaluate_test for the finals' one read of the test set) it may change here too, and seeds may
    # grow: every seed is a run of its own.
    claim(
        workdir,
        "compare_attention",
        {"config": base, "seeds": config.seeds},
        resumes=True,
        may_change=("seeds", *(f"config.{field}" for field in resume.RESUMABLE)),
        complete=_completed,
    )
    runs = {}
    for (
        attention
    ) in ATTENTIONS:  # its seeds in one vmapped program where they fit (sweep.run_seeds)
        pairs = [
            (c, os.path.join(workdir, f"{a}-seed{seed}"))
            for (a, seed), c in cells.items()
            if a == attention
        ]
        runs[attention] = sweep.run_seeds(*zip(*pairs), vmap=config.vmap_seeds)
    acc = {
        split: {a: [s[f"{split}_accuracy"] for s in runs[a]] for a in ATTENTIONS}
        for split in splits
    }
    split = splits[-1]
    gap = sweep.gap(acc[split]["vanilla"], acc[split]["positional"])
    summary = {
        "dataset": base.dataset,
        "variant": base.model.variant,
        "patch_size": base.model.patch_size,
        "steps": base.total_steps,
        "batch": base.global_batch_size,
        "seeds": config.seeds,
        "split": split,
        "accuracy": {a: sweep.spread(v) for a, v in acc[split].items()},
        "paper": PAPER,
        "gap": gap,
        "verdict": comparable_verdict(gap),
        **(
            {"validation": {a: sweep.spread(v) for a, v in acc["validation"].items()}}
            if split != "validation" and "validation" in acc
            else {}
        ),
    }
    io.write_json(os.path.join(workdir, "summary.json"), summary)
    save_png(plots.compare_figure(summary), os.path.join(workdir, "compare.png"))
    table = image_tables.compare_table(summary)
    io.write_text(os.path.join(workdir, "summary.md"), table + "\n")
    print(table)
