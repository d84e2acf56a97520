"""Every page of the built site audited with axe-core, in the theme's light and dark modes.

Serious and critical violations fail; moderate and minor ones are printed at the end of
the run (``measured in the browser``) until they are fixed too.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from playwright.sync_api import Browser

sys.path.insert(0, str(Path(__file__).parent))
from auditing import FAILING_IMPACTS, MODES, Violation, audit, count_by_rule, in_mode
from browsing import FIGURES, serve, site_pages, watch  # this folder


def audit_site(browser: Browser, base_url: str, pages: list[str], mode: str) -> list[Violation]:
    """Load each page in ``mode`` (a fresh profile) and audit it once it has settled."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    in_mode(context, mode)
    found: list[Violation] = []
    try:
        for path in pages:
            page = context.new_page()
            visit = watch(page, base_url)
            page.goto(base_url + path, wait_until="load")
            page.wait_for_load_state("networkidle")
            assert visit.problems() == [], f"{path}: {visit.problems()}"
            theme = page.evaluate("document.documentElement.dataset.theme")
            assert theme == mode, f"{path} is drawn in {theme} mode, not {mode}"
            found += audit(page, path, mode)
            page.close()
    finally:
        context.close()
    return found


@pytest.mark.parametrize("mode", MODES)
def test_no_page_has_a_serious_accessibility_violation(browser, base_url, site, mode):
    found = audit_site(browser, base_url, site_pages(site), mode)
    violations = [v for v in found if not v.needs_review]
    FIGURES.append(f"axe-core, {mode} mode, violations by rule:")
    FIGURES.extend(f"  {line}" for line in count_by_rule(violations) or ["none"])
    FIGURES.extend(f"  {v}" for v in violations if v.impact not in FAILING_IMPACTS)
    FIGURES.append(f"axe-core, {mode} mode, undecided (for a person to look at):")
    FIGURES.extend(f"  {line}" for line in count_by_rule(v for v in found if v.needs_review))
    failing = [str(v) for v in violations if v.impact in FAILING_IMPACTS]
    assert not failing, f"{len(failing)} serious or critical violations:\n" + "\n".join(failing)


def test_the_audit_catches_low_contrast_and_an_unnamed_summary(browser, site, tmp_path):
    scratch = tmp_path / "site"
    shutil.copytree(site, scratch)
    page = scratch / "tutorial.html"
    broken = (
        '<p style="color:#ddd;background:#fff">Pale text that few can read.</p>'
        "<details><summary></summary>hidden</details>"
    )
    page.write_text(page.read_text().replace('<section id="', broken + '<section id="', 1))
    with serve(scratch) as url:
        for mode in MODES:
            found = {(v.rule, v.impact) for v in audit_site(browser, url, ["tutorial.html"], mode)}
            assert ("color-contrast", "serious") in found
            assert ("summary-name", "serious") in found
