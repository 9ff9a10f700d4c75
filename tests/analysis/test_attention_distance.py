import numpy as np
import pytest

from posattn.analysis import attention_distance as ad
from posattn.analysis import posemb
from posattn.errors import ConfigError


def test_attention_to_itself_reaches_nowhere_and_uniform_attention_reaches_the_mean_pair_distance():
    grid = (2, 2)
    self_only = np.broadcast_to(np.eye(4), (3, 2, 4, 4))  # 3 images, 2 heads
    np.testing.assert_allclose(ad.mean_attention_distance(self_only, grid), [0.0, 0.0])
    uniform = np.full((2, 4, 4), 0.25)
    # each query of a 2 x 2 grid sees itself (0), two neighbours (1) and the diagonal (sqrt 2)
    expected = (0 + 1 + 1 + np.sqrt(2)) / 4
    np.testing.assert_allclose(ad.mean_attention_distance(uniform, grid), [expected] * 2)
    assert ad.uniform_distance(grid) == pytest.approx(expected)


def test_heads_are_kept_apart_and_averaged_over_queries_and_images():
    grid = (1, 3)
    right = np.roll(
        np.eye(3), 1, axis=1
    )  # query i attends to i + 1 (the last wraps to 0: distance 2)
    A = np.stack([np.eye(3), right])[None]  # (1 image, 2 heads, 3, 3)
    np.testing.assert_allclose(ad.mean_attention_distance(A, grid), [0.0, (1 + 1 + 2) / 3])


def test_a_cls_token_is_dropped_and_the_patch_weights_renormalised():
    grid = (1, 2)
    A = np.array(
        [[[0.5, 0.25, 0.25], [0.5, 0.0, 0.5], [0.5, 0.5, 0.0]]]
    )  # (heads=1, 3, 3), CLS first
    # patch queries: 0 attends to patch 1 only, 1 to patch 0 only (after renormalising): distance 1 each
    np.testing.assert_allclose(ad.mean_attention_distance(A, grid, cls=True), [1.0])
    with pytest.raises(ConfigError, match=r"give \(\.\.\., heads, 2, 2\)"):
        ad.mean_attention_distance(A, grid)


def test_flip_folded_rank_correlation_sees_the_locality_of_a_mirror_symmetric_embedding():
    h, w = 4, 5
    rows, cols = np.divmod(np.arange(h * w), w)
    dist = np.hypot(
        rows[:, None] - rows[None],
        np.minimum(
            np.abs(cols[:, None] - cols[None]), np.abs(cols[:, None] - (w - 1 - cols[None]))
        ),
    )
    sim = np.exp(-dist)  # similarity a strictly decreasing function of the folded distance
    assert posemb.distance_rank_correlation(sim, (h, w), fold_flip=True) == pytest.approx(-1.0)
    assert (
        posemb.distance_rank_correlation(sim, (h, w)) > -0.8
    )  # mirror pairs look non-local unfolded
