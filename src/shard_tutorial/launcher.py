"""Run one script as a JAX cluster of several processes on this machine.

A GPU or TPU cluster runs one JAX process per host; the processes join through
:func:`jax.distributed.initialize` and form one global set of devices, so a mesh can
span all of them. :func:`launch` does the same on one machine: it starts the script
``processes`` times, each process with ``devices_per_process`` fake CPU devices, and
the processes join through JAX's own distributed runtime on ``127.0.0.1`` (the CPU
collectives across processes go through gloo). The script joins with one line,
:func:`join_cluster`, which does nothing when the script runs on its own.

The launcher never leaves a process behind. Each process runs in its own process
group and is stopped by killing that group (``SIGKILL``: once a process has joined
the cluster, JAX's runtime catches ``SIGTERM`` as a preemption notice and carries
on). The processes are stopped when one of them fails (``grace`` seconds after, so
the others can print their own error), when the run exceeds ``timeout`` seconds (a
hang: a process waits in a collective that another never reaches), and on Ctrl-C.
A process that joined the cluster is also killed by Linux if the launcher itself is
killed.

A script that fails (an uncaught exception, or ``sys.exit`` with a status other
than 0) counts as failed at once, even though its process may not exit for a while:
JAX's exit waits at a barrier for every process, and one waiting in a collective for
the failed process never gets there. Each process runs its script through
:mod:`shard_tutorial._launched`, which tells the launcher the script's status as it
ends; the report names that process and status, and the processes still running
``grace`` seconds later are stopped, the failed one at its barrier included.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from shard_tutorial import _launched
from shard_tutorial.processes import bindable_port, die_with, require_seconds, signal_name
from shard_tutorial.validation import require_count

__all__ = [
    "DEFAULT_GRACE",
    "DEFAULT_TIMEOUT",
    "LaunchResult",
    "ProcessResult",
    "join_cluster",
    "launch",
]

DEFAULT_TIMEOUT = 120.0
"""Seconds a whole run may take before its processes count as hung and are stopped."""

DEFAULT_GRACE = 2.0
"""Seconds the other processes may still run after one fails, before they are stopped."""

# What :func:`launch` tells each process; :func:`join_cluster` reads it.
COORDINATOR = "SHARD_TUTORIAL_COORDINATOR"
PROCESS_ID = "SHARD_TUTORIAL_PROCESS_ID"
NUM_PROCESSES = "SHARD_TUTORIAL_NUM_PROCESSES"
DEVICES_PER_PROCESS = "SHARD_TUTORIAL_DEVICES_PER_PROCESS"
LAUNCHER_PID = "SHARD_TUTORIAL_LAUNCHER_PID"

# What each process runs: `python _launched.py SCRIPT ARGS` runs SCRIPT as `python SCRIPT
# ARGS` would, and writes the script's status to a pipe of the launcher if it failed.
_RUNNER = Path(_launched.__file__)

# gloo (the CPU collectives) prints one such line per device and group of devices, from
# C++, possibly into the middle of a line Python is printing.
_GLOO_CHATTER = re.compile(
    r"\[Gloo\] Rank \d+ is connected to \d+ peer ranks\. "
    r"Expected number of connected peer ranks is : \d+\n?"
)
# Several threads print those lines at once, so their pieces can interleave into lines
# that no longer match the whole message: a line made of nothing but such pieces (and
# the rank numbers between them) is chatter too.
_GLOO_PIECES = re.compile(
    r"\[Gloo\] Rank|is connected to|peer ranks\.|Expected number of connected peer ranks is :"
)
_LAST_LINES = 10  # of a failed process' output, in the report


def _only_gloo_pieces(text: str) -> bool:
    r"""Whether ``text`` holds nothing but pieces of gloo's connection messages and numbers.

    Examples:
      >>> from shard_tutorial.launcher import _only_gloo_pieces
      >>> _only_gloo_pieces("[Gloo] Rank [Gloo] Rank 12 is connected to  is connected to 77\n")
      True
      >>> _only_gloo_pieces("496\n")
      False
    """
    return bool(_GLOO_PIECES.search(text)) and not _GLOO_PIECES.sub("", text).strip(
        " \t\n0123456789"
    )


@dataclasses.dataclass(frozen=True)
class ProcessResult:
    """How one process of a launch ended.

    Attributes:
      index: the process index (``jax.process_index()`` once it joined).
      returncode: its exit status; negative when a signal ended it (``-9``: killed).
        When its script failed, the status the script exited with, even if the
        launcher then stopped the process where JAX's exit held it (waiting for the
        others at a barrier).
      output: what it printed, standard output and error interleaved, without the
        index prefix and without gloo's connection messages.
      stopped: True if the launcher killed it (another process failed, the run
        timed out, or Ctrl-C).
    """

    index: int
    returncode: int
    output: str
    stopped: bool = False

    @property
    def ok(self) -> bool:
        """Whether the process exited by itself with status 0."""
        return self.returncode == 0 and not self.stopped

    def last_lines(self, count: int = _LAST_LINES) -> list[str]:
        """The last ``count`` lines of the process' output."""
        return self.output.splitlines()[-count:]


