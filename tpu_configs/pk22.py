r"""PK22's measurements (Hessian spectra, Fourier analysis, feature variance, frequency noise, loss
landscapes) on ResNet, vanilla ViT, AlterNet and positional-attention ViT (docs/how_vits_work.md).

Command (from any directory: the binaries find tpu_configs/ in the checkout or the installed package,
`posattn.cli.find_config_file`):

  python -m posattn.experiments.how_vits_work --workdir=/tmp/pk22       # this file: trains the four
  python -m posattn.experiments.how_vits_work --config=tpu_configs/pk22.py:quick --workdir=/tmp/pk22-smoke
  python -m posattn.experiments.how_vits_work --workdir=DIR --config.runs=RUN_DIR,RUN_DIR

Hardware: one CPU (2 cores). Expected wall-clock: the four models train in 46-90 s each, two at a time
(tpu_configs/how_vits_work.py), then the measurements, minutes in all; `:quick` (20 training steps and
small measurements) a smoke run of the whole pipeline. Expected result (docs/how_vits_work.md): test
accuracy ResNet 99.2%, AlterNet 98.6%, positional ViT 88.9%, vanilla ViT 77.5%, and summary.md sets
PK22's claims beside our numbers.

Fields: runs, models, quick, seed and the measurement settings, fields of posattn.papers.pk22.suite.Settings
(None: the measurement settings' own, PK22's code's); this file changes none of them.
"""
import ml_collections


def get_config(arg=None):
    if arg:
        raise ValueError(f"unknown config argument {arg!r}: this file takes only `quick`")
    # The binary's defaults, unchanged; naming its schema makes another binary refuse this file (a file that
    # sets no field would fit any schema and run that binary's defaults).
    return ml_collections.ConfigDict({"schema": "how_vits_work"})
