"""The pre-registered experiments that settle LWLC23's three open results (docs/shallow_vit_results.md,
"Settling runs"): the boundary N* against alpha_* with alpha_# as an axis, token sparsification over
L, the noisy tokens' count, type and bound, at test and at training time, and N* against sigma and
delta swept apart.

Each study runs its grid through `settle_grid` (in parts, saved and resumable) and reads it with the
statistics of `settle_stats`: every interval is a percentile bootstrap over seeds, the same resample
for every cell; the summary is written by `settle_report`.
"""

import dataclasses

import numpy as np

from posattn.analysis import bootstrap
from posattn.papers.lwlc23.settle_grid import coarse_and_fine_keys, two_stage
from posattn.papers.lwlc23.settle_stats import (
    boot_boundaries,
    boundaries,
    boundary_study,
    difference,
    direction,
    interval,
)
from posattn.shallow import grid, sparsify
from posattn.shallow.config import TokenConfig

LEVEL = 0.5  # pre-registered: the boundary is where the success rate first reaches 1/2


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
    k_coarse, k_fine = coarse_and_fine_keys(config)
    resamples = bootstrap.resample_indices(config.seeds, config.boot, config.seed)
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


def sweep_rows(config, tau: float) -> tuple[list[dict], dict]:
    """(rows, base): sigma, delta and tau each swept alone around the base (config.sigma_base,
    config.delta_base, `tau`), the base first unless a sweep holds it, each row once."""
    base = {"sigma": float(config.sigma_base), "delta": float(config.delta_base), "tau": float(tau)}
    swept = [
        *[dict(base, sigma=float(v)) for v in config.sigmas],
        *[dict(base, delta=float(v)) for v in config.deltas],
        *[dict(base, tau=float(v)) for v in config.taus],
    ]
    rows = list({tuple(r.values()): r for r in ([] if base in swept else [base]) + swept}.values())
    return rows, base


def run_init_error(config, cfg, save) -> dict:
    """N* against sigma, delta and tau, each swept alone around a base (`sweep_rows`; by default sigma at
    delta = 0 and delta at sigma = 0), with N*(value) - N*(base) intervals."""
    tokens, model, sgd = cfg["tokens"], cfg["model"], cfg["sgd"]
    k_coarse, k_fine = coarse_and_fine_keys(config)
    resamples = bootstrap.resample_indices(config.seeds, config.boot, config.seed)
    rows, base_row = sweep_rows(config, tokens.tau)
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
            "base": base_row,
            "short_top_rows": [],
        }
    per_row = _rows_result(runs, rows, lambda r: tokens.n_star / tokens.L, config, resamples)
    base_i = rows.index(base_row)
    base = per_row[base_i]
    hinge_RxCxN, Ns = runs["fine"]["test_hinge"], runs["N"]
    for c, r in enumerate(per_row):  # exploratory, not pre-registered: test hinge at each shared N
        r["hinge_minus_base"] = {
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
        r["minus_base"] = difference(
            r["boot"], base["boot"], r["N_star"]["value"], base["N_star"]["value"]
        )
        r["regime"] = (
            "inside" if r["sigma"] <= 1 / tokens.M + 1e-9 and r["delta"] < 0.5 else "beyond"
        )
        r["verdict"] = direction(r["minus_base"])
    for r in per_row:
        del r["boot"]
    return {
        "rows": per_row,
        "alpha_star": tokens.n_star / tokens.L,
        "alpha_conf": tokens.n_conf / tokens.L,
        "base": base_row,
        "short_top_rows": [
            (r["sigma"], r["delta"], r["tau"]) for r in per_row if not r["top_reaches_1"]
        ],
    }


def removal_ks(n: int) -> list[int]:
    """The pre-registered removal counts for n noisy tokens: 0, n/2, n."""
    return [0, n // 2, n]


def run_sparsify(config, cfg, save) -> dict:
    """Removal curves for every L (one compiled program each) over (noisy count, kind, bound) cells, at test
    time for every L and at training time for the L in config.train_Ls, for every policy."""
    tokens, model, sgd = cfg["tokens"], cfg["model"], cfg["sgd"]
    keys = grid.seed_keys(config.seed, config.seeds)
    resamples = bootstrap.resample_indices(config.seeds, config.boot, config.seed)
    settings = []
    for at, Ls in (("test", config.Ls), ("train", config.train_Ls)):
        for L in Ls:
            tok = TokenConfig(
                **{
                    **dataclasses.asdict(tokens),
                    "L": L,
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