@dataclasses.dataclass(frozen=True)
class LaunchResult:
    """What :func:`launch` returns: every process' end, and why the run failed if it did.

    Attributes:
      processes: one :class:`ProcessResult` per process, by index.
      failure: why the run failed (which process, how), or None if every process
        exited with status 0.
      seconds: how long the run took.
    """

    processes: tuple[ProcessResult, ...]
    failure: str | None
    seconds: float

    @property
    def returncode(self) -> int:
        """0 when every process exited with status 0, else 1."""
        return 0 if self.failure is None else 1

    def report(self) -> str:
        """A few lines: how each process ended and, for the failed ones, their last output."""
        lines = [self.failure or f"all {len(self.processes)} processes exited with status 0"]
        for process in self.processes:
            if process.ok:
                continue
            how = (
                "was stopped by the launcher"
                if process.stopped
                else f"exited with status {_status(process.returncode)}"
            )
            lines.append(f"process {process.index} {how}; its last output:")
            lines.extend(f"  [{process.index}] {line}" for line in process.last_lines())
            if not process.output:
                lines.append("  (nothing)")
        return "\n".join(lines)


def launch(
    script: str | os.PathLike[str],
    *args: str,
    processes: int,
    devices_per_process: int,
    timeout: float = DEFAULT_TIMEOUT,
    grace: float = DEFAULT_GRACE,
    port: int | None = None,
    stream: TextIO | None = None,
    env: Mapping[str, str] | None = None,
    python: str = sys.executable,
) -> LaunchResult:
    r"""Run ``script`` as a cluster of ``processes`` JAX processes on this machine.

    Each process runs ``script`` as ``python script *args`` would, with
    ``devices_per_process`` CPU devices and what it needs to join the others (the
    coordinator's address on ``127.0.0.1``, its process index, the process count) in
    its environment; the script joins with :func:`join_cluster`. Together the
    processes have ``processes * devices_per_process`` devices. When a script
    fails, its process counts as failed at once, even if JAX's exit then holds it
    at a barrier that waits for the others.

    Args:
      script: the Python file to run in every process.
      *args: command-line arguments for the script (``sys.argv[1:]``).
      processes: how many processes, at least 1.
      devices_per_process: CPU devices of each process, at least 1.
      timeout: seconds the whole run may take; when it is over, the processes
        still running count as hung and are stopped.
      grace: seconds the other processes may still run after one fails (so they
        can print their own error) before they are stopped.
      port: the coordinator's port on 127.0.0.1; None picks a free one.
      stream: where to write every line of output as it arrives, prefixed with
        its process index (``[1] ...``); None writes nothing (the lines are in
        the result).
      env: extra environment variables for the processes.
      python: the Python interpreter to run the script with.

    Returns:
      A :class:`LaunchResult`: each process' exit status and output, and which
      process failed and how (``result.report()`` says it in a few lines).

    Raises:
      TypeError: if ``processes``, ``devices_per_process`` or ``port`` is not an integer,
        or ``timeout`` or ``grace`` not a number.
      ValueError: if ``processes`` or ``devices_per_process`` is less than 1,
        ``script`` is not a file, ``timeout`` or ``grace`` is not a positive, finite
        number of seconds, or ``port`` cannot be bound on 127.0.0.1.
      KeyboardInterrupt: on Ctrl-C, once every process has been stopped.

    Examples:
      A script that joins the cluster and says who it is:

      >>> import tempfile
      >>> from pathlib import Path
      >>> from shard_tutorial import launch
      >>> script = Path(tempfile.mkdtemp()) / "hello.py"
      >>> _ = script.write_text(
      ...     "import jax\n"
      ...     "import shard_tutorial\n"
      ...     "shard_tutorial.join_cluster()\n"
      ...     "print(jax.process_index(), jax.local_device_count(), jax.device_count())\n"
      ... )
      >>> result = launch(script, processes=2, devices_per_process=2)
      >>> result.returncode, [p.output for p in result.processes]
      (0, ['0 2 4\n', '1 2 4\n'])

      Impossible arguments are refused before anything starts:

      >>> launch(script, processes=0, devices_per_process=4)
      Traceback (most recent call last):
      ...
      ValueError: processes must be at least 1, got 0
    """
    processes = require_count(processes, "processes")
    devices_per_process = require_count(devices_per_process, "devices_per_process")
    path = Path(script)
    if not path.is_file():
        msg = f"script must be an existing Python file, got {str(script)!r} (no such file)"
        raise ValueError(msg)
    timeout = require_seconds(timeout, "timeout")
    grace = require_seconds(grace, "grace")
    address = f"127.0.0.1:{bindable_port(port)}"
    base_env = {
        **os.environ,
        **(env or {}),
        COORDINATOR: address,
        NUM_PROCESSES: str(processes),
        DEVICES_PER_PROCESS: str(devices_per_process),
        LAUNCHER_PID: str(os.getpid()),
        # Read by JAX itself, so a script that calls jax.distributed.initialize()
        # directly (with num_processes and process_id) gets the same devices.
        "JAX_PLATFORMS": "cpu",
        "JAX_NUM_CPU_DEVICES": str(devices_per_process),
        "JAX_CPU_COLLECTIVES_IMPLEMENTATION": "gloo",
        "JAX_COORDINATOR_ADDRESS": address,
        "PYTHONUNBUFFERED": "1",  # lines arrive as they are printed
    }
    return _Run(
        [[python, str(_RUNNER), str(path), *args] for _ in range(processes)],
        [{**base_env, PROCESS_ID: str(index)} for index in range(processes)],
        stream,
    ).wait(timeout, grace)


