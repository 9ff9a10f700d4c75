"""A dataset of encoded images on disk: one folder, ArrayRecord files per split and a JSON metadata file.

The folder (written by `records_writer.write_split` and `write_metadata`, e.g. through
`python -m posattn.experiments.prepare_images`):

    records.json                     the metadata (`METADATA`): format, name, class_names,
                                     native_shape [H, W, C] (H, W null where sizes vary), encoding,
                                     flip_preserves_label, stats [mean, std] (or null),
                                     splits: {"train": {"num_examples": N, "files": [...],
                                     "file_examples": [...]}, "test": ...}
    train-00000.array_record ...     the records of a split, in order, `EXAMPLES_PER_FILE` a file
    test-00000.array_record ...

A record is one example, no pickle: its label as a 4-byte little-endian signed integer, then the image
file's bytes as encoded (PNG, JPEG, or any format PIL reads). ArrayRecord files are written with
group_size 1 and no compression (the images are compressed already), so each record is read by index.

Reading (`RecordsDataset`, the `Dataset` of `posattn.vision.data.datasets`; `open_dataset(directory)`)
decodes with PIL: a grayscale dataset (C = 1) gives one channel, any other three (RGB). A split of one
image size read at that size that fits `split.IN_MEMORY_BYTES` is decoded once, when opened, and held
(as tfds_datasets' small splits are); any other is decoded per read, at an image_size other than the
native one resized (shorter side) then centre-cropped, as tfds_datasets' large splits are; a dataset
whose sizes vary must set an image_size. A split decoded per read is
picklable and opens its files lazily, once per process (and again after a fork), so grain worker
processes read it; `Split.original(i)` is example i decoded at full resolution (the Inception crop's
input).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import io
import json
import os
import struct
import threading

import numpy as np

from posattn.errors import ConfigError
from posattn.vision.data import split as split_lib

METADATA = "records.json"
FORMAT = "posattn.records/1"
PREFIX = "records:"  # datasets.get's route: dataset="records:/path/to/folder"
EXAMPLES_PER_FILE = 100_000
_LABEL = struct.Struct("<i")
# PIL modes read as one channel; every other mode PIL decodes is converted to RGB
GRAY_MODES = ("1", "L")
# 16-bit and float modes: no uint8 image without a choice of scale, which is the user's
_UNSUPPORTED_MODES = ("I", "I;16", "I;16B", "I;16L", "F")


def refuse_remote(directory: str) -> None:
    """ConfigError for a gs:// (or other URL) folder: ArrayRecord reads local files only."""
    if "://" in str(directory):
        raise ConfigError(
            f"records folder {directory}: ArrayRecord reads local files only (google/array_record#120); "
            "copy the folder to local disk (gsutil -m cp -r) or mount the bucket with gcsfuse and "
            "give that path"
        )


def encode(image_HxWxC: np.ndarray, encoding: str = "png", quality: int = 90) -> bytes:
    """A uint8 image (H, W, C with C in {1, 3}, or H, W) as PNG (lossless) or JPEG at `quality`."""
    from PIL import Image

    x = np.asarray(image_HxWxC)
    if x.dtype != np.uint8 or x.ndim not in (2, 3) or (x.ndim == 3 and x.shape[-1] not in (1, 3)):
        raise ConfigError(
            f"an image of dtype {x.dtype} and shape {x.shape}: give uint8 (H, W), (H, W, 1) or (H, W, 3)"
        )
    pil = Image.fromarray(x[..., 0] if x.ndim == 3 and x.shape[-1] == 1 else x)
    out = io.BytesIO()
    if encoding == "png":
        pil.save(out, format="PNG")
    elif encoding == "jpeg":
        pil.save(out, format="JPEG", quality=int(quality))
    else:
        raise ConfigError(f"unknown encoding {encoding!r}: png or jpeg")
    return out.getvalue()


def decode(data: bytes, channels: int) -> np.ndarray:
    """The encoded image `data` as uint8 (H, W, channels): grayscale for 1 channel, RGB for 3."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as pil:
        mode = "L" if channels == 1 else "RGB"
        x = np.asarray(pil if pil.mode == mode else pil.convert(mode))
    return x.reshape(*x.shape[:2], channels)


def pack(data: bytes, label: int) -> bytes:
    """One record: the label (4-byte little-endian int32), then the encoded image."""
    return _LABEL.pack(int(label)) + data


def unpack(record: bytes) -> tuple[bytes, int]:
    """(encoded image, label) of a record of `pack`."""
    return record[_LABEL.size :], _LABEL.unpack_from(record)[0]


def probe(data: bytes) -> tuple[int, int, int, str]:
    """(H, W, C, format) of encoded image bytes, read from the header; ConfigError if PIL cannot."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as pil:
            w, h, mode, fmt = *pil.size, pil.mode, (pil.format or "?").lower()
    except (UnidentifiedImageError, OSError) as e:
        raise ConfigError(f"cannot read an encoded image ({e})") from e
    if mode in _UNSUPPORTED_MODES:
        raise ConfigError(
            f"an image of PIL mode {mode} (16-bit or float): convert it to 8-bit grayscale or RGB first"
        )
    return h, w, 1 if mode in GRAY_MODES else 3, fmt


