"""The optimiser of the image regime: AdamW with linear warm-up then cosine decay.

Weight decay is applied to weight matrices and convolution kernels only (leaves named `kernel`), not to
biases, normalisation scales or positional embeddings, as in DeiT and big_vision: decaying the
positional embedding would pull P, the only input of positional attention, towards zero.

The numbers a run is most often repeated with (peak lr, warm-up, total steps, weight decay, clipping
norm) enter as arrays (`hyperparameters`), so the jitted train step takes them as traced arguments:
runs that differ only in them (a resume with a longer schedule, an lr sweep, the tests) share one
compiled program and the persistent compilation cache. Adam's b1 and b2 stay Python constants: traced,
(1 - b1) would be rounded from float32 instead of float64 and change every update's last bits.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import traverse_util

from posattn.errors import ConfigError

# optimizer.mu_dtype: Adam's first moment in float32 or in bfloat16 (half its bytes; the second moment
# nu stays float32, as optax keeps it: its small values would lose most of their bits in bfloat16)
MU_DTYPES = {"float32": None, "bfloat16": jnp.bfloat16}


def hyperparameters(opt_cfg, total_steps: int) -> dict[str, np.ndarray]:
    """{"lr", "warmup_steps", "total_steps", "weight_decay", "grad_clip"}: `opt_cfg`'s numbers as scalars
    (float32; the step counts int32), the traced arguments of `make_optimizer` and `learning_rate`."""
    return {
        "lr": np.float32(opt_cfg.lr),
        "warmup_steps": np.int32(opt_cfg.warmup_steps),
        "total_steps": np.int32(total_steps),
        "weight_decay": np.float32(opt_cfg.weight_decay),
        "grad_clip": np.float32(opt_cfg.grad_clip or 0),
    }


def learning_rate(hyper: dict, step: jax.Array) -> jax.Array:
    """lr(t): linear from 0 to lr over W = min(warmup_steps, total_steps) steps, then cosine decay to 0 at
    T = max(total_steps, W + 1): lr * 0.5 * (1 + cos(pi * min(t - W, T - W) / (T - W))).

    The float32 operations of optax.warmup_cosine_decay_schedule(0, lr, W, T), in its order (whose Python
    checks refuse traced step counts); equal to it within 1 ulp, as XLA compiles a division by a constant
    T - W differently from one by a traced value.
    """
    lr = hyper["lr"]
    warmup = jnp.minimum(hyper["warmup_steps"], hyper["total_steps"])
    decay = (jnp.maximum(hyper["total_steps"], warmup + 1) - warmup).astype(jnp.float32)
    ramp = (0.0 - lr) * (1 - jnp.clip(step, 0, warmup) / jnp.maximum(warmup, 1)) + lr
    decayed = jnp.minimum(step - warmup, decay)
    cosine = lr * (0.5 * (1 + jnp.cos(jnp.pi * decayed / decay)))
    return jnp.where(step < warmup, ramp, cosine)


def decay_mask(params):
    """True for the leaves that weight decay applies to: those named `kernel`."""
    flat = traverse_util.flatten_dict(params)
    return traverse_util.unflatten_dict({path: path[-1] == "kernel" for path in flat})


def moment_dtype(opt_cfg):
    """The dtype of Adam's first moment mu that `opt_cfg.mu_dtype` names (`MU_DTYPES`); None for
    "float32": optax's default, mu in the parameters' dtype (float32), the program of before the field.
    A config without the field (a caller's own) is "float32"."""
    name = opt_cfg.get("mu_dtype", "float32")
    if name not in MU_DTYPES:
        raise ConfigError(
            f"optimizer.mu_dtype={name!r}: give one of {', '.join(map(repr, MU_DTYPES))}"
        )
    return MU_DTYPES[name]


def make_optimizer(opt_cfg, hyper: dict) -> optax.GradientTransformation:
    """Global-norm clipping (left out when `opt_cfg.grad_clip` is 0) followed by AdamW on `learning_rate`,
    its numbers from `hyper` (`hyperparameters`, concrete or traced); b1, b2 and the first moment's dtype
    (`moment_dtype`) from `opt_cfg`.

    The optimiser state's structure does not depend on `hyper`: one built from any `hyper` initialises
    (and restores) the state that one built inside the jitted step from traced `hyper` updates.
    """
    adamw = optax.adamw(
        learning_rate=lambda count: learning_rate(hyper, count),
        b1=float(opt_cfg.b1),
        b2=float(opt_cfg.b2),
        weight_decay=hyper["weight_decay"],
        mask=decay_mask,
        mu_dtype=moment_dtype(opt_cfg),
    )
    if opt_cfg.grad_clip and opt_cfg.grad_clip > 0:
        return optax.chain(optax.clip_by_global_norm(hyper["grad_clip"]), adamw)
    return adamw
