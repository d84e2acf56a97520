"""Offer every executed page as a Jupyter notebook in the theme's download menu.

sphinx-book-theme lists an ``.ipynb`` download only when a launch service (Binder,
Colab, ...) is configured. This site has none, but MyST-NB writes each notebook page to
``<build>/jupyter_execute/<page>.ipynb``. This extension puts that notebook, with its
outputs, next to the page's sources and tells the theme it is there. (In MyST-NB's cache
mode that file lacks the outputs, so they are merged in from the execution cache.)
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import nbformat
from execution_cache import cache_directory
from jupyter_cache import get_cache
from sphinx.application import Sphinx


def _offer_notebook(
    app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    del templatename, doctree
    written = Path(app.outdir).parent / "jupyter_execute" / f"{pagename}.ipynb"
    if not written.is_file():
        return
    notebook = nbformat.read(written, as_version=4)
    if app.config.nb_execution_mode == "cache":
        with contextlib.suppress(KeyError):  # not executed: offer the notebook as it is
            _, notebook = get_cache(cache_directory(app)).merge_match_into_notebook(notebook)
    target = Path(app.outdir) / "_sources" / f"{pagename}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, target)
    context["ipynb_source"] = f"{pagename}.ipynb"


def setup(app: Sphinx) -> dict[str, Any]:
    """Register the extension with Sphinx."""
    # Before the theme builds its header buttons (priority 501).
    app.connect("html-page-context", _offer_notebook, priority=500)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
