"""The dataset registry: a synthetic dataset is its module plus one registry line, or one
`register_dataset` call."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posattn.errors import ConfigError
from posattn.theory import GDConfig, TheoryConfig, data, datasets, fit
from posattn.theory.datasets import structured


def _majority_flip_module():
    """A toy dataset: Assumption 1's patches, label = the sign of the signal set's features, flipped with
    probability 0.1 (a label-noise variant), written against the module contract only."""

    def sample(key, cfg, task, n):
        k_x, k_flip = jax.random.split(key)
        X, y = structured.sample(k_x, cfg, task, n)
        flip = jax.random.bernoulli(k_flip, 0.1, (n,))
        return X, jnp.where(flip, -y, y)

    return types.SimpleNamespace(
        integer_labelling=structured.integer_labelling,
        check=lambda cfg: None,
        make_labeller=lambda key, cfg: None,
        labelling_function=structured.labelling_function,
        sample=sample,
    )


FLIPPED = _majority_flip_module()


@pytest.mark.slow
def test_a_registered_module_is_a_dataset():
    datasets.register_dataset("flipped", FLIPPED)
    datasets.register_dataset("flipped", FLIPPED)  # the same module again: nothing changes
    with pytest.raises(ConfigError, match="'flipped' is registered already"):
        datasets.register_dataset("flipped", _majority_flip_module())
    with pytest.raises(ConfigError, match=r"lacks \['labelling_function'\]"):
        broken = types.SimpleNamespace(**{**vars(FLIPPED), "labelling_function": None})
        datasets.register_dataset("broken", broken)
    cfg = TheoryConfig(dataset="flipped")
    task = data.make_task(jax.random.key(0), cfg)
    X, y = data.sample(jax.random.key(1), cfg, task, 4000)
    X_clean, y_clean = structured.sample(jax.random.split(jax.random.key(1))[0], cfg, task, 4000)
    # The toy draws its patches as Assumption 1 does (`data.sample` runs compiled, `structured.sample`
    # op by op here: equal up to float32 round-off).
    np.testing.assert_allclose(X, X_clean, rtol=0, atol=1e-6)
    flipped = float(np.mean(np.asarray(y) != np.asarray(y_clean)))
    assert 0.08 < flipped < 0.12
    result = fit(jax.random.key(2), cfg, GDConfig(N=256, steps=4, eval_every=2, n_test=256))
    assert np.isfinite(result.history["loss"]).all()


def test_unknown_dataset_names_the_registered_ones():
    with pytest.raises(ConfigError, match="structured"):
        TheoryConfig(dataset="gaussian")


def test_dataset_checks_run_at_construction():
    with pytest.raises(ConfigError, match="partition='grid'"):
        TheoryConfig(dataset="gaussian_cnn", partition="random")
