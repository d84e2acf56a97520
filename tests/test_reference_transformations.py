"""Every reference under jax.jit, jax.grad / jax.value_and_grad and jax.vmap.

Each reference is compared with its problem's plain-jnp twin (``Problem.unsharded``,
one device, no mesh) and, for the gradients, with the derivative worked out in
NumPy. Run at 1 and 8 devices (``--devices``), so the lengths below are split
over 8, fewer (5 of 8, 6 of 8) and one device.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from shard_tutorial import (
    PROBLEMS,
    data_parallel_forward,
    shard_map_double,
    shard_map_psum,
    shard_map_simulate,
    shard_map_vs_vmap,
)

# Each example compiles the reference for a new shape (0.1 to 0.5 s on a busy 2-core
# machine), so three lengths per test: hypothesis picks among 0, 1, primes, lengths
# 8 divides and lengths it does not, which is what decides the mesh. On one device
# every length gives the same mesh, that one device: two lengths there.
FEW = settings(max_examples=3 if jax.device_count() > 1 else 2)
LENGTHS = st.integers(0, 17)
BATCHES = st.integers(1, 4)


def _shards(rows: int) -> float:
    """A shard count that divides ``rows``, as the simulation problem requires."""
    return float(max(d for d in (1, 2, 3, 4) if rows % d == 0))


@functools.cache
def _model() -> nnx.Linear:
    with jax.ensure_compile_time_eval():  # concrete parameters, even if first built in a trace
        return nnx.Linear(3, 2, rngs=nnx.Rngs(0))


@dataclasses.dataclass(frozen=True)
class Reference:
    """A reference as a function of its one array argument, beside its unsharded twin."""

    call: Callable[[jax.Array], jax.Array]
    unsharded: Callable[[jax.Array], jax.Array]
    example_shape: Callable[[int], tuple[int, ...]]


def _simulate(x: jax.Array) -> jax.Array:
    return shard_map_simulate(1.0, x, _shards(x.shape[0]), 2.0)


def _simulate_unsharded(x: jax.Array) -> jax.Array:
    return PROBLEMS["shard_map_simulate"].unsharded(1.0, x, _shards(x.shape[0]), 2.0)


REFERENCES = {
    "shard_map_double": Reference(
        shard_map_double, PROBLEMS["shard_map_double"].unsharded, lambda n: (n,)
    ),
    "shard_map_psum": Reference(
        shard_map_psum, PROBLEMS["shard_map_psum"].unsharded, lambda n: (n,)
    ),
    "shard_map_vs_vmap": Reference(
        shard_map_vs_vmap, PROBLEMS["shard_map_vs_vmap"].unsharded, lambda n: (n, 3)
    ),
    "shard_map_simulate": Reference(_simulate, _simulate_unsharded, lambda n: (n, 3)),
    "data_parallel_forward": Reference(
        lambda x: data_parallel_forward(_model(), x),
        lambda x: _model()(x),  # noqa: PLW0108 (the model is built on first use, not at import)
        lambda n: (n, 3),
    ),
}
NAMES = list(REFERENCES)


def _input(shape: tuple[int, ...], seed: int = 0) -> jax.Array:
    return jnp.asarray(np.random.default_rng(seed).normal(size=shape).astype(np.float32))


def _weighted_sum(function: Callable[[jax.Array], jax.Array], weights: np.ndarray):
    """A scalar loss of ``function``'s output, with weights so no element counts alike."""
    return lambda x: jnp.sum(function(x) * weights)


def _weights(reference: Reference, x: jax.Array) -> np.ndarray:
    shape = jax.eval_shape(reference.unsharded, x).shape
    return np.random.default_rng(1).uniform(0.5, 2.0, size=shape).astype(np.float32)


