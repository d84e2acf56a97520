"""expert_parallel_moe against NumPy and its unsharded twin; its mesh, its all-to-alls, its hints."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import PROBLEMS, axis_mesh, expert_parallel_moe, usable_device_count
from shard_tutorial.compiled import collectives
from shard_tutorial.problem import Case
from shard_tutorial.problems.expert_parallel_moe import local_argmax, no_return, round_robin

# Run once per CI, on the newest stack at 8 devices (pyproject.toml's markers): the
# generic tests judge this problem on every stack and device count.
pytestmark = pytest.mark.once

PROBLEM = PROBLEMS["expert_parallel_moe"]


def _args(tokens: int, d: int, experts: int, f: int, seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    return (
        rng.normal(size=(tokens, d)).astype(np.float32),
        rng.normal(size=(tokens, experts)).astype(np.float32),
        rng.normal(size=(experts, d, f)).astype(np.float32),
    )


def _numpy_moe(x: np.ndarray, logits: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Token by token, in float64: the independent oracle of these tests."""
    rows = []
    for t in range(x.shape[0]):
        best = max(range(logits.shape[1]), key=lambda e: (logits[t, e], -e))  # first on ties
        rows.append(x[t].astype(np.float64) @ w[best].astype(np.float64))
    return np.array(rows).reshape(x.shape[0], w.shape[2])


# Each example compiles for its shapes; a few, chosen among the device counts that matter.
@settings(max_examples=4, deadline=None)
@given(
    n=st.sampled_from([1, 2, 3, 4, 8]),
    per_device=st.integers(1, 3),
    local=st.integers(1, 2),
    d=st.integers(1, 4),
    f=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_any_shapes_match_numpy_token_by_token(n, per_device, local, d, f, seed):
    x, logits, w = _args(n * per_device, d, n * local, f, seed)
    out = expert_parallel_moe(jnp.asarray(x), jnp.asarray(logits), jnp.asarray(w))
    assert (out.shape, out.dtype) == ((n * per_device, f), jnp.float32)
    np.testing.assert_allclose(out, _numpy_moe(x, logits, w), rtol=1e-5, atol=1e-5)
    devices = usable_device_count(math.gcd(n * per_device, n * local))
    assert dict(out.sharding.mesh.shape) == {"expert": devices}
    assert tuple(out.sharding.spec)[:1] == ("expert",)


def test_ties_go_to_the_first_expert():
    x = jnp.ones((8, 1))
    logits = jnp.tile(jnp.array([[0.0, 3.0, 3.0, 1.0, 3.0, 0.0, 0.0, 0.0]]), (8, 1))
    w = jnp.arange(8.0).reshape(8, 1, 1)  # expert e multiplies by e
    np.testing.assert_array_equal(expert_parallel_moe(x, logits, w), np.ones((8, 1)))


def test_every_token_on_one_expert_is_not_dropped():
    x, _, w = _args(32, 4, 8, 3)
    logits = np.zeros((32, 8), np.float32)
    logits[:, 5] = 1.0  # every token of every device chooses expert 5
    out = expert_parallel_moe(jnp.asarray(x), jnp.asarray(logits), jnp.asarray(w))
    np.testing.assert_allclose(out, x.astype(np.float64) @ w[5], rtol=1e-5, atol=1e-5)


def test_no_tokens_gives_an_empty_result_on_the_mesh():
    x, logits, w = _args(0, 3, 8, 2)
    out = expert_parallel_moe(jnp.asarray(x), jnp.asarray(logits), jnp.asarray(w))
    assert (out.shape, out.dtype) == ((0, 2), jnp.float32)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, jnp.bfloat16])
