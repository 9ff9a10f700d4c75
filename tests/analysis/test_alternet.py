"""AlterNet (PK22 Figure 8) obeys the features / attention_maps contract of posattn.vision.models."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from ml_collections import ConfigDict

from posattn.errors import ConfigError
from posattn.vision.models import alternet, attention_maps, create_model, features


def _model(attention="positional", variant="XS"):
    cfg = ConfigDict(dict(name="alternet", variant=variant, attention=attention))
    return create_model(cfg, num_classes=10, image_size=16, channels=1)


def test_windows_round_trip_and_full_map_order():
    x = jax.random.normal(jax.random.key(0), (2, 8, 8, 3))
    w = alternet.to_windows(x, 4)
    assert w.shape == (8, 16, 3)
    np.testing.assert_array_equal(w[1, 0], x[0, 0, 4])  # window 1 = top-right, starts at (0, 4)
    np.testing.assert_array_equal(alternet.from_windows(w, 2, 8, 8, 4), x)
    # random window maps (B * 4 windows, 2 heads) against the map over raster positions built entry by
    # entry: position (r, c) lies in window (r // 4) * 2 + c // 4, at index (r % 4) * 4 + c % 4
    att = np.asarray(jax.random.uniform(jax.random.key(1), (8, 2, 16, 16)))
    expected = np.zeros((2, 2, 64, 64), np.float32)
    where = [((r // 4) * 2 + c // 4, (r % 4) * 4 + c % 4) for r in range(8) for c in range(8)]
    for b in range(2):
        for p, (wp, ip) in enumerate(where):
            for q, (wq, iq) in enumerate(where):
                if wp == wq:
                    expected[b, :, p, q] = att[b * 4 + wp, :, ip, iq]
    np.testing.assert_array_equal(alternet.full_map(jnp.asarray(att), 2, 8, 8, 4), expected)


def test_alternet_feature_names_and_shapes():
    model = _model("vanilla")
    images = jnp.zeros((2, 16, 16, 1))
    feats, maps = jax.eval_shape(  # shapes only: nothing is compiled
        lambda: (lambda v: (features(model, v, images), attention_maps(model, v, images)))(
            model.init(jax.random.key(0), images)
        )
    )
    # stages of two blocks: [conv, conv], then [conv, MSA] three times (PK22's pattern, MSAs end stages)
    assert list(feats) == [
        "stem",
        "block_00/conv",
        "block_01/conv",
        "block_02/conv",
        "block_03/attention",
        "block_04/conv",
        "block_05/attention",
        "block_06/conv",
        "block_07/attention",
    ]
    assert feats["block_03/attention"].shape == (2, 8, 8, 32) and feats[
        "block_07/attention"
    ].shape == (2, 2, 2, 128)
    assert {k: v.shape for k, v in maps.items()} == {
        "block_03": (2, 1, 64, 64),
        "block_05": (2, 2, 16, 16),
        "block_07": (2, 4, 4, 4),
    }


@pytest.mark.parametrize("attention", ["positional", "vanilla"])
def test_alternet_attention_is_windowed_softmax(attention):
    # a two-stage AlterNet whose MSA block sees an 8 x 8 map: four windows of 4 x 4 positions
    model = alternet.AlterNet(
        num_classes=3, stage_features=(8, 16), stage_msa=(False, True), attention=attention
    )
    images = jax.random.normal(jax.random.key(1), (2, 16, 16, 1))

    def run(key, x):  # one compiled program: initialising a conv net is slow to compile on CPU
        v = model.init(key, x[:1])
        return features(model, v, x), attention_maps(model, v, x), model.apply(v, x)

    feats, maps, logits = jax.jit(run)(jax.random.key(0, impl="rbg"), images)
    assert list(feats) == [
        "stem",
        "block_00/conv",
        "block_01/conv",
        "block_02/conv",
        "block_03/attention",
    ]
    att = np.asarray(maps["block_03"])
    assert att.shape == (2, 1, 64, 64)
    np.testing.assert_allclose(att.sum(-1), 1.0, rtol=1e-5)
    # position (0, 0) attends only inside its window (rows 0-3, columns 0-3 of the map)
    inside = np.zeros((8, 8), bool)
    inside[:4, :4] = True
    assert att[0, 0, 0][~inside.ravel()].max() == 0.0 and att[0, 0, 0][inside.ravel()].min() > 0
    same_for_all = np.allclose(att[0], att[1])
    assert same_for_all == (
        attention == "positional"
    )  # positional attention does not see the image
    assert logits.shape == (2, 3) and bool(jnp.isfinite(logits).all())


def test_plain_resnet_variant_and_errors():
    model = _model(variant="XS/0000")
    images = jnp.zeros((1, 16, 16, 1))
    maps = jax.eval_shape(
        lambda: attention_maps(model, model.init(jax.random.key(0), images), images)
    )
    assert maps == {}
    assert not any(alternet.parse_variant("XS/0000")[1]) and all(
        alternet.parse_variant("18/1111")[1]
    )
    # two stages (the smoke's size): the default pattern's last two digits, and two digits to give
    assert alternet.parse_variant("XXS") == ((16, 32), (True, True))
    with pytest.raises(ConfigError, match="one digit"):
        _model(variant="XXS/0111")
    with pytest.raises(ConfigError, match="AlterNet variant"):
        _model(variant="Ti/4")
    with pytest.raises(ConfigError, match="AlterNet variant"):
        _model(variant="XS/012")
    with pytest.raises(ConfigError, match="attention"):
        _model(attention="posit")
