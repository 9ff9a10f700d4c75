"""Figures of LWLC23's shallow-ViT regime (`posattn.shallow`), as `matplotlib.figure.Figure` objects.

Each function takes the dictionaries the library returns and builds one figure; the caller saves it
(`posattn.plots.save_png`). Published values, where the paper gives them, are passed in by the caller
(`posattn.papers.lwlc23.published`) and drawn beside ours.
"""

import math

import numpy as np
from matplotlib.figure import Figure

POLICY_COLOURS = {
    "irrelevant": "tab:green",
    "noisy": "tab:orange",
    "random": "tab:grey",
    "attention": "tab:blue",
}


def _map_panel(ax, result: dict, fit: dict, power: int, title: str):
    """Success rate over (alpha_*^-power, N) as grey squares (white = every trial succeeds), the
    boundary N* of each alpha_* and its fitted line."""
    x = np.asarray(result["alpha_star"], float) ** -power
    N = np.asarray(result["N"], float)
    rate = np.asarray(result["success_rate"], float)  # (alphas, Ns)
    X, Y = np.meshgrid(x, N, indexing="ij")
    sc = ax.scatter(
        X.ravel(),
        Y.ravel(),
        c=rate.ravel(),
        cmap="gray",
        vmin=0,
        vmax=1,
        marker="s",
        s=160,
        edgecolors="k",
        linewidths=0.3,
    )
    n_star = np.asarray(fit["N_star"], float)
    inside = np.asarray(fit["inside_grid"], bool)
    ax.plot(x[inside], n_star[inside], "o", color="tab:red", label="N* (success rate 1/2)")
    line = fit[f"fit_alpha_m{power}"]
    if not math.isnan(line["slope"]):
        xs = np.linspace(x.min(), x.max(), 50)
        ax.plot(
            xs,
            line["intercept"] + line["slope"] * xs,
            "-",
            color="tab:red",
            label=f"line in alpha^-{power}, R^2 = {line['r2']:.3f}",
        )
    ax.set_yscale("log")
    ax.set_ylim(N.min() / 1.3, N.max() * 1.3)  # the fitted line may run below the grid
    ax.set_xlabel(f"alpha_*^-{power}")
    ax.set_ylabel("training samples N")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="lower right", framealpha=0.9)
    return sc


def phase_maps(vit: dict, vit_fit: dict, free: dict, free_fit: dict) -> Figure:
    """The two phase-transition maps: the ViT over alpha_*^-2, the attention-free network over alpha_*^-4."""
    fig = Figure(figsize=(10, 4))
    axes = fig.subplots(1, 2)
    _map_panel(axes[0], vit, vit_fit, 2, "ViT (Theorem 1: N ~ alpha_*^-2)")
    sc = _map_panel(axes[1], free, free_fit, 4, "attention-free (Prop. 1: N ~ alpha_*^-4)")
    fig.colorbar(sc, ax=axes, fraction=0.03, label="success rate")
    return fig


