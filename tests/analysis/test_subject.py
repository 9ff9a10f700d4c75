"""Any model under measurement (posattn.analysis.subject): a flax model written here, not posattn's, and
a timm ViT imported from the committed fixture run through every PK22 tool of the study's driver and
JSL22's Fig. 1a positional-embedding maps."""

import pathlib

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posattn.analysis import fourier, posemb, subject, variance
from posattn.errors import ConfigError
from posattn.papers.pk22 import measures, streams, suite
from posattn.vision import config as config_lib
from posattn.vision import models, timm_import
from posattn.vision.data import arrays
from posattn.vision.models.sown import INTERMEDIATES
from posattn.vision.setup import resolve

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "vision" / "fixtures"
CLASSES = 5
SETTINGS = suite.Settings(
    hessian_batches=2,
    hessian_batch_size=4,
    hessian_iterations=20,
    top_k=2,
    feature_images=8,
    landscape_grid=5,
    landscape_images=8,
    landscape_batch_size=4,
    landscape_chunk=25,
)


class OwnNet(nn.Module):
    """A user's classifier in plain flax: conv, a 3 x 3 box blur (a low-pass layer), a token mixer."""

    @nn.compact
    def __call__(self, x_BxHxWxC):
        z_BxHxWx6 = nn.relu(nn.Conv(6, (3, 3), name="conv")(x_BxHxWxC))
        blur_BxHxWx6 = nn.avg_pool(z_BxHxWx6, (3, 3), padding="SAME", count_include_pad=False)
        B, H, W, _ = blur_BxHxWx6.shape
        tokens_BxNx8 = nn.Dense(8, name="mix")(blur_BxHxWx6.reshape(B, H * W, 6))
        logits_BxK = nn.Dense(CLASSES, name="head")(tokens_BxNx8.mean(axis=1))
        # the features in forward order, which is not their alphabetical one
        return logits_BxK, {"conv": z_BxHxWx6, "blur": blur_BxHxWx6, "tokens": tokens_BxNx8}


def _dataset():
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (24, 16, 16, 3), dtype=np.uint8)
    labels = rng.integers(0, CLASSES, 24)
    return arrays.from_arrays(
        images[:16], labels[:16], images[16:], labels[16:], num_classes=CLASSES, name="own_images"
    )


def _measure(subj):
    ds = _dataset()
    config = config_lib.base_config()
    config.dataset = "own_images"
    out = suite.measure(subj, None, config, SETTINGS, jax.random.key(0), name="own", dataset=ds)
    x_test, y_test = streams.test_set(resolve(config, 1, ds))
    return out, x_test, y_test


def _check_every_tool(subj, out, x_test, y_test, layers):
    """What measure returns against what the subject computes itself, and its shapes and values."""
    assert out["layers"] == layers
    logits, feats = jax.jit(lambda x: subject.logits_and_features(subj, subj.params, x))(x_test)
    assert out["noise"]["clean_accuracy"] == pytest.approx(
        float(np.mean(np.argmax(logits, -1) == y_test))
    )
    drops = np.asarray(out["noise"]["drop_points"])
    assert drops.shape == (9,) and np.all(np.isfinite(drops)) and np.all(np.abs(drops) <= 100)
    first = {k: v[: SETTINGS.feature_images] for k, v in feats.items()}
    for (name, profile), want in zip(
        out["fourier"].items(), fourier.layer_profiles(first).values()
    ):
        np.testing.assert_allclose(profile, want, atol=1e-4, err_msg=name)
    np.testing.assert_allclose(
        out["variance"], list(variance.layer_variances(first).values()), rtol=1e-4
    )
    eigs = np.asarray(out["hessian"]["eigenvalues"])
    assert eigs.shape == (2, 2) and np.all(np.isfinite(eigs)) and np.all(eigs != 0)
    surface = np.asarray(out["landscape"]["loss"])
    assert surface.shape == (5, 5) and np.all(np.isfinite(surface)) and surface.std() > 0
    # the L2 term at theta*: PK22's sum of per-tensor norms of the subject's own parameters
    norms = sum(np.linalg.norm(np.asarray(t)) for t in jax.tree.leaves(subj.params))
    penalty = out["landscape"]["loss_at_optimum"] - out["landscape"]["nll_at_optimum"]
    assert penalty == pytest.approx(SETTINGS.weight_decay * norms, rel=1e-4)
    # the L2 term at every grid point: the same at theta*, and it moves away from theta*
    penalty_GxG = np.asarray(out["landscape"]["penalty"])
    assert penalty_GxG.shape == surface.shape and penalty_GxG[2, 2] == pytest.approx(penalty)
    assert np.ptp(penalty_GxG) > 0


