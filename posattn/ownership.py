"""A workdir belongs to one run of one binary, held by one process at a time (docs/reliability.md).

Every binary of `experiments/` checks its flags, then calls `claim(workdir, binary, config)` before its
first write. The claim

1. refuses an empty or whitespace `--workdir` (it would write into the current directory, or into /);
2. reads the workdir's marker, `workdir.json` (the binary, its config and the config's fingerprint, a
   status, the pid), and refuses a workdir that holds another binary's run or a run of another config
   (a run whose marker says `failed` may be replaced by another config of the same binary: the
   corrected relaunch). A workdir without a marker is taken if it is empty, or if its config.json
   records this very config (a run made by `posattn.vision.train` outside the binaries, or before
   markers); any other files are refused: a run never overwrites another. A refusal touches nothing;
3. takes the workdir's lock (`posattn.workdir_lock`) for the rest of the process: a second process on
   the same workdir is refused, naming the first's pid;
4. writes the marker with status `running`; `release`, which `posattn.cli.run` calls as the binary
   ends, records `complete`, `interrupted` (SIGTERM, SIGINT, a `RunStopped`) or `failed`. A marker left
   `running` while no process holds the lock is a run that was killed. A run that ends having written
   nothing (refused by a later check, interrupted at once) leaves the workdir as it found it.

The same binary with the same config continues: binaries that resume, resume; the others (theory,
reproduce, phase_three, shallow_vit, posemb_similarity's --out) run again from the start, rewriting
their outputs with the same results (every seed is in the config). A config is compared field by field
(nested dicts flattened to dotted names); `may_change` names the fields a binary lets a resumed run
change (`posattn.vision.resume.RESUMABLE` for train_images), which the fingerprint leaves out.

While a claim is held, SIGINT and SIGTERM (`posattn.signals`) end the process at the next Python
instruction with the marker saying `interrupted`, one line on stderr and exit status 130 or 143; the
files a run writes are whole or absent (`posattn.io`), so nothing is left half-written. On a
multi-process run only process 0 locks and writes the marker, and every process checks it.
"""

import dataclasses
import datetime
import hashlib
import json
import logging
import os
import shlex
import signal
import sys

from etils import epath

from posattn import io, run_record, signals, workdir_lock
from posattn import workdir as workdir_lib
from posattn.errors import ConfigError, first_line

MARKER = "workdir.json"
RUNNING, COMPLETE, INTERRUPTED, FAILED = "running", "complete", "interrupted", "failed"
_OWN_FILES = (MARKER, workdir_lock.LOCK)


@dataclasses.dataclass
class _Claim:
    path: epath.Path
    workdir: str
    binary: str
    resumes: bool
    record: dict
    before: bytes | None  # the marker as the claim found it (None: there was none)
    listing: dict  # the workdir's entries as the claim found them (`_listing`)
    created: list  # directories the claim created, innermost first
    lock_fd: int | None = None
    lock_before: bytes = b""  # the lock file's content (the previous holder's pid) as found


_held: _Claim | None = None


def _reachable(workdir) -> epath.Path:
    """`workdir` as a path (`check_path`) whose file system answers: ConfigError in one line if not
    (e.g. gs:// without gcsfs installed: an ImportError; a file system's own error)."""
    path = epath.Path(check_path(workdir))
    # gcsfs logs each failed attempt with its traceback before it raises (a bucket out of reach): the
    # one line below says it; gcsfs's log stays on for the rest of the run
    gcsfs_log = logging.getLogger("gcsfs")
    level = gcsfs_log.level
    gcsfs_log.setLevel(logging.CRITICAL + 1)
    try:
        path.exists()
    except Exception as e:  # noqa: BLE001 - whatever the file system raises, the workdir is out of reach
        raise ConfigError(
            f"--workdir={workdir} cannot be reached ({type(e).__name__}: {first_line(e)}): "
            "install what it names, or choose a directory this machine can reach"
        ) from e
    finally:
        gcsfs_log.setLevel(level)
    return path


def check_path(workdir, flag: str = "workdir") -> str:
    """`workdir` as given, or ConfigError if it is empty or whitespace (`--workdir=` passes absl's
    required=True and would write into the current directory, or into /); `flag` names it."""
    if workdir is None or not str(workdir).strip():
        what = "is empty" if not workdir else "is only whitespace"
        raise ConfigError(f"--{flag} {what}: give a directory, e.g. --{flag}=/tmp/run")
    return str(workdir)


def fingerprint(config: dict, may_change=()) -> str:
    """SHA-256 (16 hex digits) of the config's fields, leaving out `may_change`."""
    kept = {k: v for k, v in run_record.dotted(config).items() if k not in may_change}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:16]


