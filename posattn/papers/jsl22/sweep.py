"""Sample complexity (Theorem 4.2 of JSL22): patch association and test error against N, over seeds.

The runs are a grid of (sample size N) x (seed) trained as one compiled call (`posattn.theory.gd.
fit_sizes`); this module reads the grid's final entries into per-size rates and quartiles.
"""

from collections.abc import Sequence

import numpy as np


def summarise(entries: dict, sizes: Sequence[int]) -> dict:
    """Per size: success rate of patch association and the test error's mean, std and quartiles."""
    err = np.asarray(entries["test_error"])
    success = np.asarray(entries["patch_association_share"]) >= 1.0
    return {
        "sizes": [int(n) for n in sizes],
        "seeds": int(err.shape[1]),
        "patch_association_rate": success.mean(1).tolist(),
        "test_error_mean": err.mean(1).tolist(),
        "test_error_std": err.std(1).tolist(),
        "test_error_q25": np.quantile(err, 0.25, axis=1).tolist(),
        "test_error_q75": np.quantile(err, 0.75, axis=1).tolist(),
    }
