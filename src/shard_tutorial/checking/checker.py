"""Check a solution to a problem, on one device and on many, and say what is wrong.

The device count of a JAX process is fixed when JAX starts, so each device count runs
in a fresh Python process (:mod:`shard_tutorial.checking.worker`), by default 1 and 8
fake CPU devices at the same time. A worker only runs the solution: it calls it on
each case (the problem's :attr:`~shard_tutorial.problem.Problem.cases`, which the
package's tests use too, a few fresh random ones from a printed seed, and the inputs
the statement's "Raises" section refuses, each of which must raise the error named
there) and sends back what it returned, or raised, as plain data: values, dtype,
shape, how the output is split over the devices, and how it was made, recorded
during that same call (the XLA programs it came from, with their collectives and
device counts). The verdict is given in the checker's own process, where the
reader's code never ran (:mod:`shard_tutorial.checking.judge`): the values against the
problem's NumPy oracle, then where and how they were computed
(:attr:`~shard_tutorial.problem.Problem.technique`) and the output's layout
(:attr:`~shard_tutorial.problem.Problem.placement`); for a refused input, the error
raised. The report is :mod:`shard_tutorial.checking.report`'s; a cluster's answers are put together by
:mod:`shard_tutorial.checking.assembly`.

The checker is a teaching aid: it catches the usual shortcuts (an answer computed
on the host or on one device, by ``jax.jit``'s automatic partitioning, with a
collective that is thrown away, or by the package's own reference), not a sandbox
against a determined attacker: code in the solution's process can do anything that
process can.

Each worker runs in a session of its own, under a memory limit, and the whole
session is ended when it is done, so nothing the solution starts outlives the check.
A case that runs longer than ``timeout`` (an endless loop, a collective that some
devices never reach) is stopped, and the remaining cases run in a new process; after
:data:`MAX_LOST` cases in a row lose their process (hangs, crashes), or
:data:`MAX_HANGS` hangs in all, the rest are not run, so a check ends within about
two timeouts plus its normal time, whatever the solution does.

The workers are forked from a process that has imported JAX already, kept for the
life of the checker's process (:mod:`shard_tutorial.checking.zygote`), rather than
started afresh: each start would spend 1.3 s of CPU importing the same modules.

From Python or a notebook, pass the function; from a terminal, the file that defines it::

    report = check("shard_map_psum", my_shard_map_psum)
    python -m shard_tutorial check shard_map_psum my_solution.py
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import pickle
import resource
import secrets
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any, BinaryIO

import numpy as np

from shard_tutorial.checking.judge import judge, judge_cluster, judge_raised, judge_refusal
from shard_tutorial.checking.protocol import Answer, Raised, Verdict, decode_answer, decode_raised
from shard_tutorial.checking.report import CaseResult, CheckReport, DeviceRun
from shard_tutorial.checking.worker import MEMORY_SIGNS, is_library_file
from shard_tutorial.checking.zygote import ZYGOTES, Forked
from shard_tutorial.problem import Case, Problem
from shard_tutorial.problems import get_problem
from shard_tutorial.processes import (
    bindable_port,
    cpu_seconds,
    environments,
    kill_descendants,
    require_seconds,
    signal_name,
)

__all__ = [
    "DEFAULT_DEADLINE",
    "DEFAULT_DEVICES",
    "DEFAULT_TIMEOUT",
    "MEMORY_LIMIT",
    "CaseResult",
    "CheckReport",
    "DeviceRun",
    "check",
    "reference_copy",
]

DEFAULT_DEVICES = (1, 8)
DEFAULT_DEADLINE = 300.0
"""Seconds a whole check may take, starting JAX and every case on every device count
included; the cases not finished by then are reported as not run. A right solution's
check takes 5 to 20 s jitted (``benchmarks/checker.py``); an eager one, whose
``shard_map`` compiles each operation as a program of its own, can take minutes on a
busy machine."""
DEFAULT_TIMEOUT = 10.0
"""How long a case may run, compilation and tracing included, before it is stopped as
a hang: ``timeout`` seconds of CPU time on each core the machine lends the checker
(20 CPU-seconds on 2 cores), or ``timeout`` seconds of wall-clock time spent idle
(asleep, or waiting for a collective). A case that computes is not stopped for
waiting its turn on a busy machine. A right solution's slowest case takes about a
second jitted (``benchmarks/checker.py`` prints the figures)."""
IDLE_SHARE = 0.05
"""The share of one core below which a running case counts as idle (asleep or waiting):
a computing case gets far more than this even on a machine busy with other work."""
STARTUP_TIMEOUT = 120.0
"""Seconds a fresh process may take to start JAX (slow only on a very busy machine)."""
LOAD_TIMEOUT = 30.0
"""Seconds the solution's file may take to run (its imports included) when loaded."""
MEMORY_LIMIT = 3 * 2**30
"""Bytes of address space a worker may map. JAX with 8 CPU devices maps about 1.8 GiB
(most of it reserved, not used); a solution that needs more than the rest is stopped."""
OUTPUT_LIMIT = 256 * 2**20
"""Bytes a worker may print: beyond, the process is stopped (``SIGXFSZ``)."""
RANDOM_CASES = 2
"""Fresh random cases added to every check of a problem that can generate them (new
shapes on every run; the statement's cases hold the edges each problem must get right)."""
MAX_LOST = 2
"""Cases in a row that may lose their process (a hang, a crash) before the rest are not run."""
MAX_HANGS = 2
"""Hangs a run may have in all before the rest of its cases are not run."""
EXIT_GRACE = 2.0
"""Seconds a finished process may take to exit before its whole session is killed: a
thread or a process the solution started must not keep the check waiting."""
_HEADER_LIMIT = (
    64 << 20
)  # bytes a report's header may take: every program of an eager call, read in
_PAYLOAD_LIMIT = MEMORY_LIMIT  # bytes of values one report may carry
_READ_SLICE = 0.5  # seconds of reading a worker's output before its limits are looked at
_POLL = 0.1  # seconds between looks at whether the worker ended or the check was cancelled
INTERRUPTED = threading.Event()
"""Set by the command line's Ctrl-C handler: every check stops its workers and raises
KeyboardInterrupt, even if the KeyboardInterrupt itself was swallowed somewhere."""


