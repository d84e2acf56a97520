"""Pictures of a ring: which block each device holds at each step, drawn from a real run.

Collective matmul and ring attention pass blocks round the devices of a mesh axis with
``jax.lax.ppermute``, one step at a time. Their pages record, in a ``shard_map`` run on
the page's own devices, the number of the block each device holds (or adds to) at each
step, and :func:`ring_picture` draws that array: one row per device, one cell per step,
each block in its own colour, so the diagonal stripes of the ring are seen at a glance.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from shard_tutorial.pictures import Picture, grid_axes, svg_source

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["ring_picture"]


def ring_picture(
    held: object, *, title: str, what: str = "holds block", width: float = 32.0
) -> Picture:
    """Draw which block each device has at each step of a ring.

    Args:
      held: integers, one row per device and one column per step: the block a
        device holds (or works on) at that step, as a ``shard_map`` run recorded
        it. Any array-like, a ``jax.Array`` included.
      title: the picture's heading, e.g. ``"All-gather matmul, 8 devices"``.
      what: how the text alternative says what a device does with its block.
      width: the widest the picture is drawn, in ``rem``.

    Returns:
      A :class:`~shard_tutorial.pictures.Picture` whose text alternative lists,
      device by device, the block at each step.

    Raises:
      ValueError: ``held`` is not a 2-D array of whole numbers from 0 on.

    Examples:
      >>> from shard_tutorial.ring_pictures import ring_picture
      >>> picture = ring_picture([[0, 1], [1, 0]], title="A ring of 2")
      >>> print(picture.alt)
      A ring of 2: 2 devices, 2 steps. Device 0 holds block 0, then 1. Device 1 holds block 1, then 0.
    """
    blocks = np.asarray(held)
    if blocks.ndim != 2 or blocks.size == 0:
        msg = f"held must be a 2-D array (devices x steps), got shape {blocks.shape}"
        raise ValueError(msg)
    if not np.issubdtype(blocks.dtype, np.integer) or blocks.min() < 0:
        msg = f"held must hold block numbers (integers from 0), got {blocks.dtype} {blocks.min()}"
        raise ValueError(msg)
    devices, steps = blocks.shape
    rows = [
        f"Device {d} {what} {row[0]}"
        + (", then " + ", ".join(map(str, row[1:])) if steps > 1 else "")
        + "."
        for d, row in enumerate(blocks.tolist())
    ]
    alt = f"{title}: {devices} devices, {steps} steps. " + " ".join(rows)
    return Picture(
        svg_source(_figure(blocks, title)), alt, css_class="ring-steps", max_width=f"{width}rem"
    )


def _figure(blocks: np.ndarray, title: str) -> Figure:
    """The matplotlib figure of :func:`ring_picture`."""
    from matplotlib.patches import Rectangle  # noqa: PLC0415 (drawing is optional)

    from shard_tutorial.collective_diagrams import (  # noqa: PLC0415
        DEVICE_COLOURS,
        INK,
        LABEL_FILL,
        _ink,
    )

    devices, steps = blocks.shape
    label_width, cell, heading = 3.2, 1.3, 1.8
    width = label_width + steps * cell
    height = heading + devices
    fig, ax = grid_axes(width, height)
    box = {"boxstyle": "round,pad=0.2", "facecolor": LABEL_FILL, "edgecolor": "none"}
    ax.text(0.0, 0.4, title, fontsize=9, color=INK, bbox=box, va="center")
    for t in range(steps):
        ax.text(label_width + (t + 0.5) * cell, heading - 0.45, f"step {t}", ha="center",
                va="center", fontsize=7.5, color=INK, bbox=box)  # fmt: skip
    for d in range(devices):
        y = heading + d
        ax.text(0.0, y + 0.5, f"device {d}", fontsize=8.5, color=INK, bbox=box, va="center")
        for t in range(steps):
            block = int(blocks[d, t])
            colour = DEVICE_COLOURS[block % len(DEVICE_COLOURS)]
            x = label_width + t * cell
            ax.add_patch(Rectangle((x + 0.04, y + 0.1), cell - 0.08, 0.8, facecolor=colour,
                                   edgecolor="#333333", linewidth=0.5))  # fmt: skip
            ax.text(x + cell / 2, y + 0.5, str(block), ha="center", va="center", fontsize=8,
                    color=_ink(colour),
                    bbox={"boxstyle": "square,pad=0.1", "facecolor": colour,
                          "edgecolor": "none"})  # fmt: skip
    return fig
