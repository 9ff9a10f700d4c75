"""An image config resolved once into what a run uses: `Setup`.

`resolve(config, num_devices, dataset=None)` validates everything the run will touch before any heavy
work and builds the model, the image shape, the dataset (`config.dataset` by name, or the `dataset` passed,
e.g. one of your own arrays), the block permutation (JSL22 Figure 5) and the augmentation settings (its
"auto" defaults resolved against the dataset and image size: `resolve_augment`), once.
The train loop, the evaluation and the analysis tools take the `Setup`, not the ConfigDict: the splits are
opened (for the in-memory datasets: decoded) once per `Setup`, the dataset's facts (`Setup.info`, channel
statistics included) are worked out once, on first use, and `loss_fn` is the training loss bound to the
run's model and label smoothing; `Setup.preprocess` is what the run does to a batch of images before its
model (`posattn.vision.preprocess.Preprocess`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import os

import flax.linen as nn
import jax.numpy as jnp
import ml_collections
import numpy as np

from posattn.errors import INT32_MAX, ConfigError, check_choice
from posattn.vision import chrono, losses, models, optim
from posattn.vision import config as config_lib
from posattn.vision.data import augment, channel_stats, datasets, pipeline
from posattn.vision.data import split as split_lib
from posattn.vision.data.permutation import BlockPermutation
from posattn.vision.preprocess import Preprocess

COMPUTE_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def build_model(config, num_classes: int, image_shape: tuple[int, int, int]) -> nn.Module:
    """The classifier of `config` for `num_classes` classes of images of `image_shape`; needs no data
    (used to load a run)."""
    dtype = COMPUTE_DTYPES[check_choice(config.compute_dtype, COMPUTE_DTYPES, "compute_dtype")]
    return models.create_model(
        config.model,
        num_classes=num_classes,
        image_size=image_shape[0],
        channels=image_shape[2],
        dtype=dtype,
    )


def open_split(
    dataset: datasets.Dataset, name: str, image_size: int, validation_examples: int
) -> datasets.Split:
    """Split `name` of `dataset` at image_size: "test"; "train", less the `validation_examples` held
    out; "validation", those (`split.validation_indices`). A function of its arguments alone, so that
    an input worker process opens the same split (`Setup.train_batches`)."""
    if name == "validation" and not validation_examples:
        raise ConfigError("this run holds out no validation split: set config.validation_examples")
    if name in ("train", "validation") and validation_examples:
        full = dataset.open_split("train", image_size)
        val_M = split_lib.validation_indices(full.num_examples, validation_examples)
        if name == "validation":
            return split_lib.subset(full, val_M)
        return split_lib.subset(full, np.setdiff1d(np.arange(full.num_examples), val_M))
    datasets.check_split(name)
    return dataset.open_split(name, image_size)


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
    augment_note: str = (
        ""  # what `augment` applies and where each value came from (`resolve_augment`)
    )
    _splits: dict = dataclasses.field(default_factory=dict, repr=False)

    def split(self, name: str) -> datasets.Split:
        """Split `name` of the run's dataset, opened on first use and kept (`open_split`)."""
        if name not in self._splits:
            self._splits[name] = open_split(
                self.dataset, name, self.config.image_size, self.config.validation_examples
            )
        return self._splits[name]

    @functools.cached_property
    def input_workers(self) -> int:
        """The worker processes that read the training batches: config.input.workers, or where it is
        AUTO_WORKERS none for a split held in memory (nothing to decode) without the Inception crop,
        else one per core but one, at least 1 and at most MAX_AUTO_WORKERS."""
        workers = self.config.input.workers
        if workers != config_lib.AUTO_WORKERS:
            return workers
        if self.split("train").in_memory and not self.config.augment.inception_crop:
            return 0
        return max(1, min(config_lib.MAX_AUTO_WORKERS, len(os.sched_getaffinity(0)) - 1))

    @property
    def eval_splits(self) -> tuple[str, ...]:
        """The splits every evaluation reads: "validation" where the run holds one out, "test" unless
        config.evaluate_test is off (a recipe chosen on validation reads no test image)."""
        return (("validation",) if self.config.validation_examples else ()) + (
            ("test",) if self.config.evaluate_test else ()
        )

    @functools.cached_property
    def info(self) -> datasets.DatasetInfo:
        """The dataset as the run reads it: classes, image shape, split sizes, and the channel statistics
        of config.channel_mean/std, else the dataset's known ones, else computed from the training split."""
        c = self.config
        stats = channel_stats.check(c.channel_mean, c.channel_std, self.image_shape[2])
        return datasets.describe(
            self.dataset, c.image_size, stats=stats, train=lambda: self.split("train")
        )

    @property
    def preprocess(self) -> Preprocess:
        """The run's inputs from natural images on its pixel scale (what `runs.load_run` gives back)."""
        return Preprocess(self.info, self.permutation)

    def train_batches(self, start_step: int = 0, **processes):
        """This process's natural training batches from `start_step` (`pipeline.train_batches`), read
        by `input_workers` worker processes, each opening the split itself; with the Inception crop at
        the run's side where config.augment.inception_crop is on. Close the iterator when done."""
        workers = self.input_workers
        held_out = self.config.validation_examples
        return pipeline.train_batches(
            functools.partial(open_split, self.dataset, "train", self.config.image_size, held_out)
            if workers
            else self.split("train"),
            seed=self.config.seed,
            global_batch_size=self.config.global_batch_size,
            start_step=start_step,
            workers=workers,
            crop=self.image_shape[0] if self.config.augment.inception_crop else 0,
            **processes,
        )

    def eval_batches(self, split: str = "test", **processes):
        """This process's block-permuted, masked batches of `split` (`pipeline.eval_batches`)."""
        return pipeline.eval_batches(
            self.split(split),
            eval_batch_size=self.config.eval_batch_size,
            permute=self.permutation,
            **processes,
        )

    def training_inputs(self, key, images_BxHxWxC):
        """The model's inputs for a uint8 batch of natural images: augmented, then pixel blocks permuted
        (JSL22 Figure 5). In this order a permuted run sees exactly the permuted images of the augmented
        natural ones; a crop or flip of an already permuted image would move pixels across blocks,
        which no fixed block permutation of natural images does. ConfigError for another dtype."""
        return self.permutation(
            augment.augment(key, _uint8(images_BxHxWxC), self.augment, self.info)
        )

    def eval_inputs(self, images_BxHxWxC):
        """The model's inputs for a uint8 evaluation batch (already permuted by `eval_batches`);
        ConfigError for another dtype (`preprocess` takes the images a run was given)."""
        return augment.preprocess_eval(_uint8(images_BxHxWxC), self.info)

    @property
    def loss_fn(self):
        """loss_fn(params, batch_stats, images, labels, rng, train) -> (loss, (logits, batch_stats)):
        `losses.classification_loss` of this run's model and label smoothing."""
        return functools.partial(
            losses.classification_loss,
            self.model,
            label_smoothing=float(self.config.label_smoothing),
        )


