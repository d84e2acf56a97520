"""Every link from the built site to another site is in docs/external_links.txt, and back.

Links to other sites move (JAX's guides moved to ``201/...`` in JAX 0.12). The list
keeps them in one file, which a moved target changes first: this test then names every
page that still links to the old address, and every listed link no page uses any more.
These read the HTML that ``nox -s docs`` has just built into docs/_build/html.
"""

from __future__ import annotations

import functools
from pathlib import Path

from built_pages import SITE, page  # this folder

LIST = Path(__file__).parents[1] / "external_links.txt"
# Sphinx's own pages, with no article of the site's.
SKIPPED = {"genindex", "search", "py-modindex"}


def listed() -> set[str]:
    lines = (line.strip() for line in LIST.read_text().splitlines())
    return {line for line in lines if line and not line.startswith("#")}


@functools.cache
def linked() -> dict[str, set[str]]:
    """Each external address the site's articles link to -> the pages that link to it.

    Left out: the "[source]" links of the API pages (linkcode: line numbers that move
    with every edit of the package), and the links intersphinx adds when a build can
    reach the other projects' inventories (titled "(in JAX v...)"; offline there are
    none).
    """
    found: dict[str, set[str]] = {}
    for path in sorted(SITE.rglob("*.html")):
        name = path.relative_to(SITE).with_suffix("").as_posix()
        if name.startswith(("_", "jupyter_execute")) or name in SKIPPED:
            continue
        article = page(name).select_one("article.bd-article")
        if article is None:
            continue
        for a in article.select("a[href]"):
            href = str(a["href"])
            if not href.startswith(("http://", "https://")):
                continue
            if a.select_one(".viewcode-link") or str(a.get("title", "")).startswith("(in "):
                continue
            found.setdefault(href, set()).add(name)
    return found


def test_every_external_link_is_listed():
    unlisted = {href: sorted(pages) for href, pages in linked().items() if href not in listed()}
    assert not unlisted, f"links not in {LIST.name} (a moved target?): {unlisted}"


def test_every_listed_link_is_used():
    assert not listed() - linked().keys(), f"listed in {LIST.name}, linked from no page"


def test_jaxs_guides_are_linked_where_jax_0_12_points():
    """JAX 0.12's own messages link 201/shard-map.html and 201/sharding.html."""
    jax_links = {href for href in linked() if href.startswith("https://docs.jax.dev/")}
    assert "https://docs.jax.dev/en/latest/201/shard-map.html" in jax_links
    assert "https://docs.jax.dev/en/latest/201/sharding.html" in jax_links
    for old in (
        "notebooks/shard_map.html",
        "/parallel.html",
        "Distributed_arrays",
        "sharded-computation.html",
        "notebooks/explicit-sharding.html",
    ):
        assert not [href for href in jax_links if old in href], old
    # The address JAX itself prints, in an executed error on the errors page:
    assert "https://docs.jax.dev/en/latest/201/shard-map.html#scan-vma" in page("errors").get_text()
