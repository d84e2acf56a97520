"""What the built "Costs at real sizes" page shows: the calculator against the compiled step,
Llama 3 8B's figures, and the chart.

These read the HTML that ``nox -s docs`` has just built into docs/_build/html.
"""

from __future__ import annotations

import base64
import re

from bs4 import Tag
from built_pages import cell_output, outputs, page  # this folder

NAME = "training/costs-at-scale"
PARAMS = 8_030_261_248  # Llama 3 8B, from its published shapes


def number(text: str) -> int:
    return int(text.replace(",", ""))


def test_the_page_has_its_label_and_title():
    soup = page(NAME)
    assert soup.select_one("[id='costs-at-scale']") is not None
    assert soup.h1 is not None
    assert "Costs at real sizes" in soup.h1.get_text()


def test_the_config_has_llama_3_8bs_parameter_count():
    assert f"{PARAMS:,} parameters, 32.1 GB in float32" in outputs(NAME)


def test_the_calculator_agrees_with_the_compiled_program_to_the_byte():
    text = cell_output(NAME, "memory_analysis()")
    arguments = re.search(r"arguments:\s+measured ([\d,]+) B, calculator ([\d,]+) B", text)
    assert arguments is not None
    assert arguments[1] == arguments[2] == "40,564"
    outs = re.search(r"outputs:\s+measured ([\d,]+) B, .* = ([\d,]+) B", text)
    assert outs is not None
    assert outs[1] == outs[2]
    lines = re.findall(
        r"(\w+): (\S+) among (\d+): calculator (\d+) sending ([\d,]+) B; "
        r"program (\d+) sending ([\d,]+) B",
        text,
    )
    assert [line[0] for line in lines] == ["parameters", "gradients", "activations", "loss"]
    for _, _, _, _, predicted, _, measured in lines:
        assert predicted == measured
    total = re.search(r"sent per step: program ([\d,]+) B, calculator ([\d,]+) B", text)
    assert total is not None
    assert total[1] == total[2] == "113,606"


def test_the_8b_figures_on_256_devices():
    text = cell_output(NAME, "fsdp = by_name")
    total = 16 * PARAMS // 256 + 4
    assert f"{total:,} by hand, {total:,} from the calculator" in text
    assert "1.50 x" in text
    soup = page(NAME)
    rows = []
    for table in soup.select("div.cell_output table"):
        headers = [th.get_text(" ", strip=True) for th in table.select("thead th")]
        if "optimizer state" in headers:
            rows = [
                dict(
                    zip(
                        headers,
                        (td.get_text(" ", strip=True) for td in tr.select("td")),
                        strict=True,
                    )
                )
                for tr in table.select("tbody tr")
            ]
    assert len(rows) == 8
    at_256 = {row["strategy"]: row for row in rows if "256" in row["mesh"] or "32" in row["mesh"]}
    assert at_256["DP"]["total"] == "128.5 GB"
    assert at_256["DP"]["fits in 80 GB"] == "no"
    assert at_256["FSDP"]["total"] == "0.5 GB"
    assert at_256["TP"]["total"] == "30.8 GB"
    assert at_256["FSDP x TP"]["total"] == "1.0 GB"


def test_where_each_fits():
    text = cell_output(NAME, "largest_fitting_layers")
    assert "DP        fits at no device count" in text
    assert "FSDP      fits from 8 devices" in text


def test_the_chart_is_an_svg_with_every_figure_in_its_text_alternative():
    image = page(NAME).select_one("div.cell_output img.costs-chart")
    assert isinstance(image, Tag)
    alt = str(image["alt"])
    assert alt.startswith("Two line charts against the device count (8, 16, 32, 64, 128, 256)")
    assert "DP 128.5, 128.5, 128.5, 128.5, 128.5, 128.5" in alt
    assert "FSDP 16.1, 8.0, 4.0, 2.0, 1.0, 0.5" in alt
    source = str(image["src"])
    assert source.startswith("data:image/svg+xml;base64,")
    assert "<svg" in base64.b64decode(source.split(",", 1)[1]).decode()


def test_fsdp_x_tp_holds_twice_fsdps_figure_and_sends_a_quarter_of_its_gathers():
    """Issue 37, item 1: the embedding and the output layer are gathered whole."""
    text = cell_output(NAME, "split_too")
    assert "64 devices, fsdp 8: holds 3.85 GB by hand, 3.85 from the calculator; FSDP 2.01" in text
    assert (
        "256 devices, fsdp 32: holds 0.96 GB by hand, 0.96 from the calculator; FSDP 0.50" in text
    )
    assert "= 7.453 by hand, 7.453 from the calculator" in text
    assert "against FSDP's 31.996 GB: 0.23 of it" in text
    prose = page(NAME).get_text(" ")
    assert "about an eighth of" not in prose
    assert "0.23 of FSDP\N{RIGHT SINGLE QUOTATION MARK}s parameter traffic" in " ".join(
        prose.split()
    )
