r"""PK22's measurements (Hessian spectra, Fourier analysis, feature variance, frequency noise, loss
landscapes) on ResNet, vanilla ViT, AlterNet and positional-attention ViT (docs/how_vits_work.md).

  python -m posattn.experiments.how_vits_work --workdir=/tmp/pk22     # trains the four on the digits
  python -m posattn.experiments.how_vits_work --config=tpu_configs/pk22.py:quick --workdir=/tmp/pk22
  python -m posattn.experiments.how_vits_work --workdir=DIR --config.runs=RUN_DIR,RUN_DIR  # trained runs

`--config=FILE[:ARG]` (default tpu_configs/pk22.py) with fields runs, models, quick, seed and the
measurement settings (fields of `suite.Settings`; unset: PK22's code's, docs/how_vits_work.md), each
overridable as `--config.FIELD=VALUE`; `:quick` (or the older `--quick`) is the smoke run. With no runs,
the models of tpu_configs/how_vits_work.py (`models`) are trained (or resumed) under WORKDIR/runs/. The
workdir receives config.json, metrics.jsonl, results/MODEL.json, the figures pk22_*.png and summary.md
(PK22's claims and numbers beside ours).

One host: the measurements (Hessian power iterations, landscape grids, Fourier and noise on the
test split) run in one process; the trained runs it measures may come from a multi-host train_images
run (`--config.runs`).
"""

import ml_collections
from absl import flags, logging

from posattn import cli
from posattn.errors import ConfigError, check_seed

_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Directory for the results, figures and trained runs."
)


def _schema(fields) -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(
        {
            "runs": "",  # comma-separated workdirs of trained posattn.vision runs; none = train `models`
            # of tpu_configs/how_vits_work.py; empty: the dataset's (digits: resnet,vit_vanilla,alternet,
            # vit_positional; fashion_mnist: the same without AlterNet)
            "models": "",
            "dataset": "digits",  # of the models trained here: digits or fashion_mnist
            "quick": False,  # short training and small measurements (a smoke run): what `:quick` sets
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


SCHEMA = cli.Schema(
    "a how_vits_work config", _schema, lambda c: c.update(quick=True), "how_vits_work"
)
_CONFIG = cli.define_config(
    "tpu_configs/pk22.py", SCHEMA, "The models (or trained runs) and measurements"
)


def main(argv):
    if len(argv) > 1:
        raise ConfigError(f"unexpected arguments {argv[1:]}: pass everything as --flags")
    if _WORKDIR.value is None:
        raise ConfigError("--workdir=DIR is required")
    if not flags.FLAGS["verbosity"].present:  # quiet library logs (orbax); --verbosity=0 shows them
        logging.set_verbosity(logging.ERROR)
    import dataclasses

    from posattn import ownership  # after flag parsing: bad flags fail before jax starts
    from posattn.papers.pk22 import report as pk22_report
    from posattn.papers.pk22 import suite

    config = _CONFIG.value
    runs, models = (
        [s.strip() for s in text.split(",") if s.strip()] for text in (config.runs, config.models)
    )
    if config.dataset not in pk22_report.DEFAULT_MODELS:
        raise ConfigError(
            f"dataset={config.dataset!r} must be one of {', '.join(pk22_report.DEFAULT_MODELS)}"
        )
    models = models or list(pk22_report.DEFAULT_MODELS[config.dataset])
    settings = suite.settings_from(config)
    check_seed(config.seed, "seed")
    if not config.training_length > 0:
        raise ConfigError(
            f"training_length={config.training_length} must be positive (1: the models' own steps)"
        )
    for run in runs:
        ownership.check_run(run, "train_images")
    # its own (its trained runs resume), writable and locked, before any work
    cli.claim(
        _WORKDIR.value,
        "how_vits_work",
        {
            "runs": runs,
            "models": models,
            "quick": config.quick,
            "seed": config.seed,
            "training_length": config.training_length,
            "dataset": config.dataset,
            "settings": dataclasses.asdict(settings),
        },
        resumes=True,
    )
    pk22_report.run(
        _WORKDIR.value,
        runs=runs,
        models=models,
        quick=config.quick,
        settings=settings,
        seed=config.seed,
        training_length=config.training_length,
        dataset=config.dataset,
    )


def entry():
    """`python -m posattn.experiments.how_vits_work` and the console script `posattn-how-vits-work` (pyproject.toml)."""
    cli.run(main)


if __name__ == "__main__":
    entry()
