"""Issue 50, amendment 2, part 1 (docs/shallow_vit_results.md, pre-registered before its runs): how
hard the data model itself is, apart from any network. The baseline: the mean of a sample's L tokens,
x_bar = (1/L) sum_l x_l, classified by sign(w . x_bar) with w the ridge least-squares fit to the +-1
labels, w = (X^T X + ridge I)^-1 X^T y (no intercept: the two classes are mirror images). Its N* per
alpha_* row is read as the search reads the ViT's (`regime_search.screen`): success = zero test error on
500 fresh samples, N* where the success rate over seeds first reaches 0.5 on the row's N grid.

Where this N* is at the grid's floor wherever the ViT's is, the mean token alone separates the classes
from a handful of samples (its signal, (n_* - n_#) / L along mu_1 - mu_2, is fixed per sample while its
noise shrinks as 1/sqrt(L)): the search's failure is then the data model's, not the network's.
"""

import functools

import jax
import jax.numpy as jnp

from posattn.papers.lwlc23 import regime_search
from posattn.shallow.config import TokenConfig
from posattn.shallow.data import sample

RIDGE = 1e-3
N_TEST = 500


@functools.partial(jax.jit, static_argnames=("tokens", "N"))
def test_errors(key: jax.Array, n_star, *, tokens: TokenConfig, N: int) -> jax.Array:
    """How many of N_TEST fresh samples the ridge least-squares classifier of the mean token, fit on N
    samples drawn from `key`, gets wrong (a run succeeds at 0)."""
    k_train, k_test = jax.random.split(key)
    train, test = (sample(k, tokens, n, n_star=n_star) for k, n in ((k_train, N), (k_test, N_TEST)))
    X_Nxd, Xt_Mxd = train.x_BxLxd.mean(1), test.x_BxLxd.mean(1)
    w_d = jnp.linalg.solve(X_Nxd.T @ X_Nxd + RIDGE * jnp.eye(tokens.d), X_Nxd.T @ train.y_B)
    return jnp.sum(jnp.sign(Xt_Mxd @ w_d) != test.y_B)


def screen(setting: regime_search.Setting, seeds: int = regime_search.SEEDS, seed: int = 0) -> dict:
    """The baseline's rows on `setting`'s screening grid (the same alpha_* rows, N grids and seeds as
    `regime_search.screen`): per row its success rates and N* ("below" / "above" when censored)."""
    keys = jax.random.split(jax.random.key(seed), seeds)
    rows = []
    for n_star in setting.n_stars():
        rate = [
            float(
                jnp.mean(
                    jax.vmap(lambda k: test_errors(k, n_star, tokens=setting.tokens, N=N) == 0)(
                        keys
                    )
                )
            )
            for N in setting.row_grid(n_star)
        ]
        rows.append(regime_search.row(setting, n_star, rate))
    return {"setting": setting.name, "rows": rows}
