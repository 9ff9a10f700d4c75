"""An image config resolved once into what a run uses: `Setup`.

`resolve(config, num_devices)` validates everything the run will touch before any heavy work and builds
the model, the image shape, the dataset's facts, the block permutation (JSL22 Figure 5) and the
augmentation settings, once. The train loop, the evaluation and the analysis tools take the `Setup`, not
the ConfigDict: the splits are opened (for the in-memory datasets: decoded) once per `Setup`, and
`loss_fn` is the training loss bound to the run's model and label smoothing.
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


def build_model(config, num_classes: int) -> nn.Module:
    """The classifier of `config` for `num_classes` classes; needs no data (used to load a run)."""
    shape = datasets.image_shape(config.dataset, config.get("image_size", 0))
    dtype = COMPUTE_DTYPES[check_choice(config.compute_dtype, COMPUTE_DTYPES, "compute_dtype")]
    return models.create_model(config.model, num_classes=num_classes, image_size=shape[0],
                               channels=shape[2], dtype=dtype)


@dataclasses.dataclass(frozen=True, eq=False)
class Setup:
    """A validated image config and what it resolves to (build it with `resolve`).

    `config` stays for the loop's own fields (steps, logging, checkpoints) and the workdir's record.
    """

    config: ml_collections.ConfigDict
    info: datasets.DatasetInfo
    image_shape: tuple[int, int, int]
    model: nn.Module
    permutation: BlockPermutation
    augment: augment.Settings
    _splits: dict = dataclasses.field(default_factory=dict, repr=False)

    def split(self, name: str) -> datasets.Split:
        """Split `name` ("train" | "test") of the run's dataset, opened on first use and kept."""
        if name not in self._splits:
            c = self.config
            self._splits[name] = datasets.open_split(c.dataset, name, data_dir=c.get("data_dir"),
                                                     image_size=c.get("image_size", 0))
        return self._splits[name]

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


def resolve(config, num_devices: int = 1) -> Setup:
    """Validate everything the run will use, before any heavy work; raise ConfigError on the first fault.

    Unknown dataset, model, variant, attention or pooling, a patch size that does not divide the image,
    a batch that does not divide by the devices, an unknown compute dtype, a step count, batch size or
    seed that is not an integer in range (below 2**31: they are int32 in the programs), optimiser
    numbers that are not finite or out of range, augmentation settings out of range, a block size that
    does not divide the image or a negative permutation seed. The splits are opened later, on first
    use. A config without the fields of `config.base_config()` is refused first.
    """
    config_lib.check_schema(config)
    check_choice(config.compute_dtype, COMPUTE_DTYPES, "compute_dtype")
    _check_loop_fields(config, num_devices)
    settings = augment.Settings.from_config(config.augment)
    info = datasets.dataset_info(config.dataset, config.get("data_dir"))
    shape = datasets.image_shape(config.dataset, config.get("image_size", 0))
    permutation = BlockPermutation.of(shape[:2], config.get("permute_block", 0),
                                      config.get("permute_seed", 0))
    return Setup(config=config, info=info, image_shape=shape, model=build_model(config, info.num_classes),
                 permutation=permutation, augment=settings)
