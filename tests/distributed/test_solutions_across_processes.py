"""One right answer per problem from the corpus, checked on a cluster of 2 processes x 4 devices.

The corpus (``tests/solutions``) is judged in-process on both stacks by
``tests/test_solutions.py``; this runs ``shard_tutorial.check(..., processes=2)`` on
the first right answer of each problem, so each problem's contract is shown to hold
across processes for code written from its statement, not only for its reference.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from shard_tutorial import PROBLEMS, check

pytestmark = [pytest.mark.subprocesses, pytest.mark.distributed]

SOLUTIONS = Path(__file__).parent.parent / "solutions"


def _first_right(name: str) -> Path | None:
    rights = sorted((SOLUTIONS / name).glob("right_*.py"))
    return rights[0] if rights else None


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_a_right_answer_passes_on_a_cluster(name):
    path = _first_right(name)
    assert path is not None, f"{name} has no right answer in tests/solutions"
    report = check(name, path, processes=2, seed=0)
    assert report.passed, str(report)
    assert "2 processes x 4 devices" in report.verdict()
