"""The suite's splits go through the measurements in batches: the answer does not depend on the batch size."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posattn import cli
from posattn.analysis import frequency_noise
from posattn.papers.pk22 import measures, streams, suite
from posattn.vision import config as config_lib
from posattn.vision.setup import resolve

# the streamed splits' end-to-end checks (~30 CPU-s): `pytest -m slow`, as .ci/run
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_vit():
    """(setup, variables) of a one-block ViT on the 16 x 16 digits, shared by the tests of this module."""
    c = cli.load_config("tpu_configs/how_vits_work.py", "vit_vanilla", config_lib.SCHEMA)
    c.model.update(width=16, depth=1, num_heads=2, mlp_dim=16)
    setup = resolve(c, 1)
    x = jnp.zeros((1, *setup.image_shape), jnp.float32)
    return setup, setup.model.init(jax.random.key(0), x, train=False)


def test_test_split_in_batches_equals_one_batch(tiny_vit):
    setup, variables = tiny_vit
    layers = ["stem", "block_00/attention", "block_00/mlp"]
    n, key = 23, jax.random.key(5)
    answers = []
    for batch in (23, 7):  # one batch, then 4 batches with a padded last one
        settings = suite.Settings(eval_batch_size=batch, feature_images=10, noise_eps=2.0)
        run = jax.jit(functools.partial(measures.forward_measures, setup.model, layers, settings))
        answers.append(
            streams.stream_forward(functools.partial(run, variables), setup, settings, key, limit=n)
        )
    one, many = answers
    assert one["correct"].shape == (10, n) and one["profiles"]["stem"].shape[0] == 10
    np.testing.assert_array_equal(one["correct"], many["correct"])
    for name in layers:
        np.testing.assert_allclose(
            one["profiles"][name], many["profiles"][name], rtol=1e-5, atol=1e-5
        )
        np.testing.assert_allclose(one["variances"][name], many["variances"][name], rtol=1e-5)


def test_noise_drawn_per_image_does_not_depend_on_the_batch():
    keys_B = jax.vmap(jax.random.fold_in, (None, 0))(jax.random.key(0), jnp.arange(6))
    draw = lambda keys: frequency_noise.band_limited_noise(
        keys, (keys.shape[0], 16, 16, 1), 0.5 * np.pi, 1.0
    )  # noqa: E731
    np.testing.assert_allclose(draw(keys_B)[2:5], draw(keys_B[2:5]), atol=1e-6)
    assert np.abs(draw(keys_B)[2]).max() > 0.1 and not np.allclose(draw(keys_B)[2], draw(keys_B)[3])


def test_training_minibatches_do_not_depend_on_the_cut(tiny_vit):
    setup, _ = tiny_vit
    settings = suite.Settings()
    images, labels = setup.split("train").read(np.arange(48))
    images, labels = jnp.asarray(images), jnp.asarray(labels)
    keys = jax.random.key(1), jax.random.key(2)
    make = jax.jit(functools.partial(streams.training_minibatches, setup, settings))
    x_all, t_all = make(*keys, images, labels, 0)  # 3 mini-batches of 16 at once
    x_two, t_two = make(*keys, images[16:], labels[16:], 1)  # the last two alone
    np.testing.assert_array_equal(x_all[1:], x_two)
    np.testing.assert_array_equal(t_all[1:], t_two)
    assert not np.allclose(t_all[0], t_all[1])  # each mini-batch has its own mixup
