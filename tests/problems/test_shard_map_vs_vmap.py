from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shard_tutorial import shard_map_vs_vmap, usable_device_count

MATRICES = hnp.arrays(
    np.float32,
    st.tuples(st.integers(0, 20), st.integers(0, 6)),
    elements=st.floats(-100, 100, width=32),
)


@given(MATRICES)
def test_both_rows_are_the_per_row_sum_of_squares(x):
    out = np.asarray(shard_map_vs_vmap(jnp.asarray(x)))
    expected = (x.astype(np.float64) ** 2).sum(axis=1)
    assert out.shape == (2, x.shape[0])
    np.testing.assert_allclose(out[0], expected, rtol=1e-5, atol=1e-3)
    # The two paths may add a row's squares in a different order: equal up to rounding.
    np.testing.assert_allclose(out[0], out[1], rtol=1e-6)


@pytest.mark.parametrize("rows", [1, 3, 8, 12, 16])
def test_output_is_split_by_row_over_the_usable_devices(rows, device_count):
    out = shard_map_vs_vmap(jnp.ones((rows, 3)))
    assert tuple(out.sharding.spec) == (None, "data")
    assert len(out.sharding.device_set) == usable_device_count(rows, device_count)
    for shard in out.addressable_shards:
        assert shard.data.shape == (2, rows // usable_device_count(rows, device_count))


@pytest.mark.parametrize(
    ("x", "error", "words"),
    [
        (jnp.ones(4), ValueError, ["x", "2-D", "(B, d)", "(4,)"]),
        (jnp.ones((2, 3, 4)), ValueError, ["x", "2-D", "(2, 3, 4)"]),
        ([[1.0, 2.0]], TypeError, ["x", "list"]),
        (np.array([[object()]]), TypeError, ["x", "numbers", "object"]),
    ],
)
def test_bad_input_is_named(x, error, words):
    with pytest.raises(error) as info:
        shard_map_vs_vmap(x)
    for word in words:
        assert word in str(info.value)
