"""The checksums a checkpoint carries, computed where the arrays lie, so a restore can tell a checkpoint
whose files were altered after the save (orbax alone restores a flipped bit without complaint) from a
good one, whatever the mesh of the run that saved it and of the run that restores it.

Each array's checksum is two 32-bit sums over its elements, element i (row-major position in the whole
array) with bits u_i (the element's bits widened to uint32) adding w_k(i) * f(u_i ^ s_k), where w_k(i)
is an odd number drawn from i and f is murmur3's finaliser (a bijection of uint32). A change of one
element changes each sum for certain (an odd weight times a bijection); changes of several elements
cancel in both sums with probability about 2^-64. It guards against accidents (a damaged disk, a file
altered by hand or by a tool), not against a deliberate forgery, which SHA-256 would.

Why sums and not a SHA-256 of what each host writes (the alternative considered): a sum of integers
mod 2^32 is exactly the same however the array is split, so
- it is computed on the devices, by one XLA program over the sharded state (each device sums its part,
  one all-reduce of 8 bytes per array combines them): no copy of the state to a host beyond orbax's own,
  no gather to one host, every process gets the same numbers and process 0 records them in orbax's
  custom metadata of the step (`record`), with no exchange of files or digests between hosts;
- a restore onto another mesh (saved with fsdp over 8 devices, restored onto (2,2,2) or onto 4 devices)
  checks the arrays as they land on the new mesh (`mismatch`), though each host then holds other shards
  than were written; a digest per written shard could only be checked by reading the shards as saved.
Orbax's storage checksums would not do either: they are recomputed when orbax itself rewrites a damaged
value (the bit-flip drill), and the undecodable file is what `checkpoint._unreadable_array` finds.

Checkpoints saved before carry one SHA-256 of the whole host state ("sha256"); they are checked against
it (`digest`) on the restored state, gathered to the host.
"""

import functools
import hashlib

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding, PartitionSpec

KEY = "checksums"  # the key of the record in orbax's custom metadata of a step
LEGACY_KEY = "sha256"  # checkpoints saved before: one SHA-256 of the whole host state
KIND = "fmix32-sum-x2"  # what the record holds, so a future change of the sums is told apart
_SEEDS = (0x9E3779B9, 0x7F4A7C15)  # s_k, one per sum


def _fmix32(h_N):
    """murmur3's finaliser, a bijection of uint32 that spreads every input bit over all output bits."""
    h_N = h_N ^ (h_N >> 16)
    h_N = h_N * np.uint32(0x85EBCA6B)
    h_N = h_N ^ (h_N >> 13)
    h_N = h_N * np.uint32(0xC2B2AE35)
    return h_N ^ (h_N >> 16)


def _bits(x):
    """The bits of every element of `x` as uint32 (an 8-byte element as two, along a new last axis; a
    PRNG key as its key data, which orbax saves)."""
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    dtype = np.dtype(x.dtype)
    if dtype == np.bool_:
        return x.astype(jnp.uint32)
    if dtype.itemsize == 8:
        return lax.bitcast_convert_type(x, jnp.uint32)
    unsigned = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32}[dtype.itemsize]
    return lax.bitcast_convert_type(x, unsigned).astype(jnp.uint32)


def _positions(shape):
    """Each element's row-major position in an array of `shape`, mod 2^32."""
    position = jnp.zeros(shape, jnp.uint32)
    stride = 1
    for axis in reversed(range(len(shape))):
        position = position + lax.broadcasted_iota(jnp.uint32, shape, axis) * np.uint32(
            stride % 2**32
        )
        stride *= shape[axis]
    return position


def _sums(x):
    """The two sums of array `x`, uint32[2]."""
    u = _bits(x)
    i = _positions(u.shape)
    return jnp.stack(
        [
            jnp.sum(
                (_fmix32(i ^ np.uint32(s)) | np.uint32(1)) * _fmix32(u ^ np.uint32(s)),
                dtype=jnp.uint32,
            )
            for s in _SEEDS
        ]
    )


@functools.lru_cache(maxsize=None)
def _program(out_sharding):
    """One XLA program for the sums of every array of a state (compiled once per state layout)."""
    return jax.jit(lambda leaves: [_sums(x) for x in leaves], out_shardings=out_sharding)


def _replicated(leaves):
    """Every device of the mesh the state lies on, for the sums (replicated: each process reads them);
    None for a state on one device or on the host."""
    for x in leaves:
        sharding = getattr(x, "sharding", None)
        if isinstance(sharding, NamedSharding):
            return NamedSharding(sharding.mesh, PartitionSpec())
    return None


def checksums(state) -> dict[str, str]:
    """{path of each array: its two sums as 16 hex digits} of a pytree of arrays: jax.Arrays on any
    sharding (the same numbers on every sharding and in every process) or host arrays."""
    flat = jax.tree_util.tree_flatten_with_path(state)[0]
    leaves = [x for _, x in flat]
    sums = _program(_replicated(leaves))(leaves)
    return {
        jax.tree_util.keystr(path): "".join(f"{int(v):08x}" for v in np.asarray(s))
        for (path, _), s in zip(flat, sums)
    }


def record(state) -> dict:
    """What a checkpoint of `state` carries in its custom metadata: {KEY: {"kind", "leaves"}}."""
    return {KEY: {"kind": KIND, "leaves": checksums(state)}}


def digest(host_state) -> str:
    """SHA-256 over every leaf of a host pytree: its path, dtype, shape and bytes, in tree order (the
    record of checkpoints saved before `record`)."""
    h = hashlib.sha256()
    for path, leaf in jax.tree_util.tree_flatten_with_path(host_state)[0]:
        leaf = np.ascontiguousarray(leaf)
        h.update(f"{jax.tree_util.keystr(path)}:{leaf.dtype.str}:{leaf.shape}".encode())
        h.update(leaf.tobytes())
    return h.hexdigest()


def _on_host(state):
    """`state` whole on this host (gathered from every process where it is not all addressable here)."""
    if all(getattr(x, "is_fully_addressable", True) for x in jax.tree.leaves(state)):
        return jax.device_get(state)
    return multihost_utils.process_allgather(state, tiled=True)


def mismatch(state, custom_metadata: dict | None) -> str | None:
    """None if restored `state` matches the record of its checkpoint's `custom_metadata` (or it has
    none: saved before records existed), else what differs ("checksum mismatch in PATH", or
    "SHA-256 mismatch" for a checkpoint saved with one digest of the whole state)."""
    saved = custom_metadata or {}
    if KEY in saved:
        if saved[KEY].get("kind") != KIND:
            return f"checksums of an unknown kind {saved[KEY].get('kind')!r}"
        now, then = checksums(state), saved[KEY]["leaves"]
        differ = [k for k in sorted(now.keys() | then.keys()) if now.get(k) != then.get(k)]
        if differ:
            more = f" and {len(differ) - 1} more" if len(differ) > 1 else ""
            return f"checksum mismatch in {differ[0]}{more}"
        return None
    if LEGACY_KEY in saved and digest(_on_host(state)) != saved[LEGACY_KEY]:
        return "SHA-256 mismatch"
    return None
