"""Every tpu_configs file: imports no posattn, valid at full size, runs end to end as `:quick` (8 simulated
devices, tfds mock data), documents itself; the binary turns bad configs into one line on stderr and exit
status 2."""

import ast
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow_datasets as tfds

from posattn import cli
from posattn.errors import ConfigError
from posattn.papers.lwlc23 import grid_experiment
from posattn.vision import config as config_lib
from posattn.vision import setup as setup_lib
from posattn.vision import train
from posattn.vision.data import arrays

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIGS = (
    "digits",
    "cifar10",
    "cifar100",
    "svhn",
    "imagenet",
    "permuted_cifar100",
    "fashion_mnist",
)


def load_config(name: str, arg: str | None = None):
    path = ROOT / "tpu_configs" / f"{name}.py"
    return cli.load_config(str(path), arg, config_lib.SCHEMA), ast.get_docstring(
        ast.parse(path.read_text())
    )


@pytest.mark.parametrize("path", sorted((ROOT / "tpu_configs").glob("*.py")), ids=lambda p: p.name)
def test_config_files_import_only_ml_collections_and_the_standard_library(path):
    # big_vision's rule: reading a config never imports posattn (JAX, the models, the datasets)
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.name}: relative import"
            imported.add(node.module.split(".")[0])
    assert imported <= {"ml_collections"} | set(sys.stdlib_module_names), imported


def test_a_config_file_sets_only_fields_of_the_schema(tmp_path):
    (tmp_path / "typo.py").write_text(
        "import ml_collections\n\ndef get_config():\n"
        "    return ml_collections.ConfigDict({'model': {'patchsize': 2}})\n"
    )
    with pytest.raises(
        ConfigError,
        match="typo.py: model.patchsize is not a field of an image config.*did you "
        "mean model.patch_size",
    ):
        cli.load_config(str(tmp_path / "typo.py"), None, config_lib.SCHEMA)
    (tmp_path / "typed.py").write_text(
        "import ml_collections\n\ndef get_config():\n"
        "    return ml_collections.ConfigDict({'total_steps': 'many'})\n"
    )
    with pytest.raises(ConfigError, match="typed.py: total_steps='many'"):
        cli.load_config(str(tmp_path / "typed.py"), None, config_lib.SCHEMA)


def test_alternet_token_names_the_library_default_variant():
    from posattn.vision.models import alternet

    assert load_config("digits", "alternet")[0].model.variant == alternet.DEFAULT_VARIANT


# digits:quick runs end to end on 8 devices in tests/vision/test_train.py and test_distributed.py (both
# check its 360 test examples) and in test_resume.py; the tfds configs run here on mock data.
@pytest.mark.parametrize(
    "name,arg",
    [
        ("cifar10", "quick"),
        ("cifar100", "vanilla,quick"),
        ("svhn", "quick"),
        ("imagenet", "quick"),
        ("permuted_cifar100", "4,quick"),
    ],
)
@pytest.mark.slow
def test_quick_config_runs_end_to_end_on_eight_devices(name, arg, tmp_path):
    c, _ = load_config(name, arg)
    c.total_steps, c.log_every, c.checkpoint_every = 2, 1, 0
    with tfds.testing.mock_data(num_examples=20):
        summary = train.train_and_evaluate(c, str(tmp_path))
    assert summary["devices"] == 8 and summary["steps"] == 2
    assert summary["test_examples"] == 20  # the mock splits hold 20 examples
    assert np.isfinite(summary["train_loss"]) and 0.0 <= summary["test_accuracy"] <= 1.0
    assert (tmp_path / "checkpoints" / "2").is_dir()


@pytest.mark.parametrize("name", CONFIGS)
def test_full_size_config_is_valid_and_documented(name, tmp_path):
    c, doc = load_config(name)
    c.idx_dir = str(tmp_path)  # (fashion_mnist: no IDX files there, tfds' mock data)
    with tfds.testing.mock_data(num_examples=20):
        setup = setup_lib.resolve(c, 8)
    assert setup.image_shape[0] % (c.model.patch_size or int(c.model.variant.split("/")[1])) == 0
    assert c.total_steps > c.optimizer.warmup_steps > 0
    assert f"--config=tpu_configs/{name}.py" in doc and "Hardware" in doc and "wall-clock" in doc
    assert (
        name == "digits" or "Paper (JSL22" in doc or "Published baselines" in doc
    )  # accuracies to expect


# ------------------------------------------------------------------------------ augmentation defaults

# (crop_padding, flip) of every committed image config, as they were before the "auto" defaults: each
# states them, so that no published run changes with the defaults
COMMITTED_AUGMENTATION = {
    ("digits", None): (1, False),
    ("digits", "resnet18"): (1, False),
    ("cifar10", None): (4, True),
    ("cifar100", None): (4, True),
    ("svhn", None): (4, False),
    ("imagenet", None): (-1, True),  # never run on ImageNet; its crop is the Inception crop (below)
    ("permuted_cifar100", "4"): (4, True),
    ("fashion_mnist", None): (2, True),
    ("fashion_mnist", "vit_positional,accel"): (2, True),
    ("fashion_mnist", "resnet,7"): (2, True),
    ("token_grid", None): (0, False),
    ("how_vits_work", None): (2, False),
    ("how_vits_work", "vit_vanilla,fashion_mnist"): (2, True),
}


