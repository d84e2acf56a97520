"""fsdp_sgd_step: the closed-form NumPy step, w split by rows over gcd-many devices, its
communication read from the compiled program (an all-gather, a reduce-scatter of dw)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh, fsdp_sgd_step, get_problem, place, usable_device_count
from shard_tutorial.compiled import collectives
from shard_tutorial.linear_regression import make_case, oracle_step
from shard_tutorial.problem import Case

PROBLEM = get_problem("fsdp_sgd_step")


def _case(batch: int, d_in: int, d_out: int, seed: int = 0, lr: float = 0.1) -> Case:
    return make_case(np.random.default_rng(seed), f"B={batch}", batch, d_in, d_out, lr)


def _devices(batch: int, d_in: int, device_count: int) -> int:
    """The devices the contract splits over: as many as divide both B and d_in."""
    return usable_device_count(math.gcd(batch, d_in), device_count)


def _assert_rows_split(new_w: jax.Array, devices: int) -> None:
    """``new_w`` is cut by rows into ``devices`` blocks of d_in / devices rows, one per device."""
    d_in, d_out = new_w.shape
    assert len(new_w.sharding.device_set) == devices
    assert new_w.sharding.shard_shape(new_w.shape) == (d_in // devices, d_out)
    assert {s.data.shape for s in new_w.addressable_shards} == {(d_in // devices, d_out)}
    starts = sorted(s.index[0].start or 0 for s in new_w.addressable_shards)
    assert starts == list(range(0, d_in, d_in // devices))  # every block of rows, once each


def _assert_replicated(new_b: jax.Array, devices: int) -> None:
    assert len(new_b.sharding.device_set) == devices
    assert new_b.sharding.is_fully_replicated


@pytest.mark.parametrize("case", PROBLEM.cases, ids=lambda c: c.label)
def test_each_case_matches_the_closed_form_step(case, assert_matches_oracle, device_count):
    w, _, x, *_ = case.args
    new_w, new_b = fsdp_sgd_step(*PROBLEM.arranged(case))
    assert_matches_oracle(PROBLEM, case, (new_w, new_b))
    devices = _devices(x.shape[0], w.shape[0], device_count)
    _assert_rows_split(new_w, devices)
    _assert_replicated(new_b, devices)


@given(
    st.integers(1, 8),
    st.integers(1, 6),
    st.integers(1, 4),
    st.integers(1, 5),
    st.integers(0, 2**16),
    st.booleans(),
)
def test_any_shapes_match_the_oracle_with_w_split_by_rows(
    devices, rows, columns, d_out, seed, common
):
    # common: B and d_in multiples of one device count; else unrelated sizes (gcd may be 1).
    batch, d_in = (devices * rows, devices * columns) if common else (rows + devices, columns)
    case = _case(batch, d_in, d_out, seed)
    new_w, new_b = fsdp_sgd_step(*PROBLEM.arranged(case))
    want_w, want_b = oracle_step(*case.args)
    np.testing.assert_allclose(new_w, want_w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(new_b, want_b, rtol=1e-5, atol=1e-5)
    split = _devices(batch, d_in, jax.device_count())
    _assert_rows_split(new_w, split)
    _assert_replicated(new_b, split)


def test_bfloat16_matches_the_oracle_to_its_rounding(assert_matches_oracle):
    w, b, x, y, lr = _case(16, 8, 3, seed=3).args
    case = Case("bfloat16", (*(a.astype(jnp.bfloat16) for a in (w, b, x, y)), lr))
    new_w, new_b = fsdp_sgd_step(*PROBLEM.arranged(case))
    assert (new_w.dtype, new_b.dtype) == (jnp.bfloat16, jnp.bfloat16)
    assert_matches_oracle(PROBLEM, case, (new_w, new_b))


def _layouts(args: tuple[np.ndarray, ...]) -> dict[str, object]:
    """``w`` (the first of ``args``) laid out in every way a caller may hand it over."""
    w = args[0]
    return {
        "numpy": w,
        "one device": jnp.asarray(w),
        "replicated": place(w, NamedSharding(data_mesh(jax.device_count()), P())),
        "split by columns": place(w, NamedSharding(data_mesh(w.shape[1]), P(None, "data"))),
        "rows over 2 devices": place(w, NamedSharding(data_mesh(2), P("data", None))),
        "as the contract says": PROBLEM.arrange(args)[0],
    }


@pytest.mark.parametrize(
    "layout",
    [
        "numpy",
        "one device",
        "replicated",
        "split by columns",
        "rows over 2 devices",
        "as the contract says",
    ],
)
def test_any_layout_of_w_gives_the_same_answer(layout, device_count):
    case = _case(32, 16, 4, seed=7)
    _, b, x, y, lr = case.args
    want_w, want_b = fsdp_sgd_step(*PROBLEM.arranged(case))
    new_w, new_b = fsdp_sgd_step(_layouts(case.args)[layout], jnp.asarray(b), x, y, lr)
    np.testing.assert_array_equal(new_w, want_w)  # the same program on the same blocks
    np.testing.assert_array_equal(new_b, want_b)
    _assert_rows_split(new_w, _devices(32, 16, device_count))


@pytest.mark.parametrize("case", PROBLEM.cases[1:5], ids=lambda c: c.label)
def test_jit_gives_what_the_eager_call_gives(case, device_count):
    args = PROBLEM.arranged(case)
    eager = fsdp_sgd_step(*args)
    jitted = jax.jit(fsdp_sgd_step)(*args)
    for got, want in zip(jitted, eager, strict=True):
        np.testing.assert_array_equal(got, want)
    w, _, x, *_ = case.args
    _assert_rows_split(jitted[0], _devices(x.shape[0], w.shape[0], device_count))


def test_the_compiled_step_gathers_w_and_reduce_scatters_its_gradient(device_count):
    # B=32 and d_in=16 split over 8 devices: 2 rows of w each (d_out=3 keeps the shapes apart).
    case = _case(32, 16, 3, seed=11)
    found = collectives(fsdp_sgd_step, *PROBLEM.arranged(case))
    n = _devices(32, 16, device_count)  # on 1 device the same three, among that one device
    assert sorted(c.kind for c in found) == ["all-gather", "all-reduce", "reduce-scatter"]
    by_kind = {c.kind: c for c in found}
    assert by_kind["all-gather"].result == "f32[16,3]"  # the forward pass: the whole w
    scattered = by_kind["reduce-scatter"]  # dw: each device the sum for its own rows only
    assert (scattered.result, scattered.nbytes) == (f"f32[{16 // n},3]", 16 // n * 3 * 4)
    # The one all-reduce is b's gradient (3 numbers): none of w's gradient, whole or in part.
    # (XLA of jax 0.10 reshapes it to f32[1,3] first; later ones keep f32[3].)
    summed = by_kind["all-reduce"]
    assert (summed.result.replace("[1,", "["), summed.nbytes) == ("f32[3]", 12)


def test_each_device_keeps_only_its_rows_of_w(device_count):
    case = _case(32, 16, 3)
    new_w, _ = fsdp_sgd_step(*PROBLEM.arranged(case))
    n = _devices(32, 16, device_count)
    assert {s.data.nbytes for s in new_w.addressable_shards} == {16 * 3 * 4 // n}
    assert sum(s.data.nbytes for s in new_w.addressable_shards) == 16 * 3 * 4


def test_the_placement_verdict_names_the_rows_spec():
    w_placement, b_placement = PROBLEM.placements()
    verdict = w_placement.diagnose(shape=(16, 3), split=(1, 1), devices=8, expected_blocks=8)
    assert 'out_specs=P() where P("data", None) was asked for' in verdict
    assert w_placement.diagnose((16, 3), (8, 1), devices=8, expected_blocks=8) is None
    assert b_placement.diagnose((3,), (1,), devices=8) is None
    # The other problems keep their sentence.
    pmean_placement = get_problem("shard_map_pmean").placements()[0]
    assert 'where P("data") was asked' in pmean_placement.diagnose((16,), (1,), devices=8)


def _moved(case: Case, step_w: np.ndarray, step_b: np.ndarray) -> tuple[np.ndarray, ...]:
    w, b, *_ = case.args
    return (w + step_w).astype(np.float32), (b + step_b).astype(np.float32)


def test_an_all_reduce_of_the_reduce_scattered_gradient_is_explained():
    case = _case(32, 16, 3, seed=5)
    w, b, *_ = case.args
    right_w, right_b = oracle_step(*case.args)
    step_w, step_b = right_w - w, right_b - b
    every_block = np.tile(step_w.reshape(8, 2, 3).sum(axis=0), (8, 1))
    psummed = PROBLEM.diagnose(case, _moved(case, every_block, 8 * step_b))
    assert "gradients of all 8 blocks of rows added up, and b by 8 times its step" in psummed
    assert "reduce-scattered" in psummed
    pmeaned = PROBLEM.diagnose(case, _moved(case, every_block / 8, step_b))
    assert "mean of the gradients of all 8 blocks of rows" in pmeaned
    assert pmeaned.startswith("w: values:")  # b is right
    b_only = PROBLEM.diagnose(case, _moved(case, step_w, 8 * step_b))
    assert "w is right, but b moved by 8 times its step" in b_only


def test_a_local_mean_loss_is_explained_for_a_weight_split_by_rows():
    case = _case(32, 16, 3, seed=5)
    w, b, *_ = case.args
    right_w, right_b = oracle_step(*case.args)
    verdict = PROBLEM.diagnose(case, _moved(case, 8 * (right_w - w), 8 * (right_b - b)))
    assert "The step is 8 times the right one" in verdict
    assert "w's by the reduce-scatter that is the transpose of its all_gather" in verdict
    assert "replicated parameter" not in verdict  # the data-parallel wording is not used


@pytest.mark.parametrize(
    ("args", "error", "words"),
    [
        ((np.ones((3, 2)), np.ones(2), np.ones((4, 5)), np.ones((4, 2)), 0.1), ValueError,
         ["x has 5 columns", "w has 3 rows"]),
        ((np.ones((3, 2)), np.ones(3), np.ones((4, 3)), np.ones((4, 2)), 0.1), ValueError,
         ["b has 3 elements", "(d_out,)"]),
        ((np.ones((3, 2)), np.ones(2), np.ones((4, 3)), np.ones((5, 2)), 0.1), ValueError,
         ["y must have shape (B, d_out) = (4, 2)", "(5, 2)"]),
        ((np.ones((3, 2)), np.ones(2), np.ones((0, 3)), np.ones((0, 2)), 0.1), ValueError,
         ["x and y must have at least one row", "(0, 3)"]),
        ((np.ones(3), np.ones(2), np.ones((4, 3)), np.ones((4, 2)), 0.1), ValueError, ["w"]),
        ((np.ones((3, 2), np.int32), np.ones(2), np.ones((4, 3)), np.ones((4, 2)), 0.1),
         TypeError, ["w", "int32"]),
        (([[1.0, 2.0]], np.ones(2), np.ones((4, 1)), np.ones((4, 2)), 0.1), TypeError,
         ["w", "list"]),
        ((np.ones((3, 2)), np.ones(2), np.ones((4, 3)), np.ones((4, 2)), float("nan")),
         ValueError, ["lr", "nan"]),
        ((np.ones((3, 2)), np.ones(2), np.ones((4, 3)), np.ones((4, 2)), "0.1"), TypeError,
         ["lr"]),
    ],
)  # fmt: skip
def test_bad_input_is_named(args, error, words):
    with pytest.raises(error) as info:
        fsdp_sgd_step(*args)
    for word in words:
        assert word in str(info.value)
