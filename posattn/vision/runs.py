"""A run as its workdir holds it: the run record (run.json), the config it was trained with, and its
parameters loaded back.

`load_run(workdir)` gives a trained run back as (model, variables, config, preprocess) from the workdir
alone: its config.json and run.json (the dataset as the run read it: name, classes, image shape, split
sizes and the channel statistics that normalised its inputs, written at train time), so analysis needs
no prepared dataset, and a run trained on arrays of your own loads in a process that has none of them.
The checkpoints themselves are `posattn.vision.checkpoint`'s.
"""

import dataclasses
import json
from typing import NamedTuple

import jax
import ml_collections
from etils import epath

from posattn import run_record
from posattn.errors import ConfigError
from posattn.mesh import data_mesh, replicated
from posattn.vision import config as vision_config
from posattn.vision import optim
from posattn.vision.checkpoint import abstract_like, manager, restore
from posattn.vision.data import datasets
from posattn.vision.data.permutation import BlockPermutation
from posattn.vision.preprocess import Preprocess
from posattn.vision.setup import Setup, build_model
from posattn.vision.state import init_state, model_variables


def write_run_record(workdir, config, setup: Setup) -> None:
    """The record of an image run starting in `workdir` (`posattn.run_record`): config.json, `config`;
    run.json, the run's `DatasetInfo` (dataset name, classes, image shape, split sizes, channel
    statistics, the pixel scale its images were given on), what building and feeding the model needs
    beyond config.json, so that `load_run` needs no data, and "augment", the training augmentation as
    resolved (`setup.resolve_augment`: the config's "auto" values made numbers)."""
    run_record.write_config(workdir, config)
    run_record.write_run(
        workdir, {**dataclasses.asdict(setup.info), "augment": dataclasses.asdict(setup.augment)}
    )


def abstract_state(model, image_shape, config, sharding) -> dict:
    """The shapes, dtypes and `sharding` of the train state of `config` (nothing is computed)."""
    tx = optim.make_optimizer(
        config.optimizer, optim.hyperparameters(config.optimizer, config.total_steps)
    )
    return abstract_like(
        jax.eval_shape(lambda: init_state(model, image_shape, config.seed, tx)), sharding
    )


def restore_state(
    workdir, model, image_shape, config, *, step: int | None = None, devices=None
) -> dict:
    """The train state saved in `workdir` (its latest checkpoint, or `step`), replicated over `devices`."""
    abstract = abstract_state(model, image_shape, config, replicated(data_mesh(devices)))
    with manager(str(workdir), read_only=True) as mngr:
        state = restore(mngr, abstract, step)
    if state is None:
        raise ConfigError(f"no checkpoint in {workdir}/checkpoints: train first")
    return state


def run_config(workdir) -> ml_collections.ConfigDict:
    """The config a run in `workdir` was trained with (its config.json; JSON's lists back to the tuples
    of the config's fields, e.g. channel_mean). An image run recorded before a field joined
    `base_config()` gets the value it was trained with (`vision_config.SCHEMA.complete`)."""
    recorded = run_record.read_config(workdir)
    if recorded is None:
        raise ConfigError(
            f"{epath.Path(workdir) / run_record.CONFIG_FILE} not found: a run's workdir holds "
            "config.json and checkpoints/"
        )
    if "model" in recorded and "dataset" in recorded:  # an image run (another's reader refuses it)
        recorded = vision_config.SCHEMA.complete(recorded)
    return ml_collections.ConfigDict(json.loads(json.dumps(recorded), object_hook=_lists_to_tuples))


def _lists_to_tuples(record: dict) -> dict:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in record.items()}


def _run_record(workdir, config) -> dict:
    """run.json of `workdir`; for a workdir written before it existed, the dataset's classes and image
    shape, known without its data."""
    run = run_record.read_run(workdir) or {
        "num_classes": datasets.num_classes(config.dataset),
        "image_shape": datasets.image_shape(config.dataset, config.image_size),
    }
    return {**run, "image_shape": tuple(run["image_shape"])}


def restore_run(workdir, *, step: int | None = None, devices=None):
    """(model, train state, config) of checkpoint `step` (default: the latest) of the run in `workdir`,
    replicated over `devices` (default: every device), from the workdir alone (no dataset needed)."""
    config = run_config(workdir)
    run = _run_record(workdir, config)
    model = build_model(config, run["num_classes"], run["image_shape"])
    state = restore_state(workdir, model, run["image_shape"], config, step=step, devices=devices)
    return model, state, config


def run_preprocess(workdir) -> Preprocess:
    """The `preprocess.Preprocess` of the run in `workdir`: natural uint8 images -> its model's inputs (block
    permutation and normalisation as recorded; no data needed)."""
    config = run_config(workdir)
    run = _run_record(workdir, config)
    if (
        "mean" not in run
    ):  # recorded before the statistics were: the dataset's, where it is available
        try:
            run = {
                **dataclasses.asdict(
                    datasets.dataset_info(config.dataset, config.data_dir, config.image_size)
                ),
                **run,
            }
        except ConfigError:
            run = {
                "name": config.dataset,
                "num_train": 0,
                "num_test": 0,
                "mean": None,
                "std": None,
                **run,
            }
    # (a run.json written before the pixel scale was recorded has none: its images were held, and are
    # taken again, as uint8 pixels 0..255, the DatasetInfo default)
    info = datasets.DatasetInfo(
        **{
            f.name: tuple(run[f.name]) if isinstance(run[f.name], list) else run[f.name]
            for f in dataclasses.fields(datasets.DatasetInfo)
            if f.name in run
        }
    )
    return Preprocess(
        info,
        BlockPermutation.of(info.image_shape[:2], config.permute_block, config.permute_seed),
    )


class Run(NamedTuple):
    """A trained run as `load_run` gives it back."""

    model: object  # flax Module: model.apply(variables, preprocess(images), train=False) -> logits
    variables: dict
    config: ml_collections.ConfigDict
    preprocess: (
        Preprocess  # natural images (B, H, W, C) on the run's pixel scale -> the model's inputs
    )


def load_run(workdir, step: int | None = None) -> Run:
    """(model, variables, config, preprocess) of a trained run, from its workdir alone (no dataset needed).

    variables: {"params"} (and "batch_stats" for the CNNs) of checkpoint `step` (default: the latest),
    on the local devices, replicated; `model.apply(variables, preprocess(images), train=False)` gives its
    logits for a batch of natural images of the run's shape (preprocess.info.image_shape) on the scale
    its images were given on (preprocess.info.pixels: uint8 0..255, or floats in [0, 1] for a run on
    float arrays; `preprocess.Preprocess` refuses the other).
    """
    model, state, config = restore_run(workdir, step=step, devices=jax.local_devices())
    return Run(model, model_variables(state), config, run_preprocess(workdir))