def _uint8(images):
    """`images` if uint8, the dtype of every split's batches, else ConfigError: floats in [0, 1] would be
    divided by 255 again (the dtype is known when traced, so jitted callers are checked too)."""
    if images.dtype != jnp.uint8:
        raise ConfigError(
            f"a batch of dtype {images.dtype}: the run's batches are uint8 pixels 0..255 (as "
            "its splits read them); Setup.preprocess takes images on the scale they were given"
        )
    return images


def _check_count(config, field: str, low: int, what: str, prefix: str = "") -> None:
    value = config[field]
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Integral)
        or not low <= value <= INT32_MAX
    ):
        # step counts, the seed and batch sizes enter the compiled programs as int32
        raise ConfigError(f"{prefix}{field}={value!r} must be {what} below 2**31")


def _check_number(opt, field: str, ok, what: str) -> None:
    value = opt[field]
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not math.isfinite(value)
        or not ok(value)
    ):
        raise ConfigError(f"optimizer.{field}={value!r} must be {what}")


def _check_loop_fields(config, num_devices: int) -> None:
    for field in ("total_steps", "log_every"):
        _check_count(config, field, 1, "a positive integer")
    for field in ("eval_every", "checkpoint_every"):
        _check_count(config, field, 0, "an integer >= 0 (0 = only at the end)")
    for field in ("global_batch_size", "eval_batch_size"):
        _check_count(config, field, 1, f"a positive multiple of the {num_devices} devices")
        if config[field] % num_devices:
            raise ConfigError(
                f"{field}={config[field]} does not divide by the {num_devices} devices a batch "
                f"is split over (the mesh's data x fsdp); use a positive multiple of {num_devices}"
            )
    _check_count(
        config, "seed", 0, "an integer >= 0"
    )  # the train step takes it as an int32 argument
    _check_count(config, "validation_examples", 0, "an integer >= 0")
    if not isinstance(config.evaluate_test, bool):
        raise ConfigError(f"evaluate_test={config.evaluate_test!r} must be True or False")
    if not (config.validation_examples or config.evaluate_test):
        raise ConfigError(
            "evaluate_test=False and validation_examples=0 leave nothing to evaluate: hold out a "
            "validation split (e.g. --config.validation_examples=10000)"
        )
    chrono.profile_window(config.profile_steps, config.total_steps)
    if not 0.0 <= config.label_smoothing < 1.0:
        raise ConfigError(f"label_smoothing={config.label_smoothing} must lie in [0, 1)")
    opt = config.optimizer
    _check_number(opt, "lr", lambda v: v > 0, "a positive finite number")
    _check_count(opt, "warmup_steps", 0, "an integer >= 0", prefix="optimizer.")
    if config.input.workers != config_lib.AUTO_WORKERS:
        _check_count(
            config.input,
            "workers",
            0,
            f"{config_lib.AUTO_WORKERS} (auto) or an integer >= 0",
            prefix="input.",
        )
    _check_count(config.input, "prefetch", 0, "an integer >= 0 (0: none)", prefix="input.")
    _check_number(opt, "weight_decay", lambda v: v >= 0, "a finite number >= 0")
    if opt.grad_clip is not None:
        _check_number(opt, "grad_clip", lambda v: v >= 0, "a finite number >= 0 (0 = no clipping)")
    for field in ("b1", "b2"):
        _check_number(
            opt, field, lambda v: 0.0 <= v < 1.0, "a number in [0, 1) (Adam's decay rate)"
        )
    _check_count(opt, "accumulate_steps", 1, "an integer >= 1", prefix="optimizer.")
    if config.global_batch_size % (opt.accumulate_steps * num_devices):  # micro-batches x devices
        raise ConfigError(
            f"global_batch_size={config.global_batch_size} does not split into optimizer.accumulate_"
            f"steps={opt.accumulate_steps} micro-batches over {num_devices} devices: use a multiple "
            f"of {opt.accumulate_steps * num_devices}"
        )
    optim.moment_dtype(opt)  # (a ConfigError for an unknown optimizer.mu_dtype)


