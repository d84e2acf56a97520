"""Check a solution to a problem, on one device and on many, and say what is wrong.

The device count of a JAX process is fixed when JAX starts, so each device count runs
in a fresh Python process (:mod:`shard_tutorial._check_worker`), by default 1 and 8
fake CPU devices at the same time. Each runs the problem's cases (the same
:attr:`~shard_tutorial.problem.Problem.cases` the package's tests use) and compares every
answer with the problem's NumPy oracle. A case that runs longer than ``timeout`` (an
endless loop, a collective that some devices never reach) is stopped and reported, and
the remaining cases run in a new process; so is a case that crashes its process.

From Python or a notebook, pass the function; from a terminal, the file that defines it::

    report = check("shard_map_psum", my_shard_map_psum)
    python -m shard_tutorial check shard_map_psum my_solution.py
"""

from __future__ import annotations

import dataclasses
import html
import json
import math
import os
import pickle
import selectors
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

from shard_tutorial._check_worker import is_library_file
from shard_tutorial.problem import Problem
from shard_tutorial.problems import get_problem

__all__ = ["DEFAULT_DEVICES", "DEFAULT_TIMEOUT", "CaseResult", "CheckReport", "DeviceRun", "check"]

DEFAULT_DEVICES = (1, 8)
DEFAULT_TIMEOUT = 30.0
"""Seconds a case may take, compilation included, before it is stopped as a hang."""
STARTUP_TIMEOUT = 120.0
"""Seconds a fresh process may take to start JAX and load the solution."""
_POLL = 0.25  # seconds between looks at whether the check was cancelled
EXIT_GRACE = 10.0
"""Seconds a finished process may take to exit (saving coverage data, say) before it is
killed: a thread the solution started must not keep the check waiting."""

_WRAP = "white-space: pre-wrap"  # a diagnosis is read, not scrolled
_CELL = "padding: 0.1em 1.2em 0.1em 0; text-align: left; white-space: nowrap"
# Green and red that keep 4.5:1 (WCAG AA) on white and on the light grey that
# pydata-sphinx-theme puts behind HTML outputs in dark mode (#ced6dd).
_PASS_COLOUR = "#116329"
_FAIL_COLOUR = "#a40e26"
_SYMBOLS = {
    "pass": "pass",
    "fail": "WRONG",
    "error": "ERROR",
    "timeout": "TIMEOUT",
    "crash": "CRASHED",
    "not run": "-",
}


@dataclasses.dataclass(frozen=True)
class CaseResult:
    """The outcome of one case on one device count.

    Attributes:
      label: what the case exercises.
      arguments: the arguments' shapes and values, e.g. ``"x=float32[32]"``.
      status: ``"pass"``, ``"fail"`` (a wrong answer), ``"error"`` (an exception),
        ``"timeout"``, ``"crash"`` (the process died) or ``"not run"``.
      message: what went wrong; empty when the case passed.
      seconds: how long the case took, compilation included.
    """

    label: str
    arguments: str
    status: str
    message: str = ""
    seconds: float = 0.0


@dataclasses.dataclass(frozen=True)
class DeviceRun:
    """All cases on one device count.

    Attributes:
      devices: the number of fake CPU devices.
      results: one result per case, in the problem's order.
      load_error: why the solution could not be loaded, if it could not.
    """

    devices: int
    results: tuple[CaseResult, ...]
    load_error: str | None = None

    @property
    def passed(self) -> bool:
        """Whether the solution loaded and every case passed."""
        return self.load_error is None and all(r.status == "pass" for r in self.results)

    @property
    def name(self) -> str:
        """``"1 device"`` or ``"8 devices"``."""
        return f"{self.devices} device{'s' if self.devices != 1 else ''}"

    def problems(self) -> list[list[CaseResult]]:
        """The cases that did not pass, grouped when they went wrong the same way."""
        groups: dict[tuple[str, str], list[CaseResult]] = {}
        for result in self.results:
            if result.status not in {"pass", "not run"}:
                groups.setdefault((result.status, result.message), []).append(result)
        return list(groups.values())


