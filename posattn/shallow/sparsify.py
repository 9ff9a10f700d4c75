"""Token sparsification (LWLC23, Section 4) at test time and at training time.

At test time (`at="test"`) one model per seed is trained on full token lists, and its test set is
evaluated after removing k tokens per sample by each policy (`posattn.shallow.removal`). At training
time (`at="train"`) a model is trained for every (policy, k), each training sample losing k tokens by
the policy at every step, and evaluated on the test set sparsified the same way: the paper's claim that
removing irrelevant or noisy tokens lowers the sample complexity is about training.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from posattn.errors import ConfigError
from posattn.shallow import grid, metrics, removal, train
from posattn.shallow.config import REMOVAL_POLICIES as POLICIES
from posattn.shallow.config import ModelConfig, SGDConfig, TokenConfig
from posattn.shallow.data import Tokens

AT = ("test", "train")


def sparsification_curve(
    key: jax.Array, params: dict, test: Tokens, cfg: ModelConfig, policy: str, ks: jax.Array
) -> dict:
    """`metrics.evaluate` on `test` after removing k tokens per sample by `policy`, for every k in ks
    (one k at a time: the attention maps of a whole test set are the memory)."""
    score_BxL = removal.removal_scores(key, policy, test, params, cfg)
    return jax.lax.map(
        lambda k: metrics.evaluate(params, test, cfg, removal.keep_mask(score_BxL, k)), ks
    )


def _runs(key, cell, ks, *, tokens, model, sgd, policies, at):
    params0, batches, test, k_sgd = grid.draw_run(key, cell, tokens, model, sgd)
    k_policy = jax.random.fold_in(key, 1)  # the same tie-breaking draw for every policy
    params = train.train(params0, k_sgd, batches, cell.T, model, sgd)  # on full token lists
    if at == "test":
        return {p: sparsification_curve(k_policy, params, test, model, p, ks) for p in policies}
    # at="train": the full-list model is every policy's k = 0
    full = jax.tree.map(lambda a: a[None], metrics.evaluate(params, test, model))
    out = {}
    for p in policies:
        sgd_p = dataclasses.replace(sgd, train_policy=p)

        def trained_at(k, sgd_p=sgd_p, p=p):
            params = train.train(params0, k_sgd, batches, cell.T, model, sgd_p, k)
            keep_BxL = removal.keep_mask(
                removal.removal_scores(k_policy, p, test, params, model), k
            )
            return metrics.evaluate(params, test, model, keep_BxL)

        rest = jax.lax.map(trained_at, ks[1:])  # ks[0] = 0 by the caller's contract
        out[p] = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), full, rest)
    return out


def sparsification_runs(
    keys_R,
    ks,
    cells: grid.Cell | None = None,
    *,
    tokens: TokenConfig,
    model: ModelConfig,
    sgd: SGDConfig,
    policies: tuple[str, ...] = POLICIES,
    at: str = "test",
) -> dict:
    """Removal curves for every seed (and every cell of `cells`, a Cell of vectors; None = the configs'
    own cell): {policy: {"test_hinge", "test_error", "attention_mass"} of (R, K) arrays, or (cells, R, K)
    with `cells`, where ks may then be (cells, K), one list of removal counts per cell}. Every policy sees
    the same initial models, training and test sets; at="test" trains one model per seed on full token
    lists, at="train" one per (policy, k > 0), the first k being 0 (the model trained on full lists)."""
    if at not in AT:
        raise ConfigError(f"at={at!r}: choose one of {AT}")
    if at == "train" and np.any(np.asarray(ks)[..., 0] != 0):
        raise ConfigError(
            f"ks={np.asarray(ks).tolist()}: at='train' needs k = 0 first (the unsparsified model)"
        )
    for p in policies:
        removal.check_policy(p, model)
    return _sparsification_runs(
        keys_R,
        jnp.asarray(ks),
        cells,
        tokens=tokens,
        model=model,
        sgd=sgd,
        policies=tuple(policies),
        at=at,
    )


@functools.partial(jax.jit, static_argnames=("tokens", "model", "sgd", "policies", "at"))
def _sparsification_runs(keys_R, ks, cells, *, tokens, model, sgd, policies, at) -> dict:
    one = functools.partial(_runs, tokens=tokens, model=model, sgd=sgd, policies=policies, at=at)
    over_seeds = lambda cell, ks: jax.vmap(one, in_axes=(0, None, None))(keys_R, cell, ks)
    if cells is None:
        return over_seeds(grid.base_cell(tokens, model, sgd), ks)
    ks_CxK = jnp.broadcast_to(ks, (cells.N.shape[0], ks.shape[-1]))
    return jax.lax.map(lambda c_k: over_seeds(*c_k), (cells, ks_CxK))
