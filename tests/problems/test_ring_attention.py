"""ring_attention against NumPy and its unsharded twin; its ring, its budget and causal_work."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import PROBLEMS, axis_mesh, ring_attention, usable_device_count
from shard_tutorial.collective_costs import ring_bytes
from shard_tutorial.compiled import collectives
from shard_tutorial.problem import Case
from shard_tutorial.problems.ring_attention import HELD_FROM, causal_work

# Run once per CI, on the newest stack at 8 devices (pyproject.toml's markers): the
# generic tests judge this problem on every stack and device count.
pytestmark = pytest.mark.once

PROBLEM = PROBLEMS["ring_attention"]


def _numpy_attention(q, k, v, causal):
    """Attention in float64 NumPy, written here apart from the package's oracle."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    scores = q @ k.T / math.sqrt(q.shape[1])
    if causal:
        scores[np.triu_indices(len(q), 1)] = -np.inf
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    return weights / weights.sum(axis=1, keepdims=True) @ v


def _qkv(length, depth, seed=0, dtype=np.float32, spread=1.0):
    rng = np.random.default_rng(seed)
    return tuple(rng.normal(scale=spread, size=(length, depth)).astype(dtype) for _ in range(3))


@pytest.mark.parametrize(
    ("length", "depth", "causal"),
    [(1, 1, True), (2, 3, True), (6, 2, True), (7, 3, False), (9, 2, True), (16, 5, True),
     (24, 4, False), (40, 3, True)],
)  # fmt: skip
def test_any_shapes_match_numpy(length, depth, causal, device_count):
    q, k, v = _qkv(length, depth, seed=length, spread=2.0)
    out = ring_attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), causal=causal)
    assert out.shape == (length, depth)
    assert out.dtype == jnp.float32
    np.testing.assert_allclose(out, _numpy_attention(q, k, v, causal), rtol=1e-5, atol=1e-5)
    # The contract's mesh: axis_mesh("seq", T), rows over "seq".
    assert dict(out.sharding.mesh.shape) == {"seq": usable_device_count(length, device_count)}
    assert tuple(out.sharding.spec) == ("seq", None)


def test_the_statement_example_by_hand():
    q = jnp.array([[0.0, 0.0], [1.0, 1.0]])
    k = jnp.array([[1.0, 0.0], [0.0, 1.0]])
    v = jnp.array([[2.0, 0.0], [0.0, 4.0]])
    # Equal scores: the mean of v's rows; causal, query 0 sees only key 0.
    np.testing.assert_allclose(ring_attention(q, k, v), [[1.0, 2.0], [1.0, 2.0]], rtol=1e-6)
    np.testing.assert_allclose(ring_attention(q, k, v, True), [[2.0, 0.0], [1.0, 2.0]], rtol=1e-6)


def test_huge_scores_do_not_overflow():
    # exp(800) overflows float32: only the running maximum keeps the softmax finite.
    q, k, v = _qkv(16, 2, seed=3)
    q, k = 20 * q, 20 * k
    out = ring_attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), causal=True)
    assert np.isfinite(np.asarray(out)).all()
    np.testing.assert_allclose(out, _numpy_attention(q, k, v, True), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, np.float16])
def test_low_precision_stays_in_its_dtype(dtype, assert_matches_oracle):
    case = Case(str(np.dtype(dtype)), (*_qkv(16, 4, dtype=dtype), True))
    out = ring_attention(*case.jax_args())
    assert out.dtype == dtype
    assert_matches_oracle(PROBLEM, case, out)


def test_the_blocks_of_k_and_v_go_round_the_ring(device_count):
    q, k, v = (jnp.asarray(a) for a in _qkv(16, 4))
    found = collectives(lambda q, k, v: ring_attention(q, k, v, True), q, k, v)
    if device_count == 1:
        # The ring of one: a hop of each block to itself, which sends nothing.
        assert {(c.kind, c.groups) for c in found} == {("collective-permute", "{{0,0}}")}
        assert sum(ring_bytes(c) for c in found) == 0
        return
    # 7 hops, each a (2, 4) block of k and one of v, every device to the next.
    assert [c.kind for c in found] == ["collective-permute"] * 14
    assert {c.result for c in found} == {"f32[2,4]"}
    pairs = {tuple(int(n) for n in pair.split(",")) for pair in found[0].groups[2:-2].split("},{")}
    assert pairs == {(i, (i + 1) % 8) for i in range(8)}


