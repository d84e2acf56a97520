from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shard_tutorial import collective_matmul_all_gather, get_problem, usable_device_count
from shard_tutorial.collective_costs import ring_bytes
from shard_tutorial.compiled import collectives

# Run once per CI, on the newest stack at 8 devices (pyproject.toml's markers): the
# generic tests judge this problem on every stack and device count.
pytestmark = pytest.mark.once

PROBLEM = get_problem("collective_matmul_all_gather")

# Each example compiles for its shapes: a few, chosen by S and F (which set the mesh).
FEW = settings(max_examples=4, deadline=None)


@FEW
@given(
    rows=st.sampled_from([1, 3, 8, 12, 16]),
    d=st.integers(1, 4),
    columns=st.sampled_from([1, 2, 8, 16]),
    seed=st.integers(0, 2**16),
)
def test_integer_products_are_exact(rows, d, columns, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(-9, 10, (rows, d)).astype(np.int32)
    w = rng.integers(-9, 10, (d, columns)).astype(np.int32)
    y = collective_matmul_all_gather(jnp.asarray(x), jnp.asarray(w))
    assert (y.shape, y.dtype) == ((rows, columns), jnp.int32)
    expected = [[sum(int(a) * int(b) for a, b in zip(r, c, strict=True)) for c in w.T] for r in x]
    np.testing.assert_array_equal(np.asarray(y), expected)


@pytest.mark.parametrize(("rows", "columns"), [(1, 8), (16, 16), (12, 18), (9, 6), (64, 48)])
def test_the_columns_are_split_over_the_devices_that_divide_s_and_f(rows, columns, device_count):
    x, w = jnp.ones((rows, 3)), jnp.ones((3, columns))
    y = collective_matmul_all_gather(x, w)
    n = usable_device_count(math.gcd(rows, columns), device_count)
    assert len(y.sharding.device_set) == n
    if n > 1:
        assert tuple(y.sharding.spec) == (None, "model")
        assert y.addressable_shards[0].data.shape == (rows, columns // n)
    np.testing.assert_array_equal(np.asarray(y), np.full((rows, columns), 3.0, np.float32))


def test_the_compiled_program_passes_n_minus_1_blocks_of_x_and_gathers_nothing(device_count):
    x = jnp.asarray(np.random.default_rng(0).normal(size=(16, 4)), jnp.float32)
    w = jnp.asarray(np.random.default_rng(1).normal(size=(4, 16)), jnp.float32)
    args = PROBLEM.arrange((x, w))
    found = collectives(collective_matmul_all_gather, *args)
    n = device_count
    assert [c.kind for c in found] == ["collective-permute"] * (n - 1)
    assert {c.result for c in found} <= {f"f32[{16 // n},4]"}
    assert sum(ring_bytes(c) for c in found) == (n - 1) * (16 // n) * 4 * 4


def test_under_jit_and_grad_the_values_are_numpys():
    rng = np.random.default_rng(3)
    x, w = rng.normal(size=(16, 3)), rng.normal(size=(3, 8))
    xj, wj = jnp.asarray(x, jnp.float32), jnp.asarray(w, jnp.float32)
    np.testing.assert_allclose(jax.jit(collective_matmul_all_gather)(xj, wj), x @ w, atol=1e-5)
    dx, dw = jax.grad(lambda a, b: jnp.sum(collective_matmul_all_gather(a, b) ** 2), (0, 1))(xj, wj)
    np.testing.assert_allclose(dx, 2 * (x @ w) @ w.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dw, 2 * x.T @ (x @ w), rtol=1e-4, atol=1e-4)


def test_each_classic_mistake_is_explained():
    case = next(c for c in PROBLEM.cases if c.label.startswith("S=16"))
    x, w = case.args
    full = x.astype(np.float64) @ w
    n, r, c = 8, 2, 2
    own, repeated = np.zeros_like(full), np.zeros_like(full)
    for j in range(n):
        cols = slice(j * c, (j + 1) * c)
        own[j * r : (j + 1) * r, cols] = full[j * r : (j + 1) * r, cols]
        repeated[:, cols] = np.tile(full[j * r : (j + 1) * r, cols], (n, 1))
    own, repeated = own.astype(np.float32), repeated.astype(np.float32)
    assert "only the rows of the block of x it started with" in PROBLEM.diagnose(case, own)
    assert "the blocks that arrived were not multiplied" in PROBLEM.diagnose(case, repeated)
    assert PROBLEM.diagnose(case, full.astype(np.float32)) is None


@pytest.mark.parametrize(
    ("x", "w", "error", "words"),
    [
        (jnp.ones(4), jnp.ones((4, 2)), ValueError, ["x", "2-D", "(4,)"]),
        (jnp.ones((2, 3)), jnp.ones((4, 2)), ValueError, ["w has 4 rows", "x has 3 columns"]),
        (jnp.ones((0, 3)), jnp.ones((3, 2)), ValueError, ["no empty dimension", "(0, 3)"]),
        (jnp.ones((2, 3)), jnp.ones((3, 0)), ValueError, ["no empty dimension", "(3, 0)"]),
        (jnp.ones((2, 2), bool), jnp.ones((2, 2)), TypeError, ["x", "bool"]),
        (jnp.ones((2, 2)), [[1.0]], TypeError, ["w", "list"]),
    ],
)
def test_bad_input_is_named(x, w, error, words):
    with pytest.raises(error) as info:
        collective_matmul_all_gather(x, w)
    for word in words:
        assert word in str(info.value)
