"""The trainer's clock, MFU and profile trace (posattn.vision.chrono, posattn.vision.utilisation)."""

import types

import jax
import jax.numpy as jnp
import pytest

from posattn.errors import ConfigError
from posattn.vision import chrono, utilisation
from posattn.vision.models import flops
from posattn.vision.models.vit import ViT


def device(kind):
    return types.SimpleNamespace(device_kind=kind)


def test_the_peak_is_the_device_s_own_and_mfu_is_flops_over_time_over_the_peaks():
    assert utilisation.peak_flops("TPU v5 lite") == 197e12  # not v5p's 459
    assert utilisation.peak_flops("NVIDIA H100 PCIe") == 756e12  # not the SXM card's 989
    assert utilisation.peak_flops("NVIDIA H100 NVL") is None
    assert utilisation.peak_flops("cpu") is None
    four = [device("TPU v4")] * 4
    # 1.1e15 FLOPs in 1 s on 4 chips of 275 TFLOP/s: 1.1e15 / 1.1e15 = 100%
    assert utilisation.mfu(1.1e15, 1.0, four, jnp.bfloat16) == pytest.approx(1.0)
    assert utilisation.mfu(1.1e15, 2.0, four, jnp.bfloat16) == pytest.approx(0.5)
    assert utilisation.mfu(1.1e15, 1.0, four, jnp.float32) is None  # not at the bf16 peak
    assert utilisation.mfu(1.1e15, 1.0, [device("cpu")], jnp.bfloat16) is None


def test_the_step_flops_are_the_vit_s_analytic_count_and_unknown_for_other_models():
    vit = ViT(10, 8, 2, 32, 2, 2, 64, channels=1)
    assert utilisation.training_step_flops(vit, 16) == flops.training_flops(vit, 16)
    assert utilisation.training_step_flops(object(), 16) is None
    assert utilisation.memory_in_use(jax.devices()) is None  # a CPU reports none


def test_profile_steps_are_two_steps_in_the_run():
    assert chrono.profile_window("", 10) is None
    assert chrono.profile_window("3,5", 10) == (3, 5)
    for bad in ["5,3", "0,2", "3,11", "3", "a,b", "1,2,3"]:
        with pytest.raises(ConfigError, match="profile_steps="):
            chrono.profile_window(bad, 10)


def test_a_profile_writes_a_trace_of_its_steps(tmp_path):
    profile = chrono.Profile((2, 3), tmp_path / "profile")
    f = jax.jit(lambda x: x * 2)
    x = jnp.ones(4)
    for step in range(1, 5):
        profile.before(step)
        x = f(x)
        profile.after(step, x)
        assert profile.on == (step == 2)
    profile.close()
    assert list((tmp_path / "profile").rglob("*.xplane.pb"))


def test_the_clock_leaves_out_the_first_step_and_the_pauses():
    clock = chrono.Chrono(
        total_steps=10,
        global_batch_size=8,
        step_flops=None,
        devices=jax.devices(),
        dtype=jnp.float32,
    )
    with clock.feeding():
        pass
    assert clock.stepped(jnp.zeros(())) is not None  # the first step: compile time
    for _ in range(4):
        with clock.feeding():
            pass
        assert clock.stepped(jnp.zeros(())) is None
    clock.pause()
    measures = clock.window(5)
    assert measures["images_per_second"] == pytest.approx(4 * 8 / clock.timed_seconds)
    assert 0 <= measures["data_wait_fraction"] <= 1 and measures["mfu"] is None
    assert chrono.line(measures).endswith(
        "img/s  data " + f"{100 * measures['data_wait_fraction']:.0f}%"
    )
    clock.resume()
    clock.pause()
    assert clock.window(6)["images_per_second"] is None  # no step in that window
