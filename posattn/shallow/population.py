"""The exact population of LWLC23's data model without token noise (tau = 0), and metrics on it.

With tau = 0 a sample is determined, up to the order of its tokens, by its label and by how many of its
n_irr = L - n_* - n_# label-irrelevant tokens carry each of the M - 2 irrelevant patterns. Eq. (1) has
no positional encoding and one output vector a for every token, so token order does not change F(X):
the population is a finite mixture over (label, multiset of irrelevant patterns), with weights
1/2 * multinomial(n_irr; counts) / (M - 2)^n_irr. Population hinge loss, error and attention mass are
weighted sums over that table (checked against sampled estimates in tests/shallow/test_population.py).
"""

import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np

from posattn.errors import ConfigError
from posattn.shallow import grid, metrics, train
from posattn.shallow.config import ModelConfig, SGDConfig, TokenConfig
from posattn.shallow.data import CONFUSION, IRRELEVANT, RELEVANT, Tokens

MAX_ROWS = 500_000  # (label, multiset) rows the table may hold


def table_rows(cfg: TokenConfig) -> int:
    """2 * C(n_irr + M - 3, M - 3): the number of (label, multiset of irrelevant patterns) rows."""
    n_irr = cfg.L - cfg.n_star - cfg.n_conf
    return 2 * math.comb(n_irr + cfg.M - 3, cfg.M - 3)


def check_config(cfg: TokenConfig) -> None:
    """The exact population exists for noiseless tokens and a table that fits in memory."""
    if cfg.tau != 0 or (cfg.noisy_tokens and cfg.noisy_tau != 0):
        raise ConfigError(
            f"tau={cfg.tau}, noisy_tau={cfg.noisy_tau} (noisy_tokens={cfg.noisy_tokens}): the "
            f"exact population needs noiseless tokens; set tau=0 and noisy_tokens=0"
        )
    if table_rows(cfg) > MAX_ROWS:
        raise ConfigError(
            f"L={cfg.L}, M={cfg.M}: the exact population has {table_rows(cfg):,} rows, more than "
            f"{MAX_ROWS:,}; use fewer tokens or patterns"
        )


def check_model(model: ModelConfig) -> None:
    """The table's rows stand for every order of their tokens only when every token has the same a."""
    if model.per_token_output:
        raise ConfigError(
            "per_token_output=True: with an output vector a_(l) per position the order of the "
            "tokens changes F(X), so the exact population (one row per multiset) does not apply; "
            "set per_token_output=False"
        )


def population_table(cfg: TokenConfig) -> tuple[Tokens, np.ndarray]:
    """Every (label, multiset of irrelevant patterns) as one sample, with its probability.

    Returns (Tokens with K rows, weight_K summing to 1). Tokens are ordered relevant, confusion,
    irrelevant (sorted); order does not change Eq. (1).
    """
    check_config(cfg)
    n_irr = cfg.L - cfg.n_star - cfg.n_conf
    multisets = np.array(
        list(itertools.combinations_with_replacement(range(2, cfg.M), n_irr)), dtype=np.int32
    ).reshape(-1, n_irr)
    counts = np.stack([(multisets == j).sum(1) for j in range(2, cfg.M)], axis=1)
    log_w = (
        math.lgamma(n_irr + 1)
        - np.vectorize(math.lgamma)(counts + 1.0).sum(1)
        - n_irr * math.log(cfg.M - 2)
    )
    weight = np.concatenate([np.exp(log_w), np.exp(log_w)]) / 2
    K = len(multisets)
    y = np.repeat([1.0, -1.0], K).astype(np.float32)
    own = np.where(y > 0, 0, 1)[:, None]
    pattern = np.concatenate(
        [
            np.repeat(own, cfg.n_star, 1),
            np.repeat(1 - own, cfg.n_conf, 1),
            np.concatenate([multisets, multisets]),
        ],
        axis=1,
    )
    kind = np.concatenate(
        [np.full(cfg.n_star, RELEVANT), np.full(cfg.n_conf, CONFUSION), np.full(n_irr, IRRELEVANT)]
    )
    kind = np.broadcast_to(kind, pattern.shape)
    tokens = Tokens(
        jax.nn.one_hot(jnp.asarray(pattern), cfg.d),
        jnp.asarray(y),
        jnp.asarray(kind),
        jnp.asarray(pattern),
        jnp.zeros(pattern.shape, bool),
    )
    return tokens, weight


@functools.partial(jax.jit, static_argnames="model")
def weighted_metrics(params: dict, table: Tokens, weight_K: jax.Array, model: ModelConfig) -> dict:
    """`metrics.evaluate` of every row of `table` (one sample each), averaged with weights `weight_K`."""
    per_row = jax.vmap(
        lambda t: metrics.evaluate(params, jax.tree.map(lambda a: a[None], t), model)
    )(table)
    return {name: (weight_K * per_row[name]).sum() for name in per_row}


def population_metrics(params: dict, cfg: TokenConfig, model: ModelConfig) -> dict:
    """Exact population hinge loss, error and attention mass (tau = 0): weighted sums over the table."""
    check_model(model)
    table, weight = population_table(cfg)
    return weighted_metrics(params, table, jnp.asarray(weight, jnp.float32), model)


def _train_once(key, cell, tokens, model, sgd):
    params, batches, test, k_sgd = grid.draw_run(key, cell, tokens, model, sgd)
    T = train.iterations(sgd, tokens.n_star / tokens.L)
    return params, train.train(params, k_sgd, batches, T, model, sgd), test


def population_check(
    key: jax.Array, clean: TokenConfig, model: ModelConfig, sgd: SGDConfig
) -> dict:
    """One model trained on noiseless tokens (`clean`): exact population metrics beside the estimate on its
    sgd.n_test sampled test samples, at the initial model and after training."""
    check_model(model)
    cell = grid.base_cell(clean, model, sgd)
    params0, params, test = jax.jit(lambda key: _train_once(key, cell, clean, model, sgd))(key)
    out = {}
    evaluate = jax.jit(metrics.evaluate, static_argnames="cfg")
    for when, p in (("init", params0), ("trained", params)):
        exact = population_metrics(p, clean, model)
        sampled = evaluate(p, test, cfg=model)
        out[when] = {
            f"{k}_{src}": float(v)
            for src, m in (("exact", exact), ("sampled", sampled))
            for k, v in m.items()
        }
    out["rows"] = table_rows(clean)
    out["n_test"] = sgd.n_test
    return out