@pytest.mark.parametrize("name,arg", list(COMMITTED_AUGMENTATION), ids=lambda v: str(v))
def test_committed_configs_state_the_augmentation_of_their_published_runs(name, arg):
    path = str(ROOT / "tpu_configs" / f"{name}.py")
    c = cli.load_config(
        path, arg, grid_experiment.SCHEMA if name == "token_grid" else config_lib.SCHEMA
    )
    assert (c.augment.crop_padding, c.augment.flip) == COMMITTED_AUGMENTATION[name, arg]


def test_base_config_on_digits_crops_one_pixel_and_does_not_flip():
    # it carried CIFAR's crop after 4 px and flips onto 8 x 8 digits: 29.2% where the digits recipe has 92.2%
    setup = setup_lib.resolve(config_lib.base_config())
    assert (setup.augment.crop_padding, setup.augment.flip) == (1, False)
    assert setup.augment_note == (
        "crop after 1 px of padding (auto: 1/8 of the 8 px side); no flip (auto: "
        "digits declares that a mirror image does not keep its label)"
    )


@pytest.mark.parametrize(
    "dataset,image_size,crop,flip",
    [
        ("cifar10", 0, 4, True),
        ("cifar100", 0, 4, True),
        ("svhn_cropped", 0, 4, False),
        ("mnist", 0, 4, False),
        ("fashion_mnist", 0, 4, True),
        ("cifar10", 16, 2, True),
        ("digit_grid/7", 0, 3, False),
        ("digits", 16, 2, False),
    ],
)
def test_auto_augmentation_scales_the_crop_and_flips_where_the_dataset_says_labels_survive(
    dataset, image_size, crop, flip, tmp_path
):
    c = config_lib.base_config()
    c.dataset, c.image_size, c.data_dir, c.idx_dir = (
        dataset,
        image_size,
        str(tmp_path),
        str(tmp_path),
    )
    c.model.variant = "test/8" if dataset.startswith("digit_grid") else "test/2"
    with tfds.testing.mock_data(num_examples=4):
        setup = setup_lib.resolve(c)
    assert (setup.augment.crop_padding, setup.augment.flip) == (crop, flip)


def test_arrays_of_your_own_are_not_flipped_unless_the_config_says_so_and_explicit_values_win():
    rng = np.random.default_rng(0)
    ds = arrays.from_arrays(
        rng.integers(0, 256, (8, 16, 16, 3), np.uint8),
        np.arange(8) % 2,
        rng.integers(0, 256, (4, 16, 16, 3), np.uint8),
        np.arange(4) % 2,
        num_classes=2,
        name="own",
    )
    c = config_lib.base_config()
    c.dataset = "own"
    auto = setup_lib.resolve(c, dataset=ds)
    assert (auto.augment.crop_padding, auto.augment.flip) == (2, False)
    assert (
        "no flip (auto: own does not declare whether a mirror image keeps its label; set "
        "augment.flip=True if it does)" in auto.augment_note
    )
    c.augment.crop_padding, c.augment.flip = 0, True
    explicit = setup_lib.resolve(c, dataset=ds)
    assert (explicit.augment.crop_padding, explicit.augment.flip) == (0, True)
    assert explicit.augment_note == "no crop (as configured); flip (as configured)"
    c.dataset, c.augment.flip = "digits", True  # a config's word wins over the dataset's too
    assert setup_lib.resolve(c).augment.flip is True
    c.augment.crop_padding = -2
    with pytest.raises(
        ConfigError, match=r"augment.crop_padding=-2: give -1 \(1/8 of the image side\) or"
    ):
        setup_lib.resolve(c)


def test_config_arguments_select_attention_model_block_and_quick():
    c, _ = load_config("cifar10", "vanilla")
    assert c.model.attention == "vanilla" and c.global_batch_size == 512
    c, _ = load_config("permuted_cifar100", "resnet18,8,quick")
    # `quick` shrinks the 32 x 32 images to 16 x 16: as many blocks per side (4), each half as wide
    assert (c.model.name, c.permute_block, c.image_size, c.total_steps) == ("resnet18", 4, 16, 4)
    c, _ = load_config("permuted_cifar100", "32,quick")  # the unpermuted baseline stays one block
    with tfds.testing.mock_data(num_examples=20):
        assert list(setup_lib.resolve(c, 8).permutation.perm) == [0]  # it resolves (it was refused)
    c, _ = load_config("imagenet", "quick")
    assert c.global_batch_size % 8 == 0 and c.image_size < 224 and c.model.variant == "test/2"
    assert c.augment.inception_crop  # ImageNet's training crop, drawn where the images are decoded
    with pytest.raises(ConfigError, match="unknown config argument '8'"):
        load_config("digits", "8")
    c, _ = load_config("digits", "locl")  # an attention kind, checked by the library (as any other)
    with pytest.raises(ConfigError, match="unknown attention 'locl'"):
        setup_lib.resolve(c, 1)


