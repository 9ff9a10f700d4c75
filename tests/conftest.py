"""Every test sees 8 simulated CPU devices, so sharded code paths run as they would on a pod slice.

The suite is mostly XLA compiling small programs, so LLVM's code generation runs at optimisation level 1
instead of XLA's default (about 15% less CPU time over tests/vision/test_train.py): HLO optimisation and
fusion are XLA's own and unchanged, every tolerance holds as written, and the binaries and the library
run at the default level everywhere else. Level 0 changes float32 results by ~1e-6 relative (the
initial loss of the golden-value test) and is not used.

One persistent compilation cache per test run, shared by the xdist workers and by the binaries the
tests start as subprocesses: many tests compile the same programs (the same models, shapes and GD
chunks), and each is then compiled once per run. The cache starts empty on every run, so a run's time
is what a fresh machine sees, and the user's own cache (~/.cache/posattn) is neither read nor written.

The tests of Ctrl-C expect what an interactive shell gives a process: Python's own SIGINT handler. A
shell without job control starts a background job (`pytest ... &`, as some CI runners do) with SIGINT
ignored, which the library rightly keeps ignored (posattn/signals.py) and every process the tests start
would inherit; so the controller and each worker put Python's handler back first.
"""

import os
import shutil
import signal
import tempfile
import uuid

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "")
    + " --xla_force_host_platform_device_count=8 --xla_backend_optimization_level=1"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

_RUN = "POSATTN_TEST_RUN"  # set by the controller; the xdist workers it starts inherit it


def _cache_dir() -> str:
    return os.path.join(tempfile.gettempdir(), f"posattn-tests-jax-cache-{os.environ[_RUN]}")


def pytest_configure(config):
    import jax

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)

    if not hasattr(config, "workerinput"):
        os.environ[_RUN] = uuid.uuid4().hex
    os.environ["POSATTN_COMPILATION_CACHE"] = _cache_dir()  # the binaries started by the tests
    jax.config.update("jax_compilation_cache_dir", _cache_dir())
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


def pytest_unconfigure(config):
    if not hasattr(config, "workerinput"):
        shutil.rmtree(_cache_dir(), ignore_errors=True)
