"""How long an image recipe must be: the doubling test of docs/image_results.md (issue 46).

A length L is long enough when doubling it moves the mean validation accuracy over seeds by less than
max(`MIN_POINTS`, the larger standard deviation over seeds of the two lengths): the spread of the seeds
is the resolution of the measurement, and half a point is the least change a recipe choice cares about.
"""

import numpy as np

MIN_POINTS = 0.5


def doubling(accuracy_L, accuracy_2L, min_points: float = MIN_POINTS) -> dict:
    """The doubling test of one model kind from its accuracies (in points, one per seed) at L and 2L:
    {"moved": mean(2L) - mean(L), "threshold", "long_enough": |moved| < threshold}. With one seed at a
    length its spread is 0 and the threshold is `min_points`."""
    a, b = (np.asarray(v, np.float64) for v in (accuracy_L, accuracy_2L))
    spread = max((v.std(ddof=1) if v.size > 1 else 0.0) for v in (a, b))
    threshold = max(min_points, float(spread))
    moved = float(b.mean() - a.mean())
    return {"moved": moved, "threshold": threshold, "long_enough": abs(moved) < threshold}
