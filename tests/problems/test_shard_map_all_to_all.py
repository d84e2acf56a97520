from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shard_tutorial import get_problem, shard_map_all_to_all, usable_device_count

shapes = st.tuples(st.integers(0, 24), st.integers(0, 24))


@given(hnp.arrays(np.int32, shapes, elements=st.integers(-1000, 1000)))
def test_transposes_exactly(x):
    y = shard_map_all_to_all(jnp.asarray(x))
    assert (y.shape, y.dtype) == (x.shape[::-1], jnp.int32)
    got = np.asarray(y)
    for i in range(x.shape[1]):  # row i of the transpose is column i of x
        np.testing.assert_array_equal(got[i], x[:, i])


@pytest.mark.parametrize("shape", [(1, 1), (5, 10), (12, 18), (16, 8), (8, 32), (7, 8)])
def test_the_rows_of_the_transpose_are_split(shape, device_count):
    y = shard_map_all_to_all(jnp.ones(shape))
    assert tuple(y.sharding.spec)[:1] == ("data",)
    devices = usable_device_count(math.gcd(*shape), device_count)
    assert len(y.sharding.device_set) == devices
    assert {s.data.shape for s in y.addressable_shards} == {(shape[1] // devices, shape[0])}


def test_blocks_transposed_locally_are_explained():
    problem = get_problem("shard_map_all_to_all")
    case = next(c for c in problem.cases if c.label.startswith("16 by 8"))
    local = np.concatenate([b.T for b in np.split(case.args[0], 8)])
    assert "Each of 8 devices transposed its own block of rows" in problem.diagnose(case, local)


@pytest.mark.parametrize(
    ("x", "error", "words"),
    [
        (jnp.ones(4), ValueError, ["x", "2-D", "(4,)"]),
        (jnp.ones((2, 2, 2)), ValueError, ["x", "2-D", "(2, 2, 2)"]),
        (jnp.ones((2, 2), bool), TypeError, ["x", "bool"]),
        ("ab", TypeError, ["x", "str"]),
    ],
)
def test_bad_input_is_named(x, error, words):
    with pytest.raises(error) as info:
        shard_map_all_to_all(x)
    for word in words:
        assert word in str(info.value)