def check(
    problem: str | Problem,
    solution: Callable[..., Any] | str | os.PathLike[str],
    *,
    devices: Sequence[int] = DEFAULT_DEVICES,
    timeout: float = DEFAULT_TIMEOUT,
    function: str | None = None,
    seed: int | None = None,
    processes: int = 1,
    deadline: float = DEFAULT_DEADLINE,
    refusals: bool = True,
) -> CheckReport:
    """Run a solution on a problem's cases on each device count and report.

    Args:
      problem: the problem, or its name (``"shard_map_psum"``).
      solution: the function to check, or the path of a Python file that defines a
        function named after the problem (or ``function``). A function is sent to the
        fresh processes with cloudpickle: define what it needs inside it, or import it
        there.
      devices: the device counts to run on, each in its own process.
      timeout: seconds each case may take before it is stopped as a hang.
      function: the function's name in the file, if it is not the problem's name.
      seed: the seed of the fresh random cases added to the problem's own; the
        report prints it, so a check can be repeated on the same cases. None picks
        a new one.
      processes: above 1, each device count above 1 runs on a cluster of that many
        JAX processes on this machine (JAX's distributed runtime on 127.0.0.1, gloo
        collectives), each with its share of the devices: with the default device
        counts, ``processes=2`` checks on 1 device and on 2 processes x 4 devices,
        where each process holds only its own blocks of a sharded array, as a host
        of a GPU or TPU cluster does. Each process sends back the blocks it holds;
        the checker puts the output together from them. A hang or a crash in any
        process stops the whole cluster; the next cases run on a fresh one.
      deadline: seconds the whole check may take; cases not finished by then are
        reported as not run (the report prints it).
      refusals: also run the inputs the statement refuses, one per clause of its
        "Raises" section (:attr:`~shard_tutorial.problem.Problem.refusals`), after
        the other cases: each passes only if the solution raises the error the
        statement names, which is as much its contract as the answers are. On by
        default; False leaves them out, for a report on the values and the sharding
        alone (the pages do so for their examples of sharding mistakes, which check
        no arguments).

    Returns:
      A :class:`CheckReport`; ``report.passed`` says whether every case passed.

    Raises:
      KeyError: for an unknown problem.
      FileNotFoundError: if ``solution`` names a file that does not exist.
      IsADirectoryError: if ``solution`` names a directory.
      TypeError: for a timeout or a seed that is not a number, or ``refusals`` not a bool.
      ValueError: for a device count below 1, a timeout that is not positive, a
        negative seed, or ``processes`` below 1 or not dividing a device count above 1.
      KeyboardInterrupt: when interrupted; the workers are stopped first.

    Examples:
      A solution of the reader's, checked on 1 and 8 devices. It refuses what the
      statement's "Raises" section refuses (anything but a 1-D array of numbers),
      as the check asks by default:

      >>> import jax
      >>> from jax.sharding import NamedSharding, PartitionSpec as P
      >>> from shard_tutorial import check
      >>> def double(x):
      ...     from shard_tutorial import data_mesh
      ...     if not isinstance(x, jax.Array) or x.dtype == bool:
      ...         raise TypeError(f"x must be an array of numbers, not {type(x).__name__}")
      ...     if x.ndim != 1:
      ...         raise ValueError(f"x must be 1-D, got shape {x.shape}")
      ...     mesh = data_mesh(len(x))
      ...     x = jax.device_put(x, NamedSharding(mesh, P("data")))
      ...     twice = jax.shard_map(lambda b: b * 2.0, mesh=mesh, in_specs=P("data"),
      ...                           out_specs=P("data"))
      ...     return twice(x)
      >>> report = check("shard_map_double", double, seed=7)
      >>> report.passed, [run.name for run in report.runs]
      (True, ['1 device', '8 devices'])
      >>> print(report.verdict())
      PASSED: every case on 1 and 8 devices
      >>> [r.label for r in report.runs[0].results if r.raises is None][-1]  # from seed 7
      'random: length 191, int32'
      >>> last = report.runs[0].results[-1]  # the refused inputs come last
      >>> last.row_label, last.arguments, last.status
      ('refused (ValueError): a 2-D x', 'x=float32[1,2]', 'pass')

      The same doubling without the checks of its arguments computes an answer
      for inputs the statement refuses, and fails them; ``refusals=False`` judges
      the other cases alone:

      >>> def unchecked(x):
      ...     from shard_tutorial import data_mesh
      ...     mesh = data_mesh(len(x))
      ...     x = jax.device_put(x, NamedSharding(mesh, P("data")))
      ...     twice = jax.shard_map(lambda b: b * 2.0, mesh=mesh, in_specs=P("data"),
      ...                           out_specs=P("data"))
      ...     return twice(x)
      >>> report = check("shard_map_double", unchecked, devices=(1,), seed=7)
      >>> print(report.verdict())
      FAILED (1 device: 3 of 18 cases failed)
      >>> [r.row_label for r in report.runs[0].results if r.status == "fail"][-1]
      'refused (ValueError): a 2-D x'
      >>> check("shard_map_double", unchecked, devices=(1,), seed=7, refusals=False).passed
      True

      The same on a cluster of 2 processes of 4 devices each:

      >>> report = check("shard_map_double", double, seed=7, processes=2)
      >>> print(report.verdict())
      PASSED: every case on 1 device and 2 processes x 4 devices

      The package's own solution is not the reader's:

      >>> from shard_tutorial import shard_map_double
      >>> report = check("shard_map_double", shard_map_double, seed=7)
      >>> report.runs[1].results[0].status
      'reference'
    """
    problem = problem if isinstance(problem, Problem) else get_problem(problem)
    counts = tuple(devices)
    if not counts or not all(type(n) is int and n >= 1 for n in counts):
        msg = f"devices must be device counts (ints >= 1), such as (1, 8); got {devices!r}"
        raise ValueError(msg)
    if type(processes) is not int or processes < 1:
        msg = f"processes must be a whole number >= 1, got {processes!r}"
        raise ValueError(msg)
    if not isinstance(refusals, bool):
        msg = f"refusals must be True or False, got {type(refusals).__name__} {refusals!r}"
        raise TypeError(msg)
    wrong = [n for n in counts if n > 1 and n % processes]
    if wrong:
        msg = (
            f"processes={processes} must divide every device count above 1, but not "
            f"{wrong[0]}: each process of a cluster gets the same number of devices"
        )
        raise ValueError(msg)
    timeout = require_seconds(timeout, "timeout")
    deadline = require_seconds(deadline, "deadline", finite=False)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        msg = f"seed must be a whole number, got {type(seed).__name__} {seed!r}"
        raise TypeError(msg)
    if seed is not None and seed < 0:
        msg = f"seed must be at least 0, got {seed}"
        raise ValueError(msg)
    start = time.perf_counter()
    spec, described, load_error = _solution_spec(problem, solution, function)
    cases = list(problem.cases)
    if problem.generate is not None:
        seed = secrets.randbelow(10**6) if seed is None else seed
        rng = np.random.default_rng(seed)
        cases += [problem.generate(rng) for _ in range(RANDOM_CASES)]
    else:
        seed = None
    if refusals:
        cases += problem.refusals  # last: the worker lays out none of them (worker.py)
    if load_error is not None:
        runs = tuple(DeviceRun(n, (), load_error, processes if n > 1 else 1) for n in counts)
        notes: tuple[str, ...] = ()
    else:
        _end_orphans()  # what checks in processes that were killed left running
        checking = _Check(
            problem, tuple(cases), spec, timeout, threading.Event(),
            deadline=time.monotonic() + deadline, seconds=deadline,
        )  # fmt: skip
        pool = ThreadPoolExecutor(len(counts))
        with ZYGOTES.checking():  # the zygotes its workers are forked from
            try:
                futures = [pool.submit(checking.run, n, processes if n > 1 else 1) for n in counts]
                runs = tuple(future.result() for future in futures)
            except BaseException:
                checking.cancel.set()
                raise
            finally:
                pool.shutdown()
        notes = checking.notes()
    if INTERRUPTED.is_set():
        raise KeyboardInterrupt
    return CheckReport(
        problem.name, described, runs, time.perf_counter() - start, seed, notes, deadline
    )


