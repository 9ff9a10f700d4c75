"""The device mesh shared by the theory and image regimes: one "data" axis over all devices.

The same jitted step runs on one CPU, one GPU or a TPU pod slice: the sample (batch) axis of the data is
sharded along "data", parameters are replicated, and XLA inserts the reductions. Axis type `Auto` lets
the compiler propagate shardings, as `jit` with `in_shardings`/`out_shardings` expects.

Over several processes (hosts), `initialize_distributed` starts `jax.distributed` before any computation
(docs/distributed.md),
and each process feeds its own slice of a global batch: `global_batch` stitches the slices into one
global array (`jax.make_array_from_process_local_data`), so the jitted step sees the whole batch as if it
ran on a single device; `gathered` brings a result spread over the processes back whole to every host.

A sweep of independent runs (the theory regime's seeds) splits its run axis over "data" instead
(`split_runs`, `map_runs`), padding a count that does not divide (`pad_runs`, `first_runs`); one of
few runs with many samples takes a 2-D mesh ("runs", "data") (`runs_mesh`).
"""

import os
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from posattn.errors import ConfigError

DATA = "data"
# The image trainer's second batch axis (ZeRO-3 parameter sharding, `posattn.vision.sharding`): a batch is
# split over "data" x "fsdp" where a mesh has both.
FSDP = "fsdp"


def data_mesh(devices: Sequence[jax.Device] | None = None) -> jax.sharding.Mesh:
    """A 1-D mesh named "data" over `devices` (default: every device of every process)."""
    devices = list(jax.devices() if devices is None else devices)
    return jax.make_mesh((len(devices),), (DATA,), axis_types=(AxisType.Auto,), devices=devices)


def batch_sharding(mesh: jax.sharding.Mesh) -> NamedSharding:
    """Leading (sample) axis split over "data" (and "fsdp" where the mesh has it), the rest whole."""
    return NamedSharding(mesh, P((DATA, FSDP) if FSDP in mesh.axis_names else DATA))