def test_other_dtypes_match_the_oracle(dtype, assert_matches_oracle):
    rng = np.random.default_rng(3)
    x = rng.integers(-4, 5, (16, 3)).astype(dtype)
    w = rng.integers(-4, 5, (8, 3, 2)).astype(dtype)
    logits = rng.normal(size=(16, 8)).astype(np.float32)
    case = Case(str(np.dtype(dtype)), (x, logits, w))
    out = expert_parallel_moe(*case.jax_args())
    assert out.dtype == dtype
    assert_matches_oracle(PROBLEM, case, out)


def test_jit_and_grad_agree_with_the_unsharded_layer():
    x, logits, w = (jnp.asarray(a) for a in _args(16, 3, 8, 2, seed=5))
    np.testing.assert_allclose(
        jax.jit(expert_parallel_moe)(x, logits, w), PROBLEM.unsharded(x, logits, w), rtol=1e-5
    )
    weights = np.random.default_rng(1).uniform(0.5, 2.0, (16, 2)).astype(np.float32)

    def loss(function, x, w):
        return jnp.sum(function(x, logits, w) * weights)

    got = jax.grad(lambda x, w: loss(expert_parallel_moe, x, w), argnums=(0, 1))(x, w)
    want = jax.grad(lambda x, w: loss(PROBLEM.unsharded, x, w), argnums=(0, 1))(x, w)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_two_all_to_alls_and_nothing_else(device_count):
    x, logits, w = (jnp.asarray(a) for a in _args(16, 4, 8, 3))
    found = collectives(expert_parallel_moe, x, logits, w)
    if device_count == 1:
        assert found == []  # XLA drops collectives over one device
        return
    # Dispatch: 8 buffers of 2 slots of 4 features and 1 one-hot column; return: 3 results.
    # (XLA on CPU may print each as a tuple of the 8 buffers: compare bytes per device.)
    assert [(c.kind, c.nbytes) for c in found] == [
        ("all-to-all", 8 * 2 * (4 + 1) * 4),
        ("all-to-all", 8 * 2 * 3 * 4),
    ]


def test_the_classic_mistakes_are_explained():
    case = next(c for c in PROBLEM.cases if c.label.startswith("T=16, D=4"))
    x, logits, w = case.args
    local = local_argmax(x, logits, w, 8)
    assert not np.allclose(local, PROBLEM.expected(case))
    assert "best expert on its own device" in PROBLEM.diagnose(case, local.astype(np.float32))
    kept = no_return(x, logits, w, 8)
    assert not np.allclose(kept, PROBLEM.expected(case))
    assert "stayed on the devices of the experts" in PROBLEM.diagnose(case, kept.astype(np.float32))
    two_each = next(c for c in PROBLEM.cases if c.label.startswith("T=24, E=16"))
    dealt = round_robin(*two_each.args, 8).astype(np.float32)
    assert not np.allclose(dealt, PROBLEM.expected(two_each))
    assert "dealt round-robin" in PROBLEM.diagnose(two_each, dealt)
    dropped = PROBLEM.expected(case).copy()
    dropped[[3, 9]] = 0
    message = PROBLEM.diagnose(case, dropped)
    assert "2 of the 16 tokens were dropped" in message


