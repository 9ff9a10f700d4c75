"""The optimiser of the image regime: AdamW with linear warm-up then cosine decay.

Weight decay is applied to weight matrices and convolution kernels only (leaves named `kernel`), not to
biases, normalisation scales or positional embeddings, as in DeiT and big_vision: decaying the
positional embedding would pull P, the only input of positional attention, towards zero.
"""
import optax
from flax import traverse_util


def learning_rate_schedule(opt_cfg, total_steps: int) -> optax.Schedule:
    """lr(t): linear from 0 to `opt_cfg.lr` over `warmup_steps`, then cosine decay to 0 at `total_steps`."""
    warmup = min(int(opt_cfg.warmup_steps), int(total_steps))
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=float(opt_cfg.lr),
        warmup_steps=warmup,
        decay_steps=max(int(total_steps), warmup + 1),
        end_value=0.0,
    )


def decay_mask(params):
    """True for the leaves that weight decay applies to: those named `kernel`."""
    flat = traverse_util.flatten_dict(params)
    return traverse_util.unflatten_dict({path: path[-1] == "kernel" for path in flat})


def make_optimizer(opt_cfg, total_steps: int) -> optax.GradientTransformation:
    """Global-norm clipping (off when `grad_clip` is 0) followed by AdamW on the schedule above."""
    adamw = optax.adamw(
        learning_rate=learning_rate_schedule(opt_cfg, total_steps),
        b1=float(opt_cfg.b1),
        b2=float(opt_cfg.b2),
        weight_decay=float(opt_cfg.weight_decay),
        mask=decay_mask,
    )
    if opt_cfg.grad_clip and opt_cfg.grad_clip > 0:
        return optax.chain(optax.clip_by_global_norm(float(opt_cfg.grad_clip)), adamw)
    return adamw
