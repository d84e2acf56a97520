from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import DATA_AXIS, data_mesh, place, usable_device_count


@given(st.integers(0, 10_000), st.integers(1, 64))
def test_usable_count_is_the_largest_divisor_available(length, available):
    count = usable_device_count(length, available)
    assert 1 <= count <= available
    assert length % count == 0
    assert all(length % larger for larger in range(count + 1, available + 1))


def test_defaults_to_the_backends_device_count():
    assert usable_device_count(0) == jax.device_count()
    assert usable_device_count(jax.device_count() * 3) == jax.device_count()


@pytest.mark.parametrize(
    ("length", "available", "message"),
    [(-1, 8, "length must be at least 0, got -1"), (4, 0, "available must be at least 1, got 0")],
)
def test_bad_arguments(length, available, message):
    with pytest.raises(ValueError, match=message):
        usable_device_count(length, available)


@pytest.mark.parametrize("length", [0, 1, 5, 6, 12, 16, 97])
def test_data_mesh_spans_the_first_usable_devices(length, device_count):
    mesh = data_mesh(length)
    used = usable_device_count(length, device_count)
    assert mesh.axis_names == (DATA_AXIS,)
    assert mesh.axis_types == (jax.sharding.AxisType.Explicit,)
    assert list(mesh.devices.flat) == jax.devices()[:used]


def test_data_mesh_is_built_once_per_size():
    assert data_mesh(jax.device_count()) is data_mesh(2 * jax.device_count())


def _assert_laid_out(array, like, sharding):
    assert isinstance(array, jax.Array)
    assert array.sharding == sharding
    np.testing.assert_array_equal(array, like)
    for shard in array.addressable_shards:
        np.testing.assert_array_equal(shard.data, np.asarray(like)[shard.index])


@pytest.mark.parametrize("spec", [P(DATA_AXIS), P()])
@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda a: a, id="numpy"),
        pytest.param(jnp.asarray, id="jax-one-device"),
        pytest.param(
            lambda a: jax.device_put(a, jax.devices()[-1]), id="jax-committed-last-device"
        ),
        pytest.param(
            lambda a: jax.device_put(a, NamedSharding(data_mesh(2), P(DATA_AXIS))),
            id="jax-other-mesh",
        ),
    ],
)
def test_place_gives_what_device_put_gives(make, spec):
    host = np.arange(48, dtype=np.float32).reshape(16, 3)
    sharding = NamedSharding(data_mesh(16), spec)
    placed = place(make(host), sharding)
    _assert_laid_out(placed, host, sharding)
    _assert_laid_out(jax.device_put(make(host), sharding), host, sharding)


def test_place_keeps_an_array_that_is_already_there():
    sharding = NamedSharding(data_mesh(8), P(DATA_AXIS))
    x = jax.device_put(jnp.arange(8), sharding)
    assert place(x, sharding) is x


def test_place_maps_over_pytrees_and_works_under_jit():
    sharding = NamedSharding(data_mesh(8), P(DATA_AXIS))
    tree = {"a": jnp.arange(8.0), "b": [np.ones(8, np.int32)]}
    placed = place(tree, sharding)
    _assert_laid_out(placed["a"], np.arange(8.0), sharding)
    _assert_laid_out(placed["b"][0], np.ones(8), sharding)
    traced = jax.jit(lambda x: place(x, sharding) * 2)(jnp.arange(8.0))
    np.testing.assert_array_equal(traced, np.arange(8.0) * 2)
