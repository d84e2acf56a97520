"""Judge a solution in this process: the checker's worker step and its judge, with no subprocess.

The checker runs a reader's code in fresh processes, on 1 and on 8 devices, so that
nothing the code does can reach the judge. Tests of what the judge says about a
mistake do not need that isolation: they call the same two functions here, at the
suite's own device count (the suite runs at 1 and at 8), in milliseconds instead of
the seconds a worker process takes to start JAX.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np

from shard_tutorial.checking.checker import RANDOM_CASES
from shard_tutorial.checking.judge import judge, judge_raised, judge_refusal
from shard_tutorial.checking.protocol import (
    Answer,
    Raised,
    decode_answer,
    decode_raised,
    encode_answer,
    encode_raised,
)
from shard_tutorial.checking.report import CaseResult, CheckReport, DeviceRun
from shard_tutorial.checking.worker import answer_of, held_on, load_solution
from shard_tutorial.problem import Case, Problem
from shard_tutorial.problems import get_problem

OLDEST = tuple(int(p) for p in jax.__version__.split(".")[:2]) < (0, 11)
"""Whether this is the oldest stack (jax 0.10), where the noxfile runs less of the suite."""


def judged(problem: Problem, solution: Callable[..., Any], case: Case) -> tuple[str, str]:
    """The checker's verdict on ``solution`` for ``case`` at this process' device count."""
    if case.raises is not None:  # an input the statement refuses, passed as it arrives
        return judge_refusal(case, _sent(answer_of(solution, case.jax_args())))
    args = problem.arranged(case)
    limits = problem.budget.limits(args) if problem.budget is not None else {}
    grow = problem.budget.grown if problem.budget is not None else None
    grown = None
    if grow is not None and "growth" in limits:  # made from the case, laid out as it is
        grown = problem.arranged(Case(case.label, grow(case.jax_args())))
    technique = problem.technique
    stays = () if technique is None or technique.stays is None else technique.stays.arguments
    made = answer_of(solution, args, stays=stays)
    if isinstance(made, Raised):
        return judge_raised(decode_raised(encode_raised(made)))
    if limits and made.how is not None:  # as the worker adds them
        held = None if grown is None else held_on(answer_of, solution, grown)
        made = dataclasses.replace(
            made, how=dataclasses.replace(made.how, limits=limits, grown=held)
        )
    # Through the report the worker sends, as the checker reads it.
    return judge(problem, case, decode_answer(*encode_answer(made)), jax.device_count())


def _sent(made: Answer | Raised) -> Answer | Raised:
    """``made`` through the report the worker sends, as the checker reads it."""
    if isinstance(made, Raised):
        return decode_raised(encode_raised(made))
    return decode_answer(*encode_answer(made))


def verdicts(
    problem: Problem, solution: Callable[..., Any], cases: int | None = None
) -> dict[str, tuple[str, str]]:
    """The verdict on each of the problem's cases (the first ``cases`` of them), by label."""
    return {case.label: judged(problem, solution, case) for case in problem.cases[:cases]}


