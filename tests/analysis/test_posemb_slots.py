"""What JSL22's positional-embedding statistics (posattn.analysis.posemb) and LWLC23's slot metrics
(posattn.analysis.slot_attention) refuse: inputs of another grid or layout, which today give numbers."""

import jax.numpy as jnp
import numpy as np
import pytest

from posattn.analysis import posemb, slot_attention
from posattn.errors import ConfigError
from posattn.vision.data import permutation
from posattn.vision.data.token_grid import IRRELEVANT, RELEVANT


def test_similarities_of_another_grid_or_with_the_cls_row_are_refused():
    P = np.random.default_rng(0).normal(size=(17, 8))  # a CLS row and a 4 x 4 grid
    sim = posemb.cosine_similarity(P)
    # the 17 x 17 matrix read as a 4 x 4 grid: today its first 16 rows, the CLS row taken for a patch
    with pytest.raises(ConfigError, match=r"shape \(17, 17\) for the 4 x 4 grid: give \(16, 16\)"):
        posemb.neighbour_statistic(sim, (4, 4), shuffles=10)
    with pytest.raises(ConfigError, match=r"give \(16, 16\)"):
        posemb.distance_rank_correlation(sim, (4, 4))
    with pytest.raises(ConfigError, match=r"give \(N, D\) rows"):
        posemb.cosine_similarity(P[1:].reshape(4, 4, 8))
    with pytest.raises(ConfigError, match=r"give the \(h, w, D\) grid"):
        posemb.similarity_maps(P[1:])


def test_a_permutation_of_another_grid_is_refused():
    P = np.zeros((4, 4, 8))  # the 4 x 4 patch grid of 16 x 16 images, patch 4
    with pytest.raises(ConfigError, match="must be a permutation of the 4 blocks"):
        posemb.unpermute_embedding(
            P, 8, 4, permutation.block_permutation((32, 32), 8, 0)
        )  # 16 blocks
    with pytest.raises(ConfigError, match="must be a permutation"):
        posemb.unpermute_embedding(
            P, 4, 4, np.zeros(16, int)
        )  # repeats: today a grid of one patch's row


def test_slot_metrics_refuse_types_of_another_grid_and_pruning_every_slot():
    att_BxQxN = jnp.full((2, 9, 9), 1 / 9)
    types_BxS = jnp.asarray(np.repeat([[RELEVANT] * 5 + [IRRELEVANT] * 4], 2, 0))
    np.testing.assert_allclose(slot_attention.relevant_mass(att_BxQxN, types_BxS), 5 / 9, rtol=1e-6)
    with pytest.raises(ConfigError, match=r"slot types of shape \(2, 8\)"):
        slot_attention.relevant_mass(att_BxQxN, types_BxS[:, :8])
    with pytest.raises(ConfigError, match="k=9: give 0 <= k < 9"):
        slot_attention.prune_least_attended(jnp.zeros((2, 9)), 9)
    with pytest.raises(ConfigError, match="3 inputs, 2 labels and 2 slot types"):
        slot_attention.evaluate(
            None, None, np.zeros((3, 6, 6, 1)), np.zeros(2), np.zeros((2, 9)), [1]
        )
