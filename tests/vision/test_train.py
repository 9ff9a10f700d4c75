"""The sharded train step and loop: golden values, 1 vs 8 devices, exact-once evaluation, divergence."""

import dataclasses
import json
import pathlib

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import tensorflow_datasets as tfds

from posattn import cli
from posattn.errors import ConfigError
from posattn.mesh import batch_sharding, data_mesh, global_batch, replicated
from posattn.vision import checkpoint, optim, runs, train, train_step
from posattn.vision import config as config_lib
from posattn.vision.data import channel_stats, datasets, permutation
from posattn.vision.setup import resolve
from posattn.vision.state import init_state

ROOT = pathlib.Path(__file__).resolve().parents[2]


def load_config(name: str, arg: str | None = None):
    return cli.load_config(str(ROOT / "tpu_configs" / f"{name}.py"), arg, config_lib.SCHEMA)


def tiny_digits(**overrides):
    """digits:quick (ViT test/2, batch 16) with the digits crop, made a bit longer where asked."""
    c = load_config("digits", "quick")
    c.checkpoint_every = 0
    for key, value in overrides.items():
        target, *path = key.split("__")
        node = c
        for p in [target, *path][:-1]:
            node = node[p]
        node[[target, *path][-1]] = value
    return c


def test_one_step_golden_values():
    """Loss and a parameter checksum after one step on a fixed input, pinned (CPU, float32)."""
    c = tiny_digits(total_steps=10, optimizer__warmup_steps=0)
    mesh = data_mesh(jax.devices()[:1])
    setup = resolve(c, 1)
    hyper = train_step.step_hyperparameters(c)
    tx = optim.make_optimizer(c.optimizer, hyper)
    state = jax.jit(
        lambda: init_state(setup.model, setup.image_shape, c.seed, tx),
        out_shardings=replicated(mesh),
    )()
    images = (np.arange(16 * 8 * 8).reshape(16, 8, 8, 1) * 7 % 256).astype(np.uint8)
    batch = {"image": jnp.asarray(images), "label": jnp.asarray(np.arange(16) % 10, jnp.int32)}
    step = jax.jit(train_step.make_train_step(setup))
    init_params = jax.tree.map(
        np.asarray, state["params"]
    )  # the step donates nothing here, but copy anyway
    new_state, metrics = step(state, batch, hyper)
    update_norm = float(
        optax.tree.norm(jax.tree.map(lambda a, b: a - b, new_state["params"], init_params))
    )
    checksum = float(
        sum(jnp.sum(x * (i + 1)) for i, x in enumerate(jax.tree.leaves(new_state["params"])))
    )
    assert int(new_state["step"]) == 1
    assert float(metrics["lr"]) == pytest.approx(
        1e-3
    )  # no warm-up: the first step runs at the peak
    # The classifier head starts at zero (uniform logits): the first loss is exactly log(10).
    np.testing.assert_allclose(float(metrics["loss"]), np.log(10.0), rtol=1e-6)
    _, metrics2 = step(new_state, batch, hyper)
    # Another seed, schedule and lr run on the same compiled step: they are arguments, not constants.
    other = {
        **hyper,
        "seed": np.int32(5),
        "total_steps": np.int32(40),
        "warmup_steps": np.int32(4),
        "lr": np.float32(3e-4),
    }
    _, metrics3 = step(new_state, batch, other)
    assert step._cache_size() == 1
    np.testing.assert_allclose(
        float(metrics3["lr"]), 3e-4 * 1 / 4, rtol=1e-6
    )  # step 1 of a 4-step warm-up
    np.testing.assert_allclose(checksum, GOLDEN_CHECKSUM, rtol=1e-5)
    np.testing.assert_allclose(update_norm, GOLDEN_UPDATE_NORM, rtol=1e-5)
    np.testing.assert_allclose(float(metrics2["loss"]), GOLDEN_SECOND_LOSS, rtol=1e-5)


GOLDEN_CHECKSUM = 3559.396240234375
GOLDEN_SECOND_LOSS = 2.3001608848571777
# About lr * sqrt(330) = 0.018166: Adam's first step moves each parameter with a gradient by lr, and only
# the head's 32 x 10 + 10 have one (it starts at zero, so nothing flows back through it); weight decay
# on the other, non-zero kernels adds the rest.
GOLDEN_UPDATE_NORM = 0.018197745084762573


