"""The pre-registered experiments that settle LWLC23's three open results (docs/shallow_vit_results.md,
"Settling runs"): the boundary N* against alpha_* with alpha_# as an axis, token sparsification over
L, the noisy tokens' count, type and bound, at test and at training time, and N* against sigma and
delta swept apart.

Every interval is a percentile bootstrap over seeds: the seeds of a study are resampled with
replacement, the same resample for every cell (the cells of one seed share its key), and every N*,
fit and difference is recomputed on each resample.
"""

import dataclasses
import math
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from posattn.analysis import bootstrap
from posattn.shallow import grid, phase_map, sparsify
from posattn.shallow.config import TWO_E, TokenConfig

LEVEL = 0.5  # pre-registered: the boundary is where the success rate first reaches 1/2


def seed_resamples(R: int, B: int, seed: int = 0) -> np.ndarray:
    """(B, R) seed indices drawn with replacement: B bootstrap resamples of R seeds, one for every cell."""
    return bootstrap.resample_indices(R, B, seed)


def interval(samples, point) -> dict:
    """{"value": point, "lo", "hi"}: the 95% percentile interval of the finite bootstrap samples, and the
    share of samples that were not finite (a boundary beyond the grid, a fit that failed)."""
    s = np.asarray(samples, float)
    ok = np.isfinite(s)
    lo, hi = bootstrap.percentiles(s[ok]) if ok.any() else (math.nan, math.nan)
    return {"value": float(point), "lo": lo, "hi": hi, "censored": float(1 - ok.mean())}


def boundaries(success_RxCxN: np.ndarray, Ns_CxN, level: float) -> np.ndarray:
    """N* of every row c (success rate over seeds crossing `level` along its N grid); NaN (censored) when
    the rate never reaches `level` or already does at the grid's first N (N* at or below it)."""
    rate_CxN = success_RxCxN.mean(0)
    return np.array(
        [
            math.nan if rate[0] >= level else phase_map.boundary(Ns, rate, level)
            for Ns, rate in zip(Ns_CxN, rate_CxN)
        ]
    )


def boot_boundaries(
    success_RxCxN: np.ndarray, Ns_CxN, level: float, resamples: np.ndarray
) -> np.ndarray:
    """(B, C): N* of every row on every seed resample."""
    return np.stack([boundaries(success_RxCxN[idx], Ns_CxN, level) for idx in resamples])


def shifted_power_fit(alpha, n_star, alpha0_min: float = -0.5, grid: int = 400) -> dict:
    """Least squares of log N* = log c - q log(alpha_* - alpha_0) over alpha_0 < min(alpha_*) (a grid
    of `grid` values from alpha0_min, a line fit in logs at each): {"q", "alpha0", "c"}; NaN with
    fewer than 3 finite boundaries."""
    alpha, n_star = np.asarray(alpha, float), np.asarray(n_star, float)
    ok = np.isfinite(n_star)
    if ok.sum() < 3:
        return {"q": math.nan, "alpha0": math.nan, "c": math.nan}
    a, y = alpha[ok], np.log(n_star[ok])
    best = None
    for a0 in np.linspace(alpha0_min, a.min() - 1e-3, grid):
        x = np.log(a - a0)
        slope, icpt = np.polyfit(x, y, 1)
        sse = ((y - icpt - slope * x) ** 2).sum()
        if best is None or sse < best[0]:
            best = (sse, -slope, a0, math.exp(icpt))
    return {"q": float(best[1]), "alpha0": float(best[2]), "c": float(best[3])}


def power_fit(alpha, n_star, alpha0: float = 0.0) -> float:
    """q of log N* = log c - q log(alpha_* - alpha0) with alpha0 fixed (NaN with < 2 usable rows)."""
    alpha, n_star = np.asarray(alpha, float), np.asarray(n_star, float)
    ok = np.isfinite(n_star) & (alpha > alpha0)
    if ok.sum() < 2:
        return math.nan
    return float(-np.polyfit(np.log(alpha[ok] - alpha0), np.log(n_star[ok]), 1)[0])


