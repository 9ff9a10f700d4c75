"""A NaN in a theory run stops it at the GD step where it appears (fast version of the drill in
drills/faults.py), for one run and for vmapped seeds."""

import jax
import numpy as np
import pytest

from posattn.errors import ConfigError
from posattn.theory import (
    GDConfig,
    TheoryConfig,
    fit,
    programs,
)
from posattn.theory import (
    gd as gd_lib,
)
from posattn.theory import (
    step as step_lib,
)
from posattn.theory.gd import fit_seeds
from posattn.theory.keys import consecutive_seed_keys
from tests.theory import fault_injection

CFG = TheoryConfig(D=16, C=4, d=16, q=0.4)
GD = GDConfig(N=256, steps=23, lr=0.01, lr_A=30.0, a0=4.0, eval_every=10, n_test=256)


@pytest.fixture
def fresh_chunks():
    """The drivers keep their compiled chunks per problem: a chunk compiled before the injection would
    not see it, and one compiled with it must not serve the tests after."""
    programs.make_chunk_fn.cache_clear(), programs._seed_programs.cache_clear()
    yield
    programs.make_chunk_fn.cache_clear(), programs._seed_programs.cache_clear()


@pytest.mark.slow
@pytest.mark.parametrize("seeds", [1, 2])
def test_a_nan_injected_at_a_chosen_step_stops_the_run_there(monkeypatch, fresh_chunks, seeds):
    monkeypatch.setattr(
        step_lib, "risk_and_grad", fault_injection.nan_at_step(step_lib.risk_and_grad, 13)
    )
    seen = []
    with pytest.raises(
        gd_lib.NonFiniteLoss,
        match=r"non-finite loss \(nan\) at GD step 13"
        + (r" \(runs \[0, 1\] of the seeds\)" if seeds > 1 else "")
        + r": GD diverged, lower the step sizes",
    ) as err:
        if seeds == 1:
            fit(jax.random.key(0), CFG, GD, on_eval=seen.append)
        else:
            fit_seeds(consecutive_seed_keys(0, seeds), CFG, GD, on_eval=seen.append)
    assert isinstance(err.value, ConfigError) and "\n" not in str(err.value)
    assert [int(np.ravel(e["step"])[0]) for e in seen] == [
        0,
        10,
    ]  # nothing recorded past the last finite
    assert all(np.isfinite(e["loss"]).all() for e in seen)
