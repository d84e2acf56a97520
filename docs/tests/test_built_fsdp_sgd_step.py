"""What the built "Fully-sharded SGD" page shows: its pitfalls with their numbers, the
compiled step's all-gather and reduce-scatter, and w's bytes per device next to DP's.

These read the HTML that ``nox -s docs`` has just built into docs/_build/html.
"""

from __future__ import annotations

from pathlib import Path

import built_pages  # this folder
import pytest
from bs4 import BeautifulSoup, Tag

PAGE = Path(__file__).parents[1] / "_build" / "html" / "training" / "fsdp-sgd-step.html"


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


def test_the_worked_example_gets_each_devices_rows_of_the_gradient(soup):
    printed = cell_output(soup, "def gradient_of_rows(")
    assert "rows of w: float32[8,4]{V:data} gradient: float32[8,4]{V:data}" in printed
    assert "float32[64@data,4] allclose: True" in printed
    assert "(w, b): [1.0, 1.0]" in cell_output(soup, "def fsdp_step(")


def test_a_psum_of_the_gradients_is_shown_with_its_numbers_and_explanation(soup):
    printed = cell_output(soup, "def psum_both(")
    assert "b's step, times the right one: 8.0" in printed
    assert "every block moved by the sum of all blocks' steps: True" in printed
    assert "gradients of all 8 blocks of rows added up, and b by 8 times its step" in printed
    compiled = cell_output(soup, "fsdp_step(loss, psum_both), w_rows")
    assert "reduce-scatter -> f32[8,4] (128 bytes)" in compiled
    assert "all-reduce -> (f32[8,4], f32[4]) (144 bytes)" in compiled  # the extra one


def test_a_per_device_mean_loss_gives_8_times_the_step(soup):
    printed = cell_output(soup, "def own_mean_loss(")
    assert "steps, times the right ones (w, b): [8.0, 8.0]" in printed
    assert "The step is 8 times the right one" in printed
    assert "w's by the reduce-scatter that is the transpose of its all_gather" in printed


def test_w_returned_whole_is_right_but_holds_8_times_the_bytes(soup):
    printed = cell_output(soup, "def replicated_step(")
    assert "values right: True" in printed
    assert "replicated: (64, 4) on each device, 1024 bytes" in printed
    assert "fully sharded: (8, 4) on each device, 128 bytes" in printed


def test_the_solution_is_split_by_rows_and_right(soup):
    printed = cell_output(soup, "new_w, new_b = fsdp_sgd_step(*args)")
    assert "float32[64@data,4] float32[4] right: True" in printed
    assert "CPU 7" in printed  # the drawing of the 8 blocks


def test_the_compiled_steps_gather_and_reduce_scatter_against_one_all_reduce(soup):
    name = "training/fsdp-sgd-step"
    [fsdp] = built_pages.explained(name, "explain(fsdp_sgd_step, *args)")
    assert [(row["collective"], row["moves"], row["B sent"]) for row in fsdp] == [
        ("all-gather", "f32[64,4]", "896"),  # forward: the whole w, 7/8 of 1,024 bytes
        ("all-reduce", "f32[4]", "28"),  # b's gradient
        ("reduce-scatter", "f32[8,4]", "896"),  # backward: own rows only, 7 x 128 bytes
    ]
    assert fsdp[0]["line"] == fsdp[2]["line"]  # the all_gather, and its transpose
    [dp] = built_pages.explained(name, "explain(data_parallel_sgd_step, *dp_args)")
    assert [(row["collective"], row["moves"], row["B sent"]) for row in dp] == [
        ("all-reduce", "(f32[64,4], f32[4])", "1,820")
    ]
    assert "3 collectives, 1,820 B sent per device" in cell_output(soup, "explain(fsdp_sgd_step")


def test_the_bytes_per_device_of_w_and_its_gradient_are_read_from_the_arrays(soup):
    printed = cell_output(soup, "gradient = (w_in - w_out) / lr")
    assert "data-parallel 1024 bytes 1024 bytes" in printed
    assert "fully sharded 128 bytes 128 bytes" in printed


def test_the_checker_passes_the_reference_and_names_data_parallelism_for_whole_w(soup):
    assert "PASSED: every case on 1 and 8 devices" in cell_output(
        soup, 'check("fsdp_sgd_step", reference_copy("fsdp_sgd_step"))'
    )
    verdict = cell_output(soup, 'check("fsdp_sgd_step", whole_w_on_every_device')
    verdict = " ".join(verdict.split())
    assert "FAILED (8 devices:" in verdict
    assert "1 device:" not in verdict.split(")")[0]  # on one device nothing is gathered
    assert "TECHNIQUE" in verdict
    assert "pass*" in verdict
    assert "no all-gather (all_gather) from the code inside jax.shard_map" in verdict


def test_the_page_cites_jax_docs(soup):
    sources = soup.find(id="sources")
    links = [a["href"] for a in sources.select('a[href^="https://docs.jax.dev/"]')]
    assert any("201/shard-map.html" in link for link in links)
    assert any("psum_scatter" in link for link in links)
