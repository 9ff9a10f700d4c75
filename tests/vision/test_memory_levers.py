"""The memory levers of issue 48 (model.remat, model.scan_layers, optimizer.accumulate_steps,
optimizer.mu_dtype): each changes the compiled step's memory and not its numbers (to float32 rounding),
their defaults leave the parameter names and the program as they were, and bad values are refused."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posattn.errors import ConfigError
from posattn.mesh import batch_sharding, data_mesh, replicated
from posattn.vision import losses, models, optim, train_step, warm_start
from posattn.vision.models import vit
from posattn.vision.setup import resolve
from posattn.vision.state import init_state
from tests.vision.test_train import tiny_digits

# a ViT whose activations outweigh its parameters, so that keeping fewer of them shows in the temp
SHAPE = dict(
    num_classes=10, image_size=16, patch_size=2, width=16, depth=3, num_heads=2, mlp_dim=32
)


def _images_labels(batch=16, side=16):
    x = jax.random.normal(jax.random.key(1), (batch, side, side, 3))
    return x, jax.nn.one_hot(jnp.arange(batch) % 10, 10)


def _loss_grad(model, params, x, y):
    """(the compiled value-and-grad of the training loss, its (loss, grads) at `params`)."""
    fn = jax.value_and_grad(
        lambda p, x, y: losses.classification_loss(model, p, {}, x, y, None, True)[0]
    )
    compiled = jax.jit(fn).lower(params, x, y).compile()
    return compiled, compiled(params, x, y)


@pytest.mark.slow
def test_remat_same_loss_and_grads_and_less_temp_memory():
    """remat="block" and a policy give the loss and gradients of "none"; with the blocks scanned (where
    the CPU backend keeps the recomputation in the backward pass: docs/benchmarks.md) they need less
    temporary memory, "block" (only each block's input saved) the least."""
    x, y = _images_labels()
    params = vit.ViT(**SHAPE).init(jax.random.key(0), x[:1])["params"]
    stacked = vit.stack_blocks(params, SHAPE["depth"])
    temps = {}
    for scan in (False, True):
        p = stacked if scan else params
        _, (loss0, grads0) = _loss_grad(vit.ViT(**SHAPE, scan_layers=scan), p, x, y)
        for remat in ("none", "block", "dots_with_no_batch_dims_saveable"):
            compiled, (loss, grads) = _loss_grad(
                vit.ViT(**SHAPE, remat=remat, scan_layers=scan), p, x, y
            )
            temps[scan, remat] = compiled.memory_analysis().temp_size_in_bytes
            np.testing.assert_allclose(loss, loss0, rtol=1e-6)
            for g, g0 in zip(jax.tree.leaves(grads), jax.tree.leaves(grads0)):
                np.testing.assert_allclose(g, g0, rtol=1e-5, atol=1e-7)
    assert temps[True, "block"] < temps[True, "dots_with_no_batch_dims_saveable"]
    assert temps[True, "dots_with_no_batch_dims_saveable"] < 0.5 * temps[True, "none"]


def test_default_levers_keep_the_parameter_names():
    """remat and scan_layers off: the loop's "block_{i}" parameters of before (checkpoints restore);
    remat on: the same names; scan_layers: one "blocks" of stacked leaves."""
    x, _ = _images_labels()
    names = lambda model: sorted(model.init(jax.random.key(0), x[:1])["params"])
    loop = names(vit.ViT(**SHAPE))
    assert loop == sorted(
        ["embedding", "pos_embedding", "encoder_norm", "head"] + [f"block_{i}" for i in range(3)]
    )
    assert names(vit.ViT(**SHAPE, remat="block")) == loop
    scanned = vit.ViT(**SHAPE, scan_layers=True).init(jax.random.key(0), x[:1])["params"]
    assert sorted(scanned) == sorted(
        ["embedding", "pos_embedding", "encoder_norm", "head", "blocks"]
    )
    assert scanned["blocks"]["mlp"]["fc1"]["kernel"].shape == (3, 16, 32)


@pytest.mark.parametrize("pos_shared", [True, False])
def test_scan_layers_computes_the_loops_features_and_maps(pos_shared):
    """From the same (stacked) parameters the scanned ViT gives the loop's logits, sown features and
    attention maps, with a shared P or one per block (scanned over), and back by `unstack_blocks`."""
    x, _ = _images_labels(4)
    loop = vit.ViT(**SHAPE, pos_shared=pos_shared)
    scan = vit.ViT(**SHAPE, pos_shared=pos_shared, scan_layers=True)
    params = loop.init(jax.random.key(0), x[:1])["params"]
    stacked = {"params": vit.stack_blocks(params, 3)}
    np.testing.assert_allclose(
        scan.apply(stacked, x), loop.apply({"params": params}, x), rtol=1e-5, atol=1e-6
    )
    f_loop, f_scan = models.features(loop, {"params": params}, x), models.features(scan, stacked, x)
    assert list(f_scan) == list(f_loop) and len(f_loop) == 7
    for name in f_loop:
        np.testing.assert_allclose(f_scan[name], f_loop[name], rtol=1e-5, atol=1e-5)
    m_loop = models.attention_maps(loop, {"params": params}, x)
    m_scan = models.attention_maps(scan, stacked, x)
    assert list(m_scan) == list(m_loop) == [f"block_{i:02d}" for i in range(3)]
    for name in m_loop:
        np.testing.assert_allclose(m_scan[name], m_loop[name], rtol=1e-5, atol=1e-6)
    back = vit.unstack_blocks(stacked["params"])
    assert jax.tree.structure(back) == jax.tree.structure(params)
    assert all(jax.tree.leaves(jax.tree.map(np.array_equal, back, params)))


def test_a_warm_start_crosses_between_loop_and_scan_layouts():
    """init_from a loop run into a scan_layers run (and back) copies every block's parameters."""
    x, _ = _images_labels(1)
    loop_params = vit.ViT(**SHAPE).init(jax.random.key(0), x)["params"]
    scan_fresh = vit.ViT(**SHAPE, scan_layers=True).init(jax.random.key(1), x)["params"]
    scanned = warm_start.transfer(scan_fresh, loop_params)
    assert jax.tree.all(jax.tree.map(np.array_equal, scanned, vit.stack_blocks(loop_params, 3)))
    looped = warm_start.transfer(jax.tree.map(jnp.zeros_like, loop_params), scanned)
    assert jax.tree.all(jax.tree.map(np.array_equal, looped, loop_params))


def _train(c, steps: int, params=None, batch_size=16):
    """Losses of `steps` train steps of config `c` on fixed batches (on one device), from `params`
    where given (with a fresh optimizer state), and the final state."""
    setup = resolve(c, 1)
    hyper = train_step.step_hyperparameters(c)
    tx = optim.make_optimizer(c.optimizer, hyper)
    state = jax.jit(lambda: init_state(setup.model, setup.image_shape, c.seed, tx))()
    if params is not None:
        state = {**state, "params": params, "opt_state": tx.init(params)}
    step = jax.jit(train_step.make_train_step(setup))
    rng = np.random.default_rng(0)
    out = []
    for _ in range(steps):
        batch = {
            "image": jnp.asarray(rng.integers(0, 256, (batch_size, 8, 8, 1), dtype=np.uint8)),
            "label": jnp.asarray(rng.integers(0, 10, (batch_size,)), jnp.int32),
        }
        state, metrics = step(state, batch, hyper)
        out.append(float(metrics["loss"]))
    return np.array(out), state


@pytest.mark.slow
def test_scan_layers_trains_as_the_loop():
    """Three train steps of the scanned ViT from the loop's initial parameters (stacked): the loop's
    losses and parameters, to float32 rounding."""
    c = tiny_digits(total_steps=10, optimizer__warmup_steps=0)
    loop_losses, loop_state = _train(c, 3)
    _, init = _train(c, 0)
    depth = resolve(c, 1).model.depth
    c.model.scan_layers = True
    scan_losses, scan_state = _train(c, 3, params=vit.stack_blocks(init["params"], depth))
    np.testing.assert_allclose(scan_losses, loop_losses, rtol=1e-5)
    # atol: Adam divides by sqrt(nu), so a gradient of rounding size (a zero-started head, biases)
    # moves its parameter by up to lr x its sign; 1e-5 is 1% of lr = 1e-3
    stacked = vit.stack_blocks(loop_state["params"], depth)
    for a, b in zip(jax.tree.leaves(scan_state["params"]), jax.tree.leaves(stacked)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_accumulate_steps_equal_one_batch():
    """k = 4 micro-batches of 4 give the update of one batch of 16 (ViT, no dropout): the same losses,
    accuracies and parameters after three steps, to float32 rounding; the step counter is the same."""
    c = tiny_digits(total_steps=10, optimizer__warmup_steps=0)
    one, one_state = _train(c, 3)
    c.optimizer.accumulate_steps = 4
    four, four_state = _train(c, 3)
    np.testing.assert_allclose(four, one, rtol=1e-5)
    assert int(four_state["step"]) == int(one_state["step"]) == 3
    for a, b in zip(jax.tree.leaves(four_state["params"]), jax.tree.leaves(one_state["params"])):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)  # (atol: as in the scan test)


@pytest.mark.slow
def test_accumulate_steps_under_the_seed_vmap():
    """The vmapped seeds' step (`seeds`, `seed_axis`) with k = 2: each seed's loss is its own run's."""
    c = tiny_digits(total_steps=10, optimizer__warmup_steps=0, optimizer__accumulate_steps=2)
    setup = resolve(c, 1)
    hypers = [train_step.step_hyperparameters(c), train_step.step_hyperparameters(c)]
    hypers[1]["seed"] = np.int32(7)
    tx = optim.make_optimizer(c.optimizer, hypers[0])
    states = [init_state(setup.model, setup.image_shape, int(h["seed"]), tx) for h in hypers]
    rng = np.random.default_rng(0)
    batch = {
        "image": jnp.asarray(rng.integers(0, 256, (16, 8, 8, 1), dtype=np.uint8)),
        "label": jnp.asarray(rng.integers(0, 10, (16,)), jnp.int32),
    }
    step = train_step.make_train_step(setup)
    alone = [float(jax.jit(step)(s, batch, h)[1]["loss"]) for s, h in zip(states, hypers)]
    stack = lambda trees: jax.tree.map(lambda *v: jnp.stack(v), *trees)
    _, metrics = jax.jit(jax.vmap(step))(stack(states), stack([batch, batch]), stack(hypers))
    np.testing.assert_allclose(metrics["loss"], alone, rtol=1e-5)


@pytest.mark.slow
def test_accumulate_steps_on_a_sharded_batch_moves_no_images():
    """The batch split over the 8 devices (as the trainer lays it out) into k = 2 micro-batches: the
    loss of k = 1, and the compiled step gathers or exchanges nothing (strided micro-batches lie on
    the devices that hold their rows; only the gradients are all-reduced)."""
    mesh = data_mesh(jax.devices())
    repl, rows = replicated(mesh), batch_sharding(mesh)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (16, 8, 8, 1), dtype=np.uint8)
    labels = rng.integers(0, 10, (16,)).astype(np.int32)
    batch = {"image": jax.device_put(images, rows), "label": jax.device_put(labels, rows)}
    losses_k = {}
    for k in (1, 2):
        c = tiny_digits(total_steps=10, optimizer__warmup_steps=0, optimizer__accumulate_steps=k)
        setup, hyper = resolve(c, 8), train_step.step_hyperparameters(c)
        tx = optim.make_optimizer(c.optimizer, hyper)
        init = lambda: init_state(setup.model, setup.image_shape, c.seed, tx)
        state = jax.jit(init, out_shardings=repl)()
        step = jax.jit(
            train_step.make_train_step(setup),
            in_shardings=(repl, rows, repl),
            out_shardings=(repl, repl),
        )
        compiled = step.lower(state, batch, hyper).compile()
        assert not re.search(r"all-gather|all-to-all|collective-permute", compiled.as_text())
        losses_k[k] = float(compiled(state, batch, hyper)[1]["loss"])
    assert losses_k[2] == pytest.approx(losses_k[1], rel=1e-6)


