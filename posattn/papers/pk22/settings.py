"""The settings of PK22's measurements (`Settings`: PK22's code's values by default, each validated at
construction), the smoke run's (`QUICK`) and a how_vits_work config's (`settings_from`).
"""

import dataclasses

from posattn.analysis import (
    eigensolvers,
    frequency_noise,
    hessian,
    landscape,
    objective,
)
from posattn.errors import ConfigError

HESSIAN_LOOPS = ("auto", "host", "program")


@dataclasses.dataclass(frozen=True)
class Settings:
    """How much of each measurement to run, and how. Defaults: PK22's values where it gives them (the
    modules of `posattn.analysis` cite them)."""

    # mini-batches of the Hessian spectrum: the units its intervals resample (docs/how_vits_work.md, Time)
    hessian_batches: int = 8
    hessian_batch_size: int = 16  # PK22
    hessian_iterations: int = eigensolvers.MAX_ITERATIONS
    hessian_tolerance: float = eigensolvers.TOLERANCE
    top_k: int = eigensolvers.TOP_K
    # hessian.METHODS: "lanczos" (ARPACK, from the host), not PK22's "power" iteration, which stalls between
    # eigenvalues near +a and -a (docs/decisions.md, Analysis tools)
    hessian_method: str = "lanczos"
    weight_decay: float = (
        objective.WEIGHT_DECAY
    )  # of the L2 term of the Hessian's and landscape's objective
    # objective.L2_FORMS: PK22's sum of norms for the landscape; for the Hessian, whose form PK22 did not
    # publish, the squared norm, since the Hessian of w ||theta_t|| is w / ||theta_t|| on a tensor's
    # sphere and a tensor near zero then fills the top of the spectrum (docs/how_vits_work.md, Decisions)
    landscape_l2_form: str = "norms"
    hessian_l2_form: str = "squared"
    # "host": the power iterations driven from Python, one compiled HVP step; "program": one program for
    # all mini-batches; "auto": `hessian.host_loop_is_faster` (host on a CPU for convolutional models).
    # Lanczos always runs from the host ("program" refused)
    hessian_loop: str = "auto"
    mixup_alpha: float = objective.MIXUP_ALPHA  # 0: no mixup
    label_smoothing: float = objective.LABEL_SMOOTHING
    feature_images: int = 128  # the first test images, for the Fourier and variance tools
    eval_batch_size: int = (
        256  # test images per pass of the forward program (the last batch padded)
    )
    test_images: int = (
        0  # the first test images of the accuracy and noise tools; 0: the whole split
    )
    noise_eps: float = frequency_noise.EPS  # in units of the normalised inputs
    noise_band: str = "pk22"  # frequency_noise.BANDS
    landscape_normalisation: str = "pk22"  # landscape.NORMALISATIONS
    # points per axis: 9 (step 0.25), not PK22's 21, for time (docs/how_vits_work.md, Time). The claims
    # read theta*, (0.5, 0) and (1, 0), points of every 4k + 1 grid, from directions drawn apart from the
    # grid: the numbers are the same on any such grid, the figure is coarser; 21 gives PK22's figure
    landscape_grid: int = 9
    # augmented training images the landscape loss averages over, mixed in mini-batches of
    # hessian_batch_size; 0: the whole training split (PK22), rounded down to whole landscape batches
    landscape_images: int = 256
    landscape_batch_size: int = (
        64  # training images per run of the landscape program: its intervals' unit
    )
    landscape_chunk: int = (
        0  # grid points per vmapped chunk; 0: the backend's (`landscape.default_chunk`)
    )
    bootstrap_resamples: int = 2000  # of the 95% percentile intervals (posattn.analysis.bootstrap)
    bootstrap_seed: int = 0

    def __post_init__(self):
        positive = (
            "hessian_batches",
            "hessian_batch_size",
            "hessian_iterations",
            "top_k",
            "feature_images",
            "eval_batch_size",
            "landscape_batch_size",
            "bootstrap_resamples",
        )
        for name in positive:
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"{name}={getattr(self, name)} must be a positive integer")
        for name in ("landscape_images", "test_images", "bootstrap_seed", "landscape_chunk"):
            if int(getattr(self, name)) < 0:
                raise ConfigError(f"{name}={getattr(self, name)} must be >= 0")
        if self.landscape_grid < 5 or self.landscape_grid % 4 != 1:
            raise ConfigError(
                f"landscape_grid={self.landscape_grid} must be 4k + 1 >= 5 (5, 9, .., 21): the "
                "grid of [-1, 1] needs theta* and x = 0.5, where the rise is read, on it; PK22: 21"
            )
        for name in ("hessian_tolerance", "noise_eps"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name}={getattr(self, name)} must be positive")
        if self.landscape_batch_size % self.hessian_batch_size:
            raise ConfigError(
                f"landscape_batch_size={self.landscape_batch_size} must be a multiple of "
                f"hessian_batch_size={self.hessian_batch_size}: its images are mixed up in "
                "mini-batches of that size"
            )
        if self.landscape_images % self.landscape_batch_size:
            raise ConfigError(
                f"landscape_images={self.landscape_images} must be a multiple of "
                f"landscape_batch_size={self.landscape_batch_size} (or 0: the whole training split)"
            )
        # the units the intervals resample (`bootstrap.interval` needs 2): refused here, before the work
        for name in ("hessian_batches", "feature_images"):
            if getattr(self, name) < 2:
                raise ConfigError(
                    f"{name}={getattr(self, name)} must be >= 2: the 95% intervals resample them"
                )
        if self.test_images == 1 or 0 < self.landscape_images < 2 * self.landscape_batch_size:
            raise ConfigError(
                f"test_images={self.test_images}, landscape_images={self.landscape_images}: "
                "give 0 (the whole split) or at least 2 test images and 2 landscape batches "
                f"(2 x landscape_batch_size={self.landscape_batch_size}): the intervals "
                "resample them"
            )
        for name in ("weight_decay", "mixup_alpha"):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"{name}={getattr(self, name)} must be >= 0")
        if not 0 <= self.label_smoothing < 1:
            raise ConfigError(f"label_smoothing={self.label_smoothing} must be in [0, 1)")
        for name, choices in (
            ("landscape_l2_form", objective.L2_FORMS),
            ("hessian_l2_form", objective.L2_FORMS),
            ("noise_band", frequency_noise.BANDS),
            ("landscape_normalisation", landscape.NORMALISATIONS),
            ("hessian_loop", HESSIAN_LOOPS),
            ("hessian_method", hessian.METHODS),
        ):
            if getattr(self, name) not in choices:
                raise ConfigError(
                    f"{name}={getattr(self, name)!r} must be one of {', '.join(choices)}"
                )
        if self.hessian_method == "lanczos" and self.hessian_loop == "program":
            raise ConfigError(
                "hessian_loop='program' with hessian_method='lanczos': Lanczos runs from the "
                "host; give hessian_loop='auto' or hessian_method='power'"
            )


