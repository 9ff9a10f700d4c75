"""Logs that grow record by record, on stores that cannot append (gs://, any object store).

A local file is appended to (`io.append_jsonl`), and a researcher can `tail` it. An object store has no
append: gcsfs's mode "a" rewrites the object from empty (fsspec/gcsfs#533), and rewriting the whole log
at each record costs the square of its length (a pod run logs thousands). So a log PATH that cannot be
appended to is written as numbered chunks PATH.d/000000.jsonl, 000001.jsonl, ..., each holding at most
`CHUNK_RECORDS` records and written whole (`io.write_text`) at every record: a record costs one upload
of at most `CHUNK_RECORDS` lines, a reader joins the chunks in their order (`read_jsonl`: one read per
chunk), and `cat PATH.d/*.jsonl` shows the log. A kill mid-write loses the record being written: the
chunk's previous version stays whole (an object is replaced whole, a local file by a rename).

Which form a log takes: chunks where its store cannot append (`io.is_local` false), or where its
chunks already exist (a run copied from a bucket to a disk continues as it was written); PATH itself
otherwise. A reader takes PATH's records (if any), then the chunks': a run copied from a disk to a
bucket keeps its first records in PATH and continues in chunks.

TensorBoard's event files are append-only too: `UploadedEvents` writes them on this machine's disk
(tensorboardX) and copies each whole to the store after every record, starting a new event file every
`CHUNK_RECORDS` records (TensorBoard reads every event file of a folder, in the order of their names).
"""

import itertools
import os
import re
import shutil
import tempfile
import time

from etils import epath

from posattn import io

CHUNK_RECORDS = 100
_CHUNK = re.compile(r"(\d+)\.jsonl")
_EVENT_FILES = itertools.count()  # the event files this process opened


def chunks_dir(path) -> epath.Path:
    """The folder of log `path`'s chunks: PATH.d beside it."""
    path = epath.Path(path)
    return path.parent / f"{path.name}.d"


def chunks(path) -> list[epath.Path]:
    """The chunk files of log `path`, in order (other names there, e.g. a write's .tmp, are not chunks)."""
    folder = chunks_dir(path)
    if not folder.exists():
        return []
    numbered = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _CHUNK.fullmatch(p.name))]
    return [p for _, p in sorted(numbered, key=lambda x: x[0])]


def appends(path) -> bool:
    """Whether log `path` is written by appending to it (else in chunks): a local path whose log has no
    chunks."""
    return io.is_local(path) and not chunks_dir(path).exists()


def exists(path) -> bool:
    """Whether log `path` has a file or a chunk."""
    return epath.Path(path).exists() or bool(chunks(path))


def read_jsonl(path) -> list[dict]:
    """Every record of log `path`, in order: its file's, then its chunks' (`io.read_jsonl` each: a last
    line cut short is left out, a damaged line before it is a ConfigError naming its file); [] if
    neither exists."""
    files = [epath.Path(path)] if epath.Path(path).exists() else []
    return [r for f in [*files, *chunks(path)] for r in io.read_jsonl(f)]


def clear(path) -> None:
    """Empty log `path` (a run that starts over): its chunks removed, its file emptied where it is
    appended to, removed where not (process 0)."""
    if not io.is_writer():
        return
    folder = chunks_dir(path)
    if folder.exists():
        folder.rmtree()
    if io.is_local(path):
        io.write_text(path, "")
    else:
        epath.Path(path).unlink(missing_ok=True)


def keep(path, wanted) -> None:
    """Drop the records of log `path` for which `wanted(record)` is false (process 0): its file
    rewritten whole, its chunks that change too (one left empty is removed). Idempotent: a kill in the middle leaves a
    log that the same call finishes."""
    if not io.is_writer():
        return
    files = [epath.Path(path)] if epath.Path(path).exists() else []
    for f in [*files, *chunks(path)]:
        records = io.read_jsonl(f)
        kept = [r for r in records if wanted(r)]
        # a cut last line is dropped too (read_jsonl left it out): the file must end whole
        if len(kept) != len(records) or f.read_text().splitlines() != [
            io.jsonl_line(r).rstrip("\n") for r in records
        ]:
            if kept or f == epath.Path(path):
                io.write_jsonl(f, kept)
            else:
                f.unlink()


