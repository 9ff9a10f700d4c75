"""Checkpoints of the train state with orbax's `CheckpointManager`.

The state is the plain dict {"step", "params", "batch_stats", "opt_state"}; it is saved as one
`StandardSave` item under `WORKDIR/checkpoints/STEP/`, its arrays as they lie on the devices (`save`):
every process writes the shards it holds (one copy of each, orbax's replica 0 or its replica-parallel
split of a replicated array) into one OCDBT database, and nothing is gathered to a host. Orbax writes
into a temporary directory and renames it when complete, so a run killed mid-save leaves only the
previous, complete checkpoints. Every checkpoint carries checksums of its arrays in orbax's per-step
custom metadata (`posattn.vision.integrity`), and a restore recomputes them on the arrays it placed:
orbax alone restores a checkpoint with a flipped bit without complaint, so the checksums are what tell a
corrupted checkpoint from a good one.

A step folder counts as a checkpoint only once orbax has committed it (`survey`): an empty folder, one a
save left unfinished, or orbax's temporary folder of a save in progress is skipped, never tried, so it
cannot make the good ones fail (orbax decides how to read every step from the first one it opens).
`latest_good` (what a restarted run uses) falls back from a committed checkpoint that does not restore to
the newest one that does; `set_aside` then moves the skipped folders to
`WORKDIR/checkpoints_unreadable/STEP` (kept for inspection, never deleted, out of orbax's way). Saving
during a run is `posattn.vision.saving`.
Restoring takes an abstract state (`jax.ShapeDtypeStruct`s carrying the target shardings), so arrays
land directly with the shardings of the current mesh, whatever the mesh of the run that saved them.

A finished run is loaded back from its workdir by `posattn.vision.runs` (`load_run`).
"""

import dataclasses
import json
import re

import jax
import numpy as np
import orbax.checkpoint as ocp
import tensorstore as ts  # orbax's own storage layer (a dependency of orbax-checkpoint)
from etils import epath
from jax.experimental import multihost_utils

from posattn import io
from posattn.errors import ConfigError, first_line
from posattn.vision import integrity

CHECKPOINTS_DIR = "checkpoints"
UNREADABLE_DIR = "checkpoints_unreadable"
# Orbax's record of a step, in the step's folder; the save that completes the step writes its commit time
# last (orbax >= 0.11, in both its atomic-rename and its commit-file modes).
_STEP_METADATA = "_CHECKPOINT_METADATA"
_ITEM = "default"  # the folder of a step that holds its one item (a manager without item names)
# The metadata key of each array of an item, as orbax writes it: zarr v2 (its default) or zarr v3.
_ZARR_DRIVERS = {b"/.zarray": "zarr", b"/zarr.json": "zarr3"}


class CheckpointError(ConfigError):
    """No checkpoint of a workdir restores: the user must decide (the code that saved them, or a new
    workdir)."""


def manager(workdir: str, *, keep: int = 0, read_only: bool = False) -> ocp.CheckpointManager:
    """A manager over `workdir/checkpoints` keeping the `keep` most recent steps (all if keep <= 0).

    `read_only` (loading a run to look at it) deletes and creates nothing: a training run may be
    writing to the same directory, and its save in flight is a temporary directory that the
    cleanup of a writing manager would remove."""
    if read_only:
        options = ocp.CheckpointManagerOptions(
            read_only=True, create=False, cleanup_tmp_directories=False
        )
    else:
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep if keep > 0 else None,
            create=True,
            cleanup_tmp_directories=True,  # leftovers of a save interrupted by a kill
            enable_async_checkpointing=True,
        )
    return ocp.CheckpointManager(
        checkpoints_dir(workdir),
        options=options,
        # OCDBT, orbax's default since before our floor (tests/vision/test_checkpoint_sharding.py
        # checks the manifest): one database for all arrays, each process adding its files
        item_handlers=ocp.StandardCheckpointHandler(),
    )


