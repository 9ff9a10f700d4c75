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


def _check_loop_fields(config, num_devices: int) -> None:
    counts = {f: config[f] for f in ("total_steps", "log_every", "eval_every", "checkpoint_every",
                                     "global_batch_size", "eval_batch_size")}
    for field, value in {**counts, "optimizer.warmup_steps": config.optimizer.warmup_steps}.items():
        if value > INT32_MAX:  # the step and the schedule run in int32 on the device
            raise ConfigError(f"{field}={value} must be at most {INT32_MAX:,} (JAX counts in int32)")
    for field in ("total_steps", "log_every"):
        if config[field] <= 0:
            raise ConfigError(f"{field}={config[field]} must be a positive integer")
    for field in ("eval_every", "checkpoint_every"):
        if config[field] < 0:
            raise ConfigError(f"{field}={config[field]} must be >= 0 (0 = only at the end)")
    for field in ("global_batch_size", "eval_batch_size"):
        if config[field] <= 0 or config[field] % num_devices:
            raise ConfigError(f"{field}={config[field]} does not divide by the {num_devices} devices; "
                              f"use a positive multiple of {num_devices}")
    if not 0 <= config.seed < 2**31:  # the train step takes it as an int32 argument
        raise ConfigError(f"seed={config.seed} must lie in [0, 2**31)")
    if not 0.0 <= config.label_smoothing < 1.0:
        raise ConfigError(f"label_smoothing={config.label_smoothing} must lie in [0, 1)")
    opt = config.optimizer
    if opt.lr <= 0:  # (a NaN passes: the run stops at its first step, as a diverged run does)
        raise ConfigError(f"optimizer.lr={opt.lr} must be positive")
    for field in ("warmup_steps", "weight_decay"):
        if opt[field] < 0:
            raise ConfigError(f"optimizer.{field}={opt[field]} must be >= 0")
    if (opt.grad_clip or 0) < 0:
        raise ConfigError(f"optimizer.grad_clip={opt.grad_clip} must be >= 0 (0 = no clipping)")
    for field in ("b1", "b2"):
        if not 0.0 <= opt[field] < 1.0:
            raise ConfigError(f"optimizer.{field}={opt[field]} must lie in [0, 1) (Adam's decay rate)")


def resolve(config, num_devices: int = 1) -> Setup:
    """Validate everything the run will use, before any heavy work; raise ConfigError on the first fault.

    Unknown dataset, model, variant, attention or pooling, a patch size that does not divide the image,
    a batch that does not divide by the devices, an unknown compute dtype, a non-positive step count, a
    seed outside [0, 2**31), optimiser numbers out of range, augmentation settings out of range, a
    block size that does not divide the image or a negative permutation seed. The splits are opened
    later, on first use. A config without the fields of `config.base_config()` is refused first.
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
