"""Named problem + optimiser settings of the theory regime (JSL22 Section 2, with the decisions below).

Decisions beyond the paper (docs/decisions.md, Optimisation), each made so that the paper's claims can be observed on a laptop:
- q = 0.4: in `paper` (D=36, C=4) the best generalised linear model then errs 13.4% of the time
  (Theorem 3.1's >= 1/8 needs q (D - C) >= ~12; q (D-C) = 2C gives 8.1%); in `small` it keeps
  q (D - C) = 4.8 > C (Assumption 2) with 0.5% label noise.
- a0 = sqrt(d) (A's frozen diagonal): at a0 = 0 every row of A is the same, the data are exchangeable
  within the partition, and the population gradient in A is exactly 0, so patch association can never
  start; a positive diagonal breaks that symmetry (tested in tests/theory/test_gd.py).
- lr_A >> lr: the population gradient in A is ~1/(D sqrt(d)) of that in v (see GDConfig.lr_A).
- phases (the default of `experiments.theory`): the `paper` problem (6x6 grid, 2x2 blocks, q = 0.4, so
  the best GLM errs 13.3%) at d = 16, N = 20,000 and 800 steps, so that the proof sketch's story shows in
  under a minute on a CPU: a test-error plateau at the GLM's level while v aligns, A separating, then the
  fall of the risk with patch association kept (`small` reaches its GLM floor of 3.6% at step 50 while A
  already moves, so its phases overlap; `paper` shows them but takes ~100 s). a0 = sqrt(d) = 4.
- fig2 (Figure 2, Gaussian patches): the CNN labeller uses one filter for the C positions of a block
  (`cnn_shared_filter`): Eq. (T) has a single value vector v for all patches, so with a different filter
  per position it cannot fit the labels (29% test error measured at d=16); with the shared filter it
  reaches ~10%. lr = 0.001 (at 0.01 the cubic blows up on these unit-variance patches: NaN by step
  120); a0 = sqrt(d), as in the structured presets: at a0 = 0 every row of S is uniform, so every row
  of A gets the same gradient on any data and the rows stay equal off the diagonal: A could then never
  match the blocks, and "structure not learnt" would hold by construction.
"""

import dataclasses
import math

from ml_collections import config_dict

from posattn import configs
from posattn.errors import ConfigError, check_choice
from posattn.theory.config import GDConfig, TheoryConfig

# The sample sizes N of the (E) runs drawn beside (P) (`overlay_N`, `posattn.papers.jsl22.overlay`).
DEFAULT_NS = (100, 1_000, 10_000, 100_000)

PRESETS = {
    "small": (
        TheoryConfig(D=16, C=4, d=32, q=0.4),
        GDConfig(N=20_000, steps=2000, lr=0.01, lr_A=30.0, a0=math.sqrt(32), eval_every=50),
    ),
    "paper": (
        TheoryConfig(D=36, C=4, d=64, q=0.4),
        # lr = 0.003: once A concentrates, the pre-activations grow by up to D/C and lr = 0.01 for v
        # makes GD unstable in phase III.
        GDConfig(N=20_000, steps=2500, lr=0.003, lr_A=100.0, a0=8.0, eval_every=50),
    ),
    "phases": (
        TheoryConfig(D=36, C=4, d=16, q=0.4),
        GDConfig(N=20_000, steps=800, lr=0.003, lr_A=100.0, a0=4.0, eval_every=25),
    ),
    "fig2": (
        TheoryConfig(D=16, C=4, d=16, dataset="gaussian_cnn", cnn_width=1, cnn_shared_filter=True),
        GDConfig(N=20_000, steps=1000, lr=0.001, lr_A=30.0, a0=math.sqrt(16), eval_every=20),
    ),
}


DEFAULT = "phases"  # the preset of `python -m posattn.experiments.theory` without --config


def get_preset(name: str) -> tuple[TheoryConfig, GDConfig]:
    """(TheoryConfig, GDConfig) of a name of `PRESETS`; ConfigError naming the nearest for another."""
    return PRESETS[check_choice(name, PRESETS, "preset")]


def preset_config(name: str = DEFAULT) -> config_dict.ConfigDict:
    """The theory binary's config of a preset: the schema its config files (`tpu_configs/theory.py`) build on.

    Fields: preset, seed (the run's), seeds (seed, seed + 1, ... vmapped), split_samples (seeds fewer
    than the devices also split each seed's samples over the devices they leave: `gd.fit_seeds`), overlay_N (with
    risk="population_exact": the N of the (E) runs beside it), theory.* (`TheoryConfig`) and gd.*
    (`GDConfig`), each overridable as `--config.FIELD=VALUE`, e.g. `--config.theory.D=36`.
    """
    theory, gd = get_preset(name)
    return config_dict.ConfigDict(
        {
            "preset": name,
            "seed": 0,
            "seeds": 1,
            "split_samples": False,
            "overlay_N": DEFAULT_NS,
            "theory": configs.dataclass_section(theory),
            "gd": configs.dataclass_section(gd),
        }
    )


def smoke(config: config_dict.ConfigDict) -> None:
    """The `quick` smoke run of a preset, in place: N = 2,000 samples and at most 200 steps."""
    config.gd.N = min(config.gd.N, 2000)
    config.gd.steps = min(config.gd.steps, 200)


# A theory config file names its preset (`preset`) and the fields it changes; the preset gives the rest.
SCHEMA = configs.Schema(
    "a theory config (posattn.theory.presets.preset_config)",
    lambda fields: preset_config(fields.get("preset") or DEFAULT),
    smoke,
    "theory",
)


def configs_from(config: config_dict.ConfigDict) -> tuple[TheoryConfig, GDConfig]:
    """The (TheoryConfig, GDConfig) of a config of `preset_config`, validated on construction; ConfigError
    for a config of another shape (e.g. an image config file given to the theory binary)."""
    missing = [
        k for k in ("preset", "seed", "seeds", "overlay_N", "theory", "gd") if k not in config
    ]
    if missing:
        raise ConfigError(
            f"the config has no {', '.join(missing)}: a theory config comes from "
            f"tpu_configs/theory.py[:PRESET] (fields preset, seed, seeds, overlay_N, theory.*, "
            f"gd.*), not from a file with fields {', '.join(sorted(config.keys()))}"
        )
    sections = {}
    for name, cls in (("theory", TheoryConfig), ("gd", GDConfig)):
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(config[name].keys()) - fields)
        if unknown:
            raise ConfigError(
                f"{name}.{unknown[0]} is not a field of {cls.__name__} (its fields: "
                f"{', '.join(sorted(fields))})"
            )
        sections[name] = cls(**config[name].to_dict())
    return sections["theory"], sections["gd"]


def overlay_sizes(config: config_dict.ConfigDict) -> list[int]:
    """overlay_N of a config of `preset_config` as positive integers, or a ConfigError."""
    sizes = list(config.overlay_N)
    if any(not isinstance(n, int) or n < 1 for n in sizes):
        raise ConfigError(
            f"overlay_N={config.overlay_N}: give positive integers, e.g. "
            f"--config.overlay_N='(100, 1000)'"
        )
    return sizes
