"""Sharding diagrams every reader can use: legible labels and a text alternative.

:func:`jax.debug.visualize_array_sharding` draws an array's layout with ``rich``: one
coloured box per block, labelled with the devices that hold it. Two things keep that
picture from some readers. Its default colours (matplotlib's ``tab20b``) are mid-tones,
and JAX writes white labels on any colour that is not very light, so the labels reach
a contrast of 2.1:1 to 4.4:1 where WCAG AA asks for 4.5:1. And a screen reader reads
the box-drawing characters, not which device holds which block.

:func:`visualize_array_sharding` draws the same diagram with JAX's own function, but
with :data:`PALETTE` (hues from the Okabe-Ito colour-blind-safe set, each toned to a
relative luminance of about 0.24), black labels (contrast 5.7:1 or more), and, in a
notebook, :func:`describe_sharding`'s sentence as the diagram's accessible name.
Outside a notebook it is JAX's function with that palette.

The site's notebook kernels load this module as an IPython extension
(``%load_ext shard_tutorial.diagrams``; docs/conf.py configures it), which makes
``jax.debug.visualize_array_sharding`` in every page draw this way; the pages show
JAX's function, as a reader would call it.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from typing import Any

import jax

__all__ = [
    "PALETTE",
    "color_map",
    "contrast_ratio",
    "describe_sharding",
    "load_ipython_extension",
    "visualize_array_sharding",
]

PALETTE: tuple[str, ...] = (
    "#b47c00",  # orange
    "#1b8dce",  # sky blue
    "#009970",  # bluish green
    "#c5689c",  # reddish purple
    "#92880c",  # olive (Okabe-Ito's yellow, darkened)
    "#dd6100",  # vermillion
    "#9577d8",  # violet
    "#868686",  # grey
)
"""The box colours: distinct hues of one lightness, each 5.7:1 or more against black."""

_LABEL = "#000000"


def _luminance(colour: str) -> float:
    """WCAG's relative luminance of a ``#rrggbb`` colour."""
    if not re.fullmatch(r"#[0-9a-fA-F]{6}", colour):
        msg = f"colour must be '#rrggbb', got {colour!r}"
        raise ValueError(msg)
    channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast_ratio(first: str, second: str) -> float:
    """WCAG's contrast ratio of two ``#rrggbb`` colours, from 1 to 21.

    Args:
      first: a colour such as ``"#ffffff"``.
      second: another colour.

    Returns:
      The ratio of the lighter colour's luminance plus 0.05 to the darker one's.

    Raises:
      ValueError: if a colour is not written ``#rrggbb``.

    Examples:
      >>> round(contrast_ratio("#000000", "#ffffff"), 1)
      21.0
      >>> min(round(contrast_ratio("#000000", c), 1) for c in PALETTE)
      5.7
    """
    light, dark = sorted((_luminance(first), _luminance(second)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def color_map(value: float) -> tuple[float, float, float, float]:
    """:data:`PALETTE` as a colour map: the colour for ``value`` in [0, 1], as RGBA.

    JAX's diagram asks for one colour per block at evenly spaced values, so up to
    ``len(PALETTE)`` blocks get distinct colours (more blocks repeat them; their labels
    still differ).

    Examples:
      >>> color_map(0.0)
      (0.7058823529411765, 0.48627450980392156, 0.0, 1.0)
      >>> len({color_map(i / 7) for i in range(8)})
      8
    """
    if not 0 <= value <= 1:
        msg = f"value must be between 0 and 1, got {value}"
        raise ValueError(msg)
    colour = PALETTE[round(value * (len(PALETTE) - 1))]
    red, green, blue = (int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5))
    return (red, green, blue, 1.0)


def _span(slice_: slice, length: int, unit: str) -> str:
    start, stop, _ = slice_.indices(length)
    if stop - start == 1:
        return f"{unit} {start}"
    return f"{unit}s {start} to {stop - 1}"


def describe_sharding(array: jax.Array) -> str:
    """One sentence that says which device holds which block of ``array``.

    The text alternative of a sharding diagram, for readers who cannot see it.

    Args:
      array: a 1- or 2-dimensional JAX array (what the diagram can draw).

    Returns:
      The shape, then each block (rows, columns or elements) with its devices.

    Raises:
      TypeError: if ``array`` is not a JAX array.
      ValueError: if it does not have 1 or 2 dimensions.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from jax.sharding import NamedSharding, PartitionSpec as P
      >>> mesh = jax.make_mesh((2, 4), ("x", "y"))
      >>> a = jax.device_put(jnp.zeros((4, 8)), NamedSharding(mesh, P("x", None)))
      >>> print(describe_sharding(a))
      Sharding diagram of a 4 x 8 array in 2 blocks: rows 0 to 1 on CPUs 0, 1, 2 and 3;
      rows 2 to 3 on CPUs 4, 5, 6 and 7.
      >>> print(describe_sharding(jax.device_put(jnp.zeros(8), NamedSharding(mesh, P()))))
      Sharding diagram of an 8-element array in 1 block: the whole array on CPUs 0, 1,
      2, 3, 4, 5, 6 and 7.
    """
    if not isinstance(array, jax.Array):
        msg = f"array must be a jax.Array, got {type(array).__name__}"
        raise TypeError(msg)
    shape = tuple(array.shape)
    if len(shape) not in (1, 2):
        msg = f"array must have 1 or 2 dimensions, got shape {shape}"
        raise ValueError(msg)
    blocks: dict[tuple[tuple[int, int], ...], list[jax.Device]] = {}
    for device, index in array.sharding.devices_indices_map(shape).items():
        key = tuple(s.indices(n)[:2] for s, n in zip(index, shape, strict=True))
        blocks.setdefault(key, []).append(device)
    units = ("element",) if len(shape) == 1 else ("row", "column")
    parts = []
    for key in sorted(blocks):
        where = [
            _span(slice(*bounds), n, unit)
            for bounds, n, unit in zip(key, shape, units, strict=True)
            if bounds != (0, n)
        ]
        devices = sorted(blocks[key], key=lambda d: d.id)
        kind = devices[0].platform.upper()
        ids = [str(d.id) for d in devices]
        names = f"{kind} {ids[0]}" if len(ids) == 1 else f"{kind}s {_listing(ids)}"
        parts.append(f"{', '.join(where) or 'the whole array'} on {names}")
    size = f"{shape[0]}-element" if len(shape) == 1 else f"{shape[0]} x {shape[1]}"
    count = f"{len(blocks)} block" + ("s" if len(blocks) > 1 else "")
    return f"Sharding diagram of {_article(size)} {size} array in {count}: {'; '.join(parts)}."


def _listing(items: list[str]) -> str:
    return ", ".join(items[:-1]) + " and " + items[-1]


def _article(number: str) -> str:
    """``"an"`` before a number said with a vowel first (8, 11, 18, 80, 800, 11000...)."""
    digits = re.match(r"\d*", number)[0]  # type: ignore[index]
    vowel = digits.startswith("8") or (len(digits) % 3 == 2 and digits[:2] in ("11", "18"))
    return "an" if vowel else "a"


_JAX_VISUALIZE: Callable[..., None] | None = None
"""JAX's own ``visualize_array_sharding``, once the extension has replaced it."""

# rich writes each box of the diagram as a span styled like this one; JAX picks the label
# colour (white unless the box is very light).
_BOX_STYLE = re.compile(
    r"color: #[0-9a-fA-F]{6}; text-decoration-color: #[0-9a-fA-F]{6}; "
    r"background-color: (#[0-9a-fA-F]{6})"
)


def _legible_labels(markup: str) -> str:
    """Rich's HTML of a diagram with black labels, on colours where black reads better.

    (Without rich's ``text-decoration-color``: nothing is underlined, and dropping it
    saves 31 bytes a line of every box.)
    """

    def relabel(match: re.Match[str]) -> str:
        box = match[1]
        label = max(("#000000", "#ffffff"), key=lambda c: contrast_ratio(c, box))
        return f"color: {label}; background-color: {box}"

    return _BOX_STYLE.sub(relabel, markup)


def _in_notebook() -> bool:
    try:
        from IPython import get_ipython  # noqa: PLC0415 (only in notebooks)
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def visualize_array_sharding(array: jax.Array, **kwargs: Any) -> None:
    """Draw ``array``'s layout as JAX does, in :data:`PALETTE`, with a text alternative.

    In a notebook the diagram's HTML becomes a figure whose accessible name is
    :func:`describe_sharding`'s sentence, with labels in black. (A figure, not an image:
    a diagram wider than a phone scrolls, and the theme makes it focusable then, which
    an image's content must not be.) Elsewhere JAX prints it as usual, in this palette.

    Args:
      array: the array to draw; a traced array inside ``jax.jit`` is drawn by JAX alone.
      **kwargs: passed on to :func:`jax.debug.visualize_array_sharding` (``color_map``
        defaults to :func:`color_map`).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> visualize_array_sharding(jnp.arange(4.0), use_color=False)
      ┌───────┐
      │ CPU 0 │
      └───────┘
    """
    draw = _JAX_VISUALIZE or jax.debug.visualize_array_sharding
    kwargs.setdefault("color_map", color_map)
    if not _in_notebook() or isinstance(array, jax.core.Tracer):
        draw(array, **kwargs)
        return
    from IPython.display import display  # noqa: PLC0415 (only in notebooks)
    from IPython.utils.capture import capture_output  # noqa: PLC0415

    with capture_output(stdout=False, stderr=False, display=True) as captured:
        draw(array, **kwargs)
    label = html.escape(describe_sharding(array), quote=True)
    for output in captured.outputs:
        data = dict(output.data)
        if "text/html" in data:
            data["text/html"] = (
                f'<div class="sharding-diagram" role="figure" aria-label="{label}">'
                f"{_legible_labels(data['text/html'])}</div>"
            )
        display(data, raw=True, metadata=output.metadata)


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext shard_tutorial.diagrams``: JAX's diagrams in a notebook, drawn this way.

    Replaces ``jax.debug.visualize_array_sharding`` for the session by
    :func:`visualize_array_sharding` (which calls JAX's own function to draw).
    """
    del ipython
    global _JAX_VISUALIZE  # noqa: PLW0603 (the function JAX had, kept once per process)
    if _JAX_VISUALIZE is None:
        _JAX_VISUALIZE = jax.debug.visualize_array_sharding
    jax.debug.visualize_array_sharding = visualize_array_sharding  # type: ignore[assignment]
