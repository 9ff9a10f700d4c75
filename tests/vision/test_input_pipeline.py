"""The input pipeline's worker processes and device prefetch (issue 49 item 1): the same batches as the
caller's thread reads, in order, from any start step; errors reach the caller; closing stops the
workers; a training run is bitwise the same whichever way its batches are read."""

import threading

import jax
import numpy as np
import pytest

from posattn.errors import ConfigError
from posattn.mesh import data_mesh, global_batch
from posattn.vision import train
from posattn.vision.data import device_prefetch, pipeline
from posattn.vision.setup import resolve
from tests.vision.test_data import assert_batches_equal, make_config, take
from tests.vision.test_train import tiny_digits


def test_worker_processes_read_the_batches_the_callers_thread_reads():
    setup = resolve(make_config(global_batch_size=100, validation_examples=200))
    assert setup.input_workers == 0  # digits are held in memory: nothing to decode, no workers
    at_home = take(setup.train_batches(start_step=3, process_index=1, process_count=2), 6)
    for workers in (1, 2):
        batches = pipeline.train_batches(
            setup.split("train"),
            seed=0,
            global_batch_size=100,
            start_step=3,
            workers=workers,
            process_index=1,
            process_count=2,
        )
        assert_batches_equal(at_home, take(batches, 6))
        batches.close()


def test_device_prefetch_keeps_the_order_and_puts_every_batch():
    mesh = data_mesh(jax.devices())
    host = take(resolve(make_config()).train_batches(process_index=0, process_count=1), 5)
    for size in (0, 1, 3):
        out = take(device_prefetch.prefetch(iter(host), lambda b: global_batch(b, mesh), size), 5)
        for got, want in zip(out, host):
            assert isinstance(got["image"], jax.Array) and got["image"].sharding.mesh == mesh
            np.testing.assert_array_equal(np.asarray(got["image"]), want["image"])


def test_device_prefetch_raises_the_pipelines_error_at_its_batch_and_closing_stops_the_thread():
    def batches():
        yield 1
        yield 2
        raise ConfigError("the third batch is unreadable")

    out = device_prefetch.prefetch(batches(), lambda b: b * 10, 2)
    assert [next(out), next(out)] == [10, 20]
    with pytest.raises(ConfigError, match="third batch"):
        next(out)

    closed = threading.Event()

    def endless():
        try:
            n = 0
            while True:
                n += 1
                yield n
        finally:
            closed.set()

    out = device_prefetch.prefetch(endless(), lambda b: b, 2)
    assert next(out) == 1
    out.close()  # the thread stops with the queue full, then the pipeline is closed
    assert closed.is_set()
    assert not any(t.name == "posattn-prefetch" for t in threading.enumerate())


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"input": {"workers": -2, "prefetch": 2}}, "input.workers=-2"),
        ({"input": {"workers": 0, "prefetch": -1}}, "input.prefetch=-1"),
    ],
)
def test_bad_input_settings_are_refused_in_one_line(overrides, match):
    c = make_config()
    c.update(overrides)
    with pytest.raises(ConfigError, match=match):
        resolve(c)


def test_the_inception_crop_replaces_the_padded_crop_and_refuses_both():
    c = make_config()
    c.augment.inception_crop = True
    setup = resolve(c)
    assert setup.augment.crop_padding == 0 and "Inception crop" in setup.augment_note
    assert setup.input_workers >= 1  # a crop per example from the original: work for the workers
    c.augment.crop_padding = 2
    with pytest.raises(ConfigError, match="replaces the padded crop"):
        resolve(c)


@pytest.mark.slow
def test_a_run_reads_the_same_batches_from_workers_and_ends_bitwise_the_same(tmp_path):
    """Two worker processes and a prefetch of 3 against the caller's thread without prefetch."""
    finals = []
    for n, (workers, prefetch) in enumerate([(0, 0), (2, 3)]):
        c = tiny_digits(total_steps=12, log_every=4, eval_every=0)
        c.input.workers, c.input.prefetch = workers, prefetch
        state, _ = train.train(c, str(tmp_path / str(n)))
        finals.append(jax.device_get(state["params"]))
    jax.tree.map(np.testing.assert_array_equal, *finals)