def checkpoints_dir(workdir) -> epath.Path:
    """WORKDIR/checkpoints, absolute (a gs://... workdir stays as is)."""
    return epath.Path(io.absolute(workdir)) / CHECKPOINTS_DIR


@dataclasses.dataclass(frozen=True)
class Survey:
    """What a checkpoints folder holds: `complete` steps (ascending) that orbax committed, `incomplete`
    step folders {step: why not a checkpoint}, and orbax's `temporary` folders of saves in progress when
    a run stopped (the next writing manager removes them)."""

    complete: tuple[int, ...] = ()
    incomplete: dict = dataclasses.field(default_factory=dict)
    temporary: tuple[str, ...] = ()

    @property
    def latest(self) -> int | None:
        return self.complete[-1] if self.complete else None


def _why_incomplete(step_dir: epath.Path) -> str | None:
    """None if orbax committed the step folder, else why it is not a checkpoint."""
    if not step_dir.is_dir():
        return "is not a folder"
    if not any(step_dir.iterdir()):
        return "is an empty folder"
    try:
        committed = json.loads((step_dir / _STEP_METADATA).read_text()).get(
            "commit_timestamp_nsecs"
        )
    except (OSError, ValueError, AttributeError):
        committed = None
    if not committed:
        return "was never committed by orbax (a save that did not finish)"
    return None


def survey(directory) -> Survey:
    """The steps of checkpoints folder `directory` (e.g. `checkpoints_dir(workdir)`), sorted into
    committed checkpoints, step folders that are not checkpoints, and orbax's temporary folders. Reads
    only; other names are not orbax's and are left out."""
    directory = epath.Path(directory)
    if not directory.is_dir():
        return Survey()
    complete, incomplete, temporary = [], {}, []
    for path in directory.iterdir():
        if ocp.path.atomicity.TMP_DIR_SUFFIX in path.name:
            temporary.append(path.name)
        elif path.name.isdigit():
            why = _why_incomplete(path)
            if why is None:
                complete.append(int(path.name))
            else:
                incomplete[int(path.name)] = why
    return Survey(
        tuple(sorted(complete)), dict(sorted(incomplete.items())), tuple(sorted(temporary))
    )


def save(mngr: ocp.CheckpointManager, state: dict) -> None:
    """Start saving `state` (jax.Arrays on any sharding, or host arrays) under its step, with the
    checksums of its arrays (`integrity.record`); the writing finishes in the background.

    Every process of a run calls it (the checksums are one program over the whole state, as orbax's
    save is one collective); each writes the shards it holds, and nothing is gathered to a host.
    Before this returns, orbax has copied those shards to host memory (it transfers every array it
    saves before its background writing starts, when no limit on the bytes in transfer is set, as
    here), so the caller may donate the state's buffers to the next step at once. A replicated array
    is split between its replicas, each writing a part (orbax's replica-parallel saving, its default
    except on GPUs): the first save in a process compiles a slicing program per array shape and
    device, measured for the digits quick state replicated on 8 CPU devices at 80 programs, about 2
    s, and none for the same state fsdp-sharded; later saves compile nothing. The checksums are one
    more program, compiled once per state layout (about 1 s there).
    """
    mngr.save(
        int(np.asarray(state["step"])),
        args=ocp.args.StandardSave(state),
        force=True,
        custom_metadata=integrity.record(state),
    )


def short_error(e: BaseException) -> str:
    """`TYPE: first line` of an exception, without tensorstore's long details."""
    first = first_line(e)
    # tensorstore's details, however its version spells them (0.1.71 adds a "[source locations=...]" part)
    first = re.split(r"\. See full TensorStore details| \[tensorstore_spec=| \[source loc", first)[
        0
    ]
    first = re.sub(
        r' in OCDBT database at [^"]*"[^"]*"', "", first
    )  # the step's folder, named by the caller
    return f"{type(e).__name__}: {first[:160]}" if first else type(e).__name__


