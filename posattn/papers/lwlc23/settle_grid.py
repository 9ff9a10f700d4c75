"""The grid driver of LWLC23's settling runs (`posattn.papers.lwlc23.settle`): each study runs its grid
in parts, saves every part's raw outcome (`part_saver`), and skips a saved part. A boundary is found in
two stages (`two_stage`): every row over a coarse N grid, then over a geometric window of its own
around its coarse boundary.
"""

import math
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from posattn.shallow import grid, phase_map


def geometric_window(center: float, factor: float, ratio: float, floor: int = 2) -> list[int]:
    """N on a geometric grid of `ratio` from center/factor to center*factor (distinct integers >= floor)."""
    n = math.ceil(math.log(factor**2) / math.log(ratio)) + 1
    Ns = np.unique(np.maximum(floor, np.round(center / factor * ratio ** np.arange(n)))).astype(int)
    return [int(v) for v in Ns]


def windows_from_coarse(
    success_RxCxN, coarse_Ns, level: float, factor: float, ratio: float
) -> list[list[int]]:
    """Each row's fine N grid, centred on its coarse boundary (at the coarse grid's first N when the rate
    already reaches `level` there, at its end when it never does)."""
    n_star = [phase_map.boundary(coarse_Ns, rate, level) for rate in success_RxCxN.mean(0)]
    return [geometric_window(coarse_Ns[-1] if math.isnan(n) else n, factor, ratio) for n in n_star]


def pad_rows(rows: list[list[int]]) -> np.ndarray:
    """Rows of unequal length as one (C, N) array, each padded with its own last value (a repeated N
    is a repeated cell: the boundary reads the first crossing, so the padding changes nothing)."""
    width = max(len(r) for r in rows)
    return np.array([r + [r[-1]] * (width - len(r)) for r in rows])


def row_cells(rows: list[dict], Ns_CxN: np.ndarray, tokens, model, sgd) -> grid.Cell:
    """One cell per (row, N): row c's knobs (a dict of Cell fields, e.g. n_star, n_conf, sigma) at every N
    of its grid Ns_CxN[c]; T from the row's alpha_* unless the row sets it."""
    parts = [
        grid.product_cells(tokens, model, sgd, **{k: [v] for k, v in row.items()}, N=list(Ns))[0]
        for row, Ns in zip(rows, Ns_CxN)
    ]
    return jax.tree.map(lambda *a: jnp.concatenate(a), *parts)


def run_rows(keys_R, rows: list[dict], Ns_CxN: np.ndarray, tokens, model, sgd) -> dict:
    """Every row at every N of its grid, for every seed: {"success", "test_error", "test_hinge"} of
    (R, C, N) arrays. One row is one batch of the compiled loop (its cells share T)."""
    Ns_CxN = np.asarray(Ns_CxN)
    cells = row_cells(rows, Ns_CxN, tokens, model, sgd)
    out = grid.run_cells(
        keys_R, cells, tokens=tokens, model=model, sgd=sgd, cells_per_batch=Ns_CxN.shape[1]
    )
    shape = (*Ns_CxN.shape, len(keys_R))
    return {
        k: np.moveaxis(np.asarray(out[k]).reshape(shape), -1, 0)
        for k in ("success", "test_error", "test_hinge")
    }


def two_stage(
    keys_coarse, keys_fine, rows, coarse_Ns, tokens, model, sgd, level, factor, ratio, save
) -> dict:
    """The pre-registered two-stage grid of a boundary: every row over the coarse grid `coarse_Ns` with
    the coarse seeds, then over its own geometric window (`windows_from_coarse`) with the fine seeds.
    `save(name, compute)` returns a saved part or computes and saves it (resumable); None when a part is
    neither saved nor to be computed (`save` returned None)."""
    Ns_coarse = np.array([list(coarse_Ns)] * len(rows))
    coarse = save("coarse", lambda: run_rows(keys_coarse, rows, Ns_coarse, tokens, model, sgd))
    if coarse is None:
        return None
    Ns_fine = pad_rows(
        windows_from_coarse(coarse["success"], list(coarse_Ns), level, factor, ratio)
    )
    fine = save(
        "fine", lambda: {**run_rows(keys_fine, rows, Ns_fine, tokens, model, sgd), "N": Ns_fine}
    )
    if fine is None:
        return None
    return {"coarse": coarse, "fine": fine, "N": np.asarray(fine["N"])}


def coarse_and_fine_keys(config):
    """(coarse keys, fine keys): the coarse pass draws its own seeds."""
    keys = grid.seed_keys(config.seed, config.seeds)
    return grid.seed_keys(config.seed + 1, config.coarse_seeds), keys


def part_saver(workdir, analyze_only: bool, parts_from: str):
    """save(name, compute): parts/NAME.npz if a finished part is there (or in `parts_from`), else compute,
    save and return it (None with analyze_only: the drivers then leave that part out)."""
    parts = os.path.join(workdir, "parts")
    os.makedirs(parts, exist_ok=True)

    def save(name, compute):
        path = os.path.join(parts, f"{name}.npz")
        for found in (path, os.path.join(parts_from, f"{name}.npz") if parts_from else None):
            if found and os.path.exists(found):
                print(f"{name}: resumed from {found}", flush=True)
                with np.load(found) as f:
                    return dict(f)
        if analyze_only:
            print(f"{name}: not saved, left out (analyze_only)", flush=True)
            return None
        t0 = time.perf_counter()
        out = {k: np.asarray(v) for k, v in compute().items()}
        np.savez(path + ".tmp.npz", **out)
        os.replace(path + ".tmp.npz", path)  # a part is there only when complete
        print(f"{name}: done in {time.perf_counter() - t0:.0f}s", flush=True)
        return out

    return save
