"""ulysses_attention against NumPy and its unsharded twin; its all-to-alls, its budget and causal_work."""

from __future__ import annotations

import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import PROBLEMS, axis_mesh, ulysses_attention, usable_device_count
from shard_tutorial.collective_costs import ring_bytes
from shard_tutorial.compiled import collectives
from shard_tutorial.problem import Case
from shard_tutorial.problems.ring_attention import causal_work as ring_causal_work
from shard_tutorial.problems.ulysses_attention import HELD_FROM, _attention, _explain, causal_work

# Run once per CI, on the newest stack at 8 devices (pyproject.toml's markers): the
# generic tests judge this problem on every stack and device count.
pytestmark = pytest.mark.once

PROBLEM = PROBLEMS["ulysses_attention"]


def _numpy_attention(q, k, v, causal):
    """Multi-head attention in float64 NumPy, written here apart from the package's oracle."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    scores = np.einsum("thd,shd->hts", q, k) / math.sqrt(q.shape[2])
    if causal:
        scores[:, np.triu_indices(len(q), 1)[0], np.triu_indices(len(q), 1)[1]] = -np.inf
    weights = np.exp(scores - scores.max(axis=2, keepdims=True))
    weights /= weights.sum(axis=2, keepdims=True)
    return np.einsum("hts,shd->thd", weights, v)


def _qkv(shape, seed=0, dtype=np.float32, spread=1.0):
    rng = np.random.default_rng(seed)
    return tuple(rng.normal(scale=spread, size=shape).astype(dtype) for _ in range(3))


@pytest.mark.parametrize(
    ("shape", "causal"), [((6, 4, 3), True), ((8, 2, 2), False), ((24, 12, 2), True)]
)
def test_any_shapes_match_numpy_on_the_gcd_mesh(shape, causal, device_count):
    q, k, v = _qkv(shape, seed=shape[0], spread=2.0)
    out = ulysses_attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), causal=causal)
    assert out.shape == shape
    assert out.dtype == jnp.float32
    np.testing.assert_allclose(out, _numpy_attention(q, k, v, causal), rtol=1e-5, atol=1e-5)
    # The contract's mesh: the most devices that divide both T and H (2 for T=6, H=4 on 8).
    n = usable_device_count(math.gcd(shape[0], shape[1]), device_count)
    assert dict(out.sharding.mesh.shape) == {"seq": n}
    assert tuple(out.sharding.spec) == ("seq", None, None)


def test_the_statement_example_by_hand():
    q = jnp.array([[[0.0], [1.0]], [[1.0], [1.0]]])
    k = jnp.array([[[1.0], [0.0]], [[1.0], [2.0]]])
    v = jnp.array([[[2.0], [4.0]], [[6.0], [0.0]]])
    # Head 0: token 0's scores are 0 and 0, the mean of v; token 1's 1 and 1, the mean too.
    # Head 1: token 1's scores are 0 and 2: weights 1 / (1 + e^2) and e^2 / (1 + e^2).
    head1 = 4.0 / (1 + math.e**2)
    want = [[[4.0], [4 / (1 + math.e**2)]], [[4.0], [head1]]]
    np.testing.assert_allclose(ulysses_attention(q, k, v), want, rtol=1e-6)
    causal = [[[2.0], [4.0]], [[4.0], [head1]]]  # token 0 sees itself only
    np.testing.assert_allclose(ulysses_attention(q, k, v, True), causal, rtol=1e-6)


def test_low_precision_stays_in_its_dtype(assert_matches_oracle):
    case = Case("bfloat16", (*_qkv((8, 4, 4), dtype=jnp.bfloat16), True))
    out = ulysses_attention(*case.jax_args())
    assert out.dtype == jnp.bfloat16
    assert_matches_oracle(PROBLEM, case, out)


def test_four_all_to_alls_and_nothing_else(device_count):
    q = jnp.asarray(_qkv((16, 8, 4))[0])
    found = collectives(lambda q, k, v: ulysses_attention(q, k, v, True), q, q, q)
    if device_count == 1:
        assert sum(ring_bytes(c, 1) for c in found) == 0  # over one device: nothing sent
        return
    # q, k and v to heads, the output back: each an (2, 1, 4) piece to each of 8 devices
    # (jaxlib 0.12.1's XLA prints each piece with a dimension of size 1 more, where it
    # cut: f32[1,2,1,4] or f32[2,1,1,4]; older ones print f32[2,1,4]).
    assert [c.kind for c in found] == ["all-to-all"] * 4
    for c in found:
        pieces = re.findall(r"f32\[([\d,]*)\]", c.result)
        assert len(pieces) == 8, c.result
        assert {tuple(d for d in map(int, p.split(",")) if d != 1) for p in pieces} == {(2, 4)}
    # Each device keeps one of its 8 pieces and sends 7: 7 * 2 * 4 * 4 bytes, four times.
    assert (
        sum(ring_bytes(c) for c in found)
        == 4 * 7 * 32
        == PROBLEM.budget.limits((np.ones((16, 8, 4), np.float32),) * 3 + (True,))["sent"]
    )


def test_the_sent_budget_is_four_all_to_alls_of_a_block(device_count):
    # That the reference sends exactly this is tests/test_budgets.py's, for every budget.
    for case in PROBLEM.cases:
        q = case.args[0]
        n = usable_device_count(math.gcd(*q.shape[:2]), device_count)
        limit = PROBLEM.budget.limits(PROBLEM.arranged(case))["sent"]
        widened = 2 if q.dtype == jnp.bfloat16 else 1  # XLA's CPU backend sends it as f32
        assert limit == 4 * (n - 1) / n * q.nbytes / n * widened, case.label


def test_bfloat16_is_sent_as_float32_and_float16_as_it_is():
    # What the sent budget's bfloat16 rule rests on, read from the compiled program.
    for dtype, sent in ((jnp.bfloat16, "f32"), (jnp.float16, "f16")):
        q = jnp.ones((8, 8, 4), dtype)
        found = collectives(ulysses_attention, q, q, q)
        assert {c.result[1:4] for c in found} <= {sent}, dtype


def _gather_kv(mesh, causal):
    """The shortcut the held budget is about: k and v gathered whole, every head on every device."""

    def attend(q, k, v):
        k = jax.lax.all_gather(k, "seq", tiled=True)
        v = jax.lax.all_gather(v, "seq", tiled=True)
        scores = jnp.einsum("thd,shd->hts", q, k) / math.sqrt(q.shape[2])
        if causal:
            mine = jax.lax.axis_index("seq") * q.shape[0] + jnp.arange(q.shape[0])
            keys = jnp.arange(k.shape[0])
            scores = jnp.where(keys[None, None, :] <= mine[None, :, None], scores, -jnp.inf)
        return jnp.einsum("hts,shd->thd", jax.nn.softmax(scores, axis=2), v)

    tokens = P("seq", None, None)
    return jax.jit(jax.shard_map(attend, mesh=mesh, in_specs=(tokens,) * 3, out_specs=tokens))


def _held(function, shape):
    mesh = axis_mesh("seq", math.gcd(*shape[:2]))
    shaped = jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, P("seq")))
    stats = jax.jit(function).lower(shaped, shaped, shaped).compile().memory_analysis()
    return (
        stats.argument_size_in_bytes
        + stats.output_size_in_bytes
        + stats.temp_size_in_bytes
        - stats.alias_size_in_bytes
    )


def test_the_held_budget_separates_ulysses_from_gathering_k_and_v(device_count):
    if device_count == 1:
        for case in PROBLEM.cases:
            assert "held" not in PROBLEM.budget.limits(PROBLEM.arranged(case)), case.label
        return
    (big,) = [c for c in PROBLEM.cases if "held" in PROBLEM.budget.limits(PROBLEM.arranged(c))]
    q, k, _, causal = big.args
    assert k.nbytes >= HELD_FROM
    limit = PROBLEM.budget.limits(PROBLEM.arranged(big))["held"]
    ulysses = _held(lambda q, k, v: ulysses_attention(q, k, v, causal), q.shape)
    gathered = _held(_gather_kv(axis_mesh("seq", 8), causal), q.shape)
    assert ulysses < limit < gathered
    # Eight blocks of k, two copies of a device's scores (one head of 64 x 64), all of k:
    assert limit == 8 * k.nbytes // 8 + 2 * 64 * 64 * 4 + k.nbytes - 1


def test_no_held_limit_where_the_scores_outweigh_k():
    # T / n > K / 2: a device's scores are more than half of k; gathering k then holds no
    # more than Ulysses' two copies of the scores (measured on 8 devices: Ulysses 591,104
    # bytes, k and v gathered 720,900, for T=256, H=8, K=16), so no limit is stated.
    args = (np.ones((256, 8, 16), np.float32),) * 3 + (True,)
    assert "held" not in PROBLEM.budget.limits(args)


def test_causal_work_is_balanced_where_the_rings_is_not(device_count):
    for devices in sorted({1, min(4, device_count), device_count}):
        per_device = causal_work(8 * devices, 2 * devices, devices)
        length = 8 * devices
        # Every device: 2 heads, each with every token seeing itself and those before.
        np.testing.assert_array_equal(per_device, [2 * length * (length + 1) // 2] * devices)
        # The ring's, on the same tokens, one head: the last device does the most.
        ring = ring_causal_work(length, devices).sum(axis=1)
        assert per_device.sum() == 2 * devices * ring.sum()
        assert devices == 1 or ring[-1] > ring[0]


@pytest.mark.parametrize(
    ("length", "heads", "devices", "words"),
    [(10, 8, 4, "multiples of 4"), (8, 6, 4, "multiples of 4"), (8, 8, 0, "devices")],
)
def test_causal_work_refuses_counts_that_do_not_split(length, heads, devices, words):
    with pytest.raises(ValueError, match=words):
        causal_work(length, heads, devices)


def test_each_classic_mistake_is_explained():
    q, k, v = _qkv((16, 8, 4), seed=3)
    causal = Case("c", (q, k, v, True))
    plain = Case("p", (q, k, v, False))

    def says(case, answer):
        return _explain(case, None, answer) or ""

    assert says(plain, _attention(q, k, v, False, scale=1.0)).startswith("The scores were not")
    assert "divided by K = 4" in says(plain, _attention(q, k, v, False, scale=0.25))
    own = np.concatenate([_numpy_attention(q[i : i + 2], k[i : i + 2], v[i : i + 2], True)
                          for i in range(0, 16, 2)])  # fmt: skip
    assert "Each of 8 devices attended over its own 2 tokens" in says(causal, own)
    shifted = _attention(q, k, v, True, offsets=np.arange(8) * 2)  # head h on device h
    assert "On 8 devices, the causal mask counted the queries' positions" in says(causal, shifted)
    assert _explain(causal, None, _numpy_attention(q, k, v, True)) is None  # right: no mistake


@pytest.mark.parametrize(
    ("args", "error", "words"),
    [
        ((np.ones((4, 2)),) * 3, ValueError, ["q must be a 3-D array", "(T, H, K)"]),
        ((np.ones((4, 2, 2)), np.ones((4, 1, 2)), np.ones((4, 2, 2))), ValueError,
         ["k has shape (4, 1, 2)"]),
        ((np.ones((4, 0, 2)),) * 3, ValueError, ["at least one token, one head"]),
        ((np.ones((4, 2, 2), np.int32),) * 3, TypeError, ["q must hold floating-point"]),
        ((np.ones((4, 2, 2)), np.ones((4, 2, 2), np.float16), np.ones((4, 2, 2))), TypeError,
         ["k has dtype float16"]),
    ],
)  # fmt: skip
def test_bad_input_is_named(args, error, words):
    with pytest.raises(error) as info:
        ulysses_attention(*(jnp.asarray(a) for a in args))
    for word in words:
        assert word in str(info.value)


def test_a_traced_causal_is_refused_naming_it():
    args = (jnp.ones((4, 2, 2)),) * 3
    with pytest.raises(TypeError, match="static_argnames='causal'"):
        jax.jit(ulysses_attention)(*args, jnp.bool_(True))


def test_jit_and_grad_agree_with_the_unsharded_twin():
    q, k, v = (jnp.asarray(a) for a in _qkv((8, 4, 2), seed=5))
    weights = jnp.asarray(np.random.default_rng(2).normal(size=(8, 4, 2)), jnp.float32)

    def grads(attention):
        return jax.jit(jax.grad(lambda *a: jnp.sum(attention(*a, True) * weights), (0, 1, 2)))

    for got, want in zip(grads(ulysses_attention)(q, k, v), grads(PROBLEM.unsharded)(q, k, v),
                         strict=True):  # fmt: skip
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_generated_cases_keep_the_contract_and_match_numpy(assert_matches_oracle):
    rng = np.random.default_rng(11)
    for _ in range(3):
        case = PROBLEM.generate(rng)
        q, k, v, causal = case.args
        assert q.shape == k.shape == v.shape
        assert isinstance(causal, bool)
        out = ulysses_attention(*case.jax_args())
        np.testing.assert_allclose(out, _numpy_attention(q, k, v, causal), rtol=1e-5, atol=1e-5)
        assert_matches_oracle(PROBLEM, case, out)
