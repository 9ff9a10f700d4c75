"""Every number of PK22 that this project sets beside its own, in one place: what the paper publishes for
each claim of `claims.rows`, read off its figures (ImageNet or CIFAR-100 models, so only the signs and
orders of magnitude carry over to the digits).
"""

NUMBERS = {
    "accuracy": "CIFAR-100: AlterNet 84.0, ResNet-50 82.5, ViT-Ti 66.5",
    "hessian_ape": "ResNet ~200 to >800 (peak ~300); ViT peak ~+30",
    "hessian_nep": "ResNet ~0 (all positive); ViT a large share, down to ~-70 (peak ~-31)",
    "fourier_attention": "negative (MSAs are low-pass filters)",
    "fourier_other": "positive (Convs are high-pass filters)",
    "fourier_range": "ResNet -6.6 (stem) to ~-1; ViT -2.7 to -1.7 (ImageNet)",
    "noise_low": "ResNet -5.0, ViT -5.5",
    "noise_high": "ResNet -15.3, ViT -4.8",
    "variance_attention": "negative at every MSA",
    "variance_other": "positive",
    "landscape_nll": "ViT-Ti 2.49, ResNet-50 2.19 (CIFAR-100)",
    "landscape_rise": "ViT 4.5 and 12.3; ResNet 7.8 and 20.0",
    "landscape_rise_nll": "not published (PK22's landscape includes the L2 term)",
}
