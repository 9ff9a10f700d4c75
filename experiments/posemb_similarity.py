r"""Positional-embedding similarity maps of a trained ViT, JSL22 Figures 1a and 5c.

  python -m posattn.experiments.posemb_similarity --config.run=/tmp/permuted-digits/vit-g2-seed0 \
      --workdir=/tmp/maps-g2
  python -m posattn.experiments.posemb_similarity --config.run=RUN --config.threshold=0.5 --workdir=DIR

`--config=FILE[:ARG]` (default tpu_configs/posemb_similarity.py) with fields run, threshold, patches,
block and images, each overridable as `--config.FIELD=VALUE`.

`run` is the trained run, a train_images workdir (config.json + checkpoints/), e.g. a cell of
experiments.permuted; it is only read. Writes into --workdir, a workdir of its own, posemb_similarity.png, the cosine similarity of chosen
patches' positional embeddings to every patch of the grid, with the paper's 0.55 threshold as a
contour (docs/decisions.md, Analysis and figures): one row for P at initialisation (the run's own
initial P, from its seed), one as trained, and for a run on permuted pixels (config.permute_block > 0)
one with the trained maps after undoing the permutation. posemb_similarity.json holds the numbers per
row: the rank correlation of similarity with grid distance over all pairs of patches (Spearman's rho;
-1 = perfectly local, ~0 at initialisation), and the mean similarity of grid neighbours (4-neighbours)
against non-neighbours with a shuffle test; for a permuted run also over the neighbours that straddle
two pixel blocks alone (un-permuted: the true neighbours that the permutation separated; as trained:
pairs adjacent only in the permuted layout). For a run trained with horizontal flips the rank
correlation is also given on the grid folded about its vertical axis (flips make P mirror-symmetric,
which the plain distance counts as non-local). And the attention maps' own locality: the mean attention
distance per block and head over `images` of the run's held-out images (its validation split, else the
test set; `posattn.analysis.attention_distance`) beside uniform attention's.

One host: it reads one finished run's positional embeddings (a few thousand numbers).
"""

from posattn import cli
from posattn.papers.jsl22 import posemb_similarity

cli.define_config(
    "tpu_configs/posemb_similarity.py", posemb_similarity.SCHEMA, "The run and its maps"
)
cli.define_workdir("where the maps and their numbers are written")


def main(config, workdir):
    posemb_similarity.run(config, workdir, claim=cli.claim)


def entry():
    """`python -m posattn.experiments.posemb_similarity` and the console script `posattn-posemb-similarity`
    (pyproject.toml)."""
    cli.run(main)


if __name__ == "__main__":
    entry()