@dataclasses.dataclass(frozen=True)
class CheckReport:
    """The verdict on a solution: prints as text, renders as a table in a notebook.

    Attributes:
      problem: the problem's name.
      solution: what was checked, e.g. ``"shard_map_psum in solution.py"``.
      runs: one run per device count.
      seconds: wall time of the whole check.
    """

    problem: str
    solution: str
    runs: tuple[DeviceRun, ...]
    seconds: float

    @property
    def passed(self) -> bool:
        """Whether every case passed on every device count."""
        return all(run.passed for run in self.runs)

    def verdict(self) -> str:
        """One line: passed, or what failed where."""
        if self.passed:
            return f"PASSED: every case on {self._device_counts()}"
        failing = []
        for run in self.runs:
            if run.load_error is not None:
                failing.append(f"{run.name}: could not load the solution")
            elif not run.passed:
                bad = sum(r.status != "pass" for r in run.results)
                failing.append(f"{run.name}: {bad} of {len(run.results)} cases failed")
        return "FAILED (" + "; ".join(failing) + ")"

    def hints(self) -> list[str]:
        """Advice drawn from comparing the device counts."""
        single = next((run for run in self.runs if run.devices == 1 and run.passed), None)
        if single is None:
            return []
        broken = [
            run
            for run in self.runs
            if run.devices > 1 and not run.passed and run.load_error is None
        ]
        if not broken:
            return []
        names = " and ".join(run.name for run in broken)
        hint = (
            f"Every case passes on 1 device, but not on {names}. An answer that changes "
            "with the number of devices usually means a missing collective (psum), an "
            "out_specs that does not describe what each device returns, or code that "
            "assumes one block is the whole array. (On one device, it is.)"
        )
        return [hint]

    def __str__(self) -> str:
        """The report as text for a terminal."""
        lines = [
            f"Checking {self.solution} on {self._device_counts()}: {self.verdict()}",
            "",
        ]
        for run in self.runs:
            if run.load_error is not None:
                lines += [
                    f"{run.name}: the solution could not be loaded:",
                    _indent(run.load_error, 2),
                    "",
                ]
        rows = self._rows()
        if rows:
            headers = ["case", "input", *(run.name for run in self.runs)]
            widths = [
                max(len(str(row[i])) for row in [headers, *rows]) for i in range(len(headers))
            ]
            for row in [headers, *rows]:
                lines.append(
                    "  ".join(
                        str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)
                    ).rstrip()
                )
            lines.append("")
        for run in self.runs:
            groups = run.problems()
            if groups:
                lines.append(f"What went wrong on {run.name}:")
                for results in groups:
                    lines.append(f"  {_cases(results)}: {_SYMBOLS[results[0].status]}")
                    lines.append(_indent(results[0].message, 4))
                lines.append("")
        for hint in self.hints():
            lines += [textwrap.fill("Hint: " + hint, 88), ""]
        lines.append(f"Checked in {self.seconds:.1f} s.")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        """The report as an HTML table, for notebooks."""
        colour = _PASS_COLOUR if self.passed else _FAIL_COLOUR
        heading = (
            f'<div class="shard-tutorial-check"><p><strong style="color:{colour}">'
            f"{html.escape(self.verdict())}</strong> &mdash; {html.escape(self.solution)}, "
            f"{self.seconds:.1f} s</p>"
        )
        parts = [heading]
        for run in self.runs:
            if run.load_error is not None:
                parts.append(
                    f"<p>{run.name}: the solution could not be loaded:</p>"
                    f'<pre style="{_WRAP}">{html.escape(run.load_error)}</pre>'
                )
        rows = self._rows()
        if rows:
            head = "".join(
                f'<th style="{_CELL}">{html.escape(h)}</th>'
                for h in ["case", "input", *(r.name for r in self.runs)]
            )
            body = []
            for row in rows:
                cells = [
                    f'<td style="{_CELL}">{html.escape(row[0])}</td>',
                    f'<td style="{_CELL}"><code>{html.escape(row[1])}</code></td>',
                ]
                for status in row[2:]:
                    tint = _PASS_COLOUR if status == "pass" else _FAIL_COLOUR
                    cells.append(f'<td style="{_CELL}; color:{tint}">{html.escape(status)}</td>')
                body.append("<tr>" + "".join(cells) + "</tr>")
            parts.append(
                f'<div style="overflow-x: auto" tabindex="0"><table><thead><tr>{head}</tr></thead>'
                f"<tbody>{''.join(body)}</tbody></table></div>"
            )
        for run in self.runs:
            for results in run.problems():
                parts.append(
                    f"<p>{html.escape(_cases(results))} on {run.name}: "
                    f"<strong>{_SYMBOLS[results[0].status]}</strong></p>"
                    f'<pre style="{_WRAP}">{html.escape(results[0].message)}</pre>'
                )
        parts += [f"<p><em>Hint:</em> {html.escape(hint)}</p>" for hint in self.hints()]
        return "".join(parts) + "</div>"

    def _device_counts(self) -> str:
        counts = [str(run.devices) for run in self.runs]
        joined = counts[0] if len(counts) == 1 else ", ".join(counts[:-1]) + " and " + counts[-1]
        return f"{joined} device{'s' if counts != ['1'] else ''}"

    def _rows(self) -> list[list[str]]:
        loaded = [run for run in self.runs if run.results]
        if not loaded:
            return []
        first = loaded[0].results
        return [
            [result.label, result.arguments]
            + [_SYMBOLS[run.results[i].status] if run.results else "-" for run in self.runs]
            for i, result in enumerate(first)
        ]