def join_cluster(devices: int | None = None) -> bool:
    """Join the cluster :func:`launch` started this process in; alone, just set up devices.

    Call it right after ``import jax``, before any JAX operation. In a process that
    :func:`launch` started, it gives JAX the launch's CPU device count and calls
    :func:`jax.distributed.initialize` with the coordinator's address, this
    process' index and the process count, so ``jax.devices()`` lists the devices
    of every process; what native code prints to file descriptor 1 (gloo's
    connection messages) stays out of the script's standard output. In a process
    started otherwise, it calls
    :func:`~shard_tutorial.use_cpu_devices` with ``devices`` if given and does
    nothing else: the same script runs on its own, as one process.
    Called again in a process that has joined, it does nothing.

    Args:
      devices: CPU devices to use when the script runs on its own; None keeps
        JAX's default. A launched process has the launch's count whatever this is.

    Returns:
      True if the process joined a cluster, False if it runs on its own.

    Examples:
      Outside a launch (here, in the doctests' process of 8 devices):

      >>> import jax
      >>> from shard_tutorial import join_cluster
      >>> join_cluster()
      False
      >>> jax.process_count()
      1
    """
    import jax  # noqa: PLC0415 (the launcher's parent process needs no JAX)

    from shard_tutorial.devices import join_cpu_cluster, use_cpu_devices  # noqa: PLC0415

    if COORDINATOR not in os.environ:
        if devices is not None:
            use_cpu_devices(devices)
        return False
    if jax.distributed.is_initialized():  # joined already (the explain command joins first)
        return True
    die_with(int(os.environ[LAUNCHER_PID]))
    _filter_native_stdout()
    use_cpu_devices(int(os.environ[DEVICES_PER_PROCESS]))
    join_cpu_cluster(
        os.environ[COORDINATOR], int(os.environ[NUM_PROCESSES]), int(os.environ[PROCESS_ID])
    )
    return True


