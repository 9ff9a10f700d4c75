"""One process of a two-process save of a sharded state (tests/vision/test_checkpoint_sharding.py):
`python -m tests.vision.sharded_checkpoint_process WORKDIR --coordinator_address=... --num_processes=2
--process_id=N`. The state of `test_checkpoint_sharding.host_state`, fsdp over the 8 devices of both
processes, is saved (each process writing its own shards), then restored in both processes onto a
(2,2,2) mesh and checked; then one data file is cut short and both try again. Prints the step
restored, then why the damaged checkpoint does not restore (an intact copy is kept in WORKDIR/intact)."""

import pathlib
import shutil
import sys

import jax
from jax.experimental import multihost_utils

from posattn.mesh import initialize_distributed
from posattn.vision import checkpoint


def main(workdir: str, flags: list[str]) -> None:
    given = dict(f.removeprefix("--").split("=", 1) for f in flags)
    initialize_distributed(
        given["coordinator_address"], int(given["num_processes"]), int(given["process_id"])
    )
    from tests.vision import test_checkpoint_sharding as t  # after start-up: it builds meshes

    host = t.host_state()
    state = jax.tree.map(
        lambda x, s: jax.make_array_from_callback(x.shape, s, lambda index: x[index]),
        host,
        t.shardings(t.mesh((1, 8, 1))),
    )
    assert not state["params"]["w"].is_fully_addressable  # half of it lies on the other process
    with checkpoint.manager(workdir) as mngr:
        checkpoint.save(mngr, state)
    abstract = checkpoint.abstract_like(
        jax.eval_shape(t.host_state), t.shardings(t.mesh((2, 2, 2)))
    )
    with checkpoint.manager(workdir, read_only=True) as reader:
        restored = checkpoint.restore(reader, abstract)  # checked against the checksums
    print(f"process {jax.process_index()} restored step {int(restored['step'])}")
    # then one data file cut short: every process reads its share of the arrays, and all say the same
    multihost_utils.sync_global_devices("restored")
    if jax.process_index() == 0:
        intact = pathlib.Path(workdir) / "intact" / "checkpoints"
        shutil.copytree(pathlib.Path(workdir) / "checkpoints", intact)
        item = pathlib.Path(workdir) / "checkpoints" / "7" / "default"
        data = max(item.glob("ocdbt.process_*/d/*"), key=lambda p: p.stat().st_size)
        data.write_bytes(data.read_bytes()[:100])
    multihost_utils.sync_global_devices("damaged")
    with checkpoint.manager(workdir, read_only=True) as reader:
        try:
            checkpoint.restore(reader, abstract)
        except checkpoint.CheckpointError as e:
            print(f"process {jax.process_index()}: {str(e).split(' in ', 1)[1]}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