@pytest.mark.slow  # compiles three programs: ~1 min on 2 busy cores (test_a_subject_runs_as_a_module is fast)
def test_a_flax_model_of_ones_own_runs_through_every_tool():
    subj = _own_subject()
    out, x_test, y_test = _measure(subj)
    _check_every_tool(subj, out, x_test, y_test, ["conv", "blur", "tokens"])
    assert out["layer_sizes"] == [16, 16, 16]  # the tokens on their square grid
    conv, blur = (out["layers"].index(k) for k in ("conv", "blur"))
    # a box blur is low-pass: it lowers the high-frequency log amplitude and the spatial variance (PK22)
    assert out["high_frequency"][blur] < out["high_frequency"][conv] - 0.5
    assert out["variance"][blur] < out["variance"][conv]


def _timm_vit():
    model, variables = timm_import.load(str(FIXTURES / "timm_vit.safetensors"), num_heads=2)
    return subject.of_model(model, variables), variables


@pytest.mark.slow  # compiles three programs: ~1 min on 2 busy cores
def test_an_imported_timm_vit_runs_through_every_tool():
    subj, _ = _timm_vit()
    out, x_test, y_test = _measure(subj)
    _check_every_tool(
        subj,
        out,
        x_test,
        y_test,
        ["stem", "block_00/attention", "block_00/mlp", "block_01/attention", "block_01/mlp"],
    )


def test_jsl22_embedding_maps_of_an_imported_timm_vit():
    # JSL22 Fig. 1a on P: the fixture's P is a 2-D sin-cos embedding of the 4 x 4 grid after the CLS row,
    # so its similarity falls with distance on the grid, which it would not with the rows out of place
    subj, variables = _timm_vit()
    P_hxwxD = subject.patch_embedding(subj)
    np.testing.assert_array_equal(P_hxwxD.reshape(16, -1), variables["params"]["pos_embedding"][1:])
    maps = posemb.similarity_maps(P_hxwxD)
    assert maps.shape == (16, 4, 4)
    np.testing.assert_allclose(maps.reshape(16, 16).diagonal(), 1.0, atol=1e-12)
    assert posemb.distance_rank_correlation(maps.reshape(16, 16), (4, 4)) < -0.5


def _own_subject():
    net = OwnNet()
    params = net.init(jax.random.key(1), jnp.zeros((1, 16, 16, 3)))["params"]
    return subject.Subject(lambda p, x: net.apply({"params": p}, x), params)


def test_a_subject_runs_as_a_module():
    # what the study's programs call (module.apply, as measures.nll and measures.forward_measures do)
    subj = _own_subject()
    module, variables = subject.as_module(subj)
    x = jax.random.normal(jax.random.key(0), (2, 16, 16, 3))
    logits, state = module.apply(variables, x, train=False, mutable=[INTERMEDIATES])
    want_logits, want = subject.logits_and_features(subj, subj.params, x)
    np.testing.assert_array_equal(logits, want_logits)
    assert list(state[INTERMEDIATES]) == ["conv", "blur", "tokens"]
    assert state[INTERMEDIATES]["tokens"][0].shape == (2, 16, 16, 8)
    np.testing.assert_array_equal(state[INTERMEDIATES]["blur"][0], want["blur"])
    params = jax.tree.map(lambda t: t * 2, subj.params)  # the programs' params, not the subject's
    assert not np.allclose(module.apply({"params": params}, x), logits)


