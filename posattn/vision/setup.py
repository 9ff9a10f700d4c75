"""An image config resolved once into what a run uses: `Setup`.

`resolve(config, num_devices, dataset=None)` validates everything the run will touch before any heavy
work and builds the model, the image shape, the dataset (`config.dataset` by name, or the `dataset` passed,
e.g. one of your own arrays), the block permutation (JSL22 Figure 5) and the augmentation settings, once.
The train loop, the evaluation and the analysis tools take the `Setup`, not the ConfigDict: the splits are
opened (for the in-memory datasets: decoded) once per `Setup`, the dataset's facts (`Setup.info`, channel
statistics included) are worked out once, on first use, and `loss_fn` is the training loss bound to the
run's model and label smoothing. `Preprocess` is what a run does to a batch of images before its model,
as a function a loaded run carries (`posattn.vision.checkpoint.load_run`).
"""
from __future__ import annotations

import dataclasses
import functools
import math
import numbers

import flax.linen as nn
import jax.numpy as jnp
import ml_collections

from posattn.errors import INT32_MAX, ConfigError, check_choice
from posattn.vision import config as config_lib, losses, models
from posattn.vision.data import augment, datasets, pipeline
from posattn.vision.data.permutation import BlockPermutation

COMPUTE_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def build_model(config, num_classes: int, image_shape: tuple[int, int, int]) -> nn.Module:
    """The classifier of `config` for `num_classes` classes of images of `image_shape`; needs no data
    (used to load a run)."""
    dtype = COMPUTE_DTYPES[check_choice(config.compute_dtype, COMPUTE_DTYPES, "compute_dtype")]
    return models.create_model(config.model, num_classes=num_classes, image_size=image_shape[0],
                               channels=image_shape[2], dtype=dtype)


@dataclasses.dataclass(frozen=True)
class Preprocess:
    """A run's inputs from natural uint8 images (B, H, W, C) of its dataset's shape: pixel blocks
    permuted as the run's were (JSL22 Figure 5; the identity for an unpermuted run), then normalised
    by the run's channel statistics, (x / 255 - mean) / std; numpy or jax arrays, float32 out.

    `info` is the run's `DatasetInfo` (classes, image shape, statistics).
    """

    info: datasets.DatasetInfo
    permutation: BlockPermutation

    def __call__(self, images_BxHxWxC):
        if self.info.mean is None:
            raise ConfigError(f"the run records no channel statistics (its run.json predates them) and its "
                              f"dataset {self.info.name} is not available to compute them")
        if tuple(images_BxHxWxC.shape[1:]) != tuple(self.info.image_shape):
            raise ConfigError(f"images of shape {tuple(images_BxHxWxC.shape[1:])}: the run takes batches of "
                              f"{tuple(self.info.image_shape)} (resize them with datasets.resize_and_center_crop)")
        return augment.preprocess_eval(self.permutation(images_BxHxWxC), self.info)


@dataclasses.dataclass(frozen=True, eq=False)
class Setup:
    """A validated image config and what it resolves to (build it with `resolve`).

    `config` stays for the loop's own fields (steps, logging, checkpoints) and the workdir's record.
    """

    config: ml_collections.ConfigDict
    dataset: datasets.Dataset
    image_shape: tuple[int, int, int]
    model: nn.Module
    permutation: BlockPermutation
    augment: augment.Settings
    _splits: dict = dataclasses.field(default_factory=dict, repr=False)

    def split(self, name: str) -> datasets.Split:
        """Split `name` ("train" | "test") of the run's dataset, opened on first use and kept."""
        datasets.check_split(name)
        if name not in self._splits:
            self._splits[name] = self.dataset.open_split(name, self.config.get("image_size", 0))
        return self._splits[name]

    @functools.cached_property
    def info(self) -> datasets.DatasetInfo:
        """The dataset as the run reads it: classes, image shape, split sizes, and the channel statistics
        of config.channel_mean/std, else the dataset's known ones, else computed from the training split."""
        c = self.config
        stats = datasets.check_stats(c.get("channel_mean"), c.get("channel_std"), self.image_shape[2])
        return datasets.describe(self.dataset, c.get("image_size", 0), stats=stats,
                                 train=lambda: self.split("train"))

    @property
    def preprocess(self) -> Preprocess:
        """The run's inputs from natural uint8 images (what `checkpoint.load_run` gives back)."""
        return Preprocess(self.info, self.permutation)

    def train_batches(self, start_step: int = 0, **processes):
        """This process's natural training batches from `start_step` (`pipeline.train_batches`)."""
        return pipeline.train_batches(self.split("train"), seed=self.config.seed,
                                      global_batch_size=self.config.global_batch_size,
                                      start_step=start_step, **processes)

    def eval_batches(self, split: str = "test", **processes):
        """This process's block-permuted, masked batches of `split` (`pipeline.eval_batches`)."""
        return pipeline.eval_batches(self.split(split), eval_batch_size=self.config.eval_batch_size,
                                     permute=self.permutation, **processes)

    def training_inputs(self, key, images_BxHxWxC):
        """The model's inputs for a uint8 batch of natural images: augmented, then pixel blocks permuted
        (JSL22 Figure 5). In this order a permuted run sees exactly the permuted images of the augmented
        natural ones; a crop or flip of an already permuted image would move pixels across blocks,
        which no fixed block permutation of natural images does."""
        return self.permutation(augment.augment(key, images_BxHxWxC, self.augment, self.info))

    def eval_inputs(self, images_BxHxWxC):
        """The model's inputs for a uint8 evaluation batch (already permuted by `eval_batches`)."""
        return augment.preprocess_eval(images_BxHxWxC, self.info)

    @property
    def loss_fn(self):
        """loss_fn(params, batch_stats, images, labels, rng, train) -> (loss, (logits, batch_stats)):
        `losses.classification_loss` of this run's model and label smoothing."""
        return functools.partial(losses.classification_loss, self.model,
                                 label_smoothing=float(self.config.label_smoothing))