def boundary_study(
    success_RxCxN, Ns_CxN, alpha_C, level: float, resamples: np.ndarray, alpha_conf: float
) -> dict:
    """One (network, alpha_#) row set: N* of every alpha_* with its interval, the fit
    N* = c (alpha_* - alpha_0)^-q with intervals on q and alpha_0, and the exponent with alpha_0 fixed
    at 0 and at 2e alpha_# (where every alpha_* exceeds it)."""
    point = boundaries(success_RxCxN, Ns_CxN, level)
    boot = boot_boundaries(success_RxCxN, Ns_CxN, level, resamples)
    fit = shifted_power_fit(alpha_C, point)
    fits = [shifted_power_fit(alpha_C, b) for b in boot]
    margin = TWO_E * alpha_conf
    out = {
        "alpha_star": [float(a) for a in alpha_C],
        "N_star": [interval(boot[:, c], point[c]) for c in range(len(point))],
        "q": interval([f["q"] for f in fits], fit["q"]),
        "alpha0": interval([f["alpha0"] for f in fits], fit["alpha0"]),
        "c": fit["c"],
        "q_at_alpha0_0": interval([power_fit(alpha_C, b) for b in boot], power_fit(alpha_C, point)),
        "two_e_alpha_conf": margin,
    }
    if margin > 0 and min(alpha_C) > margin:
        out["q_at_alpha0_2e"] = interval(
            [power_fit(alpha_C, b, margin) for b in boot], power_fit(alpha_C, point, margin)
        )
    return out


def difference(boot_a, boot_b, a, b) -> dict:
    """The interval of a - b from paired bootstrap samples."""
    return interval(np.asarray(boot_a) - np.asarray(boot_b), a - b)


# ---- Drivers: each runs its grid in parts, saves every part's raw outcome, and skips a saved part. ----


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


def _keys(config):
    """(coarse keys, fine keys): the coarse pass draws its own seeds."""
    keys = grid.seed_keys(config.seed, config.seeds)
    return grid.seed_keys(config.seed + 1, config.coarse_seeds), keys


def _rows_result(runs, rows, alpha_of, config, resamples) -> list[dict]:
    """Per row: its knobs, N grid, success rate over N, N* with interval, and whether its top reaches 1."""
    fine, Ns = runs["fine"], runs["N"]
    point = boundaries(fine["success"], Ns, config.level)
    boot = boot_boundaries(fine["success"], Ns, config.level, resamples)
    rate = fine["success"].mean(0)
    return [
        {
            **{k: float(v) for k, v in row.items()},
            "alpha_star": alpha_of(row),
            "N": Ns[c].tolist(),
            "success_rate": rate[c].tolist(),
            "N_star": interval(boot[:, c], point[c]),
            "below_window": bool(rate[c, 0] >= config.level),
            "top_reaches_1": bool(rate[c, -1] == 1.0),
            "boot": boot[:, c],
        }
        for c, row in enumerate(rows)
    ]


def run_boundary(config, cfg, save) -> dict:
    """The boundary N* against alpha_* for every alpha_# and both networks, with the shifted power fit."""
    tokens, model, sgd = cfg["tokens"], cfg["model"], cfg["sgd"]
    k_coarse, k_fine = _keys(config)
    resamples = seed_resamples(config.seeds, config.boot, config.seed)
    out = {"networks": {}}
    for attention in config.attentions:
        net = dataclasses.replace(model, attention=attention)
        rows = [
            {"n_star": ns, "n_conf": nc}
            for nc in config.n_confs
            for ns in config.n_stars
            if ns > nc
        ]
        runs = two_stage(
            k_coarse,
            k_fine,
            rows,
            config.coarse_Ns,
            tokens,
            net,
            sgd,
            config.level,
            config.window,
            config.ratio,
            lambda name, f: save(f"{attention}_{name}", f),
        )
        if runs is None:
            continue
        per_row = _rows_result(runs, rows, lambda r: r["n_star"] / tokens.L, config, resamples)
        by_conf = {}
        for nc in config.n_confs:
            idx = [i for i, r in enumerate(rows) if r["n_conf"] == nc]
            study = boundary_study(
                runs["fine"]["success"][:, idx],
                runs["N"][idx],
                np.array([rows[i]["n_star"] / tokens.L for i in idx]),
                config.level,
                resamples,
                nc / tokens.L,
            )
            by_conf[str(nc)] = {
                **study,
                "alpha_conf": nc / tokens.L,
                "rows": [{k: v for k, v in per_row[i].items() if k != "boot"} for i in idx],
                "short_top_rows": [
                    per_row[i]["alpha_star"] for i in idx if not per_row[i]["top_reaches_1"]
                ],
            }
        out["networks"][attention] = by_conf
    return out


