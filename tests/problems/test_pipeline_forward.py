"""pipeline_forward against NumPy and its unsharded twin; its stages, schedule and messages."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shard_tutorial import PROBLEMS, pipeline_forward, usable_device_count
from shard_tutorial.compiled import collectives
from shard_tutorial.problem import Case
from shard_tutorial.problems.pipeline_forward import (
    _explain,
    every_stage_summed,
    pipeline_forward_schedule,
)

# Run once per CI, on the newest stack at 8 devices (pyproject.toml's markers): the
# generic tests judge this problem on every stack and device count.
pytestmark = pytest.mark.once

PROBLEM = PROBLEMS["pipeline_forward"]


def _args(microbatches: int, rows: int, d: int, layers: int, seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(microbatches, rows, d)).astype(np.float32)
    w = (rng.normal(size=(layers, d, d)) / np.sqrt(d)).astype(np.float32)
    return x, w


def _numpy(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The network, written out again in NumPy (not the problem's oracle)."""
    h = x.astype(np.float64)
    for layer in range(w.shape[0]):
        h = np.tanh(np.einsum("mbd,de->mbe", h, w[layer].astype(np.float64)))
    return h


# Each example compiles a new program (M + n - 1 ticks unrolled): a few of them.
@settings(max_examples=4)
@given(
    microbatches=st.integers(1, 6),
    rows=st.integers(1, 3),
    d=st.integers(1, 5),
    layers=st.integers(1, 17),
    seed=st.integers(0, 2**16),
)
def test_any_shapes_match_numpy_on_every_stage(microbatches, rows, d, layers, seed):
    x, w = _args(microbatches, rows, d, layers, seed)
    out = pipeline_forward(jnp.asarray(x), jnp.asarray(w))
    assert out.shape == x.shape
    assert out.dtype == jnp.float32
    np.testing.assert_allclose(out, _numpy(x, w), rtol=1e-4, atol=1e-5)
    stages = usable_device_count(layers)
    assert dict(out.sharding.mesh.shape) == {"stage": stages}
    assert not any(out.sharding.spec)  # P(): replicated, however JAX spells it
    for shard in out.addressable_shards:  # every stage holds every output
        np.testing.assert_allclose(shard.data, _numpy(x, w), rtol=1e-4, atol=1e-5)


def test_the_statement_example_by_hand():
    x = np.array([[[0.5, -1.0]], [[2.0, 0.0]]], np.float32)
    w = np.array([[[1.0, 0.0], [0.0, 1.0]], [[0.0, 1.0], [1.0, 0.0]]], np.float32)
    first = np.tanh(x)  # the identity layer
    expected = np.tanh(first[..., ::-1])  # the swap layer
    np.testing.assert_allclose(pipeline_forward(jnp.asarray(x), jnp.asarray(w)), expected, 1e-6)


@pytest.mark.parametrize(("microbatches", "layers"), [(3, 4), (5, 8), (2, 6), (4, 1)])
def test_the_schedule_is_gpipes_read_from_the_program(microbatches, layers, device_count):
    x, w = _args(microbatches, 2, 3, layers)
    out, ticks = pipeline_forward_schedule(jnp.asarray(x), jnp.asarray(w))
    np.testing.assert_allclose(out, _numpy(x, w), rtol=1e-4, atol=1e-5)
    n = usable_device_count(layers, device_count)
    assert ticks.shape == (n, microbatches + n - 1)
    for stage in range(n):
        for tick in range(microbatches + n - 1):
            want = tick - stage if 0 <= tick - stage < microbatches else -1
            assert ticks[stage, tick] == want, (stage, tick)
    bubble = np.count_nonzero(ticks == -1) / ticks.size
    assert bubble == pytest.approx((n - 1) / (microbatches + n - 1))


