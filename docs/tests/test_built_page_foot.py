"""Every page says at its foot when its outputs were produced, and with which JAX and Flax.

Reads the HTML that ``nox -s docs`` built into docs/_build/html, and the execution
cache's manifest beside it: the date is the page's execution, not the build.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
import platform
import re

import pytest
from built_pages import SITE, page  # this folder
from jupyter_cache import get_cache

CACHE = SITE.parent / ".jupyter_cache"
DOCS = SITE.parents[1]
PAGES = sorted(
    path.relative_to(DOCS).with_suffix("").as_posix()
    for path in DOCS.rglob("*.md")
    if "_build" not in path.parts and "tests" not in path.parts
)
NOTEBOOK_PAGES = [name for name in PAGES if "kernelspec:" in (DOCS / f"{name}.md").read_text()]
VERSIONS = (
    ", ".join(
        f"{label} {importlib.metadata.version(name)}"
        for name, label in (("jax", "JAX"), ("jaxlib", "jaxlib"), ("flax", "Flax"))
    )
    + f" and Python {platform.python_version()}"
)


def foot(name: str) -> tuple[str, str]:
    """The sentence at the foot of page ``name``, and the date its <time> element holds."""
    found = page(name).select("footer.bd-footer-article p.page-provenance")
    assert len(found) == 1, f"{name}: {len(found)} provenance lines"
    time = found[0].find("time")
    assert time is not None
    assert time.get_text() == time["datetime"]
    return " ".join(found[0].get_text().split()), time["datetime"]


def executed_on(name: str) -> str:
    """The day (UTC) the execution cache last executed page ``name``."""
    record = json.loads((CACHE / "manifest.json").read_text())["pages"][name]
    if "executed" in record:
        when = dt.datetime.fromisoformat(record["executed"])
    else:  # executed before the manifest kept the time: the cache record's
        created = get_cache(CACHE).get_cache_record(record["cache_pk"]).created
        when = created.replace(tzinfo=dt.UTC)
    return when.astimezone(dt.UTC).date().isoformat()


def test_every_page_is_checked():
    assert len(NOTEBOOK_PAGES) >= 20
    assert "api/index" in PAGES


@pytest.mark.parametrize("name", NOTEBOOK_PAGES)
def test_a_notebook_page_says_when_and_with_what_its_outputs_were_produced(name):
    sentence, date = foot(name)
    assert sentence == (f"Outputs produced on {date} with {VERSIONS}, on 8 fake CPU devices.")
    assert date == executed_on(name)  # the execution's day, for cached pages too


@pytest.mark.parametrize("name", sorted(set(PAGES) - set(NOTEBOOK_PAGES)))
def test_a_page_without_code_says_what_the_site_was_built_with(name):
    sentence, date = foot(name)
    assert sentence == f"This page runs no code. Site built on {date} with {VERSIONS}."
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", date)