def _is_native_chatter(line: str) -> bool:
    r"""Whether a line that native code printed is (a piece of) gloo's connection messages.

    Only native code writes to the stream this judges, so a line of nothing but digits
    is a rank number that another thread's message split from its own.

    Examples:
      >>> from shard_tutorial.launcher import _is_native_chatter
      >>> _is_native_chatter("7\n"), _is_native_chatter("[Gloo] Rank 1 is connected to \n")
      (True, True)
      >>> _is_native_chatter("E1123 external/xla/...: an error\n")
      False
    """
    rest = _GLOO_CHATTER.sub("", line)
    return not rest.strip(" \t\n0123456789") or _only_gloo_pieces(rest)


def _filter_native_stdout() -> threading.Thread:
    """Keep what native code prints to file descriptor 1 out of the script's own output.

    gloo prints its connection messages from C++ threads to descriptor 1, in pieces
    that can land in the middle of a line the script prints, where no filter can take
    them apart again. So Python's ``sys.stdout`` gets a descriptor of its own (a copy
    of the original 1), and descriptor 1 becomes a pipe that a thread reads: it drops
    gloo's messages and passes any other line to standard error.

    The thread is a daemon: a native line printed in the last moments of the process
    may be lost with it, where the script's own output is not.

    Returns:
      The thread, which ends when descriptor 1 is closed.
    """
    sys.stdout.flush()
    script_stdout = os.dup(1)
    native, native_writer = os.pipe()
    os.dup2(native_writer, 1)
    os.close(native_writer)
    sys.stdout = os.fdopen(  # the process' stdout from now on: open until the end
        script_stdout,
        "w",
        buffering=1,  # lines, as a terminal has them (PYTHONUNBUFFERED is set too)
        encoding=sys.stdout.encoding,
        errors=sys.stdout.errors,
    )

    def forward() -> None:
        with os.fdopen(native, errors="replace") as lines:
            for line in lines:
                if not _is_native_chatter(line):
                    os.write(2, line.encode())

    thread = threading.Thread(target=forward, name="native stdout", daemon=True)
    thread.start()
    return thread


