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


def explained(name: str, source: str) -> list[list[dict[str, str]]]:
    """The collectives of each table that ``explain`` drew in the output of one cell.

    The cell is the one on page ``name`` whose code contains ``source``; each table is a
    list of its collectives, each a dict from the table's header (``"collective"``,
    ``"by"``, ``"over"``, ``"moves"``, ``"B/run"``, ``"runs"``, ``"B sent"``, ``"line"``) to
    what the row shows. A call that sent nothing drew no such table: its list is empty.
    """
    cells = [
        cell
        for cell in page(name).select("div.cell")
        if (code := cell.select_one("div.cell_input")) and source in code.get_text()
    ]
    assert len(cells) == 1, f"{len(cells)} cells of {name} contain {source!r}"
    found = []
    for table in cells[0].select("div.cell_output table"):
        head = [th.get_text() for th in table.select("thead th")]
        if "B sent" not in head:
            continue  # the table of layouts
        rows = [[td.get_text() for td in tr.select("td")] for tr in table.select("tbody tr")]
        # Each collective's row is followed by one of two cells: the line's code.
        found.append([dict(zip(head, row, strict=True)) for row in rows if len(row) == len(head)])
    return found


def headline(name: str, source: str) -> str:
    """The first line ``explain`` printed in one cell's output ("f: 1 program on 8 devices, ...")."""
    text = cell_output(name, source)
    return next(line for line in text.splitlines() if " sent per device" in line)
