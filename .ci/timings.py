"""Where CI's time went: each nox session, then each problem's share of the tests and pages.

Run by .ci/run after nox, with the nox report and the folder of JUnit reports that
noxfile.py wrote (one per pytest run, when SHARD_TUTORIAL_TIMINGS named the folder).
A test counts for a problem when the problem's name is its file's (tests/problems/
test_<name>.py, tests/test_checker_<name>.py, docs/tests/test_built_<name>.py) or one
of its parameters; a page, when it is the problem's page. The rest is shared: the
package's other tests, the site's, the browser's. Standard library only: CI's own
Python runs it, before anything is installed in it.
"""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PREFIXES = ("test_checker_", "test_built_", "test_")


def sessions(report: Path) -> None:
    """The table of nox sessions: result, seconds and share of the total."""
    listed = json.loads(report.read_text())["sessions"]
    total = sum(s.get("duration", 0.0) for s in listed)
    print(f"\n{'nox session':<22} {'result':<9} {'seconds':>8} {'share':>6}")
    for s in listed:
        seconds = s.get("duration", 0.0)
        share = seconds / total if total else 0.0
        name = (s.get("signatures") or [s["name"]])[0]  # "tests-3.11", not "tests"
        print(f"{name:<22} {s['result']:<9} {seconds:>8.0f} {share:>6.0%}")
    # Two sessions run at once where both allow it: the sum is more than the wall-clock
    # time, which .ci/run prints.
    print(f"{'sum of sessions':<22} {'':<9} {total:>8.0f} ({total / 60:.1f} min)")


def problem_names() -> list[str]:
    """The problems, by their modules' names (src/shard_tutorial/problems/<name>.py)."""
    folder = ROOT / "src" / "shard_tutorial" / "problems"
    return sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith("_"))


def owner(nodeid: str, names: set[str]) -> str | None:
    """The problem a test belongs to, from its file name or its parameters; None: shared."""
    module, _, rest = nodeid.partition("::")
    stem = Path(module.replace(".", "/")).name
    for prefix in PREFIXES:
        if stem.startswith(prefix):
            stem = stem[len(prefix) :]
            break
    if stem in names:
        return stem
    for parameter in re.findall(r"\[([^\]]*)\]", rest):
        for part in re.split(r"[-,\s]", parameter):
            if part in names:
                return part
    return None


def problems(folder: Path, wall: float | None = None) -> None:
    """Each problem's seconds of tests (every session's runs) and of its page's execution.

    With ``wall``, the run's wall-clock seconds, also each problem's share of it: its
    seconds over all the seconds recorded (every problem's and the shared tests' and
    pages'), times ``wall``. The time no report records (installs, Sphinx's own work,
    the browser) is spread in the same proportion, so the share is, if anything, more
    than what one more problem like it would add.
    """
    names = problem_names()
    known = set(names)
    tests: dict[str, float] = defaultdict(float)
    runs: dict[str, int] = defaultdict(int)
    for path in sorted(folder.glob("*.xml")):
        for case in ET.parse(path).iter("testcase"):
            nodeid = f"{case.get('classname', '')}::{case.get('name', '')}"
            who = owner(nodeid, known) or "(shared)"
            tests[who] += float(case.get("time") or 0.0)
            runs[who] += 1
    pages: dict[str, float] = {}
    log = ROOT / "docs" / "_build" / ".jupyter_cache" / "executions.jsonl"
    if log.is_file():
        for line in log.read_text().splitlines():
            for docname, entry in json.loads(line).get("executed", {}).items():
                name = docname.rsplit("/", 1)[-1].replace("-", "_")
                key = name if name in known else "(shared)"
                pages[key] = pages.get(key, 0.0) + float(entry.get("seconds", 0.0))
    if not tests and not pages:
        return
    print(
        "\nCI seconds by problem: its tests in every session (test time, both stacks and\n"
        "device counts; pytest-xdist runs two at once), and its page's execution in the docs build"
    )
    recorded = sum(tests.values()) + sum(pages.values())
    share = wall / recorded if wall and recorded else None
    wall_heading = f" {'of wall':>8}" if share else ""
    print(f"{'problem':<32} {'tests':>6} {'seconds':>8} {'page':>6} {'total':>7}{wall_heading}")
    rows = [*names, "(shared)"]
    for name in rows:
        total = tests.get(name, 0.0) + pages.get(name, 0.0)
        of_wall = f" {total * share:>8.0f}" if share else ""
        print(
            f"{name:<32} {runs.get(name, 0):>6} {tests.get(name, 0.0):>8.0f} "
            f"{pages.get(name, 0.0):>6.0f} {total:>7.0f}{of_wall}"
        )
    own = [tests.get(n, 0.0) + pages.get(n, 0.0) for n in names]
    if own:
        print(f"mean per problem: {sum(own) / len(own):.0f} s; most: {max(own):.0f} s")
    if own and share:
        print(
            f"of the run's {wall:.0f} s of wall-clock, each problem's share (its seconds / all "
            f"{recorded:.0f} recorded x {wall:.0f}): mean {sum(own) / len(own) * share:.0f} s, "
            f"most {max(own) * share:.0f} s"
        )


if __name__ == "__main__":
    sessions(Path(sys.argv[1]))
    if len(sys.argv) > 2:
        problems(Path(sys.argv[2]), float(sys.argv[3]) if len(sys.argv) > 3 else None)
