"""Named random streams of the theory regime: every key a run, a sweep or a claim draws from.

One place says which key feeds which draw, so two binaries cannot disagree on it and no caller writes a
literal `fold_in(key, 7)`. Keys are typed (`jax.random.key`); with the default threefry implementation
`jax.random.key(s)` holds the same bits as the legacy `jax.random.PRNGKey(s)`, and `split`/`fold_in`
derive the same bits from either, so these streams reproduce every number drawn before they existed.

A run of `posattn.theory.gd.fit(key, cfg, gd)` draws from `run_keys(key)` (`draw.draw_run`), so its
data can be rebuilt outside the library:

    streams = run_keys(key)
    task = data.make_task(streams["task"], cfg)
    params0 = model.init_params(streams["init"], cfg, gd, task.w_star)
    X_train, y_train = data.sample(streams["train"], cfg, task, gd.N)  # (E)'s training set
    X_test, y_test = data.sample(streams["test"], cfg, task, gd.n_test)  # the history's test set

and `fit(key, cfg, gd, train=(X_train, y_train), test=(X_test, y_test))` is the same run. `fit_seeds`
and the sweeps draw each run's from its own key the same way (a sweep's training set has the grid's
largest size, of which a run at size N takes the first N); "population_mc" draws step t's fresh
samples from `fold_in(streams["train"], t)`; the final test error, `evaluation.test_errors` on
`streams["final_test"]`.
"""

import jax

from posattn.errors import check_seed

FINAL_TEST = (
    7  # fold_in index of a run's final test set: the fresh samples of `evaluation.test_errors`
)
GLM_REFERENCE = (
    8  # fold_in index of the samples of the phase-I GLM reference (`glm.phase_one_reference`)
)


def seed_key(seed: int) -> jax.Array:
    """The typed key of an integer seed; ConfigError for one JAX cannot take (`errors.check_seed`)."""
    return jax.random.key(check_seed(seed))


def seed_keys(seed: int, n: int) -> jax.Array:
    """(n,) keys of the runs of a sweep (a grid of seeds), all from one integer seed."""
    return jax.random.split(seed_key(seed), n)


@jax.jit  # called from Python, the split and the two folds compile one small program each
def run_keys(key: jax.Array) -> dict[str, jax.Array]:
    """The independent streams of one run of Eq. (T).

    "task": the partition and w* (`data.make_task`); "init": v^(0) (`model.init_params`); "train": the
    training set of (E), and the fresh samples of "population_mc" folded in per step; "test": the fixed
    test set of the history; "final_test": the fresh samples of the final test error; "glm_reference":
    the samples of the GLM error that phase I is measured against.
    """
    task, init, train, test = jax.random.split(key, 4)
    return {
        "task": task,
        "init": init,
        "train": train,
        "test": test,
        "final_test": jax.random.fold_in(key, FINAL_TEST),
        "glm_reference": jax.random.fold_in(key, GLM_REFERENCE),
    }


def claim_keys(key: jax.Array, names) -> dict[str, jax.Array]:
    """One key per claim of the reproduction report, the i-th claim's folded in as i (in order)."""
    return {name: jax.random.fold_in(key, i) for i, name in enumerate(names)}


def construction_keys(key: jax.Array) -> dict[str, jax.Array]:
    """Theorem 3.2's construction: the key itself draws the task; its fresh test samples fold in 1."""
    return {"task": key, "final_test": jax.random.fold_in(key, 1)}


def transfer_keys(key: jax.Array) -> dict[str, jax.Array]:
    """Theorem 5.1's transfer: the pre-training run is `key`'s; the downstream feature w' folds in 1 and
    the integer seed of the downstream runs folds in 2."""
    return {
        "pretrain": key,
        "downstream": jax.random.fold_in(key, 1),
        "seeds": jax.random.fold_in(key, 2),
    }


def glm_keys(key: jax.Array) -> dict[str, jax.Array]:
    """Theorem 3.1's GLM baseline: task, training set, fit, test set and the majority-link oracle."""
    task, train, fit, test, oracle = jax.random.split(key, 5)
    return {"task": task, "train": train, "fit": fit, "test": test, "oracle": oracle}


def consecutive_seed_keys(first: int, n: int) -> jax.Array:
    """(n,) keys of the seeds first, first + 1, ..., each run's own `seed_key` (as a lone run draws)."""
    return jax.numpy.stack([seed_key(s) for s in range(first, first + n)])
