"""What Linux's ``/proc`` says about the processes a check or a launch started.

The checker and the launcher run code they did not write in processes of their own,
and must end everything that code starts, even a process that left the worker's
session (``start_new_session=True``) and dropped its environment (``env={}``), and
must tell a case that computes slowly on a busy machine from one that hangs. Both
read the same files:

- ``/proc/PID/stat``: a process' parent and the CPU time it used (fields 4 and 14
  to 17, counted after the command's closing parenthesis, which may itself hold
  spaces and parentheses);
- ``prctl(PR_SET_CHILD_SUBREAPER)``: a process that asks to be a *subreaper*
  becomes the parent of its descendants' orphans, rather than the system's first
  process, so it can still find and end them (see :manpage:`prctl(2)`).

Elsewhere than Linux, every function here does nothing and finds nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from pathlib import Path

__all__ = ["become_subreaper", "children", "cpu_seconds", "descendants", "kill_descendants"]

_PROC = Path("/proc")
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PR_SET_CHILD_SUBREAPER = 36  # from <linux/prctl.h>


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command; None if there is no such file."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[-1].split()


def cpu_seconds(pid: int) -> float:
    """The CPU time process ``pid`` has used: its threads' and its waited-for children's.

    Args:
      pid: a process id.

    Returns:
      Seconds of user and system time; 0.0 where the process is gone (or not Linux).

    Examples:
      >>> import os
      >>> from shard_tutorial.process_tree import cpu_seconds
      >>> cpu_seconds(os.getpid()) > 0
      True
      >>> cpu_seconds(-1)
      0.0
    """
    fields = _stat_fields(pid)
    try:
        return sum(int(f) for f in fields[11:15]) / _TICKS if fields else 0.0
    except ValueError:
        return 0.0


def _parents() -> dict[int, int]:
    """Every process' parent, by process id."""
    found: dict[int, int] = {}
    with contextlib.suppress(OSError):
        for entry in _PROC.iterdir():
            if entry.name.isdigit():
                fields = _stat_fields(int(entry.name))
                if fields and len(fields) > 1 and fields[1].isdigit():
                    found[int(entry.name)] = int(fields[1])
    return found


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` now.

    Examples:
      >>> import subprocess, sys
      >>> from shard_tutorial.process_tree import children
      >>> child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
      >>> child.pid in children(os.getpid())
      True
      >>> child.kill(); child.wait()
      -9
    """
    return sorted(p for p, parent in _parents().items() if parent == pid)


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` in the tree: its children, theirs, and so on.

    A process that started a new session (``setsid``) is still its parent's child,
    and so still found; one whose parent has exited belongs to the nearest subreaper
    above it (:func:`become_subreaper`), or else to the system's first process.

    Examples:
      >>> import os
      >>> from shard_tutorial.process_tree import descendants
      >>> os.getpid() in descendants(1) or os.getppid() == 0
      True
    """
    below: dict[int, list[int]] = {}
    for child, parent in _parents().items():
        below.setdefault(parent, []).append(child)
    found, todo = [], list(below.get(pid, []))
    while todo:
        child = todo.pop()
        if child != pid and child not in found:
            found.append(child)
            todo += below.get(child, [])
    return found


def kill_descendants(pid: int) -> list[int]:
    """Kill (``SIGKILL``) every descendant of ``pid``, deepest first; return their ids.

    Each is stopped (``SIGSTOP``) first, so none can start another while the tree is
    read again; the tree is read until it is empty or nothing new is found.
    """
    killed: list[int] = []
    for _ in range(8):  # a process forking as fast as it can is stopped within a few rounds
        found = [p for p in descendants(pid) if p not in killed]
        if not found:
            break
        for child in found:
            with contextlib.suppress(OSError):
                os.kill(child, signal.SIGSTOP)
        for child in reversed(found):
            with contextlib.suppress(OSError):
                os.kill(child, signal.SIGKILL)
        killed += found
    return killed


def become_subreaper() -> bool:
    """Make this process the parent of its descendants' orphans; whether that worked.

    Examples:
      >>> from shard_tutorial.process_tree import become_subreaper
      >>> isinstance(become_subreaper(), bool)
      True
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
