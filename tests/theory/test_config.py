"""Invalid configurations are refused at construction with a message that says what is wrong."""

import numpy as np
import pytest

from posattn.errors import ConfigError
from posattn.theory import GDConfig, TheoryConfig
from posattn.theory.presets import PRESETS, get_preset, preset_config


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(D=18, C=4), "not a multiple of C"),
        (dict(D=20, C=4, partition="grid"), "square"),
        (dict(D=36, C=3, partition="grid"), "tile"),
        (dict(D=16, C=2, partition="grid"), "tile"),
        (dict(q=1.5), "[0, 1]"),
        (dict(q=-0.1), "[0, 1]"),
        (dict(noise="pink"), "noise"),
        (dict(activation="relu"), "activation"),
        (dict(partition="hexagonal"), "partition"),
        (dict(d=1), "d=1"),
        (dict(dataset="gaussian_cnn", partition="random"), "grid"),
        (dict(D=16, C=1, partition="random"), "C=1"),
    ],
)
def test_theory_config_rejects(kwargs, words):
    with pytest.raises(ConfigError, match=None) as e:
        TheoryConfig(**kwargs)
    assert words in str(e.value) and "\n" not in str(e.value)
    assert isinstance(e.value, ValueError)


def test_random_partition_needs_no_square():
    assert TheoryConfig(D=20, C=4, partition="random").L == 5


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(N=0), "N=0"),
        (dict(N=-5), "positive"),
        (dict(risk="bayes"), "risk"),
        (dict(lr=0), "lr"),
        (dict(steps=0), "steps"),
        (dict(lr_A=-1.0), "lr_A"),
        (dict(n_final_test=15_000), "multiple"),
        (dict(implementation="kernel"), "implementation='kernel'"),
    ],
)
def test_gd_config_rejects(kwargs, words):
    with pytest.raises(ConfigError) as e:
        GDConfig(**kwargs)
    assert words in str(e.value)


@pytest.mark.parametrize(
    "cls, kwargs, words",
    [
        (GDConfig, dict(steps=2.5), "GDConfig.steps=2.5: give an integer"),
        (GDConfig, dict(a0=float("nan")), "GDConfig.a0=nan: give a finite number"),
        (GDConfig, dict(lr=float("inf")), "GDConfig.lr=inf: give a finite number"),
        (GDConfig, dict(lr_A=float("inf")), "GDConfig.lr_A=inf: give a finite number or None"),
        (GDConfig, dict(N=3_000_000_000), "GDConfig.N=3000000000: give at most 2,147,483,647"),
        (TheoryConfig, dict(D="16"), "TheoryConfig.D='16': give an integer (got a str; e.g. D=16)"),
        (
            TheoryConfig,
            dict(D=16.0),
            "TheoryConfig.D=16.0: give an integer (got a float; e.g. D=16)",
        ),
        (
            TheoryConfig,
            dict(noise_std=float("inf")),
            "TheoryConfig.noise_std=inf: give a finite number or None",
        ),
        (TheoryConfig, dict(temperature=1), "TheoryConfig.temperature=1: give True or False"),
    ],
)
def test_types_and_finiteness_are_checked_at_construction(cls, kwargs, words):
    with pytest.raises(ConfigError) as e:
        cls(**kwargs)
    assert str(e.value).startswith(words), str(e.value)


def test_numpy_numbers_are_numbers():
    assert TheoryConfig(D=np.int64(16), q=np.float32(0.5)).L == 4 and GDConfig(lr=1).lr == 1


def test_an_image_config_is_no_theory_config():
    from posattn import cli
    from posattn.theory.presets import configs_from
    from posattn.vision import config as config_lib

    digits = cli.load_config("tpu_configs/digits.py", None, config_lib.SCHEMA)
    with pytest.raises(
        ConfigError, match="the config has no preset, seeds, overlay_N, theory, gd: a theory config"
    ):
        configs_from(digits)
    config = preset_config()
    with config.gd.unlocked():
        config.gd.extra = 1  # a field the dataclass lacks
    with pytest.raises(ConfigError, match="gd.extra is not a field of GDConfig"):
        configs_from(config)


def test_presets_are_valid_and_unknown_is_refused():
    assert set(PRESETS) == {"phases", "small", "paper", "fig2"}
    theory, _ = get_preset("paper")
    assert (theory.D, theory.C, theory.L, theory.d) == (36, 4, 9, 64)
    with pytest.raises(ConfigError, match="unknown preset"):
        get_preset("huge")
    with pytest.raises(ConfigError, match="unknown preset 'smal': did you mean 'small'"):
        get_preset("smal")


def test_defaults_are_the_small_preset_and_presets_are_exported():
    # The dataclass defaults are a setting that works (a0 = 0, lr_A = lr would never associate patches).
    from posattn.theory import PRESETS as exported
    from posattn.theory import get_preset as exported_get

    assert exported is PRESETS and exported_get is get_preset
    assert (TheoryConfig(), GDConfig()) == PRESETS["small"]


def test_sigma_refuses_an_unknown_activation():
    import jax.numpy as jnp

    from posattn.theory import sigma

    with pytest.raises(ConfigError, match="did you mean 'cubic'"):
        sigma(jnp.ones(3), "cubi")
