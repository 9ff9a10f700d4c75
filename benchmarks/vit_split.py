r"""Where our ViT's training step loses to timm + torch.compile: its matrix products, forward pass,
backward pass and optimiser, each beside timm's, in one process.

    python -m benchmarks.vit_split                      # ViT-S/16 at batch 8, float32, on this machine

The GEMMs are the step's matrix shapes as one jitted `x @ y` against torch's `x @ y` on the same
arrays, and the attention's two batched products as the model writes them (`jnp.einsum` against
`torch.einsum` of the same layout). The split times our jitted forward, forward and backward, and whole step (`vit_throughput`'s)
of the vanilla ViT against timm's ViT of the same shape (`vit_throughput.timm_model`) under
`torch.compile`: forward without gradients, forward and backward, then AdamW with clipping. Each figure
is the minimum over `--calls` calls after one warm-up. Writes its section of docs/benchmarks.md.
Needs the `bench` extra (torch, timm).
"""

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
import torch
from absl import app, flags

from benchmarks import vit_throughput as vt
from benchmarks.report import machine, update_section
from posattn.vision import losses

flags.DEFINE_string(
    "split_variant", "S/16", "ViT variant (ImageNet shape, 224 x 224, 1,000 classes)."
)
flags.DEFINE_integer("split_batch", 8, "Batch of the split.")
flags.DEFINE_integer("calls", 6, "Timed calls per figure (the minimum is kept).")
FLAGS = flags.FLAGS


def fastest_ms(fn, calls: int) -> float:
    fn()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * min(times)


def product_row(
    label: str, ours_fn, torch_fn, a: np.ndarray, b: np.ndarray, gflop: float, calls: int
) -> str:
    """One matrix product of the same float32 arrays in both frameworks: a row of GFLOP/s and time ratio."""
    ja, jb, ta, tb = jnp.asarray(a), jnp.asarray(b), torch.from_numpy(a), torch.from_numpy(b)
    ours = fastest_ms(lambda: ours_fn(ja, jb).block_until_ready(), 5 * calls)
    theirs = fastest_ms(lambda: torch_fn(ta, tb), 5 * calls)
    return (
        f"| {label} | {gflop / ours * 1e3:.0f} | {gflop / theirs * 1e3:.0f} | {ours / theirs:.2f} |"
    )


def gemm_rows(width: int, mlp: int, tokens: int, calls: int) -> list[str]:
    """The step's matrix products (QKV, attention output, MLP in and out) in both frameworks."""
    rng, matmul = np.random.default_rng(0), jax.jit(lambda x, y: x @ y)
    return [
        product_row(
            f"{m} x {k} x {n}",
            matmul,
            lambda x, y: x @ y,
            rng.standard_normal((m, k)).astype(np.float32),
            rng.standard_normal((k, n)).astype(np.float32),
            2 * m * k * n / 1e9,
            calls,
        )
        for m, k, n in (
            (tokens, width, 3 * width),
            (tokens, width, width),
            (tokens, width, mlp),
            (tokens, mlp, width),
        )
    ]


def attention_rows(batch: int, tokens: int, heads: int, head_dim: int, calls: int) -> list[str]:
    """The attention's two batched products per block, as `posattn.vision.models.attention` writes
    them (heads inside the token layout), against torch's einsum of the same layout."""
    rng = np.random.default_rng(0)
    q, k = (
        rng.standard_normal((batch, tokens, heads, head_dim)).astype(np.float32) for _ in range(2)
    )
    s = rng.standard_normal((batch, heads, tokens, tokens)).astype(np.float32)
    gflop = 2 * batch * heads * tokens * tokens * head_dim / 1e9
    return [
        product_row(
            f"{name} (`{spec}`)",
            jax.jit(functools.partial(jnp.einsum, spec)),
            functools.partial(torch.einsum, spec),
            a,
            b,
            gflop,
            calls,
        )
        for name, spec, a, b in (
            ("Q K^T", "bnhk,bmhk->bhnm", q, k),
            ("S V", "bhnm,bmhk->bnhk", s, k),
        )
    ]


