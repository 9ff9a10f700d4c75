"""The named mesh of the image trainer and the sharding rules of its train state (posattn.vision.sharding)."""

import json

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from posattn.errors import ConfigError
from posattn.metric_log import read as read_metrics
from posattn.vision import checkpoint, optim, sharding, train, train_step
from posattn.vision.setup import resolve
from posattn.vision.state import init_state
from tests.vision.test_train import tiny_digits


def mesh_cfg(data, fsdp, model):
    return {"data": data, "fsdp": fsdp, "model": model}


def test_mesh_shape_takes_the_rest_and_refuses_what_does_not_make_the_device_count():
    assert sharding.mesh_shape(mesh_cfg(-1, 1, 1), 8) == (8, 1, 1)
    assert sharding.mesh_shape(mesh_cfg(2, -1, 2), 8) == (2, 2, 2)
    assert sharding.mesh_shape(mesh_cfg(1, 4, 2), 8) == (1, 4, 2)
    for cfg, message in [
        (mesh_cfg(2, 2, 1), r"= 4 devices, but the run has 8"),
        (mesh_cfg(-1, -1, 1), r"mesh.data and mesh.fsdp are both -1"),
        (mesh_cfg(3, -1, 1), r"take 3 devices, which do not divide the 8"),
        (mesh_cfg(0, 1, 1), r"mesh.data=0 must be a positive integer or -1"),
        (mesh_cfg(2.0, 4, 1), r"mesh.data=2.0 must be"),
        (mesh_cfg(True, 8, 1), r"mesh.data=True must be"),
    ]:
        with pytest.raises(ConfigError, match=message):
            sharding.mesh_shape(cfg, 8)


def test_a_model_axis_is_refused_for_a_model_without_tensor_parallel_rules():
    mesh = sharding.make_mesh(mesh_cfg(1, 4, 2))
    sharding.check_model("vit", mesh)
    with pytest.raises(ConfigError, match=r"model.name='resnet' has no tensor-parallel rules"):
        sharding.check_model("resnet", mesh)


def abstract_state(c, mesh):
    setup = resolve(c, sharding.batch_shards(mesh))
    hyper = train_step.step_hyperparameters(c)
    tx = optim.make_optimizer(c.optimizer, hyper)
    shapes = jax.eval_shape(lambda: init_state(setup.model, setup.image_shape, c.seed, tx))
    return checkpoint.abstract_like(shapes, sharding.state_shardings(shapes, mesh))


def test_the_rules_split_heads_and_hidden_units_over_model_and_the_largest_axis_over_fsdp():
    c = tiny_digits(model__attention="vanilla")  # test/2: width 32, 2 heads of 16, MLP 64
    state = abstract_state(c, sharding.make_mesh(mesh_cfg(1, 4, 2)))
    specs = {
        jax.tree_util.keystr(path, simple=True, separator="/"): x.sharding.spec
        for path, x in jax.tree_util.tree_flatten_with_path(state)[0]
    }
    block = "params/block_0/"
    assert specs[block + "attn/qkv/kernel"] == P("fsdp", None, "model", None)  # (32, 3, 2, 16)
    assert specs[block + "attn/out/kernel"] == P("model", None, "fsdp")  # (2, 16, 32)
    assert specs[block + "mlp/fc1/kernel"] == P("fsdp", "model")  # (32, 64)
    assert specs[block + "mlp/fc2/kernel"] == P("model", "fsdp")  # (64, 32)
    assert specs[block + "mlp/fc1/bias"] == P("model")  # (64,): model took the only axis
    assert specs[block + "norm1/scale"] == P(("fsdp", "model"))  # no model rule: over both
    assert specs["params/pos_embedding"] == P(None, ("fsdp", "model"))  # (16, 32)
    assert specs["params/head/bias"] == P(None)  # 10 classes do not divide by 4
    assert specs["step"] == P()
    # Adam's moments are sharded as their parameters are.
    moments = {name: spec for name, spec in specs.items() if name.startswith("opt_state")}
    for name, spec in moments.items():
        if name.endswith(block + "attn/qkv/kernel"):
            assert spec == specs[block + "attn/qkv/kernel"]
    assert sum(name.endswith("attn/qkv/kernel") for name in moments) == 2 * 2  # mu, nu per block


def test_the_state_per_device_falls_as_one_over_fsdp_times_model():
    c = tiny_digits()
    whole = sharding.bytes_per_device(abstract_state(c, sharding.make_mesh(mesh_cfg(8, 1, 1))))
    for shape in [(1, 8, 1), (2, 2, 2), (1, 4, 2), (2, 4, 1)]:
        split = shape[1] * shape[2]
        got = sharding.bytes_per_device(abstract_state(c, sharding.make_mesh(mesh_cfg(*shape))))
        # within 10% of total / split: the leaves of an axis that does not divide stay whole
        assert whole / split <= got <= 1.1 * whole / split, (shape, got, whole)


@pytest.mark.slow
def test_a_vit_trains_to_the_same_losses_on_any_mesh(tmp_path):
    """20 steps of the positional ViT on meshes (8,1,1), (1,8,1), (2,2,2), (1,4,2): the same losses to
    float32 rounding (reductions in another order), and the state per device as the mesh splits it."""
    losses, summaries = {}, {}
    for shape in [(8, 1, 1), (1, 8, 1), (2, 2, 2), (1, 4, 2)]:
        c = tiny_digits(total_steps=20, log_every=1, checkpoint_every=10)
        c.mesh.data, c.mesh.fsdp, c.mesh.model = shape
        workdir = tmp_path / "x".join(map(str, shape))
        summaries[shape] = train.train(c, str(workdir))[1]
        losses[shape] = [r["train_loss"] for r in read_metrics(workdir) if "train_loss" in r]
        assert json.loads((workdir / "summary.json").read_text())["mesh"] == dict(
            zip(sharding.AXES, shape)
        )
    reference = np.array(losses[(8, 1, 1)])
    assert len(reference) == 20 and reference[-1] < reference[0]
    for shape, got in losses.items():
        np.testing.assert_allclose(got, reference, rtol=2e-5, err_msg=str(shape))
    whole = summaries[(8, 1, 1)]["state_bytes_per_device"]
    for shape, summary in summaries.items():
        split = shape[1] * shape[2]
        assert whole / split <= summary["state_bytes_per_device"] <= 1.1 * whole / split


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet18", "vgg16"])
def test_the_cnns_take_fsdp(tmp_path, name):
    """ResNet-18 and VGG-16 (BatchNorm over the global batch) on (2, 4, 1): the losses of (8, 1, 1),
    a quarter of the state per device."""
    losses, state = {}, {}
    for shape in [(8, 1, 1), (2, 4, 1)]:
        c = tiny_digits(total_steps=6, log_every=1, model__name=name, model__width=8)
        c.mesh.data, c.mesh.fsdp, c.mesh.model = shape
        workdir = tmp_path / "x".join(map(str, shape))
        state[shape] = train.train(c, str(workdir))[1]["state_bytes_per_device"]
        losses[shape] = [r["train_loss"] for r in read_metrics(workdir) if "train_loss" in r]
    np.testing.assert_allclose(losses[(2, 4, 1)], losses[(8, 1, 1)], rtol=2e-5)
    assert state[(8, 1, 1)] / 4 <= state[(2, 4, 1)] <= 1.1 * state[(8, 1, 1)] / 4
