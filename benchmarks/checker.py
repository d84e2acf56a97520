"""How long the checker takes: each reference solution checked on 1 and 8 devices.

Each check starts two fresh Python processes (1 and 8 fake CPU devices), which import
JAX, compile and run every case of the problem. Target: under 15 s per problem.

Run it with ``nox -s bench`` or ``python benchmarks/checker.py``.
"""

from __future__ import annotations

from shard_tutorial import PROBLEMS, check


def main() -> None:
    """Check every reference solution and print the wall time of each check."""
    print(f"{'problem':<20}  {'cases':>5}  {'seconds (1 and 8 devices)':>26}  verdict")
    for name, problem in PROBLEMS.items():
        report = check(name, problem.reference)
        print(f"{name:<20}  {len(problem.cases):>5}  {report.seconds:>26.1f}  {report.verdict()}")


if __name__ == "__main__":
    main()
