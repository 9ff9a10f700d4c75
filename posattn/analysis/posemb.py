"""Positional-embedding similarity, JSL22 Figures 1a and 5c.

The learned positional embedding P (one row per patch) is compared by cosine similarity
(P P^T normalised to [-1, 1]); the paper draws, for a patch, its similarity to every patch on the 2-D
patch grid, thresholded at 0.55, and finds that nearby patches have similar encodings. For a ViT
trained on images whose g x g pixel blocks were permuted (Figure 5), the grid the model sees is the
permuted one; undoing the permutation on P (`unpermute_embedding`) should bring back the original 2-D
neighbourhoods. `neighbour_statistic` turns "neighbours are more similar" into numbers, and
`distance_rank_correlation` "similarity falls with distance" into one number over all pairs of patches.
"""

import numpy as np

from posattn.errors import ConfigError
from posattn.vision.data.permutation import unpermute_blocks

THRESHOLD = 0.55  # JSL22 Figure 1a


def patch_embedding(
    params, grid_hw: tuple[int, int], *, cls: bool = False, block: int = 0
) -> np.ndarray:
    """P of the patches as an (h, w, D) grid: params["pos_embedding"] ((T, D), or (depth, T, D) with one
    P per block, of which `block` is taken), without the CLS row (row 0) when `cls`."""
    P = np.asarray(params["pos_embedding"], np.float64)
    if P.ndim == 3:
        if not 0 <= block < P.shape[0]:
            raise ConfigError(
                f"block {block} out of range: the model has {P.shape[0]} per-block embeddings"
            )
        P = P[block]
    P = P[1:] if cls else P
    h, w = grid_hw
    if P.shape[0] != h * w:
        raise ConfigError(
            f"the embedding has {P.shape[0]} patch rows, the grid {h} x {w} needs {h * w}"
        )
    return P.reshape(h, w, -1)


