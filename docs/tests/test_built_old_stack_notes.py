"""The pages that print compiled programs say how JAX 0.10 (the oldest supported) prints them.

The site is built with the newest JAX; a reader on Python 3.11 gets JAX 0.10.2, whose
XLA prints some lines differently (checked by running the pages' cells on both). These
read the HTML that ``nox -s docs`` has just built into docs/_build/html.
"""

from __future__ import annotations

import built_pages  # this folder
import pytest


def prose(name: str) -> str:
    text = " ".join(built_pages.page(name).get_text(" ").split())
    return text.replace("\u2019", "'")  # the site's typographic apostrophes


@pytest.mark.parametrize(
    ("name", "note"),
    [
        ("collectives/shard-map-pmean", "With JAX 0.10, XLA lists the devices of each group"),
        ("training/gradients", "as with JAX 0.10, print the devices of each group"),
        ("training/data-parallel-sgd-step", "XLA carries b 's 2 numbers as f32[1,2]"),
        ("training/fsdp-sgd-step", "JAX 0.10's XLA writes them f32[1,4]"),
        ("training/tensor-parallel-mlp", "older XLA versions list the device ids"),
        ("training/strategies", "On JAX 0.10 XLA prints each group as the device ids"),
        ("scale/moe-top2", "With JAX 0.10, XLA lists the devices of each group"),
    ],
)
def test_the_page_says_how_the_oldest_jax_prints_its_program(name, note):
    assert note in prose(name)


def test_the_newest_jax_prints_what_the_notes_compare_against():
    [[dp]] = built_pages.explained(
        "training/data-parallel-sgd-step", "explain(data_parallel_sgd_step"
    )
    assert dp["moves"] == "(f32[3,2], f32[2])"
    pmean = built_pages.outputs("collectives/shard-map-pmean")
    assert "replica_groups=mesh['data'=8] {'data'}" in pmean
