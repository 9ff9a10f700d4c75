"""PK22's study settings and trainings (posattn.papers.pk22): Settings validated and each field
reachable from the binary's config, the trainings checked before any starts, ordered longest first,
and the smoke run's smaller models of the same kinds; the binary's one-line error."""

import dataclasses
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

from posattn.errors import ConfigError
from posattn.papers.pk22 import claims, streams, suite
from posattn.papers.pk22 import report as pk22_report
from posattn.vision.models import features
from posattn.vision.setup import resolve


def test_settings_are_validated():
    with pytest.raises(ConfigError, match="landscape_grid=20"):
        suite.Settings(landscape_grid=20)
    with pytest.raises(
        ConfigError, match="landscape_grid=7 .* x = 0.5"
    ):  # odd, but 0.5 is no grid point
        suite.Settings(landscape_grid=7)
    with pytest.raises(ConfigError, match="hessian_batches"):
        suite.Settings(hessian_batches=0)
    # the units of the intervals: one of them would fail only after the measurement (bootstrap.interval)
    with pytest.raises(ConfigError, match="hessian_batches=1 must be >= 2"):
        suite.Settings(hessian_batches=1)
    with pytest.raises(ConfigError, match="at least 2 test images and 2 landscape batches"):
        suite.Settings(landscape_images=64)
    with pytest.raises(
        ConfigError, match="landscape_images=20 must be a multiple of landscape_batch_size=64"
    ):
        suite.Settings(landscape_images=20)
    with pytest.raises(
        ConfigError, match="landscape_batch_size=40 must be a multiple of hessian_batch_size=16"
    ):
        suite.Settings(landscape_batch_size=40, landscape_images=0)
    with pytest.raises(ConfigError, match="landscape_images=-64 must be >= 0"):
        suite.Settings(landscape_images=-64)
    with pytest.raises(ConfigError, match="the training split has 100 images"):
        streams.landscape_image_count(suite.Settings(landscape_images=128), 100)
    assert (
        streams.landscape_image_count(suite.Settings(landscape_images=0), 1437) == 1408
    )  # 22 batches of 64
    for field, value in (
        ("noise_band", "disc"),
        ("hessian_l2_form", "l1"),
        ("landscape_normalisation", "layer"),
        ("mixup_alpha", -1.0),
        ("label_smoothing", 1.0),
    ):
        with pytest.raises(ConfigError, match=field):
            suite.Settings(**{field: value})
    assert suite.QUICK.landscape_grid % 4 == 1


def test_binary_without_workdir_exits_2_with_one_line():
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.how_vits_work"], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["error: --workdir=DIR is required"]


def test_unknown_model_stops_the_report_before_any_training(tmp_path):
    # the models are trained two at a time: every config is checked before the first starts
    with pytest.raises(ConfigError, match="unknown model 'resnet50'"):
        pk22_report.run(str(tmp_path / "pk22"), models=["resnet", "resnet50"], quick=True)
    assert not (tmp_path / "pk22").exists()


def test_pipelines_start_with_the_longest_training():
    # the ViTs train 1,350 steps, the CNNs 450: started last, a ViT would train alone at the end
    configs = {
        m: pk22_report.training_config(m, quick=False) for m in pk22_report.DEFAULT_MODELS["digits"]
    }
    assert pk22_report.start_order(configs) == [
        "vit_vanilla",
        "vit_positional",
        "resnet",
        "alternet",
    ]
    quick = {
        m: pk22_report.training_config(m, quick=True) for m in pk22_report.DEFAULT_MODELS["digits"]
    }
    assert pk22_report.start_order(quick) == list(
        pk22_report.DEFAULT_MODELS["digits"]
    )  # equal: as given


def test_the_smoke_trains_smaller_models_of_the_same_kinds():
    def blocks(config):  # the sown features of the model: its stem and blocks, in order
        setup = resolve(config, 1)
        images = jnp.zeros((1, *setup.image_shape))
        return list(
            jax.eval_shape(
                lambda: features(setup.model, setup.model.init(jax.random.key(0), images), images)
            )
        )

    for model in pk22_report.DEFAULT_MODELS["digits"]:
        full, smoke = (pk22_report.training_config(model, quick) for quick in (False, True))
        assert claims.model_key(smoke) == claims.model_key(full)  # the same column of the summary
        assert smoke.total_steps == 20
        full_blocks, smoke_blocks = blocks(full), blocks(smoke)
        assert len(smoke_blocks) < len(full_blocks)
        # an attention block where the default model has one, so every tool sees every kind of layer
        assert any(b.endswith("/attention") for b in smoke_blocks) == any(
            b.endswith("/attention") for b in full_blocks
        )


PARSE_SETTINGS = """
import sys
from absl import flags
from experiments import how_vits_work  # defines its --config flag
from posattn.papers.pk22 import suite
flags.FLAGS(sys.argv)
config = flags.FLAGS.config
print(repr(suite.settings_from(config)), config.training_length, config.dataset)
"""


def test_every_measurement_knob_is_reachable_from_the_binary():
    # --config.F=V for each field of the issue-35 knobs: the binary's settings carry the value given
    given = {
        "hessian_batches": 3,
        "landscape_images": 0,
        "landscape_batch_size": 32,
        "eval_batch_size": 50,
        "test_images": 100,
        "feature_images": 40,
        "bootstrap_resamples": 300,
        "bootstrap_seed": 7,
        "weight_decay": 0.01,
        "mixup_alpha": 0.0,
    }
    argv = (
        ["x", "--config=tpu_configs/pk22.py"]
        + [f"--config.{k}={v}" for k, v in given.items()]
        + ["--config.training_length=2", "--config.dataset=fashion_mnist"]
    )
    proc = subprocess.run(
        [sys.executable, "-c", PARSE_SETTINGS, *argv[1:]], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    settings_repr, length, dataset = proc.stdout.strip().rsplit(" ", 2)
    expected = suite.Settings(
        **{k: type(getattr(suite.Settings(), k))(v) for k, v in given.items()}
    )
    assert settings_repr == repr(expected) and float(length) == 2.0 and dataset == "fashion_mnist"
    # every field of Settings has its --config field
    from posattn.papers.pk22 import how_vits_work

    schema = how_vits_work.SCHEMA.base(None)
    missing = [f.name for f in dataclasses.fields(suite.Settings) if f.name not in schema]
    assert set(missing) <= {
        "hessian_batch_size",
        "hessian_iterations",
        "hessian_tolerance",
        "top_k",
        "landscape_chunk",
    }, missing


def test_pk22_settings_refuse_lanczos_in_one_program():
    assert suite.Settings().hessian_method == suite.QUICK.hessian_method == "lanczos"
    with pytest.raises(ConfigError, match="hessian_loop='program' with hessian_method='lanczos'"):
        suite.Settings(hessian_loop="program")
    with pytest.raises(ConfigError, match="hessian_method='arnoldi' must be one of power, lanczos"):
        suite.Settings(hessian_method="arnoldi")
    assert suite.Settings(hessian_loop="program", hessian_method="power").hessian_loop == "program"
