"""The problem records that the pages, the tests and the checker share."""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import shard_tutorial
from shard_tutorial import PROBLEMS, get_problem
from shard_tutorial.problem import Case, Problem, precise
from shard_tutorial.problem_names import PROBLEM_NAMES


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_each_problem_is_named_after_its_function_and_module(name):
    problem = PROBLEMS[name]
    assert problem.name == name == problem.reference.__name__
    assert problem.reference.__module__ == f"shard_tutorial.problems.{name}"
    assert getattr(shard_tutorial, name) is problem.reference
    assert problem.folder in ("problems", "collectives", "training", "parallelism", "scale")
    assert problem.page == f"{problem.folder}/" + name.replace("_", "-")
    assert (Path(__file__).parents[1] / "docs" / f"{problem.page}.md").is_file()


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_cases_are_deterministic_and_start_with_the_statement_example(name):
    problem = PROBLEMS[name]
    again = problem.make_cases()
    assert len(again) == len(problem.cases) >= 8
    for mine, theirs in zip(again, problem.cases, strict=True):
        assert mine.label == theirs.label
        for a, b in zip(mine.args, theirs.args, strict=True):
            np.testing.assert_array_equal(a, b)
    assert "example" in problem.cases[0].label
    assert len({case.label for case in problem.cases}) == len(problem.cases)


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_the_statement_documents_every_argument(name):
    problem = PROBLEMS[name]
    doc = inspect.getdoc(problem.reference)
    for section in ("Args:", "Returns:", "Raises:", "Examples:"):
        assert section in doc
    for parameter in inspect.signature(problem.reference).parameters:
        assert f"  {parameter}: " in doc
    assert problem.summary == doc.splitlines()[0].replace("``", "")


def test_expected_follows_jax_dtype_rules_in_the_active_mode():
    doubling = Problem(
        "p",
        "t",
        reference=lambda x: x,
        oracle=lambda x: precise(x) * 2.0,
        make_cases=list,
        unsharded=lambda x: x * 2.0,
    )
    assert doubling.expected(Case("f", (np.ones(2, np.float32),))).dtype == np.float32
    assert doubling.expected(Case("i", (np.ones(2, np.int32),))).dtype == np.float32
    assert doubling.expected(Case("b", (np.ones(2, jnp.bfloat16),))).dtype == jnp.bfloat16
    assert doubling.expected(Case("u", (np.ones(2, np.uint8),))).dtype == np.float32
    summing = Problem(
        "p",
        "t",
        reference=lambda x: x,
        oracle=lambda x: np.sum(precise(x)),
        make_cases=list,
        unsharded=jnp.sum,
    )
    ints = Case("i", (np.arange(4, dtype=np.int32),))
    assert summing.expected(ints).dtype == np.int32
    assert summing.expected(ints) == 6
    assert summing.expected(Case("i8", (np.arange(4, dtype=np.int8),))).dtype == np.int32
    assert summing.expected(Case("i64", (np.arange(4, dtype=np.int64),))).dtype == np.int32
    with jax.enable_x64(True):
        assert summing.expected(Case("i64", (np.arange(4, dtype=np.int64),))).dtype == np.int64
        assert doubling.expected(ints).dtype == np.float64
        assert doubling.expected(Case("f", (np.ones(2, np.float32),))).dtype == np.float32


CASE = Case("sizes", (np.array([1.0, -2.0, 3.0, -4.0], np.float32),))


@pytest.mark.parametrize(
    ("dtype", "rtol", "atol"),
    [
        (np.int32, 0.0, 0.0),
        (np.uint8, 0.0, 0.0),
        (np.float32, 1e-5, 1e-4),
        (np.float64, 1e-5, 1e-4),
        (np.complex64, 1e-5, 1e-4),
        (jnp.bfloat16, 2 * 2.0**-7, 2 * 2.0**-7 * 10),
        (np.float16, 2 * 2.0**-10, 2 * 2.0**-10 * 10),
        (jnp.float8_e4m3fn, 2 * 2.0**-3, 2 * 2.0**-3 * 10),
    ],
)
def test_tolerance_fits_the_dtype_and_the_size_of_the_terms(dtype, rtol, atol):
    # A sum of 1, -2, 3, -4: the rounding errors scale with 1 + 2 + 3 + 4 = 10.
    assert get_problem("shard_map_psum").tolerance(CASE, np.dtype(dtype)) == pytest.approx(
        (rtol, atol)
    )