class _Run:
    """The processes of one launch, their output, and stopping them."""

    def __init__(
        self, commands: list[list[str]], envs: list[dict[str, str]], stream: TextIO | None
    ) -> None:
        self.stream = stream
        self.lines: list[list[str]] = [[] for _ in commands]
        self.stopped: set[int] = set()
        self.swept: set[int] = set()  # processes whose group is killed and leader reaped
        self.events: queue.Queue[tuple[int, str | None]] = queue.Queue()
        self.popens: list[subprocess.Popen[str]] = []
        self.readers: list[threading.Thread] = []
        # The processes that failed, in order, each noted by a thread as its script
        # reports its status or as the process exits: the first to fail is the one to
        # blame, even if another fails a moment later because of it.
        self.failures: list[int] = []
        self.reported: dict[int, int] = {}  # the statuses the failed scripts reported
        self.lock = threading.Lock()
        try:
            for index, (command, env) in enumerate(zip(commands, envs, strict=True)):
                status, status_writer = os.pipe()  # for the status of a failed script
                try:
                    popen = subprocess.Popen(
                        command,
                        env={**env, _launched.STATUS_FD: str(status_writer)},
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT,
                        text=True,
                        errors="replace",
                        start_new_session=True,  # its own process group, killed as one
                        pass_fds=(status_writer,),
                    )
                except BaseException:
                    os.close(status)
                    raise
                finally:
                    os.close(status_writer)
                self.popens.append(popen)
                reader = threading.Thread(target=self._read, args=(index, popen), daemon=True)
                reader.start()
                self.readers.append(reader)
                for watch, source in ((self._read_status, status), (self._note_exit, popen)):
                    threading.Thread(target=watch, args=(index, source), daemon=True).start()
        except BaseException:
            self._stop_all()
            raise

    def _read(self, index: int, popen: subprocess.Popen[str]) -> None:
        assert popen.stdout is not None
        pending = ""  # the start of a line that gloo's chatter cut in two
        for line in popen.stdout:
            # Threads print gloo's lines in pieces that can interleave: filter again
            # once the pieces of a line are together.
            raw = pending + line
            text = _GLOO_CHATTER.sub("", raw)
            pending = "" if text.endswith("\n") else text
            emptied = text != raw and not text.strip()  # nothing left but gloo's line end
            if text and not pending and not emptied and not _only_gloo_pieces(text):
                self.events.put((index, text))
        if pending:
            self.events.put((index, pending))
        self.events.put((index, None))

    def _read_status(self, index: int, status: int) -> None:
        """Note the status the script reports if it fails, as it ends (before its process)."""
        with os.fdopen(status, "rb") as pipe:
            line = pipe.readline()  # or nothing, when the process exits
        with contextlib.suppress(ValueError):
            self.reported[index] = int(line)
            self._note_failure(index)

    def _note_exit(self, index: int, popen: subprocess.Popen[str]) -> None:
        if popen.wait() != 0:
            self._note_failure(index)

    def _note_failure(self, index: int) -> None:
        with self.lock:
            if index not in self.failures:
                self.failures.append(index)

    def wait(self, timeout: float, grace: float) -> LaunchResult:
        start = time.monotonic()
        deadline = start + timeout
        first_failed: int | None = None
        hung: list[int] = []
        open_streams = len(self.popens)
        try:
            while True:
                # Exit statuses come from the threads that wait for the processes.
                running = [i for i, p in enumerate(self.popens) if p.returncode is None]
                if first_failed is None:
                    failed = [i for i in self.failures[:] if i not in self.stopped]
                    if failed:
                        first_failed = failed[0]
                        deadline = min(deadline, time.monotonic() + grace)
                if not running:
                    self._stop_all()  # what the scripts started and left running, if anything
                    if open_streams == 0:
                        break
                if running and time.monotonic() >= deadline:
                    if first_failed is None:
                        hung = running
                    self.stopped.update(running)
                    self._stop_all()
                open_streams -= self._drain(until=time.monotonic() + 0.05)
        finally:
            # Ctrl-C, or anything else that stops this loop: no process stays behind.
            self.stopped.update(i for i, p in enumerate(self.popens) if p.poll() is None)
            self._stop_all()
        for reader, popen in zip(self.readers, self.popens, strict=True):
            reader.join(timeout=5)
            if popen.stdout is not None:
                popen.stdout.close()
        self._drain(until=time.monotonic())
        # A failed script's process that was stopped where JAX's exit held it ended as
        # its script did.
        held = self.stopped & self.reported.keys()
        self.stopped -= held
        results = tuple(
            ProcessResult(
                index=i,
                returncode=self.reported[i] if i in held else p.returncode,
                output="".join(self.lines[i]),
                stopped=i in self.stopped,
            )
            for i, p in enumerate(self.popens)
        )
        stopped = sorted(self.stopped)
        if first_failed is not None:
            failure = (
                f"process {first_failed} failed "
                f"(exit status {_status(results[first_failed].returncode)})"
            )
            if stopped:
                failure += f"; {_processes(stopped)} stopped {grace:g} s later"
        elif hung:
            failure = (
                f"timed out after {timeout:g} s: {_processes(hung)} still running (hung?), stopped"
            )
        else:
            failure = None
        return LaunchResult(results, failure, time.monotonic() - start)

    def _drain(self, until: float) -> int:
        """Take output lines until ``until``; return how many streams ended."""
        ended = 0
        while True:
            try:
                index, line = self.events.get(timeout=max(0.0, until - time.monotonic()))
            except queue.Empty:
                return ended
            if line is None:
                ended += 1
            else:
                self.lines[index].append(line)
                if self.stream is not None:
                    self.stream.write(f"[{index}] {line.rstrip(chr(10))}\n")
                    self.stream.flush()

    def _stop_all(self) -> None:
        # Each group: the script and whatever it started (none left: nothing to do).
        # Frozen first, all of them, so that none sees another die and logs about it.
        # A group whose leader has exited is signalled once only: once its members are
        # gone too, its number is free for the system to give to another group.
        groups = [p.pid for i, p in enumerate(self.popens) if i not in self.swept]
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for group in groups:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(group, sig)
        for index, popen in enumerate(self.popens):
            popen.wait()
            self.swept.add(index)


def _processes(indices: list[int]) -> str:
    return f"process{'es' if len(indices) > 1 else ''} {', '.join(map(str, indices))}"


def _status(returncode: int) -> str:
    if returncode < 0:
        return f"{returncode}, killed by {signal_name(-returncode)}"
    return str(returncode)