# the smoke run: two Hessian mini-batches of 8 images and two landscape batches (the fewest units an
# interval can resample), two batches of test images on any dataset. Its Hessian keeps PK22's tolerance
# and cap, by Lanczos: measured on its four models (2026-11-28, seed 0), all 40 eigenvalues converged
# (residuals <= 1.8e-4) in 37-52 HVPs per mini-batch, the Hessian 0.7-2.7 s per model; power iteration
# (hessian_method="power") met PK22's rule in every run (6 to 94 iterations) but 13 of 40 converged:
# stalls between eigenvalues near +a and -a, which no cap fixes (docs/decisions.md, Analysis tools)
QUICK = Settings(
    hessian_batches=2,
    hessian_batch_size=8,
    feature_images=32,
    eval_batch_size=128,
    test_images=256,
    landscape_grid=5,
    landscape_images=32,
    landscape_batch_size=16,
    bootstrap_resamples=500,
)


def settings_from(config) -> Settings:
    """The `Settings` of a how_vits_work config: `QUICK` if config.quick else the defaults, with every
    field of the config that is a field of `Settings` and is set (not None) in its place."""
    base = QUICK if config.quick else Settings()
    overrides = {
        f.name: config[f.name]
        for f in dataclasses.fields(Settings)
        if f.name in config and config[f.name] is not None
    }
    return dataclasses.replace(base, **overrides)
