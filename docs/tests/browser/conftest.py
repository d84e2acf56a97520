"""Fixtures for testing the built site in headless Chromium, as readers see it.

The site in docs/_build/html is served over HTTP on 127.0.0.1 and driven with Playwright
through the system's Chromium (``CHROMIUM``, default ``/usr/bin/chromium``). Requests
to any other host are blocked, since they cannot succeed offline, and not counted.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, sync_playwright

sys.path.insert(0, str(Path(__file__).parent))
from browsing import CHROMIUM_FLAGS, FIGURES, SITE, Visit, serve, watch  # this folder


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if FIGURES:
        terminalreporter.section("measured in the browser")
        for line in FIGURES:
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
