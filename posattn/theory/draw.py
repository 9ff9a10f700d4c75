"""What a run of the theory regime draws from its key, checked and laid out for the compiled chunks.

Every run draws the same things from its key (`draw_run`, with the streams of `posattn.theory.keys`):
its task, its start, its training and test samples; a caller may give its own training set and test
set (or test sampler) instead. The arrays a caller gives are checked here before anything compiles
(`check_samples`, `check_callers_data`, `check_start`). The run drivers (`posattn.theory.gd`,
`posattn.theory.grid`) compile these draws into their programs (`posattn.theory.programs`).
"""

import jax
import jax.numpy as jnp

from posattn.errors import ConfigError, check_sign_labels
from posattn.theory import fused
from posattn.theory.config import GDConfig, TheoryConfig
from posattn.theory.data import Task, check_task, make_task, sample
from posattn.theory.keys import run_keys
from posattn.theory.model import check_params, init_params
from posattn.theory.step import init_state, make_batch


def check_samples(samples, cfg: TheoryConfig, what: str, runs: int | None = None) -> None:
    """ConfigError unless `samples` is a pair (X (n, D, d), y (n,)) of `cfg`'s D and d (with a leading
    axis of `runs` on both, for `fit_seeds`) whose labels are -1 or +1 (read where y is concrete:
    `errors.check_sign_labels`)."""
    if not isinstance(samples, (tuple, list)) or len(samples) != 2:
        raise ConfigError(f"{what}= is a pair (X, y) of arrays, not a {type(samples).__name__}")
    lead, runs_ = ((), "") if runs is None else ((runs,), f"{runs}, ")
    X, y = jnp.shape(samples[0]), jnp.shape(samples[1])
    k = len(lead)
    if len(X) != k + 3 or X[:k] != lead or X[k + 1 :] != (cfg.D, cfg.d) or y != X[: k + 1]:
        raise ConfigError(
            f"{what}: X {X} and y {y} must be ({runs_}n, D, d) = ({runs_}n, {cfg.D}, {cfg.d}) "
            f"and ({runs_}n{',' if runs is None else ''})"
        )
    check_sign_labels(samples[1], f"{what}'s y")


def _samples(X, y, cfg: TheoryConfig, what: str):
    """Caller's samples (X (n, D, d), y (n,)) as float arrays, or a ConfigError naming the shapes."""
    check_samples((X, y), cfg, what)
    X = jnp.asarray(X)
    return X, jnp.asarray(y, X.dtype)


def check_callers_data(cfg: TheoryConfig, train, test, task, runs: int | None = None) -> None:
    """The caller's arrays of a run checked before anything compiles (`check_samples`), and a training
    set refused without the problem that made it: the test set is drawn from `task`, or from the run
    key's task when it is None, which is another problem than the one that made the caller's X (its
    w* nearly orthogonal: test errors worse than chance)."""
    if train is not None:
        check_samples(train, cfg, "train", runs)
        if task is None and test is None:
            raise ConfigError(
                "train= without task= or test=: the test set would come from the task of the "
                "run's key, not the one that made X: pass task= (the Task that made X) or "
                "test= (its test set, or a sampler(key, n))"
                if runs is None
                else "train= without test=: the test sets would come from the tasks of the keys, "
                "not the ones that made X: pass test= (arrays, or a sampler(key, n))"
            )
    if test is not None and not callable(test):
        check_samples(test, cfg, "test", runs)


def check_start(cfg: TheoryConfig, task: Task | None, params, runs: int | None = None) -> None:
    """ConfigError unless the given task and parameters (of each run, with `runs`) have `cfg`'s shapes:
    another config's would index patches that do not exist, or fail deep inside the compiled step."""
    one = (lambda tree: tree) if runs is None else (lambda tree: jax.tree.map(lambda a: a[0], tree))
    if task is not None:
        check_task(cfg, one(task))
    if params is not None:
        check_params(one(params), cfg.D, cfg.d)


def draw_start(key, cfg: TheoryConfig, gd: GDConfig, task: Task | None = None, params=None):
    """(task, params) of the run of `key`: the given ones, or drawn from its "task" and "init" streams."""
    keys = run_keys(key)
    task = make_task(keys["task"], cfg) if task is None else task
    params = init_params(keys["init"], cfg, gd, task.w_star) if params is None else params
    return task, params


def draw_run(
    key,
    cfg: TheoryConfig,
    gd: GDConfig,
    *,
    n_train: int | None = None,
    shards: int = 1,
    task: Task | None = None,
    params=None,
    train=None,
    test=None,
):
    """Everything a run draws from its key: (params, train, test, sample key, task).

    `task` and `params` default to draws from `key` (pass them for transfer or a shared start). The
    training set has `n_train` samples, by default N for the empirical risk and none otherwise (the
    other risks draw fresh samples or need none), from the key's "train" stream; the test set has
    `gd.n_test`, from its "test" stream (`posattn.theory.keys.run_keys`). `train` (X, y) and `test`
    ((X, y), or a jittable sampler(key, n) -> (X, y) called with the "test" key and `gd.n_test`) replace
    the draws with the caller's. Both sets are padded to a multiple of `shards`.
    """
    keys = run_keys(key)
    task, params = draw_start(key, cfg, gd, task, params)
    if train is not None:
        if gd.risk != "empirical":
            raise ConfigError(
                f"train= is the training set of the empirical risk (E); risk={gd.risk!r} "
                "draws its own samples: pass risk='empirical'"
            )
        train = _samples(*train, cfg, "train")
    else:
        n_train = (gd.N if gd.risk == "empirical" else 0) if n_train is None else n_train
        train = sample(keys["train"], cfg, task, n_train)
    if test is None:
        test = sample(keys["test"], cfg, task, gd.n_test)
    elif callable(test):
        test = _samples(*test(keys["test"], gd.n_test), cfg, "the test sampler's samples")
    else:
        test = _samples(*test, cfg, "test")
    return params, make_batch(*train, shards), make_batch(*test, shards), keys["train"], task


def lay_out(run, gd: GDConfig, shards: int = 1):
    """`draw_run`'s run with its training set, if any, laid out once for the one-pass step of (E) that
    the chunks take on it (`posattn.theory.fused`): as drawn for the CPU kernel, else one block of
    tiles per device (`fused.tiled`)."""
    params, train, *rest = run
    if train.X.shape[0] and not fused.uses_kernel(train.X.dtype, gd.implementation):
        train = fused.tiled(*train, shards)
    return (params, train, *rest)


def with_state(run, optimizer, hyper: dict):
    """A laid-out run with its parameters replaced by the training state (`step.init_state`)."""
    params, *rest = run
    return (init_state(params, optimizer, hyper), *rest)


def draw_seed(
    run, *, cfg: TheoryConfig, gd: GDConfig, optimizer, test_sampler=None, shards: int = 1
):
    """A `fit_seeds` run (key, hyperparameters, train, test, task, params: None where drawn) drawn
    (`draw_run`, the test set by `test_sampler` where given), laid out for `shards` devices and started
    (`with_state`)."""
    key, hyper, train, test, task, params = run
    test = test_sampler or test
    run = draw_run(key, cfg, gd, shards=shards, task=task, params=params, train=train, test=test)
    return with_state(lay_out(run, gd, shards), optimizer, hyper)
