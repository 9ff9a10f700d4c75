"""A dataset of one's own written as a records folder (`posattn.vision.data.records`): from a folder of
class subfolders of image files, a .npz of arrays, or Fashion-MNIST's IDX files; what
`python -m posattn.experiments.prepare_images` runs.

A source is (class names, {"train": examples, "test": examples}), examples a list of (image file path,
bytes or uint8 array, label) makers read lazily (`Source`). `write_dataset` writes it: each image as
its file's bytes where they can be kept (no resize, no channel change, the encoding asked for or none),
else decoded, resized (`size`: shorter side then centre crop) and encoded as PNG or JPEG; into a hidden
temporary folder beside `out`, renamed to `out` at the end, so a stopped run leaves nothing that looks
finished. An existing non-empty `out` is refused: nothing is overwritten.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from typing import Callable

import numpy as np

from posattn.errors import ConfigError
from posattn.vision.data import channel_stats, idx, records, records_writer
from posattn.vision.data import split as split_lib

# The seed of the draw of held-out test examples (--test_fraction): a constant, so a dataset written
# twice from the same source holds out the same examples.
HOLDOUT_SEED = 20261129
ENCODINGS = ("", "png", "jpeg")  # "": keep each file's own encoding (arrays: PNG)


@dataclasses.dataclass(frozen=True)
class Source:
    """Class names and, per split, the examples: `load(i) -> bytes or uint8 (H, W[, C])` and labels."""

    name: str
    class_names: tuple[str, ...]
    splits: dict  # "train" | "test" -> (list of loaders () -> bytes | array, labels int array)


def holdout(num: int, test_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """(train indices, test indices) of `num` examples, round(test_fraction num) of them held out by a
    fixed draw (`HOLDOUT_SEED`), each sorted; ConfigError unless both are non-empty."""
    if not 0 < test_fraction < 1:
        raise ConfigError(f"test_fraction={test_fraction} must lie in (0, 1)")
    num_test = int(round(test_fraction * num))
    if not 0 < num_test < num:
        raise ConfigError(
            f"test_fraction={test_fraction} of {num} examples holds out {num_test}: "
            "both splits need examples"
        )
    order = np.random.default_rng(HOLDOUT_SEED).permutation(num)
    return np.sort(order[num_test:]), np.sort(order[:num_test])


def _split_pairs(loaders, labels, test, test_fraction):
    """{"train", "test"} of (loaders, labels): `test` (loaders, labels) where given, else held out."""
    if test is not None:
        if test_fraction:
            raise ConfigError("the source has its own test split: leave test_fraction unset")
        return {"train": (loaders, labels), "test": test}
    if not test_fraction:
        raise ConfigError(
            "the source has no test split: set test_fraction (e.g. 0.2) to hold one out"
        )
    train, held = holdout(len(labels), test_fraction)
    return {
        "train": ([loaders[i] for i in train], labels[train]),
        "test": ([loaders[i] for i in held], labels[held]),
    }


def _read_bytes(path: str) -> Callable[[], bytes]:
    def load():
        with open(path, "rb") as f:
            return f.read()

    return load


def _class_folders(directory: str) -> tuple[list[str], list[Callable], np.ndarray]:
    """Sorted class subfolders of `directory` and every non-hidden file in them, sorted."""
    classes = sorted(
        e.name for e in os.scandir(directory) if e.is_dir() and not e.name.startswith(".")
    )
    loaders, labels = [], []
    for label, name in enumerate(classes):
        folder = os.path.join(directory, name)
        for file in sorted(os.listdir(folder)):
            if not file.startswith(".") and os.path.isfile(os.path.join(folder, file)):
                loaders.append(_read_bytes(os.path.join(folder, file)))
                labels.append(label)
    return classes, loaders, np.asarray(labels, np.int64)


def from_folder(directory: str, test_fraction: float = 0.0) -> Source:
    """A folder of class subfolders of image files (class = subfolder name, sorted); or of "train" and
    "test" (or "val", "validation") folders of such subfolders (the same classes in each), in which
    case test_fraction stays 0."""
    if not os.path.isdir(directory):
        raise ConfigError(f"--source={directory}: no such folder, .npz file or known dataset")
    top = sorted(e.name for e in os.scandir(directory) if e.is_dir())
    held = next((t for t in ("test", "val", "validation") if t in top), None)
    if "train" in top and held:
        names, loaders, labels = _class_folders(os.path.join(directory, "train"))
        test_names, *test = _class_folders(os.path.join(directory, held))
        if test_names != names:
            raise ConfigError(
                f"{directory}/train and {directory}/{held} hold different class folders "
                f"({names} against {test_names})"
            )
    else:
        (names, loaders, labels), test = _class_folders(directory), None
    if len(names) < 2 or not len(labels):
        raise ConfigError(
            f"{directory} holds {len(names)} class subfolders and {len(labels)} files: give a folder "
            "of at least two class subfolders of image files"
        )
    splits = _split_pairs(loaders, labels, test, test_fraction)
    name = os.path.basename(os.path.normpath(directory))
    return Source(name, tuple(names), splits)


def _array_loaders(images) -> list[Callable]:
    return [lambda i=i: images[i] for i in range(len(images))]


def from_arrays(
    name: str,
    images,
    labels,
    test_images=None,
    test_labels=None,
    *,
    test_fraction=0.0,
    class_names=None,
) -> Source:
    """uint8 images (N, H, W) or (N, H, W, C) with C in {1, 3} and integer labels in [0, K), with a test
    split of their own or `test_fraction` held out. Classes: `class_names`, else "0".."K-1"."""

    def checked(x, y, what):
        x, y = np.asarray(x), np.asarray(y)
        if (
            x.dtype != np.uint8
            or x.ndim not in (3, 4)
            or (x.ndim == 4 and x.shape[-1] not in (1, 3))
        ):
            raise ConfigError(
                f"{what} images of dtype {x.dtype} and shape {x.shape}: give uint8 (N, H, W) or "
                "(N, H, W, C) with C = 1 or 3"
            )
        if y.shape != x.shape[:1] or not np.issubdtype(y.dtype, np.integer) or (y < 0).any():
            raise ConfigError(
                f"{what} labels of dtype {y.dtype} and shape {y.shape}: give {len(x)} integers >= 0"
            )
        return x, y.astype(np.int64)

    x, y = checked(images, labels, "train")
    test = None
    if (test_images is None) != (test_labels is None):
        raise ConfigError("give both test images and test labels, or neither")
    if test_images is not None:
        tx, ty = checked(test_images, test_labels, "test")
        test = (_array_loaders(tx), ty)
    num_classes = int(max(y.max(initial=0), -1 if test is None else test[1].max(initial=0))) + 1
    if class_names is None:
        class_names = [str(k) for k in range(num_classes)]
    if len(class_names) < num_classes:
        raise ConfigError(f"{len(class_names)} class names for labels up to {num_classes - 1}")
    return Source(
        name,
        tuple(str(c) for c in class_names),
        _split_pairs(_array_loaders(x), y, test, test_fraction),
    )


def from_npz(path: str, test_fraction: float = 0.0) -> Source:
    """A .npz of `images` and `labels`, optionally `test_images` and `test_labels` and `class_names`."""
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read {path} as a .npz of arrays: {e}") from e
    if "images" not in arrays or "labels" not in arrays:
        raise ConfigError(f"{path} holds {sorted(arrays)}: it needs `images` and `labels`")
    name = os.path.splitext(os.path.basename(path))[0]
    return from_arrays(
        name,
        arrays["images"],
        arrays["labels"],
        arrays.get("test_images"),
        arrays.get("test_labels"),
        test_fraction=test_fraction,
        class_names=arrays["class_names"].tolist() if "class_names" in arrays else None,
    )


def from_idx(name: str, idx_dir: str | None = None) -> Source:
    """An IDX dataset of `idx.IDX_DATASETS` (fashion_mnist) from its files, with its own splits."""
    directory = idx.directory(name, idx_dir)
    if not idx.present(name, directory):
        spec = idx.IDX_DATASETS[name]
        raise ConfigError(
            f"the IDX files of {name} are not in {directory}: install them with `{spec.install}`, "
            f"or point --idx_dir or ${spec.env} at them"
        )
    (x, y), (tx, ty) = (idx.arrays(name, directory, s) for s in ("train", "test"))
    return from_arrays(
        name, x, y, tx, ty, class_names=[str(k) for k in range(idx.IDX_DATASETS[name].num_classes)]
    )


def source(spec: str, *, test_fraction: float = 0.0, idx_dir: str | None = None) -> Source:
    """The source `spec` names: an IDX dataset's name, a .npz file, or a folder (`from_folder`)."""
    if not spec or not str(spec).strip():
        raise ConfigError(
            "--source is required: a folder of class subfolders, a .npz file, or fashion_mnist"
        )
    if spec in idx.IDX_DATASETS:
        if test_fraction:
            raise ConfigError(f"{spec} has its own test split: leave test_fraction unset")
        return from_idx(spec, idx_dir)
    if spec.endswith(".npz"):
        return from_npz(spec, test_fraction)
    return from_folder(spec, test_fraction)


