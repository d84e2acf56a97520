"""What the built "ZeRO Adam step" page shows: the gradient of the replicated w summed
(an all-reduce) and of a varying copy not, the mistakes with their numbers and the
checker's words, the compiled step's reduce-scatter and all-gather, and the memory.

These read the HTML that ``nox -s docs`` has just built into docs/_build/html.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from bs4 import BeautifulSoup, Tag

PAGE = Path(__file__).parents[1] / "_build" / "html" / "scale" / "zero-adam-step.html"


@pytest.fixture(scope="module")
def soup() -> BeautifulSoup:
    if not PAGE.is_file():
        pytest.fail(f"{PAGE} is missing: build the site first (nox -s docs)")
    return BeautifulSoup(PAGE.read_text(), "html.parser")


def cell_output(soup: BeautifulSoup, source: str) -> str:
    """The output of the one cell whose code contains ``source``, lines joined by spaces."""
    cells = [
        cell
        for cell in soup.select("div.cell")
        if (code := cell.select_one("div.cell_input")) and source in code.get_text()
    ]
    assert len(cells) == 1, f"{len(cells)} cells contain {source!r}"
    output = cells[0].select_one("div.cell_output")
    return " ".join(output.get_text().split()) if isinstance(output, Tag) else ""


def test_the_gradient_of_a_varying_copy_is_each_devices_own_part(soup):
    printed = cell_output(soup, "def gradients(")
    assert "replicated w: float32[64,4] varying copy: float32[64,4]{V:data}" in printed
    assert "summed is the gradient: True" in printed
    assert "the 8 own parts add up to it: True" in printed
    assert "gradient of the replicated w: all-reduce -> f32[64,4] (1024 bytes)" in printed


def test_the_zero_step_reduce_scatters_and_gathers_what_one_all_reduce_sends(soup):
    printed = cell_output(soup, "def zero_step(")
    assert "right: True" in printed
    assert "reduce-scatter -> f32[8,4] (128 bytes)" in printed
    assert "all-gather -> f32[64,4] (1024 bytes)" in printed
    sliced = cell_output(soup, "def all_reduced_then_sliced(")
    assert "right values: True" in sliced
    assert "2688 bytes sent per device, where ZeRO sends 1792" in sliced


def test_the_mistakes_are_shown_with_the_checkers_words(soup):
    assert "times the right one: 8.0" in cell_output(soup, "def scatter_the_summed(")
    assert "m and v are those of a gradient 8 times too large" in cell_output(
        soup, "_with_gradient_scaled(case, 8)"
    )
    assert "out_specs which require replication" in cell_output(soup, "def gathered_varying(")
    unchecked = cell_output(soup, "def unchecked_step(")
    assert "check_vma=False is the gradient: False" in unchecked
    assert "the closed-form step is right: True" in unchecked
    assert "without Adam's bias correction: at step 3" in cell_output(soup, "uncorrected_w =")


def test_zero_holds_less_than_data_parallelism(soup):
    printed = cell_output(soup, "def data_parallel_step(")
    held = {
        name: int(printed.split(f"{name}: ")[1].split(" bytes")[0].replace(",", ""))
        for name in ("data-parallel", "ZeRO")
    }
    assert held["ZeRO"] < held["data-parallel"] / 2, printed


def test_the_reference_copy_passes_and_the_all_reduce_gets_technique(soup):
    printed = cell_output(soup, 'check("zero_adam_step", reference_copy(')
    assert "PASSED: every case on 1 and 8 devices" in printed
    failed = cell_output(soup, "def all_reduce_then_slice(")
    assert "FAILED (8 devices:" in failed
    assert "no reduce-scatter (psum_scatter)" in failed
