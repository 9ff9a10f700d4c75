"""Image data: `datasets` (any dataset by name behind one `Dataset` interface: the bundled digits, the
families of composite grids, Fashion-MNIST from its IDX files (`idx`), any tfds image-classification
dataset (`tfds_datasets`)), `arrays` (a dataset of your own numpy arrays), `split` (one split behind
random access, and its channel statistics), `pipeline` (deterministic, per-process training and
evaluation batches), `permutation` (JSL22 Figure 5's pixel-block permutation) and `augment` (on-device
crop, flip, RandAugment, mixup)."""
