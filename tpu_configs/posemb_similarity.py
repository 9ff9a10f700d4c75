r"""Positional-embedding similarity maps of a trained ViT, JSL22 Figures 1a and 5c.

Command (from any directory: the binaries find tpu_configs/ in the checkout or the installed package,
`posattn.cli.find_config_file`); config.run is the trained run (a train_images workdir, e.g. a cell of
experiments.permuted), only read; --workdir is where the maps are written:

  python -m posattn.experiments.posemb_similarity --config.run=/tmp/permuted-digits/vit-g2-seed0 \
      --workdir=/tmp/maps-g2
  python -m posattn.experiments.posemb_similarity --config.run=RUN --config.patches=0,5,10 --workdir=DIR

Hardware: one CPU; seconds for a digits run (`:quick` changes nothing: the run it reads is the work).
Expected result (JSL22 Figure 1a): after training, each patch's embedding is most similar to its grid
neighbours (a negative rank correlation of similarity with grid distance, near 0 at initialisation);
on a permuted run, the un-permuted maps recover the neighbours the permutation separated.

Fields: run (the trained run; no default), threshold (0.55, Figure 1a's contour), patches, block, images (1000 held-out
images for the mean attention distance; 0: none); this file
changes none of them.
"""

import ml_collections


def get_config(arg=None):
    if arg:
        raise ValueError(f"unknown config argument {arg!r}: this file takes only `quick`")
    # the binary's defaults, unchanged; `schema` names whose (posattn.cli.Schema.kind), so another binary refuses it
    return ml_collections.ConfigDict({"schema": "posemb_similarity"})
