"""Auditing a page's accessibility with axe-core, in the theme's light or dark mode.

axe-core comes bundled with the ``axe-playwright-python`` package (its ``axe.min.js``), so
nothing is downloaded when the tests run.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Iterable
from typing import Any

from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import BrowserContext

MODES = ("light", "dark")
FAILING_IMPACTS = ("critical", "serious")
"""Violations of these impacts fail the tests; moderate and minor ones are listed."""

_AXE = Axe()


def in_mode(context: BrowserContext, mode: str) -> None:
    """Open every page of ``context`` in the theme's ``mode``, as a reader's choice would.

    pydata-sphinx-theme (under sphinx-book-theme) keeps the reader's choice of the theme
    switch in localStorage ``mode`` and applies it, as ``data-theme`` on ``<html>``, before
    the page is drawn; setting it before any script runs is what the switch does.
    """
    if mode not in MODES:
        msg = f"mode must be one of {MODES}, got {mode!r}"
        raise ValueError(msg)
    context.add_init_script(f"localStorage.setItem('mode', '{mode}');")


def switch_mode(page: Any, mode: str) -> None:
    """Switch a loaded page to the theme's ``mode`` as a reader does: its button's click.

    The buttons sit in the theme's colour-mode menu; a click on one (the menu open or
    not) runs the theme's own handler, which sets ``data-theme`` and stores the choice.
    """
    if mode not in MODES:
        msg = f"mode must be one of {MODES}, got {mode!r}"
        raise ValueError(msg)
    clicked = page.evaluate(
        "mode => { const b = document.querySelector(`.theme-change-button[data-mode=${mode}]`);"
        " if (b) b.click(); return b !== null; }",
        mode,
    )
    assert clicked, f"no theme button for the {mode} mode on {page.url}"


# A page at rest: with transitions and animations off, and its fonts loaded, the audit
# reads the colours a reader sees once the page is drawn, not a moment on the way.
_NO_TRANSITIONS = (
    "*, *::before, *::after { transition: none !important; animation: none !important; }"
)


def settle(page: Any) -> None:
    """Bring a loaded page to rest before it is audited: no transitions, fonts, two frames."""
    page.add_style_tag(content=_NO_TRANSITIONS)
    page.evaluate(
        "document.fonts.ready.then(() => new Promise("
        "r => requestAnimationFrame(() => requestAnimationFrame(r))))"
    )


@dataclasses.dataclass(frozen=True)
class Violation:
    """One element that breaks one axe-core rule on one page."""

    page: str
    mode: str
    rule: str
    impact: str
    element: str
    summary: str
    needs_review: bool = False
    """axe-core could not decide (its "incomplete" results): a person should look."""

    def __str__(self) -> str:
        review = ", needs review" if self.needs_review else ""
        return (
            f"[{self.impact}{review}] {self.rule} on {self.page} ({self.mode}): "
            f"{self.element}\n    {self.summary}"
        )


# Pages audited whole. The others leave out their syntax-highlighted code (``.highlight``):
# the same Pygments styles and the same markup on every page, audited on these, and most
# of an audit's time (axe-core reads the colours of each token: 9.7 s for the tutorial's
# contrast, 3.7 s without its code, measured in Chromium here).
WHOLE = frozenset({"tutorial.html", "problems/shard-map-psum.html"})

# The API reference's signatures (``.sig``: a function's name, parameters and their
# types, token by token) are the same markup and styles on each of its pages, from
# Sphinx's Python domain. They are audited on one page, whose signatures have every
# kind of token the others have (test_accessibility.py), and left out of the others,
# where they took half of each audit (the model reference's colours: 15 s, 7.5 s without
# its signatures, measured in Chromium here).
SIGNATURES_AUDITED_ON = "api/pictures.html"


def left_out(path: str) -> list[str]:
    """The CSS selectors of what the audit of ``path`` leaves out (audited on other pages)."""
    if path in WHOLE:
        return []
    if path.startswith("api/") and path != SIGNATURES_AUDITED_ON:
        return [".highlight", ".sig"]
    return [".highlight"]


# The rules whose outcome depends on colours: all a page is audited for in the modes after
# the first. The theme's switch changes colours only (CSS variables under ``data-theme``;
# no page has content shown in one mode only, `only-dark` say: test_accessibility.py), so the
# rules that read markup (names, roles, headings, labels) would find the same in each
# mode; leaving them out of the dark audit saves a third of it (1.4 s of 3.9 on the
# ring attention page, 15 s of 50 on the API reference, measured in Chromium here).
COLOUR_RULES = ("color-contrast", "link-in-text-block")


def audit(page: object, path: str, mode: str) -> list[Violation]:
    """Run every axe-core rule on the loaded ``page``; one record per offending element.

    Elements axe-core could not decide on (text over a scrolled-away background, say) are
    recorded too, marked ``needs_review``. A page is audited without what
    :func:`left_out` names; in any mode but the first, only :data:`COLOUR_RULES` run.
    """
    leave_out = left_out(path)
    context = {"exclude": [[selector] for selector in leave_out]} if leave_out else None
    options: dict[str, Any] = {"resultTypes": ["violations", "incomplete"]}
    if mode != MODES[0]:
        options["runOnly"] = {"type": "rule", "values": list(COLOUR_RULES)}
    results = _AXE.run(page, context=context, options=options).response
    found = []
    for kind in ("violations", "incomplete"):
        for rule in results[kind]:
            for node in rule["nodes"]:
                found.append(_record(rule, node, path, mode, needs_review=kind == "incomplete"))
    return found


def _record(
    rule: dict[str, Any], node: dict[str, Any], path: str, mode: str, *, needs_review: bool
) -> Violation:
    checks = node.get("any", []) + node.get("all", []) + node.get("none", [])
    summary = " ".join(node.get("failureSummary", "").split())
    if needs_review and checks:
        summary = checks[0].get("message", summary)
    for check in checks:
        data = check.get("data")
        if isinstance(data, dict) and data.get("contrastRatio"):
            summary = (
                f"contrast {data['contrastRatio']}:1 (needs {data.get('expectedContrastRatio')})"
                f", text {data.get('fgColor')} on {data.get('bgColor')}"
            )
    snippet = " ".join(node.get("html", "").split())
    if len(snippet) > 160:
        snippet = snippet[:157] + "..."
    return Violation(
        page=path,
        mode=mode,
        rule=rule["id"],
        impact=rule.get("impact") or node.get("impact") or "unknown",
        element=f"{' > '.join(map(str, node['target']))}  {snippet}",
        summary=summary,
        needs_review=needs_review,
    )


def count_by_rule(violations: Iterable[Violation]) -> list[str]:
    """Lines ``rule (impact): elements on pages`` for a summary, most elements first."""
    violations = list(violations)
    elements = Counter((v.rule, v.impact) for v in violations)
    pages: dict[tuple[str, str], set[str]] = {}
    for v in violations:
        pages.setdefault((v.rule, v.impact), set()).add(v.page)
    return [
        f"{rule} ({impact}): {count} elements on {len(pages[rule, impact])} pages"
        for (rule, impact), count in elements.most_common()
    ]


RECORD = "axe-core finding: "
"""How a finding is kept among the run's figures until the end-of-run summary totals them."""


