"""JSL22's overlay (posattn.papers.jsl22.overlay): GD on the exact population risk (P) beside GD on
samples (E) from the same start, and their deviations."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posattn.papers.jsl22.overlay import deviations, overlay
from posattn.plots import save_png
from posattn.plots import theory as figures
from posattn.theory import GDConfig, TheoryConfig
from posattn.theory.population.multiset import three_value_form


@pytest.mark.slow
def test_exact_population_gd_and_the_overlay(tmp_path):
    # GD on the exact (P) through gd.fit (the multiset path, GDConfig's default; at C=2 it is the only
    # one: L * 3^(D-C) = 38M patterns is past the general path's limit), then (E) from the same start.
    cfg = TheoryConfig(D=16, C=2, d=8, q=0.4, partition="random")
    gd = GDConfig(steps=60, lr=0.01, lr_A=30.0, a0=4.0, eval_every=20, n_test=2000)
    exact, runs = overlay(jax.random.key(0), cfg, gd, Ns=(100,), devices=jax.devices()[:1])
    h = exact.history
    # The exact risk of the history agrees with its fresh-sample estimate (2000 test samples).
    np.testing.assert_allclose(h["loss"], h["test_loss"], atol=0.03)
    assert h["v_perp_norm"][-1] < h["v_perp_norm"][0]  # the noise part of v is a loss: it decays
    A = jnp.asarray(exact.params["A"])  # the traced gradient kept A three-valued (f32 round-off)
    assert float(three_value_form(A, exact.task.sets)[3]) <= 1e-6 * float(jnp.abs(A).max())
    (E,) = runs.values()
    for name in ("alpha", "A_within", "A_across", "test_loss"):  # same start, same test set
        assert E.history[name][0] == h[name][0], name
    save_png(figures.overlay_figure(h, {100: E.history}), tmp_path / "overlay.png")
    gaps = deviations(h, {100: E.history})[100]
    assert 0 < gaps["max_gap_gamma_minus_rho"] < np.inf and gaps["final_risk_P"] == h["loss"][-1]
    assert (tmp_path / "overlay.png").stat().st_size > 0
