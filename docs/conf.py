"""Sphinx configuration of the shard_tutorial site.

Every page is a MyST markdown notebook, executed by MyST-NB at build time on 8 fake
CPU devices; ``nox -s docs`` builds the site with warnings as errors.
"""

from __future__ import annotations

import inspect
import os
import sys
import tomllib
import urllib.request
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx

DOCS = Path(__file__).parent
ROOT = DOCS.parent
sys.path.insert(0, str(DOCS / "_ext"))

# Every page runs on this many fake CPU devices. The notebook kernels inherit this
# environment, so this is the one place that sets it, before any page starts JAX.
DEVICES = 8
os.environ["JAX_NUM_CPU_DEVICES"] = str(DEVICES)
os.environ["JAX_PLATFORMS"] = "cpu"

# Kernels show errors in IPython's "Docs" traceback mode: the line of the page's code that
# failed and the error message, without the library frames in between. (A reader who runs
# a downloaded notebook gets their own IPython's full tracebacks.)
#
# They also load shard_tutorial.diagrams as an IPython extension, so that
# jax.debug.visualize_array_sharding draws with labels every reader can read (JAX's
# default puts white labels on light colours) and gives each diagram a text alternative
# that says which device holds which block.
KERNEL_CONFIG = (
    'c.InteractiveShell.xmode = "Docs"\n'
    'c.InteractiveShellApp.extensions = ["shard_tutorial.diagrams"]\n'
)
_ipython_dir = DOCS / "_build" / "ipython"
(_ipython_dir / "profile_default").mkdir(parents=True, exist_ok=True)
(_ipython_dir / "profile_default" / "ipython_kernel_config.py").write_text(KERNEL_CONFIG)
os.environ["IPYTHONDIR"] = str(_ipython_dir)

_pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
REPOSITORY_URL = _pyproject["project"]["urls"]["Source"]
# Where the site is published: the downloaded notebooks link to its pages
# (notebook_download). Read the Docs says where this build will be; elsewhere, its
# default version.
SITE_URL = os.environ.get(
    "READTHEDOCS_CANONICAL_URL", _pyproject["project"]["urls"]["Homepage"] + "/en/latest/"
)
notebook_site_url = SITE_URL

project = "shard_tutorial"
author = "the shard_tutorial developers"
copyright = "2026, the shard_tutorial developers"

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx_autodoc_typehints",  # after napoleon, as its documentation asks
    "sphinx.ext.intersphinx",
    "sphinx.ext.linkcode",  # not viewcode: that imports JAX on every build
    "sphinx_copybutton",
    "sphinx_design",
    "notebook_download",
    "reference_source",
    "starter_files",
    "execution_cache",
    "output_streams",
    "page_provenance",
]

exclude_patterns = ["_build", "jupyter_execute", "tests", "**.ipynb_checkpoints"]
nitpicky = False  # references to other projects resolve only when their inventories load

# -- MyST and MyST-NB --------------------------------------------------------------------
myst_enable_extensions = ["colon_fence", "deflist", "dollarmath", "substitution"]
myst_heading_anchors = 3
# Executed notebooks are cached, and execution_cache (docs/_ext) re-executes a page exactly
# when its source, the environment, or package code it ran has changed; `-D
# nb_execution_mode=force` re-executes every page instead, as most doc sites do.
nb_execution_mode = "cache"
nb_execution_cache_path = str(DOCS / "_build" / ".jupyter_cache")
execution_cache_track = [str(ROOT / "src" / "shard_tutorial")]
# The kernels' JAX_* and XLA_* variables (the device count above among them) count too
# (execution_cache_variables); so does the kernels' configuration:
execution_cache_settings = {"kernel config": KERNEL_CONFIG}
# Pages can import these and whatever they require (jax, jaxlib, flax, numpy, ...).
execution_cache_distributions = ["shard_tutorial", "ipykernel", "matplotlib", "rich"]
nb_execution_timeout = 120  # seconds per cell; the slowest cell here takes a few
nb_execution_raise_on_error = True  # a cell error fails the build...
nb_execution_show_tb = True  # ...and the log shows the traceback
nb_output_stderr = "warn"  # anything a cell writes to stderr is a warning, so an error
# Each print stays next to the diagram drawn after it (True would gather a cell's
# printed text into one block above all of its diagrams, and put a newline after every
# chunk, so a line printed in two chunks would still show as two). output_streams
# (docs/_ext) merges only consecutive chunks of one stream, text kept exactly.
nb_merge_streams = False
nb_render_markdown_format = "myst"  # Markdown outputs may hold tables
# Tracebacks keep IPython's colours. (The default "ipythontb" lexer fails on the backticks
# in JAX's error messages, and that failure is a Sphinx warning.)
nb_render_error_lexer = "myst-ansi"

# -- API reference -------------------------------------------------------------------------
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
always_use_bars_union = True
typehints_use_signature = True
typehints_use_signature_return = True
typehints_defaults = "comma"