def recorded(violations: Iterable[Violation]) -> list[str]:
    """Each finding as one line of the run's figures (read back by :func:`summary`)."""
    return [RECORD + json.dumps(dataclasses.asdict(v)) for v in violations]


def summary(lines: Iterable[str]) -> list[str]:
    """The lines of the run's figures, with the recorded findings totalled by mode and rule.

    Serious and critical violations fail their test where they are found; here each
    mode gets its totals by rule, the moderate and minor violations one by one, and
    what axe-core could not decide (for a person to look at).
    """
    lines = list(lines)
    found = [
        Violation(**json.loads(line[len(RECORD) :])) for line in lines if line.startswith(RECORD)
    ]
    rest = [line for line in lines if not line.startswith(RECORD)]
    if not found and not any(line.startswith(RECORD) for line in lines):
        return rest
    totals = []
    for mode in MODES:
        here = [v for v in found if v.mode == mode]
        violations = [v for v in here if not v.needs_review]
        totals.append(f"axe-core, {mode} mode, violations by rule:")
        totals.extend(f"  {line}" for line in count_by_rule(violations) or ["none"])
        totals.extend(f"  {v}" for v in violations if v.impact not in FAILING_IMPACTS)
        totals.append(f"axe-core, {mode} mode, undecided (for a person to look at):")
        totals.extend(
            f"  {line}" for line in count_by_rule(v for v in here if v.needs_review) or ["none"]
        )
    return totals + rest