def _check_count(config, field: str, low: int, what: str, prefix: str = "") -> None:
    value = config[field]
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not low <= value <= INT32_MAX:
        # step counts, the seed and batch sizes enter the compiled programs as int32
        raise ConfigError(f"{prefix}{field}={value!r} must be {what} below 2**31")


def _check_number(opt, field: str, ok, what: str) -> None:
    value = opt[field]
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or not ok(value):
        raise ConfigError(f"optimizer.{field}={value!r} must be {what}")


def _check_loop_fields(config, num_devices: int) -> None:
    for field in ("total_steps", "log_every"):
        _check_count(config, field, 1, "a positive integer")
    for field in ("eval_every", "checkpoint_every"):
        _check_count(config, field, 0, "an integer >= 0 (0 = only at the end)")
    for field in ("global_batch_size", "eval_batch_size"):
        _check_count(config, field, 1, f"a positive multiple of the {num_devices} devices")
        if config[field] % num_devices:
            raise ConfigError(f"{field}={config[field]} does not divide by the {num_devices} devices; "
                              f"use a positive multiple of {num_devices}")
    _check_count(config, "seed", 0, "an integer >= 0")  # the train step takes it as an int32 argument
    if not 0.0 <= config.label_smoothing < 1.0:
        raise ConfigError(f"label_smoothing={config.label_smoothing} must lie in [0, 1)")
    opt = config.optimizer
    _check_number(opt, "lr", lambda v: v > 0, "a positive finite number")
    _check_count(opt, "warmup_steps", 0, "an integer >= 0", prefix="optimizer.")
    _check_number(opt, "weight_decay", lambda v: v >= 0, "a finite number >= 0")
    if opt.grad_clip is not None:
        _check_number(opt, "grad_clip", lambda v: v >= 0, "a finite number >= 0 (0 = no clipping)")
    for field in ("b1", "b2"):
        _check_number(opt, field, lambda v: 0.0 <= v < 1.0, "a number in [0, 1) (Adam's decay rate)")


def resolve(config, num_devices: int = 1, dataset: datasets.Dataset | None = None) -> Setup:
    """Validate everything the run will use, before any heavy work; raise ConfigError on the first fault.

    `dataset` (e.g. `arrays.from_arrays(...)`) is the run's data, with config.dataset its name; by
    default config.dataset is looked up by name (`datasets.get`).

    Unknown dataset, or one not prepared, a dataset passed under another name than config.dataset, model,
    variant, attention or pooling, a patch size that does not divide the image, a batch that does not
    divide by the devices, an unknown compute dtype, a step count, batch size or seed that is not an
    integer in range (below 2**31: they are int32 in the programs), optimiser numbers that are not finite
    or out of range, augmentation settings out of range, channel statistics that are not one positive
    std and one mean per channel, a block size that does not divide the image or a negative permutation
    seed. The splits are opened later, on first use. A config without the fields of
    `config.base_config()` is refused first.
    """
    config_lib.check_schema(config)
    check_choice(config.compute_dtype, COMPUTE_DTYPES, "compute_dtype")
    _check_loop_fields(config, num_devices)
    settings = augment.Settings.from_config(config.augment)
    if dataset is None:
        dataset = datasets.get(config.dataset, data_dir=config.get("data_dir"), idx_dir=config.get("idx_dir"))
    elif config.dataset != dataset.name:
        raise ConfigError(f"config.dataset={config.dataset!r} but the dataset passed is {dataset.name!r}: set "
                          f"config.dataset = {dataset.name!r} (the name the run records)")
    dataset.sizes()  # the data are there (a dataset not prepared says how to prepare it)
    shape = datasets.shape_at(dataset, config.get("image_size", 0))
    datasets.check_stats(config.get("channel_mean"), config.get("channel_std"), shape[2])
    permutation = BlockPermutation.of(shape[:2], config.get("permute_block", 0),
                                      config.get("permute_seed", 0))
    return Setup(config=config, dataset=dataset, image_shape=shape,
                 model=build_model(config, dataset.num_classes, shape), permutation=permutation,
                 augment=settings)
