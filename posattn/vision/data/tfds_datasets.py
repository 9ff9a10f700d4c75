"""Any tfds image-classification dataset by name, read through `tfds.data_source` (random access, no
TensorFlow).

What a run needs to know comes from the dataset's tfds metadata (`tfds.builder(name).info`): the image
and label features (its supervised keys: an `Image` and a `ClassLabel`), hence the classes and the image
shape, and its split names: "train" trains, "test" evaluates ("validation" where a dataset has no "test"
split, and for ImageNet, whose "test" split has no labels). A split whose images take at most
`split.IN_MEMORY_BYTES` at the run's size is decoded once and indexed (CIFAR, SVHN, MNIST); a larger one
(ImageNet) is decoded by index at every read, on a thread pool. Images of varying size (ImageNet,
oxford_flowers102) are resized (shorter side) and centre-cropped to the run's image_size, which such a
dataset must set. A dataset that is not prepared in array_record format is a ConfigError naming the
`tfds build` command that prepares it.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os

import numpy as np

from posattn.errors import ConfigError
from posattn.vision.data import split as split_lib

# tfds name -> the split that evaluates, where it is not the rule's ("test", else "validation").
TEST_SPLITS = {"imagenet2012": "validation"}  # ImageNet's "test" split has no labels


def check_local_data_dir(path: str | None, name: str = "--config.data_dir") -> str | None:
    """`path` as given if it is on this machine's file system (or None); else ConfigError in one line,
    `name` naming where it came from, with the routes that work. The images are read by index from local
    files: ArrayRecord cannot open gs:// (google/array_record#120), nor the IDX reader."""
    if path and "://" in str(path):
        raise ConfigError(
            f"{name}={path} is not on this machine's disk, and the data are read from local files: "
            f"copy them to the host's disk (gcloud storage cp -r {path} /data) and pass that folder, or "
            "mount the bucket with gcsfuse (gcsfuse --implicit-dirs BUCKET /mnt/BUCKET) and pass the "
            "path under the mount"
        )
    return path


def resolve_data_dir(data_dir: str | None) -> str:
    """The tfds data directory: `data_dir`, else $TFDS_DATA_DIR, else tfds' default (~/tensorflow_datasets);
    ConfigError if it is not local (`check_local_data_dir`)."""
    if data_dir:
        return os.path.expanduser(check_local_data_dir(data_dir))
    if os.environ.get("TFDS_DATA_DIR"):
        return os.path.expanduser(
            check_local_data_dir(os.environ["TFDS_DATA_DIR"], "$TFDS_DATA_DIR")
        )
    return os.path.expanduser(os.path.join("~", "tensorflow_datasets"))


def build_command(name: str, data_dir: str) -> str:
    """The command that prepares `name` for random access in `data_dir` (on a machine with internet;
    `tfds build` runs TensorFlow's builders: `pip install 'posattn[data]'` first)."""
    command = f"pip install 'posattn[data]' && tfds build {name} --file_format=array_record --data_dir={data_dir}"
    if name == "imagenet2012":  # ImageNet cannot be downloaded by tfds: it reads the official tars.
        command += " --manual_dir=DIR_WITH_ILSVRC2012_TARS"
    return command


