"""Image models: published parameter counts, positional attention (JSL22 Definition 3.2), options, dtypes, errors."""

import functools
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
import pytest
from ml_collections import ConfigDict

from posattn.errors import ConfigError
from posattn.vision.models import attention, attention_maps, create_model, param_count


def _model(image_size=8, channels=3, num_classes=10, dtype=jnp.float32, **fields):
    cfg = ConfigDict(
        dict(
            name="vit",
            variant="test/2",
            attention="positional",
            pos_shared=True,
            pos_add=False,
            pool="gap",
            dropout=0.0,
            patch_size=0,
        )
    )
    cfg.update(fields)
    return create_model(
        cfg, num_classes=num_classes, image_size=image_size, channels=channels, dtype=dtype
    )


def _images(key, batch=4, size=8, channels=3):
    return jax.random.normal(jax.random.key(key), (batch, size, size, channels))


@functools.cache
def _init(model, size=8, channels=3):
    # Jitted, with an "rbg" key: XLA compiles the default threefry generator slowly on CPU (seconds per
    # model), and the values of the initialisation do not matter to these tests.
    key = jax.random.key(0, impl="rbg")
    return jax.jit(lambda: model.init(key, jnp.zeros((1, size, size, channels))))()


@functools.cache
def _jitted_apply(model, train, mutable):
    return jax.jit(
        lambda v, x, r: model.apply(v, x, train=train, rngs=r, mutable=list(mutable) or False)
    )


def _apply(model, variables, images, train=False, rngs=None, mutable=()):
    return _jitted_apply(model, train, tuple(mutable))(variables, images, rngs or {})


def _perturbed(variables, scale=0.5):
    """Every parameter moved off its initial value (the ViT head starts at zero, all logits equal)."""
    rng = np.random.default_rng(42)
    moved = jax.tree.map(
        lambda x: x + scale * rng.standard_normal(x.shape, dtype=np.float32), variables["params"]
    )
    return {**variables, "params": moved}


def _shape_count(model, size, channels=3):
    variables = jax.eval_shape(
        lambda: model.init(jax.random.key(0), jnp.zeros((1, size, size, channels)))
    )
    return param_count(variables)


# Published counts: DeiT-Ti/S and ViT-B/16 (timm, ImageNet, 224, CLS token, 1000 classes), the CIFAR
# ResNet-18 and VGG-16-BN (10 classes). Checked by hand: DeiT-Ti = 147,648 (patch embedding) + 192 (CLS)
# + 37,824 (197 x 192 positions) + 12 x 444,864 (blocks) + 384 (final LN) + 193,000 (head).
@pytest.mark.parametrize(
    "fields, num_classes, size, expected",
    [
        (dict(name="vit", variant="Ti/16", attention="vanilla", pool="cls"), 1000, 224, 5_717_416),
        (dict(name="vit", variant="S/16", attention="vanilla", pool="cls"), 1000, 224, 22_050_664),
        (dict(name="vit", variant="B/16", attention="vanilla", pool="cls"), 1000, 224, 86_567_656),
        # Positional attention with one shared P has the same parameters: W_Q, W_K act on P instead.
        (
            dict(name="vit", variant="Ti/16", attention="positional", pool="cls"),
            1000,
            224,
            5_717_416,
        ),
        (dict(name="resnet18"), 10, 32, 11_173_962),
        (dict(name="vgg16"), 10, 32, 14_728_266),
    ],
)
def test_published_parameter_counts(fields, num_classes, size, expected):
    model = create_model(ConfigDict(fields), num_classes=num_classes, image_size=size, channels=3)
    assert _shape_count(model, size) == expected


def test_parameter_count_of_options():
    # Ti/4 on CIFAR: 64 patches; GAP drops the CLS token and its position row; one P per block adds 11 P.
    shared = _shape_count(_model(32, variant="Ti/4"), 32)
    cls = _shape_count(_model(32, variant="Ti/4", pool="cls"), 32)
    per_block = _shape_count(_model(32, variant="Ti/4", pos_shared=False), 32)
    assert cls - shared == 2 * 192
    assert per_block - shared == 11 * 64 * 192
    # The CNNs' parameters do not depend on the image size (global pooling before the classifier).
    for name in ("resnet18", "vgg16"):
        counts = {_shape_count(_model(s, name=name), s) for s in (8, 32, 64)}
        assert len(counts) == 1


