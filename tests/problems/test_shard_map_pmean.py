from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shard_tutorial import get_problem, shard_map_pmean, usable_device_count


@given(hnp.arrays(np.float32, st.integers(1, 50), elements=st.floats(-1e3, 1e3, width=32)))
def test_centres_on_the_mean_of_the_whole_array(x):
    y = shard_map_pmean(jnp.asarray(x))
    assert y.shape == x.shape
    assert y.dtype == jnp.float32
    centred = x.astype(np.float64) - x.astype(np.float64).mean()
    np.testing.assert_allclose(np.asarray(y), centred, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("length", [1, 5, 12, 13, 32])
def test_the_output_is_split_like_the_input(length, device_count):
    y = shard_map_pmean(jnp.arange(length, dtype=jnp.float32))
    assert tuple(y.sharding.spec) == ("data",)
    assert len(y.sharding.device_set) == usable_device_count(length, device_count)


def test_blocks_with_different_means_share_one_mean():
    # The block means of 0..15 on 8 devices range from 0.5 to 14.5; the mean is 7.5.
    np.testing.assert_array_equal(shard_map_pmean(jnp.arange(16.0)), np.arange(16.0) - 7.5)


def test_each_block_centred_on_its_own_mean_is_explained():
    problem = get_problem("shard_map_pmean")
    case = next(c for c in problem.cases if c.label.startswith("length 16"))
    x = case.args[0]
    own = np.concatenate([b - b.mean() for b in np.split(x, 8)]).astype(np.float32)
    assert "Each of 8 blocks was centred on its own mean" in problem.diagnose(case, own)


@pytest.mark.parametrize(
    ("x", "error", "words"),
    [
        (jnp.ones((4, 2)), ValueError, ["x", "1-D", "(4, 2)"]),
        (jnp.zeros(0), ValueError, ["x", "at least one element"]),
        (jnp.arange(4), TypeError, ["x", "floating", "int32"]),
        (3.0, TypeError, ["x", "float"]),
        ([1.0, 2.0], TypeError, ["x", "list"]),
    ],
)
def test_bad_input_is_named(x, error, words):
    with pytest.raises(error) as info:
        shard_map_pmean(x)
    for word in words:
        assert word in str(info.value)
