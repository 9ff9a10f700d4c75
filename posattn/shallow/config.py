"""Configuration of LWLC23's shallow-ViT regime: the token data, the model of Eq. (1), and SGD.

Three frozen dataclasses (hashable, so they can be static arguments of `jax.jit`), each validated once
at construction with a message naming the bad field and what would be right:
- `TokenConfig`: the data model (label-relevant, confusion and label-irrelevant tokens, token noise);
- `ModelConfig`: Eq. (1) of LWLC23 (or its attention-free comparison) and the proper initial model;
- `SGDConfig`: mini-batch SGD with a constant step on the hinge loss, and how it is evaluated.
Every choice LWLC23 leaves open is listed under "Decisions" in docs/shallow_vit_results.md.
"""

import dataclasses
import math
from typing import Literal

from posattn.errors import ConfigError, check_field_types

ATTENTIONS = ("softmax", "none")
SUCCESS = ("error", "hinge")
NOISY_KINDS = ("any", "irrelevant")
REMOVAL_POLICIES = ("random", "irrelevant", "noisy", "attention")  # posattn.shallow.removal
TWO_E = 2 * math.e  # Theorem 1 of LWLC23 needs alpha_* >= alpha_# / c with c < 1 / (2e)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


@dataclasses.dataclass(frozen=True)
class TokenConfig:
    """The data model of LWLC23 (Section 2): L tokens of dimension d, built on M orthonormal patterns.

    mu_1 is the discriminative pattern of y = +1, mu_2 that of y = -1, mu_3..mu_M are label-irrelevant;
    they are the first M standard basis vectors of R^d. A sample has n_* = round(alpha_star L) tokens
    of its label's pattern, n_# = round(alpha_conf L) of the other one (confusion), the rest irrelevant
    patterns drawn uniformly; its label is the majority vote of the discriminative tokens.

    Attributes:
      d: token dimension (d >= M). M: number of patterns (>= 3: two discriminative, one irrelevant).
      L: tokens per sample.
      alpha_star: label-relevant fraction alpha_*; alpha_conf: confusion fraction alpha_#.
      tau: bound on the token noise, ||z|| <= tau (Gaussian N(0, tau^2/d I) clipped to norm tau).
      noisy_tokens: tokens per sample (at random positions) whose noise bound is `noisy_tau` instead of
        tau: the "noisy tokens" of the token-sparsification experiment.
      noisy_tau: their noise bound (the patterns are sqrt(2) apart: beyond sqrt(2)/2 a noisy token can lie
        nearer another pattern than its own).
      noisy_kind: "any" = noisy tokens of any type; "irrelevant" = only label-irrelevant tokens are noisy.
      theorem_margin: require alpha_* >= 2e alpha_#, the condition of Theorem 1, on the token counts
        (n_* >= 2e n_#).
    """

    d: int = 16
    M: int = 6
    L: int = 30
    alpha_star: float = 0.3
    alpha_conf: float = 1 / 30
    tau: float = 0.5
    noisy_tokens: int = 0
    noisy_tau: float = 2.0
    noisy_kind: Literal["any", "irrelevant"] = "any"
    theorem_margin: bool = True

    def __post_init__(self):
        check_field_types(self)
        _check(
            self.M >= 3,
            f"M={self.M}: need at least 3 patterns (two discriminative, one irrelevant)",
        )
        _check(
            self.d >= self.M,
            f"d={self.d} must be >= M={self.M}: the M patterns are orthonormal in R^d",
        )
        _check(self.L >= 2, f"L={self.L}: need at least 2 tokens per sample")
        _check(
            0 < self.alpha_star <= 1,
            f"alpha_star={self.alpha_star} is a fraction: it must lie in (0, 1]",
        )
        _check(
            0 <= self.alpha_conf < 1,
            f"alpha_conf={self.alpha_conf} is a fraction: it must lie in [0, 1)",
        )
        _check(
            self.n_star > self.n_conf,
            f"alpha_star={self.alpha_star}, alpha_conf={self.alpha_conf}: the label is the majority vote, "
            f"so round(alpha_star L)={self.n_star} must exceed round(alpha_conf L)={self.n_conf}",
        )
        _check(
            self.n_star + self.n_conf <= self.L,
            f"alpha_star + alpha_conf = {self.alpha_star + self.alpha_conf:.3g}: at most L={self.L} tokens "
            f"can be discriminative, so the fractions must sum to at most 1",
        )
        # On the counts the data use: the fractions of a sample are n_*/L and n_#/L, not the rounded inputs.
        _check(
            not self.theorem_margin or self.n_star >= TWO_E * self.n_conf,
            f"alpha_star={self.alpha_star}, alpha_conf={self.alpha_conf}: n_*={self.n_star} < 2e n_# = "
            f"{TWO_E * self.n_conf:.4g} tokens of L={self.L}; Theorem 1 of LWLC23 needs alpha_* >= 2e alpha_#: "
            f"raise alpha_star, lower alpha_conf or set theorem_margin=False",
        )
        _check(self.tau >= 0, f"tau={self.tau}: the noise bound must be >= 0")
        _check(
            0 <= self.noisy_tokens <= self.L,
            f"noisy_tokens={self.noisy_tokens} must lie in [0, L={self.L}]",
        )
        _check(self.noisy_tau >= 0, f"noisy_tau={self.noisy_tau}: the noise bound must be >= 0")
        _check(
            self.noisy_kind in NOISY_KINDS,
            f"noisy_kind={self.noisy_kind!r}: choose one of {NOISY_KINDS}",
        )
        _check(
            self.noisy_kind == "any" or self.noisy_tokens <= self.n_irrelevant,
            f"noisy_tokens={self.noisy_tokens} > {self.n_irrelevant} label-irrelevant tokens: with "
            f"noisy_kind='irrelevant' lower noisy_tokens or alpha_star, alpha_conf",
        )

    @property
    def n_star(self) -> int:
        """n_*: label-relevant tokens per sample."""
        return round(self.alpha_star * self.L)

    @property
    def n_conf(self) -> int:
        """n_#: confusion tokens per sample."""
        return round(self.alpha_conf * self.L)

    @property
    def n_irrelevant(self) -> int:
        """Label-irrelevant tokens per sample, L - n_* - n_#."""
        return self.L - self.n_star - self.n_conf


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Eq. (1) of LWLC23 and its proper initial model (Section 3).

    Attributes:
      attention: "softmax" = the ViT of Eq. (1); "none" = the attention-free network of Proposition 1,
        F(X) = 1/|S| sum_l a^T ReLU(W_O W_V x_l).
      m_a: rows of W_V (value width); m_b: rows of W_Q and W_K; m: rows of W_O (hidden neurons).
        m_a >= d and m_b >= d, so that the initial embeddings can be orthonormal on all of R^d.
      scale_logits: divide the attention logits by sqrt(m_b) (Eq. (1) does not).
      sigma: ||W_V mu_j - p_j|| of the initial model; delta: ||W_K mu_j - q_j||, ||W_Q mu_j - r_j||.
      w_o_std: standard deviation of the Gaussian entries of W_O at initialisation.
      per_token_output: False = one output vector a for every token (a_i = +-1/sqrt(m), half each);
        True = Eq. (1)'s a_(l), one vector per token position l, entries drawn uniformly from
        {+1/sqrt(m), -1/sqrt(m)} at initialisation and fixed (never trained).
    """

    attention: Literal["softmax", "none"] = "softmax"
    m_a: int = 16
    m_b: int = 16
    m: int = 16
    scale_logits: bool = False
    sigma: float = 0.1
    delta: float = 0.1
    w_o_std: float = 0.1
    per_token_output: bool = False

    def __post_init__(self):
        check_field_types(self)
        _check(
            self.attention in ATTENTIONS,
            f"attention={self.attention!r}: choose one of {ATTENTIONS}",
        )
        _check(
            self.m >= 2 and self.m % 2 == 0,
            f"m={self.m}: need an even number of neurons, half with a_i = +1/sqrt(m), half -1/sqrt(m)",
        )
        _check(
            self.m_a >= 1 and self.m_b >= 3,
            f"m_a={self.m_a}, m_b={self.m_b}: need m_a >= 1, m_b >= 3",
        )
        _check(
            self.sigma >= 0 and self.delta >= 0,
            f"sigma={self.sigma}, delta={self.delta}: initial-model errors must be >= 0",
        )
        _check(self.w_o_std > 0, f"w_o_std={self.w_o_std} must be positive")

    def check_widths(self, tokens: TokenConfig) -> None:
        """The initial embeddings are orthonormal on R^d: they need m_a >= d and m_b >= d."""
        _check(
            self.m_a >= tokens.d and self.m_b >= tokens.d,
            f"m_a={self.m_a}, m_b={self.m_b}: both must be >= d={tokens.d} for the orthonormal initial "
            f"embeddings of the proper initial model",
        )


@dataclasses.dataclass(frozen=True)
class SGDConfig:
    """Mini-batch SGD with a constant step eta on the hinge loss max(0, 1 - y F(X)) (Theorem 1).

    The default is the paper's algorithm: one step size eta for W_Q, W_K, W_V and W_O, and
    T = ceil(t_scale / (alpha_* eta)) iterations (Theorem 1: T = Theta(1 / (alpha_* eta))).

    Attributes:
      N: training samples; batch: samples per step, drawn uniformly with replacement from the N.
      steps: SGD iterations T; None = ceil(t_scale / (alpha_* eta)) at each run's alpha_*.
      t_scale: the constant of T = t_scale / (alpha_* eta).
      eta: constant step size.
      eta_attention: a separate step size for W_Q and W_K (None = eta, the paper's). SGD with step eta on
        W' = W / c is SGD with step c^2 eta on W, so this is eta on a rescaled parametrisation.
      train_remove: tokens removed from every training sample (token sparsification at training time;
        0 = none); train_policy: which (`posattn.shallow.removal`), decided per mini-batch.
      eval_every: steps between two history entries (history runs only).
      n_test: fresh test samples of each run.
      success: a run succeeds when its test error is 0 ("error") or its test hinge loss <= eps ("hinge").
      eps: the hinge threshold of success="hinge".
    """

    N: int = 200
    batch: int = 8
    steps: int | None = None
    t_scale: float = 12.0
    eta: float = 0.2
    eta_attention: float | None = None
    train_remove: int = 0
    train_policy: Literal["random", "irrelevant", "noisy", "attention"] = "random"
    eval_every: int = 10
    n_test: int = 500
    success: Literal["error", "hinge"] = "error"
    eps: float = 0.01

    def __post_init__(self):
        check_field_types(self)
        _check(self.N >= 1, f"N={self.N}: the number of training samples must be positive")
        _check(self.batch >= 1, f"batch={self.batch} must be positive")
        _check(
            self.steps is None or self.steps >= 1,
            f"steps={self.steps} must be positive (or None = t_scale / (alpha_* eta))",
        )
        _check(self.t_scale > 0, f"t_scale={self.t_scale} must be positive")
        _check(self.eta > 0, f"eta={self.eta}: the step size must be positive")
        _check(
            self.eta_attention is None or self.eta_attention > 0,
            f"eta_attention={self.eta_attention}: the step size must be positive (or None = eta)",
        )
        _check(self.train_remove >= 0, f"train_remove={self.train_remove} must be >= 0")
        _check(
            self.train_policy in REMOVAL_POLICIES,
            f"train_policy={self.train_policy!r}: choose one of {REMOVAL_POLICIES}",
        )
        _check(self.eval_every >= 1, f"eval_every={self.eval_every} must be positive")
        _check(self.n_test >= 1, f"n_test={self.n_test} must be positive")
        _check(self.success in SUCCESS, f"success={self.success!r}: choose one of {SUCCESS}")
        _check(self.eps > 0, f"eps={self.eps} must be positive")
