r"""Write a dataset of one's own as encoded images in ArrayRecord files (`posattn.vision.data.records`),
which the image regime then reads by name (`--config.dataset=records:DIR`, or a bare name for a folder
`<data_dir>/<name>/`; docs/image_regime.md, "A dataset of your own on disk").

    python -m posattn.experiments.prepare_images --source=/data/my_photos --test_fraction=0.2 --out=/data/photos
    python -m posattn.experiments.prepare_images --source=arrays.npz --out=/data/arrays
    python -m posattn.experiments.prepare_images --source=fashion_mnist --out=/data/fashion_png
    python -m posattn.experiments.prepare_images --source=fashion_mnist --size=224 --encoding=jpeg \
        --quality=90 --channels=3 --out=/data/fashion_224

--source: a folder of class subfolders of image files (class = subfolder name, sorted; or "train" and
"test" folders of them), a .npz of `images` (N, H, W[, C] uint8) and `labels` (optionally `test_images`,
`test_labels`, `class_names`), or fashion_mnist (its IDX files: the Debian package dataset-fashion-mnist,
or --idx_dir). A source without a test split holds out --test_fraction by a fixed draw. --size resizes
(shorter side, then centre crop; 0 keeps), --encoding re-encodes (png, jpeg at --quality; empty keeps
each file's own, arrays as PNG), --channels converts (1 grayscale, 3 RGB; 0 keeps).

Writes into a hidden temporary folder beside --out and renames it at the end: a stopped run leaves no
folder that looks finished. An existing non-empty --out is refused (exit 2): nothing is overwritten.

One host: it writes one folder; the pod reads it from local disk or gcsfuse (docs/distributed.md).
"""

from absl import flags

from posattn import cli

_OUT = flags.DEFINE_string("out", None, "The records folder to write (must not exist, or be empty)")
_SOURCE = flags.DEFINE_string(
    "source", None, "A folder of class subfolders, a .npz file, or fashion_mnist"
)
_TEST_FRACTION = flags.DEFINE_float(
    "test_fraction", 0.0, "Held out as the test split where the source has none (e.g. 0.2)"
)
_SIZE = flags.DEFINE_integer(
    "size", 0, "Side the images are resized and centre-cropped to (0: keep)"
)
_ENCODING = flags.DEFINE_string(
    "encoding", "", "png or jpeg; empty: each file's own encoding (arrays: png)"
)
_QUALITY = flags.DEFINE_integer("quality", 90, "JPEG quality, 1..100")
_CHANNELS = flags.DEFINE_integer("channels", 0, "1 (grayscale) or 3 (RGB); 0 keeps the images'")
_IDX_DIR = flags.DEFINE_string("idx_dir", None, "The folder of fashion_mnist's IDX files")


def main():
    from posattn.errors import ConfigError
    from posattn.vision.data import channel_stats, datasets, prepare

    if not _OUT.value or not _OUT.value.strip():
        raise ConfigError("--out=DIR is required: the records folder to write")
    source = prepare.source(
        _SOURCE.value, test_fraction=_TEST_FRACTION.value, idx_dir=_IDX_DIR.value
    )
    metadata = prepare.write_dataset(
        source,
        _OUT.value,
        size=_SIZE.value,
        encoding=_ENCODING.value,
        quality=_QUALITY.value,
        channels=_CHANNELS.value,
        flip_preserves_label=datasets.FLIP_PRESERVES_LABEL.get(_SOURCE.value),
        stats=channel_stats.KNOWN.get(_SOURCE.value),  # (fashion_mnist: as its other sources)
    )
    counts = {s: e["num_examples"] for s, e in metadata["splits"].items()}
    print(f"wrote {_OUT.value}: {counts}, {metadata['native_shape']}, {metadata['encoding']}")


def entry():
    """`python -m posattn.experiments.prepare_images` and the console script `posattn-prepare-images`."""
    cli.run_tool(main)


if __name__ == "__main__":
    entry()
