r"""PK22's measurements (Hessian spectra, Fourier analysis, feature variance, frequency noise, loss
landscapes) on ResNet, vanilla ViT, AlterNet and positional-attention ViT (docs/how_vits_work.md).

  python -m experiments.how_vits_work --workdir=/tmp/pk22            # trains the four on the digits
  python -m experiments.how_vits_work --workdir=/tmp/pk22 --quick    # a smoke run of everything
  python -m experiments.how_vits_work --workdir=DIR --runs=RUN_DIR,RUN_DIR   # measure trained runs

With no --runs, the models of tpu_configs/how_vits_work.py (--models) are trained (or resumed) under
WORKDIR/runs/. The workdir receives config.json, metrics.jsonl, results/MODEL.json, the figures
pk22_*.png and summary.md (PK22's claims and numbers beside ours).
"""
from absl import flags, logging

from posattn import cli
from posattn.errors import ConfigError, check_seed

_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for the results, figures and trained runs.")
_RUNS = flags.DEFINE_list("runs", [], "Workdirs of trained posattn.vision runs; none = train the defaults.")
_MODELS = flags.DEFINE_list("models", ["resnet", "vit_vanilla", "alternet", "vit_positional"],
                            "Models to train when no --runs are given (tpu_configs/how_vits_work.py).")
_QUICK = flags.DEFINE_bool("quick", False, "Short training and small measurements (a smoke run).")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the measurements (mini-batches, directions, noise).")
_HESSIAN_BATCHES = flags.DEFINE_integer("hessian_batches", None, "Mini-batches of the Hessian spectrum.")
_LANDSCAPE_GRID = flags.DEFINE_integer("landscape_grid", None,
                                       "Points per axis of the landscape (4k + 1: 5, 9, .., 21).")
_NOISE_EPS = flags.DEFINE_float("noise_eps", None, "Noise amplitude, in normalised input units (PK22 issue "
                                 "#44: 0.7, the default; PK22's ops/adversarial.py: 0.007).")
_NOISE_BAND = flags.DEFINE_enum("noise_band", None, ["pk22", "annulus"],
                                "Noise band: PK22's code's square (default) or the |omega|_inf annulus.")
_WEIGHT_DECAY = flags.DEFINE_float("weight_decay", None, "Weight of the L2 term of the Hessian's and the "
                                   "landscape's objective (PK22: 0.05).")
_LANDSCAPE_L2_FORM = flags.DEFINE_enum("landscape_l2_form", None, ["norms", "squared"],
                                       "The landscape's L2 term: sum of per-tensor norms (PK22, default) or "
                                       "half the squared norm.")
_HESSIAN_L2_FORM = flags.DEFINE_enum("hessian_l2_form", None, ["norms", "squared"], "The Hessian's L2 term: "
                                     "half the squared norm (default) or the sum of per-tensor norms.")
_MIXUP_ALPHA = flags.DEFINE_float("mixup_alpha", None, "Mixup of the objective's images (PK22: 1.0; 0 = off).")
_LABEL_SMOOTHING = flags.DEFINE_float("label_smoothing", None, "Of the objective's targets (PK22: 0.1).")
_LANDSCAPE_IMAGES = flags.DEFINE_integer("landscape_images", None, "Training images per landscape point "
                                         "(a multiple of 16; PK22: the whole training set).")
_LANDSCAPE_NORMALISATION = flags.DEFINE_enum("landscape_normalisation", None, ["pk22", "filter"],
                                             "Direction normalisation: PK22's normalize_filter (default) "
                                             "or Li et al.'s per output unit.")


def main(argv):
    if len(argv) > 1:
        raise ConfigError(f"unexpected arguments {argv[1:]}: pass everything as --flags")
    if _WORKDIR.value is None:
        raise ConfigError("--workdir=DIR is required")
    if not flags.FLAGS["verbosity"].present:  # quiet library logs (orbax); --verbosity=0 shows them
        logging.set_verbosity(logging.ERROR)
    import dataclasses

    from posattn import ownership  # after flag parsing: bad flags fail before jax starts
    from posattn.papers.pk22 import report as pk22_report, suite

    settings = suite.QUICK if _QUICK.value else suite.Settings()
    overrides = {"hessian_batches": _HESSIAN_BATCHES, "landscape_grid": _LANDSCAPE_GRID,
                 "noise_eps": _NOISE_EPS, "noise_band": _NOISE_BAND, "weight_decay": _WEIGHT_DECAY,
                 "landscape_l2_form": _LANDSCAPE_L2_FORM, "hessian_l2_form": _HESSIAN_L2_FORM,
                 "mixup_alpha": _MIXUP_ALPHA, "label_smoothing": _LABEL_SMOOTHING,
                 "landscape_images": _LANDSCAPE_IMAGES, "landscape_normalisation": _LANDSCAPE_NORMALISATION}
    settings = dataclasses.replace(settings, **{k: f.value for k, f in overrides.items()
                                                 if f.value is not None})
    check_seed(_SEED.value, "--seed")
    for run in _RUNS.value:
        ownership.check_run(run, "train_images")
    # its own (its trained runs resume), writable and locked, before any work
    ownership.claim(_WORKDIR.value, "how_vits_work", {"runs": _RUNS.value, "models": _MODELS.value,
                                                      "quick": _QUICK.value, "seed": _SEED.value,
                                                      "settings": dataclasses.asdict(settings)}, resumes=True)
    pk22_report.run(_WORKDIR.value, runs=_RUNS.value, models=_MODELS.value, quick=_QUICK.value,
                    settings=settings, seed=_SEED.value)


if __name__ == "__main__":
    cli.run(main)