def test_training_images_are_augmented_then_permuted():
    plain = tiny_digits(augment__flip=True)  # crop (1 pixel of padding) and flip, both geometric
    permuted = tiny_digits(augment__flip=True, permute_block=2, permute_seed=3)
    perm = permutation.block_permutation((8, 8), 2, seed=3)
    setup = resolve(plain, 1)
    images = jnp.asarray(np.random.default_rng(0).integers(0, 256, (16, 8, 8, 1), dtype=np.uint8))
    key = jax.random.key(1)
    augmented = setup.training_inputs(key, images)
    got = resolve(permuted, 1).training_inputs(key, images)
    np.testing.assert_array_equal(got, permutation.permute_blocks(augmented, 2, perm))
    # the other order differs: a crop or flip of a permuted image moves pixels across blocks
    other = setup.training_inputs(key, permutation.permute_blocks(images, 2, perm))
    assert not np.array_equal(np.asarray(got), np.asarray(other))
    # without crop or flip the order does not matter: unaugmented permuted runs are what they were
    still, still_permuted = (
        tiny_digits(augment__crop_padding=0),
        tiny_digits(augment__crop_padding=0, permute_block=2, permute_seed=3),
    )
    np.testing.assert_array_equal(
        resolve(still_permuted, 1).training_inputs(key, images),
        resolve(still, 1).training_inputs(key, permutation.permute_blocks(images, 2, perm)),
    )


@pytest.mark.slow
def test_one_and_eight_devices_give_the_same_parameters(tmp_path):
    c = tiny_digits(total_steps=6, log_every=3)
    state1, summary1 = train.train(c, tmp_path / "one", devices=jax.devices()[:1])
    state8, summary8 = train.train(c, tmp_path / "eight")
    assert (summary1["devices"], summary8["devices"]) == (1, 8)
    # atol: the attention key biases have a zero gradient up to rounding, which Adam scales up (see
    # test_distributed); every other leaf agrees to ~1e-7.
    for a, b in zip(jax.tree.leaves(state1["params"]), jax.tree.leaves(state8["params"])):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=2e-5)
    assert jax.tree.leaves(state8["params"])[0].sharding.is_fully_replicated
    np.testing.assert_allclose(summary1["train_loss"], summary8["train_loss"], rtol=1e-5)


def test_non_finite_loss_stops_the_run_naming_the_step_and_keeps_the_last_checkpoint(tmp_path):
    good = tiny_digits(total_steps=4, checkpoint_every=4)  # the step program of the test below
    train.train(good, tmp_path)
    bad = tiny_digits(total_steps=6, checkpoint_every=1, optimizer__lr=1e30)  # diverges at once
    with pytest.raises(
        train.NonFiniteLoss, match=r"at step 5; .*last good checkpoint \(step 4\)"
    ) as err:
        train.train(
            bad, tmp_path
        )  # resumes at step 4; the first update (step 5) breaks the parameters
    assert isinstance(err.value, ConfigError) and "\n" not in str(err.value)
    steps = sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit())
    assert steps == [4]


def test_outputs_and_an_evaluation_that_counts_each_example_once(tmp_path, capsys):
    # 360 test digits in global eval batches of 48: 8 batches, the last one padded and masked.
    c = tiny_digits(
        total_steps=4,
        log_every=2,
        eval_every=2,
        checkpoint_every=2,
        keep_checkpoints=1,
        eval_batch_size=48,
    )
    state, summary = train.train(c, str(tmp_path))
    # the augmentation applied, in the log, the summary and run.json
    applied = "crop after 1 px of padding (as configured); no flip (as configured)"
    assert (
        f"augmentation: {applied}\n" in capsys.readouterr().out
        and summary["augmentation"] == applied
    )
    assert json.loads((tmp_path / "run.json").read_text())["augment"] == {
        "crop_padding": 1,
        "flip": False,
        "randaugment_layers": 0,
        "randaugment_magnitude": 9,
        "mixup_alpha": 0.0,
        "cutmix_alpha": 0.0,
    }
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written.pop("checkpoints_moved_aside") == summary.pop("checkpoints_moved_aside") == []
    assert written.pop("mesh") == summary.pop("mesh") == {"data": 8, "fsdp": 1, "model": 1}
    assert written == pytest.approx(summary)
    for key in ("test_accuracy", "train_loss", "steps", "seconds", "images_per_second"):
        assert summary[key] is not None
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(m["step"], "train_loss" in m, "test_accuracy" in m) for m in lines] == [
        (2, True, False),
        (2, False, True),
        (4, True, False),
        (4, False, True),
    ]
    assert json.loads((tmp_path / "config.json").read_text())["model"]["variant"] == "test/2"
    assert [p.name for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit()] == ["4"]
    # loading a run to look at it leaves alone the save a training run may have in flight there
    in_flight = tmp_path / "checkpoints" / "6.orbax-checkpoint-tmp-1700000000000000"
    in_flight.mkdir()
    restored = runs.restore_run(tmp_path)[1]
    assert int(restored["step"]) == 4 and in_flight.exists()

    assert summary["test_examples"] == datasets.dataset_info("digits").num_test == 360
    # The same accuracy from one unsharded forward pass over the whole test split, of the run loaded
    # from its workdir alone
    split = datasets.open_split("digits", "test")
    images, labels = split.read(np.arange(split.num_examples))
    info = datasets.dataset_info("digits")
    model, variables, config, preprocess = runs.load_run(tmp_path)
    assert (
        config.to_dict() == c.to_dict() and set(variables) == {"params"} and preprocess.info == info
    )
    logits = model.apply(variables, preprocess(images), train=False)
    direct = float(np.mean(np.argmax(np.asarray(logits), -1) == labels))
    assert summary["test_accuracy"] == pytest.approx(direct, abs=1e-9)


