"""Writing a records folder (the format: `posattn.vision.data.records`): each split's ArrayRecord files
from (encoded bytes or uint8 image, label) pairs (`write_split`), then its metadata (`write_metadata`).
`python -m posattn.experiments.prepare_images` writes whole datasets through `posattn.vision.data.prepare`.
"""

from __future__ import annotations

import json
import os
from typing import Iterable

import numpy as np

from posattn.errors import ConfigError
from posattn.vision.data.records import (
    EXAMPLES_PER_FILE,
    FORMAT,
    METADATA,
    encode,
    pack,
    probe,
)

# one record per group, uncompressed (the images are compressed already): any record read by index
_WRITER_OPTIONS = "group_size:1,uncompressed"


def write_split(
    directory: str,
    split: str,
    examples: Iterable,
    *,
    num_classes: int,
    encoding: str = "png",
    quality: int = 90,
    examples_per_file: int = EXAMPLES_PER_FILE,
) -> dict:
    """Write `split` of a records folder from `examples`, (encoded bytes or uint8 image, label) pairs.

    Bytes are stored as they are (any format PIL reads); arrays (H, W), (H, W, 1) or (H, W, 3) are
    encoded with `encoding` ("png" or "jpeg" at `quality`). Labels must lie in [0, num_classes).
    Returns the split's entry of the metadata: num_examples, files, and what `write_metadata` joins
    into the native shape and encoding (the sizes, channels and formats seen). ConfigError on a fault.
    """
    from array_record.python.array_record_module import ArrayRecordWriter

    if split not in ("train", "test"):
        raise ConfigError(f"unknown split {split!r}; expected one of train, test")
    os.makedirs(directory, exist_ok=True)
    files, counts, writer, n = [], [], None, 0
    sizes, channels, formats = set(), set(), set()
    try:
        for data, label in examples:
            if (
                not isinstance(label, (int, np.integer))
                or isinstance(label, bool)
                or not (0 <= label < num_classes)
            ):
                raise ConfigError(
                    f"example {n} of {split} has label {label!r}: labels lie in [0, {num_classes})"
                )
            if not isinstance(data, (bytes, bytearray)):
                data = encode(data, encoding, quality)
            h, w, c, fmt = probe(bytes(data))
            sizes.add((h, w))
            channels.add(c)
            formats.add(fmt)
            if n % examples_per_file == 0:
                if writer is not None:
                    writer.close()
                files.append(f"{split}-{len(files):05d}.array_record")
                counts.append(0)
                writer = ArrayRecordWriter(os.path.join(directory, files[-1]), _WRITER_OPTIONS)
            writer.write(pack(bytes(data), int(label)))
            n, counts[-1] = n + 1, counts[-1] + 1
    finally:
        if writer is not None:
            writer.close()
    if n == 0:
        raise ConfigError(f"split {split} has no examples")
    return {
        "num_examples": n,
        "files": files,
        "file_examples": counts,
        "sizes": sorted(sizes)[:2],  # two distinct sizes are enough to say they vary
        "channels": max(channels),
        "formats": sorted(formats),
    }


def write_metadata(
    directory: str, name: str, class_names, splits: dict, *, flip_preserves_label=None, stats=None
) -> dict:
    """Write `METADATA` for the splits `write_split` wrote (both "train" and "test"); returns it.

    The native shape is the images' common (H, W) and channels (3 if any image is in colour: a dataset
    mixing grayscale and colour reads all as RGB), H and W None where sizes vary. `flip_preserves_label`
    (True, False or None: unknown) is what `augment.flip` "auto" reads; `stats` the per-channel (mean,
    std) on the [0, 1] scale that normalise the inputs (None: computed from the training split)."""
    if sorted(splits) != ["test", "train"]:
        raise ConfigError(f"a records dataset needs a train and a test split, got {sorted(splits)}")
    sizes = {tuple(s) for entry in splits.values() for s in entry["sizes"]}
    channels = max(entry["channels"] for entry in splits.values())
    (h, w), c = (next(iter(sizes)) if len(sizes) == 1 else (None, None)), channels
    formats = sorted({f for entry in splits.values() for f in entry["formats"]})
    metadata = {
        "format": FORMAT,
        "name": name,
        "class_names": [str(c) for c in class_names],
        "native_shape": [h, w, c],
        "encoding": "+".join(formats),
        "record": "label: 4-byte little-endian int32, then the encoded image file",
        "flip_preserves_label": flip_preserves_label,
        "stats": None if stats is None else [list(map(float, v)) for v in stats],
        "splits": {
            s: {k: e[k] for k in ("num_examples", "files", "file_examples")}
            for s, e in splits.items()
        },
    }
    with open(os.path.join(directory, METADATA), "w") as f:
        json.dump(metadata, f, indent=2)
    return metadata
