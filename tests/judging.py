"""Judge a solution in this process: the checker's worker step and its judge, with no subprocess.

The checker runs a reader's code in fresh processes, on 1 and on 8 devices, so that
nothing the code does can reach the judge. Tests of what the judge says about a
mistake do not need that isolation: they call the same two functions here, at the
suite's own device count (the suite runs at 1 and at 8), in milliseconds instead of
the seconds a worker process takes to start JAX.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from shard_tutorial._check_worker import answer
from shard_tutorial.judge import judge
from shard_tutorial.problem import Case, Problem


def judged(problem: Problem, solution: Callable[..., Any], case: Case) -> tuple[str, str]:
    """The checker's verdict on ``solution`` for ``case`` at this process' device count."""
    event, data = answer(solution, problem.arranged(case))
    if event["event"] == "raised":
        return "error", event["message"]
    cut = len(data) - event["how_nbytes"]
    return judge(
        problem, case, event["output"], data[:cut], jax.device_count(), event["how"], data[cut:]
    )


def verdicts(problem: Problem, solution: Callable[..., Any], cases: int | None = None) -> dict[str, tuple[str, str]]:
    """The verdict on each of the problem's cases (the first ``cases`` of them), by label."""
    return {case.label: judged(problem, solution, case) for case in problem.cases[:cases]}
