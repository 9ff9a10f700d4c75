r"""PK22's measurements (Hessian spectra, Fourier analysis, feature variance, frequency noise, loss
landscapes) on ResNet, vanilla ViT, AlterNet and positional-attention ViT (docs/how_vits_work.md).

Command (from any directory: the binaries find tpu_configs/ in the checkout or the installed package,
`posattn.cli.find_config_file`):

  python -m posattn.experiments.how_vits_work --workdir=/tmp/pk22       # this file: trains the four
  python -m posattn.experiments.how_vits_work --config=tpu_configs/pk22.py:quick --workdir=/tmp/pk22-smoke
  python -m posattn.experiments.how_vits_work --workdir=DIR --config.runs=RUN_DIR,RUN_DIR

Hardware: one CPU (2 cores). The models (tpu_configs/how_vits_work.py) are trained to convergence
(the training loss flat over the last epoch, docs/image_results.md's criterion): on the digits the
CNNs 450 steps and the ViTs 1,350, then measured with PK22's settings, every summary number with a
95% bootstrap interval. Wall clock on 2 quiet cores with an empty compilation cache (2026-11-26,
evening, docs/how_vits_work.md, Time): the default 14.5 min, `:quick` 2.3 min (its models smaller ones
of the same kinds); the machine ran 15-40% slower that afternoon. `--config.dataset=fashion_mnist` trains the ResNet and the two ViTs on Fashion-MNIST
for 4 epochs each (a ViT about 15 CPU-minutes by tpu_configs/fashion_mnist.py's cost per step; not run
to its end yet); the committed Fashion-MNIST study measured the converged runs of docs/image_results.md
instead (`--config.runs=RUN_DIR,...`, 19 min: docs/how_vits_work.md, "Fashion-MNIST").

Fields: runs, models, dataset, training_length, quick, seed and the measurement settings, fields of posattn.papers.pk22.suite.Settings
(None: the measurement settings' own, PK22's code's); this file changes none of them.
"""

import ml_collections


def get_config(arg=None):
    if arg:
        raise ValueError(f"unknown config argument {arg!r}: this file takes only `quick`")
    # the binary's defaults, unchanged; `schema` names whose (posattn.cli.Schema.kind), so another binary refuses it
    return ml_collections.ConfigDict({"schema": "how_vits_work"})