@pytest.mark.parametrize(
    "name, first, last", [("resnet18", "stem_conv", "stage4_block2"), ("vgg16", "conv1", "conv13")]
)
def test_cnn_width_scales_every_stage(name, first, last):
    params = jax.eval_shape(
        lambda: _model(name=name, width=16).init(jax.random.key(0), jnp.zeros((1, 8, 8, 3)))
    )
    params = params["params"]
    assert params[first]["kernel"].shape[-1] == 16 and params["head"]["kernel"].shape == (128, 10)
    last_kernel = params[last]["conv2"]["kernel"] if name == "resnet18" else params[last]["kernel"]
    assert last_kernel.shape[-1] == 128  # 512 * 16 / 64
    full = _shape_count(_model(name=name), 8)
    assert 14 < full / param_count(params) < 17  # convolutions scale with width squared


@pytest.mark.parametrize("pool, tokens", [("gap", 16), ("cls", 17)])
@pytest.mark.parametrize("pos_shared", [True, False])
def test_positional_embedding_structure(pool, tokens, pos_shared):
    params = _init(_model(pool=pool, pos_shared=pos_shared))["params"]
    expected = (tokens, 32) if pos_shared else (2, tokens, 32)
    assert params["pos_embedding"].shape == expected
    assert ("cls" in params) == (pool == "cls")
    attn = params["block_0"]["attn"]
    # Q and K act on P (width 32 -> 2 heads x 16); no fused token QKV; V and the output projection.
    assert set(attn) == {"query", "key", "value", "out"}
    assert attn["query"]["kernel"].shape == (32, 2, 16)
    assert "pos_embedding" not in params["block_0"]


def _attention_maps(model, variables, images):
    return list(attention_maps(model, variables, images).values())


@pytest.mark.slow
def test_positional_attention_is_input_independent_and_follows_definition():
    model = _model(pool="cls")
    variables = _perturbed(_init(model))
    maps_a = _attention_maps(model, variables, _images(1, batch=4))
    maps_b = _attention_maps(model, variables, _images(2, batch=4))
    for S_a, S_b in zip(maps_a, maps_b):
        assert S_a.shape == (4, 2, 17, 17)  # (batch, heads, N + CLS, N + CLS)
        np.testing.assert_array_equal(S_a, S_b)
        np.testing.assert_array_equal(
            S_a, jnp.broadcast_to(S_a[:1], S_a.shape)
        )  # one for the batch
        np.testing.assert_allclose(S_a.sum(-1), 1.0, rtol=1e-5)
    # S = softmax((P W_Q + b_Q)(P W_K + b_K)^T / sqrt(d_head)), computed here from the parameters.
    params = variables["params"]
    P = params["pos_embedding"]
    for i, S in enumerate(maps_a):
        S = S[0]
        attn = params[f"block_{i}"]["attn"]
        q = jnp.einsum("nd,dhk->nhk", P, attn["query"]["kernel"]) + attn["query"]["bias"]
        k = jnp.einsum("nd,dhk->nhk", P, attn["key"]["kernel"]) + attn["key"]["bias"]
        expected = jax.nn.softmax(jnp.einsum("nhk,mhk->hnm", q, k) / 4.0, axis=-1)
        np.testing.assert_allclose(S, expected, rtol=1e-5, atol=1e-6)
    # The two blocks share P but have their own W_Q, W_K, so their maps differ.
    assert not np.allclose(maps_a[0], maps_a[1])


def test_vanilla_attention_depends_on_input():
    # The control for the test above: the same capture does see input dependence when there is some.
    model = _model(attention="vanilla")
    variables = _perturbed(_init(model))
    S_a = _attention_maps(model, variables, _images(1, batch=2))[0]
    S_b = _attention_maps(model, variables, _images(2, batch=2))[0]
    assert S_a.shape == (2, 2, 16, 16)  # (batch, heads, N, N)
    assert not np.allclose(S_a, S_b)


