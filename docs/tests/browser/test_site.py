"""The built site in a real browser: every page, every link, and what readers click."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page

sys.path.insert(0, str(Path(__file__).parent))
from auditing import MODES, in_mode
from browsing import FIGURES, SHOTS, Visit, serve, site_pages, watch  # this folder

PROBLEM_PAGES = [
    "problems/shard-map-double.html",
    "problems/shard-map-vs-vmap.html",
    "problems/shard-map-psum.html",
    "problems/shard-map-simulate.html",
]
NOTEBOOK_PAGES = ["index.html", "tutorial.html", "migrating.html", *PROBLEM_PAGES]
FAVICON = Path(__file__).parents[2] / "_static" / "favicon.svg"


class Crawl:
    """Every page of a served site, loaded once: its record, its links and its ids."""

    def __init__(self, browser: Browser, base_url: str, pages: list[str]) -> None:
        self.base_url = base_url
        self.visits: dict[str, Visit] = {}
        self.links: dict[str, list[str]] = {}
        self.ids: dict[str, set[str]] = {}
        self.images: dict[str, list[tuple[str, bool]]] = {}  # (src, drawn)
        self.stylesheets: dict[str, list[tuple[str, bool]]] = {}  # (href, loaded)
        # The theme's "previous" and "next" links of each page (None on the first, last).
        self.previous: dict[str, str | None] = {}
        self.next: dict[str, str | None] = {}
        # One tab goes from page to page, as a reader does: a new tab starts a renderer
        # for each page (about 1 s a page here; one tab loaded 20 pages in 8.8 s).
        context = browser.new_context()
        try:
            page = context.new_page()
            visit = watch(page, base_url)
            for path in pages:
                page.goto(base_url + path, wait_until="load")
                page.wait_for_load_state("networkidle")
                self.links[path] = page.eval_on_selector_all("a[href]", "as => as.map(a => a.href)")
                self.ids[path] = set(page.eval_on_selector_all("[id]", "es => es.map(e => e.id)"))
                self.ids[path] |= set(
                    page.eval_on_selector_all("a[name]", "es => es.map(e => e.name)")
                )
                self.images[path] = page.eval_on_selector_all(
                    "img", "is => is.map(i => [i.src, i.naturalWidth > 0])"
                )
                self.stylesheets[path] = page.eval_on_selector_all(
                    'link[rel="stylesheet"]', "ls => ls.map(l => [l.href, l.sheet !== null])"
                )
                for links, selector in (
                    (self.previous, "a.left-prev"),
                    (self.next, "a.right-next"),
                ):
                    found = page.eval_on_selector_all(selector, "as => as.map(a => a.href)")
                    links[path] = found[0].split("#")[0] if found else None
                self.visits[path] = visit.take()  # what this load and its reading met
        finally:
            context.close()

    def broken_links(self) -> list[str]:
        """Internal links to missing pages or files, and anchors missing from their page."""
        broken = []
        for source, links in self.links.items():
            for link in links:
                if not link.startswith(self.base_url):
                    continue  # another site: cannot be checked offline
                address, _, anchor = link.partition("#")
                target = urllib.parse.urlsplit(address).path.lstrip("/") or "index.html"
                if target.endswith("/"):
                    target += "index.html"
                if target in self.ids:
                    if anchor and urllib.parse.unquote(anchor) not in self.ids[target]:
                        broken.append(f"{source}: #{anchor} is not an id on {target}")
                elif not _exists(self.base_url + target):
                    broken.append(f"{source}: {target} does not exist")
        return sorted(set(broken))


def _exists(url: str) -> bool:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=10):
            return True
    except urllib.error.HTTPError:
        return False


@pytest.fixture(scope="module")
def crawl(browser: Browser, base_url: str, site: Path) -> Crawl:
    return Crawl(browser, base_url, site_pages(site))


def test_the_site_has_the_pages_we_expect(site):
    pages = site_pages(site)
    for expected in [
        "index.html",
        "tutorial.html",
        "migrating.html",
        "api/index.html",
        "api/checking.html",
        "search.html",
    ]:
        assert expected in pages
    assert set(PROBLEM_PAGES) <= set(pages)


def test_every_page_loads_whole_links_resolve_and_next_reads_in_order(crawl, open_page, base_url):
    # One test reads the whole crawl: pytest-xdist would crawl the site once in each
    # worker that runs a test asking for it (90 s each), and its --dist loadgroup did
    # not keep such tests together here. Every check runs; the failure lists them all.
    problems = [
        f"{page}: {problem}" for page, visit in crawl.visits.items() for problem in visit.problems()
    ]
    for path in crawl.visits:
        missing = [src for src, drawn in crawl.images[path] if not drawn]
        problems += [f"{path}: images that did not load: {missing}"] if missing else []
        problems += [] if crawl.stylesheets[path] else [f"{path} has no stylesheet"]
        missing = [href for href, loaded in crawl.stylesheets[path] if not loaded]
        problems += [f"{path}: stylesheets that did not load: {missing}"] if missing else []
    if sum(len(links) for links in crawl.links.values()) <= 500:
        problems.append(f"only {sum(map(len, crawl.links.values()))} links on the whole site")
    problems += [f"broken link: {broken}" for broken in crawl.broken_links()]
    problems += _reading_order(crawl, open_page, base_url)
    assert not problems, "\n".join(problems)


def _reading_order(crawl: Crawl, open_page: Any, base_url: str) -> list[str]:
    """What is wrong with the theme's "previous" and "next" links: nothing, if each page's
    "next" leads to the sidebar's next page and its "previous" back."""
    page, _ = open_page("index.html")
    expected = list(dict.fromkeys([base_url + "index.html", *sidebar_order(page)]))
    if page.locator("a.left-prev").count():
        return ["the first page has a previous page"]
    # A reader's click on "next" opens the page its link names...
    page.locator("a.right-next").first.click()
    page.wait_for_load_state("load")
    if page.url.split("#")[0] != crawl.next["index.html"]:
        return [f"next on index.html opened {page.url}, not {crawl.next['index.html']}"]
    # ...so the chain of "next" links, read on every page by the crawl (a click on each
    # cost a second load of the whole site), visits the pages in the sidebar's order.
    visited = [base_url + "index.html"]
    while (following := crawl.next[visited[-1].removeprefix(base_url)]) is not None:
        if following in visited:
            return [f"the next links loop back to {following}"]
        visited.append(following)
    problems = [] if visited == expected else [f"next visits {visited}, not {expected}"]
    problems += [] if len(visited) >= 9 else [f"next visits {len(visited)} pages only"]
    back = [crawl.previous[url.removeprefix(base_url)] for url in visited[1:]]
    if back != visited[:-1]:  # and back again, one page at a time
        problems.append(f"previous leads to {back}, not {visited[:-1]}")
    return problems


