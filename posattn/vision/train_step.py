"""The update step of the image trainer: one AdamW step on an augmented global batch (`make_train_step`),
its gradient optionally accumulated over micro-batches (`accumulated_gradients`), and the numbers it
takes as traced arguments (`step_hyperparameters`). `posattn.vision.train` jits it
for one run, `posattn.vision.seeds` vmaps it over seeds.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax

from posattn.vision import optim
from posattn.vision.data import augment
from posattn.vision.setup import Setup


def step_hyperparameters(config) -> dict[str, np.ndarray]:
    """The numbers of `config` that the train step takes as arguments: the seed and the optimiser's
    (`optim.hyperparameters`), as scalars.

    Traced, not baked into the program: runs that differ only in them (other seeds, a resume with a longer
    total_steps, an lr sweep) reuse one compiled step, in one process or through the persistent
    compilation cache.
    """
    return {
        "seed": np.int32(config.seed),
        **optim.hyperparameters(config.optimizer, config.total_steps),
    }


def micro_batches(x_Bx, k: int):
    """(k, B/k, ...): micro-batch i holds rows i, i + k, i + 2k, ... of the batch. Strided, not
    contiguous: a batch laid out over n devices in contiguous rows (B/n a multiple of k) then gives every
    device B/(k n) rows of each micro-batch, so splitting it moves no data between devices."""
    return x_Bx.reshape(x_Bx.shape[0] // k, k, *x_Bx.shape[1:]).swapaxes(0, 1)


def accumulated_gradients(grad_fn, k: int, state: dict, images, labels, key):
    """(loss, logits_BxK, batch_stats, grads) of one batch as k micro-batches (`micro_batches`) run one
    after another, each holding only its own activations: loss and grads the mean of theirs, the
    logits back in the batch's order, micro-batch i's dropout key fold_in(key, i).

    A lax.scan inside the step rather than optax.MultiSteps: MultiSteps makes every call of the step a
    micro-step, so the step counter (and the batch pipeline) would count micro-batches while the lr
    schedule counts updates, and its accumulators would change the optimizer state that checkpoints
    hold. Here a step is still one update of one global batch: step counter, lr schedule, checkpoints
    and the data order are those of accumulate_steps=1.

    Equal to the one-batch step to float32 rounding where each example's loss depends on that example
    only (the ViTs without dropout: the gradient of a mean is the mean of the micro-batches' gradients).
    Differs: dropout draws other masks (keys per micro-batch); BatchNorm normalises each micro-batch by
    its own statistics, and the running statistics take one update from the micro-batches' mean of
    theirs (for the mean the batch's; for the variance the mean within micro-batches, which leaves out
    the spread between their means). The augmentation and mixup or CutMix act on the whole batch before
    it is split, as at k = 1.
    """
    params, batch_stats = state["params"], state["batch_stats"]

    def one(grads_sum, xs):
        i, images_b, labels_b = xs
        (loss, (logits, stats)), grads = grad_fn(
            params, batch_stats, images_b, labels_b, jax.random.fold_in(key, i), True
        )
        return jax.tree.map(jnp.add, grads_sum, grads), (loss, logits, stats)

    zeros = jax.tree.map(jnp.zeros_like, params)
    xs = (jnp.arange(k), micro_batches(images, k), micro_batches(labels, k))
    grads_sum, (loss_k, logits_kxbxK, stats_k) = jax.lax.scan(one, zeros, xs)
    logits_BxK = logits_kxbxK.swapaxes(0, 1).reshape(-1, logits_kxbxK.shape[-1])
    grads = jax.tree.map(lambda g: g / k, grads_sum)
    return loss_k.mean(), logits_BxK, jax.tree.map(lambda s: s.mean(0), stats_k), grads


def make_train_step(setup: Setup):
    """(state, batch, hyper) -> (state, metrics): one AdamW step on the augmented global batch (un-jitted);
    `hyper` is `step_hyperparameters(setup.config)`, as arrays.

    The key of step t is fold_in(key(seed), t + 1) (0 is the init key): a pure function of the step.
    With config.optimizer.accumulate_steps = k > 1 the gradient is `accumulated_gradients`' over k
    micro-batches of the augmented (and mixed) batch; still one AdamW update per step.
    """
    config, num_classes = setup.config, setup.info.num_classes
    grad_fn = jax.value_and_grad(setup.loss_fn, has_aux=True)
    accumulate_steps = config.optimizer.get("accumulate_steps", 1)

    def step(state, batch, hyper):
        tx = optim.make_optimizer(config.optimizer, hyper)
        key = jax.random.fold_in(jax.random.key(hyper["seed"]), state["step"] + 1)
        aug_key, mix_key, drop_key = jax.random.split(key, 3)
        images = setup.training_inputs(aug_key, batch["image"])
        labels = jax.nn.one_hot(batch["label"], num_classes, dtype=jnp.float32)
        images, labels = augment.mix_batch(mix_key, images, labels, setup.augment)
        if accumulate_steps == 1:  # the program of before accumulate_steps, unchanged
            (loss, (logits, batch_stats)), grads = grad_fn(
                state["params"], state["batch_stats"], images, labels, drop_key, True
            )
        else:
            loss, logits, batch_stats, grads = accumulated_gradients(
                grad_fn, accumulate_steps, state, images, labels, drop_key
            )
        updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
        params = optax.apply_updates(state["params"], updates)
        new_state = {
            "step": state["step"] + 1,
            "params": params,
            "batch_stats": batch_stats,
            "opt_state": opt_state,
        }
        metrics = {
            "loss": loss,
            "accuracy": jnp.mean(jnp.argmax(logits, -1) == jnp.argmax(labels, -1)),
            "grad_norm": optax.tree.norm(grads),
            "param_norm": optax.tree.norm(params),  # non-finite when an update broke the parameters
            "lr": optim.learning_rate(hyper, state["step"]),
        }
        return new_state, metrics

    return step
