"""Looking at processes from a test: whether one still runs, and why one has not ended."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

COMMAND_STARTS = "interruptible_cli: the command starts"
"""The line ``conftest.interruptible_cli``'s command lines write to standard error first."""


def command_started(process: subprocess.Popen[str]) -> None:
    """Wait until ``process``, an ``interruptible_cli`` command line, reaches the command.

    Its first line on standard error says that Python has started and the command is
    about to be imported: from then on, a Ctrl-C is the command's to handle. (One that
    lands while Python itself starts, before any line of the command runs, gets Python's
    behaviour, which a loaded machine can stretch past a fixed delay: there, Python's
    own handler can raise its KeyboardInterrupt inside the importer's weakref callback,
    which Python reports as ignored and drops.) Returns at end of file too.

    Reads the pipe a byte at a time, beneath its buffered file object, so that
    whatever follows the line is left for ``communicate`` to read.
    """
    assert process.stderr is not None
    fd, wanted, line = process.stderr.fileno(), COMMAND_STARTS.encode() + b"\n", b""
    while chunk := os.read(fd, 1):
        line += chunk
        if chunk == b"\n":
            if line == wanted:
                return
            line = b""


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie waiting for its reaper does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in {"Z", "X"}


def children(pid: int) -> list[str]:
    """``PID STATE COMMAND`` of each child of process ``pid``, for a failure's message."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            pid_and_name, rest = stat.read_text().rsplit(")", 1)
        except (FileNotFoundError, ProcessLookupError):
            continue
        state, parent = rest.split()[:2]
        if int(parent) == pid:
            found.append(f"{pid_and_name.replace(' (', ' ')} {state}")
    return found


def communicate(process: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    """``process.communicate(timeout=timeout)``, failing the test with why it hangs.

    On a timeout the process is asked for the stack of each of its threads (the
    command lines of ``conftest.interruptible_cli`` print them on ``SIGUSR1``, with
    :mod:`faulthandler`), then killed; the failure shows the stacks, the end of
    what it printed, and its children.
    """
    with contextlib.suppress(subprocess.TimeoutExpired):
        return process.communicate(timeout=timeout)
    left = children(process.pid)
    process.send_signal(signal.SIGUSR1)
    time.sleep(1.0)
    process.kill()
    stdout, stderr = process.communicate()
    pytest.fail(
        f"still running after {timeout:g} s; its children: {left}\n"
        f"its standard output ends: {stdout[-2000:]}\n"
        f"its standard error (with its threads' stacks) ends: {stderr[-8000:]}"
    )
