"""Every page of the built site audited with axe-core, in the theme's light and dark modes.

One test per page, so that pytest-xdist shares the pages between both cores: each
page is loaded in the light mode, as a reader's stored choice of the theme's switch
(kept in localStorage) draws it, audited, switched to the dark mode by the theme's own
button, and audited again.
Serious and critical violations fail; moderate and minor ones, and what axe-core
could not decide, are totalled at the end of the run (``measured in the browser``).
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest
from playwright.sync_api import Browser

sys.path.insert(0, str(Path(__file__).parent))
from auditing import (
    FAILING_IMPACTS,
    MODES,
    SIGNATURES_AUDITED_ON,
    Violation,
    audit,
    in_mode,
    recorded,
    settle,
    switch_mode,
)
from browsing import FIGURES, SITE, serve, site_pages, watch  # this folder

# The pages of the built site, known when the tests are collected (none before a build:
# the `site` fixture then says to build it).
PAGES = site_pages(SITE) if (SITE / "index.html").is_file() else []


def audit_page(browser: Browser, base_url: str, path: str) -> list[Violation]:
    """Load ``path`` in the first of the theme's modes, audit it, then each other mode.

    The page is opened in the first mode as a reader's stored choice draws it (a fresh
    profile), then switched to each other mode as a reader switches it: a click on the
    theme's own button for that mode. The page must have loaded without errors before
    axe-core runs (axe-core itself may ask the server for a stylesheet by a wrong
    address as it reads the styles). One load per page, not one per mode: a load and
    its settling take a second of the ten an audited page costs (measured in Chromium
    here).
    """
    found: list[Violation] = []
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    in_mode(context, MODES[0])
    try:
        page = context.new_page()
        visit = watch(page, base_url)
        page.goto(base_url + path, wait_until="load")
        page.wait_for_load_state("networkidle")
        assert visit.problems() == [], f"{path}: {visit.problems()}"
        for mode in MODES:
            if mode != MODES[0]:
                switch_mode(page, mode)
            theme = page.evaluate("document.documentElement.dataset.theme")
            assert theme == mode, f"{path} is drawn in {theme} mode, not {mode}"
            settle(page)
            seen = audit(page, path, mode)
            if any(v.impact in FAILING_IMPACTS and not v.needs_review for v in seen):
                # Seen twice or not at all: a colour read while the page was still being
                # drawn (a CI run once read the dark navbar's search text as black) is the
                # test's race, not the site's; a real violation is there a second later.
                page.wait_for_timeout(1000)
                again = {(v.rule, v.element) for v in audit(page, path, mode)}
                seen = [v for v in seen if v.needs_review or (v.rule, v.element) in again]
            found += seen
    finally:
        context.close()
    return found


@pytest.mark.parametrize("path", PAGES)
def test_no_page_has_a_serious_accessibility_violation(browser, base_url, path):
    found = audit_page(browser, base_url, path)
    FIGURES.extend(recorded(found))  # totalled, over every page, at the end of the run
    failing = [str(v) for v in found if not v.needs_review and v.impact in FAILING_IMPACTS]
    assert not failing, f"{len(failing)} serious or critical violations:\n" + "\n".join(failing)


def test_no_page_shows_content_in_one_of_the_modes_only(site):
    # The audit reads markup in the first mode only (auditing.COLOUR_RULES): content the
    # theme shows in one mode only (its only-dark and only-light classes) would escape it.
    one_mode = re.compile(r'class="[^"]*\bonly-(?:dark|light)\b')
    assert [p for p in PAGES if one_mode.search((site / p).read_text())] == []


def _signature_classes(html: str) -> set[str]:
    """The classes of the API signatures' markup (``<dt class="sig ...">`` and within)."""
    blocks = re.findall(r'<dt class="sig[ "].*?</dt>', html, flags=re.DOTALL)
    return {name for block in blocks for attr in re.findall(r'class="([^"]*)"', block)
            for name in attr.split()}  # fmt: skip


def test_the_page_whose_signatures_are_audited_has_every_kind_of_token(site):
    # The audit leaves the signatures out of every API page but one (auditing.left_out):
    # that one must show every kind of token the others show, or a style goes unaudited.
    api = [p for p in PAGES if p.startswith("api/")]
    assert SIGNATURES_AUDITED_ON in api
    audited = _signature_classes((site / SIGNATURES_AUDITED_ON).read_text())
    assert {"sig-name", "sig-param", "default_value"} <= audited
    for path in api:
        assert _signature_classes((site / path).read_text()) <= audited, path


def test_every_page_is_audited(site):
    assert site_pages(site) == PAGES
    assert len(PAGES) > 20


def test_the_audit_catches_low_contrast_and_an_unnamed_summary(browser, site, tmp_path):
    scratch = tmp_path / "site"
    shutil.copytree(site, scratch)
    # A short page (the audit of the tutorial, whole, takes four times as long).
    page = scratch / "problems/index.html"
    broken = (
        '<p style="color:#ddd;background:#fff">Pale text that few can read.</p>'
        "<details><summary></summary>hidden</details>"
    )
    heading = 'title="Link to this heading">#</a></h1>'  # the page's own heading
    text = page.read_text()
    assert text.count(heading) == 1
    page.write_text(text.replace(heading, heading + broken))
    with serve(scratch) as url:
        found = audit_page(browser, url, "problems/index.html")
    for mode in MODES:
        in_this_mode = {(v.rule, v.impact) for v in found if v.mode == mode}
        assert ("color-contrast", "serious") in in_this_mode, mode
        # Markup is audited in the first mode (auditing.COLOUR_RULES), colours in each.
        assert (("summary-name", "serious") in in_this_mode) == (mode == MODES[0]), mode
