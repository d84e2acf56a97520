"""Budgets: what a device may send and hold for a case (problem.Budget), as the judge reads them.

A budget is only worth its verdict if the problem's own solution keeps within it on
every case, and if it is tight: the figures it allows are those the technique needs,
so that an answer which sends or holds more is caught (tests/test_checker_doors.py
has such answers).
"""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest
from judging import pasted_reference

from shard_tutorial import PROBLEMS
from shard_tutorial._check_worker import answer, load_solution
from shard_tutorial.compiled import parse_collectives, ring_bytes

BUDGETED = [name for name in PROBLEMS if PROBLEMS[name].budget is not None]


def test_the_problems_that_teach_a_cost_have_a_budget():
    assert set(BUDGETED) >= {"shard_map_psum_scatter", "fsdp_sgd_step"}


@pytest.fixture(scope="module")
def pasted(tmp_path_factory):
    """Each budgeted problem's reference, pasted into a reader's file (not the package's)."""
    folder = tmp_path_factory.mktemp("pasted")
    solutions = {}
    for name in BUDGETED:
        path = folder / f"{name}.py"
        path.write_text(pasted_reference(name))
        solutions[name] = load_solution({"kind": "file", "path": str(path), "function": name})
    return solutions


@pytest.mark.parametrize("name", BUDGETED)
def test_a_budget_of_bytes_sent_is_what_the_reference_sends(name, pasted):
    # Tight, on every case: the reference sends exactly what is allowed, no slack. (That
    # the reference keeps within every figure of its budget, on every case and random
    # ones, on 1 and 8 devices, is test_pasted_solutions.py's check of it.)
    problem = PROBLEMS[name]
    compared = 0
    for case in problem.cases:
        args = problem.arranged(case)
        limit = problem.budget.limits(args).get("sent")
        if limit is None:
            continue
        sent, _ = _measured(pasted[name], args)
        assert sent == pytest.approx(limit, rel=1e-12), case.label  # (7/8 of a sum: a float)
        compared += 1
    assert compared or name == "fsdp_sgd_step"  # FSDP's budget is of bytes held


def _measured(solution, args):
    """(bytes each device sends, ring model; the largest peak) of the programs of one call."""
    event, _ = answer(solution, args)
    sent, peak = 0.0, 0
    for program in event["how"]["programs"]:
        devices = int(program["devices"])
        for collective in parse_collectives(program["text"]):
            if (collective.group_size or devices) > 1:
                sent += ring_bytes(collective, devices)
        peak = max(peak, int(program["memory"].get("peak", 0)))
    return sent, peak


def test_psum_scatter_may_send_exactly_one_reduce_scatter_of_the_sums():
    problem = PROBLEMS["shard_map_psum_scatter"]
    for case in problem.cases:
        args = problem.arranged(case)
        n = math.prod(problem.mesh_shape(case, jax.device_count()))
        x = case.args[0]
        limit = problem.budget.limits(args)["sent"]
        assert limit == (n - 1) * (x.shape[1] // n) * x.dtype.itemsize, case.label


def test_fsdp_must_hold_less_than_the_data_parallel_step(pasted):
    problem = PROBLEMS["fsdp_sgd_step"]
    judged_cases = 0
    for case in problem.cases:
        args = problem.arranged(case)
        limits = problem.budget.limits(args)
        if math.prod(problem.mesh_shape(case, jax.device_count())) == 1:
            assert limits == {}  # one device: FSDP and data parallelism are one program
            continue
        _, peak = _measured(pasted[problem.name], args)
        w = np.asarray(case.args[0])
        # The data-parallel step holds w whole at least twice (in, out); FSDP's own
        # peak is below its limit by at least the share of w it does not keep.
        assert limits["peak"] >= 2 * w.nbytes, case.label
        assert 0 < peak <= limits["peak"], case.label
        judged_cases += 1
    assert judged_cases >= (4 if jax.device_count() == 8 else 0)