def test_micro_batches_are_strided_rows():
    x_B = jnp.arange(8)
    np.testing.assert_array_equal(
        train_step.micro_batches(x_B, 4), [[0, 4], [1, 5], [2, 6], [3, 7]]
    )


@pytest.mark.slow
def test_mu_dtype_bfloat16_halves_the_first_moment_and_trains():
    """mu_dtype="bfloat16": every mu leaf of the opt state is bfloat16 (nu stays float32), the state's
    bytes fall by a quarter of mu + nu, and a few steps still lower the loss."""
    c = tiny_digits(total_steps=10, optimizer__warmup_steps=0, optimizer__lr=3e-3)
    f32_losses, f32_state = _train(c, 4)
    c.optimizer.mu_dtype = "bfloat16"
    bf16_losses, bf16_state = _train(c, 4)
    nbytes = lambda t: sum(x.nbytes for x in jax.tree.leaves(t))
    adam = [
        s
        for s in jax.tree.leaves(bf16_state["opt_state"], is_leaf=lambda s: hasattr(s, "mu"))
        if hasattr(s, "mu")
    ][0]
    assert {x.dtype for x in jax.tree.leaves(adam.mu)} == {jnp.dtype(jnp.bfloat16)}
    assert {x.dtype for x in jax.tree.leaves(adam.nu)} == {jnp.dtype(jnp.float32)}
    params_bytes = nbytes(f32_state["params"])
    assert nbytes(f32_state["opt_state"]) - nbytes(bf16_state["opt_state"]) == params_bytes // 2
    assert np.all(np.isfinite(bf16_losses)) and bf16_losses[-1] < bf16_losses[0]
    np.testing.assert_allclose(bf16_losses, f32_losses, rtol=1e-2)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"model__remat": "blocks"}, "unknown model.remat 'blocks': did you mean 'block'?"),
        (
            {"optimizer__accumulate_steps": 0},
            "optimizer.accumulate_steps=0 must be an integer >= 1",
        ),
        (
            {"optimizer__accumulate_steps": 3},
            "global_batch_size=16 does not split into optimizer.accumulate_steps=3 micro-batches",
        ),
        ({"optimizer__mu_dtype": "float16"}, "optimizer.mu_dtype='float16': give one of"),
        (
            {"model__name": "resnet18", "model__remat": "block"},
            "model.remat='block' is a ViT's memory lever; model 'resnet18' has none",
        ),
        (
            {"model__name": "vgg16", "model__scan_layers": True},
            "model.scan_layers=True is a ViT's memory lever",
        ),
    ],
)
def test_bad_lever_values_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        resolve(tiny_digits(**overrides), 1)


def test_scan_layers_takes_a_bool():
    """(a config's field is typed; a dict of fields is not)"""
    with pytest.raises(
        ConfigError, match=re.escape("model.scan_layers='False': give True or False")
    ):
        models.create_model(
            {"name": "vit", "scan_layers": "False"}, num_classes=10, image_size=8, channels=1
        )


def test_batch_must_split_over_micro_batches_and_devices():
    """16 images in 4 micro-batches: over 8 devices half an image each, refused; over 4 one each."""
    c = tiny_digits(optimizer__accumulate_steps=4)
    with pytest.raises(ConfigError, match="use a multiple of 32"):
        resolve(c, 8)
    resolve(c, 4)
