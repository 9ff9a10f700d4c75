"""Configuration of JSL22's theory regime: the data of Assumption 1 and the model of Eq. (T).

`TheoryConfig` fixes the learning *problem* (data distribution and model); `GDConfig` fixes how it is
optimised. Both are frozen (hashable, so they can be static arguments of `jax.jit`) and validated once,
at construction, with a message that says what is wrong and what would be right.
"""

import dataclasses
import math
from typing import Literal

import jax

from posattn.errors import ConfigError, check_field_types
from posattn.theory.datasets import REGISTRY

PARTITIONS = ("grid", "random")
NOISES = ("orthogonal", "isotropic")
ACTIVATIONS = ("cubic", "quintic")
RISKS = ("empirical", "population_mc", "population_exact")
IMPLEMENTATIONS = ("auto", "xla", "cpu_kernel")  # how (E)'s one-pass step runs: `theory.fused`
POPULATION_METHODS = (
    "multiset",
    "general",
)  # how "population_exact" computes (P): `theory.population`
FINAL_TEST_CHUNK = 10_000  # fresh test samples drawn at a time (`evaluation.test_errors`)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


@jax.tree_util.register_static  # a pytree without leaves: passes through jax.jit and jax.vmap as is
@dataclasses.dataclass(frozen=True)
class TheoryConfig:
    """Data distribution (Definition 2.1, Assumption 1 of JSL22) and model (Eq. (T)).

    Attributes:
      D: number of patches; C: size of each set S_l, so L = D / C sets; d: patch dimension.
      q: probability that a patch outside the signal set carries a feature (+-w* with q/2 each).
      noise_std: s, the standard deviation of the patch noise xi_j; None = 1/sqrt(d) (JSL22 Assumption 1).
      partition: "grid" = k x k blocks of the sqrt(D) x sqrt(D) patch grid (k = sqrt(C)), "random" = a
        random permutation of [D] cut into L sets.
      noise: "orthogonal" = xi ~ N(0, s^2 (I - w* w*^T)) as in the paper, "isotropic" = N(0, s^2 I).
      activation: sigma of Eq. (T): "cubic" z^3, "quintic" z^5 + 0.03 z.
      temperature: divide the attention logits by sqrt(d) as in Eq. (T).
      scale_by_D: multiply the attention output by D as in Eq. (T).
      dataset: "structured" (Assumption 1) or "gaussian_cnn" (the Figure-2 counter-example: i.i.d.
        N(0, I_d) patches labelled by a cubic CNN over the blocks of the grid partition).
      cnn_width: hidden width of the Figure-2 cubic CNN labeller.
      cnn_shared_filter: the CNN's filter w_r is the same at the C positions of a block (True), or drawn
        per position w_{r,k} (False). Eq. (T) has one value vector for every patch, so it can only fit
        the shared form; the `fig2` preset uses it (see presets.py).
    """

    # The defaults are the `small` preset of `posattn.theory.presets` (a run that learns patch
    # association in about 15 s on a CPU); docs/decisions.md says why q = 0.4.
    D: int = 16
    C: int = 4
    d: int = 32
    q: float = 0.4
    noise_std: float | None = None
    partition: Literal["grid", "random"] = "grid"
    noise: Literal["orthogonal", "isotropic"] = "orthogonal"
    activation: Literal["cubic", "quintic"] = "cubic"
    temperature: bool = True
    scale_by_D: bool = True
    dataset: str = "structured"  # a name of posattn.theory.datasets.REGISTRY
    cnn_width: int = 1
    cnn_shared_filter: bool = False

    def __post_init__(self):
        check_field_types(self)
        _check(self.D >= 2, f"D={self.D}: need at least 2 patches")
        _check(
            self.C >= 2,
            f"C={self.C}: a set needs at least 2 patches for patch association to mean "
            f"more than the diagonal",
        )
        _check(
            self.D % self.C == 0,
            f"D={self.D} is not a multiple of C={self.C}: the D patches must split into sets of C",
        )
        _check(self.C < self.D, f"C={self.C} must be smaller than D={self.D} (at least two sets)")
        _check(self.d >= 2, f"d={self.d}: need d >= 2 so that noise orthogonal to w* exists")
        _check(0.0 <= self.q <= 1.0, f"q={self.q} is a probability: it must lie in [0, 1]")
        _check(
            self.noise_std is None or self.noise_std >= 0,
            f"noise_std={self.noise_std} must be >= 0",
        )
        _check(
            self.partition in PARTITIONS,
            f"partition={self.partition!r}: choose one of {PARTITIONS}",
        )
        _check(self.noise in NOISES, f"noise={self.noise!r}: choose one of {NOISES}")
        _check(
            self.activation in ACTIVATIONS,
            f"activation={self.activation!r}: choose one of {ACTIVATIONS}",
        )
        _check(
            self.dataset in REGISTRY, f"dataset={self.dataset!r}: choose one of {tuple(REGISTRY)}"
        )
        _check(self.cnn_width >= 1, f"cnn_width={self.cnn_width} must be >= 1")
        if self.partition == "grid":
            side, k = math.isqrt(self.D), math.isqrt(self.C)
            _check(
                side * side == self.D,
                f"partition='grid' needs D to be a square (a sqrt(D) x sqrt(D) grid); D={self.D} is not",
            )
            _check(
                k * k == self.C and side % k == 0,
                f"partition='grid' needs k x k blocks that tile the {side}x{side} grid: C={self.C} must "
                f"be k^2 with k dividing {side}",
            )
        REGISTRY[self.dataset].check(self)

    @property
    def logit_scale(self) -> float:
        """The factor of A in the softmax of Eq. (T): 1/sqrt(d), or 1 without the temperature."""
        return 1.0 / math.sqrt(self.d) if self.temperature else 1.0

    @property
    def L(self) -> int:
        """Number of sets S_1..S_L."""
        return self.D // self.C

    @property
    def s(self) -> float:
        """Noise standard deviation (s^2 = 1/d unless set, JSL22 Assumption 1)."""
        return 1.0 / math.sqrt(self.d) if self.noise_std is None else float(self.noise_std)


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class GDConfig:
    """Full-batch gradient descent on the empirical risk (E) or the population risk (P) (Section 3).

    Attributes:
      risk: "empirical" = (E) on N fixed samples; "population_mc" = (P) estimated with N fresh samples at
        every step; "population_exact" = (P) computed exactly (`posattn.theory.population`).
      population_method: how "population_exact" enumerates the data, chosen here and never from the
        values of A: "multiset" (A read through its three means, exact while A is three-valued, which
        GD on (P) keeps from A^(0) = a0 I; scales to the paper preset) or "general" (any A, up to
        L 3^(D-C) patterns). See `posattn.theory.population`.
      N: samples of (E), or fresh samples per step of "population_mc".
      steps: GD steps; lr: constant step size eta of v.
      lr_A: constant step size of A; None = lr. The population gradient in A is of order 1/(D sqrt(d))
        of the one in v, so on a laptop-sized run a larger lr_A is what makes phases II-III happen in
        thousands rather than millions of steps (equivalently: GD on A = c B with lr_A = c^2 lr).
      eval_every: steps between two history entries (they are one compiled `lax.scan` apart).
      n_test: size of the fixed test set used in the history; the final test error uses `n_final_test`.
      a0: initial value of A's diagonal, which stays frozen (A^(0) = a0 I; `presets` says why a0 > 0).
        The presets take sqrt(d) of their TheoryConfig; set it with d when changing d.
      v_init: "random" v^(0) ~ N(0, v_std^2 I_d), or "aligned" v^(0) = v_std * sqrt(d) w* (on span(w*)).
      v_std: scale of v^(0).
      implementation: how a step of (E) runs its one pass over the samples (`posattn.theory.fused`):
        "auto" (the CPU kernel for float32 samples on a CPU where it builds, else XLA's tile loop),
        "xla" or "cpu_kernel". Same numbers up to float32 round-off; only the speed differs.

    lr, lr_A, steps and eval_every reach the compiled programs as arguments (`posattn.theory.gd`):
    runs that differ only in them compile once.
    """

    risk: Literal["empirical", "population_mc", "population_exact"] = "empirical"
    population_method: Literal["multiset", "general"] = "multiset"
    # The defaults are the `small` preset's (with TheoryConfig's defaults, d = 32): a0 = sqrt(d) and
    # lr_A >> lr, without which GD never leaves uniform attention (docs/decisions.md).
    N: int = 20_000
    steps: int = 2000
    lr: float = 0.01
    lr_A: float | None = 30.0
    eval_every: int = 50
    n_test: int = 10_000
    n_final_test: int = 100_000
    a0: float = math.sqrt(32)
    v_init: Literal["random", "aligned"] = "random"
    v_std: float = 0.02
    implementation: Literal["auto", "xla", "cpu_kernel"] = "auto"

    def __post_init__(self):
        check_field_types(self)
        _check(self.risk in RISKS, f"risk={self.risk!r}: choose one of {RISKS}")
        _check(
            self.population_method in POPULATION_METHODS,
            f"population_method={self.population_method!r}: choose one of {POPULATION_METHODS}",
        )
        _check(self.N > 0, f"N={self.N}: the number of samples must be positive")
        _check(self.steps > 0, f"steps={self.steps} must be positive")
        _check(self.lr > 0, f"lr={self.lr} must be positive")
        _check(self.lr_A is None or self.lr_A > 0, f"lr_A={self.lr_A} must be positive")
        _check(self.eval_every > 0, f"eval_every={self.eval_every} must be positive")
        _check(
            self.n_test > 0 and self.n_final_test > 0, "n_test and n_final_test must be positive"
        )
        _check(
            self.n_final_test <= FINAL_TEST_CHUNK or self.n_final_test % FINAL_TEST_CHUNK == 0,
            f"n_final_test={self.n_final_test}: the final test draws {FINAL_TEST_CHUNK:,} samples at a "
            f"time, so give at most {FINAL_TEST_CHUNK:,} or a multiple of it",
        )
        _check(
            self.v_init in ("random", "aligned"), f"v_init={self.v_init!r}: 'random' or 'aligned'"
        )
        _check(self.v_std >= 0, f"v_std={self.v_std} must be >= 0")
        _check(
            self.implementation in IMPLEMENTATIONS,
            f"implementation={self.implementation!r}: choose one of {IMPLEMENTATIONS}",
        )