@pytest.mark.slow
def test_a_run_loads_from_its_workdir_without_its_data(tmp_path, monkeypatch):
    c = load_config("cifar10", "quick")
    c.augment.randaugment_layers, c.total_steps, c.checkpoint_every = 0, 2, 0
    with tfds.testing.mock_data(num_examples=20):
        state, _ = train.train(c, str(tmp_path), devices=jax.devices()[:1])
    monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path / "no_data"))
    with pytest.raises(ConfigError, match="not prepared"):  # the dataset really is out of reach now
        resolve(c, 1)
    assert json.loads((tmp_path / "run.json").read_text()) == {
        "name": "cifar10",
        "num_classes": 10,
        "image_shape": [16, 16, 3],
        "num_train": 20,
        "num_test": 20,
        "mean": list(channel_stats.KNOWN["cifar10"][0]),
        "std": list(channel_stats.KNOWN["cifar10"][1]),
        "pixels": "uint8",
        "jax_devices": [
            str(d) for d in jax.devices()
        ],  # every device, not only those it trained on
        "augment": {
            "crop_padding": 4,
            "flip": True,
            "randaugment_layers": 0,
            "randaugment_magnitude": 9,
            "mixup_alpha": 0.0,
            "cutmix_alpha": 0.0,
        },
    }
    images = np.random.default_rng(0).standard_normal((3, 16, 16, 3)).astype(np.float32)
    model, variables, config, _ = runs.load_run(tmp_path)
    assert config.dataset == "cifar10" and model.num_classes == 10
    for a, b in zip(jax.tree.leaves(variables["params"]), jax.tree.leaves(state["params"])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    logits = model.apply(variables, images, train=False)
    assert logits.shape == (3, 10) and np.isfinite(logits).all()
    (tmp_path / "run.json").unlink()  # a workdir written before run.json existed loads the same
    model_old, variables_old, *_ = runs.load_run(tmp_path)
    np.testing.assert_array_equal(model_old.apply(variables_old, images, train=False), logits)


class TinyBatchNormNet(nn.Module):
    """A conv + batch norm classifier: the smallest model with "batch_stats" (the CNNs' code path)."""

    @nn.compact
    def __call__(self, x, train: bool):
        x = nn.Conv(4, (3, 3))(x)
        x = nn.BatchNorm(use_running_average=not train, momentum=0.9)(x)
        return nn.Dense(10)(jnp.mean(nn.relu(x), axis=(1, 2)))


@pytest.mark.slow
def test_batch_norm_statistics_are_global_over_the_sharded_batch_and_checkpointed(tmp_path):
    c = tiny_digits(total_steps=4)
    setup = dataclasses.replace(resolve(c, 1), model=TinyBatchNormNet())
    hyper = train_step.step_hyperparameters(c)
    tx = optim.make_optimizer(c.optimizer, hyper)
    batch = next(setup.train_batches())
    init = lambda: init_state(setup.model, setup.image_shape, c.seed, tx)  # noqa: E731
    states = []
    for devices in (jax.devices()[:1], jax.devices()):
        mesh = data_mesh(devices)
        repl = replicated(mesh)
        state = jax.jit(init, out_shardings=repl)()
        step = jax.jit(
            train_step.make_train_step(setup),
            in_shardings=(repl, batch_sharding(mesh), repl),
            out_shardings=(repl, repl),
            donate_argnums=(0,),
        )
        for _ in range(2):
            state, _ = step(state, global_batch(batch, mesh), hyper)
        states.append(state)
    one, eight = (s["batch_stats"]["BatchNorm_0"] for s in states)
    assert float(jnp.abs(eight["mean"]).sum()) > 0  # the running statistics moved
    for k in ("mean", "var"):  # statistics of the global batch, not of each device's shard
        np.testing.assert_allclose(np.asarray(one[k]), np.asarray(eight[k]), rtol=1e-5, atol=1e-6)
    mngr = checkpoint.manager(str(tmp_path), keep=1)
    checkpoint.save(mngr, states[1])
    mngr.wait_until_finished()
    abstract = checkpoint.abstract_like(jax.eval_shape(init), replicated(data_mesh()))
    restored = checkpoint.restore(mngr, abstract)
    mngr.close()
    assert int(restored["step"]) == 2
    np.testing.assert_array_equal(
        np.asarray(restored["batch_stats"]["BatchNorm_0"]["var"]), np.asarray(eight["var"])
    )


def test_resolve_rejects_a_batch_that_does_not_divide_by_the_devices():
    with pytest.raises(ConfigError, match="global_batch_size=12 does not divide by the 8 devices"):
        resolve(tiny_digits(global_batch_size=12), 8)
    with pytest.raises(ConfigError, match="compute_dtype"):
        resolve(tiny_digits(compute_dtype="float8"), 8)
    with pytest.raises(ConfigError, match=r"seed=-1 must be an integer >= 0 below 2\*\*31"):
        resolve(tiny_digits(seed=-1), 8)


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("randaugment_magnitude", 11, r"randaugment_magnitude must lie in \[0, 10\], got 11"),
        ("randaugment_layers", -1, r"augment.randaugment_layers \(-1\)"),
        ("mixup_alpha", -0.5, r"augment.mixup_alpha \(-0.5\)"),
    ],
)
def test_resolve_rejects_augmentation_out_of_range_before_any_tracing(field, value, message):
    c = tiny_digits(augment__randaugment_layers=1)
    c.augment[field] = value
    with pytest.raises(ConfigError, match=message):
        resolve(c, 8)


