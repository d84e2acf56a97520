"""How long the checker takes, for a right solution and for the worst ones a reader can write.

For every problem, a full check on 1 and 8 devices (each in its own processes, at the
same time) of:

- (a) the reference solution, copied into a file (``reference_copy``: the package's own
  function gets the REFERENCE verdict): each worker imports JAX, compiles and runs
  every case, each call recorded and its compiled programs read;
- (b) a solution that hangs on every case: stopped after two hangs (two timeouts);
- (c) one that crashes its process on every case: stopped after two crashes in a row;
- (d) one that allocates memory without bound: stopped at the memory limit.

Targets: (a) under 10 s, (b), (c) and (d) under 45 s, on a quiet machine. The slowest
case of (a), compilation and tracing included, is what ``DEFAULT_TIMEOUT`` must leave
room for.

Run it with ``nox -s bench`` or ``python benchmarks/checker.py [PROBLEM ...]`` (default:
every problem).
"""

from __future__ import annotations

import inspect
import os
import sys
import tempfile
from pathlib import Path

from shard_tutorial import PROBLEMS, check, reference_copy
from shard_tutorial.checking.checker import DEFAULT_TIMEOUT, MEMORY_LIMIT

# The bodies of the worst solutions, whatever the problem's signature.
WORST = {
    "hangs": "    while True:\n        pass\n",
    "crashes": "    import os\n    os.abort()\n",
    "allocates": (
        "    import numpy as np\n    blocks = []\n    while True:\n"
        "        blocks.append(np.ones(2**24))  # 128 MiB more each time, touched\n"
    ),
}


def main() -> None:
    """Check each problem's reference and worst solutions; print the wall times."""
    print(
        f"timeout {DEFAULT_TIMEOUT:g} s, memory limit {MEMORY_LIMIT / 2**30:g} GiB, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
    )
    columns = ["(a) reference", "slowest case", "(b) hangs", "(c) crashes", "(d) allocates"]
    print(f"{'problem':<20}" + "".join(f"{c:>15}" for c in columns))
    with tempfile.TemporaryDirectory() as scratch:
        for name in sys.argv[1:] or list(PROBLEMS):
            problem = PROBLEMS[name]
            parameters = ", ".join(inspect.signature(problem.reference).parameters)
            reference = check(name, reference_copy(name, scratch))
            assert reference.passed, reference
            slowest = max(r.seconds for run in reference.runs for r in run.results)
            times = [reference.seconds, slowest]
            for kind, body in WORST.items():
                path = Path(scratch) / f"{name}_{kind}.py"
                path.write_text(f"def {name}({parameters}):\n{body}")
                report = check(name, path)
                assert not report.passed, report
                times.append(report.seconds)
            print(f"{name:<20}" + "".join(f"{t:>13.1f} s" for t in times), flush=True)


if __name__ == "__main__":
    main()
