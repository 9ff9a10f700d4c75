"""(E) approaches (P): empirical-risk GD at growing N beside GD on the exact population risk (issue 3).

Every run starts from the same task (partition, w*) and the same initialisation, and is evaluated on the
same fixed test set, so the trajectories differ only by the risk that GD descends: the exact (P) of
`posattn.theory.population`, or (E) on N samples. Theorems 4.1-4.2 of JSL22 say that GD on (E) follows
GD on (P) once N is large enough; the overlay figure (`posattn.plots.theory.overlay_figure`) shows it.
"""

import dataclasses
import time
from collections.abc import Callable, Sequence

import jax
import numpy as np

from posattn.theory import draw as draw_lib
from posattn.theory import gd as gd_lib
from posattn.theory.config import GDConfig, TheoryConfig
from posattn.theory.presets import DEFAULT_NS


def empirical_runs(
    key,
    cfg: TheoryConfig,
    gd: GDConfig,
    Ns: Sequence[int] = DEFAULT_NS,
    *,
    task=None,
    params=None,
    devices=None,
    on_done: Callable[[int, gd_lib.FitResult], None] | None = None,
) -> dict:
    """GD on (E) with N samples for each N in `Ns`, from the task and initialisation of `key`.

    `key` is the key of the (P) run (`gd.fit(key, ...)`), so with `task` and `params` left None the runs
    share its task, initialisation and test set; pass them to start elsewhere. Returns {N: FitResult}.
    """
    task, params = draw_lib.draw_start(key, cfg, gd, task, params)
    params = jax.tree.map(
        np.asarray, params
    )  # host copies: `fit` donates the device buffers it gets
    runs = {}
    for N in Ns:
        gd_N = dataclasses.replace(gd, risk="empirical", N=int(N))
        runs[int(N)] = gd_lib.fit(key, cfg, gd_N, task=task, params=params, devices=devices)
        if on_done:
            on_done(int(N), runs[int(N)])
    return runs


def overlay(
    key,
    cfg: TheoryConfig,
    gd: GDConfig,
    Ns: Sequence[int] = DEFAULT_NS,
    *,
    devices=None,
    verbose: bool = False,
):
    """The exact-(P) run and the (E) runs at each N, all from `key`'s task and initialisation.

    Returns (exact FitResult, {N: FitResult}).
    """
    t0 = time.perf_counter()
    exact = gd_lib.fit(key, cfg, dataclasses.replace(gd, risk="population_exact"), devices=devices)
    if verbose:
        print(f"exact (P): {time.perf_counter() - t0:.1f}s", flush=True)
    report = (lambda N, r: print(f"(E) N={N}: {r.seconds:.1f}s", flush=True)) if verbose else None
    runs = empirical_runs(
        key, cfg, gd, Ns, task=exact.task, params=exact.init_params, devices=devices, on_done=report
    )
    return exact, runs


def deviations(exact_history: dict, runs: dict) -> dict:
    """How far each (E) trajectory is from the exact (P) one, per N: the largest gap over the history
    of gamma - rho and of alpha, and both runs' final population risk (exact for (P), the fixed test
    set's estimate for (E)). `runs` maps N to the (E) history; the histories share their steps."""

    def gamma_rho(h):
        return np.asarray(h["A_within"]) - np.asarray(h["A_across"])

    out = {}
    for N, h in sorted(runs.items()):
        out[int(N)] = {
            "max_gap_gamma_minus_rho": float(
                np.max(np.abs(gamma_rho(h) - gamma_rho(exact_history)))
            ),
            "max_gap_alpha": float(np.max(np.abs(np.asarray(h["alpha"]) - exact_history["alpha"]))),
            "final_risk": float(h["test_loss"][-1]),
            "final_risk_P": float(exact_history["loss"][-1]),
        }
    return out
