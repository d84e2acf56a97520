from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import diagrams


def test_every_palette_colour_carries_black_labels_at_wcag_aa():
    assert len(set(diagrams.PALETTE)) == len(diagrams.PALETTE) >= 8
    for colour in diagrams.PALETTE:
        assert diagrams.contrast_ratio("#000000", colour) >= 4.5
        # and each box stands out from a white page (non-text contrast, 3:1)
        assert diagrams.contrast_ratio("#ffffff", colour) >= 3


def test_contrast_ratio_matches_wcag_reference_values():
    assert diagrams.contrast_ratio("#ffffff", "#ffffff") == 1
    assert diagrams.contrast_ratio("#777777", "#ffffff") == pytest.approx(4.48, abs=0.01)
    with pytest.raises(ValueError, match="colour must be '#rrggbb', got 'white'"):
        diagrams.contrast_ratio("white", "#000000")


def test_the_colour_map_gives_distinct_colours_to_up_to_eight_blocks():
    for count in range(2, 9):
        colours = [diagrams.color_map(v) for v in np.linspace(0, 1, count)]
        assert len(set(colours)) == count
    with pytest.raises(ValueError, match="value must be between 0 and 1"):
        diagrams.color_map(1.5)


def test_the_description_names_the_device_of_every_block():
    n = jax.device_count()
    mesh = jax.make_mesh((n,), ("x",))
    array = jax.device_put(jnp.zeros((2 * n, 3)), NamedSharding(mesh, P("x", None)))
    text = diagrams.describe_sharding(array)
    if n == 1:  # one block, which is the whole array
        assert text == "Sharding diagram of a 2 x 3 array in 1 block: the whole array on CPU 0."
        return
    assert text.startswith(f"Sharding diagram of a {2 * n} x 3 array in {n} block")
    found = re.findall(r"rows (\d+) to (\d+) on CPU (\d+)", text)
    # oracle: the rows each device's shard holds, read from the shard itself
    expected = {
        (str(s.index[0].indices(2 * n)[0]), str(s.index[0].indices(2 * n)[1] - 1), str(s.device.id))
        for s in array.addressable_shards
    }
    assert set(found) == expected
    assert len(found) == n


def test_the_description_of_a_replicated_array_lists_every_device():
    mesh = jax.make_mesh((jax.device_count(),), ("x",))
    array = jax.device_put(jnp.zeros(5), NamedSharding(mesh, P()))
    ids = [str(d.id) for d in sorted(jax.devices(), key=lambda d: d.id)]
    devices = "CPU 0" if len(ids) == 1 else f"CPUs {', '.join(ids[:-1])} and {ids[-1]}"
    assert diagrams.describe_sharding(array) == (
        f"Sharding diagram of a 5-element array in 1 block: the whole array on {devices}."
    )


@pytest.mark.parametrize(
    ("number", "article"),
    [
        ("8", "an"),
        ("11", "an"),
        ("18 x 2", "an"),
        ("80", "an"),
        ("1", "a"),
        ("110", "a"),
        ("11000", "an"),
        ("3-element", "a"),
    ],
)
def test_the_article_follows_how_the_number_is_said(number, article):
    assert diagrams._article(number) == article


def test_the_description_rejects_what_the_diagram_cannot_draw():
    with pytest.raises(TypeError, match=r"array must be a jax\.Array, got ndarray"):
        diagrams.describe_sharding(np.zeros(3))
    with pytest.raises(ValueError, match=r"1 or 2 dimensions, got shape \(2, 2, 2\)"):
        diagrams.describe_sharding(jnp.zeros((2, 2, 2)))


def test_labels_become_black_where_white_is_illegible():
    pale = "color: #ffffff; text-decoration-color: #ffffff; background-color: #de9ed6"
    dark = "color: #ffffff; text-decoration-color: #ffffff; background-color: #393b79"
    html = f'<span style="{pale}"> CPU 1 </span><span style="{dark}"> CPU 2 </span>'
    fixed = diagrams._legible_labels(html)
    assert '<span style="color: #000000; background-color: #de9ed6"> CPU 1 </span>' in fixed
    # white on dark blue already reads well
    assert '<span style="color: #ffffff; background-color: #393b79"> CPU 2 </span>' in fixed