def resolve_augment(aug_cfg, dataset: datasets.Dataset, side: int) -> tuple[augment.Settings, str]:
    """(the training augmentation of a config's `augment` section for `dataset` read at `side` x `side`
    pixels, one line saying what it applies and why). An explicit value wins; crop_padding
    `config.AUTO_CROP` (-1) is 1/8 of the side, rounded half up, and flip None is what the dataset
    declares (`datasets.flip_preserves_label`; unknown: no flip). ConfigError for another negative
    crop_padding, or settings `augment.Settings` refuses."""
    name, crop, flip = dataset.name, aug_cfg.crop_padding, aug_cfg.flip
    crop_why = flip_why = "as configured"
    inception = aug_cfg.inception_crop
    if not isinstance(inception, bool):
        raise ConfigError(f"augment.inception_crop={inception!r} must be True or False")
    if inception and crop not in (config_lib.AUTO_CROP, 0):
        raise ConfigError(
            f"augment.crop_padding={crop} with augment.inception_crop=True: the Inception crop "
            f"replaces the padded crop; leave crop_padding at {config_lib.AUTO_CROP} or set it to 0"
        )
    if inception:
        crop = 0
    elif crop == config_lib.AUTO_CROP:
        # CIFAR's 4 px of 32: a shift of up to 1/8 of the side keeps the object in view, at every size
        # (4 px would be half of an 8 px digit)
        crop, crop_why = int(side / 8 + 0.5), f"auto: 1/8 of the {side} px side"
    elif isinstance(crop, numbers.Integral) and not isinstance(crop, bool) and crop < 0:
        raise ConfigError(
            f"augment.crop_padding={crop}: give {config_lib.AUTO_CROP} (1/8 of the image side) "
            "or a padding in pixels >= 0 (0: no crop)"
        )
    if flip is None:
        declared = datasets.flip_preserves_label(dataset)
        flip = bool(declared)
        flip_why = {
            True: f"auto: {name} declares that a mirror image keeps its label",
            False: f"auto: {name} declares that a mirror image does not keep its label",
            None: f"auto: {name} does not declare whether a mirror image keeps its label; set "
            "augment.flip=True if it does",
        }[declared]
    settings = augment.Settings.from_config({**aug_cfg, "crop_padding": crop, "flip": flip})
    extras = [
        f"RandAugment({settings.randaugment_layers}, {settings.randaugment_magnitude})"
        if settings.randaugment_layers
        else "",
        f"mixup {settings.mixup_alpha}" if settings.mixup_alpha else "",
        f"CutMix {settings.cutmix_alpha}" if settings.cutmix_alpha else "",
    ]
    note = "; ".join(
        [
            "Inception crop where the images are read (area 5-100%, aspect 3/4-4/3)"
            if inception
            else f"crop after {crop} px of padding ({crop_why})"
            if crop
            else f"no crop ({crop_why})",
            f"{'flip' if flip else 'no flip'} ({flip_why})",
            *filter(None, extras),
        ]
    )
    return settings, note


