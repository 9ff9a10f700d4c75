"""A run's initial parameters taken from a finished run: LWLC23's pre-trained initial model (its deeper-ViT
experiment starts from a ViT pre-trained on image classification), big_vision's `model_init`.

`config.init_from` names the workdir of a finished image run; `train.train` starts a fresh run from
`transfer(fresh params, load(init_from))` (a checkpoint of the run's own workdir still wins on restart).
Every parameter is copied, with two exceptions that a change of task or image size requires:
- the positional embedding P when the token count differs: resampled bilinearly over the patch grid
  (the CLS row, if any, kept), as big_vision resamples it; a 1 x 1 grid (a 28 x 28 item read with patch
  28) becomes the same vector at every slot of the new grid;
- the classifier head when the class count differs: kept as the fresh run initialised it (the ViT's
  zero head).
Any other difference (another architecture, width, depth or patch) is a ConfigError. A ViT's blocks
move between the loop's layout and model.scan_layers' (`vit.stack_blocks` / `unstack_blocks`), so
either may start from the other.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from etils import epath

from posattn.errors import ConfigError
from posattn.vision import runs
from posattn.vision.models import vit

POS_EMBEDDING = "pos_embedding"
HEAD = "head"


def _path(keys) -> str:
    return jax.tree_util.keystr(keys, simple=True, separator="/")


def _grid_side(tokens: int) -> tuple[int, int] | None:
    """(leading rows kept, side) of a token axis: a square grid, or a CLS row and a square grid."""
    for lead in (0, 1):
        side = math.isqrt(max(tokens - lead, 0))
        if side and side * side == tokens - lead:
            return lead, side
    return None


def resample_pos_embedding(P_xTxD: jax.Array, tokens: int) -> jax.Array:
    """P (T, D) or (L, T, D) over a square patch grid (after a CLS row, if any) resampled to `tokens`
    tokens: the grid bilinearly, the CLS row as it is. ValueError when either count is no such grid."""
    old, new = _grid_side(P_xTxD.shape[-2]), _grid_side(tokens)
    if old is None or new is None or old[0] != new[0]:
        raise ValueError(
            f"cannot resample {P_xTxD.shape[-2]} position rows to {tokens}: not both a square "
            "patch grid with the same CLS rows"
        )
    lead, side = old
    grid = P_xTxD[..., lead:, :].reshape(*P_xTxD.shape[:-2], side, side, P_xTxD.shape[-1])
    shape = (*grid.shape[:-3], new[1], new[1], grid.shape[-1])
    resized = jax.image.resize(grid, shape, method="bilinear").reshape(*shape[:-3], -1, shape[-1])
    return jnp.concatenate([P_xTxD[..., :lead, :], resized.astype(P_xTxD.dtype)], axis=-2)


def _blocks_laid_out_as(fresh: dict, pretrained: dict) -> dict:
    """`pretrained` with a ViT's blocks in `fresh`'s layout: a loop's "block_{i}" stacked where `fresh`
    scans them (model.scan_layers), a scan's unstacked where `fresh` loops; else as it is."""
    if vit.SCANNED in fresh and vit.SCANNED not in pretrained and "block_0" in pretrained:
        depth = sum(1 for k in pretrained if k.startswith("block_") and k[6:].isdigit())
        return vit.stack_blocks(pretrained, depth)
    if vit.SCANNED in pretrained and vit.SCANNED not in fresh:
        return vit.unstack_blocks(pretrained)
    return pretrained


def transfer(fresh: dict, pretrained: dict) -> dict:
    """`fresh` (a new run's initial params) with every leaf of `pretrained` in its place (see the module
    doc for P and the head); ConfigError naming the leaves that do not fit. Works on arrays or on shapes
    (`jax.eval_shape`), so a run can check the fit before it starts."""
    pretrained = _blocks_laid_out_as(fresh, pretrained)
    pre = {_path(k): v for k, v in jax.tree_util.tree_flatten_with_path(pretrained)[0]}
    fresh_paths = {_path(k) for k, _ in jax.tree_util.tree_flatten_with_path(fresh)[0]}
    problems = [f"{p} (not in the new model)" for p in sorted(set(pre) - fresh_paths)]

    def take(keys, new):
        path = _path(keys)
        old = pre.get(path)
        if old is None:
            problems.append(f"{path} (not in the pre-trained model)")
            return new
        if old.shape == new.shape:
            return jnp.asarray(old, new.dtype)
        if (
            path.split("/")[-1] == POS_EMBEDDING
            and old.shape[:-2] == new.shape[:-2]
            and old.shape[-1] == new.shape[-1]
        ):
            try:
                return resample_pos_embedding(jnp.asarray(old, new.dtype), new.shape[-2])
            except ValueError as e:
                problems.append(f"{path} ({e})")
                return new
        if path.split("/")[0] == HEAD:  # another class count: the fresh head
            return new
        problems.append(f"{path} (shape {tuple(old.shape)} pre-trained, {tuple(new.shape)} new)")
        return new

    out = jax.tree_util.tree_map_with_path(take, fresh)
    if problems:
        shown = "; ".join(problems[:4]) + (
            f"; and {len(problems) - 4} more" if len(problems) > 4 else ""
        )
        raise ConfigError(
            f"init_from: the pre-trained parameters do not fit this model: {shown}. Pre-train "
            "the same architecture (variant, patch, attention kind, pooling)"
        )
    return out


def load(workdir) -> dict:
    """The parameters of the finished run in `workdir` (its latest checkpoint), on the local devices;
    ConfigError for a workdir that holds no finished run."""
    path = epath.Path(workdir)
    if not (path / "summary.json").exists():
        raise ConfigError(
            f"init_from={workdir}: no finished run there (no summary.json): finish its run "
            "(rerun its command) or point init_from at the workdir of a finished image run"
        )
    _, state, _ = runs.restore_run(path, devices=jax.local_devices())
    return state["params"]