def test_the_compiled_program_passes_activations_and_never_gathers_w(device_count):
    x, w = _args(4, 2, 3, 8)
    found = collectives(pipeline_forward, jnp.asarray(x), jnp.asarray(w))
    kinds = [c.kind for c in found]
    assert "all-gather" not in kinds
    if device_count == 8:
        # M + n - 2 = 10 activations of (2, 3) from stage i to stage i + 1, then one psum.
        assert kinds == ["collective-permute"] * 10 + ["all-reduce"]
        pairs = "{{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7}}"
        assert all(c.result == "f32[2,3]" and c.groups == pairs for c in found[:-1])
        assert found[-1].result == "f32[4,2,3]"
    else:
        assert kinds in ([], ["all-reduce"])  # over one device: nothing moves


def test_jit_gives_the_eager_result():
    x, w = (jnp.asarray(a) for a in _args(5, 2, 3, 8))
    np.testing.assert_allclose(jax.jit(pipeline_forward)(x, w), pipeline_forward(x, w), 1e-6)


@pytest.mark.parametrize("layers", [8, 6, 1])
@pytest.mark.parametrize("jit", [False, True])
def test_grad_wrt_x_and_w_equals_the_unsharded_twins(layers, jit):
    x, w = (jnp.asarray(a) for a in _args(3, 2, 3, layers, seed=1))
    weights = jnp.asarray(np.random.default_rng(2).normal(size=x.shape), jnp.float32)

    def grads(forward):
        grad = jax.grad(lambda x, w: jnp.sum(forward(x, w) * weights), argnums=(0, 1))
        return (jax.jit(grad) if jit else grad)(x, w)

    for got, want in zip(grads(pipeline_forward), grads(PROBLEM.unsharded), strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_vmap_maps_each_batch_of_microbatches():
    xs, w = (jnp.asarray(a) for a in _args(2, 2, 3, 8))
    stacked = jnp.stack([xs, -xs])
    mapped = jax.vmap(pipeline_forward, in_axes=(0, None))(stacked, w)
    np.testing.assert_allclose(mapped[1], _numpy(-np.asarray(xs), np.asarray(w)), 1e-4, 1e-5)


def test_float16_input_keeps_its_dtype_and_mixed_dtypes_promote():
    x, w = _args(2, 1, 2, 8)
    out = pipeline_forward(jnp.asarray(x, jnp.float16), jnp.asarray(w, jnp.float16))
    assert out.dtype == jnp.float16
    np.testing.assert_allclose(out.astype(np.float32), _numpy(x, w), rtol=2e-2, atol=2e-2)
    assert pipeline_forward(jnp.asarray(x, jnp.float16), jnp.asarray(w)).dtype == jnp.float32


@pytest.mark.parametrize(
    ("shapes", "error", "words"),
    [
        (((2, 3), (4, 3, 3)), ValueError, ["x must be a 3-D array", "(M, B, D)"]),
        (((2, 1, 3), (3, 3)), ValueError, ["w must be a 3-D array", "(L, D, D)"]),
        (((2, 1, 3), (4, 3, 2)), ValueError, ["each layer of w must be (D, D) = (3, 3)"]),
        (((0, 1, 3), (4, 3, 3)), ValueError, ["x must have at least one microbatch"]),
        (((2, 1, 3), (0, 3, 3)), ValueError, ["w must have at least one layer"]),
    ],
)
def test_shapes_that_do_not_fit_are_named(shapes, error, words):
    with pytest.raises(error) as info:
        pipeline_forward(*(jnp.ones(shape) for shape in shapes))
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize(
    ("position", "value", "words"),
    [
        (0, [[[1.0]]], ["x must be a 3-D array", "list"]),
        (0, jnp.ones((2, 1, 3), jnp.int32), ["x must hold floating-point numbers", "int32"]),
        (1, jnp.ones((4, 3, 3), bool), ["w must hold numbers", "bool"]),
    ],
)
def test_bad_values_are_named(position, value, words):
    args = [jnp.ones((2, 1, 3)), jnp.ones((4, 3, 3))]
    args[position] = value
    with pytest.raises(TypeError) as info:
        pipeline_forward(*args)
    for word in words:
        assert word in str(info.value)


def test_generated_cases_keep_the_contract_and_match_numpy(assert_matches_oracle):
    rng = np.random.default_rng(11)
    for _ in range(4):
        case = PROBLEM.generate(rng)
        x, w = case.args
        assert x.shape[0] >= 2  # see _cases: one microbatch on one device sends nothing
        assert w.shape[1:] == (x.shape[2], x.shape[2])
        assert_matches_oracle(PROBLEM, case, pipeline_forward(*case.jax_args()))


def test_the_oracle_is_the_network_written_out():
    for case in PROBLEM.cases:
        np.testing.assert_allclose(PROBLEM.oracle(*case.args), _numpy(*case.args), 1e-12, 1e-12)


# --- what the explanations recognise, on wrong answers built in NumPy -----------------


def _case() -> Case:
    x, w = _args(4, 2, 3, 8, seed=5)
    return Case("c", (x, w))


def _explained(received: np.ndarray) -> str:
    case = _case()
    return _explain(case, PROBLEM.expected(case), received.astype(np.float32)) or ""


def test_all_zeros_is_explained_as_no_activation_or_no_psum():
    text = _explained(np.zeros((4, 2, 3)))
    assert text.startswith("Every output is 0")
    assert "perm=[(i, i + 1), ...]" in text


@pytest.mark.parametrize(("stages", "layers_shown"), [(8, 1), (4, 2), (2, 4)])
def test_the_last_stages_layers_alone_are_explained(stages, layers_shown):
    x, w = _case().args
    text = _explained(_numpy(x, w[8 - 8 // stages :]))
    assert f"This is x through the last {layers_shown} of the 8 layers only" in text
    assert "did not pass their activations on" in text


@pytest.mark.parametrize("ring", [False, True])
@pytest.mark.parametrize("stages", [2, 8])
def test_every_stages_outputs_summed_are_explained(stages, ring):
    x, w = _case().args
    summed = every_stage_summed(x, w, stages, ring=ring)
    assert not np.allclose(summed, _numpy(x, w), atol=1e-3)
    text = _explained(summed)
    assert f"the sum of what every one of the {stages} stages stored" in text
    assert "jnp.where(stage == n - 1, outputs, 0)" in text


def test_every_stage_summed_is_the_sum_of_each_stages_microbatches():
    # A token-by-token account of 2 stages of 4 layers, 4 microbatches, in a line: at
    # index m, stage 1 stores microbatch m through all 8 layers; stage 0 stores
    # microbatch m + 1 through its 4 (ticks 1-3), then, at tick 4, its bubble: zeros
    # through its layers, tanh(0 @ w) = 0.
    x, w = _case().args
    expected = _numpy(x, w).astype(np.float64)
    expected[:3] += _numpy(x[1:], w[:4])
    np.testing.assert_allclose(every_stage_summed(x, w, 2), expected, rtol=1e-6, atol=1e-7)


def test_too_few_ticks_are_explained():
    x, w = _case().args
    short = _numpy(x, w)
    short[-2:] = 0
    assert "The last 2 of the 4 microbatches came out as 0" in _explained(short)
    assert "stopped 2 ticks early" in _explained(short)


@pytest.mark.parametrize(("late", "words"), [(True, "at index m + 1"), (False, "at index m - 1")])
def test_outputs_one_tick_off_are_explained(late, words):
    x, w = _case().args
    right = _numpy(x, w)
    shifted = np.zeros_like(right)
    if late:
        shifted[1:] = right[:-1]
    else:
        shifted[:-1] = right[1:]
    assert f"shifted by one microbatch: microbatch m's result is {words}" in _explained(shifted)


def test_an_unrelated_wrong_answer_is_not_explained():
    x, w = _case().args
    assert _explained(_numpy(x, w) + 0.5) == ""
