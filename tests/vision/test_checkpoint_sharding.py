"""Checkpoints of a sharded train state (issue 48, item 3): saved as the arrays lie, with no gather to a
host; restored onto another mesh bitwise; the values saved are the step's though the next steps donate
its buffers; the checksums the same on any sharding and caught by a flipped bit; checkpoints saved
before (one SHA-256 of the host state) still restore and are checked.

The states are built by hand on the 8 simulated CPU devices, on meshes with the trainer's axes
("data", "fsdp", "model")."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
from jax.experimental import multihost_utils
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from posattn import workdir as workdir_lib
from posattn.vision import checkpoint, integrity, runs, train
from tests import multiprocess
from tests.vision import fault_injection
from tests.vision.test_train import tiny_digits

AXES = ("data", "fsdp", "model")


def mesh(shape, devices=None):
    devices = jax.devices()[: int(np.prod(shape))] if devices is None else devices
    return jax.make_mesh(shape, AXES, axis_types=(AxisType.Auto,) * 3, devices=devices)


def host_state() -> dict:
    """A train state's kinds of leaves: float32, bfloat16, int32, uint8, bool; a scalar step."""
    rng = np.random.default_rng(0)
    return {
        "step": np.asarray(7, np.int32),
        "params": {
            "w": rng.standard_normal((16, 8), np.float32),
            "b": rng.standard_normal((8,)).astype(jnp.bfloat16),
            "emb": rng.standard_normal((4, 8, 8), np.float32),
            # large enough that OCDBT stores it in a data file of its own, not inline in its index
            "kernel": rng.standard_normal((64, 256), np.float32),
        },
        "batch_stats": {"count": np.arange(8, dtype=np.int32), "mask": np.arange(8) % 3 == 0},
        "opt_state": {"mu": rng.integers(0, 255, (16, 8), np.uint8)},
    }


def specs(fsdp: str | None, model: str | None) -> dict:
    """Per-leaf partition specs: fsdp over the leading axis, model over the last (where asked)."""
    return {
        "step": P(),
        "params": {
            "w": P(fsdp, model),
            "b": P(model),
            "emb": P(None, fsdp, model),
            "kernel": P(fsdp, model),
        },
        "batch_stats": {"count": P(fsdp), "mask": P(model)},
        "opt_state": {"mu": P(fsdp, model)},
    }


def shardings(m, fsdp="fsdp", model="model") -> dict:
    return jax.tree.map(
        lambda s: NamedSharding(m, s), specs(fsdp, model), is_leaf=lambda x: isinstance(x, P)
    )


def place(state, m, **kw):
    return jax.tree.map(jax.device_put, state, shardings(m, **kw))


def bits(tree):
    """Every leaf's bytes, for bitwise comparisons (NaN and -0.0 included)."""
    return jax.tree.map(lambda x: np.array(x).tobytes(), tree)


FSDP8 = mesh((1, 8, 1))  # fsdp over 8 devices


def test_a_state_saved_fsdp_over_8_restores_bitwise_on_2x2x2_and_on_4_devices(tmp_path):
    state = place(host_state(), FSDP8)
    assert state["params"]["w"].addressable_shards[0].data.shape == (2, 8)  # really sharded
    with checkpoint.manager(str(tmp_path)) as mngr:
        checkpoint.save(mngr, state)
    shapes = jax.eval_shape(lambda: host_state())
    targets = {
        "(2,2,2)": shardings(mesh((2, 2, 2))),
        "4 devices": shardings(mesh((1, 4, 1)), model=None),
        "one device": jax.sharding.SingleDeviceSharding(jax.devices()[3]),
    }
    with checkpoint.manager(str(tmp_path), read_only=True) as reader:
        for name, target in targets.items():
            restored = checkpoint.restore(reader, checkpoint.abstract_like(shapes, target))
            assert bits(restored) == bits(host_state()), name
            got = jax.tree.map(lambda x: x.sharding, restored)
            want = checkpoint.abstract_like(shapes, target)
            assert got == jax.tree.map(lambda x: x.sharding, want), name


def test_saving_gathers_nothing_to_a_host(tmp_path, monkeypatch):
    state = place(host_state(), FSDP8)

    def refused(*args, **kwargs):
        raise AssertionError("the state was gathered to the host")

    monkeypatch.setattr(jax, "device_get", refused)
    monkeypatch.setattr(multihost_utils, "process_allgather", refused)
    with checkpoint.manager(str(tmp_path)) as mngr:
        checkpoint.save(mngr, state)
        mngr.wait_until_finished()
    monkeypatch.undo()
    item = tmp_path / "checkpoints" / "7" / "default"
    assert (item / "manifest.ocdbt").exists()  # one OCDBT database
    assert checkpoint.survey(tmp_path / "checkpoints").complete == (7,)


def test_checksums_are_the_same_on_every_sharding_and_on_the_host():
    on_host = integrity.checksums(host_state())
    assert integrity.checksums(place(host_state(), FSDP8)) == on_host
    assert integrity.checksums(place(host_state(), mesh((2, 2, 2)))) == on_host
    assert integrity.checksums(place(host_state(), mesh((1, 4, 1)), model=None)) == on_host


