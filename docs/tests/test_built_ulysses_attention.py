"""What the built "Ulysses attention" page shows: the all-to-all drawn from real arrays, the
four all-to-alls and their bytes, the pitfalls with their errors and the checker's words,
the memory against gathering k and v, the comparison with ring attention, the checker.

These read the HTML that ``nox -s docs`` has just built into docs/_build/html.
"""

from __future__ import annotations

import built_pages  # this folder

NAME = "scale/ulysses-attention"


def output(source: str) -> str:
    """The output of the page's one cell whose code contains ``source``, spaces joined."""
    return " ".join(built_pages.cell_output(NAME, source).split())


def test_the_all_to_all_gives_each_device_one_head_and_is_drawn():
    printed = output("labels = 10 * np.arange(4)")
    assert "device 1 holds [ 1 11 21 31]" in printed
    (picture,) = built_pages.page(NAME).select("img.collective-diagram")
    assert picture["alt"].startswith("all_to_all: from tokens to heads. Before, device 0")
    assert "After, device 0 holds 0, 10, 20, 30; device 1 holds 1, 11, 21, 31" in picture["alt"]


def test_the_worked_example_runs_four_all_to_alls():
    printed = output("def attend_by_heads(")
    assert "each device attends with q of float32[16,1,4]{V:seq}" in printed
    assert "right: True" in printed
    assert printed.count("all-to-all 8 pieces of 32 bytes, 224 bytes sent per device") == 4


def test_the_pitfalls_are_shown_with_their_errors_and_the_checkers_words():
    split = output("four_heads = jax.device_put(")
    assert "has to be divisible by the size of the named axis seq (8)" in split
    assert "the contract's mesh for T=16, H=4: {'seq': 4}" in split
    shifted = output("offsets=np.arange(8) * 2")
    assert "the causal mask counted the queries' positions" in shifted


def test_gathering_k_and_v_holds_more_than_the_checker_allows():
    printed = output("def gather_kv(")
    held = {
        name: int(printed.split(f"{name}: ")[1].split(" bytes")[0].replace(",", ""))
        for name in ("Ulysses", "k and v gathered")
    }
    allowed = int(printed.split("the checker allows ")[1].split()[0].replace(",", ""))
    assert held["Ulysses"] < allowed < held["k and v gathered"], printed


def test_ulysses_sends_a_quarter_of_the_rings_bytes_on_8_devices():
    printed = output("ring_heads = jax.vmap(")
    assert "H=8, Ulysses: 8 devices, 28,672 bytes sent per device" in printed
    assert "H=8, ring: 8 devices, 114,688 bytes sent per device" in printed
    assert "H=4, Ulysses: 4 devices" in printed
    balance = output("ulysses_work(64, 8, 8)")
    assert "Ulysses, per device: [2080 2080 2080 2080 2080 2080 2080 2080]" in balance


def test_the_reference_copy_passes():
    printed = output('check("ulysses_attention", reference_copy(')
    assert "PASSED: every case on 1 and 8 devices" in printed
