"""What the built page "A real training run" shows: both runs, their agreement, the plot.

These read the HTML that ``nox -s docs`` has just built into docs/_build/html.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

SITE = Path(__file__).parents[1] / "_build" / "html"
PAGE = "training/training-run"


@pytest.fixture(scope="module")
def soup() -> BeautifulSoup:
    path = SITE / f"{PAGE}.html"
    if not path.is_file():
        pytest.fail(f"{path} is missing: build the site first (nox -s docs)")
    return BeautifulSoup(path.read_text(), "html.parser")


def outputs(soup: BeautifulSoup) -> str:
    return "\n".join(div.get_text() for div in soup.select("div.cell_output"))


def test_the_page_trains_both_ways_and_they_agree(soup):
    text = outputs(soup)
    first = re.search(r"data-parallel: (\S+) at step 0, (\S+) at step 299", text)
    second = re.search(r"unsharded: (\S+) at step 0, (\S+) at step 299", text)
    assert first, text
    assert second, text
    start, end = float(first[1]), float(first[2])
    assert start / end > 5  # the loss falls
    assert abs(float(second[2]) - end) <= 1e-4 * end  # the curves meet at the end too
    gap = re.search(r"largest relative difference: (\S+) \(step", text)
    assert gap, text
    assert float(gap[1]) <= 1e-4


def test_the_page_shows_the_one_all_reduce_of_the_step(soup):
    text = outputs(soup)
    assert "x: float32[64@data,4] rows on device 0: (8, 4)" in text
    reduces = re.findall(r"^all-reduce -> .*\((\d+) bytes\) among (.*)$", text, re.MULTILINE)
    assert len(reduces) == 1, text
    assert reduces[0][0] == "5000"  # 1249 gradients and the loss, 4 bytes each
    assert "data" in reduces[0][1]


def test_the_plot_has_two_line_styles_and_a_text_alternative(soup):
    pictures = soup.select("div.cell_output img.loss-plot")
    assert len(pictures) == 1
    img = pictures[0]
    prefix = "data:image/svg+xml;base64,"
    assert img["src"].startswith(prefix)
    svg = base64.b64decode(img["src"][len(prefix) :]).decode()
    assert "stroke-dasharray" in svg  # one curve dashed, not only another colour
    alt = img["alt"]
    assert "(log scale) against the step, 300 steps" in alt
    assert "data-parallel, 8 devices (a thick solid line)" in alt
    assert "unsharded, 1 device (a dashed line)" in alt
    assert "lie on top of each other" in alt
    assert "background:#ffffff" in img["style"]  # readable on the dark theme too


def test_the_page_shows_why_the_run_uses_sgd(soup):
    text = outputs(soup)
    assert re.search(r"adam: \[.*\] for g, \[.*\] for 8 g", text)
    assert re.search(r"sgd with momentum: \[.*\] for g, \[.*\] for 8 g", text)
    printed = [line.strip("[] ").split() for line in text.splitlines() if line.startswith("[")]
    five = [[float(v) for v in values] for values in printed if len(values) == 5]
    assert len(five) == 1, printed  # the 5 losses of the run with 8 times the step
    assert abs(five[0][0] - 0.7231) < 1e-3
    assert five[0][-1] > 1000 * five[0][0]  # it diverges


def test_the_page_shows_the_code_from_the_package_and_cites_its_sources(soup):
    code = " ".join(pre.get_text() for pre in soup.select("div.highlight-python pre"))
    assert "class MLP(nnx.Module):" in code
    assert "jax.lax.pmean(loss, axis)" in code
    assert "jax.shard_map(" in code
    sources = soup.find(id="sources")
    assert sources.select('a[href^="https://docs.jax.dev/"]')
    assert sources.select('a[href^="https://optax.readthedocs.io/"]')
