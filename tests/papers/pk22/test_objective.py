"""The objective of PK22's study (posattn.papers.pk22): its settings' defaults, and
measures.objective_fn on streams.mixed_minibatches is PK22's NLL plus its L2 term on mixed-up
mini-batches."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from posattn.papers.pk22 import measures, streams, suite
from tests.analysis.test_objective import pk22_l2


class _Linear(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = False):
        return nn.Dense(3)(x.reshape(x.shape[0], -1))


def test_suite_objective_is_pk22s_nll_plus_l2_on_mixed_minibatches():
    settings = suite.Settings()
    assert (
        settings.weight_decay,
        settings.landscape_l2_form,
        settings.hessian_l2_form,
        settings.mixup_alpha,
        settings.label_smoothing,
    ) == (0.05, "norms", "squared", 1.0, 0.1)
    assert (settings.landscape_normalisation, settings.noise_band, settings.noise_eps) == (
        "pk22",
        "pk22",
        0.7,
    )
    model = _Linear()
    x = jax.random.normal(jax.random.key(2), (8, 2, 2, 1))
    y = jnp.array([0, 1, 2, 0, 1, 2, 0, 1])
    variables = model.init(jax.random.key(3), x)
    xm, t = streams.mixed_minibatches(jax.random.key(4), x, y, 3, 4, settings)
    assert xm.shape == (2, 4, 2, 2, 1) and t.shape == (2, 4, 3)
    assert not np.allclose(t[0, 0, :], t[1, 0, :])  # one lambda per mini-batch of 4
    loss = measures.objective_fn(model, variables, settings, "norms")(
        variables["params"], (xm[0], t[0])
    )
    dense = jax.tree.map(lambda t: np.asarray(t, np.float64), variables["params"]["Dense_0"])
    logits = np.asarray(xm[0], np.float64).reshape(4, -1) @ dense["kernel"] + dense["bias"]
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -np.mean(np.sum(np.asarray(t[0]) * log_p, -1)) + 0.05 * pk22_l2(variables["params"])
    np.testing.assert_allclose(loss, expected, rtol=1e-5)