@pytest.mark.parametrize(
    "path",
    [("params", k) for k in ("w", "b", "emb", "kernel")]
    + [("batch_stats", "count"), ("batch_stats", "mask"), ("opt_state", "mu"), ("step",)],
)
def test_one_flipped_bit_changes_the_checksum_of_its_array_only(path):
    state = host_state()
    node = state
    for k in path[:-1]:
        node = node[k]
    x = np.array(node[path[-1]])
    if x.dtype == np.bool_:
        x.reshape(-1)[x.size // 2] ^= True
    else:
        raw = x.reshape(-1).view(np.uint8)
        raw[raw.size // 2] ^= 0x01
    node[path[-1]] = x
    before, after = integrity.checksums(host_state()), integrity.checksums(state)
    assert [k for k in before if before[k] != after[k]] == ["".join(f"['{k}']" for k in path)]


def test_a_prng_key_is_summed_as_its_key_data_which_orbax_saves():
    typed, raw = jax.random.key(3), jax.random.PRNGKey(3)
    assert integrity.checksums({"k": typed}) == integrity.checksums({"k": raw})
    assert integrity.checksums({"k": typed}) != integrity.checksums({"k": jax.random.key(4)})


def test_two_arrays_swapped_between_positions_are_told_apart():
    x = np.arange(16, dtype=np.float32)
    swapped = x.copy()
    swapped[[3, 11]] = swapped[[11, 3]]
    assert integrity.checksums({"a": x}) != integrity.checksums({"a": swapped})


def test_the_saved_values_are_the_steps_though_the_next_steps_donate_its_buffers(tmp_path):
    """orbax's save returns only once it holds the state's shards on the host, so the next steps may
    overwrite the donated buffers at once. The state is made large enough that its writing outlasts
    the steps, on one device (where a host copy could be a view of the device buffer) and sharded."""
    big = {"step": np.int32(1), "params": {"w": np.arange(1 << 20, dtype=np.float32)}}
    advance = jax.jit(lambda s: jax.tree.map(lambda x: x + 1, s), donate_argnums=0)
    one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    for name, target in {
        "one device": {"step": one, "params": {"w": one}},
        "fsdp over 8": {
            "step": NamedSharding(FSDP8, P()),
            "params": {"w": NamedSharding(FSDP8, P("fsdp"))},
        },
    }.items():
        state = jax.tree.map(jax.device_put, big, target)
        with checkpoint.manager(str(tmp_path / name)) as mngr:
            checkpoint.save(mngr, state)
            for _ in range(5):
                old, state = state, advance(state)
            assert old["params"]["w"].is_deleted()  # donated
            mngr.wait_until_finished()
        assert float(state["params"]["w"][0]) == 5.0
        with checkpoint.manager(str(tmp_path / name), read_only=True) as reader:
            shapes = jax.eval_shape(lambda: big)
            restored = checkpoint.restore(reader, checkpoint.abstract_like(shapes, target), 1)
        assert bits(restored) == bits(big), name


def test_a_bit_flipped_sharded_checkpoint_is_caught_and_the_one_before_restores(tmp_path):
    state = place(host_state(), FSDP8)
    abstract = checkpoint.abstract_like(jax.eval_shape(host_state), shardings(mesh((2, 2, 2))))
    with checkpoint.manager(str(tmp_path)) as mngr:
        checkpoint.save(mngr, state)
        mngr.wait_until_finished()
        checkpoint.save(mngr, {**state, "step": jnp.int32(8)})
    fault_injection.damage_checkpoint(tmp_path / "checkpoints" / "8", "bitflip")
    with checkpoint.manager(str(tmp_path), read_only=True) as reader:
        with pytest.raises(
            checkpoint.CheckpointError,
            match=r"checkpoint 8 .* restores other arrays than were saved \(checksum mismatch in "
            r"\['params'\]\['kernel'\]",
        ):
            checkpoint.restore(reader, abstract)
        restored, skipped = checkpoint.latest_good(reader, abstract)
    assert int(restored["step"]) == 7 and [u.step for u in skipped] == [8]


def save_as_before(mngr, host: dict) -> None:
    """A checkpoint as the code before sharded saves wrote it: host arrays, one SHA-256 of them."""
    mngr.save(
        int(host["step"]),
        args=ocp.args.StandardSave(host),
        force=True,
        custom_metadata={"sha256": integrity.digest(host)},
    )


def test_a_checkpoint_saved_before_restores_sharded_and_its_sha256_is_checked(tmp_path):
    abstract = checkpoint.abstract_like(jax.eval_shape(host_state), shardings(FSDP8))
    with checkpoint.manager(str(tmp_path)) as mngr:
        save_as_before(mngr, host_state())
        mngr.wait_until_finished()
        save_as_before(mngr, {**host_state(), "step": np.asarray(8, np.int32)})
    with checkpoint.manager(str(tmp_path), read_only=True) as reader:
        assert bits(checkpoint.restore(reader, abstract, 7)) == bits(host_state())
    fault_injection.damage_checkpoint(tmp_path / "checkpoints" / "8", "bitflip")
    with checkpoint.manager(str(tmp_path), read_only=True) as reader:
        with pytest.raises(checkpoint.CheckpointError, match=r"checkpoint 8 .*SHA-256 mismatch"):
            checkpoint.restore(reader, abstract)


def test_the_free_space_asked_for_a_sharded_state_is_its_global_bytes(tmp_path):
    """`workdir.checkpoint_bytes` reads the abstract state's global shapes, so sharding changes
    nothing, and every array is written once: the checkpoint on disk fits in the estimate."""
    shapes = jax.eval_shape(host_state)
    sharded = checkpoint.abstract_like(shapes, shardings(FSDP8))
    replicated = checkpoint.abstract_like(shapes, NamedSharding(FSDP8, P()))
    assert workdir_lib.checkpoint_bytes(sharded) == workdir_lib.checkpoint_bytes(replicated)
    big = {
        "step": np.int32(1),
        "w": np.random.default_rng(0).standard_normal((1 << 16, 8), np.float32),
    }
    with checkpoint.manager(str(tmp_path)) as mngr:
        checkpoint.save(
            mngr,
            jax.tree.map(
                jax.device_put,
                big,
                {"step": NamedSharding(FSDP8, P()), "w": NamedSharding(FSDP8, P("fsdp"))},
            ),
        )
    on_disk = sum(p.stat().st_size for p in (tmp_path / "checkpoints").rglob("*") if p.is_file())
    estimate = workdir_lib.checkpoint_bytes(jax.eval_shape(lambda: big))
    assert estimate / 2 < on_disk <= estimate  # random floats do not compress: one copy, not 8


@pytest.mark.slow
def test_two_processes_each_write_their_shards_and_one_process_restores_them_bitwise(tmp_path):
    outputs = multiprocess.run_two_processes(
        "tests.vision.sharded_checkpoint_process", [str(tmp_path)], tmp_path
    )
    said = [[line for line in o.splitlines() if line.startswith("process")] for o in outputs]
    assert [s[0] for s in said] == [f"process {i} restored step 7" for i in (0, 1)]
    # the damaged copy: each process read its share of the arrays, and both name the same one (the
    # chunk each names may differ: TensorStore reads an array's chunks concurrently)
    named = [re.search(r" does not restore \(([\w.]+): ValueError: ", s[1]) for s in said]
    assert [m and m.group(1) for m in named] == ["params.kernel"] * 2, said
    item = tmp_path / "checkpoints" / "7" / "default"
    written = sorted(p.name for p in item.glob("ocdbt.process_*"))
    assert written == ["ocdbt.process_0", "ocdbt.process_1"]  # each process wrote its own files
    shapes = jax.eval_shape(host_state)
    with checkpoint.manager(str(tmp_path / "intact"), read_only=True) as reader:  # copied before
        for target in (shardings(mesh((2, 2, 2))), shardings(mesh((1, 4, 1)), model=None)):
            restored = checkpoint.restore(reader, checkpoint.abstract_like(shapes, target))
            assert bits(restored) == bits(host_state())


def fsdp_over(m, tree) -> dict:
    """The fsdp rule by hand: each leaf split over "fsdp" along its largest axis the axis size
    divides, else replicated."""

    def spec(x):
        n = m.shape["fsdp"]
        axes = sorted((d for d in range(x.ndim) if x.shape[d] % n == 0), key=lambda d: -x.shape[d])
        return NamedSharding(
            m, P(*[("fsdp" if d == axes[0] else None) for d in range(x.ndim)]) if axes else P()
        )

    return jax.tree.map(spec, tree)


@pytest.mark.slow
def test_a_run_whose_checkpoint_was_saved_sharded_loads_with_load_run_and_restore_run(tmp_path):
    """`runs.load_run` and `restore_run` restore onto the sharding their abstract state carries
    (replicated over the devices asked for), whatever sharding the checkpoint was saved with."""
    c = tiny_digits(total_steps=2, checkpoint_every=0, log_every=2)
    trained, _ = train.train(c, str(tmp_path), devices=jax.devices()[:1])
    host = jax.device_get(trained)
    sharded = jax.tree.map(jax.device_put, host, fsdp_over(FSDP8, host))
    assert any(not x.sharding.is_fully_replicated for x in jax.tree.leaves(sharded["params"]))
    with checkpoint.manager(str(tmp_path)) as mngr:
        checkpoint.save(mngr, {**sharded, "step": jax.device_put(np.int32(3))})
    model, variables, config, _ = runs.load_run(tmp_path)
    assert bits(variables["params"]) == bits(host["params"])
    restored = runs.restore_run(tmp_path, devices=jax.devices()[:4])[1]
    assert int(restored["step"]) == 3 and bits(restored["opt_state"]) == bits(host["opt_state"])