@pytest.mark.parametrize(
    "arg, model, attention",
    [
        ("vit_positional", "vit", "positional"),
        ("vit_vanilla", "vit", "vanilla"),
        ("resnet", "resnet18", None),
        ("vgg", "vgg16", None),
    ],
)
def test_fashion_mnist_has_an_argument_per_model_on_cpu_and_accelerator(arg, model, attention):
    cpu, doc = load_config("fashion_mnist", arg)
    accel, _ = load_config("fashion_mnist", f"{arg},accel")
    for c in (cpu, accel):
        assert c.model.name == model and c.model.attention == (attention or "positional")
        assert c.total_steps > c.optimizer.warmup_steps > 0 and c.dataset == "fashion_mnist"
    assert f"fashion_mnist.py:{arg}" in doc
    assert (cpu.model.variant, cpu.model.width, cpu.compute_dtype) == (
        "XS/4",
        0 if model == "vit" else 8,
        "float32",
    )
    assert (accel.model.variant, accel.model.width, accel.global_batch_size) == ("Ti/4", 0, 512)
    permuted, _ = load_config(
        "fashion_mnist", f"{arg},14"
    )  # Figure 5: blocks of whole 7 x 7 patches
    assert (permuted.permute_block, permuted.model.patch_size) == (14, 7)


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("lr", -1e-3, "optimizer.lr=-0.001 must be a positive finite number"),
        ("lr", float("inf"), "optimizer.lr=inf must be a positive finite number"),
        ("lr", float("nan"), "optimizer.lr=nan must be a positive finite number"),
        ("warmup_steps", -5, "optimizer.warmup_steps=-5 must be an integer >= 0 below 2**31"),
        ("weight_decay", -1.0, "optimizer.weight_decay=-1.0 must be a finite number >= 0"),
        ("weight_decay", float("nan"), "optimizer.weight_decay=nan must be a finite number >= 0"),
        (
            "grad_clip",
            -1.0,
            "optimizer.grad_clip=-1.0 must be a finite number >= 0 (0 = no clipping)",
        ),
        (
            "grad_clip",
            float("inf"),
            "optimizer.grad_clip=inf must be a finite number >= 0 (0 = no clipping)",
        ),
        ("b2", 1.5, "optimizer.b2=1.5 must be a number in [0, 1)"),
        ("b1", float("nan"), "optimizer.b1=nan must be a number in [0, 1)"),
    ],
)
def test_optimiser_numbers_out_of_range_or_not_finite_are_refused(field, value, message):
    c, _ = load_config("digits", "quick")
    c.optimizer[field] = value
    with pytest.raises(ConfigError, match=re.escape(message)):
        setup_lib.resolve(c, 1)


@pytest.mark.parametrize(
    "field,value",
    [
        ("total_steps", 3_000_000_000),
        ("checkpoint_every", 2**31),
        ("global_batch_size", 2**31),
        ("seed", -1),
    ],
)
def test_counts_that_do_not_fit_the_programs_int32_are_refused(field, value):
    c, _ = load_config("digits", "quick")
    c[field] = value
    with pytest.raises(
        ConfigError, match=re.escape(f"{field}={value} must be ") + ".* below 2\\*\\*31$"
    ):
        setup_lib.resolve(c, 1)


def test_a_config_of_another_schema_is_refused_naming_what_it_lacks():
    from posattn.theory.presets import preset_config

    with pytest.raises(
        ConfigError, match="the config has no augment, channel_mean, channel_std, checkpoint_every"
    ):
        setup_lib.resolve(preset_config(), 1)


def test_negative_permutation_seed_is_refused():
    c, _ = load_config("digits", "quick")
    c.permute_block, c.permute_seed = 4, -1
    with pytest.raises(ConfigError, match="permute_seed=-1 must be >= 0"):
        setup_lib.resolve(c, 1)


def run_binary(*overrides, workdir):
    cmd = [
        sys.executable,
        "-m",
        "experiments.train_images",
        "--config=tpu_configs/digits.py:quick",
        f"--workdir={workdir}",
        *overrides,
    ]
    return subprocess.run(
        cmd,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
    )


@pytest.mark.parametrize(
    "override,message",
    [
        ("--config.model.patch_size=3", "patch size 3 does not divide the image size 8"),
        ("--config.global_batch_size=12", "global_batch_size=12 does not divide by the 8 devices"),
        ("--config.dataset=no_such_set", "unknown dataset 'no_such_set'"),
        ("--config.model.name=alexnet", "unknown model name 'alexnet'"),
        ("--config.model.attention=linear", "unknown attention 'linear'"),
        ("--config.dataset=cifar10", "tfds build cifar10 --file_format=array_record"),
        (
            "--config.model.patchsize=2",
            "no such config field 'patchsize' Did you mean \"patch_size\"",
        ),
    ],
)
def test_bad_config_exits_2_with_one_line(override, message, tmp_path):
    extra = [f"--config.data_dir={tmp_path / 'tfds'}"] if "cifar10" in override else []
    result = run_binary(override, *extra, workdir=tmp_path / "run")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr
    assert not (tmp_path / "run" / "summary.json").exists()
