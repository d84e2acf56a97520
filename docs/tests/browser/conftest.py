"""Fixtures for testing the built site in headless Chromium, as readers see it.

The site in docs/_build/html is served over HTTP on 127.0.0.1 and driven with Playwright
through the system's Chromium (``CHROMIUM``, default ``/usr/bin/chromium``). Requests
to any other host are blocked, since they cannot succeed offline, and not counted.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, sync_playwright

sys.path.insert(0, str(Path(__file__).parent))
from auditing import summary
from browsing import CHROMIUM_FLAGS, FIGURES, SITE, Visit, serve, watch  # this folder

# The figures the tests measure are printed at the end of the run. Under pytest-xdist
# each worker measures its own: it leaves them in a folder the controller made, and
# the controller prints them all.
_FIGURES_FOLDER = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller, or a run without xdist
        config.stash[_FIGURES_FOLDER] = Path(tempfile.mkdtemp(prefix="browser-figures-"))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:  # pytest-xdist's hook: a worker starts
    node.workerinput["figures_folder"] = str(node.config.stash[_FIGURES_FOLDER])


def pytest_sessionfinish(session: pytest.Session) -> None:
    worker = getattr(session.config, "workerinput", None)
    if worker is not None and FIGURES:
        folder = Path(worker["figures_folder"])
        (folder / f"{worker['workerid']}.txt").write_text("\n".join(FIGURES))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = list(FIGURES)
    folder = terminalreporter.config.stash.get(_FIGURES_FOLDER, None)
    if folder is not None:
        for part in sorted(folder.glob("*.txt")):
            lines += part.read_text().splitlines()
        shutil.rmtree(folder, ignore_errors=True)
    lines = summary(lines)  # axe-core's findings on every page, totalled
    if lines:
        terminalreporter.section("measured in the browser")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def site() -> Path:
    if not (SITE / "index.html").is_file():
        pytest.fail(f"{SITE} has no site: build it first (nox -s docs)")
    return SITE


@pytest.fixture(scope="session")
def base_url(site: Path) -> Iterator[str]:
    with serve(site) as url:
        yield url


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    executable = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
        yield launched
        launched.close()


@pytest.fixture
def context(browser: Browser, base_url: str) -> Iterator[BrowserContext]:
    """A fresh browser profile (empty cache) with the clipboard allowed, as for a reader."""
    fresh = browser.new_context(viewport={"width": 1280, "height": 900})
    fresh.grant_permissions(["clipboard-read", "clipboard-write"], origin=base_url.rstrip("/"))
    yield fresh
    fresh.close()


@pytest.fixture
def open_page(context: BrowserContext, base_url: str) -> Callable[[str], tuple[Page, Visit]]:
    """``open_page("tutorial.html")`` loads a page and returns it with its record."""

    def opener(path: str) -> tuple[Page, Visit]:
        page = context.new_page()
        visit = watch(page, base_url)
        page.goto(base_url + path, wait_until="load")
        page.wait_for_load_state("networkidle")
        return page, visit

    return opener
