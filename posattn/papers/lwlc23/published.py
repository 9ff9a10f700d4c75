"""Every number of LWLC23 that this project sets beside its own, in one place (figures read off the
plots to +-0.01; the report rows and the figures take them from here).
"""

# Proposition 2's figure: attention mass on label-relevant tokens (relevant queries) over SGD iterations.
ATTENTION_MASS = {"step": [0, 10, 20, 30, 40, 50], "mass": [0.54, 0.67, 0.79, 0.86, 0.90, 0.91]}

# Token sparsification: test hinge loss against the number of tokens removed, per removal policy.
SPARSIFICATION_LOSS = {
    "irrelevant": ([0, 10, 20], [0.077, 0.040, 0.007]),
    "noisy": ([0, 10, 20], [0.077, 0.064, 0.045]),
    "random": ([0, 20], [0.077, 0.074]),
}

# Theorem 1 and Proposition 1: the sample complexity N* grows as alpha_*^-POWER.
SAMPLE_COMPLEXITY_POWER = {"ViT": 2, "attention-free": 4}

# The deeper ViT: test accuracy at alpha_* = R/9 from an init pre-trained on a modified CIFAR-10.
GRID_ACCURACY = {5: 0.837, 6: 0.902, 7: 0.942, 8: 0.953, 9: 0.985}
