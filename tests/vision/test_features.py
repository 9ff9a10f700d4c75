"""The models' named features and attention maps (the contract `posattn.vision.models` documents)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from ml_collections import ConfigDict

from posattn.errors import ConfigError
from posattn.vision.models import attention_maps, create_model, features
from posattn.vision.models.vit import ViT


def _model(**fields):
    cfg = ConfigDict(dict(name="vit", variant="test/2", attention="positional"))
    cfg.update(fields)
    return create_model(cfg, num_classes=10, image_size=8, channels=1)


@functools.cache
def _init(model):
    return jax.jit(lambda: model.init(jax.random.key(0, impl="rbg"), jnp.zeros((1, 8, 8, 1))))()


def _images(batch=3):
    return jax.random.normal(jax.random.key(1), (batch, 8, 8, 1))


@pytest.mark.slow
@pytest.mark.parametrize("attention, pool", [("positional", "gap"), ("vanilla", "cls")])
def test_vit_features_names_order_shapes_and_the_attention_branch(attention, pool):
    model = _model(attention=attention, pool=pool)
    variables = _init(model)
    feats = jax.jit(functools.partial(features, model))(variables, _images())
    assert list(feats) == [
        "stem",
        "block_00/attention",
        "block_00/mlp",
        "block_01/attention",
        "block_01/mlp",
    ]
    assert all(f.shape == (3, 4, 4, 32) for f in feats.values())  # 4 x 4 patch grid, CLS dropped
    # block_00/attention - stem is the attention branch: Attn(LN(stem)), computed here from its modules
    params = variables["params"]
    stem_BxNxD = feats["stem"].reshape(3, 16, 32)
    if pool == "cls":  # the CLS token enters the block too: rebuild the full stream
        pos = params["pos_embedding"]
        cls = jnp.broadcast_to(params["cls"] + pos[:1], (3, 1, 32))
        stem_BxNxD = jnp.concatenate([cls, stem_BxNxD], axis=1)
    from posattn.vision.models.vit import EncoderBlock

    enc = EncoderBlock(2, 64, attention=attention)
    p_NxD = params["pos_embedding"] if attention == "positional" else None
    mid, out, _ = enc.apply({"params": params["block_0"]}, stem_BxNxD, p_NxD, False)
    drop = slice(1, None) if pool == "cls" else slice(None)
    branch = mid - stem_BxNxD
    assert float(jnp.abs(branch).max()) > 1e-3  # the branch does something
    np.testing.assert_allclose(
        (feats["block_00/attention"] - feats["stem"]).reshape(3, 16, 32),
        branch[:, drop],
        rtol=1e-5,
        atol=1e-5,
    )
    np.testing.assert_allclose(
        feats["block_00/mlp"].reshape(3, 16, 32), out[:, drop], rtol=1e-5, atol=1e-5
    )


def test_attention_maps_names_shapes_and_softmax():
    for attention in ("positional", "vanilla"):
        model = _model(attention=attention)
        maps = jax.jit(functools.partial(attention_maps, model))(_init(model), _images())
        assert list(maps) == ["block_00", "block_01"]
        for att in maps.values():
            assert att.shape == (3, 2, 16, 16)
            np.testing.assert_allclose(att.sum(-1), 1.0, rtol=1e-5)


@pytest.mark.parametrize(
    "name, blocks, stem", [("resnet18", 8, (3, 8, 8, 64)), ("vgg16", 12, (3, 8, 8, 64))]
)
def test_cnn_features(name, blocks, stem):
    model = _model(name=name)
    variables = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros((1, 8, 8, 1))))
    feats = jax.eval_shape(functools.partial(features, model), variables, _images())
    assert list(feats) == ["stem"] + [f"block_{i:02d}/conv" for i in range(blocks)]
    assert feats["stem"].shape == stem and all(len(f.shape) == 4 for f in feats.values())
    assert jax.eval_shape(functools.partial(attention_maps, model), variables, _images()) == {}
    assert set(variables) == {"params", "batch_stats"}  # nothing sown into the variables by init


def test_models_validate_fields_however_built():
    with pytest.raises(ConfigError, match="did you mean 'positional'"):
        ViT(
            num_classes=10,
            image_size=8,
            patch_size=2,
            width=32,
            depth=1,
            num_heads=2,
            mlp_dim=8,
            attention="posit",
        )
    with pytest.raises(ConfigError, match="num_heads"):
        ViT(num_classes=10, image_size=8, patch_size=2, width=30, depth=1, num_heads=4, mlp_dim=8)
