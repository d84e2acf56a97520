"""What the built site shows readers: the executed figures, the folded solutions.

These read the HTML that ``nox -s docs`` has just built into docs/_build/html.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import flax
import jax
import pytest
from bs4 import BeautifulSoup

from shard_tutorial import PROBLEMS

SITE = Path(__file__).parents[1] / "_build" / "html"
PROBLEM_PAGES = [problem.page for problem in PROBLEMS.values()]
NOTEBOOK_PAGES = ["index", "tutorial", "migrating", *PROBLEM_PAGES]


def page(name: str) -> BeautifulSoup:
    path = SITE / f"{name}.html"
    if not path.is_file():
        pytest.fail(f"{path} is missing: build the site first (nox -s docs)")
    return BeautifulSoup(path.read_text(), "html.parser")


def outputs(name: str) -> str:
    """The text of every executed cell output on a page."""
    return "\n".join(div.get_text() for div in page(name).select("div.cell_output"))


def test_the_tutorial_reproduces_the_seed_figures():
    text = outputs("tutorial")
    assert "[48. 52. 56. 60. 64. 68. 72. 76.]" in text  # column sums, partially replicated
    assert "global shape: x.shape=(32,)" in text
    assert "device local shape: x_block.shape=(4,)" in text
    assert re.search(r"Array\(\[\s*6,\s+22,\s+38,\s+54,\s+70,\s+86,\s+102,\s+118\]", text)
    assert "Array(496, dtype=int32)" in text
    # The layer, all three ways, to six decimals: [0.0213891, 0.893112, 0.59892, 0.977425].
    layer_lines = [
        line for line in text.splitlines() if "[0.021389 0.893112 0.59892  0.977425]" in line
    ]
    assert len(layer_lines) == 4


@pytest.mark.parametrize("name", NOTEBOOK_PAGES)
def test_every_sharding_diagram_was_drawn(name):
    source = (SITE.parent.parent / f"{name}.md").read_text()
    calls = source.count("jax.debug.visualize_array_sharding(")
    diagrams = [pre for pre in page(name).select("div.cell_output pre") if "CPU 0" in pre.text]
    assert len(diagrams) >= calls
    if name == "tutorial":
        assert "CPU 0,4" in outputs(name)  # the partially replicated column sums


@pytest.mark.parametrize("name", PROBLEM_PAGES)
def test_each_problem_page_folds_its_solution_away(name):
    soup = page(name)
    dropdowns = soup.select("details.sd-dropdown")
    assert len(dropdowns) == 1
    solution = dropdowns[0]
    assert not solution.has_attr("open")
    function = name.rsplit("/", 1)[-1].replace("-", "_")
    assert f"def {function}(" in solution.get_text()


@pytest.mark.parametrize("name", PROBLEM_PAGES)
def test_each_problem_page_runs_its_solution_on_8_devices(name):
    soup = page(name)
    section = soup.find(id="the-solution-on-8-devices")
    assert section is not None
    executed = section.get_text()
    assert "CPU 7" in executed or "cpu:7" in executed


@pytest.mark.parametrize("name", PROBLEM_PAGES)
def test_each_problem_page_states_the_problem_from_the_docstring(name):
    statement = page(name).find(id="the-problem")
    assert statement is not None
    assert statement.select("dl.py.function")
    assert "Raises" in statement.get_text()


@pytest.mark.parametrize("name", NOTEBOOK_PAGES)
def test_every_notebook_page_can_be_downloaded_executed(name):
    button = page(name).select_one("a.btn-download-notebook-button")
    assert button is not None
    assert button["href"].endswith(f"_sources/{name}.ipynb")
    notebook = json.loads((SITE / "_sources" / f"{name}.ipynb").read_text())
    code_cells = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
    assert code_cells
    assert all(cell["execution_count"] for cell in code_cells)
    assert any(cell["outputs"] for cell in code_cells)


def test_the_landing_page_prints_the_versions_it_was_built_with():
    table = page("index").find(id="what-this-site-was-built-with").get_text()
    assert jax.__version__ in table
    assert flax.__version__ in table
    assert "8 x CPU" in table


@pytest.mark.parametrize("name", PROBLEM_PAGES)
def test_each_problem_page_lets_the_reader_practise(name):
    function = name.rsplit("/", 1)[-1].replace("-", "_")
    section = page(name).find(id="try-it-yourself")
    assert section is not None
    download = section.select_one("a.starter-download")
    assert download is not None
    starter = (SITE / name).parent / download["href"]
    assert starter.resolve() == (SITE / "starters" / f"{function}.py").resolve()
    assert starter.read_text() == PROBLEMS[function].starter()
    reports = section.select("div.shard-tutorial-check")
    assert len(reports) == 2
    assert "PASSED: every case on 1 and 8 devices" in reports[0].get_text()
    assert "FAILED" in reports[1].get_text()


# -- Part II: "Collectives at a glance" ----------------------------------------------------
GLANCE = "collectives/glance"
COLLECTIVES = [
    "psum",
    "pmean",
    "all_gather",
    "psum_scatter",
    "ppermute",
    "all_to_all",
    "axis_index",
]


def test_the_glance_page_prints_what_each_device_holds():
    text = outputs(GLANCE)
    assert "device 7: [28]" in text  # psum of 0..7, on every device
    assert "device 0: [3.5]" in text  # pmean
    assert "device 5: [0 1 2 3 4 5 6 7]" in text  # all_gather, tiled
    assert "device 0: [7]" in text  # ppermute round the ring: device 7's value
    assert "device 1: [ 1 11 21 31 41 51 61 71]" in text  # all_to_all: column 1
    assert "device 6: [6]" in text  # axis_index


def test_the_glance_page_draws_every_collective_with_a_text_alternative():
    pictures = page(GLANCE).select("div.cell_output img.collective-diagram")
    assert [img["alt"].split(".")[0] for img in pictures] == COLLECTIVES
    for img in pictures:
        assert img["src"].startswith("data:image/svg+xml;base64,")
        assert "Before, " in img["alt"]
        assert "After, " in img["alt"]
    assert "every one of the 8 devices holds 28" in pictures[0]["alt"]


def test_the_glance_page_names_each_collectives_call_and_its_source():
    soup = page(GLANCE)
    code = " ".join(pre.get_text() for pre in soup.select("div.highlight-python pre"))
    for name in COLLECTIVES:
        assert f"jax.lax.{name}(" in code
        assert soup.select_one(f'a[href$="jax.lax.{name}.html"]') is not None


@pytest.mark.parametrize("name", [p.page for p in PROBLEMS.values() if p.folder == "collectives"])
def test_each_collective_page_shows_its_communication_and_its_sources(name):
    soup = page(name)
    section = soup.find(id="the-solution-on-8-devices").get_text()
    ops = ("all-reduce(", "all-gather(", "collective-permute(", "reduce-scatter(", "all-to-all(")
    assert any(op in section for op in ops)
    assert soup.find(id="sources").select('a[href^="https://docs.jax.dev/"]')
