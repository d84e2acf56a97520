"""Draw what each device holds before and after a collective, from the arrays themselves.

:func:`diagram` takes two arrays a program really produced on several devices
(the input of a collective and its output) and draws, for each device, a row of
cells with the values that device holds: the input above, the output below. A
cell's colour says where its value came from: the colour of the device it
started on when a collective *moves* values (``all_gather``, ``ppermute``,
``all_to_all``), near-white, a colour no device has, when it *combines* the values
of all devices (``psum``, ``pmean``, ``psum_scatter``), and the holder's own colour when each
device *computes* its own (``axis_index``).

The pictures are meant to be looked at on any screen: SVG, so they stay sharp
at any width; a transparent background, every label on a filled box of its own
so it reads in light and dark themes alike; the Okabe-Ito colours, which stay
distinct for colour-blind readers; and a text alternative that says what each
device holds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np

from shard_tutorial.pictures import Picture, svg_source

if TYPE_CHECKING:
    import jax
    from matplotlib.figure import Figure

__all__ = ["COMBINED", "DEVICE_COLOURS", "Cell", "cells", "device_blocks", "diagram"]

Kind = Literal["moves", "combines", "computes"]

DEVICE_COLOURS = (
    "#E69F00",  # orange
    "#56B4E9",  # sky blue
    "#009E73",  # bluish green
    "#F0E442",  # yellow
    "#0072B2",  # blue
    "#D55E00",  # vermillion
    "#CC79A7",  # reddish purple
    "#000000",  # black
)
"""One colour per device (Okabe and Ito's palette, distinct for colour-blind readers).

None is a light grey, so none can be taken for :data:`COMBINED`."""

COMBINED = "#F4F4F4"
"""The colour of a value combined from every device's (a sum, a mean): near-white."""

LABEL_FILL = "#E6E6E6"
"""The box behind every label, so that text never sits on the page's own background."""

INK = "#111111"
"""Dark text, on the light label boxes and on the light cells."""

PAPER = "#FFFFFF"
"""Light text, on the dark cells."""


@dataclasses.dataclass(frozen=True)
class Cell:
    """One value a device holds, as drawn.

    Attributes:
      panel: ``"before"`` or ``"after"``.
      device: the device holding it (its row).
      index: its position in the device's block (its column).
      text: the value, as printed in the cell.
      colour: the cell's fill colour.
    """

    panel: str
    device: int
    index: int
    text: str
    colour: str


def device_blocks(array: jax.Array) -> list[np.ndarray]:
    """What each device holds of ``array``, as flat NumPy arrays in device order.

    Args:
      array: a ``jax.Array``, sharded or replicated.

    Returns:
      One 1-D array per device holding a part of ``array``, ordered by device id.
      A replicated array gives every device the whole of it.

    Examples:
      >>> import jax
      >>> import jax.numpy as jnp
      >>> from jax.sharding import NamedSharding, PartitionSpec as P
      >>> from shard_tutorial import data_mesh
      >>> from shard_tutorial.collective_diagrams import device_blocks
      >>> x = jax.device_put(jnp.arange(4), NamedSharding(data_mesh(4), P("data")))
      >>> [block.tolist() for block in device_blocks(x)]
      [[0], [1], [2], [3]]
    """
    shards = sorted(array.addressable_shards, key=lambda shard: shard.device.id)
    return [np.asarray(shard.data).reshape(-1) for shard in shards]


def cells(before: Sequence[np.ndarray], after: Sequence[np.ndarray], kind: Kind) -> list[Cell]:
    """The cells to draw: every value each device holds before and after, coloured.

    Args:
      before: each device's values before the collective, in device order.
      after: each device's values after it, in device order.
      kind: ``"moves"``: an after-value has the colour of the device it started
        on (found by its value, so the values before should be distinct);
        ``"combines"``: after-values are near-white, :data:`COMBINED` (made from
        every device's values);
        ``"computes"``: after-values have their holder's colour.

    Returns:
      The before-cells, then the after-cells, row by row.

    Raises:
      ValueError: for an unknown ``kind``, or more devices than colours.

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.collective_diagrams import cells
      >>> before = [np.array([0]), np.array([1])]
      >>> after = [np.array([1]), np.array([0])]  # swapped: a ppermute
      >>> [(c.panel, c.device, c.text, c.colour) for c in cells(before, after, "moves")]
      [('before', 0, '0', '#E69F00'), ('before', 1, '1', '#56B4E9'), ('after', 0, '1', '#56B4E9'), ('after', 1, '0', '#E69F00')]
    """
    if kind not in ("moves", "combines", "computes"):
        msg = f"kind must be 'moves', 'combines' or 'computes', got {kind!r}"
        raise ValueError(msg)
    if max(len(before), len(after)) > len(DEVICE_COLOURS):
        msg = f"at most {len(DEVICE_COLOURS)} devices can be drawn, got {len(before)}"
        raise ValueError(msg)
    origin: dict[float, int] = {}
    for device, block in enumerate(before):
        for value in block.tolist():
            origin.setdefault(value, device)
    drawn = [
        Cell("before", device, index, _text(value), DEVICE_COLOURS[device])
        for device, block in enumerate(before)
        for index, value in enumerate(block.tolist())
    ]
    for device, block in enumerate(after):
        for index, value in enumerate(block.tolist()):
            if kind == "combines":
                colour = COMBINED
            elif kind == "computes":
                colour = DEVICE_COLOURS[device]
            else:
                colour = DEVICE_COLOURS[origin[value]] if value in origin else COMBINED
            drawn.append(Cell("after", device, index, _text(value), colour))
    return drawn


def _blocks(values: jax.Array | Sequence[np.ndarray]) -> list[np.ndarray]:
    """Each device's values: a ``jax.Array``'s shards, or the list given."""
    if isinstance(values, Sequence):
        return [np.asarray(block).reshape(-1) for block in values]
    return device_blocks(values)


def _text(value: float) -> str:
    """A value as short as it can be printed: ``3``, ``3.5``, ``-0.25``."""
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.3g}"


