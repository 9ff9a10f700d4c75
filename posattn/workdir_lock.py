"""One process at a time in a workdir: `fcntl.flock` on `workdir.lock`, which holds the holder's pid.

The OS drops the lock when the process ends however it ends (SIGKILL included), so none is stale.
`flock` needs a local (or NFS) file system: a gs:// workdir is not locked (a note on stdout says so).
"""

import os

from etils import epath

from posattn import io
from posattn.errors import ConfigError

LOCK = "workdir.lock"


def holder(path: epath.Path) -> str:
    """The pid written in the lock of workdir `path` ("unknown" if none can be read)."""
    try:
        return (path / LOCK).read_text().strip() or "unknown"
    except OSError:
        return "unknown"


def is_locked(path: epath.Path) -> bool:
    """Whether another process holds the lock of workdir `path` (False where locks are not used)."""
    if not io.is_local(path) or not (path / LOCK).exists():
        return False
    import fcntl

    fd = os.open(os.fspath(path / LOCK), os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops a shared lock taken here


def lock(path: epath.Path, workdir: str) -> tuple[int | None, bytes]:
    """Take the lock of workdir `path` and write our pid in it: (its descriptor, which closing releases,
    and what it held before); ConfigError naming the holder if another process has it. No descriptor
    for a remote workdir."""
    if not io.is_local(path):
        print(
            f"note: {workdir} is not a local directory: it is not locked, so make sure one process at "
            "a time runs in it",
            flush=True,
        )
        return None, b""
    import fcntl

    fd = os.open(os.fspath(path / LOCK), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ConfigError(
            f"--workdir={workdir} is in use by another process (pid {holder(path)}): wait "
            "for it to end or stop it, or use another --workdir"
        ) from None
    before = os.pread(fd, 64, 0)
    write(fd, f"{os.getpid()}\n".encode())
    return fd, before


def write(fd: int, content: bytes) -> None:
    """Replace what the held lock `fd` says (its holder's pid)."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, content, 0)
