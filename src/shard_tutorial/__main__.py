"""The command line: list the problems, write a starter file, check a solution.

::

    python -m shard_tutorial list
    python -m shard_tutorial starter shard_map_psum > shard_map_psum.py
    python -m shard_tutorial check shard_map_psum shard_map_psum.py [--devices 1,8] [--seed N]
        [--timeout SECONDS] [--deadline SECONDS] [--no-refusals]
    python -m shard_tutorial check shard_map_psum shard_map_psum.py --processes 2
    python -m shard_tutorial launch --processes 2 --devices-per-process 4 script.py [args]

``check`` exits with status 0 when every case passes on every device count, 1 when
any fails, 2 for a usage error (an unknown problem, a missing file, a file that does
not define the function, a bad option) and 130 when interrupted with Ctrl-C, at any
moment.
``launch`` runs a script as a cluster of JAX processes (see
:mod:`shard_tutorial.launcher`); it exits with status 0 when every process does, 1
when any fails or hangs, 2 for a usage error and 130 on Ctrl-C.
"""

from __future__ import annotations

# Ctrl-C's handler is installed before anything else is imported. Python's own raises
# KeyboardInterrupt wherever the signal lands, and where that is a weakref callback in
# the importer, Python prints "Exception ignored in: ..." and drops it: the command ran
# on as if no key had been pressed. Ours also sets a flag, which main() reads once the
# imports are done. (Only when run as a command, and only over Python's own handler:
# importing this module changes nothing, and a SIGINT ignored by nohup stays ignored.)
import signal
import sys
import threading
from types import FrameType

_interrupted = threading.Event()  # Ctrl-C was pressed during this command


def _interrupt(_signum: int, _frame: FrameType | None) -> None:
    """Ctrl-C: stop every check in progress, even if the KeyboardInterrupt gets lost."""
    _interrupted.set()
    checker = sys.modules.get("shard_tutorial.checking.checker")  # it may be half imported
    event = getattr(checker, "INTERRUPTED", None)
    if event is not None:
        event.set()
    raise KeyboardInterrupt


if __name__ == "__main__" and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _interrupt)

import argparse
import ast
import contextlib
import importlib
import math
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

# The heading `list` prints above each part's problems, by the folder of their pages.
_PARTS = {
    "problems": "Part I: shard_map and its first collective",
    "collectives": "Part II: communication between devices",
    "training": "Part III: training across devices",
    "parallelism": "Part V: the parallelisms of large models",
    "scale": "Part VI: training at scale",
}


def _device_counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        counts = ()
    if not counts or min(counts) < 1:
        msg = f"expected device counts >= 1 separated by commas, such as 1,8; got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return counts


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds < math.inf:
        msg = f"expected a positive, finite number of seconds, such as 30; got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return seconds


def _seed(text: str) -> int:
    if not text.isdigit():
        msg = f"expected a whole number >= 0, such as 1234; got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return int(text)