class JsonlWriter:
    """Writes records to log `path` one at a time: appended to its file, or into its chunks (the module
    docstring says which). A new writer on a chunked log continues its last chunk. Process 0 only."""

    def __init__(self, path):
        self.path = epath.Path(path)
        self.chunked = not appends(path)
        self._number, self._lines = 0, []
        if self.chunked and (found := chunks(path)):
            self._number = int(_CHUNK.fullmatch(found[-1].name).group(1))
            self._lines = [io.jsonl_line(r) for r in io.read_jsonl(found[-1])]
            self._next_if_full()

    def _next_if_full(self) -> None:
        if len(self._lines) >= CHUNK_RECORDS:
            self._number, self._lines = self._number + 1, []

    def write(self, record: dict) -> None:
        """Add `record` (one JSON line) to the log."""
        if not self.chunked:
            io.append_jsonl(self.path, record)
            return
        self._lines.append(io.jsonl_line(record))
        folder = chunks_dir(self.path)
        if self._number == 0 and len(self._lines) == 1:
            folder.mkdir(parents=True, exist_ok=True)
        io.write_text(folder / f"{self._number:06d}.jsonl", "".join(self._lines))
        self._next_if_full()


class UploadedEvents:
    """TensorBoard scalars for a `logdir` on a store that cannot append: an event file written on the
    local disk (tensorboardX's synchronous `EventsWriter`) and copied whole into `logdir` after every
    record (`write`); every `CHUNK_RECORDS` records a new file is started, so that a copy costs at most
    that many records. `purge_step` as tensorboardX's `SummaryWriter` (the first file carries it: from
    that step on, TensorBoard hides the earlier files' events). Process 0 only."""

    def __init__(self, logdir, *, purge_step: int | None = None):
        self.logdir = epath.Path(logdir)
        self._local = tempfile.mkdtemp(prefix="posattn-events-")
        self._purge, self._files, self._records, self._writer = purge_step, 0, 0, None
        self._folder = None

    def _open(self):
        from tensorboardX.event_file_writer import EventsWriter
        from tensorboardX.proto.event_pb2 import Event, SessionLog

        # the pid and a number kept by the process tell apart two files opened in the same second on
        # the same host (tensorboardX names a file by them)
        suffix = f".{os.getpid()}.{next(_EVENT_FILES):06d}"
        self._folder = os.path.join(self._local, f"{self._files:06d}")  # its one file: the events
        os.makedirs(self._folder)
        self._writer = EventsWriter(os.path.join(self._folder, "events"), suffix)
        if self._purge is not None:  # as tensorboardX's SummaryWriter marks a restart
            self._writer.write_event(Event(step=self._purge, file_version="brain.Event:2"))
            start = SessionLog(status=SessionLog.START)
            self._writer.write_event(Event(step=self._purge, session_log=start))
        self._purge, self._files, self._records = None, self._files + 1, 0
        self.logdir.mkdir(parents=True, exist_ok=True)

    def write(self, step: int, scalars: dict) -> None:
        """Add `scalars` ({tag: number}) at `step` and copy the event file to `logdir` (nothing to do
        for none)."""
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.summary import scalar

        if not scalars:
            return
        if self._writer is None:
            self._open()
        for tag, value in scalars.items():
            self._writer.write_event(
                Event(wall_time=time.time(), step=step, summary=scalar(tag, value))
            )
        self._writer.flush()
        (name,) = os.listdir(self._folder)
        with open(os.path.join(self._folder, name), "rb") as f:
            # the temporary name has no "tfevents": TensorBoard would read a half-copied file
            io.write_bytes(self.logdir / name, f.read(), tmp_name=".events.tmp")
        self._records += 1
        if self._records >= CHUNK_RECORDS:
            self.close_file()

    def close_file(self) -> None:
        """Close the event file being written (it was copied at its last record)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def close(self) -> None:
        """Close the event file and remove the local folder."""
        self.close_file()
        shutil.rmtree(self._local, ignore_errors=True)
