"""Processes the checker and the launcher start, and what Linux says about them.

The checker (:mod:`shard_tutorial.checking`) and the launcher
(:mod:`shard_tutorial.launcher`) run code they did not write in processes of their own,
and must end everything that code starts, even a process that left the worker's
session (``start_new_session=True``) and dropped its environment (``env={}``), and
must tell a case that computes slowly on a busy machine from one that hangs. Both
read the same files, and use the same helpers, all here:

- ``/proc/PID/stat``: a process' parent and the CPU time it used (fields 4 and 14
  to 17, counted after the command's closing parenthesis, which may itself hold
  spaces and parentheses);
- ``/proc/PID/environ``: the variables a process was started with, by which the
  checker finds what a check started (:func:`environments`);
- ``prctl(PR_SET_CHILD_SUBREAPER)``: a process that asks to be a *subreaper*
  becomes the parent of its descendants' orphans, rather than the system's first
  process, so it can still find and end them (see :manpage:`prctl(2)`);
- ``prctl(PR_SET_PDEATHSIG)``: a child that asks is killed when its parent dies
  (:func:`die_with`);
- a free port for a cluster's coordinator (:func:`bindable_port`), the name of the
  signal that ended a process (:func:`signal_name`), and the check of the seconds a
  process may take (:func:`require_seconds`).

Elsewhere than Linux, every function that reads ``/proc`` or calls ``prctl`` does
nothing and finds nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "become_subreaper",
    "bindable_port",
    "children",
    "cpu_seconds",
    "descendants",
    "die_with",
    "environments",
    "kill_descendants",
    "require_seconds",
    "signal_name",
]

_PROC = Path("/proc")
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PR_SET_CHILD_SUBREAPER = 36  # from <linux/prctl.h>
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


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
      >>> from shard_tutorial.processes import cpu_seconds
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
      >>> from shard_tutorial.processes import children
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
      >>> from shard_tutorial.processes import descendants
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
      >>> from shard_tutorial.processes import become_subreaper
      >>> isinstance(become_subreaper(), bool)
      True
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def environments() -> Iterator[tuple[int, list[bytes]]]:
    """Every process' id and the variables it was started with (``NAME=value``), as bytes.

    Processes that are gone, or whose environment is not this user's to read, are
    left out; so is this process.

    Examples:
      >>> import os, subprocess, sys
      >>> from shard_tutorial.processes import environments
      >>> env = {**os.environ, "SHARD_TUTORIAL_EXAMPLE": "1"}
      >>> child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"], env=env)
      >>> any(pid == child.pid and b"SHARD_TUTORIAL_EXAMPLE=1" in found
      ...     for pid, found in environments())
      True
      >>> child.kill(); child.wait()
      -9
    """
    if not _PROC.is_dir():
        return
    me = os.getpid()
    for entry in _PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone, or not ours to read
            continue
        yield int(entry.name), environ.split(b"\0")


def die_with(parent: int) -> None:
    """Have Linux kill this process when process ``parent`` dies, even by ``SIGKILL``.

    The launcher and the checker stop their processes whenever they can (failures,
    hangs, Ctrl-C); this covers the one case they cannot: being killed themselves, a
    notebook kernel killed at a timeout, for example. Elsewhere than Linux it does
    nothing.

    Args:
      parent: the process this one must not outlive: its parent when it starts.
    """
    if not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it died before the call: too late for the signal
        os.kill(os.getpid(), signal.SIGKILL)


def bindable_port(port: int | None) -> int:
    """``port`` if it can be bound on 127.0.0.1 now, or a free port if None.

    Args:
      port: a port number, or None for any free port.

    Returns:
      The port. It is free again when this returns: a coordinator takes it within a
      second (another program could take it first: then the coordinator fails).

    Raises:
      TypeError: if ``port`` is not an integer or None.
      ValueError: if ``port`` is out of range or cannot be bound.

    Examples:
      >>> from shard_tutorial.processes import bindable_port
      >>> 0 < bindable_port(None) < 2**16
      True
      >>> bindable_port(70000)
      Traceback (most recent call last):
      ...
      ValueError: port must be between 1 and 65535, got 70000
    """
    if port is not None:
        if isinstance(port, bool) or not isinstance(port, int):
            msg = f"port must be an integer or None, got {port!r}"
            raise TypeError(msg)
        if not 0 < port < 2**16:
            msg = f"port must be between 1 and 65535, got {port}"
            raise ValueError(msg)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port or 0))
        except OSError as error:
            msg = f"port {port} cannot be bound on 127.0.0.1 for the coordinator: {error}"
            raise ValueError(msg) from None
        bound: int = probe.getsockname()[1]
    return bound


def signal_name(number: int) -> str:
    """The name of signal ``number`` (``SIGKILL``), or ``signal N`` for one Python does not know.

    A ``subprocess`` return code below zero is minus the signal that killed the process.

    Examples:
      >>> from shard_tutorial.processes import signal_name
      >>> signal_name(9), signal_name(200)
      ('SIGKILL', 'signal 200')
    """
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def require_seconds(value: object, name: str, *, finite: bool = True) -> float:
    """Return ``value`` if it is a positive number of seconds (a timeout, a grace, a deadline).

    Args:
      value: what the caller passed.
      name: the parameter's name, used in the message.
      finite: whether infinity is refused (a deadline may be endless; a timeout not).

    Returns:
      The value as a Python ``float``.

    Raises:
      TypeError: for a bool or anything that is not a real number.
      ValueError: for zero, a negative number, NaN, or (if ``finite``) infinity.

    Examples:
      >>> from shard_tutorial.processes import require_seconds
      >>> require_seconds(10, "timeout"), require_seconds(float("inf"), "deadline", finite=False)
      (10.0, inf)
      >>> require_seconds("3", "timeout")
      Traceback (most recent call last):
      ...
      TypeError: timeout must be a number of seconds, got str '3'
      >>> require_seconds(0, "grace")
      Traceback (most recent call last):
      ...
      ValueError: grace must be a positive, finite number of seconds, got 0
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        msg = f"{name} must be a number of seconds, got {type(value).__name__} {value!r}"
        raise TypeError(msg)
    if not (0 < value < math.inf if finite else value > 0):
        msg = f"{name} must be a positive{', finite' if finite else ''} number of seconds, got {value!r}"
        raise ValueError(msg)
    return float(value)
