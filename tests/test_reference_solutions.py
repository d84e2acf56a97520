"""Every reference solution against its problem's NumPy oracle, on every case."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from shard_tutorial import (
    PROBLEMS,
    shard_map_double,
    shard_map_psum,
    shard_map_vs_vmap,
    usable_device_count,
)

# The statement's example and the last case of each problem: NumPy input is one path
# into the reference whatever the case (each case runs in the reference's check).
CASES = [
    pytest.param(problem, case, id=f"{name}-{index}")
    for name, problem in PROBLEMS.items()
    for index, case in enumerate(problem.cases)
    if index in (0, len(problem.cases) - 1)
]


# Laid out as the contract says the arguments arrive (a weight already split...), each
# reference meets its oracle on every case in its check, on 1 and 8 devices, in
# test_pasted_solutions.py; here, given NumPy arrays, laid out nowhere.
@pytest.mark.parametrize(("problem", "case"), CASES)
def test_reference_accepts_numpy_input(problem, case, assert_matches_oracle):
    assert_matches_oracle(problem, case, problem.reference(*case.args))


@pytest.mark.parametrize("name", ["shard_map_double", "shard_map_vs_vmap", "shard_map_psum"])
def test_sharded_solutions_use_every_device_that_divides_the_batch(name, device_count):
    problem = PROBLEMS[name]
    for case in problem.cases:
        out = problem.reference(*case.jax_args())
        batch = case.args[0].shape[0]
        assert len(out.sharding.device_set) == usable_device_count(batch, device_count), case.label


def test_a_second_call_does_not_compile(count_compiles):
    inputs = {name: problem.arranged(problem.cases[-1]) for name, problem in PROBLEMS.items()}
    for name, problem in PROBLEMS.items():
        jax.block_until_ready(problem.reference(*inputs[name]))
    with count_compiles() as compiles:
        for name, problem in PROBLEMS.items():
            jax.block_until_ready(problem.reference(*inputs[name]))
    assert compiles == []


def test_seed_examples():
    # The literal examples of the problem statements, independent of any oracle.
    np.testing.assert_array_equal(shard_map_double(jax.numpy.array([1.0, 2.0])), [2.0, 4.0])
    np.testing.assert_array_equal(
        shard_map_vs_vmap(jax.numpy.array([[1.0, 0.0], [0.0, 1.0]])), [[1.0, 1.0], [1.0, 1.0]]
    )
    assert float(shard_map_psum(jax.numpy.array([1.0, 2.0, 3.0]))) == 6.0
