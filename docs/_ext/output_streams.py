"""Show what a cell prints as one output block, however the kernel cut it into chunks.

A kernel sends a cell's stdout in chunks, cut wherever its buffer was flushed, even
mid-line ("each device's gathered shape:" in one chunk, " [8 2]" in the next), and
MyST-NB renders each chunk as a box of its own. MyST-NB's ``nb_merge_streams`` would
join them, but it merges *every* stream of a cell, so the text printed after a diagram
moves above it, and it strips each chunk and adds a newline, so a line cut in two stays
cut. This post-transform merges only *consecutive* stream outputs of the same name
(stdout with stdout, stderr with stderr), text kept exactly as printed. It runs when a
page is written, so pages whose outputs come from the execution cache, read in earlier
builds, get it too. (The downloaded notebooks merge the same way: notebook_markdown.py.)
"""

from __future__ import annotations

from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.transforms.post_transforms import SphinxPostTransform

STREAMS = ("stream", "stderr")  # MyST-NB's classes for stdout and stderr outputs


def _stream(node: nodes.Node) -> str | None:
    if not isinstance(node, nodes.literal_block) or "output" not in node["classes"]:
        return None
    return next((name for name in STREAMS if name in node["classes"]), None)


class MergeConsecutiveStreams(SphinxPostTransform):
    """Join each run of consecutive same-name stream outputs of a cell into one block."""

    default_priority = 100

    def run(self, **kwargs: Any) -> None:
        """Merge, in every cell's output container."""
        del kwargs
        for container in self.document.findall(nodes.container):
            if container.get("nb_element") != "cell_code_output":
                continue
            previous: nodes.literal_block | None = None
            for child in list(container.children):
                name = _stream(child)
                if (
                    name is not None
                    and previous is not None
                    and _stream(previous) == name
                    and previous.get("language") == child.get("language")
                ):
                    text = previous.astext() + child.astext()
                    previous.children = []
                    previous += nodes.Text(text)
                    previous.rawsource = text
                    container.remove(child)
                else:
                    previous = child if name is not None else None


def setup(app: Sphinx) -> dict[str, Any]:
    """Register the post-transform."""
    app.add_post_transform(MergeConsecutiveStreams)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
