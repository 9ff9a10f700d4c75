"""A stand-in for gs:// that cannot append, for the tests of records on an object store.

`install(root)` registers `NoAppendFileSystem` with fsspec for the "gs" and "gcs" protocols
(`etils.epath` asks fsspec for "gcs" when TensorFlow is absent, as here) and clears epath's cache of
file systems, so that every `epath.Path("gs://BUCKET/...")` reaches the fake: a local directory ROOT/BUCKET
whose files open in "r" or "w" (a file's folders made as it is written, as an object store needs none)
but refuse mode "a" (gcsfs's mode "a" overwrites, fsspec/gcsfs#533;
refusing it makes an append fail the test rather than lose records silently). It runs in a test's
process and in the subprocesses of its runs (`python -c "import tests.fake_gcs as f; f.install(...)"`).
"""

import importlib
import os

import fsspec
from etils.epath import backend, gpath
from fsspec.implementations.local import LocalFileSystem

PROTOCOLS = ("gs", "gcs")
_env_before = {}  # the variables `install` set, as they were


class NoAppendFileSystem(LocalFileSystem):
    """gs://BUCKET/PATH as ROOT/BUCKET/PATH on the local disk (`root`, set by `install`); mode "a"
    raises."""

    protocol = PROTOCOLS
    root = None
    appends_refused = 0  # (per process) how many appends were tried: an assertion can check it

    def __init__(self, **options):
        # an object store has no folders to make first: writing gs://b/x/y.json needs no gs://b/x
        super().__init__(auto_mkdir=True, **options)

    @classmethod
    def _strip_protocol(cls, path):
        path = os.fspath(path) if not isinstance(path, str) else path
        if path.startswith(cls.root):  # already ours (fsspec strips paths it returned itself)
            return path.rstrip("/") or "/"
        for scheme in ("gs://", "gcs://"):
            path = path.removeprefix(scheme)
        return os.path.join(cls.root, path).rstrip("/")

    def _open(self, path, mode="rb", **kwargs):
        if "a" in mode:
            type(self).appends_refused += 1
            raise OSError(f"{path}: this store cannot append (mode {mode!r})")
        return super()._open(path, mode, **kwargs)


def install(root, base: type = NoAppendFileSystem) -> type:
    """Serve gs:// from local folder `root` (created) without append, with `base` (a subclass of
    `NoAppendFileSystem` that changes more); the file system's class."""
    os.makedirs(root, exist_ok=True)
    fake = type(base.__name__, (base,), {"root": os.path.abspath(root)})
    for protocol in PROTOCOLS:
        fsspec.register_implementation(protocol, fake, clobber=True)
    backend.fsspec_backend._get_filesystem.cache_clear()  # epath keeps the first one it built
    # where TensorFlow is installed epath would take its file system for gs://, not fsspec's
    _env_before.setdefault("EPATH_USE_TF", os.environ.get("EPATH_USE_TF"))
    os.environ["EPATH_USE_TF"] = "false"
    gpath._is_tf_installed.cache_clear()
    return fake


def uninstall() -> None:
    """Forget the fake: gs:// goes back to gcsfs (where installed)."""
    for protocol in PROTOCOLS:
        # (fsspec's `registry` attribute is a read-only view; its module holds the dict)
        importlib.import_module("fsspec.registry")._registry.pop(protocol, None)
    backend.fsspec_backend._get_filesystem.cache_clear()
    if (before := _env_before.pop("EPATH_USE_TF", None)) is None:
        os.environ.pop("EPATH_USE_TF", None)
    else:
        os.environ["EPATH_USE_TF"] = before
    gpath._is_tf_installed.cache_clear()


def local(url: str, root) -> str:
    """The local path that `install(root)` serves gs:// URL `url` from."""
    return os.path.join(os.path.abspath(root), url.removeprefix("gs://"))