def check_here(
    problem: Problem | str,
    solution: Callable[..., Any] | str | Path,
    *,
    seed: int = 0,
    few: bool = True,
    lean: bool | str = False,
    until: Callable[[CaseResult], bool] | None = None,
    refusals: bool = False,
    largest_first: bool = False,
) -> CheckReport:
    """What ``shard_tutorial.check`` reports, for this process' device count only, run here.

    The cases are the problem's own and its random ones from ``seed``, as a check
    runs them; each is judged by the checker's judge. ``solution`` is a function or
    the path of a file that defines it (loaded as the checker's worker loads it).
    For tests of what the checker says about a solution; the checker itself runs a
    reader's code in processes of its own.

    With ``few``, only the first two cases and four whose mesh has several devices on
    8 (one on 1 device, where they are all alike), and no random ones: a mistake
    shows on those, in a fraction of the time (every case compiles its own programs;
    an eager ``shard_map`` compiles each of its operations anew at every call, a
    thousand programs for a ring of 8). ``lean`` keeps the example and one split
    case: the largest whose bytes held (or their growth) a budget limits if any, else
    the first (on 1 device, the first two cases); ``"eager"`` keeps the example and
    that largest, if any (else the first split case if the example's mesh has one
    device).
    With ``refusals``, the inputs the statement refuses too (after those few), as a
    check runs them: cheap, since a right answer raises before it computes; the tests
    of what the checker says about a mistake leave them out, to read its verdicts alone.
    Without ``few``, every case and random ones, those same few first. With ``until``, the
    check stops at the first result it accepts (a wrong answer's verdict, found: the
    rest cannot change the test's outcome). With ``largest_first``, the statement's
    cases run from the last (the largest) to the first, then the rest.
    """
    problem = problem if isinstance(problem, Problem) else get_problem(problem)
    if not callable(solution):
        solution = load_solution({"kind": "file", "path": str(solution), "function": problem.name})
    every = list(problem.cases)
    split = [
        c
        for c in every[2:]
        if math.prod(problem.mesh_shape(c, 8)) >= 2
        and all(np.size(a) > 0 for a in c.args if isinstance(a, np.ndarray))
    ]
    if not lean:
        cases = every[:2] + split[: 4 if jax.device_count() > 1 else 1]
    else:
        # The split cases past the first whose budget limits the bytes held (or their
        # growth): the last is the largest, where a right answer comes closest to it.
        held = [
            c
            for c in split[1:]
            if problem.budget and {"held", "growth"} & set(problem.budget.limits(c.args))
        ]
        # On 1 device every mesh has one device: the example and the smallest case. On
        # 8, the example and one split case: the largest a budget of bytes held limits
        # if any, else the first (the second case, an edge of one device or none, is
        # the 1-device pass's).
        cases = every[:2] if jax.device_count() == 1 else every[:1] + (held[-1:] or split[:1])
        if OLDEST and jax.device_count() > 1:
            # jax 0.10 differs in how its programs print, not in what a case asks: that
            # split case alone (the newest runs the example too).
            cases = (held[-1:] or split[:1]) or every[:1]
        if lean == "eager":
            # Eager code compiles each operation of each call anew (a thousand programs
            # for a ring of 8 on one case): the statement's example, and the largest case
            # with a budget of bytes held if there is one (where eager code, holding what
            # each small program returns, comes closest to the limit), else the first
            # split case if the example's mesh has one device.
            alone = math.prod(problem.mesh_shape(every[0], 8)) < 2
            extra = held[-1:] or (split[:1] if alone else [])
            cases = every[:1] + (extra if jax.device_count() > 1 else [])
            if OLDEST:
                # jax 0.10 takes three times as long again: the example alone (its mesh
                # has several devices too), the split cases on the newest.
                cases = every[:1]
    if refusals:
        cases += problem.refusals
    if not few:
        cases += [c for c in every if c not in cases]
        if problem.generate is not None:
            rng = np.random.default_rng(seed)
            cases += [problem.generate(rng) for _ in range(RANDOM_CASES)]
    if largest_first:
        # The statement's cases from its last, its largest, where a budget bites first.
        cases = [c for c in reversed(every) if c in cases] + [c for c in cases if c not in every]
    results = []
    for case in cases:
        status, message = judged(problem, solution, case)
        results.append(
            CaseResult(case.label, problem.describe(case), status, message, raises=case.raises)
        )
        if until is not None and until(results[-1]):
            break
    run = DeviceRun(jax.device_count(), tuple(results))
    return CheckReport(problem.name, f"{problem.name} (in this process)", (run,), 0.0, seed)


def pasted_reference(name: str) -> str:
    """The problem's reference module as a reader would paste it into a file, as ``reference``.

    Source for a solution file that needs a right answer to build on (``return
    reference(x)`` except in the case it is about): the package's own function would
    be judged REFERENCE, but code pasted into the reader's file is the reader's.
    """
    source = Path(inspect.getfile(get_problem(name).reference)).read_text()
    source = source.replace("from __future__ import annotations\n", "")
    return f"{source}\n\nreference = {name}\n\n"
