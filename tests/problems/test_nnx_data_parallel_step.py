"""nnx_data_parallel_step against the closed-form step from the model's initial parameters.

Run at 1 and 8 devices (``--devices``): batches that 8 divides, that fewer devices
divide, and primes, which one device takes whole.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from shard_tutorial import (
    data_parallel_sgd_step,
    get_problem,
    nnx_data_parallel_step,
    usable_device_count,
)
from shard_tutorial.linear_regression import oracle_step

PROBLEM = get_problem("nnx_data_parallel_step")


def _data(batch: int, d_in: int, d_out: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, d_in)).astype(np.float32)
    y = rng.normal(size=(batch, d_out)).astype(np.float32)
    return x, y


def _closed_form(seed: int, x: np.ndarray, y: np.ndarray, lr: float):
    """The oracle, written here from its definition: the model's own start, one NumPy step."""
    model = nnx.Linear(x.shape[1], y.shape[1], rngs=nnx.Rngs(seed))
    return oracle_step(np.asarray(model.kernel[...]), np.asarray(model.bias[...]), x, y, lr)


# Each example compiles the step for a new shape: a few examples, shapes chosen so that
# 8 devices, fewer of them (6 of 8, 5 of 8) or one device split the batch.
@settings(max_examples=4)
@given(
    batch=st.sampled_from([1, 2, 5, 8, 12, 13, 16, 24]),
    d_in=st.integers(1, 4),
    d_out=st.integers(1, 3),
    seed=st.integers(0, 2**31 - 1),
    lr=st.floats(0.0, 0.5),
)
def test_matches_the_closed_form_step_from_the_models_start(batch, d_in, d_out, seed, lr):
    x, y = _data(batch, d_in, d_out, seed % 1000)
    kernel, bias = nnx_data_parallel_step(seed, jnp.asarray(x), jnp.asarray(y), lr)
    want_kernel, want_bias = _closed_form(seed, x, y, lr)
    assert kernel.shape == (d_in, d_out)
    assert bias.shape == (d_out,)
    assert kernel.dtype == bias.dtype == jnp.float32  # nnx.Linear's parameter dtype
    np.testing.assert_allclose(kernel, want_kernel, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(bias, want_bias, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("batch", [1, 5, 12, 13, 16])
def test_both_outputs_are_replicated_on_the_devices_that_split_the_batch(batch, device_count):
    x, y = _data(batch, 3, 2)
    for out in nnx_data_parallel_step(0, jnp.asarray(x), jnp.asarray(y), 0.1):
        assert tuple(out.sharding.spec) in ((), (None,), (None, None))
        assert len(out.sharding.device_set) == usable_device_count(batch, device_count)
        copies = [np.asarray(shard.data) for shard in out.addressable_shards]
        assert all(c.shape == out.shape for c in copies)
        for copy in copies[1:]:
            np.testing.assert_array_equal(copy, copies[0])


def test_the_same_step_as_the_plain_data_parallel_step():
    x, y = _data(16, 3, 2, seed=1)
    model = nnx.Linear(3, 2, rngs=nnx.Rngs(7))
    plain = data_parallel_sgd_step(model.kernel[...], model.bias[...], x, y, 0.2)
    for mine, theirs in zip(nnx_data_parallel_step(7, x, y, 0.2), plain, strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=1e-6, atol=1e-6)


def test_whole_float_seeds_and_numpy_input_give_the_int_seeds_answer():
    x, y = _data(8, 2, 2)
    by_int = nnx_data_parallel_step(3, jnp.asarray(x), jnp.asarray(y), 0.1)
    for seed in (3.0, np.int64(3), jnp.asarray(3)):
        for mine, theirs in zip(nnx_data_parallel_step(seed, x, y, 0.1), by_int, strict=True):
            np.testing.assert_array_equal(mine, theirs)


def test_lr_zero_returns_the_initial_parameters_and_seeds_differ():
    x, y = _data(8, 3, 2)
    kernel, bias = nnx_data_parallel_step(5, x, y, 0.0)
    model = nnx.Linear(3, 2, rngs=nnx.Rngs(5))
    np.testing.assert_array_equal(kernel, model.kernel[...])
    np.testing.assert_array_equal(bias, model.bias[...])
    other, _ = nnx_data_parallel_step(6, x, y, 0.0)
    assert not np.allclose(other, kernel)


def test_under_jit_with_a_static_seed():
    x, y = _data(16, 3, 2)
    jitted = jax.jit(nnx_data_parallel_step, static_argnums=0)(4, x, y, 0.3)
    for mine, theirs in zip(jitted, _closed_form(4, x, y, 0.3), strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-5)


def test_a_traced_seed_is_refused_by_name():
    x, y = _data(4, 2, 1)
    with pytest.raises(TypeError, match="seed must be a concrete number"):
        jax.jit(nnx_data_parallel_step)(0, x, y, 0.1)


def test_steps_8_and_64_times_too_long_are_explained():
    case = next(c for c in PROBLEM.cases if c.label.startswith("B=16"))
    seed, x, y, _lr = case.args
    start = nnx.Linear(x.shape[1], y.shape[1], rngs=nnx.Rngs(seed))
    w, b = np.asarray(start.kernel[...]), np.asarray(start.bias[...])
    right = PROBLEM.expected(case)
    for scale, words in ((8, "8 times the right one"), (64, "64 times the right one, 8 x 8")):
        wrong = tuple(
            (p + scale * (r - p)).astype(np.float32) for p, r in zip((w, b), right, strict=True)
        )
        message = PROBLEM.diagnose(case, wrong)
        assert message.startswith("kernel: values:"), message
        assert words in message, message
    assert PROBLEM.diagnose(case, right) is None


X, Y = jnp.ones((4, 3)), jnp.ones((4, 2))


@pytest.mark.parametrize(
    ("args", "error", "words"),
    [
        ((1.5, X, Y, 0.1), ValueError, ["seed must be a whole number", "1.5"]),
        (("0", X, Y, 0.1), TypeError, ["seed must be a whole number", "str"]),
        ((True, X, Y, 0.1), TypeError, ["seed must be a whole number", "bool"]),
        ((0, X, Y, float("nan")), ValueError, ["lr must be a finite number", "nan"]),
        ((0, X, Y, float("inf")), ValueError, ["lr must be a finite number", "inf"]),
        ((0, X, Y, "0.1"), TypeError, ["lr must be a real number", "str"]),
        ((0, X, jnp.ones((5, 2)), 0.1), ValueError, ["y must have shape (B, d_out)", "(5, 2)"]),
        ((0, jnp.ones(4), Y, 0.1), ValueError, ["x must be a 2-D array", "(4,)"]),
        ((0, X, jnp.ones(4), 0.1), ValueError, ["y must be a 2-D array", "(4,)"]),
        ((0, jnp.ones((4, 0)), Y, 0.1), ValueError, ["d_in >= 1", "(4, 0)"]),
        ((0, X, jnp.ones((4, 0)), 0.1), ValueError, ["d_out >= 1", "(4, 0)"]),
        (
            (0, jnp.ones((0, 3)), jnp.ones((0, 2)), 0.1),
            ValueError,
            ["x and y must have at least one row"],
        ),
        ((0, jnp.ones((4, 3), int), Y, 0.1), TypeError, ["x must hold floating-point", "int32"]),
        ((0, [[1.0]], Y, 0.1), TypeError, ["x must be a 2-D array", "list"]),
    ],
)
def test_bad_input_is_named(args, error, words):
    with pytest.raises(error) as info:
        nnx_data_parallel_step(*args)
    for word in words:
        assert word in str(info.value)
