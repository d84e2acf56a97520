"""The five parallelisms of large-model training on one picture: what each mesh axis splits.

Part V's index page draws :func:`parallelism_map`: one row per parallelism, the
thing it splits drawn as a bar cut into one block per device of its mesh axis,
and the collective that axis needs. The rows are :data:`PARALLELISMS`, the one
list the picture, its text alternative and the page's table are made from.
"""

from __future__ import annotations

import dataclasses
import textwrap

from shard_tutorial.pictures import Picture, svg_source

__all__ = ["PARALLELISMS", "Parallelism", "parallelism_map"]


@dataclasses.dataclass(frozen=True)
class Parallelism:
    """One way of splitting a training step over the devices of one mesh axis.

    Attributes:
      name: what it is called, e.g. ``"pipeline parallelism"``.
      axis: the mesh axis the site's problems name for it, e.g. ``"stage"``.
      splits: what each device holds a block of, e.g. ``"the layers"``.
      collective: what the axis communicates, and with which collective.
      pages: the site's pages that practise it, by their labels.
    """

    name: str
    axis: str
    splits: str
    collective: str
    pages: tuple[str, ...]


PARALLELISMS = (
    Parallelism(
        "data parallelism, FSDP",
        "data",
        "the batch (FSDP: each weight too, between steps)",
        "all-reduce of the gradients (FSDP: all-gather of the weights, reduce-scatter "
        "of their gradients)",
        ("data-parallel-sgd-step", "fsdp-sgd-step"),
    ),
    Parallelism(
        "tensor and sequence parallelism",
        "model",
        "the heads and hidden units (sequence parallelism: the tokens between sub-layers)",
        "all-reduce of each sub-layer's output, or all-gather + reduce-scatter; a "
        "collective matmul passes blocks with collective-permutes instead",
        (
            "tensor-parallel-mlp",
            "collective-matmul-all-gather",
            "collective-matmul-reduce-scatter",
        ),
    ),
    Parallelism(
        "pipeline parallelism",
        "stage",
        "the layers, in consecutive groups",
        "collective-permute of activations from stage to stage",
        ("pipeline-forward",),
    ),
    Parallelism(
        "context parallelism",
        "seq",
        "the tokens of one sequence, in attention",
        "collective-permute of key and value blocks round a ring",
        ("ring-attention",),
    ),
    Parallelism(
        "expert parallelism",
        "expert",
        "the experts of a mixture-of-experts layer",
        "all-to-all of the tokens to their experts, and back",
        ("expert-parallel-moe",),
    ),
)
"""The parallelisms of Parts III and V, in the order the picture draws them."""

# Okabe and Ito's colours, each with its own hatch: told apart without colour too.
_DEVICE_STYLES = (
    ("#E69F00", ""),
    ("#56B4E9", "//"),
    ("#009E73", ".."),
    ("#CC79A7", "xx"),
)


def _by_rows(i: int, _j: int, rows: int, _columns: int, devices: int) -> int:
    return i * devices // rows


def _by_columns(_i: int, j: int, _rows: int, columns: int, devices: int) -> int:
    return j * devices // columns


# For each row of the picture: the grid of cells drawn (rows, columns), which device
# holds each cell, and what one cell is.
_SHAPES = (
    ((4, 12), _by_rows, "a row: one example"),
    ((4, 12), _by_columns, "a column: one hidden unit"),
    ((1, 8), _by_columns, "a cell: one layer"),
    ((1, 16), _by_columns, "a cell: one token"),
    ((1, 8), _by_columns, "a cell: one expert"),
)


def parallelism_map(devices: int = 4) -> Picture:
    """Draw what each parallelism splits over the devices of its mesh axis.

    Args:
      devices: how many devices each axis is drawn with, 2 to 4.

    Returns:
      A :class:`~shard_tutorial.pictures.Picture`; its text alternative names,
      for each row, the axis, what it splits and the collective it needs.

    Raises:
      ValueError: if ``devices`` is not 2, 3 or 4.

    Examples:
      >>> from shard_tutorial.parallelism_map import parallelism_map
      >>> picture = parallelism_map()
      >>> picture.alt.split(". ")[1]
      'Data parallelism, FSDP, over the mesh axis "data": each of 4 devices holds a block of the batch (FSDP: each weight too, between steps), and the axis needs an all-reduce of the gradients (FSDP: all-gather of the weights, reduce-scatter of their gradients)'
    """
    if devices not in (2, 3, 4):
        msg = f"devices must be 2, 3 or 4, got {devices!r}"
        raise ValueError(msg)
    from matplotlib.figure import Figure  # noqa: PLC0415 (drawing is optional)
    from matplotlib.patches import Rectangle  # noqa: PLC0415

    rows = len(PARALLELISMS)
    height = 1.25
    figure = Figure(figsize=(7.2, 0.8 * height * rows + 0.5))
    axes = figure.add_axes((0, 0, 1, 1))
    axes.set_xlim(0, 10)
    axes.set_ylim(-height * rows - 0.1, 0.35)
    axes.axis("off")
    ink = "#1a1a1a"
    for row, (parallelism, (shape, owner, unit)) in enumerate(
        zip(PARALLELISMS, _SHAPES, strict=True)
    ):
        top = -height * row
        axes.text(0.1, top - 0.05, parallelism.name, fontsize=10, weight="bold", color=ink,
                  va="top")  # fmt: skip
        axes.text(0.1, top - 0.38, f'axis "{parallelism.axis}"', fontsize=9.5, color=ink,
                  va="top", family="monospace")  # fmt: skip
        axes.text(0.1, top - 0.68, unit, fontsize=8.5, color=ink, va="top")
        rows_, columns = shape
        cell_w, cell_h = min(5.6 / columns, 0.5), 0.62 / rows_
        for i in range(rows_):
            for j in range(columns):
                device = owner(i, j, rows_, columns, devices)
                colour, hatch = _DEVICE_STYLES[device]
                axes.add_patch(
                    Rectangle((4.2 + j * cell_w, top - 0.05 - (i + 1) * cell_h), cell_w,
                              cell_h, facecolor=colour, edgecolor=ink, hatch=hatch,
                              linewidth=0.6)
                )  # fmt: skip
        caption = textwrap.fill(parallelism.splits, 62)
        axes.text(4.2, top - 0.75, caption, fontsize=8.5, color=ink, va="top")
    for device in range(devices):
        colour, hatch = _DEVICE_STYLES[device]
        left = 4.2 + device * 1.4
        axes.add_patch(
            Rectangle((left, 0.08), 0.3, 0.2, facecolor=colour, edgecolor=ink, hatch=hatch,
                      linewidth=0.8)
        )  # fmt: skip
        axes.text(left + 0.38, 0.18, f"device {device}", fontsize=9, color=ink, va="center")
    sentences = [
        (
            f"Five ways of splitting a training step, each over the {devices} devices of "
            "one mesh axis, each drawn as what it splits, coloured by the device that holds "
            "each part."
        )
    ]
    for parallelism in PARALLELISMS:
        article = "an" if parallelism.collective[:1] in "aeiou" else "a"
        sentences.append(
            f"{parallelism.name[0].upper()}{parallelism.name[1:]}, over the mesh axis "
            f'"{parallelism.axis}": each of {devices} devices holds a block of '
            f"{parallelism.splits}, and the axis needs {article} {parallelism.collective}."
        )
    return Picture(
        svg_source(figure),
        " ".join(sentences),
        css_class="parallelism-map dark-light",
        max_width="40rem",
    )
