from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given
from hypothesis import strategies as st

from shard_tutorial import data_parallel_forward, shard_map_simulate, usable_device_count


def unsharded(seed: int, x: np.ndarray, features: int) -> np.ndarray:
    """The model applied to the whole batch at once: what sharding must not change."""
    model = nnx.Linear(x.shape[-1], features, rngs=nnx.Rngs(seed))
    return np.asarray(model(jnp.asarray(x))).reshape(-1)


@st.composite
def batches(draw: st.DrawFn) -> tuple[int, np.ndarray, int, int]:
    num_shards = draw(st.integers(1, 6))
    rows = num_shards * draw(st.integers(0, 4))
    in_dim = draw(st.integers(1, 5))
    seed = draw(st.integers(0, 2**31 - 1))
    x = np.random.default_rng(seed).normal(size=(rows, in_dim)).astype(np.float32)
    return seed, x, num_shards, draw(st.integers(1, 4))


@pytest.mark.one_device_work
@given(batches())
def test_simulation_equals_the_unsharded_model(batch):
    seed, x, num_shards, features = batch
    out = shard_map_simulate(float(seed), jnp.asarray(x), float(num_shards), float(features))
    assert out.shape == (x.shape[0] * features,)
    np.testing.assert_allclose(out, unsharded(seed, x, features), rtol=1e-6, atol=1e-6)


@given(batches())
def test_real_sharding_equals_the_simulation(batch):
    seed, x, num_shards, features = batch
    model = nnx.Linear(x.shape[-1], features, rngs=nnx.Rngs(seed))
    real = data_parallel_forward(model, jnp.asarray(x))
    simulated = shard_map_simulate(seed, jnp.asarray(x), num_shards, features)
    # Flattened in NumPy: JAX 0.10-0.12 fail to reshape an *empty* array that has an
    # Explicit sharding (IndexError inside lax.reshape); non-empty ones are fine.
    np.testing.assert_allclose(np.asarray(real).reshape(-1), simulated, rtol=1e-6, atol=1e-6)


@pytest.mark.one_device_work
def test_the_shard_count_does_not_change_the_result():
    x = jnp.asarray(np.random.default_rng(0).normal(size=(24, 5)).astype(np.float32))
    results = [shard_map_simulate(3, x, k, 4) for k in (1, 2, 3, 4, 6, 8, 12, 24)]
    for result in results[1:]:
        np.testing.assert_allclose(result, results[0], rtol=1e-6, atol=1e-6)


def test_different_seeds_give_different_models():
    x = jnp.ones((4, 3))
    assert not np.allclose(shard_map_simulate(0, x, 2, 2), shard_map_simulate(1, x, 2, 2))


@pytest.mark.parametrize("rows", [1, 5, 8, 12, 16])
def test_data_parallel_forward_splits_rows_and_replicates_parameters(rows, device_count):
    model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
    x = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
    out = data_parallel_forward(model, jnp.asarray(x))
    used = usable_device_count(rows, device_count)
    assert tuple(out.sharding.spec) == ("data", None)
    assert len(out.addressable_shards) == used
    expected = np.asarray(model(jnp.asarray(x)))
    for shard in out.addressable_shards:
        np.testing.assert_allclose(shard.data, expected[shard.index], rtol=1e-6)


class TwoLayers(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.hidden = nnx.Linear(4, 8, rngs=rngs)
        self.out = nnx.Linear(8, 2, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.out(nnx.relu(self.hidden(x)))


def test_data_parallel_forward_runs_any_row_wise_module():
    model = TwoLayers(nnx.Rngs(0))
    x = jnp.asarray(np.random.default_rng(1).normal(size=(16, 4)).astype(np.float32))
    np.testing.assert_allclose(data_parallel_forward(model, x), model(x), rtol=1e-5, atol=1e-6)


def test_data_parallel_forward_does_not_recompile(count_compiles):
    x = jnp.ones((16, 3))
    data_parallel_forward(nnx.Linear(3, 2, rngs=nnx.Rngs(0)), x)
    other_model_same_shapes = nnx.Linear(3, 2, rngs=nnx.Rngs(1))
    with count_compiles() as compiles:
        jax.block_until_ready(data_parallel_forward(other_model_same_shapes, x))
    assert compiles == []


def test_data_parallel_forward_rejects_a_non_module():
    with pytest.raises(TypeError, match=r"model must be a flax\.nnx\.Module.*function"):
        data_parallel_forward(lambda x: x, jnp.ones((2, 2)))


X = jnp.ones((6, 3))


@pytest.mark.parametrize(
    ("args", "error", "words"),
    [
        ((0, X, 4, 2), ValueError, ["num_shards=4", "divide", "N=6"]),
        ((0, X, 0, 2), ValueError, ["num_shards", ">= 1", "got 0"]),
        ((0, X, -2.0, 2), ValueError, ["num_shards", ">= 1", "-2.0"]),
        ((0, X, 2.5, 2), ValueError, ["num_shards", "whole number", "2.5"]),
        ((0, X, "2", 2), TypeError, ["num_shards", "str"]),
        ((0, X, True, 2), TypeError, ["num_shards", "bool"]),
        ((0, X, 2, 0), ValueError, ["features", ">= 1", "got 0"]),
        ((0, X, 2, 1.5), ValueError, ["features", "whole number", "1.5"]),
        ((0.5, X, 2, 2), ValueError, ["seed", "whole number", "0.5"]),
        ((float("nan"), X, 2, 2), ValueError, ["seed", "whole number", "nan"]),
        ((0, jnp.ones(6), 2, 2), ValueError, ["x", "2-D", "(N, in_dim)", "(6,)"]),
        ((0, jnp.ones((6, 0)), 2, 2), ValueError, ["x", "feature column", "(6, 0)"]),
        ((0, [[1.0]], 1, 1), TypeError, ["x", "list"]),
    ],
)
def test_bad_input_is_named(args, error, words):
    with pytest.raises(error) as info:
        shard_map_simulate(*args)
    for word in words:
        assert word in str(info.value)


def test_counts_may_be_numpy_or_0d_arrays():
    x = jnp.ones((4, 2))
    expected = shard_map_simulate(1, x, 2, 3)
    np.testing.assert_array_equal(
        shard_map_simulate(np.float32(1.0), x, jnp.asarray(2), np.int64(3)), expected
    )
