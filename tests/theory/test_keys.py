"""The named key streams derive the bits every committed result was drawn with (the legacy
`PRNGKey(0)` streams, written out), and one run's streams are independent of each other."""

import jax
import numpy as np
import pytest

from posattn.errors import ConfigError
from posattn.papers.jsl22.reproduce import CLAIMS
from posattn.theory import keys

BITS = lambda k: np.asarray(jax.random.key_data(k)).tolist()


def test_streams_of_seed_0_are_the_legacy_bits():
    streams = keys.run_keys(keys.seed_key(0))
    assert BITS(keys.seed_key(0)) == [0, 0]
    assert BITS(streams["task"]) == [1797259609, 2579123966]
    assert BITS(streams["test"]) == [2467461003, 3840466878]
    assert BITS(streams["final_test"]) == [2716826189, 292468403]  # was fold_in(PRNGKey(0), 7)
    assert BITS(keys.claim_keys(keys.seed_key(0), CLAIMS)["figure2"]) == [2285895361, 433833334]


def test_streams_are_typed_and_distinct():
    streams = keys.run_keys(keys.seed_key(3))
    assert all(jax.dtypes.issubdtype(k.dtype, jax.dtypes.prng_key) for k in streams.values())
    assert len({tuple(BITS(k)) for k in streams.values()}) == len(streams)
    seeds = keys.consecutive_seed_keys(3, 2)
    assert BITS(seeds[0]) == BITS(keys.seed_key(3)) and BITS(seeds[1]) == BITS(keys.seed_key(4))


@pytest.mark.parametrize("seed", [2**63, -(2**63) - 1, 1.5, True])
def test_a_seed_jax_cannot_take_is_refused_in_one_line(seed):
    with pytest.raises(ConfigError, match=r"give an integer in \[-2\*\*63, 2\*\*63\)"):
        keys.seed_key(seed)