def _unreadable_array(item_dir: epath.Path) -> str | None:
    """None if every array of the orbax item in `item_dir` reads and decodes, else why the first fails.

    Orbax reads a checkpoint's arrays as concurrent asyncio tasks on an event loop of its own; when one
    read fails it closes that loop with the others still in flight, and each of those then prints a
    traceback ("Event loop is closed", a coroutine never awaited) long after the error was handled. Here
    each array is read with TensorStore, as orbax would read it (its OCDBT database, or one folder per
    array for checkpoints written without it), one at a time and to the end, so no read is left behind
    and a damaged step (a truncated file, a chunk that does not decode, a missing chunk) is found before
    orbax reads it. It costs one more read of the checkpoint, on a restart only, shared by the
    processes of a multi-process run: process p reads arrays p, p + P, ... and all agree on the first
    one that fails (`_agreed_first`), which each then reads itself, so every process gives one answer.
    """
    base = str(item_dir) if "://" in str(item_dir) else f"file://{item_dir}"
    kvstore = (
        {"driver": "ocdbt", "base": f"{base}/"}
        if (item_dir / "manifest.ocdbt").exists()
        else f"{base}/"
    )
    context = ts.Context()  # one cache of the database's index for every array
    try:
        keys = ts.KvStore.open(kvstore, context=context).result().list().result()
    except Exception as e:  # TensorStore raises ValueError (and others)
        return f"its index: {short_error(e)}"
    arrays = [
        (key[: -len(suffix)].decode(), driver)
        for key in keys
        for suffix, driver in _ZARR_DRIVERS.items()
        if key.endswith(suffix)
    ]

    def why(i: int) -> str | None:
        name, driver = arrays[i]
        spec = {
            "driver": driver,
            "kvstore": {**ts.KvStore.Spec(kvstore).to_json(), "path": f"{name}/"},
            "fill_missing_data_reads": False,
        }  # a chunk that is missing is damage, as orbax reads it
        try:
            ts.open(spec, read=True, context=context).result().read().result()
        except Exception as e:  # TensorStore raises ValueError (and others), naming file and bytes
            return f"{name}: {short_error(e)}"
        return None

    read = {}  # array -> why it failed (None: it reads), of the arrays this process read
    for i in range(jax.process_index(), len(arrays), jax.process_count()):
        read[i] = why(i)
        if read[i] is not None:
            break
    first = _agreed_first(next((i for i, w in read.items() if w is not None), None))
    if first is None:
        return None
    return read[first] if first in read else why(first)


def _agreed_first(i: int | None) -> int | None:
    """The least of every process's `i` (None: none), the same in every process."""
    if jax.process_count() == 1:
        return i
    never = np.iinfo(np.int32).max
    gathered = multihost_utils.process_allgather(np.int32(never if i is None else i))
    first = int(np.min(gathered))
    return None if first == never else first


def _restore_checked(mngr, abstract_state: dict, step: int) -> tuple[dict | None, str | None]:
    """(state, None) if checkpoint `step` restores and matches its checksums (`integrity.mismatch`, on
    the arrays as placed), else (None, why not). Its arrays are read first (`_unreadable_array`): orbax
    never reads a damaged step."""
    if (damage := _unreadable_array(epath.Path(mngr.directory) / str(step) / _ITEM)) is not None:
        return None, f"does not restore ({damage})"
    try:
        state = mngr.restore(step, args=ocp.args.StandardRestore(abstract_state))
        saved = mngr.metadata(step).custom_metadata
    except Exception as e:  # orbax and tensorstore raise many types for a damaged file
        return None, f"does not restore ({short_error(e)})"
    if (differs := integrity.mismatch(state, saved)) is not None:
        return (
            None,
            f"restores other arrays than were saved ({differs}: files altered after the save)",
        )
    return state, None


