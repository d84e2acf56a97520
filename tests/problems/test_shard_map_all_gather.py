from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shard_tutorial import get_problem, shard_map_all_gather, usable_device_count


@given(hnp.arrays(np.int32, st.integers(0, 40), elements=st.integers(-1000, 1000)))
def test_integer_outer_products_are_exact(x):
    y = shard_map_all_gather(jnp.asarray(x))
    assert y.shape == (len(x), len(x))
    assert y.dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(y), np.outer(x, x))


@pytest.mark.parametrize("length", [1, 5, 12, 13, 32])
def test_the_rows_are_split_over_the_devices(length, device_count):
    y = shard_map_all_gather(jnp.arange(length, dtype=jnp.float32))
    assert tuple(y.sharding.spec)[:1] == ("data",)
    devices = usable_device_count(length, device_count)
    assert len(y.sharding.device_set) == devices
    assert {shard.data.shape for shard in y.addressable_shards} == {(length // devices, length)}


def test_an_empty_vector_gives_an_empty_product():
    y = shard_map_all_gather(jnp.zeros(0, jnp.int32))
    assert (y.shape, y.dtype) == ((0, 0), jnp.int32)


@pytest.mark.parametrize(
    ("mistake", "words"),
    [
        ("no gather", "each device multiplied its block by itself only"),
        ("tiled=False", "all_gather with tiled=False stacks the blocks"),
        ("wrong axis", "gathered along the wrong axis"),
    ],
)
def test_the_classic_mistakes_are_explained(mistake, words):
    problem = get_problem("shard_map_all_gather")
    case = next(c for c in problem.cases if c.label.startswith("length 64"))
    x = case.args[0]
    blocks = np.split(x, 8)
    received = {
        "no gather": np.concatenate([np.outer(b, b) for b in blocks]),
        "tiled=False": np.concatenate([b[:, None] * x.reshape(1, 8, 8) for b in blocks]),
        "wrong axis": np.concatenate([b[:, None] * x.reshape(8, 8) for b in blocks]),
    }[mistake]
    assert words in problem.diagnose(case, received)


@pytest.mark.parametrize(
    ("x", "error", "words"),
    [
        (jnp.ones((4, 2)), ValueError, ["x", "1-D", "(4, 2)"]),
        (jnp.array([True, False]), TypeError, ["x", "bool"]),
        (3.0, TypeError, ["x", "float"]),
    ],
)
def test_bad_input_is_named(x, error, words):
    with pytest.raises(error) as info:
        shard_map_all_gather(x)
    for word in words:
        assert word in str(info.value)
