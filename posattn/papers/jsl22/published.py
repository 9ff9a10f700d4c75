"""Every number of JSL22 that this project sets beside its own, in one place (the claims' rows, the
image binaries' summaries and their figures take them from here).
"""

# Theorem 3.1: every generalised linear model g(X) = phi(sum_j <w_j, X_j>) errs with probability >= 1/8.
GLM_ERROR_BOUND = 1 / 8

# Figure 2 (Gaussian patches labelled by a cubic CNN): Eq. (T)'s test error after ~60 of 1000 GD steps.
FIGURE2_TEST_ERROR = (0.065, 0.07)
FIGURE2_STEPS = (60, 1000)

# Figure 5 (pixel blocks of g x g permuted, CIFAR-100): test accuracy (%) per model and block size g.
PERMUTED_ACCURACY = {
    "cifar100": {
        "resnet18": {2: 57.3, 4: 66.2, 8: 73.2, 16: 78.4, 32: 79.9},
        "vgg16": {2: 46.7, 4: 57.0, 8: 66.6, 16: 72.9, 32: 76.2},
        "vit": {2: 63.6, 4: 63.6, 8: 63.7, 16: 63.6, 32: 63.5},
    }
}

# Figures 7 (medians of 10 seeds: CIFAR, SVHN) and 6 (ImageNet, one run): test accuracy (%) of a ViT
# with vanilla and with positional attention, and the seeds behind each.
ATTENTION_ACCURACY = {
    "cifar10": {"vanilla": 90.23, "positional": 90.54, "seeds": 10},
    "cifar100": {"vanilla": 68.00, "positional": 67.95, "seeds": 10},
    "svhn_cropped": {"vanilla": 98.23, "positional": 97.32, "seeds": 10},
    "imagenet2012": {"vanilla": 71.9, "positional": 68.9, "seeds": 1},
}
