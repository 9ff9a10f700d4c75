"""The named device mesh of the image trainer and the sharding of its train state (docs/distributed.md).

The mesh has three axes, `config.mesh.data`, `.fsdp` and `.model` (their product the device count; -1
takes the rest). The batch runs over ("data", "fsdp"); every leaf of the train state (parameters,
Adam's moments, BatchNorm statistics) gets a `NamedSharding` from rules over its path and shape, as
big_vision shards by parameter names (docs/decisions.md, "Sharding the train state"):
- "model" (Megatron-style tensor parallelism, ViTs only): the attention heads of the query, key, value
  and output projections and the hidden axis of the MLP (`MODEL_RULES`, axes counted from the end, so
  the rules hold for a state with a leading seed or layer axis too);
- "fsdp" (ZeRO-3 style): the largest remaining axis of every leaf that divides by the fsdp size (a leaf
  that "model" does not split, by fsdp x model together where that divides);
- the rest, and every axis that does not divide, replicated.
An optimizer state mirrors the parameters' paths (optax's `mu`/`nu` trees), so the same rules shard it
like its parameters. `jax.jit` with these explicit shardings lets XLA insert the all-gathers of fsdp and
the reductions of tensor parallelism; the default mesh (all devices on "data") replicates the whole
state, as the trainer always did.
"""

import math
import numbers
import re

import jax
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from posattn.errors import ConfigError
from posattn.mesh import DATA, FSDP

MODEL = "model"
AXES = (DATA, FSDP, MODEL)
BATCH_AXES = (DATA, FSDP)  # the axes the examples of a batch are split over
REST = -1  # a mesh size that takes the devices the other axes leave

# (path pattern, the axis, counted from the end, that "model" splits): each ViT block's attention heads
# (query/key/value kernels (D, H, Dh) and biases (H, Dh); the fused qkv's (D, 3, H, Dh) and (3, H, Dh);
# the output kernel (H, Dh, D)) and its MLP's hidden axis F (fc1 (D, F) and (F,), fc2 (F, D)): each
# device then computes whole heads and a slice of the hidden units, one reduction per branch.
MODEL_RULES = (
    (re.compile(r"attn/(query|key|value|qkv)/(kernel|bias)$"), -2),
    (re.compile(r"attn/out/kernel$"), -3),
    (re.compile(r"mlp/fc1/(kernel|bias)$"), -1),
    (re.compile(r"mlp/fc2/kernel$"), -2),
)
TENSOR_PARALLEL_MODELS = ("vit",)  # the models MODEL_RULES name parameters of


