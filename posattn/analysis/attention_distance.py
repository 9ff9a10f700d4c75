"""Mean attention distance: how far, on the patch grid, a ViT's attention reaches (Dosovitskiy et al.
2021, Fig. 7 right; Raghu et al. 2021). JSL22 Figure 1a shows that a learned P can be local; whether the
attention built from it is local is a separate question, answered here.

For attention weights A (each row a distribution over the N patches of an h x w grid), the mean
attention distance of head k is

    d_k = mean_i sum_j A_k[i, j] ||g_i - g_j||,

g_i the (row, column) of patch i and ||.|| Euclidean, in patches, averaged over the queries i (and the
images, for attention that depends on them). Uniform attention gives `uniform_distance(grid)`, the mean
distance between two patches of the grid (with itself included): a head below it attends locally.
"""

import numpy as np

from posattn.analysis.posemb import grid_euclidean
from posattn.errors import ConfigError


def mean_attention_distance(A_xHxNxN, grid_hw: tuple[int, int], *, cls: bool = False) -> np.ndarray:
    """(heads,) mean attention distance d_k of attention weights (..., heads, N, N), averaged over the
    queries and every leading axis (images). With `cls`, row and column 0 (the CLS token, which has no
    place on the grid) are dropped and each query's weights on the patches renormalised.
    ConfigError unless N (less the CLS token) is h * w."""
    A = np.asarray(A_xHxNxN, np.float64)
    if cls:
        A = A[..., 1:, 1:]
        A = A / np.maximum(A.sum(-1, keepdims=True), 1e-30)
    n = grid_hw[0] * grid_hw[1]
    if A.ndim < 3 or A.shape[-2:] != (n, n):
        raise ConfigError(
            f"attention weights of shape {A.shape} for the {grid_hw[0]} x {grid_hw[1]} grid: "
            f"give (..., heads, {n}, {n}) over the patches"
            + ("" if cls else " (cls=True drops a CLS row)")
        )
    per_query = np.einsum("...ij,ij->...i", A, grid_euclidean(grid_hw))
    return per_query.reshape(-1, *A.shape[-3:-1]).mean(axis=(0, 2))


def uniform_distance(grid_hw: tuple[int, int]) -> float:
    """The mean attention distance of uniform attention: the mean distance over all ordered pairs (i, j),
    i = j included."""
    return float(grid_euclidean(grid_hw).mean())
