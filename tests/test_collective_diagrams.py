"""The collective diagrams: each value drawn where a real array holds it, coloured by origin."""

from __future__ import annotations

import base64
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh
from shard_tutorial.collective_diagrams import (
    COMBINED,
    DEVICE_COLOURS,
    _ink,
    cells,
    device_blocks,
    diagram,
)


def test_device_blocks_follow_the_arrays_sharding(device_count):
    x = jax.device_put(jnp.arange(16), NamedSharding(data_mesh(16), P("data")))
    blocks = device_blocks(x)
    assert len(blocks) == device_count
    np.testing.assert_array_equal(np.concatenate(blocks), np.arange(16))
    replicated = jax.device_put(jnp.arange(3), NamedSharding(data_mesh(16), P()))
    assert [b.tolist() for b in device_blocks(replicated)] == [[0, 1, 2]] * device_count


def test_moved_values_keep_the_colour_of_the_device_they_started_on():
    before = [np.array([10 * d + j for j in range(3)]) for d in range(3)]
    after = [np.array([10 * i + d for i in range(3)]) for d in range(3)]  # an all_to_all
    drawn = [c for c in cells(before, after, "moves") if c.panel == "after"]
    for cell in drawn:
        assert cell.colour == DEVICE_COLOURS[int(cell.text) // 10]
    assert {c.device for c in drawn} == {0, 1, 2}


def test_combined_and_computed_values_are_coloured_as_such():
    before = [np.array([1.0]), np.array([2.0])]
    summed = [c.colour for c in cells(before, [np.array([3.0])] * 2, "combines")[2:]]
    assert summed == [COMBINED, COMBINED]
    own = [c.colour for c in cells(before, [np.array([0]), np.array([1])], "computes")[2:]]
    assert own == list(DEVICE_COLOURS[:2])
    with pytest.raises(ValueError, match="kind"):
        cells(before, before, "shuffles")


def test_text_on_every_fill_has_enough_contrast():
    def luminance(colour: str) -> float:
        channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
        lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    for fill in (*DEVICE_COLOURS, COMBINED):
        a, b = sorted([luminance(fill), luminance(_ink(fill))])
        assert (b + 0.05) / (a + 0.05) >= 4.5, fill  # WCAG AA for normal text


def test_no_device_colour_can_be_taken_for_the_combined_one():
    def luminance(colour: str) -> float:
        channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
        lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    assert len(set(DEVICE_COLOURS)) == len(DEVICE_COLOURS)
    for colour in DEVICE_COLOURS:
        channels = {colour[i : i + 2].lower() for i in (1, 3, 5)}
        if len(channels) == 1:  # a grey: it must be far darker than COMBINED's near-white
            ratio = (luminance(COMBINED) + 0.05) / (luminance(colour) + 0.05)
            assert ratio >= 3, colour


def test_the_picture_shows_every_value_and_says_so_in_words(device_count):
    mesh = data_mesh(device_count)
    x = jax.device_put(jnp.arange(device_count), NamedSharding(mesh, P("data")))
    total = jax.jit(
        jax.shard_map(
            lambda b: jax.lax.psum(b, "data"), mesh=mesh, in_specs=P("data"), out_specs=P()
        )
    )(x)
    picture = diagram("psum", x, total, "combines")
    expected_total = str(sum(range(device_count)))
    assert f"every one of the {device_count} devices holds {expected_total}" in picture.alt
    assert "device 0 holds 0" in picture.alt or device_count == 1
    svg = picture.svg
    assert svg.lstrip().startswith("<?xml")
    assert 'fill="#ffffff"' not in svg.lower().split('<g id="axes_1">')[0]  # no backdrop
    page = picture._repr_html_()
    assert re.search(r'alt="psum\. Before', page)
    payload = re.search(r'base64,([^"]+)"', page)
    assert payload is not None
    assert base64.b64decode(payload.group(1)).decode() == svg
