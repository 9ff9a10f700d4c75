r"""Train an image classifier of the JSL22 image regime (JSL22 Section 3) from a config file.

  python -m posattn.experiments.train_images --config=tpu_configs/digits.py --workdir=/tmp/digits
  python -m posattn.experiments.train_images --config=tpu_configs/cifar10.py:vanilla --workdir=DIR \
      --config.total_steps=5000 --config.data_dir=/data/tfds

`--config=FILE[:ARG]` is an ml_collections config file (see tpu_configs/); any field can be overridden
with `--config.FIELD=VALUE`. The workdir receives config.json, metrics.jsonl (one JSON object per log
or eval step) and tensorboard/ (the schema of docs/metrics.md), curves.png, summary.json and
checkpoints/; a run started on a workdir that holds a checkpoint resumes
from it. On a multi-host slice run the same command on every host; JAX detects TPU pods, Slurm and
Open MPI itself, and --coordinator_address/--num_processes/--process_id start any other cluster
(docs/distributed.md). Bad configs exit with status 2 and a
one-line message, before any heavy work.
"""

from absl import flags, logging

from posattn import cli
from posattn.errors import ConfigError
from posattn.vision import config as config_lib

_CONFIG = cli.define_config(
    "tpu_configs/digits.py", config_lib.SCHEMA, "An image config file (tpu_configs/)"
)
_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Directory for checkpoints, metrics and the summary."
)
_INITIALIZE_DISTRIBUTED = cli.define_distributed_flags()


def main(argv):
    if len(argv) > 1:
        raise ConfigError(f"unexpected arguments {argv[1:]}: pass everything as --flags")
    if _WORKDIR.value is None:
        raise ConfigError("--workdir=DIR is required")
    if not flags.FLAGS[
        "verbosity"
    ].present:  # quiet library logs (orbax, tfds); --verbosity=0 shows them
        logging.set_verbosity(logging.ERROR)
    import jax  # after flag parsing: a bad flag fails fast, before jax starts

    from posattn import io
    from posattn.vision import resume, setup, train

    _INITIALIZE_DISTRIBUTED()
    setup.resolve(
        _CONFIG.value, jax.device_count()
    )  # the whole config, before the workdir is touched
    # its own (or an unmarked run of this config), writable and locked; the trainer's own check of the
    # fields a resumed run may change follows (`posattn.vision.resume`)
    cli.claim(
        _WORKDIR.value, "train_images", _CONFIG.value, may_change=resume.RESUMABLE, resumes=True
    )
    train.train_and_evaluate(_CONFIG.value, _WORKDIR.value)
    if io.is_writer():  # the curves of the whole record (a resumed run's included)
        from posattn.plots import theory as theory_figures
        from posattn.plots import vision as figures

        config = _CONFIG.value
        records = io.read_jsonl(f"{_WORKDIR.value}/metrics.jsonl")
        kind = f" ({config.model.attention} attention)" if config.model.name == "vit" else ""
        title = f"{config.dataset}: {config.model.name}{kind}"
        theory_figures.write_png(
            figures.training_curves_figure(records, title), f"{_WORKDIR.value}/curves.png"
        )


def entry():
    """The console script (`posattn-train-images`, see pyproject.toml)."""
    cli.run(main)


if __name__ == "__main__":
    entry()