def read_marker(workdir) -> dict | None:
    """The marker of `workdir` (None if it has none); ConfigError if it is not a marker."""
    path = epath.Path(workdir) / MARKER
    try:
        if not path.exists():
            return None
        marker = json.loads(path.read_text())
    except Exception as e:  # noqa: BLE001 - unreadable for whatever reason: the workdir is not ours to take
        raise ConfigError(
            f"--workdir={workdir}: its {MARKER} cannot be read ({type(e).__name__}: "
            f"{first_line(e)}): restore it, or use a new --workdir"
        ) from e
    if not isinstance(marker, dict) or not {"binary", "config", "status"} <= marker.keys():
        raise ConfigError(
            f"--workdir={workdir}: its {MARKER} is not a posattn marker (no binary, config and "
            "status): restore it, or use a new --workdir"
        )
    return marker


def _listing(path: epath.Path) -> dict:
    """{name: (size, mtime in ns)} of the workdir's entries, its own files left out: what a run wrote
    shows as a change (a file rewritten, an entry added to a directory changes its mtime). Names alone
    on a remote file system."""
    if not path.is_dir():
        return {}
    names = [
        p.name
        for p in path.iterdir()
        if p.name not in _OWN_FILES and not p.name.startswith(".write_probe.")
    ]
    if not io.is_local(path):
        return dict.fromkeys(names)
    stats = {name: os.stat(os.path.join(path, name), follow_symlinks=False) for name in names}
    return {name: (s.st_size, s.st_mtime_ns) for name, s in stats.items()}


def _describe(marker: dict, locked_by: str | None) -> str:
    status = marker["status"]
    if status == RUNNING:
        status = f"running, pid {locked_by}" if locked_by else "killed while running"
    return f"a {marker['binary']} run ({status})"


def check_claim(
    workdir, binary: str, config, *, may_change=(), resumes: bool = False, complete=None
) -> dict | None:
    """Raise ConfigError unless `binary` with `config` may run in `workdir` (the rules of the module
    docstring); read only, so a refusal touches nothing. Returns the workdir's marker (None if none).
    `complete` (the binary's `configs.Schema.complete`, e.g. the image schema's) fills in the fields a
    stored config lacks (added since it was recorded) before it is compared; None compares it as is."""
    path = _reachable(workdir)
    marker = read_marker(path)
    again = "resume it" if resumes else "run it again"
    if marker is None:  # a new workdir, or a run made outside the binaries (or before markers)
        entries = sorted(_listing(path))
        stored = run_record.read_config(path) if entries else None
        if entries and stored is None:
            shown = ", ".join(entries[:4]) + (", ..." if len(entries) > 4 else "")
            raise ConfigError(
                f"--workdir={workdir} holds files ({shown}) but no {MARKER} or config.json: not a run "
                f"{binary} can continue; use a new or empty --workdir"
            )
        if entries and (diffs := _differences(stored, config, may_change, complete)):
            raise ConfigError(
                f"--workdir={workdir} holds a run whose config.json is another config ({diffs}): "
                f"rerun with that config to {again}, or use a new --workdir"
            )
        return None
    run_record.read_config(path)  # a damaged record stops the run before anything is changed
    what = _describe(marker, workdir_lock.holder(path) if workdir_lock.is_locked(path) else None)
    if marker["binary"] != binary:
        raise ConfigError(
            f"--workdir={workdir} holds {what}: {binary} does not overwrite it; use a new --workdir"
        )
    diffs = _differences(marker["config"], config, may_change, complete)
    if diffs and marker["status"] != FAILED:
        raise ConfigError(
            f"--workdir={workdir} holds {what} of another config ({diffs}): rerun with its "
            f"config ({MARKER}) to {again}, or use a new --workdir"
        )
    return marker


def _differences(stored: dict, config, may_change, complete=None) -> str:
    """The fields (at most 4 shown) where `config` differs from the `stored` record (`complete`d, if
    given), leaving out `may_change`, as "field old -> new; ..."; "" if none."""
    stored = stored if complete is None else complete(stored)
    diffs = [
        f"{k} {old!r} -> {new!r}"
        for k, (old, new) in run_record.differing_fields(stored, run_record.as_json(config)).items()
        if k not in may_change
    ]
    return "; ".join(diffs[:4]) + (f"; and {len(diffs) - 4} more" if len(diffs) > 4 else "")


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _created_dirs(path: epath.Path) -> list:
    """The directories `path` and its missing parents, innermost first, that creating it will add."""
    out = []
    while not path.exists() and path != path.parent:
        out.append(path)
        path = path.parent
    return out