def _ink(colour: str) -> str:
    """Dark or light text, whichever contrasts more with ``colour`` (WCAG's formula)."""
    channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    luminance = 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
    on_dark_text = (luminance + 0.05) / 0.05  # contrast with black
    on_light_text = 1.05 / (luminance + 0.05)  # contrast with white
    return INK if on_dark_text >= on_light_text else PAPER


def _figure(drawn: list[Cell], title: str, devices: int) -> Figure:
    """The picture of ``drawn``: the before-panel above the after-panel."""
    from matplotlib.figure import Figure  # noqa: PLC0415 (drawing is optional)
    from matplotlib.patches import Rectangle  # noqa: PLC0415

    width = max([c.index + 1 for c in drawn] + [1])
    label_width = 2.4
    row = 1.0
    gap = 1.6  # between the panels, for the arrow
    heading = 1.0
    height = 2 * (heading + devices * row) + gap
    fig = Figure(figsize=(0.42 * (label_width + max(width, 4) + 0.4), 0.34 * (height + 1.2)))
    fig.patch.set_alpha(0.0)  # transparent: the page's own background shows through
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_xlim(-0.2, label_width + max(width, 4) + 0.2)
    ax.set_ylim(height + 1.2, -0.1)
    ax.axis("off")
    ax.patch.set_alpha(0.0)

    def label(x: float, y: float, text: str, *, size: float, bold: bool = False) -> None:
        ax.text(
            x,
            y,
            text,
            ha="left",
            va="center",
            fontsize=size,
            color=INK,
            fontweight="bold" if bold else "normal",
            bbox={"boxstyle": "round,pad=0.25", "facecolor": LABEL_FILL, "edgecolor": "none"},
        )

    label(0.0, 0.45, title, size=11, bold=True)
    tops = {"before": 1.2 + heading, "after": 1.2 + heading + devices * row + gap + heading}
    for panel, top in tops.items():
        label(label_width, top - 0.55, f"{panel}:", size=9)
        for device in range(devices):
            label(0.0, top + device * row + 0.5, f"device {device}", size=9)
    for cell in drawn:
        x = label_width + cell.index
        y = tops[cell.panel] + cell.device * row
        ax.add_patch(
            Rectangle(
                (x, y + 0.06), 0.94, 0.88, facecolor=cell.colour, edgecolor="#555555", linewidth=0.6
            )
        )
        ax.text(
            x + 0.47,
            y + 0.5,
            cell.text,
            ha="center",
            va="center",
            fontsize=8.5,
            color=_ink(cell.colour),
        )
    arrow_y = tops["before"] + devices * row + 0.15
    ax.annotate(
        "",
        xy=(label_width + 0.5, arrow_y + gap - 0.2),
        xytext=(label_width + 0.5, arrow_y + 0.1),
        arrowprops={"arrowstyle": "-|>", "color": "#888888", "linewidth": 1.5},
    )
    return fig


def _describe(panel: str, blocks: Sequence[np.ndarray]) -> str:
    """One sentence for the text alternative: what each device holds."""
    texts = [", ".join(_text(v) for v in block.tolist()) or "nothing" for block in blocks]
    if len(set(texts)) == 1:
        return f"{panel}, every one of the {len(blocks)} devices holds {texts[0]}."
    held = "; ".join(f"device {d} holds {text}" for d, text in enumerate(texts))
    return f"{panel}, {held}."


def diagram(
    title: str,
    before: jax.Array | Sequence[np.ndarray],
    after: jax.Array | Sequence[np.ndarray],
    kind: Kind,
) -> Picture:
    """Draw what each device holds before and after a collective.

    Args:
      title: the heading, e.g. ``"psum"``.
      before: the collective's input, as a ``jax.Array`` (each device's part is
        drawn) or a list of each device's values.
      after: its output, likewise.
      kind: how the after-values are coloured (see :func:`cells`).

    Returns:
      A :class:`~shard_tutorial.pictures.Picture`, which notebooks show as a
      picture with its text alternative.

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.collective_diagrams import diagram
      >>> picture = diagram("psum", [np.array([1]), np.array([2])], [np.array([3]), np.array([3])], "combines")
      >>> picture.alt
      'psum. Before, device 0 holds 1; device 1 holds 2. After, every one of the 2 devices holds 3.'
      >>> picture.svg.lstrip().startswith("<?xml")
      True
    """
    before_blocks = _blocks(before)
    after_blocks = _blocks(after)
    devices = max(len(before_blocks), len(after_blocks))
    drawn = cells(before_blocks, after_blocks, kind)
    figure = _figure(drawn, title, devices)
    alt = " ".join(
        [
            f"{title}.",
            _describe("Before", before_blocks),
            _describe("After", after_blocks),
        ]
    )
    return Picture(svg_source(figure), alt, css_class="collective-diagram", max_width="24rem")