def restore(
    mngr: ocp.CheckpointManager, abstract_state: dict, step: int | None = None
) -> dict | None:
    """Checkpoint `step` (default: the most recent committed one, `survey`), placed as `abstract_state`
    says and checked against its checksums.

    None if the manager holds no checkpoint; CheckpointError (one line: the step and why) if it does
    not restore, is not a committed checkpoint, or its arrays differ from what was saved. Checkpoints
    written before checksums existed restore unchecked.
    """
    found = survey(mngr.directory)
    step = found.latest if step is None else step
    if step is None:
        return None
    if step in found.incomplete:
        raise CheckpointError(f"checkpoint {step} in {mngr.directory} {found.incomplete[step]}")
    state, why = _restore_checked(mngr, abstract_state, step)
    if why is not None:
        raise CheckpointError(f"checkpoint {step} in {mngr.directory} {why}")
    return state


@dataclasses.dataclass(frozen=True)
class Unreadable:
    """A step folder a restart skipped: its step, why, and where it lies now (None: not moved yet)."""

    step: int
    reason: str
    moved_to: str | None = None


def latest_good(
    mngr: ocp.CheckpointManager, abstract_state: dict
) -> tuple[dict | None, list[Unreadable]]:
    """(state of the newest committed checkpoint that restores and matches its checksums, [the step
    folders newer than it, and every step folder that is not a committed checkpoint, with why]).

    Reads only: nothing is moved (`set_aside` does, once the caller decided to go on). (None, [those
    not committed]) when no checkpoint is committed. If committed ones exist and none restores,
    CheckpointError lists each step and why (the cause may be the code, e.g. a changed model, not the
    files).
    """
    found = survey(mngr.directory)
    skipped = [Unreadable(step, why) for step, why in found.incomplete.items()]
    failures = []
    for step in reversed(found.complete):
        state, why = _restore_checked(mngr, abstract_state, step)
        if why is None:
            return state, sorted(
                skipped + [Unreadable(s, w) for s, w in failures], key=lambda u: -u.step
            )
        failures.append((step, why))
    if failures:
        raise CheckpointError(
            f"no checkpoint in {mngr.directory} restores ("
            + "; ".join(f"step {s} {why}" for s, why in failures)
            + "); nothing was changed: resume with the code that saved them (a changed "
            "model or optimiser cannot read them), or start afresh in a new --workdir"
        )
    return None, skipped


def set_aside(directory, skipped: list[Unreadable]) -> list[Unreadable]:
    """Move the `skipped` step folders of checkpoints folder `directory` to the sibling
    checkpoints_unreadable/ (`io.move_aside`): out of orbax's way, so later saves and `keep_checkpoints` do
    not collide with them. The same records, with where each now lies."""
    directory = epath.Path(directory)
    dest_dir = directory.parent / UNREADABLE_DIR
    return [
        dataclasses.replace(u, moved_to=str(io.move_aside(directory / str(u.step), dest_dir)))
        for u in skipped
    ]


def restore_latest_good(
    mngr: ocp.CheckpointManager, abstract_state: dict
) -> tuple[dict | None, list]:
    """`latest_good`, then the skipped folders `set_aside` and the manager reloaded: (state or None,
    [Unreadable, each with where it was moved])."""
    state, skipped = latest_good(mngr, abstract_state)
    skipped = set_aside(mngr.directory, skipped)
    if skipped:
        mngr.reload()
    return state, skipped


def abstract_like(state_shapes, sharding) -> dict:
    """`jax.ShapeDtypeStruct`s of the given shapes, each leaf with `sharding`: one sharding for every
    leaf (a replicated state), or a pytree of shardings of the state's structure (a sharded one)."""
    if isinstance(sharding, jax.sharding.Sharding):
        sharding = jax.tree.map(lambda _: sharding, state_shapes)
    return jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), state_shapes, sharding
    )
