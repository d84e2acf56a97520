"""zero_adam_step: the closed-form NumPy Adam step, m and v split by rows over gcd-many
devices, w whole, its communication read from the compiled program (a reduce-scatter of
the gradient, an all-gather of the new w, no all-reduce of the gradient)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shard_tutorial import get_problem, usable_device_count, zero_adam_step
from shard_tutorial.compiled import collectives
from shard_tutorial.problem import Case
from shard_tutorial.problems.zero_adam_step import _with_gradient_scaled, make_case, oracle

PROBLEM = get_problem("zero_adam_step")


def _case(batch: int, d: int, f: int, seed: int = 0, step: int = 3, lr: float = 0.01) -> Case:
    return make_case(np.random.default_rng(seed), f"N={batch}", batch, d, f, step, lr)


def _devices(batch: int, d: int, device_count: int) -> int:
    """The devices the contract splits over: as many as divide both N and D."""
    return usable_device_count(math.gcd(batch, d), device_count)


def _assert_rows_split(array: jax.Array, devices: int) -> None:
    """``array`` is cut by rows into ``devices`` blocks, one per device."""
    d, f = array.shape
    assert len(array.sharding.device_set) == devices
    assert {s.data.shape for s in array.addressable_shards} == {(d // devices, f)}
    starts = sorted(s.index[0].start or 0 for s in array.addressable_shards)
    assert starts == list(range(0, d, d // devices))


def _assert_laid_out(result: tuple[jax.Array, ...], devices: int) -> None:
    new_w, new_m, new_v = result
    assert len(new_w.sharding.device_set) == devices
    assert new_w.sharding.is_fully_replicated
    _assert_rows_split(new_m, devices)
    _assert_rows_split(new_v, devices)


@pytest.mark.parametrize("case", PROBLEM.cases, ids=lambda c: c.label)
def test_each_case_matches_the_closed_form_step(case, assert_matches_oracle, device_count):
    w, _, _, x, *_ = case.args
    result = zero_adam_step(*PROBLEM.arranged(case))
    assert_matches_oracle(PROBLEM, case, result)
    _assert_laid_out(result, _devices(x.shape[0], w.shape[0], device_count))


@settings(max_examples=4)
@given(
    st.integers(1, 8),
    st.integers(1, 3),
    st.integers(1, 3),
    st.integers(1, 3),
    st.integers(1, 100),
    st.integers(0, 2**16),
)
def test_any_shapes_match_the_oracle(devices, rows, columns, f, step, seed):
    case = _case(devices * rows, devices * columns, f, seed, step)
    result = zero_adam_step(*PROBLEM.arranged(case))
    for got, want in zip(result, oracle(*case.args), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    _assert_laid_out(result, _devices(devices * rows, devices * columns, jax.device_count()))


def test_the_oracle_is_optax_adam():
    # optax.adam's state after step - 1 steps: its count, and m and v as mu and nu.
    w, m, v, x, y, step, lr = _case(8, 4, 2, seed=1, step=6).args
    adam = optax.adam(lr, b1=0.9, b2=0.999, eps=1e-8)
    scale_state, *rest = adam.init(jnp.asarray(w))
    state = (scale_state._replace(count=jnp.asarray(step - 1), mu=m, nu=v), *rest)
    g = jax.grad(lambda w: jnp.mean((x @ w - y) ** 2))(jnp.asarray(w))
    updates, (after, *_) = adam.update(g, state, jnp.asarray(w))
    want = (optax.apply_updates(jnp.asarray(w), updates), after.mu, after.nu)
    for got, expected in zip(oracle(w, m, v, x, y, step, lr), want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_jit_gives_what_the_eager_call_gives(device_count):
    case = PROBLEM.cases[1]
    args = PROBLEM.arranged(case)
    eager = zero_adam_step(*args)
    jitted = jax.jit(zero_adam_step, static_argnames="step")(*args)
    traced_step = jax.jit(zero_adam_step)(*args)  # the step count traced too
    for got, again, want in zip(jitted, traced_step, eager, strict=True):
        np.testing.assert_array_equal(got, want)
        np.testing.assert_allclose(again, want, rtol=1e-6, atol=1e-7)
    _assert_laid_out(jitted, _devices(16, 16, device_count))


def test_the_compiled_step_reduce_scatters_the_gradient_and_gathers_w(device_count):
    # N=32 and D=16 over 8 devices: 2 rows of m and v each (F=3 keeps the shapes apart).
    case = _case(32, 16, 3, seed=11)
    found = collectives(zero_adam_step, *PROBLEM.arranged(case))
    n = _devices(32, 16, device_count)
    assert sorted(c.kind for c in found) == ["all-gather", "reduce-scatter"]  # no all-reduce
    by_kind = {c.kind: c for c in found}
    assert by_kind["all-gather"].result == "f32[16,3]"  # the new w, whole
    scattered = by_kind["reduce-scatter"]  # the gradient of this device's rows only
    assert (scattered.result, scattered.nbytes) == (f"f32[{16 // n},3]", 16 // n * 3 * 4)


def test_each_device_keeps_only_its_rows_of_the_moments(device_count):
    _, new_m, new_v = zero_adam_step(*PROBLEM.arranged(_case(32, 16, 3)))
    n = _devices(32, 16, device_count)
    for moment in (new_m, new_v):
        assert {s.data.nbytes for s in moment.addressable_shards} == {16 * 3 * 4 // n}


def test_a_gradient_summed_once_too_often_is_explained():
    case = _case(32, 16, 3, seed=5)
    verdict = PROBLEM.diagnose(
        case, tuple(a.astype(np.float32) for a in _with_gradient_scaled(case, 8))
    )
    assert "m and v are those of a gradient 8 times too large" in verdict
    assert 'jax.lax.pcast(w, "data", to="varying")' in verdict


def test_no_bias_correction_is_explained():
    case = _case(16, 8, 2, seed=5, step=2)
    w, *_, lr = case.args
    _, new_m, new_v = oracle(*case.args)
    uncorrected = w - lr * new_m / (np.sqrt(new_v) + 1e-8)
    verdict = PROBLEM.diagnose(
        case, tuple(a.astype(np.float32) for a in (uncorrected, new_m, new_v))
    )
    assert verdict.startswith("w: values:")  # m and v are right
    assert "without Adam's bias correction: at step 2" in verdict


def test_the_placement_verdicts_name_the_specs():
    w_placement, m_placement, _ = PROBLEM.placements()
    assert "out_specs=P())" in w_placement.diagnose((16, 3), (8, 1), devices=8)
    verdict = m_placement.diagnose((16, 3), (1, 1), devices=8, expected_blocks=8)
    assert 'out_specs=P() where P("data", None) was asked for' in verdict


def _args(**changes: object) -> tuple[object, ...]:
    names = ("w", "m", "v", "x", "y", "step", "lr")
    base = dict(
        zip(names, (np.ones((3, 2)),) * 3 + (np.ones((4, 3)), np.ones((4, 2)), 1, 0.1), strict=True)
    )
    base.update(changes)
    return tuple(base[n] for n in names)


@pytest.mark.parametrize(
    ("changes", "error", "words"),
    [
        ({"x": np.ones((4, 5))}, ValueError, ["x has 5 columns", "w has 3 rows"]),
        ({"m": np.ones((2, 3))}, ValueError, ["m must have w's shape (D, F) = (3, 2)"]),
        ({"v": np.ones((3, 1))}, ValueError, ["v must have w's shape"]),
        ({"y": np.ones((5, 2))}, ValueError, ["y must have shape (N, F) = (4, 2)", "(5, 2)"]),
        ({"x": np.ones((0, 3)), "y": np.ones((0, 2))}, ValueError, ["at least one row"]),
        ({"w": np.ones(3)}, ValueError, ["w"]),
        ({"m": np.ones((3, 2), np.int32)}, TypeError, ["m", "int32"]),
        ({"v": [[1.0, 2.0]] * 3}, TypeError, ["v", "list"]),
        ({"step": 0}, ValueError, ["step", ">= 1"]),
        ({"step": 1.5}, TypeError, ["step", "whole number", "1.5"]),  # the statement's TypeError
        ({"step": True}, TypeError, ["step"]),
        ({"lr": float("nan")}, ValueError, ["lr", "nan"]),
        ({"lr": "0.1"}, TypeError, ["lr"]),
    ],
)
def test_bad_input_is_named(changes, error, words):
    with pytest.raises(error) as info:
        zero_adam_step(*_args(**changes))
    for word in words:
        assert word in str(info.value)
