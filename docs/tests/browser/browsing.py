"""Serving a built site and watching what a browser page loads from it."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

from playwright.sync_api import Page, Request, Response

SITE = Path(__file__).parents[2] / "_build" / "html"
SHOTS = SITE.parent / "screenshots"
CHROMIUM_FLAGS = [
    # Every host but this one is unknown to the browser, so what a page asks of the
    # internet fails at once, offline or not, and is not counted (Visit.blocked). Routing
    # each request through Playwright to block it did the same at twice the CPU: loading
    # the 44 pages of the site took 64 s of CPU routed, 32 s not (measured here).
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]

FIGURES: list[str] = []
"""Lines the tests measured (page weight), printed at the end of the run."""


def site_pages(site: Path) -> list[str]:
    """Every HTML page of a built site, as paths from its root."""
    skip = {"_sources", "_static", "starters", "_images"}
    return sorted(
        path.relative_to(site).as_posix()
        for path in site.rglob("*.html")
        if not skip & set(path.relative_to(site).parts)
    )


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        del format, args


@contextlib.contextmanager
def serve(directory: Path) -> Iterator[str]:
    """Serve ``directory`` on 127.0.0.1 (a free port) for the block; yield the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@dataclasses.dataclass
class Visit:
    """What a page load brought: problems with local resources, and what was blocked."""

    console_errors: list[str] = dataclasses.field(default_factory=list)
    failed: list[str] = dataclasses.field(default_factory=list)
    blocked: list[str] = dataclasses.field(default_factory=list)
    transferred: int = 0
    requests: int = 0

    def problems(self) -> list[str]:
        return self.console_errors + self.failed

    def take(self) -> Visit:
        """What was recorded so far, as a visit of its own; this one starts again empty.

        One page loading one address after another records each load apart: taken
        after each load, before the next.
        """
        taken = dataclasses.replace(self)
        for name, empty in dataclasses.asdict(Visit()).items():
            setattr(self, name, empty)
        return taken


def watch(page: Page, base_url: str) -> Visit:
    """Record errors, requests to other hosts and bytes for everything ``page`` loads."""
    visit = Visit()

    def on_response(response: Response) -> None:
        if response.url.startswith(base_url) and response.status >= 400:
            visit.failed.append(f"HTTP {response.status}: {response.url}")

    def on_finished(request: Request) -> None:
        if request.url.startswith(base_url):
            sizes = request.sizes()
            visit.transferred += sizes["responseHeadersSize"] + sizes["responseBodySize"]
            visit.requests += 1

    def on_failed(request: Request) -> None:
        if request.url.startswith(base_url):
            visit.failed.append(f"failed ({request.failure}): {request.url}")
        else:  # another host, which the browser does not look up (CHROMIUM_FLAGS)
            visit.blocked.append(request.url)

    def on_console(message: object) -> None:
        if message.type == "error":  # type: ignore[attr-defined]
            where = message.location.get("url", "")  # type: ignore[attr-defined]
            if not where or where.startswith(base_url):
                visit.console_errors.append(f"console: {message.text} ({where})")  # type: ignore[attr-defined]

    page.on("response", on_response)
    page.on("requestfinished", on_finished)
    page.on("requestfailed", on_failed)
    page.on("console", on_console)
    page.on("pageerror", lambda error: visit.console_errors.append(f"page error: {error}"))
    return visit