def _examples(loaders, labels, *, size, encoding, quality, channels):
    """(bytes or array, label) of each example: a file's bytes kept where nothing changes them."""
    for load, label in zip(loaders, labels):
        data = load()
        if isinstance(data, (bytes, bytearray)):
            h, w, c, fmt = records.probe(bytes(data))
            if (
                (not size or (h, w) == (size, size))
                and channels in (0, c)
                and encoding in ("", fmt)
            ):
                yield bytes(data), int(label)
                continue
            data = records.decode(bytes(data), channels or c)
        image = np.asarray(data)
        image = image.reshape(*image.shape[:2], -1)
        if channels and image.shape[-1] != channels:
            image = (
                np.repeat(image, 3, axis=-1)
                if channels == 3
                else records.decode(records.encode(image), 1)
            )
        if size:
            image = split_lib.resize_and_center_crop(image, size)
        yield records.encode(image, encoding or "png", quality), int(label)


def write_dataset(
    src: Source,
    out: str,
    *,
    size: int = 0,
    encoding: str = "",
    quality: int = 90,
    channels: int = 0,
    flip_preserves_label: bool | None = None,
    stats=None,
) -> dict:
    """Write `src` as a records folder at `out` (refused if it exists and is not empty); returns the
    metadata. size 0 keeps each image's size; encoding "" keeps each file's (arrays: PNG); channels 0
    keeps them (1: grayscale, 3: RGB). `stats`, the per-channel (mean, std) recorded for runs to
    normalise with, are by default computed here from the training split (`channel_stats.of_split`)
    where the images have one size, else left to each run."""
    records.refuse_remote(out)
    if encoding not in ENCODINGS:
        raise ConfigError(f"encoding={encoding!r}: png, jpeg, or empty (keep each file's)")
    if not (isinstance(size, int) and size >= 0):
        raise ConfigError(f"size={size!r} must be 0 (keep) or a positive side length")
    if not (isinstance(quality, int) and 1 <= quality <= 100):
        raise ConfigError(f"quality={quality!r} must lie in 1..100")
    if channels not in (0, 1, 3):
        raise ConfigError(f"channels={channels!r}: 0 (keep), 1 (grayscale) or 3 (RGB)")
    out = os.path.abspath(out)
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise ConfigError(f"--out={out} exists and is not an empty folder: nothing is overwritten")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    temporary = tempfile.mkdtemp(
        prefix=f".{os.path.basename(out)}.partial-", dir=os.path.dirname(out)
    )
    try:
        entries = {
            split: records_writer.write_split(
                temporary,
                split,
                _examples(
                    loaders,
                    labels,
                    size=size,
                    encoding=encoding,
                    quality=quality,
                    channels=channels,
                ),
                num_classes=len(src.class_names),
            )
            for split, (loaders, labels) in src.splits.items()
        }
        declared = dict(flip_preserves_label=flip_preserves_label)
        metadata = records_writer.write_metadata(
            temporary, src.name, src.class_names, entries, **declared
        )
        if stats is None and metadata["native_shape"][0] is not None:  # (computed once, here)
            train = records.open_dataset(temporary).open_split("train", metadata["native_shape"][0])
            stats = channel_stats.of_split(train)
        metadata = records_writer.write_metadata(
            temporary, src.name, src.class_names, entries, **declared, stats=stats
        )
        # mkdtemp made the folder 0700; the dataset is read by other users too
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o777 & ~umask)
        if os.path.isdir(out):
            os.rmdir(out)  # (empty: checked above)
        os.rename(temporary, out)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    return metadata