def read_metadata(directory: str) -> dict:
    """The metadata of the records folder `directory`; ConfigError if it is not one."""
    if not str(directory).strip():
        raise ConfigError("records: give the records folder, e.g. dataset=records:/data/my_images")
    refuse_remote(directory)
    path = os.path.join(directory, METADATA)
    try:
        with open(path) as f:
            metadata = json.load(f)
    except FileNotFoundError as e:
        raise ConfigError(
            f"{directory} is not a records dataset: it has no {METADATA} (write one with "
            "python -m posattn.experiments.prepare_images)"
        ) from e
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read {path}: {e}") from e
    if not isinstance(metadata, dict) or metadata.get("format") != FORMAT:
        raise ConfigError(f"{path} is not the metadata of a records dataset ({FORMAT})")
    return metadata


class _Shards:
    """The records of one split behind `read(indices)`, its ArrayRecord readers opened on first use in
    each process (a pickled or forked copy opens its own)."""

    def __init__(self, paths: list[str], counts: list[int]):
        self.paths, self.counts = list(paths), list(counts)
        self.starts = np.cumsum([0, *counts])
        self.__setstate__(self.__getstate__())

    def __getstate__(self):
        return {"paths": self.paths, "counts": self.counts, "starts": self.starts}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._readers, self._pid, self._lock = None, None, threading.Lock()

    def _open(self):
        from array_record.python.array_record_module import ArrayRecordReader

        with self._lock:  # (threads of one process share the readers, opened once)
            if self._readers is not None and self._pid == os.getpid():
                return self._readers
            readers = []
            for path, count in zip(self.paths, self.counts):
                try:
                    reader = ArrayRecordReader(path, "readahead_buffer_size:0")
                except (OSError, RuntimeError, ValueError) as e:
                    raise ConfigError(f"cannot open records file {path}: {e}") from e
                if reader.num_records() != count:
                    raise ConfigError(
                        f"{path} holds {reader.num_records()} records, its metadata says {count}"
                    )
                readers.append(reader)
            self._readers, self._pid = readers, os.getpid()
            return readers

    def read(self, indices) -> list[bytes]:
        readers = self._open()
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        if indices.size and (indices.min() < 0 or indices.max() >= self.starts[-1]):
            raise IndexError(f"record indices outside [0, {self.starts[-1]})")
        files = np.searchsorted(self.starts, indices, side="right") - 1
        out = [b""] * len(indices)
        for k in np.unique(files):
            rows = np.flatnonzero(files == k)
            for row, record in zip(
                rows, readers[k].read([int(i) for i in indices[rows] - self.starts[k]])
            ):
                out[row] = record
        return out


@dataclasses.dataclass
class RecordsReader:
    """Reads examples of one records split: `read` (a batch at the run's size) and `original` (one
    example at full resolution), picklable (a `_Shards` opens its files per process)."""

    shards: _Shards
    channels: int
    size: int  # the side of what `read` returns; 0: the native size (every image the same)

    def original(self, index: int) -> tuple[np.ndarray, int]:
        """Example `index` decoded at full resolution, (H, W, C) uint8, and its label."""
        data, label = unpack(self.shards.read([index])[0])
        return decode(data, self.channels), label

    def read(self, indices) -> tuple[np.ndarray, np.ndarray]:
        """Examples `indices` as (N, size, size, C) uint8 (resized then centre-cropped where they
        differ) and their int32 labels."""
        records = self.shards.read(indices)
        labels = np.empty(len(records), np.int32)
        images = []
        for n, record in enumerate(records):
            data, labels[n] = unpack(record)
            image = decode(data, self.channels)
            images.append(
                split_lib.resize_and_center_crop(image, self.size) if self.size else image
            )
        if not images:
            side = self.size or 0
            return np.empty((0, side, side, self.channels), np.uint8), labels
        return np.stack(images), labels


