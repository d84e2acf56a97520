"""Offer every executed page as a Jupyter notebook in the theme's download menu.

sphinx-book-theme lists an ``.ipynb`` download only when a launch service (Binder,
Colab, ...) is configured. This site has none, but MyST-NB writes each notebook page to
``<build>/jupyter_execute/<page>.ipynb``. That file keeps the page's Markdown as written,
directives and roles included (and in MyST-NB's cache mode it lacks the outputs). So
this extension builds the notebook a reader downloads from the page as rendered
(``notebook_markdown.py``): its text as Markdown, what its directives render (a
problem's statement, its starter, the reference code) as Markdown or code cells, and
its code cells with their outputs, from the execution cache. It puts that notebook next
to the page's sources and tells the theme it is there.

Links in the notebook point at the published site, ``notebook_site_url``.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import nbformat
from docutils import nodes
from execution_cache import cache_directory
from jupyter_cache import get_cache
from notebook_markdown import reader_notebook
from sphinx.application import Sphinx
from sphinx.util import logging

LOGGER = logging.getLogger(__name__)


def _offer_notebook(
    app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    del templatename
    written = Path(app.outdir).parent / "jupyter_execute" / f"{pagename}.ipynb"
    if not written.is_file() or doctree is None:
        return
    notebook = nbformat.read(written, as_version=4)
    if app.config.nb_execution_mode == "cache":
        with contextlib.suppress(KeyError):  # not executed: offer the notebook as it is
            _, notebook = get_cache(cache_directory(app)).merge_match_into_notebook(notebook)

    def warn(message: str, node: nodes.Node) -> None:
        LOGGER.warning(
            f"downloaded notebook: {message}", location=node, type="notebook", subtype="markdown"
        )

    page_url = app.config.notebook_site_url.rstrip("/") + "/" + app.builder.get_target_uri(pagename)
    notebook = reader_notebook(notebook, doctree, page_url, warn)
    target = Path(app.outdir) / "_sources" / f"{pagename}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, target)
    context["ipynb_source"] = f"{pagename}.ipynb"


def setup(app: Sphinx) -> dict[str, Any]:
    """Register the extension with Sphinx."""
    app.add_config_value("notebook_site_url", "", "html", str)
    # Before the theme builds its header buttons (priority 501).
    app.connect("html-page-context", _offer_notebook, priority=500)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
