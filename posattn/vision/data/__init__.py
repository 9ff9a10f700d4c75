"""Image data: `datasets` (tfds and the bundled digits behind one random-access `Split`), `pipeline`
(deterministic, per-process training and evaluation batches), `permutation` (JSL22 Figure 5's pixel-block
permutation) and `augment` (on-device crop, flip, RandAugment, mixup)."""
