from __future__ import annotations

import itertools

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shard_tutorial import get_problem, shard_map_axis_index, usable_device_count


@given(hnp.arrays(np.int32, st.integers(0, 50), elements=st.integers(-1000, 1000)))
def test_integer_running_sums_are_exact(x):
    y = shard_map_axis_index(jnp.asarray(x))
    assert (y.shape, y.dtype) == (x.shape, jnp.int32)
    assert np.asarray(y).tolist() == list(itertools.accumulate(int(v) for v in x))


@pytest.mark.parametrize("length", [0, 1, 5, 12, 13, 32])
def test_the_output_is_split_like_the_input(length, device_count):
    y = shard_map_axis_index(jnp.ones(length))
    assert tuple(y.sharding.spec) == ("data",)
    assert len(y.sharding.device_set) == usable_device_count(length, device_count)
    np.testing.assert_array_equal(np.asarray(y), np.arange(1, length + 1))


def test_local_cumsums_alone_are_explained():
    problem = get_problem("shard_map_axis_index")
    case = next(c for c in problem.cases if c.label.startswith("length 16"))
    local = np.concatenate([np.cumsum(b) for b in np.split(case.args[0], 8)])
    assert "Each of 8 blocks has its own cumulative sum" in problem.diagnose(case, local)


@pytest.mark.parametrize(
    ("x", "error", "words"),
    [
        (jnp.ones((4, 2)), ValueError, ["x", "1-D", "(4, 2)"]),
        (jnp.array([True]), TypeError, ["x", "bool"]),
        (None, TypeError, ["x", "NoneType"]),
    ],
)
def test_bad_input_is_named(x, error, words):
    with pytest.raises(error) as info:
        shard_map_axis_index(x)
    for word in words:
        assert word in str(info.value)