def _parser() -> argparse.ArgumentParser:
    from shard_tutorial.checking.checker import (  # noqa: PLC0415 (JAX)
        DEFAULT_DEADLINE,
        DEFAULT_DEVICES,
        DEFAULT_TIMEOUT,
    )

    parser = argparse.ArgumentParser(
        prog="python -m shard_tutorial",
        description="Practice problems on sharded computation in JAX: list them, start "
        "one, and check a solution on 1 and on 8 devices.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("list", help="list the problems")
    starter = commands.add_parser("starter", help="print a file to start a solution from")
    starter.add_argument("problem", help="a problem's name, as `list` shows it")
    checking = commands.add_parser("check", help="check the solution in a file")
    checking.add_argument("problem", help="a problem's name, as `list` shows it")
    checking.add_argument("file", type=Path, help="the .py file that defines the solution")
    checking.add_argument(
        "--devices",
        type=_device_counts,
        default=DEFAULT_DEVICES,
        metavar="N,M",
        help="device counts to check on, each in a fresh process (default: 1,8)",
    )
    checking.add_argument(
        "--timeout",
        type=_seconds,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help="how long a case may run before it counts as a hang: this many seconds of CPU "
        "time on each core, or of waiting idle (asleep, or in a collective that never "
        f"completes); a busy machine's waits do not count (default: {DEFAULT_TIMEOUT:g})",
    )
    checking.add_argument(
        "--deadline",
        type=_seconds,
        default=DEFAULT_DEADLINE,
        metavar="SECONDS",
        help="how long the whole check may take; cases not finished by then are reported "
        f"as not run (default: {DEFAULT_DEADLINE:g})",
    )
    checking.add_argument(
        "--function", help="the function's name in the file (default: the problem's name)"
    )
    checking.add_argument(
        "--seed",
        type=_seed,
        metavar="N",
        help="seed of the random cases, to check the same ones as a report did (default: new)",
    )
    checking.add_argument(
        "--processes",
        type=_processes,
        default=1,
        metavar="N",
        help="run each device count above 1 on a cluster of N JAX processes on this "
        "machine, each holding its share of the devices, as the hosts of a GPU or TPU "
        "cluster do: --processes 2 checks on 1 device and on 2 processes x 4 devices "
        "(default: 1, one process)",
    )
    checking.add_argument(
        "--refusals",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run the inputs the statement's Raises section refuses: each passes "
        "only if the solution raises the error named there (default: on); "
        "--no-refusals leaves them out, to judge the values and the sharding alone",
    )
    _add_launch_command(commands)
    _add_explain_command(commands)
    return parser


def _add_explain_command(commands: argparse._SubParsersAction) -> None:
    explaining = commands.add_parser(
        "explain",
        help="say where a function communicates: each collective, its line, its bytes",
        description="Run FUNCTION of FILE on the arguments FILE's make_args() returns (or "
        "on a problem's example, with --problem), and print each collective XLA compiled "
        "for the call: its kind, the devices it spans, what it moves, the bytes each "
        "device sends, how often it runs and the line of FILE it came from; then the "
        "memory each device holds and how each argument and output is laid out.",
    )
    explaining.add_argument("file", type=Path, nargs="?", help="the .py file")
    explaining.add_argument("function", nargs="?", help="the function's name in the file")
    explaining.add_argument(
        "--devices", type=_processes, default=8, metavar="N", help="CPU devices (default: 8)"
    )
    explaining.add_argument(
        "--processes",
        type=_processes,
        default=1,
        metavar="N",
        help="run on a cluster of N JAX processes on this machine, sharing the devices "
        "(default: 1)",
    )
    explaining.add_argument(
        "--problem",
        help="take the arguments from this problem's example (without FILE: explain the "
        "problem's own reference)",
    )


def _explain(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from shard_tutorial.explain import explain_file  # noqa: PLC0415

    if args.file is None and args.problem is None:
        parser.error("give FILE and FUNCTION, or --problem NAME")
    if args.file is not None and args.function is None and args.problem is None:
        parser.error(f"give the name of the function of {args.file} to explain")
    if args.file is not None and not args.file.is_file():
        parser.error(f"no such file: {args.file}")
    if args.devices % args.processes:
        parser.error(f"--processes {args.processes} must divide --devices {args.devices}")
    width = shutil.get_terminal_size((100, 24)).columns
    if args.processes > 1:
        return _explain_on_cluster(args, width)
    from shard_tutorial.devices import use_cpu_devices  # noqa: PLC0415

    use_cpu_devices(args.devices)
    try:
        found = explain_file(args.file, args.function, problem=args.problem)
    except (KeyError, ValueError) as error:
        parser.error(str(error.args[0] if error.args else error))
    if sys.stdout.isatty():
        from rich.console import Console  # noqa: PLC0415

        Console().print(found)
    else:
        print(found.render(width))
    return 0


def _explain_on_cluster(args: argparse.Namespace, width: int) -> int:
    """Explain in every process of a cluster; print what the first process printed."""
    from shard_tutorial.launcher import launch  # noqa: PLC0415

    script = Path(__file__).with_name("_explained.py")
    given = [str(args.file.resolve()) if args.file else "", args.function or ""]
    result = launch(
        script,
        *given,
        *(["--problem", args.problem] if args.problem else []),
        f"--width={width}",
        processes=args.processes,
        devices_per_process=args.devices // args.processes,
    )
    sys.stdout.write(result.processes[0].output)
    if result.returncode:
        print(result.report(), file=sys.stderr)
    return result.returncode


def _processes(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        msg = f"expected a whole number >= 1, such as 2; got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return int(text)


def _add_launch_command(commands: argparse._SubParsersAction) -> None:
    from shard_tutorial import launcher  # noqa: PLC0415 (only `launch` needs it)

    def count(text: str) -> int:
        if not text.isdigit() or int(text) < 1:
            msg = f"expected a whole number >= 1, got {text!r}"
            raise argparse.ArgumentTypeError(msg)
        return int(text)

    launching = commands.add_parser(
        "launch",
        help="run a script as a cluster of JAX processes on this machine",
        description="Run SCRIPT in N processes that join one JAX cluster on 127.0.0.1 "
        "(the script joins with shard_tutorial.join_cluster()). Each output line is "
        "prefixed with its process index; the exit status is 0 when every process exits "
        "with 0.",
    )
    launching.add_argument("--processes", type=count, required=True, metavar="N")
    launching.add_argument("--devices-per-process", type=count, required=True, metavar="M")
    launching.add_argument(
        "--timeout",
        type=_seconds,
        default=launcher.DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help="how long the run may take before the processes count as hung "
        f"(default: {launcher.DEFAULT_TIMEOUT:g})",
    )
    launching.add_argument(
        "--port", type=int, help="the coordinator's port on 127.0.0.1 (default: a free one)"
    )
    launching.add_argument("script", type=Path, help="the Python file every process runs")
    launching.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")


def _launch(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from shard_tutorial.launcher import launch  # noqa: PLC0415

    try:
        result = launch(
            args.script,
            *args.args,
            processes=args.processes,
            devices_per_process=args.devices_per_process,
            timeout=args.timeout,
            port=args.port,
            stream=sys.stdout,
        )
    except (TypeError, ValueError) as error:
        parser.error(str(error))
    except KeyboardInterrupt:
        print("interrupted: every process was stopped", file=sys.stderr)
        return 130
    if result.returncode:
        print(result.report(), file=sys.stderr)
    return result.returncode


def _binding(path: Path, name: str) -> str | None:
    """How the file binds ``name`` at top level; None if that cannot be told.

    The answer is ``"def"``, ``"class"``, ``"import"``, ``"value"`` (an assignment of
    a literal, such as ``3``), ``"other"``, or ``"none"`` (not at all).

    It cannot be told when the file does not parse (the check reports why), or binds
    names in ways this simple reading does not follow: ``from m import *``, or
    statements inside top-level ``if``, ``try``, ``with`` or loop blocks.
    """
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError):
        return None
    bound = "none"
    for node in tree.body:
        if isinstance(
            node, ast.If | ast.Try | ast.TryStar | ast.With | ast.For | ast.While | ast.Match
        ):
            return None
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            return None
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            bound = "def"
        elif isinstance(node, ast.ClassDef) and node.name == name:
            bound = "class"
        elif isinstance(node, ast.Import | ast.ImportFrom):
            if any((a.asname or a.name).split(".")[0] == name for a in node.names):
                bound = "import"
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for g in targets for t in ast.walk(g)):
                literal = isinstance(node.value, ast.Constant | ast.List | ast.Tuple | ast.Dict)
                bound = "value" if literal else "other"
    return bound


# What the command imports before it reads its arguments: JAX and jaxlib's native
# modules with them (the checker and the problems import JAX; the launcher imports
# shard_tutorial.validation, which does too).
_HEAVY_MODULES = (
    "shard_tutorial.checking.checker",
    "shard_tutorial.problems",
    "shard_tutorial.launcher",
)


@contextlib.contextmanager
def _ctrl_c_held() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) back while the block runs; one pressed meanwhile comes after it.

    A KeyboardInterrupt raised while a native module initialises can abort the whole
    process: jaxlib's modules are built with nanobind, which calls Python code (to
    create enum classes, say) while it sets a module up, and ends the process with
    "Critical nanobind error" (and a core dump) if that code raises. So the signal is
    blocked for this thread while the block runs: the kernel keeps it pending, and
    unblocking it at the end delivers it, and Python raises KeyboardInterrupt there,
    once the imports are whole. Threads started in the block inherit the mask, so they
    cannot take the signal either.

    Where signals cannot be blocked (Windows), or off the main thread (which never
    runs Python's handlers), the block runs as it is.
    """
    if not hasattr(signal, "pthread_sigmask") or (
        threading.current_thread() is not threading.main_thread()
    ):
        yield
        return
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)  # a pending Ctrl-C raises here


def _interrupted_message(argv: Sequence[str] | None) -> str:
    command = list(sys.argv[1:] if argv is None else argv)[:1]
    if command == ["check"]:
        return "interrupted: the check was stopped"
    if command == ["launch"]:
        return "interrupted: every process was stopped"
    return "interrupted"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (130 after Ctrl-C, at any moment)."""
    previous = signal.getsignal(signal.SIGINT)
    if previous is _interrupt:  # installed as the command started: a Ctrl-C since counts
        previous = signal.default_int_handler
    else:
        _interrupted.clear()
    ours = previous is signal.default_int_handler  # not if SIGINT is ignored (nohup)
    try:
        if _interrupted.is_set():  # pressed as the command started, and swallowed there
            raise KeyboardInterrupt
        with _ctrl_c_held():  # a Ctrl-C during JAX's import is taken after it
            if ours:
                signal.signal(signal.SIGINT, _interrupt)
            for module in _HEAVY_MODULES:
                importlib.import_module(module)
        return _main(argv)
    except KeyboardInterrupt:
        print(_interrupted_message(argv), file=sys.stderr)
        return 130  # the shell's status for Ctrl-C
    except Exception:
        # A Ctrl-C that lands while an extension module initialises after the held
        # imports can come out as another error: jaxlib's turns the KeyboardInterrupt
        # into an ImportError.
        if not _interrupted.is_set():
            raise
        print(_interrupted_message(argv), file=sys.stderr)
        return 130
    finally:
        if ours:
            signal.signal(signal.SIGINT, previous)


def _main(argv: Sequence[str] | None) -> int:
    from shard_tutorial.checking.checker import INTERRUPTED, check  # noqa: PLC0415 (imported by main)
    from shard_tutorial.problems import PROBLEMS, get_problem  # noqa: PLC0415

    INTERRUPTED.clear()  # a Ctrl-C of an earlier run in this process is over
    if _interrupted.is_set():  # pressed during the imports, and swallowed there
        raise KeyboardInterrupt

    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "launch":
        return _launch(args, parser)
    if args.command == "explain":
        return _explain(args, parser)
    if args.command == "list":
        width = max(map(len, PROBLEMS))
        folder = None
        for name in PROBLEMS:
            problem = PROBLEMS[name]
            if problem.folder != folder:
                folder = problem.folder
                print(("\n" if folder != "problems" else "") + _PARTS.get(folder, folder))
            print(f"  {name:<{width}}  {problem.title}: {problem.summary}")
        return 0
    try:
        problem = get_problem(args.problem)
    except KeyError as error:
        parser.error(error.args[0])
    if args.command == "starter":
        sys.stdout.write(problem.starter())
        return 0
    function = args.function or problem.name
    if args.file.is_dir():
        parser.error(f"{args.file} is a directory: give the .py file that defines {function}")
    if not args.file.is_file():
        parser.error(f"no such file: {args.file}")
    binding = _binding(args.file, function)
    if binding == "none":
        parser.error(
            f"{args.file} defines no function named {function!r} "
            "(name it after the problem, or pass --function NAME)"
        )
    if binding in {"class", "value"}:
        what = "a class" if binding == "class" else "a value"
        parser.error(
            f"{args.file} defines {function} as {what}, not a function: "
            f"write it as def {function}(...):"
        )
    if args.processes > 1 and any(n > 1 and n % args.processes for n in args.devices):
        parser.error(f"--processes {args.processes} must divide every device count above 1")
    report = check(
        problem,
        args.file,
        devices=args.devices,
        timeout=args.timeout,
        function=function,
        seed=args.seed,
        processes=args.processes,
        deadline=args.deadline,
        refusals=args.refusals,
    )
    if _interrupted.is_set():
        raise KeyboardInterrupt
    print(report)
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
