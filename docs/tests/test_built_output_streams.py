"""What a cell prints is one output block on the page, however the kernel cut it up.

Reads the HTML that ``nox -s docs`` built into docs/_build/html.
"""

from __future__ import annotations

import itertools

import pytest
from built_pages import SITE, cell_output, page  # this folder

PAGES = sorted(
    path.relative_to(SITE).with_suffix("").as_posix()
    for path in SITE.rglob("*.html")
    if not path.relative_to(SITE).parts[0].startswith("_")
)
STREAMS = ("stream", "stderr")  # MyST-NB's classes of stdout and stderr outputs


def test_the_site_has_pages_with_outputs():
    assert sum(bool(page(name).select("div.cell_output")) for name in PAGES) >= 20


@pytest.mark.parametrize("name", PAGES)
def test_no_cell_shows_two_consecutive_stream_boxes(name):
    for output in page(name).select("div.cell_output"):
        boxes = output.find_all(recursive=False)
        for first, second in itertools.pairwise(boxes):
            for stream in STREAMS:
                both = stream in first.get("class", []) and stream in second.get("class", [])
                assert not both, f"{name}: two consecutive {stream} boxes:\n{output.get_text()}"


def test_a_line_printed_in_two_chunks_is_one_line():
    # The kernel sent "each device's gathered shape:" and " [8 2]" as two chunks.
    text = cell_output("collectives/shard-map-all-gather", "each device's gathered shape:")
    assert "each device's gathered shape: [8 2]" in text
