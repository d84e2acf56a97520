from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shard_tutorial import get_problem, shard_map_psum_scatter, usable_device_count

shapes = st.tuples(st.integers(1, 24), st.integers(1, 24))


@given(hnp.arrays(np.int32, shapes, elements=st.integers(-1000, 1000)))
def test_integer_column_sums_are_exact(x):
    y = shard_map_psum_scatter(jnp.asarray(x))
    assert (y.shape, y.dtype) == ((x.shape[1],), jnp.int32)
    np.testing.assert_array_equal(np.asarray(y), [sum(int(v) for v in col) for col in x.T])


@pytest.mark.parametrize("shape", [(1, 1), (5, 10), (12, 18), (16, 6), (32, 16), (7, 8)])
def test_the_sums_are_split_over_the_devices(shape, device_count):
    y = shard_map_psum_scatter(jnp.ones(shape))
    assert tuple(y.sharding.spec) == ("data",)
    assert len(y.sharding.device_set) == usable_device_count(math.gcd(*shape), device_count)
    np.testing.assert_array_equal(np.asarray(y), np.full(shape[1], shape[0], np.float32))


def test_one_devices_partial_sums_are_explained():
    problem = get_problem("shard_map_psum_scatter")
    case = next(c for c in problem.cases if c.label.startswith("32 rows"))
    x = case.args[0]
    assert "one device's partial sums" in problem.diagnose(case, x[:4].sum(axis=0))
    joined = np.concatenate([b.sum(axis=0) for b in np.split(x, 8)])
    assert "each device's partial sums, joined" in problem.diagnose(case, joined)


@pytest.mark.parametrize(
    ("x", "error", "words"),
    [
        (jnp.ones(4), ValueError, ["x", "2-D", "(4,)"]),
        (jnp.ones((0, 3)), ValueError, ["x", "at least one row", "(0, 3)"]),
        (jnp.ones((3, 0)), ValueError, ["x", "one column", "(3, 0)"]),
        (jnp.ones((2, 2), bool), TypeError, ["x", "bool"]),
        ([[1.0]], TypeError, ["x", "list"]),
    ],
)
def test_bad_input_is_named(x, error, words):
    with pytest.raises(error) as info:
        shard_map_psum_scatter(x)
    for word in words:
        assert word in str(info.value)
