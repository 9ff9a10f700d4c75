"""LWLC23's deeper-ViT experiment on real images, one cell at a time: train the ViT of `posattn.vision`
on the token grids "<family>/R" (`posattn.vision.data.token_grid`: "digit_grid/R" of the digits,
"fashion_grid/R" of Fashion-MNIST) through the image regime's own train loop, from scratch or from the
paper's pre-trained initial model, then measure on the test grids its attention on relevant slots and
its accuracy after attention-based pruning (`posattn.analysis.slot_attention`).

The pre-trained start (docs/decisions.md, "Composite grids (LWLC23's deeper ViT)"): the same ViT is first
trained to classify single items of the family's base dataset (all its classes; one item is one token),
and a cell starts from its parameters (`posattn.vision.warm_start`: P spread over the 9 slots, a fresh
2-class head).
"""

from __future__ import annotations

import os

import ml_collections

from posattn import configs
from posattn.analysis import slot_attention
from posattn.errors import ConfigError, check_seed
from posattn.vision import config as config_lib
from posattn.vision import runs, sweep
from posattn.vision.data import datasets, token_grid
from posattn.vision.models.attention import ATTENTIONS
from posattn.vision.setup import resolve
from posattn.vision.state import model_variables

STARTS = (
    "scratch",
    "pretrained",
)  # a cell's initial model: fresh, or pre-trained on the base's items


