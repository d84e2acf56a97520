"""What the built page "Collectives at a glance" shows: each call runs as written, colours as captioned.

These read the HTML that ``nox -s docs`` has just built into docs/_build/html.
"""

from __future__ import annotations

import base64
import functools
import re

import built_pages  # this folder
import numpy as np
from bs4 import Tag

NAME = "collectives/glance"
COLLECTIVES = ("psum", "pmean", "all_gather", "psum_scatter", "ppermute", "all_to_all")

page = functools.partial(built_pages.page, NAME)
cell_output = functools.partial(built_pages.cell_output, NAME)


def held(text: str) -> list[list[int]]:
    """What each device holds, from the ``device i: [...]`` lines."""
    return [
        [int(float(v)) for v in re.findall(r"-?\d+\.?\d*", line.split(":", 1)[1])]
        for line in text.splitlines()
        if line.startswith("device ")
    ]


def fills(title: str) -> list[str]:
    """The fill colour of each cell (value) in the picture titled ``title``, lower case.

    A cell is a rectangle outlined in #555555; matplotlib writes no fill for black,
    SVG's default.
    """
    images = [
        img
        for img in page().select("div.cell_output img.collective-diagram")
        if str(img.get("alt", "")).startswith(f"{title}.")
    ]
    assert len(images) == 1, title
    image = images[0]
    assert isinstance(image, Tag)
    svg = base64.b64decode(str(image["src"]).split(",", 1)[1]).decode()
    styles = re.findall(r'style="([^"]*stroke: #555555[^"]*)"', svg)
    return [
        (re.search(r"fill: (#[0-9a-fA-F]{6})", style) or [None, "#000000"])[1].lower()
        for style in styles
    ]


def test_every_collective_call_on_the_page_is_executed():
    code = "".join(div.get_text() for div in page().select("div.cell div.cell_input"))
    executed = "".join(code.split())  # the calls, whatever their line breaks
    for name in COLLECTIVES:
        assert f"jax.lax.{name}(block," in executed, name
    assert "jax.lax.axis_index(" in executed
    for block in page().select("div.highlight-python"):  # code shown, not run
        assert "jax.lax." not in block.get_text()


def test_psum_scatter_and_all_to_all_give_each_device_its_column():
    rows = np.random.default_rng(0).integers(0, 10, (8, 8))
    text = cell_output("rows = on_devices(")
    assert held(text) == [[s] for s in rows.sum(axis=0).tolist()]
    text = cell_output("grid = on_devices(")
    assert held(text) == [[10 * i + j for i in range(8)] for j in range(8)]


def test_the_caption_names_the_colours_the_pictures_use():
    prose = " ".join(page().get_text(" ").split()).replace("\u2019", "'")
    assert "is near-white, a colour no device has" in prose
    assert "device 7's is black" in prose
    assert "light grey" not in prose
    combined = fills("psum")
    moved = fills("ppermute")
    assert len(combined) == len(moved) == 16  # 8 devices, one value each, before and after
    assert combined[8:] == ["#f4f4f4"] * 8  # after a psum: the near-white of a combined value
    assert moved[7] == "#000000"  # device 7's value, black
    assert moved[8] == "#000000"  # ... which ppermute moved to device 0
    assert "#f4f4f4" not in moved[:8] + combined[:8]  # no device has the combined colour
    assert "#bbbbbb" not in moved + combined  # the old grey of device 7