def test_the_sent_budget_is_the_n_minus_1_hops_of_k_and_v():
    # That the reference sends exactly this is tests/test_budgets.py's, for every budget.
    for case in PROBLEM.cases:
        args = PROBLEM.arranged(case)
        length, depth = case.args[0].shape
        n = usable_device_count(length)
        limit = PROBLEM.budget.limits(args)["sent"]
        # XLA's CPU backend sends bfloat16 as float32 (see test_bfloat16_travels_as_float32).
        sent_as = {"float32": 4, "bfloat16": 4, "float16": 2}[case.args[0].dtype.name]
        assert limit == (n - 1) * 2 * (length // n) * depth * sent_as, case.label


def test_bfloat16_travels_as_float32_and_float16_as_itself(device_count):
    # What the sent budget's count of bfloat16 rests on, read from the compiled program.
    if device_count == 1:
        pytest.skip("one device sends nothing")
    for dtype, sent in ((jnp.bfloat16, "f32"), (jnp.float16, "f16")):
        q = jnp.ones((16, 4), dtype)
        found = collectives(ring_attention, q, q, q)
        assert found, dtype
        assert {c.result.lstrip("(")[:3] for c in found} == {sent}, (
            dtype,
            [c.result for c in found],
        )


def _gather_then_attend(mesh, causal):
    """The shortcut the held budget is about: k and v gathered whole, then attended to."""

    def attend(q, k, v):
        k = jax.lax.all_gather(k, "seq", tiled=True)
        v = jax.lax.all_gather(v, "seq", tiled=True)
        scores = q @ k.T / math.sqrt(q.shape[1])
        if causal:
            mine = jax.lax.axis_index("seq") * q.shape[0] + jnp.arange(q.shape[0])
            scores = jnp.where(jnp.arange(k.shape[0])[None, :] <= mine[:, None], scores, -jnp.inf)
        return jax.nn.softmax(scores, axis=1) @ v

    rows = P("seq", None)
    return jax.jit(jax.shard_map(attend, mesh=mesh, in_specs=(rows,) * 3, out_specs=rows))


def _memory(function, length, depth):
    mesh = axis_mesh("seq", length)
    shaped = jax.ShapeDtypeStruct(
        (length, depth), jnp.float32, sharding=NamedSharding(mesh, P("seq", None))
    )
    stats = jax.jit(function).lower(shaped, shaped, shaped).compile().memory_analysis()
    held = stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes
    return held, stats.peak_memory_in_bytes


def test_the_held_budget_separates_the_ring_from_gathering(device_count):
    if device_count == 1:
        for case in PROBLEM.cases:
            assert "held" not in PROBLEM.budget.limits(PROBLEM.arranged(case)), case.label
        return
    judged = 0
    for case in PROBLEM.cases:
        q, k, _, causal = case.args
        limits = PROBLEM.budget.limits(PROBLEM.arranged(case))
        if "held" not in limits:
            assert 2 * k.nbytes < HELD_FROM, case.label
            continue
        length, depth = q.shape
        ring, ring_peak = _memory(
            lambda q, k, v, c=causal: ring_attention(q, k, v, c), length, depth
        )
        mesh = axis_mesh("seq", length)
        gathered, gathered_peak = _memory(_gather_then_attend(mesh, causal), length, depth)
        assert ring < limits["held"] < gathered, case.label
        # Less than six blocks (its own of q, k, v and the output, two in flight) and the
        # whole of k and v:
        assert limits["held"] == 6 * k.nbytes // 8 + 2 * k.nbytes - 1, case.label
        # XLA's peak on CPU counts arguments and outputs only: it cannot tell them apart.
        assert abs(ring_peak - gathered_peak) <= 64, case.label
        judged += 1
    assert judged >= 1


def test_below_held_from_the_buffers_do_not_separate(device_count):
    # T=128, D=16 on 8 devices: k and v are 16 KiB; the ring's per-step buffers
    # outweigh the blocks, so a limit of "less than k and v" would refuse the ring.
    if device_count == 1:
        pytest.skip("one device: nothing is sent, nothing limited")
    ring, _ = _memory(lambda q, k, v: ring_attention(q, k, v, True), 128, 16)
    gathered, _ = _memory(_gather_then_attend(axis_mesh("seq", 128), True), 128, 16)
    whole = 2 * 128 * 16 * 4
    assert whole < HELD_FROM
    assert ring < gathered  # the ring holds less than gathering...
    assert 0.5 * whole < ring  # ...but more than half of k and v: no clean line to draw


@pytest.mark.parametrize("causal", [False, True])
def test_jit_gives_the_eager_result(causal):
    args = tuple(jnp.asarray(a) for a in _qkv(16, 4, seed=5))
    jitted = jax.jit(ring_attention, static_argnames="causal")(*args, causal=causal)
    np.testing.assert_allclose(jitted, ring_attention(*args, causal=causal), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("length", "causal", "jit"), [(16, True, False), (12, False, True), (5, True, True)]
)
def test_grad_equals_the_unsharded_twins(length, causal, jit):
    q, k, v = (jnp.asarray(a) for a in _qkv(length, 3, seed=length))
    weights = jnp.asarray(np.random.default_rng(2).normal(size=(length, 3)), jnp.float32)

    def grads(attention):
        def loss(q, k, v):
            return jnp.sum(attention(q, k, v, causal) * weights)

        grad = jax.grad(loss, argnums=(0, 1, 2))
        return (jax.jit(grad) if jit else grad)(q, k, v)

    for got, want in zip(grads(ring_attention), grads(PROBLEM.unsharded), strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("shapes", "error", "words"),
    [
        (((4, 3), (4, 2), (4, 3)), ValueError, ["k has shape (4, 2)", "q has shape (4, 3)"]),
        (((4, 3), (4, 3), (5, 3)), ValueError, ["v has shape (5, 3)"]),
        (((4,), (4, 3), (4, 3)), ValueError, ["q must be a 2-D array", "(T, D)"]),
        (((0, 3), (0, 3), (0, 3)), ValueError, ["at least one row and one column"]),
        (((4, 0), (4, 0), (4, 0)), ValueError, ["at least one row and one column"]),
    ],
)
def test_shapes_that_do_not_fit_are_named(shapes, error, words):
    with pytest.raises(error) as info:
        ring_attention(*(jnp.ones(shape) for shape in shapes))
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize(
    ("position", "value", "words"),
    [
        (0, [[1.0, 2.0]], ["q must be a 2-D array", "list"]),
        (1, jnp.ones((2, 2), jnp.int32), ["k must hold floating-point numbers", "int32"]),
        (2, jnp.ones((2, 2), jnp.float16), ["v has dtype float16 but q has dtype float32"]),
        (3, 1, ["causal must be True or False", "int"]),
        (3, "yes", ["causal must be True or False", "str"]),
    ],
)
def test_bad_values_are_named(position, value, words):
    args = [jnp.ones((2, 2)), jnp.ones((2, 2)), jnp.ones((2, 2)), False]
    args[position] = value
    with pytest.raises(TypeError) as info:
        ring_attention(*args)
    for word in words:
        assert word in str(info.value)


def test_a_traced_causal_is_refused_naming_it():
    args = (jnp.ones((4, 2)),) * 3
    with pytest.raises(TypeError, match="static_argnames='causal'"):
        jax.jit(ring_attention)(*args, jnp.bool_(True))


def test_causal_work_counts_the_unmasked_scores(device_count):
    for devices in sorted({1, min(2, device_count), device_count}):
        per_device = causal_work(8 * devices, devices).sum(axis=1)
        rows = 8  # a device's queries: positions 8i..8i+7, each sees itself and those before
        want = [sum(range(rows * i + 1, rows * (i + 1) + 1)) for i in range(devices)]
        np.testing.assert_array_equal(per_device, want)
        zigzag = causal_work(8 * devices, devices, zigzag=True).sum(axis=1)
        assert len(set(zigzag.tolist())) == 1  # every device the same work
        assert zigzag.sum() == per_device.sum() == (8 * devices) * (8 * devices + 1) // 2


def test_causal_work_on_8_devices(device_count):
    if device_count < 8:
        pytest.skip("needs 8 devices")
    work = causal_work(64, 8)
    # Device i holds block i - s after s hops: blocks after its own are all masked.
    np.testing.assert_array_equal(work[:, 0], [36] * 8)  # its own block: a triangle
    assert (work[0, 1:] == 0).all()
    assert (work[7, 1:] == 64).all()
    np.testing.assert_array_equal(causal_work(64, 8, zigzag=True).sum(axis=1), [260] * 8)


@pytest.mark.parametrize(
    ("length", "devices", "zigzag", "words"),
    [(10, 4, False, "multiple of 4"), (12, 4, True, "multiple of 8"), (8, 0, False, "devices")],
)
def test_causal_work_refuses_lengths_that_do_not_split(length, devices, zigzag, words):
    with pytest.raises(ValueError, match=words):
        causal_work(length, devices, zigzag=zigzag)


def test_generated_cases_keep_the_contract_and_match_numpy(assert_matches_oracle):
    rng = np.random.default_rng(11)
    for _ in range(4):
        case = PROBLEM.generate(rng)
        q, k, v, causal = case.args
        assert q.shape == k.shape == v.shape
        assert isinstance(causal, bool)
        out = ring_attention(*case.jax_args())
        np.testing.assert_allclose(out, _numpy_attention(q, k, v, causal), rtol=1e-5, atol=1e-5)
        assert_matches_oracle(PROBLEM, case, out)