def replicated(mesh: jax.sharding.Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def replicate_from_host(host_tree, mesh: jax.sharding.Mesh):
    """Host arrays that every process holds alike -> global arrays replicated over `mesh`."""
    return jax.tree.map(
        lambda v: jax.make_array_from_process_local_data(replicated(mesh), v), host_tree
    )


def split_runs(fn, runs, *shared):
    """`fn(runs, *shared)`, with the leading (run) axis of every leaf of `runs` split over "data": each
    device calls `fn` on its own runs (`jax.shard_map`), so a sweep needs no communication. A run count
    that does not divide over the devices is padded with copies of the last run (`pad_runs`) and the
    results cut back to the runs given, rather than run whole on one device. A program that calls this
    more than once (a draw, then a chunk) pads once at its start instead: each pad and cut here makes XLA
    re-shard whole runs between the calls. `fn` keeps the run axis leading in what it returns. Explicit
    rather than left to the compiler's sharding propagation: that cannot split a custom call such as the
    theory step's CPU kernel (`posattn.theory.one_pass_kernel`), and would gather every run onto every
    device around it. `shared` goes whole to every device."""
    mesh = data_mesh()
    count = len(jax.tree.leaves(runs)[0])
    # check_vma=False: the outputs of a custom call carry no mark of varying over "data", and the
    # runs never meet, so there is nothing for the check to find.
    split = jax.shard_map(
        fn, mesh=mesh, in_specs=(P(DATA), *[P()] * len(shared)), out_specs=P(DATA), check_vma=False
    )
    if count % mesh.devices.size == 0:
        return split(runs, *shared)
    return first_runs(split(pad_runs(runs, mesh.devices.size), *shared), count)


def map_runs(fn, keys, *shared):
    """`fn(key, *shared)` for every key, stacked, split over "data" as `split_runs` does. On a CPU a
    device takes its runs one after another (`lax.map`): the random draws then compile about 1 s faster
    and run faster than vmapped, and give the same bits."""

    def local(keys, *shared):
        run = lambda key: fn(key, *shared)
        return jax.lax.map(run, keys) if jax.default_backend() == "cpu" else jax.vmap(run)(keys)

    return split_runs(local, keys, *shared)


def initialize_distributed(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
) -> None:
    """Start `jax.distributed` for a multi-process run; a single-process run is left as it is.

    With no arguments, `jax.distributed.initialize()` detects the cluster itself (a Cloud TPU pod
    slice, a Slurm job, Open MPI, and whatever else the installed JAX knows, reading its own variables
    such as JAX_COORDINATOR_ADDRESS); where it detects none (one machine, no cluster manager) the run
    is single-process. The arguments are `jax.distributed.initialize`'s own, for clusters JAX does not
    detect (e.g. GPU hosts started by hand): give num_processes and process_id, and the coordinator's
    host:port (or set JAX_COORDINATOR_ADDRESS). docs/distributed.md shows each case. Does nothing if
    already initialised. Must run before any computation.
    """
    if jax.distributed.is_initialized():
        return
    explicit = {
        "coordinator_address": coordinator_address,
        "num_processes": num_processes,
        "process_id": process_id,
    }
    given = {k: v for k, v in explicit.items() if v is not None}
    try:
        jax.distributed.initialize(**given)
    except ValueError as e:
        # JAX raises ValueError when it detected no cluster and lacks an argument; that is a single
        # process unless the user asked for several (an argument, or JAX's coordinator variable).
        if given or os.environ.get(COORDINATOR_ENV):
            raise ConfigError(
                f"multi-process start-up failed ({e}); with no cluster that JAX detects, "
                f"give coordinator_address (or {COORDINATOR_ENV}), num_processes and "
                f"process_id: see docs/distributed.md"
            ) from e


# JAX's own variable for the coordinator's host:port (read by `jax.distributed.initialize`).
COORDINATOR_ENV = "JAX_COORDINATOR_ADDRESS"


def spans_processes(x) -> bool:
    """Whether `x` is a jax.Array with shards on other processes' devices (this host cannot read it whole)."""
    return isinstance(x, jax.Array) and not x.is_fully_addressable


def gathered(tree):
    """`tree` with every array that spans several processes gathered whole onto this host, as numpy
    (`multihost_utils.process_allgather`): what a host reads back of a multi-process computation. The
    other leaves are returned as they are, so a single-process run is unchanged. Every process must
    call it, in the same order (the gather is a collective)."""
    gather = lambda a: multihost_utils.process_allgather(a, tiled=True) if spans_processes(a) else a
    return jax.tree.map(gather, tree)


def global_batch(local_batch: dict, mesh: jax.sharding.Mesh) -> dict:
    """Host-local numpy arrays (this process's contiguous slice) -> global arrays sharded along "data"."""
    sharding = batch_sharding(mesh)
    return {
        k: jax.make_array_from_process_local_data(sharding, np.asarray(v))
        for k, v in local_batch.items()
    }


def padded_count(runs: int, devices: int | None = None) -> int:
    """`runs` rounded up to a multiple of `devices` (default: every device)."""
    devices = jax.device_count() if devices is None else devices
    return -(-runs // devices) * devices


def pad_runs(tree, devices: int | None = None):
    """`tree` with the leading (run) axis of every leaf padded to `padded_count` by copies of its last
    run: real runs, whose numbers stay finite and whose costs are the others', cut off after
    (`first_runs`). None leaves stay None."""
    runs = len(jax.tree.leaves(tree)[0])
    pad = padded_count(runs, devices) - runs
    if not pad:
        return tree
    return jax.tree.map(lambda a: jnp.concatenate([a, *[a[-1:]] * pad]), tree)


def first_runs(tree, runs: int):
    """`tree` with the leading (run) axis of every leaf cut to its first `runs` (undoes `pad_runs`)."""
    return jax.tree.map(lambda a: a if len(a) == runs else a[:runs], tree)


RUNS = "runs"


def runs_mesh_shape(runs: int, devices: int) -> tuple[int, int]:
    """(devices along "runs", devices along "data") for `runs` runs on `devices` devices: the runs take
    the smallest divisor of `devices` that holds them all (all the devices once they are as many), the
    samples of each run split over the rest. 2 runs on 8 devices: (2, 4); 3: (4, 2); 1: (1, 8)."""
    if runs >= devices:
        return devices, 1
    along_runs = min(k for k in range(runs, devices + 1) if devices % k == 0)
    return along_runs, devices // along_runs


def runs_mesh(runs: int, devices: Sequence[jax.Device] | None = None) -> jax.sharding.Mesh:
    """A 2-D mesh ("runs", "data") over `devices` (default: all) shaped by `runs_mesh_shape`: a sweep of
    few runs with many samples splits each run's samples over the devices its runs leave free."""
    devices = list(jax.devices() if devices is None else devices)
    shape = runs_mesh_shape(runs, len(devices))
    return jax.make_mesh(shape, (RUNS, DATA), axis_types=(AxisType.Auto,) * 2, devices=devices)