def mesh_shape(mesh_cfg, num_devices: int) -> tuple[int, int, int]:
    """(data, fsdp, model) of `mesh_cfg` (a mapping with those three sizes) over `num_devices`: one size
    may be -1, the devices the others leave. ConfigError (one line) for sizes that are not positive
    integers, two -1, or a product other than the device count."""
    sizes = [mesh_cfg[axis] for axis in AXES]
    for axis, size in zip(AXES, sizes):
        if (
            isinstance(size, bool)
            or not isinstance(size, numbers.Integral)
            or not (size >= 1 or size == REST)
        ):
            raise ConfigError(
                f"mesh.{axis}={size!r} must be a positive integer or -1 (the devices left)"
            )
    rest = [axis for axis, size in zip(AXES, sizes) if size == REST]
    if len(rest) > 1:
        raise ConfigError(
            f"mesh.{rest[0]} and mesh.{rest[1]} are both -1 (mesh.data is -1 by default): give one "
            f"of them a size, e.g. --config.mesh.{rest[0]}=1"
        )
    fixed = math.prod(size for size in sizes if size != REST)
    if rest:
        if num_devices % fixed:
            raise ConfigError(
                f"the mesh's other axes take {fixed} devices, which do not divide the "
                f"{num_devices} devices: choose sizes whose product divides {num_devices}"
            )
        sizes = [num_devices // fixed if size == REST else size for size in sizes]
    if math.prod(sizes) != num_devices:
        raise ConfigError(
            f"mesh data x fsdp x model = {' x '.join(map(str, sizes))} = {math.prod(sizes)} devices, "
            f"but the run has {num_devices}: make the product {num_devices} (or set one axis to -1)"
        )
    return tuple(sizes)


def make_mesh(mesh_cfg, devices=None) -> jax.sharding.Mesh:
    """The ("data", "fsdp", "model") mesh of `mesh_cfg` over `devices` (default: every device of every
    process), in `jax.make_mesh`'s device order (the devices of a process are neighbours on "data" x
    "fsdp", so each process feeds a contiguous slice of the batch)."""
    devices = list(jax.devices() if devices is None else devices)
    shape = mesh_shape(mesh_cfg, len(devices))
    return jax.make_mesh(shape, AXES, axis_types=(AxisType.Auto,) * 3, devices=devices)


def batch_shards(mesh: jax.sharding.Mesh) -> int:
    """Into how many slices a batch is split (data x fsdp): what a batch size must divide by."""
    return math.prod(mesh.shape[axis] for axis in BATCH_AXES if axis in mesh.shape)


def batch_shards_of(mesh_cfg, num_devices: int) -> int:
    """`batch_shards` of the mesh `mesh_cfg` would make over `num_devices` (ConfigError as `mesh_shape`):
    what a config's batch sizes must divide by, checked before any mesh is built."""
    data, fsdp, _ = mesh_shape(mesh_cfg, num_devices)
    return data * fsdp


def check_model(model_name: str, mesh: jax.sharding.Mesh) -> None:
    """ConfigError if a "model" axis is asked of a model without tensor-parallel rules: its devices would
    all compute the same thing."""
    if mesh.shape.get(MODEL, 1) > 1 and model_name not in TENSOR_PARALLEL_MODELS:
        raise ConfigError(
            f"mesh.model={mesh.shape[MODEL]}: model.name={model_name!r} has no tensor-parallel rules "
            f"(only {', '.join(TENSOR_PARALLEL_MODELS)}); put its devices on mesh.data or mesh.fsdp"
        )


def leaf_spec(name: str, shape: tuple[int, ...], mesh: jax.sharding.Mesh) -> P:
    """The PartitionSpec of a state leaf at path `name` with `shape` (module docstring's rules)."""
    spec = [None] * len(shape)
    model, fsdp = mesh.shape.get(MODEL, 1), mesh.shape.get(FSDP, 1)
    if model > 1:
        for pattern, axis in MODEL_RULES:
            if pattern.search(name) and len(shape) >= -axis and shape[axis] % model == 0:
                spec[len(shape) + axis] = MODEL
                break
    # A leaf that "model" does not split (norms, biases, embeddings) is split over fsdp x model together
    # where it divides, so that the state per device falls as 1 / (fsdp x model) for every leaf.
    wide = model > 1 and MODEL not in spec
    for axes, size in ([((FSDP, MODEL), fsdp * model)] if wide else []) + [(FSDP, fsdp)]:
        free = [i for i, s in enumerate(spec) if s is None and shape[i] % size == 0]
        if size > 1 and free:  # the largest; of equal ones the first
            spec[max(free, key=lambda i: (shape[i], -i))] = axes
            break
    return P(*spec)


def state_shardings(abstract_state, mesh: jax.sharding.Mesh):
    """A NamedSharding for every leaf of `abstract_state` (arrays or `jax.ShapeDtypeStruct`s)."""
    return jax.tree_util.tree_map_with_path(
        lambda path, x: NamedSharding(
            mesh, leaf_spec(jax.tree_util.keystr(path, simple=True, separator="/"), x.shape, mesh)
        ),
        abstract_state,
    )


def bytes_per_device(abstract_state) -> int:
    """The bytes of the largest shard set any one device holds of `abstract_state` (leaves carrying
    their shardings): with every axis dividing, total / (fsdp x model) for a sharded state."""
    per_device: dict = {}
    for x in jax.tree.leaves(abstract_state):
        itemsize = np.dtype(x.dtype).itemsize
        for device, index in x.sharding.devices_indices_map(x.shape).items():
            n = math.prod(len(range(*s.indices(dim))) for s, dim in zip(index, x.shape))
            per_device[device] = per_device.get(device, 0) + n * itemsize
    return max(per_device.values(), default=0)
