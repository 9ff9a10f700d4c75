"""The update step of the image trainer: one AdamW step on an augmented global batch (`make_train_step`),
and the numbers it takes as traced arguments (`step_hyperparameters`). `posattn.vision.train` jits it
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


def make_train_step(setup: Setup):
    """(state, batch, hyper) -> (state, metrics): one AdamW step on the augmented global batch (un-jitted);
    `hyper` is `step_hyperparameters(setup.config)`, as arrays.

    The key of step t is fold_in(key(seed), t + 1) (0 is the init key): a pure function of the step.
    """
    config, num_classes = setup.config, setup.info.num_classes
    grad_fn = jax.value_and_grad(setup.loss_fn, has_aux=True)

    def step(state, batch, hyper):
        tx = optim.make_optimizer(config.optimizer, hyper)
        key = jax.random.fold_in(jax.random.key(hyper["seed"]), state["step"] + 1)
        aug_key, mix_key, drop_key = jax.random.split(key, 3)
        images = setup.training_inputs(aug_key, batch["image"])
        labels = jax.nn.one_hot(batch["label"], num_classes, dtype=jnp.float32)
        if setup.augment.mixup_alpha > 0:
            images, labels = augment.mixup(mix_key, images, labels, setup.augment.mixup_alpha)
        (loss, (logits, batch_stats)), grads = grad_fn(
            state["params"], state["batch_stats"], images, labels, drop_key, True
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