@dataclasses.dataclass(frozen=True, eq=False)
class TfdsDataset:
    """A tfds image-classification dataset (a `posattn.vision.data.datasets.Dataset`); build it with
    `dataset(name)`.

    `native_shape` is the (H, W, C) of its images, H and W None where they vary; `splits` maps our
    "train" and "test" to tfds split names; `stats` is the known per-channel (mean, std), None to compute
    them. `other_source` (one clause) names another way to get the data, for the not-prepared message.
    """

    name: str
    data_dir: str
    num_classes: int
    native_shape: tuple[int | None, int | None, int]
    splits: dict
    image_key: str = "image"
    label_key: str = "label"
    stats: tuple | None = None
    other_source: str = ""
    flip_preserves_label: bool | None = None  # (datasets.FLIP_PRESERVES_LABEL; None: unknown)
    _sources: dict = dataclasses.field(default_factory=dict, repr=False)

    def source(self, split: str):
        """`tfds.data_source` of `split`, opened once; ConfigError naming `tfds build` if not prepared."""
        if split not in self._sources:
            import tensorflow_datasets as tfds  # imported here: digits-only users never pay for it

            try:
                self._sources[split] = tfds.data_source(
                    self.name, split=self.splits[split], data_dir=self.data_dir, download=False
                )
            # Without TensorFlow, tfds reports a missing dataset (and one prepared as tfrecord only) as
            # NotImplementedError "random access ... not supported", an empty split table as KeyError.
            except (NotImplementedError, KeyError, FileNotFoundError) as e:
                raise ConfigError(
                    f"dataset {self.name} is not prepared in array_record format under {self.data_dir}; "
                    f"{self.other_source}prepare it with: {build_command(self.name, self.data_dir)}"
                ) from e
        return self._sources[split]

    def sizes(self) -> tuple[int, int]:
        """(training, test) examples; ConfigError if the dataset is not prepared."""
        return len(self.source("train")), len(self.source("test"))

    def open_split(self, split: str, image_size: int) -> split_lib.Split:
        """`split` at image_size x image_size (0: native), decoded once if it fits `split.IN_MEMORY_BYTES`."""
        source = self.source(split)
        h, w, c = self.native_shape
        if not image_size and h is None:
            raise ConfigError(
                f"dataset {self.name} has images of varying size: set --config.image_size "
                "to the side they are resized and centre-cropped to (e.g. 64)"
            )
        size = image_size or h
        shape = (size, size, c)
        resize = (h, w) != (size, size)  # (varying sizes are None: always resized)
        pool = concurrent.futures.ThreadPoolExecutor(_read_threads())
        if len(source) * size * size * c <= split_lib.IN_MEMORY_BYTES:
            with pool:
                return split_lib.in_memory(
                    *self._decode(source, np.arange(len(source)), shape, resize, pool)
                )
        return split_lib.Split(
            num_examples=len(source),
            image_shape=shape,
            read=lambda indices: self._decode(source, np.asarray(indices), shape, resize, pool),
            original=lambda index: self._original(source, index),
        )

    def _original(self, source, index: int) -> tuple[np.ndarray, int]:
        """Example `index` of a source as decoded, at full resolution: (H, W, C) uint8 and its label."""
        example = source[int(index)]
        return np.asarray(example[self.image_key], dtype=np.uint8), int(example[self.label_key])

    def _decode(
        self, source, indices: np.ndarray, shape, resize: bool, pool
    ) -> tuple[np.ndarray, np.ndarray]:
        """Examples `indices` of a source as (N, *shape) uint8 and int32 labels, resized first if `resize`."""
        images = np.empty((len(indices), *shape), np.uint8)
        labels = np.empty((len(indices),), np.int32)

        def one(k):
            example = source[int(indices[k])]
            image = np.asarray(example[self.image_key], dtype=np.uint8)
            images[k] = split_lib.resize_and_center_crop(image, shape[0]) if resize else image
            labels[k] = example[self.label_key]

        for _ in pool.map(one, range(len(indices))):  # consume, so that worker errors surface here
            pass
        return images, labels


def _read_threads() -> int:
    # Decoding (PIL) releases the GIL; a few threads per core keep the reads of a batch overlapped.
    return min(32, 4 * (os.cpu_count() or 1))


def _supervised_keys(name: str, info) -> tuple[str, str]:
    """(image key, label key): the dataset's supervised keys, else "image" and "label"; ConfigError unless
    they are an image and a class label."""
    import tensorflow_datasets as tfds

    keys = info.supervised_keys
    image_key, label_key = (
        keys
        if (isinstance(keys, tuple) and len(keys) == 2 and all(isinstance(k, str) for k in keys))
        else ("image", "label")
    )
    features = info.features
    if not (
        image_key in features
        and isinstance(features[image_key], tfds.features.Image)
        and label_key in features
        and isinstance(features[label_key], tfds.features.ClassLabel)
    ):
        raise ConfigError(
            f"dataset {name} is not an image-classification dataset: it has no image and "
            f"class-label features (its features: {', '.join(features.keys())})"
        )
    return image_key, label_key


def _split_names(name: str, available) -> dict:
    """Our "train" and "test" -> the dataset's split names. A dataset not (yet) prepared has no split
    table: the names then follow the rule and a missing one is reported when the split is opened."""
    available = list(available)
    test = TEST_SPLITS.get(name) or (
        "validation" if available and "test" not in available else "test"
    )
    for split in ("train", test):
        if available and split not in available:
            raise ConfigError(
                f"dataset {name} has no {split!r} split (its splits: {', '.join(available)}): "
                "a dataset needs a 'train' split and a 'test' or 'validation' split"
            )
    return {"train": "train", "test": test}


def dataset(
    name: str,
    data_dir: str | None = None,
    *,
    stats=None,
    other_source: str = "",
    flip_preserves_label: bool | None = None,
) -> TfdsDataset | None:
    """The tfds dataset `name` from its metadata (no data read), None if tfds knows no such dataset.

    ConfigError if it is not an image-classification dataset; whether its data are prepared is checked
    when a split is first read.
    """
    import tensorflow_datasets as tfds

    directory = resolve_data_dir(data_dir)
    try:
        info = tfds.builder(name, data_dir=directory).info
    except ValueError:  # DatasetNotFoundError, or a name tfds cannot parse
        return None
    image_key, label_key = _supervised_keys(name, info)
    h, w, c = info.features[image_key].shape
    if c is None:
        raise ConfigError(f"dataset {name} does not say how many channels its images have")
    return TfdsDataset(
        name=name,
        data_dir=directory,
        num_classes=info.features[label_key].num_classes,
        native_shape=(h, w, c) if h == w else (None, None, c),
        splits=_split_names(name, info.splits.keys()),
        image_key=image_key,
        label_key=label_key,
        stats=stats,
        other_source=other_source,
        flip_preserves_label=flip_preserves_label,
    )
