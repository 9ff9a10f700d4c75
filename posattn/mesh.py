"""The device mesh shared by the theory and image regimes: one "data" axis over all devices.

The same jitted step runs on one CPU, one GPU or a TPU pod slice: the sample (batch) axis of the data is
sharded along "data", parameters are replicated, and XLA inserts the reductions. Axis type `Auto` lets
the compiler propagate shardings, as `jit` with `in_shardings`/`out_shardings` expects.
"""
from collections.abc import Sequence

import jax
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

DATA = "data"


def data_mesh(devices: Sequence[jax.Device] | None = None) -> jax.sharding.Mesh:
    """A 1-D mesh named "data" over `devices` (default: every device of every process)."""
    devices = list(jax.devices() if devices is None else devices)
    return jax.make_mesh((len(devices),), (DATA,), axis_types=(AxisType.Auto,), devices=devices)


def batch_sharding(mesh: jax.sharding.Mesh) -> NamedSharding:
    """Leading (sample) axis split over "data", the rest whole."""
    return NamedSharding(mesh, P(DATA))


def replicated(mesh: jax.sharding.Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def runs_sharding(n_runs: int, mesh: jax.sharding.Mesh | None = None) -> NamedSharding | None:
    """Independent runs (a leading seed axis) split over "data" when they divide evenly over its devices:
    a sweep then needs no communication. None otherwise: the runs stay on one device, since replicating
    them would repeat every run on every device."""
    mesh = data_mesh() if mesh is None else mesh
    return batch_sharding(mesh) if n_runs % mesh.devices.size == 0 else None
