"""PK22's measurements as one run (`experiments/how_vits_work.py`): its config (the runs or models, the
measurement settings) and the driver that checks it and hands it to `report.run`.
"""

import ml_collections

from posattn import configs, ownership
from posattn.errors import ConfigError, check_seed
from posattn.papers.pk22 import report, suite


def _schema(fields) -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(
        {
            "runs": "",  # comma-separated workdirs of trained posattn.vision runs; none = train `models`
            # of tpu_configs/how_vits_work.py; empty: the dataset's (digits: resnet,vit_vanilla,alternet,
            # vit_positional; fashion_mnist: the same without AlterNet)
            "models": "",
            "dataset": "digits",  # of the models trained here: digits or fashion_mnist
            # what `:quick` sets: short training and small measurements; a field because it reaches the runs
            # trained here (`report.training_config`) and the measurements (`settings.QUICK`)
            "quick": False,
            "seed": 0,  # of the measurements (mini-batches, directions, noise)
            # None: the measurement settings' own (posattn.papers.pk22.suite.Settings)
            "hessian_batches": ml_collections.config_dict.placeholder(
                int
            ),  # mini-batches of the Hessian spectrum
            "landscape_grid": ml_collections.config_dict.placeholder(
                int
            ),  # points per axis (4k + 1: 5, 9, .., 21)
            # noise amplitude, normalised input units (PK22 issue #44: 0.7, the default; ops/adversarial.py: 0.007)
            "noise_eps": ml_collections.config_dict.placeholder(float),
            "noise_band": ml_collections.config_dict.placeholder(
                str
            ),  # "pk22" (its code's square) or "annulus"
            # weight of the L2 term of the Hessian's and the landscape's objective (PK22: 0.05)
            "weight_decay": ml_collections.config_dict.placeholder(float),
            # "norms": sum of per-tensor norms (PK22's landscape), "squared": half the squared norm
            "landscape_l2_form": ml_collections.config_dict.placeholder(str),
            "hessian_l2_form": ml_collections.config_dict.placeholder(
                str
            ),  # default "squared" (suite.Settings)
            "hessian_loop": ml_collections.config_dict.placeholder(
                str
            ),  # auto | host | program (suite.Settings)
            "hessian_method": ml_collections.config_dict.placeholder(
                str
            ),  # lanczos | power (suite.Settings)
            "mixup_alpha": ml_collections.config_dict.placeholder(
                float
            ),  # of the objective's images (PK22: 1; 0 off)
            "label_smoothing": ml_collections.config_dict.placeholder(
                float
            ),  # of the objective's targets (PK22: 0.1)
            # training images per landscape point (a multiple of landscape_batch_size; 0: the whole training
            # split, PK22's)
            "landscape_images": ml_collections.config_dict.placeholder(int),
            # "pk22": PK22's normalize_filter, "filter": Li et al.'s one norm per output unit
            "landscape_normalisation": ml_collections.config_dict.placeholder(str),
            # training images per run of the landscape program (a multiple of 16): the unit of its intervals
            "landscape_batch_size": ml_collections.config_dict.placeholder(int),
            "eval_batch_size": ml_collections.config_dict.placeholder(
                int
            ),  # test images per forward pass
            "test_images": ml_collections.config_dict.placeholder(
                int
            ),  # of the accuracy and noise; 0: all
            "feature_images": ml_collections.config_dict.placeholder(
                int
            ),  # test images of the Fourier/variance tools
            "bootstrap_resamples": ml_collections.config_dict.placeholder(
                int
            ),  # of the 95% intervals
            "bootstrap_seed": ml_collections.config_dict.placeholder(int),
            # multiplies the training steps (and warm-up) of every model trained here: a second training length
            "training_length": 1.0,
        }
    )


SCHEMA = configs.Schema(
    "a how_vits_work config", _schema, lambda c: c.update(quick=True), "how_vits_work"
)


def run(config, workdir: str, claim) -> None:
    """Check `config` (SCHEMA) and the trained runs it names, `claim(workdir, "how_vits_work", ...)` (the
    binary's `cli.claim`), then train (or resume) the models it needs and measure them
    (`report.run`)."""
    runs, models = (
        [s.strip() for s in text.split(",") if s.strip()] for text in (config.runs, config.models)
    )
    if config.dataset not in report.DEFAULT_MODELS:
        raise ConfigError(
            f"dataset={config.dataset!r} must be one of {', '.join(report.DEFAULT_MODELS)}"
        )
    models = models or list(report.DEFAULT_MODELS[config.dataset])
    settings = suite.settings_from(config)
    check_seed(config.seed, "seed")
    if not config.training_length > 0:
        raise ConfigError(
            f"training_length={config.training_length} must be positive (1: the models' own steps)"
        )
    for trained in runs:
        ownership.check_run(trained, "train_images")
    # its own (its trained runs resume), writable and locked, before any work
    claim(
        workdir,
        "how_vits_work",
        report.config_record(
            runs,
            models,
            config.quick,
            config.seed,
            config.training_length,
            config.dataset,
            settings,
        ),
        resumes=True,
    )
    report.run(
        workdir,
        runs=runs,
        models=models,
        quick=config.quick,
        settings=settings,
        seed=config.seed,
        training_length=config.training_length,
        dataset=config.dataset,
    )
