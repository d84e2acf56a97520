"""The inputs a statement refuses (``Problem.refusals``): one per clause of its "Raises".

A contract is also the errors it promises. Each refusal names the error its
statement's "Raises" section gives for it; the reference raises exactly that, every
error type the section names has a refusal, and the checker (which runs them unless
told not to) passes an answer that raises it and fails one that computes anyway or
raises something else, in a row of the report labelled as a refused input.
"""

from __future__ import annotations

import builtins
import inspect
import re

import jax.numpy as jnp
import numpy as np
import pytest
from judging import check_here, judged

from shard_tutorial.checking.report import CaseResult, CheckReport, DeviceRun
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
    for case in PROBLEMS[name].refusals:  # each in a row of its own, labelled as refused
        assert f"refused ({case.raises}): {case.label}" in text


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


def _report(*results: CaseResult, devices: int = 8) -> CheckReport:
    return CheckReport("shard_map_psum", "solution.py", (DeviceRun(devices, results),), 1.0)


VALUES = CaseResult("example", "x=float32[4]", "pass")
REFUSED = CaseResult("a 2-D x", "x=float32[1,3]", "pass", raises="ValueError")
COMPUTED = CaseResult(
    "a 2-D x",
    "x=float32[1,3]",
    "fail",
    "returned a value where the statement's Raises section asks for ValueError (a 2-D x): "
    "check the arguments before computing with them",
    raises="ValueError",
)


def test_a_refused_input_is_a_row_labelled_with_the_error_it_asks_for():
    text = str(_report(VALUES, REFUSED))
    rows = [line.split("  ")[0] for line in text.splitlines()]
    assert "refused (ValueError): a 2-D x" in rows
    assert "example" in rows  # a case with an answer keeps its own label
    html = _report(VALUES, REFUSED)._repr_html_()
    assert ">refused (ValueError): a 2-D x</td>" in html
    assert ">example</td>" in html


def test_a_refused_input_that_was_computed_is_named_under_what_went_wrong():
    report = _report(VALUES, COMPUTED)
    assert report.verdict() == "FAILED (8 devices: 1 of 2 cases failed)"
    text = str(report)
    assert "  refused (ValueError): a 2-D x (x=float32[1,3]): WRONG" in text.splitlines()
    assert "check the arguments before computing with them" in " ".join(text.split())


def test_the_hint_about_device_counts_reads_the_values_not_the_refused_inputs():
    wrong = CaseResult("example", "x=float32[4]", "fail", "value: expected 6.0, received 1.0")
    one = DeviceRun(1, (VALUES, COMPUTED))
    eight = DeviceRun(8, (wrong, COMPUTED))
    report = CheckReport("shard_map_psum", "solution.py", (one, eight), 1.0)
    # Right values on 1 device, though its refused input was computed: the hint holds.
    assert report.hints()
    assert "right values on 1 device, but not on 8 devices" in report.hints()[0]
    # A refused input computed on 8 devices alone is not a wrong value there.
    right_on_8 = DeviceRun(8, (VALUES, COMPUTED))
    assert CheckReport("shard_map_psum", "solution.py", (one, right_on_8), 1.0).hints() == []