def test_elementwise_tolerance_is_per_element():
    rtol, atol = get_problem("shard_map_double").tolerance(CASE, np.dtype(jnp.bfloat16))
    assert rtol == 2 * 2.0**-7
    np.testing.assert_allclose(atol, 2 * 2.0**-7 * np.array([2.0, 4.0, 6.0, 8.0]))


@pytest.mark.parametrize("dtype", [jnp.bfloat16, np.float16, np.float32])
def test_a_right_low_precision_answer_passes_and_a_wrong_one_fails(dtype):
    rng = np.random.default_rng(0)
    psum = get_problem("shard_map_psum")
    x = rng.uniform(0, 1, size=64).astype(dtype)  # sum about 32
    case = Case("low precision", (x,))
    right = psum.reference(jnp.asarray(x))
    assert right.dtype == dtype
    assert psum.diagnose(case, right) is None
    off_by_2 = np.asarray(right) + np.asarray(2, dtype)  # bfloat16 has 0.25 between 32 and 64
    assert psum.diagnose(case, off_by_2).startswith("value: expected ")
    double = get_problem("shard_map_double")
    x = rng.normal(size=64).astype(dtype)
    case = Case("low precision", (x,))
    y = np.asarray(double.reference(jnp.asarray(x)))
    assert double.diagnose(case, y) is None
    wrong = y.copy()
    wrong[5] = y[5] + np.asarray(1, dtype)
    message = double.diagnose(case, wrong)
    assert message.startswith("values: 1 of 64 differ; the first at index 5")
    assert double.diagnose(case, y.astype(np.float64)).startswith("dtype: expected")


def test_integer_answers_must_be_exact():
    psum = get_problem("shard_map_psum")
    case = Case("ints", (np.arange(100, dtype=np.int32),))
    assert psum.diagnose(case, np.int32(4950)) is None
    assert psum.diagnose(case, np.int32(4951)) == "value: expected 4950, received 4951"


def test_get_problem_accepts_page_style_names_and_lists_the_names_on_error():
    assert get_problem("shard-map-double") is PROBLEMS["shard_map_double"]
    with pytest.raises(
        KeyError, match="no problem named 'psum'; the problems are: shard_map_double"
    ):
        get_problem("psum")


def test_every_public_name_resolves_to_its_module():
    assert sorted(shard_tutorial.__all__) == sorted(shard_tutorial._LAZY)
    assert set(PROBLEM_NAMES) <= set(shard_tutorial.__all__)
    for name in shard_tutorial.__all__:
        value = getattr(shard_tutorial, name)
        assert value is not None
        module = shard_tutorial._LAZY[name]
        assert getattr(importlib.import_module(module), name) is value
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        _ = shard_tutorial.nope


def test_type_checkers_see_every_problem_the_package_exports():
    # The one list a type checker needs written out: the imports under TYPE_CHECKING.
    tree = ast.parse(Path(shard_tutorial.__file__).read_text())
    guarded = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
    )
    imported = {
        alias.name: node.module
        for node in ast.walk(guarded)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert imported == shard_tutorial._LAZY


@pytest.mark.subprocesses  # a fresh process of its own, whatever this one's --devices
def test_importing_one_helper_loads_no_problem_module():
    code = (
        "import sys; from shard_tutorial import use_cpu_devices; "
        "print(sorted(m for m in sys.modules if m.startswith('shard_tutorial')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # devices checks its argument with validation's require_count; no problem module loads.
    assert out.stdout.strip() == (
        "['shard_tutorial', 'shard_tutorial.devices', 'shard_tutorial.problem_names', "
        "'shard_tutorial.validation']"
    )


@pytest.mark.subprocesses  # a fresh process of its own, whatever this one's --devices
def test_the_registry_lists_every_problem_in_reading_order_and_loads_on_demand():
    code = (
        "import sys; from shard_tutorial import PROBLEMS; names = list(PROBLEMS); "
        "loaded = [m for m in sys.modules if m.startswith('shard_tutorial.problems.')]; "
        "PROBLEMS['shard_map_psum']; "
        "after = [m for m in sys.modules if m.startswith('shard_tutorial.problems.')]; "
        "print(names, loaded, after)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    order = list(PROBLEM_NAMES)
    # The reading order is the site's: each Part's pages after the one before's.
    parts = ["problems", "collectives", "training", "parallelism", "scale"]
    folders = [parts.index(PROBLEMS[name].page.split("/")[0]) for name in order]
    assert folders == sorted(folders), folders
    assert out.stdout.strip() == f"{order} [] ['shard_tutorial.problems.shard_map_psum']"
    assert len(PROBLEMS) == len(order)
    with pytest.raises(KeyError):
        PROBLEMS["nope"]
