"""What each process of ``python -m shard_tutorial explain --processes N`` runs.

It joins the cluster, explains the call as one process of 8 devices would
(:func:`shard_tutorial.explain.explain_file`), and the first process prints the
tables (every process compiled and ran the same programs).
"""

from __future__ import annotations

import argparse

from shard_tutorial.launcher import join_cluster


def main() -> None:
    """Join the cluster, explain, and print from the first process."""
    parser = argparse.ArgumentParser()
    parser.add_argument("file")
    parser.add_argument("function")
    parser.add_argument("--problem")
    parser.add_argument("--width", type=int, default=100)
    args = parser.parse_args()
    join_cluster()
    import jax  # noqa: PLC0415 (after joining)

    from shard_tutorial.explain import explain_file  # noqa: PLC0415

    found = explain_file(args.file or None, args.function or None, problem=args.problem)
    if jax.process_index() == 0:
        print(found.render(args.width))


if __name__ == "__main__":
    main()
