"""Pictures on the pages: an SVG drawn by matplotlib, shown with its text alternative.

The collective diagrams, the loss curves of a training run and the strategies' chart
are all a :class:`Picture`: a notebook (and a page that MyST-NB built from one) shows
it as an ``<img>`` whose ``alt`` text says in words what the picture shows, scaled to
the width of the screen, so a screen reader and a phone get the same content.
"""

from __future__ import annotations

import base64
import dataclasses
import html
import io
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["Picture", "grid_axes", "svg_source"]


@dataclasses.dataclass(frozen=True)
class Picture:
    """An SVG picture and its text alternative.

    Attributes:
      svg: the picture, as SVG source.
      alt: what the picture shows, in words.
      css_class: the ``class`` of the ``<img>``, by which the site's tests find it
        (``"strategies-chart dark-light"``: the ``dark-light`` class keeps the theme
        from dimming a picture in dark mode).
      max_width: the widest it is drawn, a CSS length; narrower screens scale it down.
      style: more inline CSS for the ``<img>``, e.g. ``"background:#ffffff"`` for a
        white card behind it.

    Examples:
      >>> from shard_tutorial.pictures import Picture
      >>> picture = Picture("<svg/>", 'a "square"', css_class="demo", max_width="10rem")
      >>> print(picture._repr_html_())  # doctest: +NORMALIZE_WHITESPACE
      <img class="demo" src="data:image/svg+xml;base64,PHN2Zy8+" alt="a &quot;square&quot;"
      style="display:block;width:100%;max-width:10rem;height:auto">
      >>> picture._repr_svg_()
      '<svg/>'
    """

    svg: str
    alt: str
    css_class: str
    max_width: str
    style: str = ""

    def _repr_html_(self) -> str:
        data = base64.b64encode(self.svg.encode()).decode()
        more = f";{self.style}" if self.style else ""
        return (
            f'<img class="{html.escape(self.css_class)}" '
            f'src="data:image/svg+xml;base64,{data}" alt="{html.escape(self.alt)}" '
            f'style="display:block;width:100%;max-width:{self.max_width};height:auto{more}">'
        )

    def _repr_svg_(self) -> str:
        return self.svg


def svg_source(figure: Figure, *, transparent: bool = True) -> str:
    """The SVG source of a matplotlib figure, the same bytes for the same drawing.

    Args:
      figure: the figure to save.
      transparent: whether the page's background shows through the figure's.

    Returns:
      The SVG document. A rebuilt page does not differ from the last one for the
      picture alone: the date matplotlib would write into it is left out, and its
      element ids come from a fixed salt rather than a random one.

    Examples:
      >>> from matplotlib.figure import Figure
      >>> from shard_tutorial.pictures import svg_source
      >>> figure = Figure(figsize=(1, 1))
      >>> _ = figure.subplots().plot([0, 1])
      >>> svg = svg_source(figure)
      >>> svg.lstrip().startswith("<?xml"), "<dc:date>" in svg, svg == svg_source(figure)
      (True, False, True)
    """
    import matplotlib as mpl  # noqa: PLC0415 (drawing is optional)

    buffer = io.StringIO()
    with mpl.rc_context({"svg.hashsalt": "shard_tutorial"}):
        figure.savefig(buffer, format="svg", transparent=transparent, metadata={"Date": None})
    return buffer.getvalue()


def grid_axes(width: float, height: float) -> tuple[Figure, Axes]:
    """A transparent figure for a grid of boxes, ``width`` by ``height`` units, y down.

    The units are those the pictures of rows of devices use (a device's row is 1 high);
    the figure is 0.4 inch a unit, with a margin, and draws no axes: the page's own
    background shows through, so one picture reads on light and dark pages.

    Args:
      width: the drawing's width, in units.
      height: its height, in units; y grows downwards, row 0 at the top.

    Returns:
      The figure and its one set of axes.

    Examples:
      >>> from shard_tutorial.pictures import grid_axes
      >>> figure, axes = grid_axes(10, 4)
      >>> [round(float(v), 1) for v in figure.get_size_inches()]
      [4.2, 1.8]
      >>> [round(float(v), 1) for v in axes.get_ylim()]  # y grows downwards
      [4.2, -0.2]
    """
    from matplotlib.figure import Figure  # noqa: PLC0415 (drawing is optional)

    fig = Figure(figsize=(0.4 * width + 0.2, 0.4 * height + 0.2))
    fig.patch.set_alpha(0.0)  # transparent: the page's own background shows through
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_xlim(-0.2, width + 0.3)
    ax.set_ylim(height + 0.2, -0.2)
    ax.axis("off")
    return fig, ax