def split_rows(variant: str, batch: int, calls: int) -> list[str]:
    side, classes = 224, 1000
    model = vt.make_model(variant, "vanilla", side, classes)
    images = jax.random.normal(jax.random.key(0), (batch, side, side, 3))
    labels = jax.nn.one_hot(jnp.arange(batch) % classes, classes)
    params = jax.jit(lambda: model.init(jax.random.key(1), images[:1])["params"])()
    forward = jax.jit(lambda p, x: model.apply({"params": p}, x, train=False))
    loss_fn = functools.partial(losses.classification_loss, model)
    grads = jax.jit(lambda p, x, y: jax.grad(lambda p: loss_fn(p, {}, x, y, None, True)[0])(p))
    step, state, data, _ = vt.make_step(variant, "vanilla", side, classes, batch, jnp.float32)
    held = [state]

    def one_step():
        held[0], loss = step(held[0], *data)
        loss.block_until_ready()

    ours = {
        "forward": fastest_ms(lambda: forward(params, images).block_until_ready(), calls),
        "forward and backward": fastest_ms(
            lambda: jax.block_until_ready(grads(params, images, labels)), calls
        ),
        "whole step": fastest_ms(one_step, calls),
    }

    net = vt.timm_model(variant, side, classes)
    compiled = torch.compile(net)
    x, y = torch.randn(batch, 3, side, side), torch.randint(0, classes, (batch,))
    opt = torch.optim.AdamW(
        net.parameters(),
        lr=vt.OPT["lr"],
        betas=(vt.OPT["b1"], vt.OPT["b2"]),
        weight_decay=vt.OPT["weight_decay"],
    )

    def backward():
        torch.nn.functional.cross_entropy(compiled(x), y).backward()

    def timm_forward():
        with torch.no_grad():
            compiled(x)

    def timm_fb():
        backward()
        net.zero_grad(set_to_none=True)

    def timm_step():
        backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), vt.OPT["grad_clip"])
        opt.step()
        opt.zero_grad(set_to_none=True)

    theirs = {
        "forward": fastest_ms(timm_forward, calls),
        "forward and backward": fastest_ms(timm_fb, calls),
        "whole step": fastest_ms(timm_step, calls),
    }
    return [
        f"| {name} | {ours[name]:.0f} | {theirs[name]:.0f} | {ours[name] / theirs[name]:.2f} |"
        for name in ours
    ]


def main(argv):
    del argv
    shape, patch = vt.models.parse_variant(FLAGS.split_variant)
    tokens = FLAGS.split_batch * (224 // patch) ** 2
    gemms = gemm_rows(shape.width, shape.mlp_dim, tokens, FLAGS.calls) + attention_rows(
        FLAGS.split_batch,
        tokens // FLAGS.split_batch,
        shape.num_heads,
        shape.width // shape.num_heads,
        FLAGS.calls,
    )
    split = split_rows(FLAGS.split_variant, FLAGS.split_batch, FLAGS.calls)
    body = "\n".join(
        [
            f"ViT-{FLAGS.split_variant} (vanilla), batch {FLAGS.split_batch}, float32; minimum of {FLAGS.calls} "
            f"calls (the GEMMs: {5 * FLAGS.calls}) after one warm-up. Machine: {machine()}. torch {torch.__version__}, "
            f"{torch.get_num_threads()} threads.",
            "",
            f"Command: `python -m benchmarks.vit_split --split_variant={FLAGS.split_variant} "
            f"--split_batch={FLAGS.split_batch} --calls={FLAGS.calls}`",
            "",
            "| matrix product (tokens x in x out, or the attention's per block) | ours GFLOP/s | torch GFLOP/s | "
            "ours / torch time |",
            "|---|---|---|---|",
            *gemms,
            "",
            "| part | ours (ms) | timm + torch.compile (ms) | ours / timm time |",
            "|---|---|---|---|",
            *split,
        ]
    )
    print(body, flush=True)
    update_section(
        "Image regime: where the ViT step loses to timm on this machine (benchmarks/vit_split.py)",
        body,
    )


if __name__ == "__main__":
    app.run(main)