@pytest.mark.parametrize("with_keep", [False, True])
def test_vanilla_attention_through_dot_product_attention_equals_the_written_out_softmax(with_keep):
    # The fused implementation (jax.nn.dot_product_attention; "cudnn" on a GPU) must be the same function
    # as the einsum path, removed keys included; it returns no weights, so the model sows none.
    x_BxNxD = jax.random.normal(jax.random.key(0), (3, 10, 16))
    keep_BxN = jnp.arange(10)[None, :] < jnp.array([[10], [4], [1]]) if with_keep else None
    written = attention.VanillaAttention(num_heads=2)
    fused = attention.VanillaAttention(num_heads=2, implementation="xla")
    params = written.init(jax.random.key(1), x_BxNxD)
    y_written, att = written.apply(params, x_BxNxD, None, keep_BxN)
    y_fused, none = fused.apply(params, x_BxNxD, None, keep_BxN)
    np.testing.assert_allclose(y_fused, y_written, atol=1e-5, rtol=1e-5)
    assert att.shape == (3, 2, 10, 10) and none is None


def test_a_vit_with_fused_attention_sows_no_weights_and_an_unknown_implementation_is_refused():
    model = _model(attention="vanilla", attention_options="implementation='xla'")
    assert _attention_maps(model, _init(model), _images(1, batch=2)) == []
    with pytest.raises(ConfigError, match="implementation"):
        attention.VanillaAttention(num_heads=2, implementation="flash")


def _intermediate_shapes(jaxpr):
    """Shapes of every value a jaxpr computes, nested jaxprs (pjit, custom_jvp) included."""
    for eqn in jaxpr.eqns:
        yield from (v.aval.shape for v in eqn.outvars)
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            yield from _intermediate_shapes(sub)


@pytest.mark.parametrize("attention", ["vanilla", "positional"])
def test_positional_attention_does_no_per_example_token_to_token_work(attention):
    # Batch 5, 36 tokens (12 x 12 images, patch 2; head width 16, so no other axis is 36 long): vanilla
    # attention builds (5, 2, 36, 36) logits; positional attention must build its (2, 36, 36) S without
    # the batch, in the forward and in the backward pass.
    model = _model(image_size=12, attention=attention)
    variables = _init(model, size=12)
    loss = lambda v, x: model.apply(v, x, train=True).sum()  # noqa: E731
    jaxpr = jax.make_jaxpr(jax.grad(loss))(variables, _images(10, batch=5, size=12)).jaxpr
    shapes = list(_intermediate_shapes(jaxpr))
    # any (..., 36, 36) array whose leading axes hold the batch of 5, however they are laid out
    per_example = [
        s for s in shapes if len(s) >= 3 and s[-2:] == (36, 36) and np.prod(s[:-2]) % 5 == 0
    ]
    assert bool(per_example) == (attention == "vanilla")
    if attention == "positional":
        assert (2, 36, 36) in shapes


def test_per_block_positional_embeddings_are_used_per_block():
    model = _model(pos_shared=False)
    variables = _perturbed(_init(model))
    images = _images(3)
    logits = _apply(model, variables, images)
    # Changing block 1's P changes the output; so does block 0's, each through its own S.
    for block in (0, 1):
        params = dict(variables["params"])
        params["pos_embedding"] = params["pos_embedding"].at[block].multiply(-2.0)
        assert not np.allclose(_apply(model, {"params": params}, images), logits, atol=1e-4)


# The other two combinations run in the attention-map tests above.
@pytest.mark.parametrize("attention, pool", [("vanilla", "cls"), ("positional", "gap")])
def test_vit_logits_shape_dtype_and_jit(attention, pool):
    model = _model(attention=attention, pool=pool, num_classes=7)
    variables = _perturbed(_init(model))
    logits = _apply(model, variables, _images(4, batch=5), train=True)
    assert logits.shape == (5, 7) and logits.dtype == jnp.float32
    assert np.isfinite(logits).all()


