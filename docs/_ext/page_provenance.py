"""At the foot of every page: when its outputs were produced, with which JAX and Flax.

A page's outputs are only as current as the last time it executed, which for a cached
page (``execution_cache.py``) can be many builds ago. Each page says so, from the
execution's own record (the time it finished and the environment it ran in, which the
cache keeps per page), not from the build::

    Outputs produced on 2026-11-23 with JAX 0.9.0, jaxlib 0.9.0, Flax 0.12.1 and
    Python 3.12.7, on 8 fake CPU devices.

With ``nb_execution_mode`` other than ``"cache"`` (``-D nb_execution_mode=force``),
MyST-NB's own execution time is used, with this build's versions. A page that runs no
code (the API reference) says which versions the site was built with.

The sentence is in ``_templates/page-provenance.html``, shown by the theme as an
article footer item.
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import platform
from typing import Any

from execution_cache import distribution_versions, execution_record
from sphinx.application import Sphinx

# (distribution, how the sentence names it), in the sentence's order.
NAMED = [("jax", "JAX"), ("jaxlib", "jaxlib"), ("flax", "Flax")]


def _versions(distributions: dict[str, str], python: str) -> str:
    named = [f"{label} {distributions[name]}" for name, label in NAMED if name in distributions]
    return ", ".join(named) + f" and Python {python}"


@functools.cache
def _installed(names: tuple[str, ...]) -> dict[str, str]:
    """The versions this build runs with: read once, not once per page (0.1 s each)."""
    return distribution_versions(names)


def _devices(variables: dict[str, str]) -> str:
    count = variables.get("JAX_NUM_CPU_DEVICES")
    if not count or variables.get("JAX_PLATFORMS", "cpu") != "cpu":
        return ""
    return f", on {count} fake CPU device{'s' if count != '1' else ''}"


def provenance(app: Sphinx, pagename: str) -> dict[str, str]:
    """The sentence for one page, cut around its date: ``before``, ``date``, ``after``."""
    record = execution_record(app, pagename)
    if record is not None:
        environment = record["environment"]
        executed = dt.datetime.fromisoformat(record["executed"])
        return {
            "before": "Outputs produced on ",
            "date": executed.astimezone(dt.UTC).date().isoformat(),
            "after": " with "
            + _versions(environment["distributions"], environment["python"])
            + _devices(environment["variables"])
            + ".",
        }
    current = _versions(
        _installed(tuple(app.config.execution_cache_distributions)),
        platform.python_version(),
    )
    devices = _devices(dict(os.environ))
    data = getattr(app.env, "nb_metadata", {}).get(pagename, {}).get("exec_data")
    if data and data.get("mtime"):  # executed by MyST-NB itself, in this build
        executed = dt.datetime.fromtimestamp(data["mtime"], dt.UTC)
        return {
            "before": "Outputs produced on ",
            "date": executed.date().isoformat(),
            "after": f" with {current}{devices}.",
        }
    today = dt.datetime.now(dt.UTC).date().isoformat()
    return {
        "before": "This page runs no code. Site built on ",
        "date": today,
        "after": f" with {current}.",
    }


def _add_provenance(
    app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    del templatename
    if doctree is not None:  # a page of the site, not the search page or the index
        context["page_provenance"] = provenance(app, pagename)


def setup(app: Sphinx) -> dict[str, Any]:
    """Register the page-context handler."""
    app.connect("html-page-context", _add_provenance)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
