"""A reader copies a page's folded reference solution into the starter file: it passes.

For every problem, the starter file (:meth:`Problem.starter`, what the page offers
for download) gets its empty function replaced by the code the page's dropdown
shows (rendered by the same function as the ``reference-source`` directive), and
the checker runs the file on 1 and on 8 devices. A solution shown without the
imports it needs fails here with a ``NameError``, as it would for the reader; one
that imports a private module of the package cannot be shown at all.

This is also the test that every reference passes its own checker, on every case
and random ones, on 1 and 8 devices: the code pasted is the reference's own
(the function and the helpers it calls), as a reader gets it from the page. On the
newest stack, each problem's page checks its reference's copy on 1 and 8 devices
too (``check(name, reference_copy(name))``), in the docs build.
"""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

import pytest

from shard_tutorial import PROBLEMS, check
from shard_tutorial.checking.checker import RANDOM_CASES
from shard_tutorial.problem import Problem

# The checker runs each file in worker processes with their own device counts
# (1 and 8), whatever this process has. nox runs these on the oldest stack only: on the
# newest, the docs build checks each reference's copy on 1 and 8 devices on its page
# (docs/tests/test_built_site.py requires PASSED), as this does.
pytestmark = [pytest.mark.subprocesses, pytest.mark.oldest]

EXTENSIONS = Path(__file__).parents[1] / "docs" / "_ext"


def _load_solution_source():
    """docs/_ext/solution_source.py, which needs nothing but the standard library."""
    spec = importlib.util.spec_from_file_location(
        "solution_source", EXTENSIONS / "solution_source.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.solution_source


solution_source = _load_solution_source()


def pasted_solution(problem: Problem) -> str:
    """The starter file with its empty function replaced by the dropdown's code."""
    starter = problem.starter()
    stub = starter.index(f"\ndef {problem.name}(")
    shown = solution_source(Path(inspect.getfile(problem.reference)), problem.name)
    return starter[:stub] + "\n" + shown + "\n"


def test_the_pasted_file_is_the_starter_with_the_dropdown_code():
    problem = PROBLEMS["shard_map_psum"]
    text = pasted_solution(problem)
    assert text.startswith(problem.starter().split("\ndef ")[0])
    assert "NotImplementedError" not in text
    assert text.count(f"def {problem.name}(") == 1


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_the_folded_solution_pasted_into_the_starter_passes(name, tmp_path):
    problem = PROBLEMS[name]
    path = tmp_path / f"{name}.py"
    path.write_text(pasted_solution(problem))
    # On 1 and 8 devices, the problem's cases, random ones and the inputs it refuses.
    report = check(name, path)
    assert report.passed, f"{path.read_text()}\n{report}"
    assert [run.devices for run in report.runs] == [1, 8]
    cases = len(problem.cases) + RANDOM_CASES + len(problem.refusals)
    assert all(len(run.results) == cases for run in report.runs)
    assert report.verdict() == "PASSED: every case on 1 and 8 devices"
    assert f"from seed {report.seed};" in " ".join(str(report).split())


MODULE = '''\
from __future__ import annotations

import functools
import os
from collections.abc import Callable

import numpy as np

from shard_tutorial.meshes import data_mesh, usable_device_count
from {private} import helper


def solve(x: np.ndarray) -> Callable[[], int]:
    """The statement, which the page shows elsewhere."""
    return functools.partial(_count, data_mesh(len(x)))


def _count(mesh) -> int:
    return usable_device_count(mesh.size)


def unrelated() -> None:
    helper(os.sep)
'''


def test_the_shown_code_imports_what_it_uses_from_public_modules(tmp_path):
    path = tmp_path / "module.py"
    path.write_text(MODULE.format(private="shard_tutorial._helpers"))
    exported = frozenset({"data_mesh", "usable_device_count"})
    shown = solution_source(path, "solve", exported)
    imports, _, code = shown.partition("\n\n\ndef ")
    assert imports == (
        "import functools\n"
        "from collections.abc import Callable\n\n"
        "import numpy as np\n\n"
        "from shard_tutorial import data_mesh, usable_device_count"
    )  # no os, no helper: only unrelated() uses them
    assert code.startswith("solve(x: np.ndarray)")
    assert "The statement" not in code
    assert "def _count(mesh)" in code
    assert "def unrelated" not in code


def test_the_shown_code_never_imports_a_private_module(tmp_path):
    path = tmp_path / "module.py"
    path.write_text(MODULE.format(private="shard_tutorial._helpers"))
    with pytest.raises(ValueError, match=r"private module 'shard_tutorial\._helpers'"):
        solution_source(path, "unrelated", frozenset())


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_every_starter_file_loads_and_asks_for_a_solution(name):
    problem = PROBLEMS[name]
    namespace: dict[str, object] = {}
    exec(compile(problem.starter(), f"{name}.py", "exec"), namespace)  # noqa: S102
    with pytest.raises(NotImplementedError, match="write your solution here"):
        namespace[name](*problem.cases[0].jax_args())  # type: ignore[operator]