def _transpose_patch_grid(images):
    """Moves the 2x2 patch at grid cell (i, j) to (j, i), keeping the pixels inside each patch."""
    B, H, W, C = images.shape
    grid = images.reshape(B, H // 2, 2, W // 2, 2, C)
    return grid.transpose(0, 3, 2, 1, 4, 5).reshape(images.shape)


@pytest.mark.parametrize("pos_add", [False, True])
def test_without_pos_add_p_reaches_the_tokens_only_through_s(pos_add):
    # W_Q = 0 makes every S uniform whatever P is. Then, with GAP, a model that does not add P to the
    # tokens treats the image as a bag of patches; adding P (distinct rows) breaks that invariance.
    model = _model(pos_add=pos_add)
    params = _perturbed(_init(model))["params"]
    for i in range(2):
        params[f"block_{i}"]["attn"]["query"] = jax.tree.map(
            jnp.zeros_like, params[f"block_{i}"]["attn"]["query"]
        )
    images = _images(5)
    logits = _apply(model, {"params": params}, images)
    moved = _apply(model, {"params": params}, _transpose_patch_grid(images))
    assert np.allclose(logits, moved, rtol=1e-5, atol=1e-5) == (not pos_add)


def test_bfloat16_compute_gives_float32_logits_close_to_float32():
    f32, bf16 = _model(), _model(dtype="bfloat16")
    variables = _perturbed(_init(f32), scale=0.1)
    assert jax.tree.all(jax.tree.map(lambda p: p.dtype == jnp.float32, _init(bf16)["params"]))
    images = _images(6)
    ref, low = _apply(f32, variables, images), _apply(bf16, variables, images)
    assert low.dtype == jnp.float32
    np.testing.assert_allclose(low, ref, atol=0.05 * float(jnp.abs(ref).max()))
    assert not np.array_equal(low, ref)  # bf16 really was used


@pytest.mark.parametrize("name", ["resnet18", "vgg16"])
def test_cnn_bfloat16_keeps_float32_parameters_and_logits(name):
    # Shapes only: bf16 convolutions are slow on CPU, and the ViT test above checks the numerics.
    model = _model(name=name, dtype="bfloat16")
    variables = jax.eval_shape(lambda: model.init(jax.random.key(0), _images(6)))
    assert {p.dtype for p in jax.tree.leaves(variables)} == {jnp.dtype(jnp.float32)}
    logits = jax.eval_shape(lambda v: model.apply(v, _images(6)), variables)
    assert logits.shape == (4, 10) and logits.dtype == jnp.float32


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet18", "vgg16"])
def test_cnn_on_digits_size_with_batch_norm(name):
    model = _model(name=name, channels=1)
    variables = _init(model, 8, 1)
    assert set(variables) == {"params", "batch_stats"}
    images = _images(7, channels=1)
    logits, updates = _apply(model, variables, images, train=True, mutable=["batch_stats"])
    assert logits.shape == (4, 10) and logits.dtype == jnp.float32
    before, after = (
        jax.tree.leaves(variables["batch_stats"]),
        jax.tree.leaves(updates["batch_stats"]),
    )
    assert any(not np.allclose(a, b) for a, b in zip(before, after))
    eval_logits = _apply(model, {**variables, **updates}, images)
    assert eval_logits.shape == (4, 10) and np.isfinite(eval_logits).all()


def test_dropout_uses_the_rng_only_in_training():
    model = _model(dropout=0.5)
    variables = _perturbed(_init(_model()))  # dropout has no parameters: reuse the cached init
    images = _images(8)
    train = [
        _apply(model, variables, images, train=True, rngs={"dropout": jax.random.key(k)})
        for k in (0, 1)
    ]
    assert not np.allclose(train[0], train[1])
    # outside training dropout is off: the same logits as the model without dropout
    np.testing.assert_allclose(
        _apply(model, variables, images), _apply(_model(), variables, images), rtol=1e-6, atol=1e-6
    )


def test_patch_size_overrides_the_variant():
    params = _init(_model(patch_size=4))["params"]
    assert params["embedding"]["kernel"].shape == (4, 4, 3, 32)
    assert params["pos_embedding"].shape == (4, 32)


def test_a_shape_of_ones_own_overrides_the_variant_field_by_field():
    # test/2 is width 32, depth 2, 2 heads, MLP 64: each non-zero field replaces one of them.
    params = _init(_model(width=48, depth=3, num_heads=3, mlp_dim=40))["params"]
    blocks = sorted(k for k in params if k.startswith("block"))
    assert len(blocks) == 3
    assert params["embedding"]["kernel"].shape[-1] == 48
    mlp_kernels = [
        leaf.shape
        for path, leaf in jax.tree_util.tree_leaves_with_path(params[blocks[0]])
        if "kernel" in jax.tree_util.keystr(path) and 40 in leaf.shape
    ]
    assert mlp_kernels, "the MLP's hidden size is not 40"
    # depth alone: the variant's width stays
    assert _init(_model(depth=1))["params"]["embedding"]["kernel"].shape[-1] == 32


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(width=30, num_heads=4), "does not divide"),
        (dict(depth=-1), "model.depth must be an integer >= 0"),
        (dict(mlp_dim=1.5), "model.mlp_dim must be an integer"),
        (dict(name="resnet18", depth=4), "model.depth sets a ViT's shape"),
        (dict(name="alternet", variant="XS", width=16), "model.width sets a ViT's shape"),
        (dict(name="resnet50"), "model name"),
        (dict(variant="Q/4"), "variant"),
        (dict(variant="Ti"), "variant"),
        (dict(variant="Ti/x"), "variant"),
        (dict(attention="linear"), "attention"),
        (dict(attention="posit"), "did you mean 'positional'"),
        (dict(atention="vanilla"), "unknown model field 'atention': did you mean 'attention'"),
        (dict(name="resnet"), "did you mean 'resnet18'"),
        (dict(pool="max"), "pool"),
        (dict(variant="test/3"), "does not divide"),
        (dict(patch_size=5), "does not divide"),
        (dict(patch_size=-2), "patch_size"),
        (dict(dropout=1.5), "dropout"),
        (dict(name="vgg16", width=-8), "model.width=-8 must be 0"),
        (dict(dtype="int8"), "dtype"),
        (dict(num_classes=0), "num_classes"),
    ],
)
def test_invalid_configs_raise_config_error(fields, message):
    with pytest.raises(ConfigError, match=message):
        _model(**fields)


