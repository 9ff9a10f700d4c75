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

from posattn import cli
from posattn.vision import config as config_lib

cli.define_config("tpu_configs/digits.py", config_lib.SCHEMA, "An image config file (tpu_configs/)")
cli.define_workdir("Directory for checkpoints, metrics and the summary.")
cli.define_distributed_flags()


def main(config, workdir):
    import jax  # after flag parsing: a bad flag fails fast, before jax starts

    from posattn import io, metric_log
    from posattn.vision import resume, setup, train

    setup.resolve(config, jax.device_count())  # the whole config, before the workdir is touched
    # its own (or an unmarked run of this config), writable and locked; the trainer's own check of the
    # fields a resumed run may change follows (`posattn.vision.resume`)
    cli.claim(
        workdir,
        "train_images",
        config,
        may_change=resume.RESUMABLE,
        resumes=True,
        complete=config_lib.SCHEMA.complete,
    )
    train.train_and_evaluate(config, workdir)
    if io.is_writer():  # the curves of the whole record (a resumed run's included)
        from posattn.plots import save_png
        from posattn.plots import vision as figures

        records = metric_log.read(workdir)
        kind = f" ({config.model.attention} attention)" if config.model.name == "vit" else ""
        title = f"{config.dataset}: {config.model.name}{kind}"
        save_png(figures.training_curves_figure(records, title), f"{workdir}/curves.png")


def entry():
    """The console script (`posattn-train-images`, see pyproject.toml)."""
    cli.run(main)


if __name__ == "__main__":
    entry()
