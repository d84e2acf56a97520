from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shard_tutorial import shard_map_psum, usable_device_count


@given(hnp.arrays(np.int32, st.integers(0, 50), elements=st.integers(-1000, 1000)))
def test_integer_sums_are_exact(x):
    total = shard_map_psum(jnp.asarray(x))
    assert total.shape == ()
    assert total.dtype == jnp.int32
    assert int(total) == int(x.astype(np.int64).sum())


@given(hnp.arrays(np.float32, st.integers(0, 50), elements=st.floats(-1e3, 1e3, width=32)))
def test_float_sums_match_a_precise_sum(x):
    total = float(shard_map_psum(jnp.asarray(x)))
    assert math.isclose(total, math.fsum(x.tolist()), rel_tol=1e-5, abs_tol=1e-2)


@pytest.mark.parametrize("length", [1, 5, 12, 32, 13])
def test_every_device_used_holds_the_global_total(length, device_count):
    x = np.arange(length, dtype=np.int32)
    total = shard_map_psum(jnp.asarray(x))
    assert tuple(total.sharding.spec) == ()
    assert len(total.addressable_shards) == usable_device_count(length, device_count)
    for shard in total.addressable_shards:
        assert int(shard.data) == x.sum()


def test_seed_tutorial_figure():
    assert int(shard_map_psum(jnp.arange(32))) == 496


@pytest.mark.parametrize(
    ("x", "error", "words"),
    [
        (jnp.ones((4, 2)), ValueError, ["x", "1-D", "(4, 2)"]),
        (3.0, TypeError, ["x", "float"]),
        ((1, 2, 3), TypeError, ["x", "tuple"]),
    ],
)
def test_bad_input_is_named(x, error, words):
    with pytest.raises(error) as info:
        shard_map_psum(x)
    for word in words:
        assert word in str(info.value)
