from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shard_tutorial import get_problem, shard_map_ppermute, usable_device_count


def three_point_average(x: np.ndarray) -> np.ndarray:
    """The stencil written element by element, indices modulo n."""
    n = len(x)
    return np.array([(x[(i - 1) % n] + x[i] + x[(i + 1) % n]) / 3 for i in range(n)])


@given(hnp.arrays(np.float32, st.integers(1, 50), elements=st.floats(-1e3, 1e3, width=32)))
def test_matches_the_stencil_element_by_element(x):
    y = shard_map_ppermute(jnp.asarray(x))
    assert (y.shape, y.dtype) == (x.shape, jnp.float32)
    expected = three_point_average(x.astype(np.float64))
    np.testing.assert_allclose(np.asarray(y), expected, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("length", [1, 5, 12, 13, 32])
def test_the_output_is_split_like_the_input(length, device_count):
    y = shard_map_ppermute(jnp.arange(length, dtype=jnp.float32))
    assert tuple(y.sharding.spec) == ("data",)
    assert len(y.sharding.device_set) == usable_device_count(length, device_count)


def test_the_ends_wrap_around():
    y = np.asarray(shard_map_ppermute(jnp.arange(16.0)))
    assert y[0] == pytest.approx((15 + 0 + 1) / 3)
    assert y[15] == pytest.approx((14 + 15 + 0) / 3)
    np.testing.assert_allclose(y[1:15], np.arange(1.0, 15.0))


@pytest.mark.parametrize(
    ("mistake", "words"),
    [
        ("rolled within each block", "wrong at every block edge"),
        ("halos swapped", "The halos went the wrong way round"),
    ],
)
def test_the_classic_mistakes_are_explained(mistake, words):
    problem = get_problem("shard_map_ppermute")
    case = next(c for c in problem.cases if c.label.startswith("length 32"))
    blocks = np.split(case.args[0], 8)
    if mistake == "rolled within each block":
        pads = [(b[-1], b[0]) for b in blocks]
    else:
        pads = [(blocks[(i + 1) % 8][-1], blocks[(i - 1) % 8][0]) for i in range(8)]
    received = np.concatenate(
        [
            three_point_average(np.concatenate([[lo], b, [hi]]))[1:-1]
            for (lo, hi), b in zip(pads, blocks, strict=True)
        ]
    ).astype(np.float32)
    assert words in problem.diagnose(case, received)


@pytest.mark.parametrize(
    ("x", "error", "words"),
    [
        (jnp.ones((4, 2)), ValueError, ["x", "1-D", "(4, 2)"]),
        (jnp.zeros(0), ValueError, ["x", "at least one element"]),
        (jnp.arange(4), TypeError, ["x", "floating", "int32"]),
        ((1.0, 2.0), TypeError, ["x", "tuple"]),
    ],
)
def test_bad_input_is_named(x, error, words):
    with pytest.raises(error) as info:
        shard_map_ppermute(x)
    for word in words:
        assert word in str(info.value)
