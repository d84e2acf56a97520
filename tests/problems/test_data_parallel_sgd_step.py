"""data_parallel_sgd_step against the closed-form NumPy step, its layout, and its mistakes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shard_tutorial import data_parallel_sgd_step, get_problem, usable_device_count
from shard_tutorial.linear_regression import make_case, oracle_step, unsharded_step
from shard_tutorial.problem import Case

PROBLEM = get_problem("data_parallel_sgd_step")


def _replicated_over_the_batch_devices(array: jax.Array, batch: int, device_count: int) -> None:
    """Every device the batch is split over holds the whole of ``array``, all copies equal."""
    assert all(axis is None for axis in array.sharding.spec), array.sharding
    devices = usable_device_count(batch, device_count)
    assert len(array.sharding.device_set) == devices
    shards = array.addressable_shards
    assert len(shards) == devices
    for shard in shards:
        assert shard.data.shape == array.shape
        np.testing.assert_array_equal(np.asarray(shard.data), np.asarray(shards[0].data))


@pytest.mark.parametrize("case", PROBLEM.cases, ids=lambda case: case.label)
def test_every_case_matches_the_closed_form_step(case, assert_matches_oracle):
    assert_matches_oracle(PROBLEM, case, data_parallel_sgd_step(*PROBLEM.arranged(case)))


@given(
    batch=st.integers(1, 40),
    d_in=st.integers(1, 5),
    d_out=st.integers(1, 4),
    lr=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_any_shapes_and_learning_rate_match_the_oracle(batch, d_in, d_out, lr, seed):
    case = make_case(np.random.default_rng(seed), "hypothesis", batch, d_in, d_out, lr)
    new_w, new_b = data_parallel_sgd_step(*case.jax_args())
    want_w, want_b = oracle_step(*case.args)
    # float32 sums of up to 40 rows: relative to the size of the terms, not of the result.
    np.testing.assert_allclose(np.asarray(new_w), want_w, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(new_b), want_b, rtol=1e-4, atol=1e-4)
    assert new_w.dtype == new_b.dtype == jnp.float32


@pytest.mark.parametrize("batch", [1, 5, 7, 12, 13, 16, 64])
def test_both_outputs_are_replicated_over_the_devices_the_batch_uses(batch, device_count):
    case = make_case(np.random.default_rng(batch), f"B={batch}", batch, 3, 2)
    new_w, new_b = data_parallel_sgd_step(*case.jax_args())
    _replicated_over_the_batch_devices(new_w, batch, device_count)
    _replicated_over_the_batch_devices(new_b, batch, device_count)


def test_the_batch_is_split_and_the_step_is_the_whole_batchs(device_count):
    # 16 rows on 8 devices: 2 each. Any per-device step would differ from the whole step
    # by a factor (8, 64) or by using 2 rows: the oracle pins the whole-batch gradient.
    case = make_case(np.random.default_rng(1), "B=16", 16, 3, 2, lr=0.1)
    w, b, x, y, lr = case.args
    new_w, new_b = data_parallel_sgd_step(*case.jax_args())
    want_w, want_b = oracle_step(w, b, x, y, lr)
    np.testing.assert_allclose(np.asarray(new_w), want_w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(new_b), want_b, rtol=1e-5, atol=1e-5)
    alone_w, _ = oracle_step(w, b, x[:2], y[:2], lr)
    assert not np.allclose(want_w, alone_w, rtol=1e-3)  # the case tells the two apart
    assert usable_device_count(16, device_count) == device_count


@pytest.mark.parametrize("batch", [1, 6, 16])
def test_jit_of_the_step_equals_the_eager_call(batch, device_count):
    case = make_case(np.random.default_rng(batch), f"B={batch}", batch, 4, 3, lr=0.2)
    eager = data_parallel_sgd_step(*case.jax_args())
    jitted = jax.jit(data_parallel_sgd_step)(*case.jax_args())  # lr traced too
    for e, j in zip(eager, jitted, strict=True):
        assert j.shape == e.shape
        assert j.dtype == e.dtype
        np.testing.assert_allclose(np.asarray(j), np.asarray(e), rtol=1e-6, atol=1e-6)
    assert len(jitted[0].sharding.device_set) == usable_device_count(batch, device_count)


_F32, _BF16 = np.float32, jnp.bfloat16


@pytest.mark.parametrize(
    "dtypes",
    [
        (_BF16, _BF16, _BF16, _BF16),
        (_F32, _F32, _BF16, _BF16),  # bfloat16 data, float32 parameters
        (_BF16, _BF16, _F32, _F32),  # float32 data, bfloat16 parameters
        (_BF16, _F32, _F32, _BF16),
        (np.float16, np.float16, _F32, _F32),
    ],
    ids=lambda dtypes: "-".join(np.dtype(d).name for d in dtypes),
)
def test_bfloat16_and_mixed_dtypes_match_the_unsharded_step(dtypes):
    base = make_case(np.random.default_rng(3), "B=16", 16, 3, 2, lr=0.1)
    args = tuple(a.astype(d) for a, d in zip(base.args[:4], dtypes, strict=True))
    case = Case("mixed", (*args, base.args[4]))
    got = data_parallel_sgd_step(*case.jax_args())
    want = unsharded_step(*case.jax_args())
    for name, g, u in zip(("w", "b"), got, want, strict=True):
        assert g.dtype == u.dtype, name  # JAX's promotion: the parameter's own dtype
        rtol, atol = PROBLEM.tolerance(case, np.dtype(u.dtype))
        np.testing.assert_allclose(
            np.asarray(g, np.float64), np.asarray(u, np.float64), rtol=rtol, atol=atol
        )
    # and both are the closed-form step, to the parameters' own rounding
    assert PROBLEM.diagnose(case, got) is None


def _args(**changes: object) -> tuple[object, ...]:
    args = {
        "w": jnp.ones((3, 2)),
        "b": jnp.ones(2),
        "x": jnp.ones((4, 3)),
        "y": jnp.ones((4, 2)),
        "lr": 0.1,
    }
    args.update(changes)
    return tuple(args.values())


@pytest.mark.parametrize(
    ("args", "error", "words"),
    [
        (_args(x=jnp.ones((4, 5))), ValueError, ["x has 5 columns", "w has 3 rows"]),
        (_args(b=jnp.ones(3)), ValueError, ["b has 3 elements", "w has 2 columns"]),
        (_args(y=jnp.ones((5, 2))), ValueError, ["y must have shape", "(4, 2)", "(5, 2)"]),
        (_args(y=jnp.ones((4, 1))), ValueError, ["y must have shape", "(4, 1)"]),
        (_args(w=jnp.ones(3)), ValueError, ["w must be a 2-D array", "(d_in, d_out)"]),
        (_args(b=jnp.ones((1, 2))), ValueError, ["b must be a 1-D array", "(1, 2)"]),
        (_args(x=jnp.ones((4, 3), jnp.int32)), TypeError, ["x must hold floating", "int32"]),
        (_args(w=jnp.ones((3, 2), jnp.int32)), TypeError, ["w must hold floating", "int32"]),
        (_args(y=np.ones((4, 2), np.int64)), TypeError, ["y must hold floating", "int64"]),
        (_args(x=[[1.0] * 3] * 4), TypeError, ["x must be a 2-D array", "list"]),
        (_args(x=jnp.ones((0, 3)), y=jnp.ones((0, 2))), ValueError, ["x and y", "one row"]),
        (_args(w=jnp.ones((3, 0)), b=jnp.ones(0), y=jnp.ones((4, 0))), ValueError, ["w and b"]),
        (_args(lr=float("nan")), ValueError, ["lr must be a finite number", "nan"]),
        (_args(lr=float("inf")), ValueError, ["lr must be a finite number", "inf"]),
        (_args(lr=-float("inf")), ValueError, ["lr must be a finite number", "-inf"]),
        (_args(lr="0.1"), TypeError, ["lr must be a real number", "str"]),
        (_args(lr=True), TypeError, ["lr must be a real number", "bool"]),
        (_args(lr=jnp.ones(2)), TypeError, ["lr must be a real number"]),
    ],
    ids=lambda value: None if isinstance(value, tuple) else str(value),
)
def test_bad_input_is_refused_naming_the_argument(args, error, words):
    with pytest.raises(error) as info:
        data_parallel_sgd_step(*args)
    for word in words:
        assert word in str(info.value)


def test_a_learning_rate_given_as_an_int_or_a_0_d_array_is_taken_as_a_float():
    want = data_parallel_sgd_step(*_args(lr=1.0))
    for lr in (1, np.float32(1.0), jnp.array(1.0)):
        for g, w in zip(data_parallel_sgd_step(*_args(lr=lr)), want, strict=True):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


# The classic mistakes, built by hand from the oracle: each must be named by the diagnosis.
_CASE = next(c for c in PROBLEM.cases if c.label.startswith("B=16"))


def _scaled(factor: float) -> tuple[np.ndarray, np.ndarray]:
    """The parameters after a step ``factor`` times the right one."""
    w, b, *_ = _CASE.args
    right_w, right_b = oracle_step(*_CASE.args)
    return (
        (w + factor * (right_w - w)).astype(np.float32),
        (b + factor * (right_b - b)).astype(np.float32),
    )


def _diagnosis(received: tuple[np.ndarray, np.ndarray]) -> str:
    text = PROBLEM.diagnose(_CASE, received)
    assert text is not None
    return " ".join(text.split())


def test_the_right_step_is_not_flagged():
    assert PROBLEM.diagnose(_CASE, _scaled(1.0)) is None


def test_a_step_8_times_too_long_is_one_sum_too_many_on_8_devices():
    text = _diagnosis(_scaled(8.0))
    assert text.startswith("w: values:")
    assert "The step is 8 times the right one, as on 8 devices" in text
    assert "each device's own mean" in text
    assert "a psum was added to gradients JAX had already summed" in text


def test_a_step_64_times_too_long_is_two_sums_too_many_on_8_devices():
    text = _diagnosis(_scaled(64.0))
    assert "The step is 64 times the right one, 8 x 8 on 8 devices" in text
    assert "then a psum of the gradients" in text


def test_a_step_4_times_too_long_is_read_as_one_sum_too_many_on_4_devices():
    # 4 is also 2 x 2 on 2 devices; one mistake on 4 devices is the likelier reading.
    assert "The step is 4 times the right one, as on 4 devices" in _diagnosis(_scaled(4.0))


def test_one_devices_block_step_is_recognised():
    w, b, x, y, lr = _CASE.args
    alone = tuple(a.astype(np.float32) for a in oracle_step(w, b, x[:2], y[:2], lr))
    text = _diagnosis(alone)
    assert "one device of 8 computed from its own block of 2 rows only" in text
    assert "check_vma=True" in text
    assert 'jax.lax.pmean of the loss over "data"' in text


def test_parameters_that_did_not_move_are_recognised():
    w, b, *_ = _CASE.args
    assert "The parameters did not move" in _diagnosis((w, b))


def test_an_unrelated_wrong_answer_gets_no_story():
    right_w, right_b = _scaled(1.0)
    text = _diagnosis((right_w + 1.0, right_b))
    assert "w: values:" in text
    assert "times the right one" not in text
    assert "own block" not in text
