"""How long the documentation build takes, cold, cached, and after the edits authors make.

Works on a scratch copy of docs/, src/ and pyproject.toml (the real tree is never
touched; the copy's src/ comes first on PYTHONPATH, so its edits are what the kernels
import) and prints, from one run:

- the baseline: a cold build that re-executes every page in one process, the way the
  JAX documentation builds (``nb_execution_mode = "force"``);
- a cold build with the execution cache (docs/_ext/execution_cache.py);
- a rebuild with no change;
- a rebuild after editing one page;
- a rebuild after editing the body of one package function;

each in seconds, as a ratio to the baseline, and with the pages it executed: for the
force build as MyST-NB reports them, for the others from the build's own record
(executions.jsonl). Targets: no-change under 10% of the baseline, one-page edit under
that page's execution time + 5 s, cold no slower than the baseline; the cold build within
1.1x of its pages' summed execution times shared over its kernels, and no page over 30 s.

Run it with ``nox -s bench`` (after the repeated-call benchmark) or directly, in an
environment with the docs dependencies: ``python benchmarks/docs_build.py``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = "problems/shard-map-double"
PAGE_EDIT = ("Double every element of a 1-D array", "Double each element of a 1-D array")
FUNCTION = "src/shard_tutorial/problems/shard_map_double.py"
FUNCTION_EDIT = ("lambda block: block * 2.0,", "lambda block: 2.0 * block,")


def build(tree: Path, out: str, *options: str) -> tuple[float, str]:
    """Run sphinx-build on the scratch tree; return its wall time and its output."""
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html", *options,
         str(tree / "docs"), str(tree / out)],
        env={**os.environ, "PYTHONPATH": str(tree / "src")},
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    if result.returncode:
        sys.exit(f"build failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return seconds, result.stdout + result.stderr


def last_record(tree: Path) -> dict:
    """The build's own record of its last execution step."""
    lines = (tree / "docs" / "_build" / ".jupyter_cache" / "executions.jsonl").read_text()
    return json.loads(lines.splitlines()[-1])


def edit(tree: Path, relative: str, old: str, new: str) -> None:
    """Make one textual edit in the scratch tree, or stop if the text is not there."""
    path = tree / relative
    text = path.read_text()
    if old not in text:
        sys.exit(f"benchmark edit not found in {relative}: {old!r}")
    path.write_text(text.replace(old, new, 1))


def main() -> None:
    """Run the five builds on a scratch copy and print the table."""
    with tempfile.TemporaryDirectory(prefix="docs-bench-") as scratch:
        tree = Path(scratch)
        shutil.copytree(ROOT / "docs", tree / "docs", ignore=shutil.ignore_patterns("_build"))
        shutil.copytree(ROOT / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy2(ROOT / "pyproject.toml", tree)

        rows: list[tuple[str, float, str]] = []
        seconds, log = build(tree, "force-html", "-D", "nb_execution_mode=force",
                             "-d", str(tree / "force-doctrees"))  # fmt: skip
        forced = len(re.findall(r"Executed notebook in", log))
        rows.append(("baseline: cold, force mode, 1 process", seconds, f"{forced} (all)"))
        baseline = seconds

        seconds, _ = build(tree, "docs/_build/html")
        record = last_record(tree)
        rows.append(
            (f"cold, cached, {record['workers']} kernels", seconds, str(len(record["executed"])))
        )
        cold = seconds
        page_times = {name: run["seconds"] for name, run in record["executed"].items()}
        # The best the kernels could do: every page's own time, shared over the cores.
        summed = sum(page_times.values())
        limit = summed / record["workers"]
        longest = max(page_times, key=page_times.__getitem__)

        seconds, _ = build(tree, "docs/_build/html")
        rows.append(("no-change rebuild", seconds, str(len(last_record(tree)["executed"]))))

        edit(tree, f"docs/{PAGE}.md", *PAGE_EDIT)
        seconds, _ = build(tree, "docs/_build/html")
        executed = last_record(tree)["executed"]
        page_seconds = executed.get(PAGE, {}).get("seconds", float("nan"))
        rows.append((f"one-page edit ({PAGE})", seconds, ", ".join(executed) or "none"))
        page_edit = seconds

        edit(tree, FUNCTION, *FUNCTION_EDIT)
        seconds, _ = build(tree, "docs/_build/html")
        executed = last_record(tree)["executed"]
        rows.append(
            ("one-function edit (_double_each_block)", seconds, ", ".join(executed) or "none")
        )

    width = max(len(name) for name, _, _ in rows)
    print(f"{'build':<{width}}  {'seconds':>8}  {'ratio':>6}  pages executed")
    for name, seconds, pages in rows:
        print(f"{name:<{width}}  {seconds:8.1f}  {seconds / baseline:6.2f}  {pages}")
    print(
        f"\ntargets: no-change < 10% of baseline ({rows[2][1] / baseline:.0%}); "
        f"one-page edit < page execution ({page_seconds:.1f} s) + 5 s "
        f"({page_edit:.1f} s); cold <= baseline ({rows[1][1] / baseline:.2f}x)"
    )
    print(
        f"cold, cached: {cold:.1f} s against {limit:.1f} s, the pages' summed execution "
        f"times ({summed:.1f} s) over {record['workers']} kernels: {cold / limit:.2f}x "
        f"(target <= 1.1x); longest page {longest}, {page_times[longest]:.1f} s "
        f"(target <= 30 s)"
    )


if __name__ == "__main__":
    main()
