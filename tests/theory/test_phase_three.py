"""The split of alpha's drift on the exact population dynamics (docs/theory_results.md, "Phase III")."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posattn.theory import TheoryConfig
from posattn.theory.population.reduced import alpha_drift_split, reduced_risk

CFG = TheoryConfig(D=16, C=4, d=16, q=0.4)


@pytest.mark.slow
@pytest.mark.parametrize("alpha,gamma,rho", [(0.2, 0.0, 0.0), (0.15, 6.0, -1.0)])
def test_the_split_adds_up_to_minus_the_gradient_in_alpha(alpha, gamma, rho):
    split = alpha_drift_split(alpha, gamma, rho, CFG, a=4.0)
    grad = jax.grad(lambda al: reduced_risk(al, jnp.float32(gamma), jnp.float32(rho), CFG, 4.0))(
        jnp.float32(alpha)
    )
    np.testing.assert_allclose(split["total"], -float(grad), rtol=1e-3, atol=1e-6)
    np.testing.assert_allclose(
        split["classified"] + split["misclassified"], split["total"], rtol=1e-5
    )
    # Correctly classified patterns push alpha up, misclassified ones pull it down (cubic sigma).
    assert split["classified"] > 0 > split["misclassified"]
    # A set besides the signal set all +1 or all -1: 1 - (1 - 2 (q/2)^C)^(L-1).
    p_full = 1 - (1 - 2 * (CFG.q / 2) ** CFG.C) ** (CFG.L - 1)
    np.testing.assert_allclose(split["full_set_mass"], p_full, rtol=1e-6)
    assert 0 < split["misclassified_mass"] < 0.5


def test_without_spurious_features_nothing_is_misclassified_and_alpha_grows():
    split = alpha_drift_split(0.2, 3.0, -1.0, TheoryConfig(D=16, C=4, d=16, q=0.0), a=4.0)
    assert split["misclassified_mass"] == 0 and split["misclassified"] == 0 and split["total"] > 0