def _set_steps(c: ml_collections.ConfigDict, steps: int) -> None:
    """`steps` training steps; the warm-up and the log interval shrink with them."""
    c.total_steps = steps
    c.optimizer.warmup_steps = min(c.optimizer.warmup_steps, max(steps // 8, 1))
    c.log_every = min(c.log_every, steps)


def _schema(fields) -> ml_collections.ConfigDict:
    """The image config of every cell (posattn.vision.config) and the experiment's own `grid` section."""
    c = config_lib.base_config()
    c.grid = ml_collections.ConfigDict(
        {
            "family": "digit_grid",  # the token-grid dataset family (posattn.vision.data.datasets)
            "Rs": tuple(token_grid.R_VALUES),  # label-relevant slots R (alpha_* = R/9)
            "attentions": "vanilla,positional",  # attention kinds to train, comma-separated
            "starts": "scratch",  # initial models, comma-separated: scratch, pretrained
            "seeds": (0,),  # config.seed of each run: its initialisation and batch order
            "steps": 0,  # training steps of every cell (0: the config's total_steps; the warm-up shrinks with it)
            "pretrain_steps": 0,  # steps of pre-training on the base's single items (a "pretrained" start needs them)
            "max_pruned": 4,  # pruning: remove k = 0..max_pruned slots per test grid
            "seed": 0,  # seed of the random-pruning baseline
        }
    )
    return c


def _smoke(c):
    """R = 5 and 9, 60 steps, at most 20 of pre-training (and the config file's `smoke` section:
    tpu_configs/token_grid.py's test ViTs)."""
    c.grid.Rs, c.grid.steps = (5, 9), 60
    c.grid.pretrain_steps = min(c.grid.pretrain_steps, 20)


# experiments.token_grid's config: an image config (every cell's) and the grid section
SCHEMA = configs.Schema(
    "a token-grid config (an image config and grid.*)", _schema, _smoke, "token_grid"
)


def _names(text: str, allowed, field: str) -> list[str]:
    """The comma-separated names of `text`, each checked against `allowed`, in order, once each."""
    names = list(dict.fromkeys(k.strip() for k in text.split(",") if k.strip()))
    for name in names or [""]:
        if name not in allowed:
            raise ConfigError(
                f"grid.{field}: unknown {name!r}; use {', '.join(allowed)}, comma-separated"
            )
    return names


def _ints(values, field: str, example: str) -> list[int]:
    try:
        out = sorted({int(v) for v in values})
    except (TypeError, ValueError):
        out = []
    if not out:
        raise ConfigError(
            f"grid.{field}={values}: give integers, e.g. --config.grid.{field}={example}"
        )
    return out


def check_grid(grid) -> tuple[list[int], list[str], list[str], list[int], list[int]]:
    """(Rs, attention kinds, starts, seeds, pruned ks) of an experiment's grid section, or ConfigError."""
    Rs = _ints(grid.Rs, "Rs", "5,9")
    for R in Rs:
        token_grid.slot_counts(R)
    kinds = _names(grid.attentions, ATTENTIONS, "attentions")
    starts = _names(grid.starts, STARTS, "starts")
    seeds = _ints(grid.seeds, "seeds", "0,1,2")
    for s in seeds:
        check_seed(s, "grid.seeds")
    if not 0 <= grid.max_pruned < token_grid.SLOTS:
        raise ConfigError(
            f"grid.max_pruned={grid.max_pruned} must lie in [0, {token_grid.SLOTS - 1}]"
        )
    check_seed(grid.seed, "grid.seed")
    if grid.steps < 0:
        raise ConfigError(f"grid.steps={grid.steps} must be positive (0: the config's total_steps)")
    if "pretrained" in starts and grid.pretrain_steps < 1:
        raise ConfigError(
            f"grid.pretrain_steps={grid.pretrain_steps}: a pretrained start needs pre-training "
            "steps, e.g. --config.grid.pretrain_steps=940"
        )
    return Rs, kinds, starts, seeds, list(range(grid.max_pruned + 1))


def plan(base, grid, workdir: str, Rs, kinds, starts, seeds) -> tuple[dict, dict]:
    """The runs of an experiment in `workdir`: ({name: pre-training config}, {name: cell config}), the
    cells in the order they run: seed by seed (an interrupted experiment has whole curves), a pretrained
    cell's `init_from` the workdir of its (kind, seed)'s pre-training run."""
    pretrains, cells = {}, {}
    for seed in seeds:
        for kind in kinds:
            for start in starts:
                pre = pretrain_name(kind, seed) if start == "pretrained" else ""
                for R in Rs:
                    config = cell_config(
                        base,
                        family=grid.family,
                        R=R,
                        attention=kind,
                        seed=seed,
                        steps=grid.steps or None,
                        init_from=pre and os.path.join(workdir, pre),
                    )
                    if pre and pre not in pretrains:
                        pretrains[pre] = pretrain_config(config, grid.pretrain_steps)
                    cells[cell_name(R, kind, start, seed)] = config
    return pretrains, cells


def cell_config(
    base: ml_collections.ConfigDict,
    *,
    family: str,
    R: int,
    attention: str,
    seed: int = 0,
    steps: int | None = None,
    variant: str | None = None,
    pool: str | None = None,
    init_from: str = "",
) -> ml_collections.ConfigDict:
    """`base` (the tpu_configs/token_grid.py config) for dataset "<family>/R", one attention kind and one
    seed (the model's initialisation and the batch order; the grids are the family's); `steps`,
    `variant` and `pool` override the recipe's when given; `init_from` is the pre-trained run's workdir
    ("": from scratch)."""
    config_lib.check_schema(base)
    c = ml_collections.ConfigDict(base.to_dict())
    c.dataset = f"{family}/{R}"
    c.model.attention = attention
    c.seed = seed
    c.init_from = init_from
    if steps:
        _set_steps(c, steps)
    if variant:
        c.model.variant = variant
    if pool:
        c.model.pool = pool
    return c


def pretrain_config(cell: ml_collections.ConfigDict, steps: int) -> ml_collections.ConfigDict:
    """The pre-training run of `cell`'s initial model: the same ViT, seed and recipe, `steps` steps on the
    single items of the grids' base dataset (all its classes)."""
    family = datasets.family(cell.dataset)
    if not isinstance(family, token_grid.TokenGridFamily):
        raise ConfigError(
            f"{cell.dataset!r} is not a dataset of token grids: pre-training needs its base dataset"
        )
    if steps < 1:
        raise ConfigError(
            f"pre-training steps={steps}: give a positive number (grid.pretrain_steps)"
        )
    c = ml_collections.ConfigDict(cell.to_dict())
    c.dataset, c.init_from, c.image_size = family.base, "", 0
    _set_steps(c, steps)
    return c


def cell_name(R: int, attention: str, start: str = "scratch", seed: int = 0) -> str:
    """The cell's subdirectory of the experiment's workdir."""
    return f"{start}_{attention}_R{R}_s{seed}"


def pretrain_name(attention: str, seed: int) -> str:
    """The subdirectory of the pre-training run that the pre-trained cells of (attention, seed) start from."""
    return f"pretrain_{attention}_s{seed}"


def pretrain(config, workdir: str) -> dict:
    """Train the pre-training `config` in `workdir` (read back if finished, resumed if begun:
    `sweep.run_cell`): {"pretrain" (the workdir's name), "attention", "seed", "dataset", "steps",
    "test_accuracy" (on the base's test split), "seconds"}."""
    summary = sweep.run_cell(config, workdir, say=lambda _: None)
    return {
        "pretrain": os.path.basename(os.path.normpath(workdir)),
        "attention": config.model.attention,
        "seed": int(config.seed),
        "dataset": config.dataset,
        "steps": summary["steps"],
        "test_accuracy": summary["test_accuracy"],
        "seconds": summary["seconds"],
    }


def check_cell(config):
    """The resolved setup of a cell's config (`posattn.vision.setup.resolve`), or ConfigError, also
    for a ViT whose patch is not one slot of the grid."""
    setup = resolve(config)
    patch = setup.model.patch_size
    if setup.image_shape[0] != token_grid.SIDE * patch:
        raise ConfigError(
            f"the ViT's patch ({patch}) must be a slot's side ({setup.image_shape[0]} / "
            f"{token_grid.SIDE}) so that a token is a slot: pick the variant's patch accordingly"
        )
    return setup


def slot_grids(name: str, split: str, data_dir: str | None = None) -> token_grid.Grids:
    """The grids of `split` with their slot types, of the registered token-grid dataset `name` (e.g.
    "digit_grid/7"): what the image pipeline reads of it (`datasets.get`), plus each slot's type."""
    family = datasets.family(name)
    if not isinstance(family, token_grid.TokenGridFamily):
        raise ConfigError(
            f"{name!r} is not a dataset of token grids: use "
            f"{', '.join(f.names for f in datasets.FAMILIES.values())}"
        )
    return family.grids(name, split, datasets.get(family.base, data_dir=data_dir))


def run_cell(config, workdir: str, ks, *, seed: int = 0) -> dict:
    """Train `config` in `workdir` (read back if finished, resumed if begun: `sweep.run_cell`), then the
    slot metrics of its final checkpoint on the test grids: {"R", "alpha_star", "alpha_conf", "attention",
    "start", "seed", "test_accuracy", "train_accuracy", "seconds", "relevant_mass", "chance_mass",
    "accuracy_attention_pruned", ...} (see `slot_attention.evaluate`)."""
    setup = check_cell(config)
    # A finished cell keeps its own summary: resuming it at its last step would evaluate it again and
    # record no training accuracy (the curves average it).
    summary = sweep.run_cell(config, workdir, say=lambda _: None)
    state = runs.restore_state(workdir, setup.model, setup.image_shape, config)
    R = int(config.dataset.rpartition("/")[2])
    _, confusion, _ = token_grid.slot_counts(R)
    grids = slot_grids(config.dataset, "test", config.data_dir)
    inputs = setup.eval_inputs(grids.images_NxHxWxC)
    metrics = slot_attention.evaluate(
        setup.model,
        model_variables(state),
        inputs,
        grids.labels_N,
        grids.slot_types_NxS,
        ks,
        seed=seed,
    )
    return {
        "R": R,
        "alpha_star": R / token_grid.SLOTS,
        "alpha_conf": confusion / token_grid.SLOTS,
        "theorem_margin": token_grid.meets_theorem_margin(R),
        "attention": config.model.attention,
        "start": "pretrained" if config.init_from else "scratch",
        "seed": int(config.seed),
        "init_from": config.init_from,
        "test_accuracy": summary["test_accuracy"],
        "test_loss": summary["test_loss"],
        "train_accuracy": summary["train_accuracy"],
        "seconds": summary["seconds"],
        "chance_mass": R / token_grid.SLOTS,
        **metrics,
        "workdir": os.fspath(workdir),
    }
