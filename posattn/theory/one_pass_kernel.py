r"""The one-pass sums of (E) as a CPU kernel: `one_pass_kernel.cc`, an XLA FFI handler, built on first use.

Per block of 32 samples, while their values are in L1/L2, the kernel takes z_nj = <v, X_nj>, the loss
of Eq. (T) and its gradient, and the block's share sum_nj dz_nj X_nj of dR/dv, so that the read of X
from memory overlaps the arithmetic as a GEMV's does. XLA's tile loop (`posattn.theory.fused`) cannot:
it copies each tile out of X and then runs the products and the loss one operation after another,
and stays at ~1.45x one GEMV over X on a 2-core CPU (docs/benchmarks.md, "The one-pass step as a CPU kernel";
docs/decisions.md, "A CPU kernel for the one-pass step").

Built with the C++ compiler ($CXX, else `c++`) against the headers of the installed jaxlib
(`jax.ffi.include_dir`), so that the handler and the XLA that calls it always agree, and kept per user
under $XDG_CACHE_HOME/posattn/kernels (default ~/.cache), named by a hash of the source, the flags,
the compiler and the jaxlib version: a process finds it built after the first. Where it cannot be
built (no compiler, an unsupported platform) `available()` is False, one warning says why, and
`fused` runs XLA's tile loop, which gives the same loss and gradient. Whether the kernel runs is
`fused`'s `implementation` argument (`GDConfig.implementation`), never a setting of this module.
POSATTN_CPU_KERNEL=baseline keeps an x86-64 CPU with AVX2 to the kernel's instance for CPUs without it
(read once per process, by the kernel: to test that instance).
"""

import ctypes
import functools
import hashlib
import os
import pathlib
import subprocess
import tempfile

import jax
import jax.numpy as jnp
import jaxlib
import numpy as np
from absl import logging

TARGET = "posattn_one_pass"
SOURCE = pathlib.Path(__file__).with_name("one_pass_kernel.cc")
# -ffast-math lets the compiler vectorise the sums and call glibc's vector exp and log1p; it is given
# to the compile only: linked with it, loading the library set flush-to-zero for the whole process
# under GCC 12 (docs/decisions.md). It also assumes finite numbers: on a step that overflows, the
# kernel's loss and dM are +-inf (and dv may stay finite) where jax.grad gives NaN; either way the
# run drivers stop on the non-finite loss of the next evaluation (`gd.NonFiniteLoss`).
COMPILE_FLAGS = ("-std=c++17", "-O3", "-ffast-math", "-fPIC")


def _cache_dir() -> pathlib.Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return pathlib.Path(root, "posattn", "kernels")


def _build() -> pathlib.Path:
    """The shared library, compiled unless a process has already compiled this source with these flags."""
    compiler = os.environ.get("CXX", "c++")
    source = SOURCE.read_bytes()
    key = hashlib.sha256(
        b"\0".join(
            [source, " ".join((compiler, *COMPILE_FLAGS)).encode(), jaxlib.__version__.encode()]
        )
    ).hexdigest()[:16]
    path = _cache_dir() / f"one_pass_{key}.so"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        obj, lib = pathlib.Path(tmp, "one_pass.o"), pathlib.Path(tmp, "one_pass.so")
        for command in (
            [
                compiler,
                *COMPILE_FLAGS,
                "-isystem",
                jax.ffi.include_dir(),
                "-c",
                str(SOURCE),
                "-o",
                str(obj),
            ],
            [compiler, "-shared", str(obj), "-o", str(lib)],
        ):
            subprocess.run(command, check=True, capture_output=True, text=True)
        os.replace(lib, path)  # atomic: processes that build it at once each put a whole file
    return path


@functools.cache
def _library() -> ctypes.CDLL:
    return ctypes.cdll.LoadLibrary(str(_build()))


def lanes() -> int:
    """The float32 vector lanes of the kernel's instance in this process: 8 (AVX2), 4 (the baseline).
    Builds the kernel if need be: call it where `available()`."""
    return _library().PosattnOnePassLanes()


@functools.cache
def available() -> bool:
    """Whether the kernel is built and registered with XLA for the CPU (module docstring); the build is
    tried once per process."""
    try:
        library = _library()
    except subprocess.CalledProcessError as e:
        reason = (e.stderr or "").strip().splitlines()[-1:] or [f"exit status {e.returncode}"]
        logging.warning(
            "posattn: the CPU kernel of the one-pass step did not compile (%s); "
            "XLA's tile loop is used instead.",
            reason[0],
        )
        return False
    except OSError as e:  # no compiler, or a library the loader refuses
        logging.warning(
            "posattn: the CPU kernel of the one-pass step is not available (%s); "
            "XLA's tile loop is used instead.",
            e,
        )
        return False
    jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(library.PosattnOnePass), platform="cpu")
    return True


def partial_sums(M_DxD, v_d, X_nxDxd, y_n, w_n, quintic: bool):
    """(sum_n w_n loss_n, its gradient in M, its gradient in v) of Eq. (T) with u_ni = sum_j M_ij <v, X_nj>
    (M the score matrix S, times D where Eq. (T) scales by D), unnormalised; float32, CPU only, and
    `available()` first. Vmapped, each leading axis of an argument is the batch's or 1, so X is never
    copied across the batch."""
    f32 = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.float32)
    D, d = X_nxDxd.shape[-2:]
    call = jax.ffi.ffi_call(TARGET, (f32(), f32(D, D), f32(d)), vmap_method="expand_dims")
    return call(X_nxDxd, y_n, w_n, M_DxD, v_d, quintic=np.int32(quintic))
