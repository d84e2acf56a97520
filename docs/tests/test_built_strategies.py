"""What the built "Strategies compared" page shows: the measured table, the collectives, the chart.

These read the HTML that ``nox -s docs`` has just built into docs/_build/html.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest
from bs4 import BeautifulSoup, Tag

SITE = Path(__file__).parents[1] / "_build" / "html"
PAGE = SITE / "training" / "strategies.html"


@pytest.fixture(scope="module")
def soup() -> BeautifulSoup:
    if not PAGE.is_file():
        pytest.fail(f"{PAGE} is missing: build the site first (nox -s docs)")
    return BeautifulSoup(PAGE.read_text(), "html.parser")


def table_with(soup: BeautifulSoup, heading: str) -> list[dict[str, str]]:
    """The rows of the executed table whose header has ``heading``, as dicts."""
    for table in soup.select("div.cell_output table"):
        headers = [th.get_text(" ", strip=True) for th in table.select("thead th")]
        if heading in headers:
            return [
                dict(
                    zip(
                        headers,
                        (td.get_text(" ", strip=True) for td in tr.select("td")),
                        strict=True,
                    )
                )
                for tr in table.select("tbody tr")
            ]
    pytest.fail(f"no table with a {heading!r} column on the page")


def number(text: str) -> int:
    return int(text.replace(",", ""))


def test_the_page_has_its_label_and_title(soup):
    assert soup.select_one("span#strategies, section#strategies, [id='strategies']") is not None
    assert soup.h1 is not None
    assert "Strategies compared" in soup.h1.get_text()


def test_the_table_shows_different_parameter_bytes_for_dp_and_fsdp(soup):
    rows = {row["strategy"]: row for row in table_with(soup, "parameter bytes per device")}
    assert list(rows) == ["DP", "FSDP", "TP"]
    params = {s: number(row["parameter bytes per device"]) for s, row in rows.items()}
    grads = {s: number(row["gradient bytes per device"]) for s, row in rows.items()}
    # w1 (16, 64) and w2 (64, 8) in float32: 6144 bytes; FSDP splits them 8 ways, TP 4 ways.
    assert params == {"DP": 6144, "FSDP": 768, "TP": 1536}
    assert params["DP"] != params["FSDP"]
    assert grads == params
    assert rows["TP"]["mesh"] == "2 (data) x 4 (model)"
    for row in rows.values():
        assert re.fullmatch(r"\d+\.\d\d ms", row["step time"])


def test_the_collectives_of_each_compiled_step_are_listed_with_their_bytes(soup):
    text = "\n".join(div.get_text() for div in soup.select("div.cell_output pre"))
    found: dict[str, list[tuple[str, int]]] = {}
    strategy = ""
    for line in text.splitlines():
        heading = re.match(r"(DP|FSDP|TP) on \{", line)
        if heading:
            strategy = heading[1]
        listed = re.match(r"\s+([a-z-]+) -> .+ \((\d+) bytes\) among (.+)", line)
        if listed:
            assert listed[3] != "all devices"  # the groups XLA printed were read
            found.setdefault(strategy, []).append((listed[1], int(listed[2])))
    assert found["DP"] == [("all-reduce", 6144)]
    assert sorted(found["FSDP"]) == [
        ("all-gather", 2048),
        ("all-gather", 4096),
        ("reduce-scatter", 256),
        ("reduce-scatter", 512),
    ]
    assert sorted(found["TP"]) == [("all-reduce", 512), ("all-reduce", 1536)]
    summary = {row["strategy"]: row for row in table_with(soup, "collectives per step")}
    for name, listed in found.items():
        assert number(summary[name]["collectives per step"]) == len(listed)
        assert number(summary[name]["their bytes per device"]) == sum(b for _, b in listed)


def test_every_strategy_took_the_numpy_step(soup):
    text = "\n".join(div.get_text() for div in soup.select("div.cell_output"))
    differences = re.findall(
        r"(DP|FSDP|TP)\s+largest difference: from NumPy (\S+), from jax.grad (\S+)", text
    )
    assert [d[0] for d in differences] == ["DP", "FSDP", "TP"]
    for _, vs_numpy, vs_jax in differences:
        assert float(vs_numpy) < 1e-5
        assert float(vs_jax) < 1e-5


def test_the_chart_is_an_svg_with_every_figure_in_its_text_alternative(soup):
    image = soup.select_one("div.cell_output img.strategies-chart")
    assert isinstance(image, Tag)
    alt = str(image["alt"])
    assert alt.startswith("Bar charts comparing DP, FSDP, TP.")
    assert "Parameter bytes per device: DP 6,144 B; FSDP 768 B; TP 1,536 B." in alt
    assert "Gradient bytes per device: DP 6,144 B; FSDP 768 B; TP 1,536 B." in alt
    assert "Collective bytes per step, per device: DP 6,144 B; FSDP 6,912 B; TP 2,048 B." in alt
    assert "shared CPU cores" in alt
    source = str(image["src"])
    assert source.startswith("data:image/svg+xml;base64,")
    svg = base64.b64decode(source.split(",", 1)[1]).decode()
    assert "<svg" in svg


def test_the_page_says_the_step_time_is_not_a_speed_up(soup):
    text = " ".join(soup.get_text(" ").split())
    assert "not a speed-up claim" in text
    assert "CPU devices that share this machine" in text


def ring(kind: str, nbytes: int, n: int) -> float:
    """What each device sends for a collective run as a ring (independent of the page's helper)."""
    return {
        "all-reduce": 2 * (n - 1) / n * nbytes,
        "all-gather": (n - 1) / n * nbytes,
        "reduce-scatter": (n - 1) * nbytes,
    }[kind]


def test_on_the_wire_fsdp_sends_what_dp_sends_and_tp_least(soup):
    text = "\n".join(div.get_text() for div in soup.select("div.cell_output pre"))
    totals = {
        name: float(total.replace(",", ""))
        for name, total in re.findall(
            r"^(DP|FSDP|TP) sends ([\d,]+) bytes per device", text, re.MULTILINE
        )
    }
    listed: dict[str, float] = {}
    strategy = ""
    for line in text.splitlines():
        heading = re.match(r"(DP|FSDP|TP) sends ", line)
        if heading:
            strategy = heading[1]
        item = re.match(r"\s+([a-z-]+) of ([\d,]+) bytes among (\d+) devices: ([\d,]+)$", line)
        if item:
            kind, nbytes, n, sent = item.groups()
            expected = ring(kind, int(nbytes.replace(",", "")), int(n))
            assert float(sent.replace(",", "")) == round(expected)
            listed[strategy] = listed.get(strategy, 0.0) + expected
    assert listed == pytest.approx(totals)
    assert totals == {"DP": 10752, "FSDP": 10752, "TP": 2304}
    assert "FSDP / DP: 1.00, TP / DP: 0.21" in text


def test_gathering_again_in_the_backward_pass_costs_one_and_a_half_times_dp(soup):
    (cell,) = [
        cell
        for cell in soup.select("div.cell")
        if "def fsdp_regather_step(" in cell.select_one("div.cell_input").get_text()
    ]
    text = cell.select_one("div.cell_output").get_text()
    assert "largest difference from the FSDP step above: 0.0e+00" in text
    gathers = re.findall(r"^\s+all-gather of ([\d,]+) bytes", text, re.MULTILINE)
    assert sorted(gathers) == ["2,048", "2,048", "4,096", "4,096"]  # each weight twice
    assert "sent: 16,128 bytes per device, 1.50 x DP's" in text


def test_the_summary_says_what_the_figures_show(soup):
    text = " ".join(soup.get_text(" ").split())
    assert "move more data per step" not in text
    assert "computes the same bytes from shapes alone for a model the size of Llama 3 8B" in text
    link = soup.select_one("a[href$='costs-at-scale.html']")
    assert link is not None


def test_memory_per_device_from_the_compiled_step(soup):
    text = "\n".join(div.get_text() for div in soup.select("div.cell_output pre"))
    rows = {
        name: tuple(number(v) for v in values)
        for name, *values in re.findall(
            r"^(DP|FSDP|TP)\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)$",
            text,
            re.MULTILINE,
        )
    }
    # stored parameters, arguments, outputs, temporaries, peak
    assert rows["DP"][:3] == (6144, 6144 + 384 + 4, 6144 + 16)
    assert rows["FSDP"][:3] == (768, 768 + 384 + 4, 768 + 16)
    assert rows["TP"][:3] == (1536, 1536 + 1536 + 4, 1536 + 16)
    for _stored, arguments, outputs, _, peak in rows.values():
        assert peak == arguments + outputs  # what the CPU backend reports as peak
    assert rows["FSDP"][3] > rows["DP"][3]  # the gathered weights live on
    remat = re.search(r"temporaries: ([\d,]+) bytes, FSDP's without jax.checkpoint: ([\d,]+)", text)
    assert remat is not None
    assert number(remat[1]) < number(remat[2]) == rows["FSDP"][3]
    # Issue 37, item 7: the saving is printed, and is no whole gathered weight.
    assert "saved: 1,024 bytes; the gathered weights: w1 4,096, w2 2,048" in text
    prose = " ".join(soup.get_text(" ").split())
    assert "a gathered w2 (2,048 bytes) no longer waits" not in prose
    assert "this page does not say which bytes were saved" in prose


def test_zero_stages_count_the_optimizer_state(soup):
    text = "\n".join(div.get_text() for div in soup.select("div.cell_output pre"))
    assert "ZeRO-1 6,144 + 6,144 + 2 x   768 = 13,824 bytes" in text
    assert "ZeRO-3   768 +   768 + 2 x   768 =  3,072 bytes" in text
    assert "DP     6,144 + 6,144 + 1 x 6,144 = 18,432 bytes" in text
