from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shard_tutorial import collective_matmul_reduce_scatter, get_problem, usable_device_count
from shard_tutorial.collective_costs import ring_bytes
from shard_tutorial.compiled import collectives

# Run once per CI, on the newest stack at 8 devices (pyproject.toml's markers): the
# generic tests judge this problem on every stack and device count.
pytestmark = pytest.mark.once

PROBLEM = get_problem("collective_matmul_reduce_scatter")

# Each example compiles for its shapes: a few, chosen by S and F (which set the mesh).
FEW = settings(max_examples=4, deadline=None)


@FEW
@given(
    rows=st.sampled_from([1, 3, 8, 12, 16]),
    f=st.sampled_from([1, 2, 8, 16]),
    d=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_integer_products_are_exact(rows, f, d, seed):
    rng = np.random.default_rng(seed)
    h = rng.integers(-9, 10, (rows, f)).astype(np.int32)
    w = rng.integers(-9, 10, (f, d)).astype(np.int32)
    y = collective_matmul_reduce_scatter(jnp.asarray(h), jnp.asarray(w))
    assert (y.shape, y.dtype) == ((rows, d), jnp.int32)
    expected = [[sum(int(a) * int(b) for a, b in zip(r, c, strict=True)) for c in w.T] for r in h]
    np.testing.assert_array_equal(np.asarray(y), expected)


@pytest.mark.parametrize(("rows", "f"), [(1, 8), (16, 16), (12, 18), (9, 6), (64, 48)])
def test_the_rows_are_split_over_the_devices_that_divide_s_and_f(rows, f, device_count):
    h, w = jnp.ones((rows, f)), jnp.ones((f, 3))
    y = collective_matmul_reduce_scatter(h, w)
    n = usable_device_count(math.gcd(rows, f), device_count)
    assert len(y.sharding.device_set) == n
    if n > 1:
        assert tuple(y.sharding.spec) == ("model", None)
        assert y.addressable_shards[0].data.shape == (rows // n, 3)
    np.testing.assert_array_equal(np.asarray(y), np.full((rows, 3), f, np.float32))


def test_the_compiled_program_passes_n_minus_1_running_sums_and_reduces_nothing(device_count):
    h = jnp.asarray(np.random.default_rng(0).normal(size=(16, 16)), jnp.float32)
    w = jnp.asarray(np.random.default_rng(1).normal(size=(16, 4)), jnp.float32)
    args = PROBLEM.arrange((h, w))
    found = collectives(collective_matmul_reduce_scatter, *args)
    n = device_count
    assert [c.kind for c in found] == ["collective-permute"] * (n - 1)
    assert {c.result for c in found} <= {f"f32[{16 // n},4]"}
    assert sum(ring_bytes(c) for c in found) == (n - 1) * (16 // n) * 4 * 4


def test_under_jit_and_grad_the_values_are_numpys():
    rng = np.random.default_rng(3)
    h, w = rng.normal(size=(16, 8)), rng.normal(size=(8, 3))
    hj, wj = jnp.asarray(h, jnp.float32), jnp.asarray(w, jnp.float32)
    np.testing.assert_allclose(
        jax.jit(collective_matmul_reduce_scatter)(hj, wj), h @ w, rtol=1e-5, atol=1e-5
    )
    dh, dw = jax.grad(lambda a, b: jnp.sum(collective_matmul_reduce_scatter(a, b) ** 2), (0, 1))(
        hj, wj
    )
    np.testing.assert_allclose(dh, 2 * (h @ w) @ w.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dw, 2 * h.T @ (h @ w), rtol=1e-4, atol=1e-4)


def test_each_classic_mistake_is_explained():
    case = next(c for c in PROBLEM.cases if c.label.startswith("S=16"))
    h, w = (a.astype(np.float64) for a in case.args)
    full = h @ w
    own = np.concatenate(
        [h[2 * j : 2 * j + 2, 2 * j : 2 * j + 2] @ w[2 * j : 2 * j + 2] for j in range(8)]
    )
    assert "one device's partial sum only" in PROBLEM.diagnose(case, own.astype(np.float32))
    rotated = np.roll(full, -2, axis=0).astype(np.float32)  # block b: the sum of block b + 1
    assert "holds the sum of block b + 1 (of 8 blocks)" in PROBLEM.diagnose(case, rotated)
    assert "ended on the wrong devices" in PROBLEM.diagnose(case, rotated)
    assert PROBLEM.diagnose(case, full.astype(np.float32)) is None


@pytest.mark.parametrize(
    ("h", "w", "error", "words"),
    [
        (jnp.ones(4), jnp.ones((4, 2)), ValueError, ["h", "2-D", "(4,)"]),
        (jnp.ones((2, 3)), jnp.ones((4, 2)), ValueError, ["w has 4 rows", "h has 3 columns"]),
        (jnp.ones((0, 3)), jnp.ones((3, 2)), ValueError, ["no empty dimension", "(0, 3)"]),
        (jnp.ones((2, 3)), jnp.ones((3, 0)), ValueError, ["no empty dimension", "(3, 0)"]),
        (jnp.ones((2, 2), bool), jnp.ones((2, 2)), TypeError, ["h", "bool"]),
        (jnp.ones((2, 2)), [[1.0]], TypeError, ["w", "list"]),
    ],
)
def test_bad_input_is_named(h, w, error, words):
    with pytest.raises(error) as info:
        collective_matmul_reduce_scatter(h, w)
    for word in words:
        assert word in str(info.value)
