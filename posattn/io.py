"""Writing results: whole files or nothing, and metrics as JSON lines.

Every binary writes into its `--workdir` through these functions, so a file that exists is complete: a
run stopped mid-write leaves the previous version (or nothing), never a truncated file that looks
finished. Paths may be local or any `etils.epath` location (e.g. gs:// on a TPU pod). Only process 0
writes, so the same call is safe on every host of a multi-process run.
"""

import json
import os

import jax
import numpy as np
from absl import logging
from etils import epath

from posattn.errors import ConfigError


def is_writer() -> bool:
    """True on the process that writes files and prints (process 0 of a multi-process run)."""
    return jax.process_index() == 0


def is_local(path) -> bool:
    """Whether `path` is on this machine's file system (no scheme such as gs://)."""
    return "://" not in str(path)


def absolute(path) -> str:
    """`path` made absolute if it is local; a gs://... path as it is."""
    return os.path.abspath(path) if is_local(path) else str(path)


def jsonable(x):
    """Numpy and JAX scalars and arrays turned into Python numbers and lists, recursively."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, (np.generic, np.ndarray, jax.Array)):
        x = np.asarray(x)
        return x.item() if x.ndim == 0 else x.tolist()
    return x


def write_bytes(path, data: bytes, tmp_name: str | None = None) -> None:
    """Write `data` atomically: a temporary file beside `path` (`tmp_name`, default NAME.tmp), renamed
    into place (a reader never sees half a file; a run stopped mid-write leaves the previous one)."""
    if not is_writer():
        return
    path = epath.Path(path)
    tmp = path.parent / (tmp_name or path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def write_text(path, text: str) -> None:
    """Write `text` atomically (`write_bytes`, UTF-8)."""
    write_bytes(path, text.encode())


def write_json(path, obj) -> None:
    """`obj` as indented JSON with sorted keys, written atomically (`write_text`)."""
    write_text(path, json.dumps(jsonable(obj), indent=2, sort_keys=True) + "\n")


def jsonl_line(obj) -> str:
    """`obj` as one line of JSON (sorted keys), its newline included."""
    return json.dumps(jsonable(obj), sort_keys=True) + "\n"


def append_jsonl(path, obj) -> None:
    """Append `obj` as one line of JSON (a metrics record) to a local file; ValueError for a path on
    another store (gs://...), which may not append (gcsfs rewrites the file: `posattn.chunked_log`)."""
    if not is_local(path):
        raise ValueError(f"{path}: only a local file is appended to; write chunks (chunked_log)")
    if is_writer():
        with epath.Path(path).open("a") as f:
            f.write(jsonl_line(obj))


def write_jsonl(path, records) -> None:
    """`records` as JSON lines, the whole file written atomically (`write_text`)."""
    write_text(path, "".join(jsonl_line(r) for r in records))


def read_jsonl(path) -> list[dict]:
    """Every record of a JSON-lines file, in order. A last line that does not parse is the append that
    a kill or a full disk cut short: it is left out, with a warning. A bad line before it cannot come
    from an interrupted append (something else wrote or altered the file): ConfigError naming it, so
    nothing is silently dropped from the record."""
    lines = epath.Path(path).read_text().splitlines()
    numbered = [(n, line) for n, line in enumerate(lines, 1) if line.strip()]
    records = []
    for n, line in numbered:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as e:
            if n == numbered[-1][0]:
                logging.warning(
                    "%s: its last line is cut short (%d characters), left out", path, len(line)
                )
                continue
            raise ConfigError(
                f"{path} line {n} (of {len(lines)}) is not a JSON record ({e.msg}): repair or "
                "delete that line, then rerun"
            ) from None
    return records


def unused_path(path) -> epath.Path:
    """`path`, or the first of PATH.1, PATH.2, ... that does not exist."""
    path = epath.Path(path)
    found, n = path, 1
    while found.exists():
        found, n = path.parent / f"{path.name}.{n}", n + 1
    return found


def move_aside(src, dest_dir) -> epath.Path:
    """Move `src` into folder `dest_dir` under its own name (NAME.1, NAME.2, ... if taken) and return
    where it went: process 0 moves, every process waits for it. Nothing is deleted."""
    src = epath.Path(src)
    dest = unused_path(epath.Path(dest_dir) / src.name)
    if is_writer():
        dest.parent.mkdir(parents=True, exist_ok=True)
        src.rename(dest)
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(f"posattn: moved {src} aside")
    return dest