@pytest.mark.parametrize("name", NAMES)
@FEW
@given(LENGTHS)
def test_jit_gives_the_eager_result(name, length):
    reference = REFERENCES[name]
    x = _input(reference.example_shape(length))
    jitted = jax.jit(reference.call)(x)
    np.testing.assert_allclose(jitted, reference.call(x), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(jitted, reference.unsharded(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
@FEW
@given(LENGTHS)
def test_grad_equals_the_unsharded_functions_grad(name, length):
    reference = REFERENCES[name]
    x = _input(reference.example_shape(length))
    weights = _weights(reference, x)
    loss = _weighted_sum(reference.call, weights)
    plain_loss = _weighted_sum(reference.unsharded, weights)
    value, grad = jax.value_and_grad(loss)(x)
    assert grad.shape == x.shape
    assert grad.dtype == x.dtype
    np.testing.assert_allclose(value, plain_loss(x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(grad, jax.grad(plain_loss)(x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(jax.jit(jax.grad(loss))(x), grad, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", NAMES)
@FEW
@given(LENGTHS, BATCHES)
def test_vmap_over_a_leading_axis_maps_each_example(name, length, batch):
    reference = REFERENCES[name]
    xs = _input((batch, *reference.example_shape(length)))
    mapped = jax.vmap(reference.call)(xs)
    expected = np.stack([np.asarray(reference.unsharded(x)) for x in xs])
    assert mapped.shape == expected.shape
    np.testing.assert_allclose(mapped, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(jax.jit(jax.vmap(reference.call))(xs), mapped, rtol=1e-6)


@pytest.mark.parametrize("name", ["shard_map_double", "shard_map_psum"])
def test_vmap_over_three_rows_does_not_divide_them_over_the_devices(name):
    # The example: 3 rows of 8 used to be cut 8 ways along the batch axis.
    reference = REFERENCES[name]
    xs = _input((3, 8))
    expected = np.stack([np.asarray(reference.unsharded(x)) for x in xs])
    np.testing.assert_allclose(jax.vmap(reference.call)(xs), expected, rtol=1e-6)
    per_column = jax.vmap(reference.call, in_axes=1)(xs.T)
    np.testing.assert_allclose(per_column, expected, rtol=1e-6)


def test_vmap_of_grad_and_grad_of_vmap():
    xs = _input((3, 5))
    per_row = jax.vmap(jax.grad(shard_map_psum))(xs)
    np.testing.assert_array_equal(per_row, np.ones((3, 5)))
    through = jax.grad(lambda xs: jnp.sum(jax.vmap(shard_map_double)(xs) ** 2))(xs)
    np.testing.assert_allclose(through, 8 * np.asarray(xs), rtol=1e-6)


# The derivatives worked out by hand, in NumPy, at 16 (8 devices), 12 (6 of 8) and 5 (5 of 8).
@pytest.mark.parametrize("length", [16, 12, 5, 1, 0])
def test_gradients_match_numpy(length):
    rng = np.random.default_rng(length)
    x = rng.normal(size=length).astype(np.float32)
    w = rng.uniform(0.5, 2, size=length).astype(np.float32)
    np.testing.assert_array_equal(jax.grad(shard_map_psum)(jnp.asarray(x)), np.ones(length))
    double_grad = jax.grad(lambda x: jnp.sum(shard_map_double(x) * w))(jnp.asarray(x))
    np.testing.assert_allclose(double_grad, 2 * w, rtol=1e-6)

    rows = rng.normal(size=(length, 4)).astype(np.float32)
    w2 = rng.uniform(0.5, 2, size=(2, length)).astype(np.float32)
    vs_grad = jax.grad(lambda x: jnp.sum(shard_map_vs_vmap(x) * w2))(jnp.asarray(rows))
    np.testing.assert_allclose(vs_grad, 2 * rows * (w2[0] + w2[1])[:, None], rtol=1e-5)

    model = nnx.Linear(4, 3, rngs=nnx.Rngs(2))
    kernel = np.asarray(model.kernel[...])
    w3 = rng.uniform(0.5, 2, size=(length, 3)).astype(np.float32)
    forward_grad = jax.grad(lambda x: jnp.sum(data_parallel_forward(model, x) * w3))(
        jnp.asarray(rows)
    )
    np.testing.assert_allclose(forward_grad, w3 @ kernel.T, rtol=1e-5, atol=1e-6)
    simulate_grad = jax.grad(
        lambda x: jnp.sum(shard_map_simulate(2.0, x, _shards(length), 3.0) * w3.reshape(-1))
    )(jnp.asarray(rows))
    np.testing.assert_allclose(simulate_grad, w3 @ kernel.T, rtol=1e-5, atol=1e-6)


def test_data_parallel_forward_differentiates_the_parameters():
    model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
    x = _input((12, 3))

    def loss(model: nnx.Linear, parallel: bool) -> jax.Array:
        y = data_parallel_forward(model, x) if parallel else model(x)
        return jnp.sum(y**2)

    sharded = nnx.grad(loss)(model, True)
    plain = nnx.grad(loss)(model, False)
    np.testing.assert_allclose(sharded.kernel[...], plain.kernel[...], rtol=1e-5)
    np.testing.assert_allclose(sharded.bias[...], plain.bias[...], rtol=1e-5)


def test_simulation_counts_are_static_under_jit():
    x = _input((8, 3))
    static = jax.jit(shard_map_simulate, static_argnums=(0, 2, 3))
    np.testing.assert_allclose(
        static(1.0, x, 2.0, 3.0), shard_map_simulate(1.0, x, 2.0, 3.0), rtol=1e-6
    )


@pytest.mark.parametrize(
    ("static", "traced_name"),
    [((2, 3), "seed"), ((0, 3), "num_shards"), ((0, 2), "features")],
)
def test_a_traced_simulation_count_is_refused_naming_it(static, traced_name):
    jitted = jax.jit(shard_map_simulate, static_argnums=static)
    with pytest.raises(TypeError) as info:
        jitted(1.0, _input((8, 3)), 2.0, 3.0)
    message = str(info.value).splitlines()[0]
    assert message.startswith(f"{traced_name} must be a concrete number")
    assert "traced by a JAX transformation" in message
    assert f"static_argnames='{traced_name}'" in message