def boundary_sweeps(sweeps: dict) -> Figure:
    """N* against each swept knob (token noise tau, initial-model error sigma = delta), for each network
    the sweep holds (the binary sweeps the ViT); a boundary beyond the grid is drawn at the grid's edge
    with an open marker."""
    fig = Figure(figsize=(10, 3.6))
    axes = fig.subplots(1, len(sweeps))
    for ax, (knob, by_net) in zip(np.atleast_1d(axes), sweeps.items()):
        for net, s in by_net.items():
            values, n_star = np.asarray(s["values"], float), np.asarray(s["N_star"], float)
            beyond = np.isnan(n_star)
            colour = "tab:blue" if net == "vit" else "tab:orange"
            ax.plot(values[~beyond], n_star[~beyond], "o-", color=colour, label=net)
            ax.plot(
                values[beyond], np.full(beyond.sum(), max(s["N"])), "o", mfc="none", color=colour
            )
        ax.set_yscale("log")
        ax.set_xlabel(knob)
        ax.set_ylabel("N* (success rate 1/2)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def attention_concentration(band: dict, seeds: int, paper: dict | None = None) -> Figure:
    """Attention mass on label-relevant tokens (relevant queries) over SGD iterations: mean, 10-90%
    band and min/max over seeds, beside the paper's curve `paper` ({"step": [...], "mass": [...]})."""
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    step = np.asarray(band["step"])
    ax.fill_between(step, band["q10"], band["q90"], alpha=0.3, label="10-90% of seeds")
    ax.plot(step, band["min"], ":", color="tab:blue", lw=0.8, label="min / max")
    ax.plot(step, band["max"], ":", color="tab:blue", lw=0.8)
    ax.plot(step, band["mean"], "-", color="tab:blue", label=f"mean over {seeds} seeds")
    if paper:
        ax.plot(paper["step"], paper["mass"], "ks--", ms=4, label="LWLC23 (read off)")
    ax.set_xlabel("SGD iteration")
    ax.set_ylabel("attention mass on label-relevant tokens")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def sparsification(ks, curves: dict, name: str = "test_hinge", paper: dict | None = None) -> Figure:
    """Test hinge loss against the number of removed tokens per policy (mean and 10-90% band over
    seeds), with the paper's values `paper` ({policy: (ks, losses)}) as dashed lines."""
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    ks = np.asarray(ks)
    for policy, c in curves.items():
        v = np.asarray(c[name])
        colour = POLICY_COLOURS.get(policy)
        ax.plot(ks, v.mean(0), "o-", ms=3, color=colour, label=policy)
        ax.fill_between(
            ks, np.quantile(v, 0.1, 0), np.quantile(v, 0.9, 0), color=colour, alpha=0.15
        )
        if paper and policy in paper:
            ax.plot(*paper[policy], "s--", color=colour, ms=4, lw=0.8, alpha=0.7)
    ax.set_xlabel("tokens removed per test sample")
    ax.set_ylabel("test hinge loss" if name == "test_hinge" else name)
    ax.set_title(
        "token sparsification" + (" (dashed: LWLC23, read off)" if paper else ""), fontsize=9
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _errorbars(ax, x, ivs, **kw):
    """Points with their bootstrap intervals (NaN = beyond the grid: left out)."""
    v = np.array([iv["value"] for iv in ivs], float)
    lo = np.array([iv["lo"] for iv in ivs], float)
    hi = np.array([iv["hi"] for iv in ivs], float)
    ok = np.isfinite(v)
    x = np.asarray(x, float)
    ax.errorbar(
        x[ok],
        v[ok],
        yerr=[np.maximum(v - lo, 0)[ok], np.maximum(hi - v, 0)[ok]],
        fmt="o-",
        capsize=3,
        **kw,
    )


def settle_figure(study: str, results: dict) -> Figure:
    """The settling runs (`posattn.papers.lwlc23.settle`): N* against alpha_*^-2 (ViT) and alpha_*^-4
    (attention-free) in linear N, one line per alpha_#, with the fitted c (alpha_* - alpha_0)^-q; N*
    against sigma and delta; or the removal curves' change, per setting."""
    if study == "boundary":
        nets = results["networks"]
        fig = Figure(figsize=(5.5 * len(nets), 4.2))
        axes = fig.subplots(1, len(nets), squeeze=False)[0]
        for ax, (net, by_conf) in zip(axes, nets.items()):
            power = 2 if net == "softmax" else 4
            for nc, s in by_conf.items():
                a = np.array(s["alpha_star"])
                _errorbars(ax, a**-power, s["N_star"], label=f"alpha_# = {s['alpha_conf']:.3f}")
                if np.isfinite(s["q"]["value"]):
                    aa = np.linspace(a.min(), a.max(), 60)
                    ax.plot(
                        aa**-power,
                        s["c"] * (aa - s["alpha0"]["value"]) ** -s["q"]["value"],
                        ":",
                        color="k",
                        lw=0.8,
                    )
            ax.set_xlabel(f"alpha_*^-{power}")
            ax.set_ylabel("N* (success rate 1/2), 95% bootstrap")
            ax.set_title(
                f"{'ViT' if net == 'softmax' else 'attention-free'}: dotted = c (alpha_* - alpha_0)^-q"
            )
            ax.legend(fontsize=7)
        return fig
    if study == "init_error":
        rows, base = results["rows"], results["base"]
        knobs = [k for k in base if len({r[k] for r in rows}) > 1]  # the knobs swept
        fig = Figure(figsize=(5 * len(knobs), 4))
        for ax, knob in zip(np.atleast_1d(fig.subplots(1, len(knobs))), knobs):
            others = [k for k in base if k != knob]
            sel = sorted(
                (r for r in rows if all(r[k] == base[k] for k in others)), key=lambda r: r[knob]
            )
            _errorbars(ax, [r[knob] for r in sel], [r["N_star"] for r in sel])
            if knob != "tau":
                ax.axvline(
                    1 / 6 if knob == "sigma" else 0.49,
                    color="tab:red",
                    ls=":",
                    label="theorem's regime ends",
                )
                ax.legend(fontsize=7)
            ax.set_xlabel(f"{knob} ({', '.join(f'{k} = {base[k]:.3g}' for k in others)})")
            ax.set_ylabel("N* (success rate 1/2), 95% bootstrap")
        return fig
    settings = results["settings"]
    fig = Figure(figsize=(12, 4.5))
    axes = fig.subplots(1, 2, sharey=True)
    for ax, at in zip(axes, ("test", "train")):
        sel = [s for s in settings if s["at"] == at]
        for p, colour in POLICY_COLOURS.items():
            if sel and p in sel[0]["policies"]:
                _errorbars(
                    ax,
                    np.arange(len(sel)),
                    [s["policies"][p]["change"] for s in sel],
                    color=colour,
                    label=p,
                    alpha=0.8,
                )
        ax.axhline(0, color="k", lw=0.6)
        ax.set_xticks(np.arange(len(sel)))
        ax.set_xticklabels(
            [f"L{s['L']} n{s['n']} {s['kind'][:3]} b{s['bound']:g}" for s in sel],
            rotation=90,
            fontsize=6,
        )
        ax.set_title(f"sparsification at {at} time: loss(k = n) - loss(0)")
        if sel:
            ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