@pytest.mark.parametrize(
    "fields, num_classes, message",
    [
        (
            {"patch_size": 2.5},
            10,
            r"model.patch_size must be an integer >= 0 \(0 = the variant's\), got 2.5",
        ),
        ({"pos_shared": "False"}, 10, "model.pos_shared='False': give True or False"),
        ({"pos_add": 1}, 10, "model.pos_add=1: give True or False"),
        ({}, 10.5, "num_classes must be a positive integer, got 10.5"),
    ],
)
def test_fields_of_a_plain_dict_are_not_truncated_or_made_true(fields, num_classes, message):
    # a plain dict has no ConfigDict types: int() made a patch of 2.5 one of 2, bool("False") True
    with pytest.raises(ConfigError, match=message):
        create_model(
            {"name": "vit", "variant": "test/2", **fields},
            num_classes=num_classes,
            image_size=8,
            channels=3,
        )


def test_images_of_the_wrong_size_are_rejected():
    model = _model()
    variables = _init(model)
    with pytest.raises(ValueError, match="built for"):
        model.apply(variables, _images(9, size=16))


@pytest.mark.parametrize("name", ["vit", "resnet18", "vgg16"])
def test_images_of_other_channels_are_refused_in_one_line(name):
    model = _model(name=name, channels=1)
    variables = jax.eval_shape(lambda: model.init(jax.random.key(0), _images(6, channels=1)))
    with pytest.raises(
        ConfigError,
        match=r"images of shape \(4, 8, 8, 3\) have 3 channels, the model was "
        r"built for 1: convert the images, or build the model with "
        r"channels=3",
    ) as err:
        jax.eval_shape(
            lambda v: model.apply(v, _images(9)), variables
        )  # flax: a parameter shape error
    assert "\n" not in str(err.value)  # (pytest matches JAX's traceback note too)