def claim(
    workdir, binary: str, config, *, may_change=(), resumes: bool = False, complete=None
) -> epath.Path:
    """Make `workdir` the workdir of this process's run of `binary` with `config` (a dict or an
    ml_collections.ConfigDict): `check_claim`, create it (writable: `posattn.workdir.check_writable`), lock it and
    write the marker (status running); its path. ConfigError, with nothing touched, if refused.

    `may_change`: dotted config fields a resumed run may change. `resumes`: the binary continues a run
    when rerun (rather than running it again), as its messages then say. `complete`: as in
    `check_claim`. One claim per process; `release` ends it.
    """
    global _held
    if _held is not None:
        raise RuntimeError(f"this process already holds {_held.workdir}: one claim per process")
    options = {"may_change": may_change, "resumes": resumes, "complete": complete}
    marker = check_claim(workdir, binary, config, **options)
    path = epath.Path(workdir)
    writer = io.is_writer()
    created = _created_dirs(path) if writer else []
    path = workdir_lib.check_writable(workdir)  # created, and writable
    fd, lock_before = workdir_lock.lock(path, workdir) if writer else (None, b"")
    try:
        # again, locked
        marker = check_claim(workdir, binary, config, **options)
        before = (path / MARKER).read_bytes() if marker is not None else None
        record = {
            "binary": binary,
            "config": run_record.as_json(config),
            "fingerprint": fingerprint(run_record.as_json(config), may_change),
            "status": RUNNING,
            "pid": os.getpid(),
            "command": shlex.join(sys.orig_argv),
            "started": _now(),
            "ended": None,
            "message": None,
        }
        held = _Claim(
            path, workdir, binary, resumes, record, before, _listing(path), created, fd, lock_before
        )
        io.write_json(path / MARKER, record)
    except BaseException:
        if fd is not None:
            os.close(fd)
        raise
    _held = held
    signals.enter(_interrupted)
    return path


def _interrupted(signum) -> str:
    """SIGINT or SIGTERM while the claim is held (`posattn.signals` then ends the process): record the
    run as interrupted; the line that says so."""
    name, held = signal.Signals(signum).name, _held
    if not release(INTERRUPTED, name):
        return f"{name}: before the run wrote anything: {held.workdir} is as it was"
    again = "resume it" if held.resumes else "run it again from the start"
    return (
        f"{name}: the run in {held.workdir} did not finish ({MARKER} says interrupted); rerun the "
        f"same command to {again}"
    )


def release(status: str, message: str | None = None) -> bool:
    """End this process's claim (if any): record `status` (complete, interrupted, failed) and `message`
    in the marker and drop the lock; whether the marker records it. A run that ended before it wrote
    anything in its workdir leaves it as it was found (and returns False): the previous marker back,
    or, for a new workdir, no marker, no lock and no directories created."""
    global _held
    signals.leave(_interrupted)  # first: a signal from here on finds no claim
    held, _held = _held, None
    if held is None:
        return False
    try:
        if not io.is_writer():
            return True
        if status != COMPLETE and _listing(held.path) == held.listing:
            _restore(held)
            return False
        io.write_json(
            held.path / MARKER,
            {**held.record, "status": status, "ended": _now(), "message": message},
        )
        return True
    finally:
        if held.lock_fd is not None:
            os.close(held.lock_fd)


def _restore(held: _Claim) -> None:
    if held.before is not None:
        io.write_text(held.path / MARKER, held.before.decode())
        if held.lock_fd is not None:
            workdir_lock.write(held.lock_fd, held.lock_before)
        return
    for name in _OWN_FILES:
        (held.path / name).unlink(missing_ok=True)
    for directory in held.created:  # innermost first; only if still empty
        try:
            directory.rmdir()
        except OSError:
            break


def check_run(workdir, binary: str) -> None:
    """ConfigError unless `workdir` holds a run of `binary` to read (e.g. posemb_similarity reading a
    train_images run): its marker names `binary`, or, without a marker, it has a readable config.json
    (a run made by `posattn.vision.train` outside the binaries, e.g. a cell of a sweep)."""
    marker = read_marker(_reachable(workdir))
    if marker is not None and marker["binary"] != binary:
        raise ConfigError(
            f"--workdir={workdir} holds a {marker['binary']} run, not a {binary} run: give the "
            f"workdir of a {binary} run"
        )
    if run_record.read_config(workdir) is None:
        raise ConfigError(
            f"--workdir={workdir} has no config.json: it holds no {binary} run (give the workdir "
            f"of a finished {binary} run)"
        )
