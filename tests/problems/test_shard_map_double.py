from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shard_tutorial import shard_map_double, usable_device_count

# XLA's CPU backend flushes subnormal floats to zero, as most accelerators do.
FLOATS = hnp.arrays(
    np.float32,
    st.integers(0, 40),
    elements=st.floats(-1e6, 1e6, width=32, allow_subnormal=False),
)


@given(FLOATS)
def test_doubles_every_element(x):
    np.testing.assert_array_equal(shard_map_double(jnp.asarray(x)), x * 2)


@given(hnp.arrays(np.int32, st.integers(0, 40), elements=st.integers(-(2**20), 2**20)))
def test_integers_become_float32(x):
    out = shard_map_double(jnp.asarray(x))
    assert out.dtype == jnp.float32
    np.testing.assert_array_equal(out, x.astype(np.float32) * 2)


@pytest.mark.parametrize("length", [1, 5, 8, 12, 16, 13])
def test_each_device_holds_its_own_doubled_block(length, device_count):
    x = np.arange(length, dtype=np.float32)
    out = shard_map_double(jnp.asarray(x))
    used = usable_device_count(length, device_count)
    assert tuple(out.sharding.spec) == ("data",)
    assert len(out.addressable_shards) == used
    block = length // used
    for shard in out.addressable_shards:
        assert shard.data.shape == (block,)
        np.testing.assert_array_equal(shard.data, x[shard.index] * 2)


def test_composes_with_jit():
    x = jnp.arange(24.0)
    np.testing.assert_array_equal(jax.jit(shard_map_double)(x), np.arange(24.0) * 2)


@pytest.mark.parametrize(
    ("x", "error", "words"),
    [
        (jnp.ones((2, 3)), ValueError, ["x", "1-D", "(2, 3)"]),
        (jnp.float32(3.0), ValueError, ["x", "1-D", "0-D"]),
        ([1.0, 2.0], TypeError, ["x", "list", "jnp.asarray"]),
        (None, TypeError, ["x", "NoneType"]),
        (np.array(["a", "b"]), TypeError, ["x", "numbers", "<U1"]),
        (jnp.array([True, False]), TypeError, ["x", "numbers", "bool"]),
    ],
)
def test_bad_input_is_named(x, error, words):
    with pytest.raises(error) as info:
        shard_map_double(x)
    for word in words:
        assert word in str(info.value)
