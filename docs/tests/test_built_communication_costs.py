"""What the built page "What communication costs" shows: the model agrees with the compiled programs.

These read the HTML that ``nox -s docs`` has just built into docs/_build/html.
"""

from __future__ import annotations

import functools
import re

import built_pages  # this folder
from bs4 import Tag

NAME = "collectives/communication-costs"

page = functools.partial(built_pages.page, NAME)
cell_output = functools.partial(built_pages.cell_output, NAME)


def table(header: str) -> list[dict[str, str]]:
    """The rows of the one executed table whose header has a column ``header``."""
    found = [
        t
        for t in page().select("div.cell_output table")
        if header in [th.get_text(strip=True) for th in t.select("th")]
    ]
    assert len(found) == 1, header
    names = [th.get_text(strip=True) for th in found[0].select("th")]
    return [
        dict(zip(names, [td.get_text(strip=True) for td in tr.select("td")], strict=True))
        for tr in found[0].select("tbody tr")
    ]


def number(text: str) -> float:
    return float(text.replace(",", ""))


def test_the_cost_table_agrees_with_the_compiled_programs():
    rows = table("ring_bytes")
    assert len(rows) == 5 * 3 * 3  # five collectives, n = 2, 4, 8, three sizes
    assert {(r["lax"], r["HLO"]) for r in rows} == {
        ("psum", "all-reduce"),
        ("all_gather", "all-gather"),
        ("psum_scatter", "reduce-scatter"),
        ("all_to_all", "all-to-all"),
        ("ppermute", "collective-permute"),
    }
    for r in rows:
        n, operand, result = (number(r[k]) for k in ("n", "operand", "result"))
        size = max(operand, result)
        assert number(r["S"]) == size
        assert operand in (1024, 65536, 1048576)  # the three blocks, float32
        expected_result = {"all_gather": n * operand, "psum_scatter": operand / n}
        assert result == expected_result.get(r["lax"], operand), r
        phases = 2 if r["lax"] == "psum" else 1
        direct = {"ppermute": size}.get(r["lax"], phases * (n - 1) / n * size)
        assert abs(number(r["direct"]) - direct) < 1, r
        assert number(r["ring_bytes"]) == number(r["direct"]), r
        if r["lax"] == "all_to_all":
            assert abs(number(r["ring"]) - (n - 1) / 2 * size) < 1, r
            assert abs(number(r["roofline"]) - (size if n == 2 else n * size / 4)) < 1, r
        elif r["lax"] != "ppermute":
            assert number(r["roofline"]) == number(r["ring"]) == number(r["direct"]), r
    text = cell_output("measured = [")
    assert "45 compiled programs" in text
    assert "ring_bytes read from every compiled collective: True" in text


def test_an_all_reduce_sends_a_reduce_scatter_plus_an_all_gather():
    text = cell_output("def measured_on_8(")
    sends = {
        name: int(re.search(rf"{name}:.*sends\s+([\d,]+)", text)[1].replace(",", ""))
        for name in ("psum_scatter", "all_gather", "psum")
    }
    assert sends == {"psum_scatter": 917504, "all_gather": 917504, "psum": 1835008}
    assert "reduce-scatter + all-gather: 1,835,008" in text


def test_the_ring_all_reduce_equals_psum_and_is_drawn():
    text = cell_output("run = ring_all_reduce(")
    assert "equal: True" in text
    assert "[28.0, 32.0, 36.0, 40.0]" in text
    images = page().select("div.cell_output img.ring-all-reduce")
    assert len(images) == 1
    image = images[0]
    assert isinstance(image, Tag)
    alt = str(image["alt"])
    assert alt.startswith("A ring all-reduce over 4 devices, step by step.")
    assert "After step 6 (all-gather): device 0: 28 (sum of 4)" in alt


def test_predictions_are_labelled_and_cited():
    prose = " ".join(page().get_text(" ").split())
    assert "Predictions, not measurements" in prose
    links = cell_output("for link in LINKS:")
    for source in (
        "https://jax-ml.github.io/scaling-book/tpus/",
        "https://www.nvidia.com/en-us/data-center/h100/",
    ):
        assert source in links
    rows = table("TPU v5e ICI")
    assert len(rows) == 4
    small = number(rows[0]["TPU v5e ICI"].split()[0])
    assert 8 <= small < 8.1  # 8 rounds of 1 us: latency-bound


def test_roofline_and_its_string_axis_name():
    text = cell_output("from jax.experimental import roofline")
    assert "axis_name='data': KeyError 'd'" in text
    assert "axis_name=('data',): ici_bytes {'data': 64}" in text


def test_the_compiled_line_names_its_operand_without_its_type():
    text = cell_output("program_lines(psum_on_4")
    assert "f32[256]{0} all-reduce(%param" in text
    assert "replica_groups=" in text


def test_the_gpu_column_is_printed_as_the_bandwidth_term_only():
    """Issue 37, item 17: no "0.00 µs" that reads as free."""
    (table,) = [
        t
        for t in built_pages.page(NAME).select("div.cell_output table")
        if "H100 NVLink" in t.get_text()
    ]
    rows = [
        [td.get_text(" ", strip=True) for td in tr.select("td")] for tr in table.select("tbody tr")
    ]
    assert rows[0] == [
        "1e+03 bytes",
        "8.02 µs",
        "8.01 µs",
        "0.003889 µs + \N{GREEK SMALL LETTER ALPHA}",
    ]
    assert rows[-1][-1] == "3,889 µs + \N{GREEK SMALL LETTER ALPHA}"
    assert "0.00 µs" not in table.get_text()