def run_init_error(config, cfg, save) -> dict:
    """N* against sigma (delta = 0) and against delta (sigma = 0), with N*(value) - N*(0) intervals."""
    tokens, model, sgd = cfg["tokens"], cfg["model"], cfg["sgd"]
    k_coarse, k_fine = _keys(config)
    resamples = seed_resamples(config.seeds, config.boot, config.seed)
    rows = [{"sigma": s, "delta": 0.0} for s in config.sigmas] + [
        {"sigma": 0.0, "delta": d} for d in config.deltas
    ]
    runs = two_stage(
        k_coarse,
        k_fine,
        rows,
        config.coarse_Ns,
        tokens,
        model,
        sgd,
        config.level,
        config.window,
        config.ratio,
        save,
    )
    if runs is None:
        return {
            "rows": [],
            "alpha_star": tokens.n_star / tokens.L,
            "alpha_conf": tokens.n_conf / tokens.L,
            "short_top_rows": [],
        }
    per_row = _rows_result(runs, rows, lambda r: tokens.n_star / tokens.L, config, resamples)
    base_i = next(i for i, r in enumerate(per_row) if r["sigma"] == 0 and r["delta"] == 0)
    base = per_row[base_i]
    hinge_RxCxN, Ns = runs["fine"]["test_hinge"], runs["N"]
    for c, r in enumerate(per_row):  # exploratory, not pre-registered: test hinge at each shared N
        r["hinge_minus_zero"] = {
            int(n): difference(
                *[
                    np.stack([hinge_RxCxN[idx, i, j].mean() for idx in resamples])
                    for i in (c, base_i)
                ],
                hinge_RxCxN[:, c, j].mean(),
                hinge_RxCxN[:, base_i, j].mean(),
            )
            for j, n in enumerate(Ns[c])
            if n in Ns[base_i] and Ns[base_i][j] == n
        }
    for r in per_row:
        r["minus_zero"] = difference(
            r["boot"], base["boot"], r["N_star"]["value"], base["N_star"]["value"]
        )
        r["regime"] = (
            "inside" if r["sigma"] <= 1 / tokens.M + 1e-9 and r["delta"] < 0.5 else "beyond"
        )
        r["verdict"] = direction(r["minus_zero"])
    for r in per_row:
        del r["boot"]
    return {
        "rows": per_row,
        "alpha_star": tokens.n_star / tokens.L,
        "alpha_conf": tokens.n_conf / tokens.L,
        "short_top_rows": [(r["sigma"], r["delta"]) for r in per_row if not r["top_reaches_1"]],
    }


def direction(iv: dict) -> str:
    """Pre-registered reading of an interval of a difference: above 0, below 0, or containing it."""
    if math.isnan(iv["value"]):
        return "not measured (censored)"
    return "grows" if iv["lo"] > 0 else "falls" if iv["hi"] < 0 else "flat (interval contains 0)"