def linkcode_resolve(domain: str, info: dict[str, str]) -> str | None:
    """Link an API entry to its lines in the source repository (sphinx.ext.linkcode)."""
    if domain != "py" or not info.get("module"):
        return None
    obj: object = sys.modules.get(info["module"])
    for part in info["fullname"].split("."):
        obj = getattr(obj, part, None)
    try:
        path = Path(inspect.getsourcefile(obj)).resolve()  # type: ignore[arg-type]
        lines, first = inspect.getsourcelines(obj)  # type: ignore[arg-type]
    except (TypeError, OSError):
        return None
    if not path.is_relative_to(ROOT):
        return None
    where = path.relative_to(ROOT).as_posix()
    return f"{REPOSITORY_URL}/blob/main/{where}#L{first}-L{first + len(lines) - 1}"


# -- Links to other projects' documentation --------------------------------------------------
_INVENTORIES = {
    "python": "https://docs.python.org/3/",
    "numpy": "https://numpy.org/doc/stable/",
    "jax": "https://docs.jax.dev/en/latest/",
    "flax": "https://flax.readthedocs.io/en/latest/",
}


def _reachable(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "objects.inv", timeout=5):
            return True
    except OSError:
        return False


# Offline (as on the build machines here) an inventory cannot be fetched; Sphinx would
# warn, and warnings fail the build. So only reachable inventories are configured: online,
# references such as :func:`jax.shard_map` link to the JAX docs; offline they stay text.
intersphinx_mapping = {name: (url, None) for name, url in _INVENTORIES.items() if _reachable(url)}
if len(intersphinx_mapping) < len(_INVENTORIES):
    missing = sorted(_INVENTORIES.keys() - intersphinx_mapping.keys())
    print(
        f"intersphinx: cannot reach the inventories of {', '.join(missing)}; "
        "references to them are built as plain text"
    )

# -- HTML ------------------------------------------------------------------------------------
html_theme = "sphinx_book_theme"
html_title = "shard_tutorial"
html_static_path = ["_static"]
html_css_files = ["shard_tutorial.css"]
# The tab's icon, a 2 x 4 mesh; without one, browsers ask for /favicon.ico and log its 404.
html_favicon = "_static/favicon.svg"
templates_path = ["_templates"]
# sphinx-book-theme's primary sidebar, with the site's title (the logo) in a landmark of
# its own: the theme puts it outside any landmark (axe-core's rule "region").
html_sidebars = {
    "**": [
        "sidebar-logo.html",
        "icon-links.html",
        "search-button-field.html",
        "sbt-sidebar-nav.html",
    ]
}
html_theme_options = {
    "repository_url": REPOSITORY_URL,
    "repository_branch": "main",
    "path_to_docs": "docs",
    "use_repository_button": True,
    "use_source_button": True,
    "use_issues_button": True,
    "use_download_button": True,
    "home_page_in_toc": True,
    "show_navbar_depth": 1,
    "show_toc_level": 2,
    # When each page's outputs were produced, and with which JAX and Flax (page_provenance).
    "article_footer_items": ["page-provenance.html"],
}
# The theme's colour scheme starts from the reader's system setting. (Left unset, the
# theme's script logs "Got invalid theme mode" on every page.)
html_context = {"default_mode": "auto"}
html_last_updated_fmt = None
copybutton_exclude = ".linenos, .gp, .go"  # copy code only: not prompts or output


def _name_the_section_toggles(
    app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: object
) -> None:
    """Give each chevron that opens a section of the sidebar an accessible name.

    pydata-sphinx-theme (under sphinx-book-theme) opens a section of the navigation
    with a ``<summary>`` that holds only a decorative chevron (``role="presentation"``),
    so a screen reader announces an unnamed control (axe-core's rule "summary-name").
    Each one is named after the page whose section it opens.
    """
    del app, pagename, templatename, doctree
    generate = context.get("generate_toctree_html")
    if generate is None:
        return

    def named(*args: Any, **kwargs: Any) -> Any:
        from bs4 import BeautifulSoup, Tag  # noqa: PLC0415 (the theme's own dependency)

        # Called exactly as the template called it: the theme caches the navigation by
        # its arguments, and has built it once already to see if it is empty.
        html = generate(*args, **kwargs)
        soup = html if isinstance(html, Tag) else BeautifulSoup(str(html), "html.parser")
        for summary in soup.select("li.has-children > details > summary"):
            link = summary.find_parent("li").find("a", recursive=False)
            if link is not None and not summary.get("aria-label"):
                title = " ".join(link.get_text().split())
                summary["aria-label"] = f"Pages under {title}"
        return html if isinstance(html, Tag) else str(soup)

    context["generate_toctree_html"] = named


def setup(app: Sphinx) -> dict[str, bool]:
    """Local additions to the theme, after its own page-context handlers."""
    app.connect("html-page-context", _name_the_section_toggles, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