def check(
    problem: str | Problem,
    solution: Callable[..., Any] | str | os.PathLike[str],
    *,
    devices: Sequence[int] = DEFAULT_DEVICES,
    timeout: float = DEFAULT_TIMEOUT,
    function: str | None = None,
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

    Returns:
      A :class:`CheckReport`; ``report.passed`` says whether every case passed.

    Raises:
      KeyError: for an unknown problem.
      FileNotFoundError: if ``solution`` names a file that does not exist.
      ValueError: for a device count below 1 or a timeout that is not positive.

    Examples:
      Checking the reference solution, on 1 and 8 devices:

      >>> from shard_tutorial import check, shard_map_double
      >>> report = check("shard_map_double", shard_map_double)
      >>> report.passed, [run.name for run in report.runs]
      (True, ['1 device', '8 devices'])
      >>> print(report.verdict())
      PASSED: every case on 1 and 8 devices
    """
    problem = problem if isinstance(problem, Problem) else get_problem(problem)
    counts = tuple(devices)
    if not counts or not all(type(n) is int and n >= 1 for n in counts):
        msg = f"devices must be device counts (ints >= 1), such as (1, 8); got {devices!r}"
        raise ValueError(msg)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        msg = f"timeout must be a number of seconds, got {type(timeout).__name__} {timeout!r}"
        raise TypeError(msg)
    if not 0 < timeout < math.inf:
        msg = f"timeout must be a positive, finite number of seconds, got {timeout!r}"
        raise ValueError(msg)
    start = time.perf_counter()
    spec, described, load_error = _solution_spec(problem, solution, function)
    if load_error is not None:
        runs = tuple(DeviceRun(n, (), load_error) for n in counts)
    else:
        cancel = threading.Event()  # set on Ctrl-C: the workers are killed, none restarts
        pool = ThreadPoolExecutor(len(counts))
        try:
            futures = [pool.submit(_run, problem, spec, n, timeout, cancel) for n in counts]
            runs = tuple(future.result() for future in futures)
        except BaseException:
            cancel.set()
            raise
        finally:
            pool.shutdown()
    return CheckReport(problem.name, described, runs, time.perf_counter() - start)


def _solution_spec(
    problem: Problem, solution: object, function: str | None
) -> tuple[dict[str, Any], str, str | None]:
    """What the workers load, a description of it, and why it cannot be sent, if so."""
    if isinstance(solution, str | os.PathLike):
        path = Path(solution).resolve()
        if not path.is_file():
            msg = f"solution file {str(solution)!r} does not exist"
            raise FileNotFoundError(msg)
        name = function or problem.name
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


def _run(
    problem: Problem, spec: dict[str, Any], devices: int, timeout: float, cancel: threading.Event
) -> DeviceRun:
    """Every case on one device count, restarting the worker after a hang or a crash."""
    results: dict[int, CaseResult] = {}
    start = 0
    while start < len(problem.cases) and not cancel.is_set():
        outcome = _worker(problem, spec, devices, start, timeout, cancel)
        if outcome.load_error is not None:
            return DeviceRun(devices, (), outcome.load_error)
        results.update(outcome.results)
        if outcome.stopped is None:
            break
        index, status, message = outcome.stopped
        case = problem.cases[index]
        seconds = timeout if status == "timeout" else 0.0  # a crash's moment is not known
        results[index] = CaseResult(case.label, problem.describe(case), status, message, seconds)
        start = index + 1
    ordered = tuple(
        results.get(i) or CaseResult(case.label, problem.describe(case), "not run")
        for i, case in enumerate(problem.cases)
    )
    return DeviceRun(devices, ordered)


@dataclasses.dataclass
class _Outcome:
    results: dict[int, CaseResult]
    stopped: tuple[int, str, str] | None = None  # case, status, message: a hang or a crash
    load_error: str | None = None


def _worker(
    problem: Problem,
    spec: dict[str, Any],
    devices: int,
    start: int,
    timeout: float,
    cancel: threading.Event,
) -> _Outcome:
    with tempfile.TemporaryDirectory(prefix="shard-tutorial-check-") as scratch:
        read_end, write_end = os.pipe()
        try:
            process = _start_worker(problem, spec, devices, start, Path(scratch), write_end)
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)  # the worker holds its own copy
        try:
            return _follow(problem, process, read_end, start, timeout, cancel, Path(scratch))
        finally:
            _stop(process, grace=0 if cancel.is_set() else EXIT_GRACE)
            os.close(read_end)


def _start_worker(
    problem: Problem, spec: dict[str, Any], devices: int, start: int, scratch: Path, fd: int
) -> subprocess.Popen[bytes]:
    """Start a worker that runs the cases from ``start`` on and reports on ``fd``."""
    request = scratch / "request.pkl"
    request.write_bytes(
        pickle.dumps(
            {
                "problem": problem.name,
                "solution": spec,
                "devices": devices,
                "start": start,
                "fd": fd,
            }
        )
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    with (scratch / "output.txt").open("wb") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "shard_tutorial._check_worker", str(request)],
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            pass_fds=(fd,),
            env=env,
        )


def _stop(process: subprocess.Popen[bytes], grace: float) -> None:
    """Let ``process`` exit by itself within ``grace`` seconds, else kill it."""
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _follow(
    problem: Problem,
    process: subprocess.Popen[bytes],
    channel: int,
    start: int,
    timeout: float,
    cancel: threading.Event,
    scratch: Path,
) -> _Outcome:
    """Read the worker's events until it is done, hangs, dies, or the check is cancelled."""
    outcome = _Outcome({})
    loaded = False
    current: int | None = None  # the case running now, or next once the solution is loaded
    deadline = time.monotonic() + STARTUP_TIMEOUT
    buffer = b""

    def last_output() -> str:
        return (scratch / "output.txt").read_text(errors="replace")[-2000:].strip()

    with selectors.DefaultSelector() as selector:
        selector.register(channel, selectors.EVENT_READ)
        while True:
            if cancel.is_set():
                process.kill()
                raise _Cancelled
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                process.kill()
                if not loaded:
                    outcome.load_error = (
                        f"loading the solution took more than {STARTUP_TIMEOUT:.0f} s; does "
                        "the file run something slow or endless when it is imported?"
                    )
                elif current is not None:
                    message = (
                        f"stopped after {timeout:g} s: an endless loop, or a collective "
                        "(such as psum) that some devices never reach?"
                    )
                    outcome.stopped = (current, "timeout", message)
                return outcome
            if not selector.select(min(remaining, _POLL)):
                continue
            chunk = os.read(channel, 65536)
            if not chunk:  # the worker exited (or closed its end: it is stopped anyway)
                _stop(process, grace=EXIT_GRACE)
                if current is not None:
                    tail = last_output()
                    outcome.stopped = (
                        current,
                        "crash",
                        f"the process running the solution died (exit status "
                        f"{process.returncode}) during this case"
                        + (f"; its last output:\n{tail}" if tail else ""),
                    )
                elif not loaded and outcome.load_error is None:
                    outcome.load_error = f"the checking process failed to start:\n{last_output()}"
                return outcome
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                event = json.loads(line)
                kind = event["event"]
                if kind == "load_error":
                    outcome.load_error = event["message"]
                elif kind == "ready":
                    loaded, current = True, start
                    deadline = time.monotonic() + STARTUP_TIMEOUT
                elif kind == "start":
                    current = event["case"]
                    deadline = time.monotonic() + timeout
                elif kind == "result":
                    index = event["case"]
                    case = problem.cases[index]
                    outcome.results[index] = CaseResult(
                        case.label,
                        problem.describe(case),
                        event["status"],
                        event["message"],
                        event["seconds"],
                    )
                    current = index + 1 if index + 1 < len(problem.cases) else None
                    deadline = time.monotonic() + STARTUP_TIMEOUT
                elif kind == "done":
                    return outcome


class _Cancelled(Exception):
    """The check was interrupted (Ctrl-C): its workers are killed, nothing is reported."""


def _cases(results: list[CaseResult]) -> str:
    """``"<label> (<arguments>)"``, or how many cases and which, for a group."""
    if len(results) == 1:
        return f"{results[0].label} ({results[0].arguments})"
    labels = [f"'{r.label}'" for r in results[:2]]
    more = f" and {len(results) - 2} more" if len(results) > 2 else ""
    return f"{len(results)} cases ({', '.join(labels)}{more})"


def _indent(text: str, spaces: int) -> str:
    wrapped: Iterable[str] = (
        textwrap.fill(line, 88, initial_indent=" " * spaces, subsequent_indent=" " * spaces)
        if len(line) > 88 and not line.startswith("  ")
        else " " * spaces + line
        for line in text.splitlines()
    )
    return "\n".join(wrapped)