def resolve(config, num_devices: int = 1, dataset: datasets.Dataset | None = None) -> Setup:
    """Validate everything the run will use, before any heavy work; raise ConfigError on the first fault.

    `dataset` (e.g. `arrays.from_arrays(...)`) is the run's data, with config.dataset its name; by
    default config.dataset is looked up by name (`datasets.get`).

    Unknown dataset, or one not prepared, a dataset passed under another name than config.dataset, model,
    variant, attention or pooling, a patch size that does not divide the image, a batch that does not
    divide by the devices, an unknown compute dtype, a step count, batch size or seed that is not an
    integer in range (below 2**31: they are int32 in the programs), optimiser numbers that are not finite
    or out of range, augmentation settings out of range (their defaults resolved: `resolve_augment`),
    channel statistics that are not one mean and one positive std per channel in [0, 1], a block size
    that does not divide the image or a negative permutation seed. The splits are opened later, on
    first use. A config without the fields of `config.base_config()` is refused first.
    """
    config_lib.check_schema(config)
    check_choice(config.compute_dtype, COMPUTE_DTYPES, "compute_dtype")
    _check_loop_fields(config, num_devices)
    if dataset is None:
        dataset = datasets.get(config.dataset, data_dir=config.data_dir, idx_dir=config.idx_dir)
    elif config.dataset != dataset.name:
        raise ConfigError(
            f"config.dataset={config.dataset!r} but the dataset passed is {dataset.name!r}: set "
            f"config.dataset = {dataset.name!r} (the name the run records)"
        )
    num_train, _ = (
        dataset.sizes()
    )  # the data are there (a dataset not prepared says how to prepare it)
    if config.validation_examples:
        split_lib.validation_indices(num_train, config.validation_examples)  # (checks the count)
    shape = datasets.shape_at(dataset, config.image_size)
    channel_stats.check(config.channel_mean, config.channel_std, shape[2])
    settings, note = resolve_augment(config.augment, dataset, shape[0])
    permutation = BlockPermutation.of(shape[:2], config.permute_block, config.permute_seed)
    return Setup(
        config=config,
        dataset=dataset,
        image_shape=shape,
        model=build_model(config, dataset.num_classes, shape),
        permutation=permutation,
        augment=settings,
        augment_note=note,
    )
