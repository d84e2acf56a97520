"""Reading the site that ``nox -s docs`` built: its pages and their executed outputs."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

SITE = Path(__file__).parents[1] / "_build" / "html"


def page(name: str) -> BeautifulSoup:
    """The built HTML of page ``name`` (e.g. ``"training/gradients"``), parsed.

    Parsed once per test process and shared by every test that reads the page (a large
    page takes a third of a second to parse, and dozens of tests read each one): read
    it, never change it.
    """
    path = SITE / f"{name}.html"
    if not path.is_file():
        pytest.fail(f"{path} is missing: build the site first (nox -s docs)")
    return _parsed(path, path.stat().st_mtime_ns)


@functools.cache
def _parsed(path: Path, modified: int) -> BeautifulSoup:  # noqa: ARG001 (part of the key)
    """``path`` parsed, as it was when last ``modified`` (a rebuilt page is read again)."""
    return BeautifulSoup(path.read_text(), "html.parser")


def outputs(name: str) -> str:
    """The text of every executed cell output on a page."""
    return "\n".join(div.get_text() for div in page(name).select("div.cell_output"))


def cell_output(name: str, source: str) -> str:
    """The output of the one cell on page ``name`` whose code contains ``source``."""
    cells = [
        cell
        for cell in page(name).select("div.cell")
        if (code := cell.select_one("div.cell_input")) and source in code.get_text()
    ]
    assert len(cells) == 1, f"{len(cells)} cells of {name} contain {source!r}"
    output = cells[0].select_one("div.cell_output")
    return output.get_text() if output else ""
