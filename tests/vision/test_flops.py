"""The analytic FLOP count of a ViT (posattn.vision.models.flops) against XLA's cost analysis."""

import jax
import jax.numpy as jnp
import pytest

from posattn.vision.models import flops
from posattn.vision.models.vit import ViT

# Wide against its 64 tokens so that the elementwise work XLA also counts (LayerNorm, softmax, GELU:
# O(T D) against the matmuls' O(T D^2)) stays near 2% of the total, while each attention matmul
# (T^2 D) is about 5% of a block: a term left out of the count or counted twice shows.
_SHAPE = dict(
    num_classes=10, image_size=16, patch_size=2, width=128, depth=1, num_heads=2, mlp_dim=256
)
_BATCH = 2


def _xla_forward_flops(model: ViT, batch: int) -> float:
    side = model.image_size
    params = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros((1, side, side, 3))))
    images = jax.ShapeDtypeStruct((batch, side, side, 3), jnp.float32)
    cost = jax.jit(lambda v, x: model.apply(v, x)).lower(params, images).cost_analysis()
    return float((cost[0] if isinstance(cost, (list, tuple)) else cost)["flops"])


@pytest.mark.parametrize("attention", ["vanilla", "positional"])
@pytest.mark.parametrize("pool", ["gap", "cls"])
def test_forward_count_matches_xla(attention, pool):
    model = ViT(attention=attention, pool=pool, **_SHAPE)
    ratio = _xla_forward_flops(model, _BATCH) / flops.forward_flops(model, _BATCH)
    # XLA counts every matmul plus the elementwise work, never less than the matmuls alone.
    assert 1.0 <= ratio < 1.04, ratio


def test_positional_saves_the_query_key_work_of_every_example_but_one():
    vanilla, positional = (ViT(attention=a, **_SHAPE) for a in ("vanilla", "positional"))
    T, D, L = 64, 128, 1
    saved = 2 * L * (2 * T * D**2 + T**2 * D) * (_BATCH - 1)  # Q, K projections and Q K^T, as FLOPs
    assert flops.forward_flops(vanilla, _BATCH) - flops.forward_flops(positional, _BATCH) == saved
    assert flops.training_flops(vanilla, _BATCH) == 3 * flops.forward_flops(vanilla, _BATCH)


def test_the_patch_embedding_counts_the_models_own_channels():
    # a one-channel run was counted with 3 channels: its FLOPs overstated and its MFU understated
    one, three = (ViT(attention="positional", channels=c, **_SHAPE) for c in (1, 3))
    D, p = one.width, one.patch_size
    patches = (one.image_size // p) ** 2
    saved = 2.0 * _BATCH * patches * p * p * 2 * D  # 2 FLOPs a MAC, 2 channels fewer
    assert flops.forward_flops(three, _BATCH) - flops.forward_flops(one, _BATCH) == saved
    assert flops.forward_flops(one, _BATCH, channels=3) == flops.forward_flops(three, _BATCH)
    any_channels = ViT(attention="positional", **_SHAPE)  # built to take any: counted as RGB
    assert flops.forward_flops(any_channels, _BATCH) == flops.forward_flops(three, _BATCH)
