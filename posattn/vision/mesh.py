"""Multi-process start-up and host batches turned into global arrays, over `posattn.mesh`'s mesh.

One code path from one CPU to a pod slice: a 1-D mesh named "data" over every device of every process;
parameters and optimizer state are replicated, batches are split along "data". Each process feeds its
own slice of the global batch; `jax.make_array_from_process_local_data` stitches the slices into one
global array, so the jitted step sees the whole batch as if it ran on a single device.
"""
import os

import jax
import numpy as np

from posattn.errors import ConfigError
from posattn.mesh import batch_sharding

# Variables that, when set, ask for a multi-process run with an explicit coordinator (e.g. two CPU
# processes on loopback, or GPU hosts without a cluster manager).
COORDINATOR_ENV = "JAX_COORDINATOR_ADDRESS"
NUM_PROCESSES_ENV = "JAX_NUM_PROCESSES"
PROCESS_ID_ENV = "JAX_PROCESS_ID"


def _managed_cluster() -> bool:
    """True on a multi-host TPU slice, a multi-task Slurm job or a multi-rank Open MPI job."""
    env = os.environ
    tpu_hosts = env.get("TPU_WORKER_HOSTNAMES") or env.get("TPU_PROCESS_ADDRESSES") or ""
    return (
        "," in tpu_hosts
        or int(env.get("SLURM_NTASKS", "1")) > 1
        or int(env.get("OMPI_COMM_WORLD_SIZE", "1")) > 1
    )


def initialize_distributed() -> None:
    """Call `jax.distributed.initialize()` when the environment asks for a multi-process run.

    Explicit: JAX_COORDINATOR_ADDRESS=host:port, JAX_NUM_PROCESSES=n and JAX_PROCESS_ID=i (all three).
    Implicit: a multi-host TPU slice, Slurm or Open MPI job, whose parameters jax detects itself.
    Does nothing in a single-process run or if already initialised. Must run before any computation.
    """
    if jax.distributed.is_initialized():
        return
    explicit = [os.environ.get(k) for k in (COORDINATOR_ENV, NUM_PROCESSES_ENV, PROCESS_ID_ENV)]
    if any(explicit):
        if not all(explicit):
            names = (COORDINATOR_ENV, NUM_PROCESSES_ENV, PROCESS_ID_ENV)
            raise ConfigError(f"a multi-process run needs all of {', '.join(names)} set; "
                              f"got {dict(zip(names, explicit))}")
        jax.distributed.initialize(
            coordinator_address=explicit[0], num_processes=int(explicit[1]), process_id=int(explicit[2])
        )
    elif _managed_cluster():
        jax.distributed.initialize()


def check_batch_divides(batch_size: int, mesh, name: str = "global_batch_size") -> None:
    """A global batch must split evenly over the devices (and hence over the processes)."""
    n = mesh.devices.size
    if batch_size <= 0 or batch_size % n:
        raise ConfigError(
            f"{name}={batch_size} does not divide by the {n} devices of the mesh; "
            f"use a positive multiple of {n}"
        )


def global_batch(local_batch: dict, mesh) -> dict:
    """Host-local numpy arrays (this process's contiguous slice) -> global arrays sharded along "data"."""
    sharding = batch_sharding(mesh)
    return {
        k: jax.make_array_from_process_local_data(sharding, np.asarray(v)) for k, v in local_batch.items()
    }