def test_the_stem_split_zeroes_p_where_the_subject_says_it_lives():
    # A user's ViT whose stem is patches + P, P at "embed/pos" (not posattn's "pos_embedding"): the
    # split's position part is P's own statistics, the rest those of the patches alone.
    rng = np.random.default_rng(0)
    params = {
        "embed": {
            "proj": jnp.asarray(rng.normal(size=(3, 4)), jnp.float32),
            "pos": jnp.asarray(rng.normal(size=(16, 4)), jnp.float32),
        },
        "head": jnp.asarray(rng.normal(size=(4, CLASSES)), jnp.float32),
    }

    def apply(p, x_BxHxWxC):
        patches_BxNx4 = x_BxHxWxC.reshape(x_BxHxWxC.shape[0], 16, 3) @ p["embed"]["proj"]
        stem_BxNx4 = patches_BxNx4 + p["embed"]["pos"]
        return stem_BxNx4.mean(1) @ p["head"], {"stem": stem_BxNx4}

    subj = subject.Subject(apply, params, grid_hw=(4, 4), pos_embedding="embed/pos")
    module, variables = subject.as_module(subj)
    x = jax.random.normal(jax.random.key(1), (3, 4, 4, 3))
    parts = measures.stem_position_parts(module, subj.pos_embedding, variables, x)
    grid = lambda z: z.reshape(3, 4, 4, 4)  # noqa: E731 - tokens on their patch grid, as the subject sows them
    P = jnp.broadcast_to(params["embed"]["pos"], (3, 16, 4))
    patches = x.reshape(3, 16, 3) @ params["embed"]["proj"]
    for part, z in (("position", P), ("without", patches)):
        hf, var = parts[part]
        np.testing.assert_allclose(
            hf, fourier.image_profiles({"stem": grid(z)})["stem"][:, -1], rtol=1e-4, atol=1e-5
        )
        np.testing.assert_allclose(
            var, variance.image_variances({"stem": grid(z)})["stem"], rtol=1e-4, atol=1e-6
        )
    assert (
        subject.replace_at(params, "embed/pos", jnp.zeros_like)["embed"]["proj"]
        is params["embed"]["proj"]
    )
    with pytest.raises(ConfigError, match="no 'pos'"):
        subject.replace_at(params, "head/pos", jnp.zeros_like)


@pytest.mark.slow
def test_posattn_models_are_subjects():
    model = models.create_model(
        {"name": "vit", "variant": "test/4", "pool": "cls"}, num_classes=3, image_size=8, channels=1
    )
    x = jax.random.normal(jax.random.key(0), (2, 8, 8, 1))
    variables = model.init(jax.random.key(1), x)
    subj = subject.of_model(model, variables)
    logits, feats = subject.logits_and_features(subj, subj.params, x)
    np.testing.assert_array_equal(logits, model.apply(variables, x))
    assert list(feats) == list(models.features(model, variables, x))
    np.testing.assert_array_equal(
        subject.patch_embedding(subj), posemb.patch_embedding(variables["params"], (2, 2), cls=True)
    )
    resnet = models.create_model(
        {"name": "resnet18", "width": 4}, num_classes=3, image_size=8, channels=1
    )
    assert (
        subject.of_model(resnet, jax.eval_shape(resnet.init, jax.random.key(1), x)).pos_embedding
        is None
    )


def test_what_the_protocol_refuses():
    params = {"pos": jnp.zeros((1, 10, 4))}
    tokens = subject.Subject(lambda p, x: (x[:, 0, 0], {"t": jnp.zeros((2, 6, 4))}), params)
    with pytest.raises(
        ConfigError, match="'t' has 6 patch tokens, not a square number: set Subject.grid_hw"
    ):
        subject.features(tokens, jnp.zeros((2, 4, 4, 1)))
    assert subject.features(
        subject.Subject(tokens.apply, params, grid_hw=(2, 3)), jnp.zeros((2, 4, 4, 1))
    )["t"].shape == (2, 2, 3, 4)
    flat = subject.Subject(lambda p, x: (x[:, 0, 0], {"v": jnp.zeros((2, 4))}), params)
    with pytest.raises(
        ConfigError, match=r"feature 'v' has shape \(2, 4\): give \(B, h, w, C\) maps"
    ):
        subject.features(flat, jnp.zeros((2, 4, 4, 1)))
    with pytest.raises(ConfigError, match="no 'pos_embed' in the params"):
        subject.patch_embedding(subject.Subject(tokens.apply, params, pos_embedding="pos_embed"))
    with pytest.raises(ConfigError, match="the subject has no positional embedding"):
        subject.patch_embedding(tokens)
    # (1, T, D) with one prefix row: 9 patches on a square grid
    P = subject.patch_embedding(
        subject.Subject(tokens.apply, params, pos_embedding="pos", prefix_tokens=1)
    )
    assert P.shape == (3, 3, 4)
    with pytest.raises(ConfigError, match="must be a function"):
        subject.Subject(None, params)