def test_the_numpy_mistakes_agree_with_a_token_by_token_account():
    x, logits, w = _args(8, 2, 4, 3, seed=7)
    # local_argmax on 2 devices: tokens 0-3 choose among experts 0-1, tokens 4-7 among 2-3.
    own = [
        int(np.argmax(logits[t, :2])) if t < 4 else 2 + int(np.argmax(logits[t, 2:]))
        for t in range(8)
    ]
    np.testing.assert_allclose(
        local_argmax(x, logits, w, 2), np.stack([x[t] @ w[e] for t, e in enumerate(own)]), rtol=1e-6
    )
    # no_return on 2 devices: slot t%4 of the expert's device gets token t's result.
    best = np.argmax(logits, axis=1)
    expected = np.zeros((8, 3))
    for t in range(8):
        expected[(best[t] // 2) * 4 + t % 4] += x[t].astype(np.float64) @ w[best[t]]
    np.testing.assert_allclose(no_return(x, logits, w, 2), expected, rtol=1e-6)
    # round_robin on 2 devices of 2 experts: expert e is looked for on device e % 2 as its
    # local expert e // 2, which is expert (e % 2) * 2 + e // 2: 0, 2, 1, 3 for 0, 1, 2, 3.
    used = [(0, 2, 1, 3)[e] for e in best]
    np.testing.assert_allclose(
        round_robin(x, logits, w, 2), np.stack([x[t] @ w[e] for t, e in enumerate(used)]), rtol=1e-6
    )


@pytest.mark.parametrize(
    ("args", "error", "words"),
    [
        ((jnp.ones(4), jnp.ones((4, 2)), jnp.ones((2, 4, 1))), ValueError, ["x", "2-D"]),
        ((jnp.ones((4, 3)), jnp.ones((5, 2)), jnp.ones((2, 3, 1))), ValueError, ["router_logits", "5 rows", "4"]),
        ((jnp.ones((4, 3)), jnp.ones((4, 2)), jnp.ones((3, 3, 1))), ValueError, ["w holds 3 experts", "2"]),
        ((jnp.ones((4, 3)), jnp.ones((4, 2)), jnp.ones((2, 5, 1))), ValueError, ["5 features", "x has 3"]),
        ((jnp.ones((4, 3)), jnp.ones((4, 0)), jnp.ones((0, 3, 1))), ValueError, ["at least 1"]),
        ((jnp.ones((4, 3)), jnp.ones((4, 2), jnp.complex64), jnp.ones((2, 3, 1))), TypeError, ["router_logits", "real"]),
        ((jnp.ones((4, 3), bool), jnp.ones((4, 2)), jnp.ones((2, 3, 1))), TypeError, ["x", "bool"]),
        ((jnp.ones((4, 3)), jnp.ones((4, 2)), [[1.0]]), TypeError, ["w"]),
    ],
)  # fmt: skip
def test_bad_input_is_named(args, error, words):
    with pytest.raises(error) as info:
        expert_parallel_moe(*args)
    for word in words:
        assert word in str(info.value)


def test_ragged_all_to_all_lowers_but_xla_cpu_cannot_compile_it(device_count):
    # What the page says of the pinned versions (jax 0.10 and 0.12), on any device count.
    mesh = axis_mesh("expert", device_count)

    def one_row_to_each(rows):
        n = jax.lax.axis_size("expert")
        ones = jnp.ones(n, jnp.int32)
        here = jnp.full(n, jax.lax.axis_index("expert"), jnp.int32)
        starts = jnp.arange(n, dtype=jnp.int32)
        return jax.lax.ragged_all_to_all(
            rows, jnp.zeros_like(rows), starts, ones, here, ones, axis_name="expert"
        )

    ragged = jax.jit(
        jax.shard_map(one_row_to_each, mesh=mesh, in_specs=P("expert"), out_specs=P("expert"))
    )
    rows = jax.device_put(
        jnp.arange(device_count**2 * 2.0).reshape(-1, 2), NamedSharding(mesh, P("expert"))
    )
    assert "ragged_all_to_all" in ragged.lower(rows).as_text()
    with pytest.raises(jax.errors.JaxRuntimeError, match="ragged-all-to-all` is not supported"):
        ragged(rows)


def test_ragged_dot_multiplies_each_group_by_its_matrix():
    rng = np.random.default_rng(2)
    lhs = rng.normal(size=(6, 3)).astype(np.float32)
    rhs = rng.normal(size=(3, 3, 2)).astype(np.float32)
    sizes = np.array([1, 0, 5], np.int32)
    got = jax.lax.ragged_dot(jnp.asarray(lhs), jnp.asarray(rhs), jnp.asarray(sizes))
    want = np.concatenate([lhs[:1] @ rhs[0].astype(np.float64), lhs[1:] @ rhs[2]])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