def test_the_link_check_catches_a_broken_link_and_a_broken_anchor(browser, site, tmp_path):
    scratch = tmp_path / "site"
    shutil.copytree(site, scratch)
    tutorial = scratch / "tutorial.html"
    text = tutorial.read_text()
    assert 'href="problems/shard-map-psum.html"' in text
    text = text.replace(
        'href="problems/shard-map-psum.html"', 'href="problems/shard-map-sum.html"', 1
    )
    text = text.replace('href="#data-sharding"', 'href="#data-shards"', 1)
    tutorial.write_text(text)
    with serve(scratch) as url:
        broken = Crawl(browser, url, ["index.html", "tutorial.html"]).broken_links()
    assert "tutorial.html: problems/shard-map-sum.html does not exist" in broken
    assert "tutorial.html: #data-shards is not an id on tutorial.html" in broken


@pytest.mark.parametrize("path", PROBLEM_PAGES)
def test_each_solution_is_hidden_until_the_reader_opens_it(open_page, path):
    page, _ = open_page(path)
    dropdown = page.locator("details.sd-dropdown")
    assert dropdown.count() == 1
    code = dropdown.locator("div.highlight pre").first
    assert dropdown.get_attribute("open") is None
    assert not code.is_visible()
    dropdown.locator("summary").click()
    code.wait_for(state="visible")
    function = path.removeprefix("problems/").removesuffix(".html").replace("-", "_")
    assert f"def {function}(" in code.inner_text()


@pytest.mark.parametrize("path", NOTEBOOK_PAGES)
def test_each_sharding_diagram_is_drawn_with_a_size(open_page, path, site):
    page, _ = open_page(path)
    diagrams = page.locator("div.cell_output pre", has_text="CPU 0")
    source = (site.parent.parent / path.replace(".html", ".md")).read_text()
    assert diagrams.count() >= source.count("visualize_array_sharding(")
    for index in range(diagrams.count()):
        diagram = diagrams.nth(index)
        box = diagram.bounding_box()
        assert box is not None
        assert box["width"] > 0
        assert box["height"] > 0
        # its text alternative names the devices of every box the picture labels
        label = diagram.evaluate("p => p.closest('[role=figure]').getAttribute('aria-label')")
        assert label.startswith("Sharding diagram of ")
        for ids in re.findall(r"CPU ([\d,]+)", diagram.inner_text()):
            *first, last = ids.split(",")
            named = f"CPU {last}" if not first else f"CPUs {', '.join(first)} and {last}"
            assert named in label, (ids, label)


def test_search_finds_the_psum_problem(open_page):
    page, _ = open_page("search.html?q=psum")
    results = page.locator("#search-results ul.search li a")
    results.first.wait_for(timeout=15000)
    hrefs = [results.nth(i).get_attribute("href") or "" for i in range(results.count())]
    assert any("problems/shard-map-psum.html" in href for href in hrefs), hrefs


