"""Offer every executed page as a Jupyter notebook in the theme's download menu.

sphinx-book-theme lists an ``.ipynb`` download only when a launch service (Binder,
Colab, ...) is configured. This site has none, but MyST-NB writes each executed page
to ``<build>/jupyter_execute/<page>.ipynb``; this extension copies that notebook, with
its outputs, next to the page's sources and tells the theme it is there.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx


def _offer_notebook(
    app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    del templatename, doctree
    executed = Path(app.outdir).parent / "jupyter_execute" / f"{pagename}.ipynb"
    if not executed.is_file():
        return
    target = Path(app.outdir) / "_sources" / f"{pagename}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(executed, target)
    context["ipynb_source"] = f"{pagename}.ipynb"


def setup(app: Sphinx) -> dict[str, Any]:
    """Register the extension with Sphinx."""
    # Before the theme builds its header buttons (priority 501).
    app.connect("html-page-context", _offer_notebook, priority=500)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