@dataclasses.dataclass(frozen=True, eq=False)
class RecordsDataset:
    """A records folder as a `posattn.vision.data.datasets.Dataset` (build it with `open_dataset`).

    `name` is what config.dataset says ("records:DIR", or a bare name found under the data_dir);
    `title` the name its metadata gives; `native_shape` (H, W, C), H and W None where sizes vary."""

    name: str
    directory: str
    title: str
    num_classes: int
    class_names: tuple[str, ...]
    native_shape: tuple[int | None, int | None, int]
    split_files: dict  # "train" | "test" -> (paths, counts)
    stats: tuple | None = None
    flip_preserves_label: bool | None = None

    def sizes(self) -> tuple[int, int]:
        return sum(self.split_files["train"][1]), sum(self.split_files["test"][1])

    def open_split(
        self, split: str, image_size: int, *, in_memory: bool | None = None
    ) -> split_lib.Split:
        """`split` at image_size x image_size (0: native). Images of one size read at that size whose
        split fits `split.IN_MEMORY_BYTES` are decoded once, when opened, and held (reading then only
        indexes, as a tfds split of that size is); others are decoded per read (`RecordsReader`), their
        full-resolution originals at hand for a crop. `in_memory` forces one or the other (a
        benchmark of decoding); holding a split whose images are resized is refused."""
        if split not in self.split_files:
            raise ConfigError(f"unknown split {split!r}; expected one of train, test")
        h, w, c = self.native_shape
        if not image_size and h is None:
            raise ConfigError(
                f"dataset {self.name} has images of varying size: set --config.image_size "
                "to the side they are resized and centre-cropped to (e.g. 224)"
            )
        if h is not None and h != w and not image_size:
            raise ConfigError(
                f"dataset {self.name} has {h} x {w} images: set --config.image_size to the side "
                "they are resized and centre-cropped to"
            )
        size = image_size or h
        reader = RecordsReader(_Shards(*self.split_files[split]), c, 0 if size == h == w else size)
        count = sum(self.split_files[split][1])
        native = size == h == w
        if in_memory is None:
            in_memory = native and count * size * size * c <= split_lib.IN_MEMORY_BYTES
        elif in_memory and not native:
            raise ConfigError(
                f"in_memory=True for {self.name} read at {size} px: only a split read at its "
                "images' own size is held (a crop takes the originals)"
            )
        if in_memory:
            return split_lib.in_memory(*_decode_all(reader, count))
        return split_lib.Split(
            num_examples=sum(self.split_files[split][1]),
            image_shape=(size, size, c),
            read=reader.read,
            original=reader.original,
        )


def _decode_all(reader: RecordsReader, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Every example of a split, decoded in chunks on a thread per core (PIL's decoders release the
    interpreter), as one (N, H, W, C) uint8 array and its int32 labels."""
    chunks = np.array_split(np.arange(count), max(1, count // 1024))
    with concurrent.futures.ThreadPoolExecutor(len(os.sched_getaffinity(0))) as pool:
        parts = list(pool.map(reader.read, chunks))
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def open_dataset(directory: str, name: str | None = None) -> RecordsDataset:
    """The records folder `directory` as a dataset named `name` (default "records:DIRECTORY"); reads
    only its metadata. ConfigError if it is not a records folder or lacks a file it lists."""
    metadata = read_metadata(directory)
    try:
        h, w, c = metadata["native_shape"]
        stats = metadata.get("stats")
        class_names = tuple(str(n) for n in metadata["class_names"])
        split_files = {}
        for split in ("train", "test"):
            entry = metadata["splits"][split]
            paths = [os.path.join(directory, f) for f in entry["files"]]
            counts = [int(n) for n in entry["file_examples"]]
            if len(counts) != len(paths) or sum(counts) != int(entry["num_examples"]):
                raise ValueError(f"{split}'s files and counts disagree")
            split_files[split] = (paths, counts)
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"{os.path.join(directory, METADATA)} lacks a field ({e!r})") from e
    missing = [p for paths, _ in split_files.values() for p in paths if not os.path.isfile(p)]
    if missing:
        raise ConfigError(f"records dataset {directory} lacks {missing[0]} (its metadata lists it)")
    return RecordsDataset(
        name=name or f"{PREFIX}{directory}",
        directory=directory,
        title=str(metadata.get("name", "")),
        num_classes=len(class_names),
        class_names=class_names,
        native_shape=(h, w, int(c)),
        split_files=split_files,
        stats=None if not stats else (tuple(stats[0]), tuple(stats[1])),
        flip_preserves_label=metadata.get("flip_preserves_label"),
    )
