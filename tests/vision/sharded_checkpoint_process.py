"""One process of a two-process save of a sharded state (tests/vision/test_checkpoint_sharding.py):
`python -m tests.vision.sharded_checkpoint_process WORKDIR --coordinator_address=... --num_processes=2
--process_id=N`. The state of `test_checkpoint_sharding.host_state`, fsdp over the 8 devices of both
processes, is saved (each process writing its own shards), then restored in both processes onto a
(2,2,2) mesh and checked; prints the process's shards written and the restored step."""

import sys

import jax

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


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