def removal_ks(n: int) -> list[int]:
    """The pre-registered removal counts for n noisy tokens: 0, n/2, n."""
    return [0, n // 2, n]


def run_sparsify(config, cfg, save) -> dict:
    """Removal curves for every L (one compiled program each) over (noisy count, kind, bound) cells, at test
    time for every L and at training time for the L in config.train_Ls, for every policy."""
    tokens, model, sgd = cfg["tokens"], cfg["model"], cfg["sgd"]
    keys = grid.seed_keys(config.seed, config.seeds)
    resamples = seed_resamples(config.seeds, config.boot, config.seed)
    settings = []
    for at, Ls in (("test", config.Ls), ("train", config.train_Ls)):
        for L in Ls:
            tok = TokenConfig(
                **{
                    **dataclasses.asdict(tokens),
                    "L": L,
                    "alpha_conf": 1 / 30,
                    "noisy_tokens": max(config.noisy_counts),
                    "theorem_margin": False,
                }
            )
            cells, _ = grid.product_cells(
                tok,
                model,
                sgd,
                noisy_tokens=list(config.noisy_counts),
                noisy_irrelevant=[int(k == "irrelevant") for k in config.noisy_kinds],
                noisy_tau=list(config.noisy_taus),
            )
            ks = np.array([removal_ks(int(n)) for n in np.asarray(cells.noisy_tokens)])
            policies = tuple(config.policies if at == "test" else config.train_policies)
            part = save(
                f"L{L}_{at}",
                lambda: _flat(
                    sparsify.sparsification_runs(
                        keys, ks, cells, tokens=tok, model=model, sgd=sgd, policies=policies, at=at
                    )
                ),
            )
            for c in range(len(ks) if part is not None else 0):
                bound = float(cells.noisy_tau[c])
                settings.append(
                    _setting(
                        part,
                        c,
                        policies,
                        resamples,
                        L=L,
                        at=at,
                        n=int(cells.noisy_tokens[c]),
                        kind="irrelevant" if int(cells.noisy_irrelevant[c]) else "any",
                        bound=bound,
                        ks=ks[c].tolist(),
                        far=_far_share(tok, bound),
                    )
                )
    return {"settings": settings}


def _flat(curves: dict) -> dict:
    return {f"{p}/{m}": np.asarray(v) for p, c in curves.items() for m, v in c.items()}


def _far_share(tokens: TokenConfig, bound: float, n: int = 20000) -> float:
    """Share of tokens with noise of norm <= bound (the sampler's law) that lie nearer another pattern
    than their own: distance^2 to mu_j minus to mu_i is 2 - 2 (z_j - z_i) for a token mu_i + z."""
    g = np.random.default_rng(0).normal(size=(n, tokens.d)) * bound / np.sqrt(tokens.d)
    norm = np.linalg.norm(g, axis=1, keepdims=True)
    z = np.where(norm > bound, g * bound / norm, g)
    return float(((z[:, 1 : tokens.M] - z[:, :1]) > 1).any(1).mean())


def _setting(part, c, policies, resamples, **where) -> dict:
    """One setting's curves: mean test hinge per (policy, k) with intervals, the change at k = n against
    k = 0, and the pre-registered readings (flat random removal; each policy lowers / raises the loss)."""
    out = {**where, "policies": {}}
    for p in policies:
        loss_RxK = part[f"{p}/test_hinge"][c]
        boot = np.stack([loss_RxK[idx].mean(0) for idx in resamples])  # (B, K)
        mean = loss_RxK.mean(0)
        change = difference(boot[:, -1], boot[:, 0], mean[-1], mean[0])
        entry = {
            "loss": [interval(boot[:, k], mean[k]) for k in range(len(mean))],
            "change": change,
            "verdict": {"grows": "raises", "falls": "lowers"}.get(direction(change), "no change"),
        }
        if p == "random":
            ratio = interval(
                boot[:, -1] / np.maximum(boot[:, 0], 1e-12), mean[-1] / max(mean[0], 1e-12)
            )
            entry["ratio"] = ratio
            entry["flat"] = bool(ratio["lo"] >= 2 / 3 and ratio["hi"] <= 3 / 2)
        out["policies"][p] = entry
    return out


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