def unpermute_embedding(P_hxwxD: np.ndarray, g: int, patch_size: int, perm) -> np.ndarray:
    """P in the original image's patch order, for a model trained on g-block-permuted images.

    Block k of a training image was block perm[k] of the original (`permutation.permute_blocks`), so the patch
    at permuted position k stands for original position perm[k]; with g a multiple of the patch size a
    pixel block is a block of (g/p)^2 patches, moved whole. For g < p a patch mixes pixels of several
    original patches and there is no patch order to restore.
    """
    if g % patch_size:
        raise ConfigError(
            f"pixel blocks of side {g} are not whole patches of side {patch_size}: "
            "the permutation cannot be undone on the patch grid (need g % patch_size == 0)"
        )
    h, w, b = *np.shape(P_hxwxD)[:2], g // patch_size
    blocks = (h // b) * (w // b) if b and not h % b and not w % b else None
    if blocks is None or sorted(np.asarray(perm).tolist()) != list(range(blocks)):
        raise ConfigError(
            f"perm (of {np.size(perm)} entries) must be a permutation of the "
            f"{blocks or 'whole'} blocks of {b} x {b} patches of the {h} x {w} patch grid: "
            "give the run's own (permutation.block_permutation of its image size, g and seed)"
        )
    return np.asarray(unpermute_blocks(P_hxwxD, b, perm))


def cosine_similarity(P_NxD: np.ndarray) -> np.ndarray:
    """cos(P_i, P_j) for all pairs of rows: Figure 1a's P^T P normalised to [-1, 1]. ConfigError unless
    P is (N, D)."""
    P = np.asarray(P_NxD, np.float64)
    if P.ndim != 2:
        raise ConfigError(
            f"P of shape {P.shape}: give (N, D) rows (a grid (h, w, D): P.reshape(h * w, D))"
        )
    P = P / np.maximum(np.linalg.norm(P, axis=-1, keepdims=True), 1e-12)
    return P @ P.T


def _check_grid(sim_NxN, grid_hw) -> None:
    """ConfigError unless sim is the (N, N) similarity of the N = h * w patches of `grid_hw`: on another
    grid the pairs' distances, and so every statistic of them, would be wrong."""
    if len(grid_hw) != 2 or min(grid_hw) < 1:
        raise ConfigError(f"grid_hw={grid_hw!r}: give (h, w) of the patch grid, both >= 1")
    n = grid_hw[0] * grid_hw[1]
    if np.shape(sim_NxN) != (n, n):
        raise ConfigError(
            f"similarities of shape {np.shape(sim_NxN)} for the {grid_hw[0]} x {grid_hw[1]} "
            f"grid: give ({n}, {n}), the patches only (no CLS row), row-major"
        )


def grid_distances(grid_hw: tuple[int, int]) -> np.ndarray:
    """(N, N) Manhattan distances between the patches of an h x w grid, patches row-major."""
    h, w = grid_hw
    rows, cols = np.divmod(np.arange(h * w), w)
    return np.abs(rows[:, None] - rows[None]) + np.abs(cols[:, None] - cols[None])


def grid_euclidean(grid_hw: tuple[int, int], *, fold_flip: bool = False) -> np.ndarray:
    """(N, N) Euclidean distances between the patches of an h x w grid (row-major), in patches; with
    `fold_flip`, across the grid folded about its vertical axis (column c and w - 1 - c as one)."""
    h, w = grid_hw
    rows, cols = np.divmod(np.arange(h * w), w)
    across = np.abs(cols[:, None] - cols[None])
    if fold_flip:
        across = np.minimum(across, np.abs(cols[:, None] - (w - 1 - cols[None])))
    return np.hypot(rows[:, None] - rows[None], across)


def distance_rank_correlation(
    sim_NxN: np.ndarray, grid_hw: tuple[int, int], *, fold_flip: bool = False
) -> float:
    """Spearman's rank correlation between the similarity of two patches' embeddings and their Euclidean
    distance on the patch grid, over all pairs i < j: how local P is (JSL22 Figures 1a and 5c) as one
    number. -1: similarity falls strictly with distance; about 0 for embeddings blind to position, as
    i.i.d. P at initialisation (the spread of rho over pairs of a random P is then ~1 / sqrt(N^2 / 2)).

    `fold_flip`: the distance on the grid folded about its vertical axis, min(|c_i - c_j|,
    |c_i - (w - 1 - c_j)|) across: a model trained with horizontal flips sees patch (r, c) where
    (r, w - 1 - c) was, so its P may be mirror-symmetric, and the plain distance counts that symmetry
    as non-locality. ConfigError for a similarity matrix that is not (h w, h w) for `grid_hw`."""
    from scipy import stats

    _check_grid(sim_NxN, grid_hw)
    dist = grid_euclidean(grid_hw, fold_flip=fold_flip)
    i, j = np.triu_indices(grid_hw[0] * grid_hw[1], k=1)
    return float(stats.spearmanr(np.asarray(sim_NxN)[i, j], dist[i, j]).statistic)


def neighbour_statistic(
    sim_NxN: np.ndarray,
    grid_hw: tuple[int, int],
    *,
    shuffles: int = 2000,
    seed: int = 0,
    across_blocks: int = 0,
) -> dict:
    """Mean similarity of 4-neighbour pairs (distance 1) vs all other pairs of distinct patches.

    `gap` = neighbour - non_neighbour. `z` and `p_value` compare the gap with the gaps of `shuffles`
    random relabellings of the patches (the same similarity values on a scrambled grid): on a small grid
    (4 x 4 for the digits) a positive gap can arise by chance, and this says how likely that is.
    `across_blocks` = b > 0 keeps only the neighbour pairs that lie in different b x b blocks of patches:
    for a model trained on b-block-permuted images (un-permuted P), exactly the neighbours that the
    permutation tore apart, so their similarity can only come from what the model learnt of the image.
    ConfigError for a similarity matrix that is not (h w, h w) for `grid_hw`.
    """
    _check_grid(sim_NxN, grid_hw)
    sim_NxN = np.asarray(sim_NxN)
    dist = grid_distances(grid_hw)
    off = ~np.eye(dist.shape[0], dtype=bool)
    near, far = (dist == 1) & off, (dist > 1) & off
    if across_blocks:
        rows, cols = np.divmod(np.arange(dist.shape[0]), grid_hw[1])
        block = (rows // across_blocks) * grid_hw[1] + cols // across_blocks
        near &= block[:, None] != block[None, :]

    def gap(s):
        return s[near].mean() - s[far].mean()

    observed = gap(sim_NxN)
    rng = np.random.default_rng(seed)
    null = np.empty(shuffles)
    for i in range(shuffles):
        p = rng.permutation(sim_NxN.shape[0])
        null[i] = gap(sim_NxN[np.ix_(p, p)])
    return {
        "neighbour": float(sim_NxN[near].mean()),
        "non_neighbour": float(sim_NxN[far].mean()),
        "gap": float(observed),
        "z": float((observed - null.mean()) / max(null.std(), 1e-12)),
        "p_value": float((1 + np.sum(null >= observed)) / (1 + shuffles)),
        "pairs": {"neighbour": int(near.sum()), "non_neighbour": int(far.sum())},
    }


def similarity_maps(P_hxwxD: np.ndarray) -> np.ndarray:
    """(h*w, h, w): map i is the similarity of patch i (row-major) to every patch of the grid; ConfigError
    unless P is an (h, w, D) grid (`patch_embedding`)."""
    if np.ndim(P_hxwxD) != 3:
        raise ConfigError(
            f"P of shape {np.shape(P_hxwxD)}: give the (h, w, D) grid of patch_embedding"
        )
    h, w, _ = np.shape(P_hxwxD)
    return cosine_similarity(P_hxwxD.reshape(h * w, -1)).reshape(h * w, h, w)


def thresholded(maps: np.ndarray, threshold: float = THRESHOLD) -> np.ndarray:
    """The maps with every similarity below `threshold` set to NaN (drawn blank), as in Figure 1a."""
    return np.where(maps >= threshold, maps, np.nan)
