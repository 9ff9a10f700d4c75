"""LWLC23's composite images for its deeper-ViT experiment: 3 x 3 grids of a base dataset's images, one
image per token slot (docs/decisions.md, "Composite grids (LWLC23's deeper ViT)").

Grid n of "<family>/R" holds R label-relevant slots (images of the discriminative class of its label),
C = (9 - R) // 2 confusion slots (images of the other discriminative class) and 9 - R - C label-irrelevant
slots (images of the base's remaining classes), arranged in a random order, so a slot's position says
nothing about its type: alpha_* = R / 9, alpha_# = C / 9, LWLC23's data model (Section 3.1 of the shallow
regime) on real images. The label is the majority vote of the discriminative slots (asserted); labels
are balanced. Train grids draw only from the base's train split, test grids only from its test split.

Everything is a pure function of (family, R, split, seed) and held in memory (the registry,
`posattn.vision.data.datasets`, composes a split once per process). The
slot order is the row-major order of the 3 x 3 grid, the order of a ViT's patch tokens when the patch is
the base image's side.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from posattn.errors import ConfigError

SIDE = 3  # slots per row and column
SLOTS = SIDE * SIDE
R_VALUES = tuple(range(5, SLOTS + 1))  # LWLC23's alpha_* = 5/9 .. 9/9
# slot types, as in `slot_types_NxS`
RELEVANT, CONFUSION, IRRELEVANT = 0, 1, 2
SLOT_TYPES = ("relevant", "confusion", "irrelevant")
_SPLIT_STREAM = {"train": 0, "test": 1}  # the grids of each split come from their own random stream


def slot_counts(R: int) -> tuple[int, int, int]:
    """(relevant, confusion, irrelevant) slots of a grid with R relevant ones: (R, (9-R)//2, the rest)."""
    if R not in R_VALUES:
        raise ConfigError(
            f"R={R} label-relevant slots: use one of {list(R_VALUES)} (a strict majority of 9)"
        )
    confusion = (SLOTS - R) // 2
    return R, confusion, SLOTS - R - confusion


def meets_theorem_margin(R: int) -> bool:
    """LWLC23 Theorem 1's condition alpha_* >= 2e alpha_# for the grids with R relevant slots."""
    _, confusion, _ = slot_counts(R)
    return R >= 2 * np.e * confusion


@dataclasses.dataclass(frozen=True)
class Grids:
    """A split of composite grids: images (N, 3h, 3w, C) uint8, labels (N,) int32 in {0, 1} (1: the
    second discriminative class holds the majority), and per slot (row-major) its type (RELEVANT,
    CONFUSION, IRRELEVANT) and the base class of its image."""

    images_NxHxWxC: np.ndarray
    labels_N: np.ndarray
    slot_types_NxS: np.ndarray
    slot_classes_NxS: np.ndarray


def compose(
    images_MxhxwxC: np.ndarray,
    labels_M: np.ndarray,
    *,
    R: int,
    discriminative: tuple[int, int],
    num_classes: int,
    num_grids: int,
    seed,
) -> Grids:
    """`num_grids` grids of R relevant slots from the base images (pure in `seed`, an int or a list of
    ints for numpy's `default_rng`; see the module doc).

    Base images are drawn with replacement within their class, irrelevant slots' classes uniformly from
    the classes other than the two discriminative ones.
    """
    rel, conf, irr = slot_counts(R)
    a, b = discriminative
    others = np.array([c for c in range(num_classes) if c not in (a, b)])
    if a == b or not {a, b} <= set(range(num_classes)) or (irr and not len(others)):
        raise ConfigError(
            f"discriminative classes {discriminative} must be two distinct classes of "
            f"0..{num_classes - 1}, with others left for the irrelevant slots"
        )
    rng = np.random.default_rng(seed)
    labels_N = rng.permutation(np.arange(num_grids) % 2).astype(np.int32)  # balanced
    # Each grid's slot types in a random order (a row-wise shuffle of the same multiset).
    types_row = np.repeat([RELEVANT, CONFUSION, IRRELEVANT], [rel, conf, irr]).astype(np.int8)
    types_NxS = rng.permuted(np.tile(types_row, (num_grids, 1)), axis=1)
    label_class_N = np.where(labels_N == 1, b, a)
    other_class_N = np.where(labels_N == 1, a, b)
    classes_NxS = np.where(
        types_NxS == RELEVANT,
        label_class_N[:, None],
        np.where(
            types_NxS == CONFUSION,
            other_class_N[:, None],
            rng.choice(others, size=types_NxS.shape) if len(others) else -1,
        ),
    )
    # The label is the majority vote of the discriminative slots (LWLC23's data model).
    votes_b, votes_a = (classes_NxS == b).sum(1), (classes_NxS == a).sum(1)
    assert np.all(np.where(labels_N == 1, votes_b > votes_a, votes_a > votes_b)), (
        "label is not the majority"
    )
    index_NxS = np.empty(classes_NxS.shape, np.int64)
    for c in np.unique(classes_NxS):
        pool = np.flatnonzero(labels_M == c)
        if not len(pool):
            raise ConfigError(f"the base split has no image of class {c}")
        at = classes_NxS == c
        index_NxS[at] = pool[rng.integers(len(pool), size=int(at.sum()))]
    h, w, C = images_MxhxwxC.shape[1:]
    tiles = images_MxhxwxC[index_NxS].reshape(num_grids, SIDE, SIDE, h, w, C)
    images = tiles.transpose(0, 1, 3, 2, 4, 5).reshape(num_grids, SIDE * h, SIDE * w, C)
    return Grids(images, labels_N, types_NxS, classes_NxS.astype(np.int32))


@dataclasses.dataclass(frozen=True)
class TokenGridFamily:
    """The datasets "<prefix>/R" (R in 5..9) of grids of the dataset named `base` (a
    `posattn.vision.data.datasets.Family`: the registry opens `base` and hands it to the methods that read
    it, so this module never looks a dataset up by name)."""

    prefix: str
    base: str
    discriminative: tuple[int, int]
    num_train: int
    num_test: int
    seed: int = 0

    @property
    def names(self) -> str:
        return f"{self.prefix}/R (R = {R_VALUES[0]}..{R_VALUES[-1]})"

    def R(self, name: str) -> int:
        prefix, _, variant = name.partition("/")
        if prefix != self.prefix or not variant.isdigit() or int(variant) not in R_VALUES:
            raise ConfigError(f"unknown dataset {name!r}: use {self.names}, e.g. {self.prefix}/7")
        return int(variant)

    def check(self, name: str) -> None:
        self.R(name)

    def num_classes(self, name: str) -> int:
        self.R(name)
        return 2

    def image_shape(self, name: str, base) -> tuple[int, int, int]:
        """(H, W, C) of the grids of `name` made of the images of `base` (its native shape)."""
        self.R(name)
        h, w, C = base.native_shape
        if h is None:
            raise ConfigError(
                f"{name}: the images of {base.name} vary in size; a grid needs a base of one size"
            )
        return SIDE * h, SIDE * w, C

    def grids(self, name: str, split: str, base) -> Grids:
        """The grids of `split` ("train" | "test") of `name`, made of the images of `base` (read-only)."""
        split_ = base.open_split(split, 0)
        images, labels = split_.read(np.arange(split_.num_examples))
        R = self.R(name)
        out = compose(
            images,
            labels,
            R=R,
            discriminative=self.discriminative,
            num_classes=base.num_classes,
            num_grids=self.num_train if split == "train" else self.num_test,
            seed=[self.seed, R, _SPLIT_STREAM[split]],
        )
        for field in dataclasses.fields(out):  # read-only: every reader only indexes it
            getattr(out, field.name).setflags(write=False)
        return out

    def arrays(self, name: str, split: str, base) -> tuple[np.ndarray, np.ndarray]:
        g = self.grids(name, split, base)
        return g.images_NxHxWxC, g.labels_N
