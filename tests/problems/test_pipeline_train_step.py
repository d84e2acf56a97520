"""pipeline_train_step: the NumPy oracle (a backward derived by hand) against JAX's own
gradient, the 1F1B tables' promises (each stage at most n microbatches between forward
and backward), the reference on the cases whose shapes differ, its communication read from
the compiled program, the explanations of the classic mistakes, and the refusals."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shard_tutorial import get_problem, pipeline_train_step, usable_device_count
from shard_tutorial.compiled import collectives
from shard_tutorial.problem import Case
from shard_tutorial.problems.pipeline_train_step import oracle, tick_tables, unsharded

PROBLEM = get_problem("pipeline_train_step")


def _args(m: int, b: int, d: int, layers: int, seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=(2, m, b, d)).astype(np.float32)
    return x, y, (rng.normal(size=(layers, d, d)) / np.sqrt(d)).astype(np.float32)


def test_the_hand_derived_backward_is_jax_grad():
    x, y, w = _args(3, 2, 4, 5, seed=1)
    loss, grad = oracle(x, y, w)
    with jax.enable_x64(True):
        want_loss, want_grad = unsharded(*(a.astype(np.float64) for a in (x, y, w)))
    np.testing.assert_allclose(loss, want_loss, rtol=1e-12)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize(("n", "m"), [(1, 1), (1, 3), (4, 1), (4, 3), (4, 16), (8, 32), (3, 7)])
def test_the_1f1b_tables_keep_at_most_n_microbatches_per_stage(n, m):
    forward, backward, _ = tick_tables(n, m)
    assert forward.shape == backward.shape == (2 * (m + n - 1), n)
    for s in range(n):
        f = {int(mb): t for t, mb in enumerate(forward[:, s]) if mb >= 0}
        b = {int(mb): t for t, mb in enumerate(backward[:, s]) if mb >= 0}
        assert sorted(f) == sorted(b) == list(range(m))  # each microbatch once each way
        assert all(f[k] < b[k] for k in range(m))
        if s > 0:  # a forward after the stage before's; a backward after the next stage's
            assert all(f[k] > forward[:, s - 1].tolist().index(k) for k in range(m))
        if s < n - 1:
            assert all(b[k] > backward[:, s + 1].tolist().index(k) for k in range(m))
        alive = [sum(f[k] <= t < b[k] for k in range(m)) for t in range(len(forward))]
        assert max(alive) == min(n - s, m)  # 1F1B: n - s on stage s, not m (GPipe)


@pytest.mark.parametrize("index", [0, 1, 3, 5], ids=lambda i: PROBLEM.cases[i].label)
def test_the_reference_matches_the_oracle(index, assert_matches_oracle, device_count):
    case = PROBLEM.cases[index]
    loss, grad = result = pipeline_train_step(*PROBLEM.arranged(case))
    assert_matches_oracle(PROBLEM, case, result)
    n = usable_device_count(case.args[2].shape[0], device_count)
    assert loss.sharding.is_fully_replicated
    assert len(grad.sharding.device_set) == n
    assert {s.data.shape[0] for s in grad.addressable_shards} == {case.args[2].shape[0] // n}


def test_the_compiled_step_sends_activations_and_gradients_to_neighbours(device_count):
    # 8 layers on 8 stages (2 on 1 device: no collective at all there).
    x, y, w = _args(3, 2, 4, 8)
    found = collectives(pipeline_train_step, *PROBLEM.arranged(Case("8 layers", (x, y, w))))
    if device_count == 1:  # the loss's psum over one device is all that is left
        assert [(c.kind, c.group_size) for c in found] == [("all-reduce", 1)]
        return
    kinds = sorted(c.kind for c in found)
    assert kinds == ["all-reduce", "collective-permute", "collective-permute"]
    permutes = [c for c in found if c.kind == "collective-permute"]
    assert {c.nbytes for c in permutes} == {2 * 4 * 4}  # one (B, D) activation, one gradient
    (reduce,) = [c for c in found if c.kind == "all-reduce"]
    assert reduce.nbytes == 4  # the loss, one number: the layers' gradients stay put


def _explained(case, loss, grad):
    return PROBLEM.diagnose(case, (np.float32(loss), grad.astype(np.float32)))


def test_the_classic_mistakes_are_explained():
    case = PROBLEM.cases[5]  # M=8, L=16: 2 layers on each of 8 stages
    loss, grad = oracle(*case.args)
    assert "8 times too large" in _explained(case, 8 * loss, 8 * grad)
    one, _ = oracle(*(a[-1:] for a in case.args[:2]), case.args[2])
    assert "microbatch 7 alone" in _explained(case, one, grad)
    blocks = grad.reshape(8, 2, *grad.shape[1:])
    summed = np.broadcast_to(blocks.sum(0), blocks.shape).reshape(grad.shape)
    assert 'all-reduced (psum over "stage")' in _explained(case, loss, summed)
    lost = grad.copy()
    lost[:-2] = 0
    assert "did not reach the stages before" in _explained(case, loss, lost)


@pytest.mark.parametrize(
    ("args", "error", "words"),
    [
        (
            (np.ones((2, 1, 3)), np.ones((2, 1, 2)), np.ones((2, 3, 3))),
            ValueError,
            ["y", "(2, 1, 3)"],
        ),
        ((np.ones((2, 1, 3)),) * 2 + (np.ones((2, 2, 2)),), ValueError, ["(D, D) = (3, 3)"]),
        (
            (np.ones((0, 1, 3)),) * 2 + (np.ones((2, 3, 3)),),
            ValueError,
            ["at least one microbatch"],
        ),
        ((np.ones((2, 3)),) * 2 + (np.ones((2, 3, 3)),), ValueError, ["x must be a 3-D array"]),
        ((np.ones((2, 1, 3), np.int32),) * 2 + (np.ones((2, 3, 3)),), TypeError, ["x", "int32"]),
        (([[[1.0]]], np.ones((1, 1, 1)), np.ones((1, 1, 1))), TypeError, ["x", "list"]),
    ],
)
def test_bad_input_is_named(args, error, words):
    with pytest.raises(error) as info:
        pipeline_train_step(*(jnp.asarray(a) if isinstance(a, np.ndarray) else a for a in args))
    for word in words:
        assert word in str(info.value)
