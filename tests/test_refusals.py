"""The inputs a statement refuses (``Problem.refusals``): one per clause of its "Raises".

A contract is also the errors it promises. Each refusal names the error its
statement's "Raises" section gives for it; the reference raises exactly that, every
error type the section names has a refusal, and the checker passes an answer that
raises it and fails one that computes anyway or raises something else.
"""

from __future__ import annotations

import builtins
import inspect
import re

import jax.numpy as jnp
import numpy as np
import pytest
from judging import check_here, judged

from shard_tutorial.problem import Case
from shard_tutorial.problems import PROBLEMS

WITH_REFUSALS = [name for name, problem in PROBLEMS.items() if problem.refusals]
REFUSALS = [
    pytest.param(name, case, id=f"{name}-{case.label}")
    for name in WITH_REFUSALS
    for case in PROBLEMS[name].refusals
]


def _raises_section(name: str) -> set[str]:
    """The error names the statement's "Raises:" section lists."""
    doc = inspect.getdoc(PROBLEMS[name].reference) or ""
    section = doc.split("Raises:", 1)[1].split("\n\n", 1)[0] if "Raises:" in doc else ""
    return set(re.findall(r"^\s+(\w+(?:Error|Exception)):", section, flags=re.MULTILINE))


@pytest.mark.parametrize(("name", "case"), REFUSALS)
def test_the_reference_raises_the_error_its_statement_names(name, case):
    error = getattr(builtins, case.raises)
    with pytest.raises(error):
        PROBLEMS[name].reference(*case.jax_args())


@pytest.mark.parametrize("name", WITH_REFUSALS)
def test_every_error_the_statement_names_has_a_refusal(name):
    named = _raises_section(name)
    assert named, f"{name}'s statement has no Raises section to read"
    assert named <= {case.raises for case in PROBLEMS[name].refusals}


@pytest.mark.parametrize("name", WITH_REFUSALS)
def test_refusals_have_the_arity_of_the_function(name):
    arity = len(inspect.signature(PROBLEMS[name].reference).parameters)
    assert all(len(case.args) == arity for case in PROBLEMS[name].refusals)


def _computes_anyway(*_args):
    """An answer that checks nothing: it returns a value for any input."""
    return jnp.zeros(1)


def _wrong_error(*_args):
    msg = "not what the statement names"
    raise RuntimeError(msg)


@pytest.mark.parametrize("name", WITH_REFUSALS)
def test_an_answer_that_computes_anyway_fails_each_refusal_and_says_which_error(name):
    report = check_here(name, _computes_anyway, few=True, refusals=True)
    (run,) = report.runs
    refused = {case.label for case in PROBLEMS[name].refusals}
    results = [r for r in run.results if r.label in refused]
    assert len(results) == len(refused)
    assert {r.status for r in results} == {"fail"}
    text = " ".join(str(report).split())
    assert "returned a value where the statement's Raises section asks for" in text


@pytest.mark.parametrize("name", WITH_REFUSALS)
def test_an_answer_that_raises_another_error_fails_and_names_both(name):
    problem = PROBLEMS[name]
    case = problem.refusals[0]
    status, message = judged(problem, _wrong_error, case)
    assert status == "fail"
    assert f"raised RuntimeError where the statement's Raises section asks for {case.raises}" in (
        message
    )


def test_a_refusal_must_name_its_error():
    problem = PROBLEMS["shard_map_psum"]
    unnamed = type(problem)(
        **{
            **{f: getattr(problem, f) for f in problem.__dataclass_fields__},
            "make_refusals": lambda: [Case("no error named", (np.ones(2),))],
        }
    )
    with pytest.raises(ValueError, match="names no error"):
        _ = unnamed.refusals