def test_copy_buttons_copy_the_code(open_page):
    page, _ = open_page("tutorial.html")
    blocks = page.locator("div.cell_input div.highlight")
    for index in (0, 3):
        block = blocks.nth(index)
        block.hover()
        block.locator("button.copybtn").click()
        copied = page.evaluate("navigator.clipboard.readText()")
        assert copied.strip() == block.locator("pre").inner_text().strip()
        assert copied.strip()


def sidebar_order(page: Page) -> list[str]:
    hrefs = page.eval_on_selector_all(
        ".bd-sidebar-primary nav.bd-docs-nav a.reference.internal", "as => as.map(a => a.href)"
    )
    return [href.split("#")[0] for href in hrefs]


def test_the_dark_mode_toggle_changes_the_theme(open_page):
    page, _ = open_page("tutorial.html")
    light = page.evaluate("getComputedStyle(document.body).backgroundColor")
    page.locator("button.theme-switch-button").first.click()
    page.locator('button.theme-change-button[data-mode="dark"]').first.click()
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    dark = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert dark != light
    page.locator("button.theme-switch-button").first.click()
    page.locator('button.theme-change-button[data-mode="light"]').first.click()
    assert page.evaluate("document.documentElement.dataset.theme") == "light"


@pytest.mark.parametrize(
    ("width", "height", "device"), [(1280, 900, "desktop"), (390, 844, "phone")]
)
@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("index.html", "landing"),
        ("tutorial.html", "tutorial"),
        ("problems/shard-map-psum.html", "problem"),
    ],
)
@pytest.mark.parametrize("mode", MODES)
def test_screenshots_for_a_person_to_look_at(
    context, base_url, path, name, width, height, device, mode
):
    in_mode(context, mode)
    page = context.new_page()
    page.set_viewport_size({"width": width, "height": height})
    visit = watch(page, base_url)
    page.goto(base_url + path, wait_until="load")
    page.wait_for_load_state("networkidle")
    SHOTS.mkdir(parents=True, exist_ok=True)
    assert page.evaluate("document.documentElement.dataset.theme") == mode
    shot = SHOTS / f"{name}-{device}{'-dark' if mode == 'dark' else ''}.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    assert visit.problems() == []
    if device == "phone":  # nothing may be wider than the phone's screen
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{path} is {overflow}px wider than a {width}px screen"


@pytest.fixture(scope="module")
def empty_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-page site with the same theme and icon and no content: the weight baseline."""
    source = tmp_path_factory.mktemp("empty")
    (source / "conf.py").write_text(
        textwrap.dedent(f"""
        extensions = ["myst_parser"]
        html_theme = "sphinx_book_theme"
        html_context = {{"default_mode": "auto"}}
        html_favicon = {str(FAVICON)!r}
        """)
    )
    (source / "index.md").write_text("# Empty\n")
    out = source / "_build"
    subprocess.run(
        [sys.executable, "-m", "sphinx", "-q", "-b", "html", str(source), str(out)], check=True
    )
    return out


def test_page_weight_of_the_tutorial_against_an_empty_page(browser, base_url, empty_site):
    def weigh(url: str) -> Visit:
        context = browser.new_context()  # nothing cached
        page = context.new_page()
        visit = watch(page, url.rsplit("/", 1)[0] + "/")
        page.goto(url, wait_until="load")
        page.wait_for_load_state("networkidle")
        context.close()
        return visit

    tutorial = weigh(base_url + "tutorial.html")
    with serve(empty_site) as empty_url:
        empty = weigh(empty_url + "index.html")
    assert tutorial.problems() == []
    assert empty.problems() == []
    assert tutorial.transferred > empty.transferred > 0
    FIGURES.append(
        f"first load of tutorial.html: {tutorial.transferred:,} bytes in {tutorial.requests} "
        f"requests; an empty page of the same theme: {empty.transferred:,} bytes in "
        f"{empty.requests} requests ({tutorial.transferred / empty.transferred:.1f}x)"
    )


# -- Part II: the collective diagrams on a phone, in light and dark ----------------------
@pytest.mark.parametrize("theme", ["light", "dark"])
def test_every_collective_diagram_loads_and_fits_a_phone_screen(context, base_url, theme):
    page = context.new_page()
    page.set_viewport_size({"width": 390, "height": 844})
    page.emulate_media(color_scheme=theme)
    visit = watch(page, base_url)
    page.goto(base_url + "collectives/glance.html", wait_until="load")
    page.evaluate(f"document.documentElement.dataset.theme = {theme!r}")
    pictures = page.locator("img.collective-diagram")
    assert pictures.count() == 7
    for index in range(pictures.count()):
        picture = pictures.nth(index)
        picture.scroll_into_view_if_needed()
        assert picture.is_visible()
        assert picture.evaluate("img => img.complete && img.naturalWidth > 0")
        assert picture.get_attribute("alt")
        box = picture.bounding_box()
        assert box is not None
        assert 200 < box["width"] <= 390
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the glance page is {overflow}px wider than a 390px screen"
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"collectives-phone-{theme}.png"), full_page=True)
    assert visit.problems() == []