def reference_copy(problem: str | Problem, directory: str | os.PathLike[str] | None = None) -> Path:
    """The problem's reference module, copied into a file of the reader's, as one would paste it.

    The checker judges code of the reader's: given the package's own reference (or
    a function that calls it) it answers REFERENCE. A copy of the reference's
    source in a file of one's own is code of one's own, and passes: the pages
    use it to show a passing report.

    Args:
      problem: the problem, or its name.
      directory: where to write ``<name>.py``; None: a new temporary directory.

    Returns:
      The path of the copy.

    Examples:
      >>> from shard_tutorial import reference_copy
      >>> path = reference_copy("shard_map_psum")
      >>> path.name, "def shard_map_psum(" in path.read_text()
      ('shard_map_psum.py', True)
    """
    import inspect  # noqa: PLC0415
    import shutil  # noqa: PLC0415

    problem = problem if isinstance(problem, Problem) else get_problem(problem)
    folder = (
        Path(tempfile.mkdtemp(prefix="shard-tutorial-")) if directory is None else Path(directory)
    )
    path = folder / f"{problem.name}.py"
    shutil.copyfile(inspect.getfile(problem.reference), path)
    return path


def _solution_spec(
    problem: Problem, solution: object, function: str | None
) -> tuple[dict[str, Any], str, str | None]:
    """What the workers load, a description of it, and why it cannot be sent, if so."""
    if isinstance(solution, str | os.PathLike):
        path = Path(solution).resolve()
        name = function or problem.name
        if path.is_dir():
            msg = f"solution {str(solution)!r} is a directory, not the .py file that defines {name}"
            raise IsADirectoryError(msg)
        if not path.is_file():
            msg = f"solution file {str(solution)!r} does not exist"
            raise FileNotFoundError(msg)
        return {"kind": "file", "path": str(path), "function": name}, f"{name} in {solution}", None
    if not callable(solution):
        msg = (
            f"solution must be a function or the path of a .py file, got {type(solution).__name__}"
        )
        raise TypeError(msg)
    if function is not None:
        msg = f"function={function!r} names a function in a file; solution is a function already"
        raise ValueError(msg)
    import cloudpickle  # noqa: PLC0415 (only needed here)

    described = f"function {getattr(solution, '__qualname__', repr(solution))}"
    module = sys.modules.get(getattr(solution, "__module__", "") or "")
    # Functions of installed packages travel by name; anything else (a notebook, a
    # script, a test module) by value, as a fresh process may not be able to import it.
    by_value = module is not None and module.__name__ != "__main__" and not _installed(module)
    try:
        if by_value:
            cloudpickle.register_pickle_by_value(module)
        payload = cloudpickle.dumps(solution)
    except Exception as error:  # noqa: BLE001 (whatever the function holds on to)
        return (
            {},
            described,
            (
                f"{type(error).__name__}: {error}\nThe function could not be sent to a fresh "
                "process: something it uses cannot be copied (a mesh, an open file, a lock...). "
                "Create such things inside the function."
            ),
        )
    finally:
        if by_value:
            cloudpickle.unregister_pickle_by_value(module)
    return {"kind": "pickle", "pickle": payload}, described, None