def test_a_model_name_alone_builds_it_and_sizes_must_be_positive_integers():
    model = create_model("resnet18", num_classes=10, image_size=2, channels=3)
    assert (type(model).__name__, model.channels) == ("ResNet18", 3)
    for bad in (2.5, "8", 0):
        with pytest.raises(
            ConfigError, match=f"image_size must be a positive integer, got {bad!r}$"
        ):
            create_model("resnet18", num_classes=10, image_size=bad, channels=3)
    with pytest.raises(
        ConfigError, match="model_cfg=None: give a model name or a dict of model fields"
    ):
        create_model(None, num_classes=10, image_size=8, channels=3)


class _Scaled(nn.Module):
    """A kind of attention defined outside posattn with a knob of its own: vanilla attention, its branch
    scaled by `scale`."""

    num_heads: int
    dtype: Any = jnp.float32
    scale: float = 1.0
    takes_position: ClassVar[bool] = False

    @nn.compact
    def __call__(self, x_BxNxD, p_NxD, keep_BxN=None):
        y_BxNxD, att = attention.VanillaAttention(self.num_heads, dtype=self.dtype, name="inner")(
            x_BxNxD, p_NxD, keep_BxN
        )
        return self.scale * y_BxNxD, att


def test_a_new_attention_kind_with_its_own_knob_is_its_class_and_one_registry_line(monkeypatch):
    monkeypatch.setitem(attention.ATTENTIONS, "scaled", _Scaled)  # the registry line
    make = lambda options, name="vit": create_model(  # noqa: E731
        {
            "name": name,
            "variant": "test/2" if name == "vit" else "XS",
            "attention": "scaled",
            "attention_options": options,
        },
        num_classes=3,
        image_size=8,
        channels=1,
    )
    x = jax.random.normal(jax.random.key(0), (2, 8, 8, 1))
    variables = jax.tree_util.tree_map_with_path(  # a head that is not zero, as trained
        lambda path, a: (
            jax.random.normal(jax.random.key(2), a.shape)
            if "head" in jax.tree_util.keystr(path)
            else a
        ),
        make("").init(jax.random.key(1), x),
    )
    silenced = jax.tree_util.tree_map_with_path(  # W_O of every block zero: the attention branch adds nothing
        lambda path, a: (
            jnp.zeros_like(a)
            if "out" in jax.tree_util.keystr(path) and "inner" in jax.tree_util.keystr(path)
            else a
        ),
        variables,
    )
    np.testing.assert_allclose(
        make("scale=0.0").apply(variables, x), make("").apply(silenced, x), atol=1e-6
    )
    assert not np.allclose(
        make("scale=0.0").apply(variables, x), make("scale=1.0").apply(variables, x)
    )
    assert make("scale=0.5", "alternet").attention_options == (
        ("scale", 0.5),
    )  # AlterNet's blocks take it too
    for name in ("vit", "alternet"):
        with pytest.raises(
            ConfigError,
            match=r"'bogus=1' is not NAME=VALUE with NAME a field of the 'scaled' "
            r"attention \(scale\)",
        ):
            make("bogus=1", name)
    with pytest.raises(ConfigError, match="the value of scale is not a Python literal"):
        make("scale=abc")


def test_a_keep_mask_that_keeps_no_token_of_a_sample_is_refused_not_nan():
    # average pooling over no kept token is 0/0: the sample's logits were NaN, silently
    model, images = _model(), _images(0, batch=2)
    variables = model.init(jax.random.key(0), images)
    keep = jnp.ones((2, 16), bool).at[1].set(False)
    with pytest.raises(ConfigError, match=r"keeps no token of sample\(s\) \[1\]"):
        model.apply(variables, images, keep_BxN=keep)
    logits = model.apply(variables, images, keep_BxN=keep.at[1, 3].set(True))  # one token is enough
    assert np.isfinite(np.asarray(logits)).all()
