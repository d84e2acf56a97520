from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shard_tutorial import shard_map_psum, usable_device_count
from shard_tutorial.problems.shard_map_psum import PROBLEM


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


def _sums_in_other_orders(x: np.ndarray) -> dict[str, np.float32]:
    """``x``'s float32 sum added up as a right solution might: each order rounds its own way."""
    blocks = np.pad(x, (0, -len(x) % 8)).reshape(8, -1).sum(axis=1)  # 8 devices, then psum
    return {
        "in order": np.cumsum(x)[-1],
        "backwards": np.cumsum(x[::-1])[-1],
        "pairwise (NumPy)": x.sum(),
        "in 8 blocks": blocks.sum(dtype=np.float32),
    }


@pytest.mark.once  # NumPy's sums against the tolerance: no JAX version or device count changes it
def test_a_float32_sum_in_any_order_passes_and_one_device_s_share_fails():
    # The checker's random cases include sums of 300 values of size 100, whose float32
    # rounding (0.0003 for one; jnp.sum on one device) is more than atol alone allows:
    # with atol alone, 6 of these 708 sums in other orders failed.
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(3000):
        case = PROBLEM.generate(rng)
        (x,) = case.args
        if x.dtype != np.float32 or np.abs(x).sum() < 1000:  # the sums atol alone is enough for
            continue
        for order, total in _sums_in_other_orders(x).items():
            assert PROBLEM.diagnose(case, total) is None, (case.label, order)
        one_share = x[: len(x) // 8].sum()  # one of 8 devices' partial sum, not psum'd
        assert PROBLEM.diagnose(case, one_share) is not None, case.label
        checked += 1
    assert checked > 500


def test_the_sum_ci_once_failed_passes():
    # Seed 270530's third random case, jnp.sum's own answer on one device (jax 0.10.2).
    rng = np.random.default_rng(270530)
    case = [PROBLEM.generate(rng) for _ in range(3)][-1]
    assert case.label == "random: length 236, float32"
    assert PROBLEM.diagnose(case, np.float32(3.657898)) is None
    assert PROBLEM.diagnose(case, np.float32(3.67)) is not None