def _installed(module: ModuleType) -> bool:
    """Whether ``module`` comes from the standard library or an installed package."""
    filename = getattr(module, "__file__", None)
    return filename is None or is_library_file(filename)  # no file: built in


_Worker = subprocess.Popen[bytes] | Forked
"""A worker process: started afresh, or forked from a zygote."""


@dataclasses.dataclass
class _Outcome:
    """What one worker process did, from the case it started at."""

    results: dict[int, CaseResult]
    stopped: tuple[int, str, str] | None = None  # case, status, message: a hang or a crash
    load_error: str | None = None


@dataclasses.dataclass
class _Check:
    """One check: the cases, the solution, and what the workers said about it."""

    problem: Problem
    cases: tuple[Case, ...]
    spec: dict[str, Any]
    timeout: float
    cancel: threading.Event
    deadline: float = math.inf  # time.monotonic() after which no case starts
    seconds: float = math.inf  # the deadline, as the caller gave it
    x64: bool = False

    def notes(self) -> tuple[str, ...]:
        """What the report says besides the verdict."""
        notes = []
        if self.x64:
            notes.append(
                "the solution turns on jax_enable_x64; the answers are still expected in the "
                "dtypes JAX gives by default (float32, int32)."
            )
        return tuple(notes)

    def result(
        self, index: int, status: str, message: str = "", seconds: float = 0.0
    ) -> CaseResult:
        """Case ``index``'s result, with its label, its arguments and any error it asks for."""
        case = self.cases[index]
        return CaseResult(
            case.label, self.problem.describe(case), Verdict(status), message, seconds, case.raises
        )

    def run(self, devices: int, processes: int = 1) -> DeviceRun:
        """Every case on ``devices`` devices, in as few workers (clusters) as it allows."""
        results: dict[int, CaseResult] = {}
        start, lost_in_a_row, hangs = 0, 0, 0
        while start < len(self.cases) and not self._cancelled():
            outcome = self._session(devices, start, processes)
            if outcome.load_error is not None:
                return DeviceRun(devices, (), outcome.load_error, processes)
            results.update(outcome.results)
            if outcome.stopped is None:
                break
            index, status, message = outcome.stopped
            # A hang lasted the timeout; a crash's moment is unknown.
            seconds = self.timeout if status == Verdict.TIMEOUT else 0.0
            results[index] = self.result(index, status, message, seconds)
            lost_in_a_row = lost_in_a_row + 1 if not outcome.results else 1
            hangs += status == Verdict.TIMEOUT
            start = index + 1
            if time.monotonic() > self.deadline:
                for rest in range(start, len(self.cases)):
                    results[rest] = self.result(
                        rest,
                        Verdict.NOT_RUN,
                        f"not run: the check's deadline of {self.seconds:g} s was reached",
                    )
                break
            if lost_in_a_row >= MAX_LOST or hangs >= MAX_HANGS:
                why = f"{hangs} hangs" if hangs >= MAX_HANGS else f"{lost_in_a_row} cases in a row"
                for rest in range(start, len(self.cases)):
                    results[rest] = self.result(
                        rest,
                        Verdict.NOT_RUN,
                        f"not run, after {why} that stopped the process running the solution",
                    )
                break
        ordered = tuple(
            results.get(i) or self.result(i, Verdict.NOT_RUN) for i in range(len(self.cases))
        )
        return DeviceRun(devices, ordered, processes=processes)

    def _cancelled(self) -> bool:
        return self.cancel.is_set() or INTERRUPTED.is_set()

    def _session(self, devices: int, start: int, processes: int = 1) -> _Outcome:
        """Run the cases from ``start`` on in one worker, or a cluster, until done or lost.

        A cluster is ``processes`` workers; every worker's group is ended after.
        """
        cluster = None
        if processes > 1:
            cluster = {
                "coordinator": f"127.0.0.1:{bindable_port(None)}",
                "processes": processes,
                "parent": os.getpid(),
            }
        # Marks the processes of this session (and only this one: the other device
        # counts' sessions run at the same time) for _end_descendants; the pid first,
        # for _end_orphans.
        token = f"{os.getpid()}-{secrets.token_hex(8)}"
        with contextlib.ExitStack() as stack:
            workers: list[_Worker] = []
            channels: list[int] = []
            # What each worker prints goes to a file with no name (nothing is left on
            # disk, whatever ends the check, and the solution cannot remove it).
            outputs: list[BinaryIO] = []

            def end_all() -> None:
                grace = 0 if self._cancelled() else EXIT_GRACE
                for worker in workers:  # a cluster's: at once, its answers are in
                    _end_session(worker, grace=grace if len(workers) == 1 else 0)
                _end_descendants(token)  # what the solution started in sessions of its own

            stack.callback(_close_all, channels)
            stack.callback(lambda: [output.close() for output in outputs])
            stack.callback(end_all)
            for index in range(processes):
                read_end, write_end = os.pipe()  # neither is inherited, except as pass_fds says
                channels.append(read_end)
                # Closed by the callback above, when the session ends.
                outputs.append(tempfile.TemporaryFile(prefix="shard-tutorial-check-"))  # noqa: SIM115
                try:
                    member = None if cluster is None else {**cluster, "process": index}
                    workers.append(
                        self._start_worker(
                            devices // processes, start, outputs[-1], write_end, token, member
                        )
                    )
                finally:
                    os.close(write_end)  # the worker holds its own copy
            return _Follow(self, workers, channels, outputs, devices).events(start)

    def _start_worker(
        self,
        devices: int,
        start: int,
        output: BinaryIO,
        fd: int,
        token: str,
        cluster: dict[str, Any] | None = None,
    ) -> _Worker:
        """Start a worker in a session of its own, limit it, then send it its request.

        The worker is forked from a zygote where one can run, else started afresh.

        Raises:
          _Cancelled: if the check was cancelled while the zygote was still starting.
        """
        env = {
            **_worker_environment(),
            # Inherited by everything the solution starts, even in a session of its own:
            # how those processes are found and ended with the check (_end_descendants).
            _TOKEN: token,
        }
        process: _Worker
        forked = ZYGOTES.spawn(
            env, frozenset({_TOKEN}), output.fileno(), fd,
            # Stop waiting for a zygote still importing JAX when the check is cancelled,
            # or past its deadline: a worker started afresh then reports that, as before.
            give_up=lambda: self._cancelled() or time.monotonic() > self.deadline,
        )  # fmt: skip
        if forked is not None:
            # A forked worker dies with the zygote, which dies with the checker.
            process, parent, channel = forked, forked.parent, forked.channel
        elif self._cancelled():
            raise _Cancelled
        else:
            process = subprocess.Popen(
                [sys.executable, "-m", "shard_tutorial.checking.worker"],
                stdin=subprocess.PIPE,
                stdout=output,
                stderr=subprocess.STDOUT,
                pass_fds=(fd,),
                env=env,
                start_new_session=True,  # its own process group: ended as a whole
            )
            parent, channel = os.getpid(), fd
        request = {
            "solution": self.spec,
            "devices": devices,
            "cases": [case.args for case in self.cases],
            "refusals": sum(case.raises is not None for case in self.cases),  # the last ones
            "start": start,
            "fd": channel,
            "cluster": None if cluster is None else {**cluster, "parent": parent},
            "arrange": _qualified(self.problem.arrange),
            "limits": _qualified(self.problem.budget.limits if self.problem.budget else None),
            "grown": _qualified(self.problem.budget.grown if self.problem.budget else None),
            "stays": list(_stays(self.problem)),
            "parent": parent,  # the worker dies with the checker, even by SIGKILL
        }
        assert process.stdin is not None
        try:
            # The worker waits for its request before it runs a line of the solution's,
            # so these limits hold from the first line on.
            resource.prlimit(process.pid, resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
            resource.prlimit(process.pid, resource.RLIMIT_FSIZE, (OUTPUT_LIMIT, OUTPUT_LIMIT))
            process.stdin.write(pickle.dumps(request))
            process.stdin.close()
        except OSError:  # it died already: _Follow reports how
            pass
        except BaseException:
            _end_session(process, grace=0)
            raise
        return process


def _worker_environment() -> dict[str, str]:
    """The environment of a worker but for the check's token: the checker's, and its path."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}


def _stays(problem: Problem) -> tuple[int, ...]:
    """The positions of the arguments whose data the problem keeps on its devices."""
    technique = problem.technique
    return () if technique is None or technique.stays is None else technique.stays.arguments


def _qualified(function: Callable[..., Any] | None) -> str | None:
    """``"module:qualname"`` of a module-level function, for a worker to import it by."""
    if function is None:
        return None
    return f"{function.__module__}:{function.__qualname__}"


def _close_all(channels: list[int]) -> None:
    """Close the read ends of the workers' pipes."""
    for channel in channels:
        os.close(channel)


class _Follow:
    """Read the reports of a worker (or a cluster's) until done, hung, dead or cancelled.

    A case is judged once every process has answered it; a cluster's processes each
    send the shards they hold, and the global output is put back together here.
    """

    def __init__(
        self,
        check: _Check,
        processes: list[_Worker],
        channels: list[int],
        outputs: list[BinaryIO],
        devices: int,
    ) -> None:
        self.check, self.processes, self.devices = check, processes, devices
        self.channels, self.outputs = channels, outputs
        count = len(processes)
        self.outcome = _Outcome({})
        self.phases = ["starting"] * count  # then "loading", then "running"
        self.current: int | None = None  # the first case not answered by every process
        self.at: list[int | None] = [None] * count  # the case each process runs now
        self.answers: dict[int, dict[int, tuple[dict[str, Any], bytes]]] = {}
        self.deadline = time.monotonic() + STARTUP_TIMEOUT
        # The running case's clock: (when, CPU seconds) at its start and at the start of the
        # window in which idleness is measured (see DEFAULT_TIMEOUT).
        self.started: tuple[float, float] = (0.0, 0.0)
        self.window: tuple[float, float] = (0.0, 0.0)
        self.hang = "idle"  # how the running case was found hung: "idle" or "cpu"
        self.buffers = [bytearray() for _ in range(count)]
        self.scanned = [0] * count  # where in its buffer to look for a report's end
        self.wanted = [0] * count  # the buffer's length at which a report is whole
        self.finished: set[int] = set()  # processes that said they are done
        self.done = False

    @property
    def phase(self) -> str:
        """The phase of the process furthest behind."""
        return min(self.phases, key=_PHASES.index)

    def _who(self, process: int) -> str:
        """``"process 1 of 2: "`` on a cluster, nothing for a single process."""
        count = len(self.processes)
        return f"process {process} of {count}: " if count > 1 else ""

    def events(self, start: int) -> _Outcome:
        self.current = start
        with selectors.DefaultSelector() as selector:
            for index, channel in enumerate(self.channels):
                os.set_blocking(channel, False)
                selector.register(channel, selectors.EVENT_READ, index)
            while not self.done:
                if self.check._cancelled():
                    for process in self.processes:
                        _end_session(process, grace=0)
                    raise _Cancelled
                for key, _ in selector.select(_POLL):
                    index = key.data
                    if not self._read(index):  # its pipe closed
                        selector.unregister(key.fd)
                        if index not in self.finished and not self.done:
                            self._ended(index, _wait_exit(self.processes[index], EXIT_GRACE))
                    if self.done:
                        break
                if self.done:
                    break
                for index, process in enumerate(self.processes):
                    status = _exit_status(process)
                    if status is not None and index not in self.finished:
                        self._read(index)  # what it wrote before it ended
                        if index not in self.finished:
                            self._ended(index, status)  # does nothing once done
                        if self.done:
                            break
                if self.done:
                    break
                now = time.monotonic()
                if now > self.check.deadline:
                    self._overdue()
                    break
                if now > self.deadline and not self._still_computing(now):
                    self._hung()
                    break
        return self.outcome

    def _read(self, index: int) -> bool:
        """Take in what a worker wrote; False once its pipe is closed.

        Returns to the caller within :data:`_READ_SLICE` seconds even while the worker
        writes without pause, so the case's limits are still watched.
        """
        until = time.monotonic() + _READ_SLICE
        while not self.done:
            try:
                chunk = os.read(self.channels[index], 1 << 20)
            except BlockingIOError:
                return True
            if not chunk:
                return False
            self.buffers[index] += chunk
            if len(self.buffers[index]) >= self.wanted[index]:
                self._frames(index)
            if time.monotonic() > until:
                return True
        return True

    def _frames(self, index: int) -> None:
        """Take every whole report out of the worker's buffer.

        A report is a line of JSON, then ``nbytes`` of values. The buffer is a
        ``bytearray`` that grows in place, and a report's end is looked for only
        in the bytes that arrived since the last look, so reading an answer of any
        size takes time in proportion to it.
        """
        buffer = self.buffers[index]
        while not self.done:
            end = buffer.find(b"\n", self.scanned[index])
            if end < 0:
                self.scanned[index] = len(buffer)
                if len(buffer) > _HEADER_LIMIT:
                    self._garbled(index)  # bytes with no end of line: not a report
                return
            try:
                event = json.loads(bytes(buffer[:end]))
                size = int(event.get("nbytes", 0))
            except (ValueError, AttributeError, TypeError, RecursionError):
                self._garbled(index)
                return
            if not 0 <= size <= _PAYLOAD_LIMIT:
                self._garbled(index)
                return
            if len(buffer) - end - 1 < size:
                self.scanned[index] = end  # the values have not all arrived
                self.wanted[index] = end + 1 + size
                return
            payload = bytes(buffer[end + 1 : end + 1 + size])
            del buffer[: end + 1 + size]
            self.scanned[index], self.wanted[index] = 0, 0
            try:
                self._event(index, event, payload)
            except (KeyError, TypeError, ValueError, IndexError):
                self._garbled(index)

    def _event(self, process: int, event: dict[str, Any], payload: bytes) -> None:
        kind = event["event"]
        now = time.monotonic()
        before = self.phase
        if kind == "loading":
            self.phases[process] = "loading"
        elif kind == "load_error":
            self.outcome.load_error = str(event["message"])
            self.done = True
        elif kind == "ready":
            self.check.x64 |= event["x64"] is True
            self.phases[process] = "running"
        elif kind == "start":
            self.at[process] = int(event["case"])
        elif kind in {"output", "raised"}:
            index = int(event["case"])
            if index != self.at[process]:
                raise ValueError(index)
            answers = self.answers.setdefault(index, {})
            answers[process] = (event, payload)
            if len(answers) == len(self.processes):
                self._verdict(index, answers)
                del self.answers[index]
                self.current = index + 1 if index + 1 < len(self.check.cases) else None
                self._start_clock(now)
        elif kind == "done":
            self.finished.add(process)
            self.done = len(self.finished) == len(self.processes)
        else:
            raise ValueError(kind)
        if self.phase != before:
            if self.phase == "loading":
                self.deadline = now + LOAD_TIMEOUT
            else:
                self._start_clock(now)

    def _start_clock(self, now: float) -> None:
        """A case starts running: ``timeout`` from now, and its CPU time from here."""
        self.deadline = now + self.check.timeout
        self.started = self.window = (now, self._cpu_seconds())

    def _cpu_seconds(self) -> float:
        """The CPU time the workers have used so far, every thread of each included."""
        return sum(cpu_seconds(process.pid) for process in self.processes)

    def _still_computing(self, now: float) -> bool:
        """Past the wall-clock deadline: whether the running case is computing, not hung.

        A case that keeps using the CPU is given more time, until it has used
        ``timeout`` seconds of CPU on each core the checker may use; one that used
        less than :data:`IDLE_SHARE` of a core since the last look is idle, and hung.
        """
        if self.phase != "running":
            return False
        cpu = self._cpu_seconds()
        window = max(now - self.window[0], 1e-9)
        if cpu - self.started[1] > self.check.timeout * _cores():
            self.hang = "cpu"
            return False
        if (cpu - self.window[1]) / window < IDLE_SHARE:
            self.hang = "idle"
            return False
        self.window = (now, cpu)
        self.deadline = now + max(1.0, self.check.timeout / 5)
        return True

    def _verdict(self, index: int, answers: dict[int, tuple[dict[str, Any], bytes]]) -> None:
        """Judge case ``index`` from every process' answer, and record the result."""
        made = {p: _decoded(*answers[p]) for p in sorted(answers)}
        raised = [(p, m) for p, m in made.items() if isinstance(m, Raised)]
        decoded = [m for m in made.values() if isinstance(m, Answer)]
        seconds = 0.0
        case = self.check.cases[index]
        if case.raises is not None:  # an input the statement refuses: every process must
            failed = [judge_refusal(case, m) for m in made.values()]
            status, message = next((v for v in failed if v[0] != Verdict.PASS), failed[0])
        elif raised:
            process, error = raised[0]
            status, message = judge_raised(error)
            message = self._who(process) + message
            if status == Verdict.MEMORY:
                message = _memory_message(message)
        elif len(decoded) == 1:
            (answer,) = decoded
            status, message = judge(self.check.problem, case, answer, self.devices)
            seconds = answer.seconds or 0.0
        else:
            status, message = judge_cluster(self.check.problem, case, decoded, self.devices)
            seconds = max(answer.seconds or 0.0 for answer in decoded)
        self.outcome.results[index] = self.check.result(index, status, message, seconds)

    def _garbled(self, process: int) -> None:
        message = (
            "the checker received something that is not a report on its channel from the "
            "process running the solution: does the solution write to file descriptors it "
            "did not open?"
        )
        self._stop_with(Verdict.CRASH, self._who(process) + message)

    def _stop_with(self, status: str, message: str, *, running: bool | None = None) -> None:
        # ``running``: whether the process that failed was past loading. On a cluster it
        # can be, and fail its first case, while another process is still loading.
        running = self.phase == "running" if running is None else running
        if not running or self.current is None:
            self.outcome.load_error = self.outcome.load_error or message
        else:
            self.outcome.stopped = (self.current, status, message)
        self.done = True

    def _overdue(self) -> None:
        """The check's overall deadline passed: this case is stopped, the rest not run."""
        message = (
            f"stopped: the check's deadline of {self.check.seconds:g} s was reached (each "
            f"case may take {self.check.timeout:g} s; is the solution, or its file's "
            "imports, much slower than it needs to be?)"
        )
        self._stop_with(Verdict.TIMEOUT, message, running=self.phase == "running")

    def _hung(self) -> None:
        waiting = [
            p
            for p in range(len(self.processes))
            if self.phases[p] == self.phase and p not in self.answers.get(self.current or 0, {})
        ]
        who = ""
        if len(self.processes) > 1:
            names = ", ".join(map(str, waiting))
            who = f"process{'es' if len(waiting) > 1 else ''} {names} of {len(self.processes)}: "
        if self.phase == "starting":
            message = f"JAX did not start within {STARTUP_TIMEOUT:.0f} s: is the machine busy?"
        elif self.phase == "loading":
            message = (
                f"loading the solution took more than {LOAD_TIMEOUT:.0f} s; does the file "
                "run something slow or endless when it is imported?"
            )
        elif self.hang == "cpu":
            used = self._cpu_seconds() - self.started[1]
            message = (
                f"stopped after {time.monotonic() - self.started[0]:.0f} s, having used "
                f"{used:.0f} s of CPU time, the limit of --timeout {self.check.timeout:g} "
                f"on {_cores()} core{'s' if _cores() != 1 else ''}: an endless loop? If the "
                "solution is right but slow (an eager shard_map compiles every operation "
                "on its own: jax.jit it), raise the limit with --timeout SECONDS "
                "(timeout= from Python)"
            )
        else:
            message = (
                f"stopped after {time.monotonic() - self.started[0]:.0f} s, the last "
                f"{time.monotonic() - self.window[0]:.0f} s of them idle (using almost no "
                "CPU): a long sleep, or a collective (such as psum) that some devices never "
                f"reach? (--timeout {self.check.timeout:g} sets how long a case may wait)"
            )
            if len(self.processes) > 1:
                message += " Every process of the cluster was stopped."
        self._stop_with(Verdict.TIMEOUT, who + message)

    def _ended(self, process: int, status: int | None) -> None:
        """A worker ended (exit ``status``, negative for a signal) before it was done."""
        if self.done:
            return
        tail = _tail(self.outputs[process])
        how = _how_it_ended(status)
        who = self._who(process)
        if self.phases[process] == "starting":
            message = who + f"the checking process failed to start ({how})"
            self._stop_with(
                Verdict.CRASH, message + (f"; its last output:\n{tail}" if tail else "")
            )
            return
        if self.phases[process] == "loading":
            if any(sign in tail for sign in MEMORY_SIGNS):
                self._stop_with(Verdict.MEMORY, _memory_message(who + "while the file was loaded"))
                return
            message = who + (
                f"the process ended while your file was being loaded ({how}): does the "
                "file call os._exit(), exit() or os.abort() at its top level?"
            )
            self._stop_with(
                Verdict.CRASH, message + (f"\nIts last output:\n{tail}" if tail else "")
            )
            return
        if self.current is None:  # every case had its answer; only the goodbye is missing
            self.finished.add(process)
            self.done = len(self.finished) == len(self.processes)
            return
        if status in {-signal.SIGABRT, 134} and "may be stuck" in tail:
            self._stop_with(
                Verdict.TIMEOUT,
                who + "a collective that not every device reached: XLA stopped the process "
                "after waiting for the devices that never called it (a psum inside an if, or a "
                "different number of collectives per device?)",
                running=True,
            )
        elif any(sign in tail for sign in MEMORY_SIGNS):
            self._stop_with(
                Verdict.MEMORY, _memory_message(who + tail.splitlines()[-1]), running=True
            )
        else:
            message = who + (
                f"the process running the solution ended ({how}) during this case"
                + (": does the solution call os._exit()?" if status == 0 else "")
                + (f"; its last output:\n{tail}" if tail else "")
            )
            if len(self.processes) > 1:
                message += "\n(Every process of the cluster was stopped.)"
            self._stop_with(Verdict.CRASH, message, running=True)


_PHASES = ["starting", "loading", "running"]


def _cores() -> int:
    """The cores this process may run on: the CPU a case may use per second of wall time."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class _Cancelled(Exception):
    """The check was interrupted (Ctrl-C): its workers are killed, nothing is reported."""


def _decoded(event: dict[str, Any], payload: bytes) -> Answer | Raised:
    """What a worker's ``"output"`` or ``"raised"`` report says."""
    return decode_raised(event) if event["event"] == "raised" else decode_answer(event, payload)


def _memory_message(detail: str) -> str:
    return (
        f"used more than {MEMORY_LIMIT / 2**30:g} GiB of memory, the checker's limit: does "
        f"the solution build something that grows without end? ({detail.strip()[:300]})"
    )


def _exit_status(process: _Worker) -> int | None:
    """The worker's exit status (negative: killed by that signal) if it ended, else None.

    The worker is not reaped, so its process group cannot be reused before it is ended.
    """
    if isinstance(process, Forked):  # the zygote's child: the zygote says
        return process.exit_status()
    if process.returncode is not None:
        return process.returncode
    try:
        info = os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return process.poll()
    if info is None or info.si_pid == 0:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def _wait_exit(process: _Worker, grace: float) -> int | None:
    """The worker's exit status once it ended, waiting at most ``grace`` seconds."""
    deadline = time.monotonic() + grace
    while (status := _exit_status(process)) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return status


def _end_session(process: _Worker, grace: float) -> None:
    """Let the worker exit within ``grace`` seconds, then kill its whole process group."""
    _wait_exit(process, grace)
    # What the worker started in sessions of their own, its environment dropped (so no
    # token shows): still below it in the process tree while it lives.
    kill_descendants(process.pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone
        os.killpg(process.pid, signal.SIGKILL)  # the worker and all it started
    process.wait()


def _how_it_ended(status: int | None) -> str:
    if status is None:
        return "it closed its channel to the checker"
    if status < 0:
        return f"killed by {signal_name(-status)}"
    return f"exit status {status}"


def _tail(output: BinaryIO, size: int = 2000) -> str:
    """The end of what the worker printed (it may have printed a lot)."""
    try:
        end = output.seek(0, os.SEEK_END)
        output.seek(max(0, end - size))
        return output.read().decode(errors="replace").strip()
    except (OSError, ValueError):  # closed, or not seekable: nothing to show
        return ""


_TOKEN = "SHARD_TUTORIAL_CHECK"
"""The environment variable that marks every process of a check, with the check's token."""
# The zygote of the environment the checker is imported in lasts as long as the process.
ZYGOTES.home(_worker_environment(), frozenset({_TOKEN}))


def _end_descendants(token: str) -> None:
    """Kill every process whose environment carries ``token``: what a check left running.

    A solution may start a process in a session of its own, out of reach of the
    worker's process group; it inherits the worker's environment, so it is found
    here by the token (Linux's ``/proc``; elsewhere nothing is done).
    """
    marker = f"{_TOKEN}={token}".encode()
    for pid, variables in environments():
        if marker in variables:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def _end_orphans() -> None:
    """Kill what earlier checks in processes that are gone left running (a killed kernel).

    A check's token starts with the pid of the process that ran it; a process that
    still carries the token of a process that no longer exists is an orphan.
    """
    prefix = f"{_TOKEN}=".encode()
    for pid, variables in environments():
        for variable in variables:
            if variable.startswith(prefix):
                owner = variable[len(prefix) :].split(b"-")[0]
                if owner.isdigit() and not Path(f"/proc/{int(owner)}").exists():
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