def test_schedule_warms_up_linearly_then_decays_to_zero_and_decays_only_kernels():
    c = tiny_digits(total_steps=100, optimizer__warmup_steps=10, optimizer__lr=1e-3)
    lr = jax.jit(optim.learning_rate)
    hyper = optim.hyperparameters(c.optimizer, c.total_steps)
    np.testing.assert_allclose(
        [float(lr(hyper, t)) for t in (0, 5, 10, 55, 100)], [0.0, 5e-4, 1e-3, 5e-4, 0.0], atol=1e-9
    )
    # optax's schedule with the same numbers, to float32 round-off, warm-up longer than the run included.
    for warmup, total in ((10, 100), (0, 7), (30, 20)):
        hyper = optim.hyperparameters(tiny_digits(optimizer__warmup_steps=warmup).optimizer, total)
        w = min(warmup, total)
        reference = optax.warmup_cosine_decay_schedule(0.0, 1e-3, w, max(total, w + 1))
        steps = np.arange(total + 3)
        np.testing.assert_allclose(
            [float(lr(hyper, t)) for t in steps],
            [float(reference(t)) for t in steps],
            rtol=0,
            atol=1e-3 * 1e-6,
        )  # round-off of the peak lr
    params = {
        "dense": {"kernel": jnp.ones((2, 2)), "bias": jnp.ones(2)},
        "pos_embedding": jnp.ones((4, 2)),
    }
    assert optim.decay_mask(params) == {
        "dense": {"kernel": True, "bias": False},
        "pos_embedding": False,
    }


def test_the_loss_refuses_labels_that_broadcast_or_lie_outside_the_classes():
    # a (1,) label broadcast over the batch, and one_hot made a label counted from 1 (here 10) a zero
    # target: both gave a finite loss of another problem without a word
    setup = resolve(tiny_digits(), 1)
    params = setup.model.init(jax.random.key(0), jnp.zeros((1, 8, 8, 1)))["params"]
    images = jnp.zeros((4, 8, 8, 1))
    loss = lambda labels: setup.loss_fn(params, {}, images, jnp.asarray(labels), None, False)[0]  # noqa: E731
    with pytest.raises(
        ConfigError, match=r"labels of shape \(1,\) for 4 images of 10 classes: give \(4,\) class "
    ):
        loss([3])
    with pytest.raises(
        ConfigError, match=r"labels in \[1, 10\]: class indices lie in \[0, 10\) \(labels counted"
    ):
        loss([1, 2, 3, 10])
    assert np.isfinite(loss([0, 1, 2, 9])) and np.isfinite(loss(np.eye(10)[:4]))
    assert np.isfinite(
        jax.jit(loss)(jnp.asarray([0, 1, 2, 9]))
    )  # traced: the shape is still checked
