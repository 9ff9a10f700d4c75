"""Phase-transition maps of LWLC23 (Figure of Theorem 1 and Proposition 1): success rate over
(N, alpha_*), the boundary N*(alpha_*), and which power law of alpha_* it follows.

Theorem 1: the ViT reaches zero generalisation error with N = Omega(alpha_*^-2) samples;
Proposition 1: the attention-free network needs Omega(alpha_*^-4). The paper plots the success rate over
(alpha_*^-2, N) and (alpha_*^-4, N) and finds a straight boundary in each. Here the boundary of each
alpha_* row is where the success rate first reaches 1/2 along the N grid (log-linear interpolation
between the grid points around the crossing), and it is fitted as a line in alpha_*^-2 and in
alpha_*^-4 (R^2 of each), and as a power law N* ~ alpha_*^-p (least squares in logs).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np

from posattn.shallow import grid
from posattn.shallow.config import ModelConfig, SGDConfig, TokenConfig

LEVEL = 0.5  # success rate that defines the boundary


def _sweep_cells(tokens, model, sgd, knob: str, values, Ns) -> grid.Cell:
    """Cells over (knob value, N) for a knob of `grid.Cell` ("tau", "sigma", "delta", ...)."""
    return grid.product_cells(tokens, model, sgd, **{knob: list(values)}, N=list(Ns))[0]


def maps_and_sweeps(
    keys_R,
    tokens: TokenConfig,
    model: ModelConfig,
    sgd: SGDConfig,
    n_stars,
    Ns,
    sweeps: dict | None = None,
) -> tuple[dict, dict]:
    """The phase map over (n_*, N) and N* sweeps over other knobs, R = len(keys_R) runs a cell, all in one
    compiled call (`grid.run_cells` on the concatenated cells, so one program is compiled).

    sweeps: {knob: values} (knobs of `grid.Cell`: "tau", "sigma", "delta", ...), each over the same Ns
    at the configs' n_*. One alpha_* row (one T) per batch of the compiled loop. Returns (map: success rate, test error and hinge over (n_*, N); {knob: sweep result}).
    """
    sweeps = sweeps or {}
    map_cells, _ = grid.product_cells(tokens, model, sgd, n_star=list(n_stars), N=list(Ns))
    parts = [map_cells] + [_sweep_cells(tokens, model, sgd, k, v, Ns) for k, v in sweeps.items()]
    cells = jax.tree.map(lambda *a: jnp.concatenate(a), *parts)
    out = grid.run_cells(
        keys_R, cells, tokens=tokens, model=model, sgd=sgd, cells_per_batch=len(Ns)
    )
    out = {k: np.asarray(v) for k, v in out.items()}
    split = np.cumsum([len(p.N) for p in parts])[:-1]
    pieces = [
        {k: v[a:b] for k, v in out.items()} for a, b in zip([0, *split], [*split, len(cells.N)])
    ]
    rows = lambda a, n: a.reshape(n, len(Ns), -1)
    m = pieces[0]
    result = {
        "alpha_star": [n / tokens.L for n in n_stars],
        "N": [int(n) for n in Ns],
        "seeds": int(len(keys_R)),
        **{
            name: rows(m[key], len(n_stars)).mean(-1).tolist()
            for name, key in (
                ("success_rate", "success"),
                ("test_error", "test_error"),
                ("test_hinge", "test_hinge"),
            )
        },
    }
    swept = {}
    for (knob, values), piece in zip(sweeps.items(), pieces[1:]):
        rate = rows(piece["success"], len(values)).mean(-1)
        swept[knob] = {
            "knob": knob,
            "values": [float(v) for v in values],
            "N": [int(n) for n in Ns],
            "alpha_star": tokens.n_star / tokens.L,
            "success_rate": rate.tolist(),
            "N_star": [boundary(Ns, r) for r in rate],
        }
    return result, swept


def boundary(Ns, rate, level: float = LEVEL) -> float:
    """N where the success rate first reaches `level` along the sorted grid Ns (log-linear interpolation);
    Ns[0] if it already does at the smallest N, NaN if never (the boundary lies beyond the grid)."""
    Ns, rate = np.asarray(Ns, float), np.asarray(rate, float)
    above = np.nonzero(rate >= level)[0]
    if len(above) == 0:
        return math.nan
    i = above[0]
    if i == 0:
        return float(Ns[0])
    t = (level - rate[i - 1]) / (rate[i] - rate[i - 1])
    return float(np.exp(np.log(Ns[i - 1]) + t * (np.log(Ns[i]) - np.log(Ns[i - 1]))))


def short_top_rows(result: dict) -> list[float]:
    """The alpha_* whose success rate at the largest N of the map is below 1: there the map has not
    shown that training succeeds at all (T or the N grid too small), so its boundary says little."""
    return [a for a, rate in zip(result["alpha_star"], result["success_rate"]) if rate[-1] < 1]


def line_fit(x, y) -> dict:
    """Least-squares y = intercept + slope x, with R^2 (NaN with fewer than 3 points)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 3 or np.ptp(x) == 0:
        return {"slope": math.nan, "intercept": math.nan, "r2": math.nan}
    slope, intercept = np.polyfit(x, y, 1)
    resid = y - (intercept + slope * x)
    total = ((y - y.mean()) ** 2).sum()
    return {
        "slope": float(slope),
        "intercept": float(intercept),
        "r2": float(1 - (resid**2).sum() / total) if total > 0 else math.nan,
    }


def fit_boundary(result: dict, level: float = LEVEL) -> dict:
    """N*(alpha_*) of every row, its line fits in alpha_*^-2 and alpha_*^-4, and the power-law exponent p
    of N* ~ alpha_*^-p, all on the rows whose boundary lies inside the grid (neither censored end)."""
    n_star = [boundary(result["N"], rate, level) for rate in result["success_rate"]]
    alpha = np.asarray(result["alpha_star"], float)
    inside = np.array([not math.isnan(n) and n > result["N"][0] for n in n_star])
    a, n = alpha[inside], np.asarray(n_star)[inside]
    power = (
        line_fit(np.log(1 / a), np.log(n))
        if inside.sum() >= 3
        else {"slope": math.nan, "r2": math.nan}
    )
    return {
        "N_star": n_star,
        "inside_grid": inside.tolist(),
        "fit_alpha_m2": line_fit(a**-2, n),
        "fit_alpha_m4": line_fit(a**-4, n),
        "power": power["slope"],
        "power_r2": power["r2"],
    }
