"""Start the checker's workers by ``fork()`` from a process that has imported JAX already.

A worker (:mod:`shard_tutorial.checking.worker`) spends about 1.3 s of CPU importing
JAX, NumPy, cloudpickle and this package before it runs a line of the solution's,
and a CI run starts about 300 of them on 2 cores: some 6 CPU-minutes of the same
imports. So the checker starts, once per process, a *zygote*: a process started
exactly as a worker is (the same interpreter, command-line flags, environment and
working directory) that makes those imports, without starting any JAX backend (the
device count is fixed when the backend starts, and each worker sets its own), and
then waits. Each worker is a ``fork()`` of it, which takes milliseconds, and then
runs :func:`shard_tutorial.checking.worker.main` as ``python -m`` would: the same
request on standard input, the same reports on its channel, the same exit statuses.
Measured on 2 cores: a check of ``shard_map_psum`` on 1 and 8 devices took 5.2 s
with workers started afresh, 1.4 s with forked ones (2.6 s for the first check of a
process, which starts the zygote).

Every guarantee of the checker's holds for a forked worker as for a started one:

- It runs in a session of its own (``setsid`` before its pid is given to the
  checker), so the checker ends it and all it started with one ``killpg``.
- The checker sets its limits (``prlimit``: memory, output) before it writes the
  request, and the worker runs nothing of the solution's before it has read it.
- It dies with the checker, even if the checker is killed with ``SIGKILL``: the
  worker dies with the zygote (``PR_SET_PDEATHSIG``, as
  :func:`shard_tutorial.processes.die_with` sets it for a started worker),
  and the zygote exits as soon as the checker is gone (it watches a pidfd of the
  checker and its socket to it), killing the sessions of its workers and reaping
  them first. The checker, at its exit, closes the socket and waits for that: once
  it has exited, no worker is left, not even a zombie for the first process to reap.
- Its ``/proc/PID/environ`` shows the check's token (which ``_end_descendants``
  and ``_end_orphans`` look for, also in the processes the solution forks into
  sessions of their own): Linux shows there the environment a process was
  *started* with, which a forked worker shares with the zygote, so the zygote is
  started with room at the end of its environment (:data:`ROOM_VARIABLE`) that the
  worker overwrites with its own variables.
- The checker gets its exit status as from ``Popen``: the zygote watches each
  worker through a pidfd, reads its status without reaping it (so its pid, which
  is its process group's id, cannot be reused before the checker's ``killpg``),
  and reaps it when the checker says it is done with it (:meth:`Forked.wait`).

Nothing of the reader's ever runs in the zygote: it imports what the worker imports
before the request, and forks. A zygote is kept for one environment: the one the
checker was imported in, for the life of the process; another one (a variable set
afterwards, as a test does) gets a zygote of its own, ended when the checks that
use it are over, since JAX reads its ``JAX_*`` variables at import. Where a zygote
cannot run (not Linux, no pidfds, ``SHARD_TUTORIAL_CHECK_ZYGOTE=0`` in the
environment, or one that failed to start), the checker starts each worker with
``subprocess.Popen`` as before.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO, NoReturn

from shard_tutorial.processes import become_subreaper, children, kill_descendants

ROOM_VARIABLE = "SHARD_TUTORIAL_CHECK_ROOM"
"""The zygote's last environment variable: room for a worker's own variables (its token)."""
ROOM = 16 * 1024
"""Characters of :data:`ROOM_VARIABLE`'s value: a token takes about 50, pytest's
``PYTEST_CURRENT_TEST`` a few hundred."""
SWITCH = "SHARD_TUTORIAL_CHECK_ZYGOTE"
"""Set to ``0`` to start every worker with ``subprocess.Popen`` instead."""
RUN_TIME_VARIABLES = frozenset({"PYTEST_CURRENT_TEST"})
"""Variables that no import reads and that change between checks (pytest sets this
one for each test): a worker gets them, but they do not call for another zygote."""
READY_TIMEOUT = 120.0
"""Seconds a zygote may take to import JAX before it counts as broken (as a worker may)."""
FORK_TIMEOUT = 30.0
"""Seconds a ready zygote may take to answer a request for a worker (it takes milliseconds)."""
CLOSE_GRACE = 10.0
"""Seconds a zygote may take to end and reap its workers once told to stop, before it is killed."""
_BROKEN = 70  # a forked worker's exit status when it could not be set up (EX_SOFTWARE)
_WORKER = "shard_tutorial.checking.worker"
_ZYGOTE = "shard_tutorial.checking.zygote"  # not __name__, which is "__main__" in the zygote


# --- The checker's side ------------------------------------------------------------------


class Forked:
    """A worker forked by a zygote, as the checker handles a ``subprocess.Popen``.

    It is the zygote's child, not the checker's: its exit status comes from the
    zygote. ``returncode`` follows ``Popen``'s convention (the exit status, or the
    negative number of the signal that killed it) and is set once the worker is
    reaped, by :meth:`wait` or :meth:`poll`; :meth:`exit_status` reads it before.
    """

    def __init__(self, zygote: Zygote, pid: int, stdin: BinaryIO, channel: int) -> None:
        """Hold worker ``pid``, forked by ``zygote``, its ``stdin`` and its ``channel``."""
        self.zygote, self.pid, self.stdin, self.channel = zygote, pid, stdin, channel
        self.parent = zygote.pid  # the process the worker dies with
        self.returncode: int | None = None

    def exit_status(self) -> int | None:
        """The exit status if the worker ended, else None, without reaping it."""
        if self.returncode is not None:
            return self.returncode
        return self.zygote.status(self.pid, timeout=0)

    def poll(self) -> int | None:
        """Reap the worker if it ended, as ``Popen.poll``; its ``returncode`` or None."""
        if self.exit_status() is not None:
            self.wait()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the worker to end, then reap it, as ``Popen.wait``.

        Raises:
          subprocess.TimeoutExpired: if it is still running after ``timeout`` seconds.
        """
        if self.returncode is None:
            status = self.zygote.status(self.pid, timeout=timeout)
            if status is None:
                raise subprocess.TimeoutExpired([_WORKER], timeout or 0.0)
            self.returncode = status
            self.zygote.release(self.pid)
        return self.returncode

    def kill(self) -> None:
        """Kill the worker (``SIGKILL``) if it was not reaped yet."""
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


class Zygote:
    """One zygote process, the socket to it, and what it said about its workers.

    A thread reads the zygote's messages (its workers' pids, their exit statuses)
    so that the checker's threads, which run the device counts of a check at once,
    can each wait for their own.
    """

    def __init__(self, environ: Mapping[str, str], cwd: str) -> None:
        """Start a zygote with ``environ`` in ``cwd``; it imports JAX in the background."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.socket = ours
        self.started = time.monotonic()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", _ZYGOTE, str(theirs.fileno()), str(os.getpid())],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                env={**environ, ROOM_VARIABLE: "." * ROOM},  # the room last, for _Room
                cwd=cwd,
                start_new_session=True,  # a terminal's Ctrl-C is the checker's to handle
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.pid = self.process.pid
        self.condition = threading.Condition()
        self.sending = threading.Lock()
        self.ready = False
        self.unusable: str | None = None  # why the zygote cannot serve, if it said so
        self.alive = True  # until its socket closes
        self.replies: dict[int, dict[str, Any]] = {}
        self.statuses: dict[int, int] = {}  # pid -> exit status, for workers not yet reaped
        self.workers: set[int] = set()  # forked and not yet reaped
        self.requests = 0
        threading.Thread(target=self._read, name=f"zygote-{self.pid}", daemon=True).start()

    def _read(self) -> None:
        buffer = b""
        try:
            while chunk := self.socket.recv(1 << 16):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                with self.condition:
                    for line in lines:
                        self._message(json.loads(line))
                    self.condition.notify_all()
        except Exception:  # noqa: BLE001, S110 (closed by close(), or garbled: it is done)
            pass
        with self.condition:
            self.alive = False
            self.condition.notify_all()

    def _message(self, message: dict[str, Any]) -> None:
        kind = message["op"]
        if kind == "ready":
            self.ready = True
        elif kind == "unusable":
            self.unusable = str(message["reason"])
        elif kind == "spawned":
            self.replies[int(message["id"])] = message
        elif kind == "exited":
            self.statuses[int(message["pid"])] = int(message["returncode"])

    def _send(self, message: dict[str, Any], fds: list[int] | None = None) -> None:
        data = json.dumps(message).encode() + b"\n"
        with self.sending:
            if fds:
                sent = socket.send_fds(self.socket, [data], fds)
                data = data[sent:]
            self.socket.sendall(data)

    def wait_ready(self, give_up: Callable[[], bool]) -> bool:
        """Wait until the zygote has imported everything; False if it cannot serve.

        ``give_up`` is asked every 50 ms (a cancelled check, or one past its deadline); so is the zygote's
        own deadline (:data:`READY_TIMEOUT`), past which it is killed.
        """
        with self.condition:
            while not self.ready:
                if not self.alive or self.unusable is not None:
                    return False
                if give_up():
                    return False
                if time.monotonic() - self.started > READY_TIMEOUT:
                    self.unusable = f"it did not import JAX within {READY_TIMEOUT:g} s"
                    self.process.kill()
                    return False
                self.condition.wait(0.05)
            return self.alive

    def spawn(self, environ: Mapping[str, str], output: int, channel: int) -> Forked | None:
        """Fork a worker with this environment, output and channel; None if the zygote failed.

        The worker reads its request from the returned handle's ``stdin``, in a
        session of its own, once the caller has set its limits and written it.
        """
        read_end, write_end = os.pipe()
        try:
            with self.condition:
                self.requests += 1
                number = self.requests
            message = {
                "op": "spawn",
                "id": number,
                "environ": dict(environ),
                "cwd": str(Path.cwd()),
            }
            self._send(message, [read_end, output, channel])
        except OSError:
            os.close(write_end)
            return None
        finally:
            os.close(read_end)  # the zygote has its own copies now
        with self.condition:
            answered = self.condition.wait_for(
                lambda: number in self.replies or not self.alive, FORK_TIMEOUT
            )
            reply = self.replies.pop(number, None)
            if reply is not None:
                self.workers.add(int(reply["pid"]))
        if reply is None:
            if answered is False:  # stuck: its workers die with it
                self.process.kill()
            os.close(write_end)
            return None
        return Forked(self, int(reply["pid"]), os.fdopen(write_end, "wb"), int(reply["fd"]))

    def status(self, pid: int, timeout: float | None) -> int | None:
        """Worker ``pid``'s exit status once the zygote reported it, waiting up to ``timeout``.

        If the zygote itself is gone, so is the worker (it died with it, by ``SIGKILL``).
        """
        with self.condition:
            self.condition.wait_for(lambda: pid in self.statuses or not self.alive, timeout)
            if pid not in self.statuses and not self.alive:
                self.statuses[pid] = -signal.SIGKILL
            return self.statuses.get(pid)

    def release(self, pid: int) -> None:
        """Let the zygote reap worker ``pid``: the checker ended its process group."""
        with self.condition:
            self.statuses.pop(pid, None)
            self.workers.discard(pid)
        with contextlib.suppress(OSError):
            self._send({"op": "release", "pid": pid})

    def idle(self) -> bool:
        """Whether none of its workers is still to be reaped."""
        with self.condition:
            return not self.workers

    def close(self, grace: float = CLOSE_GRACE) -> None:
        """End the zygote and every worker of its, and reap it.

        A zygote that serves ends its workers' sessions and reaps the workers when
        its socket closes, then exits: once this returns, no worker of it is left,
        not even as a zombie that the system's first process has still to reap. One
        still importing JAX has no worker, and is killed at once, as is one that has
        not exited within ``grace`` seconds.
        """
        with contextlib.suppress(OSError):
            self.socket.shutdown(socket.SHUT_RDWR)  # wakes both readers: ours and the zygote
        self.socket.close()
        if not self.ready:
            self.process.kill()
        try:
            self.process.wait(grace)
        except subprocess.TimeoutExpired:
            self.process.kill()  # its workers die with it (PR_SET_PDEATHSIG)
            self.process.wait()


def _environment_bytes(environ: Mapping[str, str]) -> int:
    return sum(len(os.fsencode(k)) + len(os.fsencode(v)) + 2 for k, v in environ.items())


class Zygotes:
    """The checker's zygotes, one per interpreter, environment and working directory.

    Shared by the threads of every check of the process. The zygote of the
    environment the checker was imported in (:meth:`home`) lasts as long as the
    process; any other ends when no check is running any more.
    """

    def __init__(self) -> None:
        """Hold no zygote yet: each starts on its first use."""
        self.lock = threading.Lock()
        self.zygotes: dict[tuple[Any, ...], Zygote] = {}
        self.broken: set[tuple[Any, ...]] = set()  # zygotes that could not start: Popen
        self.home_key: tuple[Any, ...] | None = None
        self.checks = 0  # checks running now
        self.started = 0  # zygotes started, for the tests
        self.owner = os.getpid()
        self.hooked = False  # whether close and _forget are called at exit and fork

    def _forget(self) -> None:
        """In a fork of the checker's process: the zygotes are its parent's, not its own."""
        for zygote in self.zygotes.values():
            zygote.socket.close()
        self.lock = threading.Lock()
        self.zygotes, self.checks, self.owner = {}, 0, os.getpid()

    @staticmethod
    def key(environ: Mapping[str, str], ignored: frozenset[str]) -> tuple[Any, ...]:
        """What makes two workers' imports the same: the interpreter, variables, directory."""
        kept = sorted((k, v) for k, v in environ.items() if k not in ignored)
        return (sys.executable, str(Path.cwd()), tuple(kept))

    def home(self, environ: Mapping[str, str], ignored: frozenset[str]) -> None:
        """Remember the environment whose zygote lasts as long as the process."""
        self.home_key = self.key(environ, ignored | RUN_TIME_VARIABLES)

    @contextlib.contextmanager
    def checking(self) -> Iterator[None]:
        """Count a check as running; at the end of the last one, end the other zygotes."""
        with self.lock:
            self.checks += 1
        try:
            yield
        finally:
            with self.lock:
                self.checks -= 1
                done = []
                if self.checks == 0:
                    done = [k for k, z in self.zygotes.items() if k != self.home_key and z.idle()]
                retired = [self.zygotes.pop(k) for k in done]
            for zygote in retired:
                zygote.close()

    def spawn(
        self, environ: Mapping[str, str], ignored: frozenset[str], output: int, channel: int,
        give_up: Callable[[], bool],
    ) -> Forked | None:  # fmt: skip
        """A worker forked from the zygote of ``environ``; None: start it with ``Popen``.

        Args:
          environ: the worker's whole environment.
          ignored: variables of ``environ`` that no import reads (the check's token).
          output: the file descriptor the worker prints to (standard output and error).
          channel: the write end of the worker's channel to the checker.
          give_up: whether to stop waiting for a zygote that is still starting.
        """
        if not usable():
            return None
        ignored = ignored | RUN_TIME_VARIABLES
        key = self.key(environ, ignored)
        own = {k: v for k, v in environ.items() if k in ignored}
        if _environment_bytes(own) > len(ROOM_VARIABLE) + ROOM + 2:
            return None  # it would not show in the worker's /proc/PID/environ
        zygote = self._zygote(key, {k: v for k, v in environ.items() if k not in ignored})
        if zygote is None or not zygote.wait_ready(give_up):
            if zygote is not None and (zygote.unusable is not None or not zygote.ready):
                self._failed(key, zygote, give_up)
            return None
        return zygote.spawn(environ, output, channel)

    def _zygote(self, key: tuple[Any, ...], environ: dict[str, str]) -> Zygote | None:
        with self.lock:
            if os.getpid() != self.owner:
                self._forget()
            zygote = self.zygotes.get(key)
            if zygote is not None and not zygote.alive:  # it died: a new one
                del self.zygotes[key]
                zygote.close()
                zygote = None
            if zygote is None and key not in self.broken:
                if not self.hooked:  # at the first one (never in the zygote's own process)
                    atexit.register(self.close)
                    os.register_at_fork(after_in_child=self._forget)
                    self.hooked = True
                try:
                    zygote = self.zygotes[key] = Zygote(environ, str(Path.cwd()))
                except OSError:
                    self.broken.add(key)
                    return None
                self.started += 1
            return zygote

    def _failed(self, key: tuple[Any, ...], zygote: Zygote, give_up: Callable[[], bool]) -> None:
        """A zygote that could not serve: ended, and never started again for ``key``."""
        if give_up() and zygote.alive and zygote.unusable is None:
            return  # the check was cancelled; the zygote is fine, only still starting
        with self.lock:
            if self.zygotes.get(key) is zygote:
                del self.zygotes[key]
            if not zygote.ready:  # it never served: it would fail again
                self.broken.add(key)
        zygote.close()

    def close(self) -> None:
        """End every zygote (at exit: they would see their checker gone, a moment later)."""
        with self.lock:
            zygotes = list(self.zygotes.values()) if os.getpid() == self.owner else []
            self.zygotes = {}
        for zygote in zygotes:
            zygote.close()


def usable() -> bool:
    """Whether workers can be forked from a zygote here (Linux with pidfds, not switched off)."""
    return (
        sys.platform.startswith("linux")
        and hasattr(os, "fork")
        and hasattr(os, "pidfd_open")
        and hasattr(socket, "send_fds")
        and os.environ.get(SWITCH, "1").strip().lower() not in {"0", "off", "false", "no"}
    )


ZYGOTES = Zygotes()


# --- The zygote's side -------------------------------------------------------------------


class _Unusable(Exception):
    """This process cannot serve as a zygote; the checker starts its workers itself."""


class _Room:
    """The end of this process' environment as Linux shows it, for a worker to overwrite.

    ``/proc/PID/environ`` shows the bytes between the addresses ``env_start`` and
    ``env_end`` of ``/proc/PID/stat``: the variables the process was started with,
    whatever it changed since. A forked worker shares them with the zygote; it writes
    its own variables (the check's token) over :data:`ROOM_VARIABLE`, the last one,
    after it has taken them out of its C environment, which then points elsewhere.
    """

    def __init__(self) -> None:
        import ctypes  # noqa: PLC0415 (the zygote only)

        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])  # fields 50 and 51, from field 3 on
        shown = Path("/proc/self/environ").read_bytes()
        if ctypes.string_at(start, end - start) != shown:
            msg = "/proc/self/environ is not the memory /proc/self/stat says"
            raise _Unusable(msg)
        marker = ROOM_VARIABLE.encode() + b"="
        offset = shown.rfind(b"\0" + marker) + 1
        if offset == 0 or shown[offset:].rstrip(b"\0") != marker + b"." * ROOM:
            msg = f"{ROOM_VARIABLE} is not the last variable of the environment"
            raise _Unusable(msg)
        self.address, self.size = start + offset, len(shown) - offset
        self.memmove = ctypes.memmove

    def write(self, environ: Mapping[str, str]) -> None:
        """Show ``environ`` in place of the room (what does not fit is left out)."""
        data = b"".join(os.fsencode(k) + b"=" + os.fsencode(v) + b"\0" for k, v in environ.items())
        if len(data) > self.size:
            data = data[: data.rfind(b"\0", 0, self.size) + 1]
        self.memmove(self.address, data.ljust(self.size, b"\0"), self.size)


def _preload() -> None:
    """Import what a worker imports before it reads its request, and start no JAX backend."""
    import cloudpickle  # noqa: F401, PLC0415
    import jax  # noqa: PLC0415
    import jax.numpy  # noqa: F401, PLC0415
    import numpy as np  # noqa: F401, PLC0415

    import shard_tutorial.checking.digest  # noqa: PLC0415
    import shard_tutorial.checking.recording  # noqa: PLC0415
    import shard_tutorial.checking.worker  # noqa: PLC0415
    import shard_tutorial.compiled  # noqa: PLC0415
    import shard_tutorial.devices  # noqa: PLC0415
    import shard_tutorial.problem  # noqa: PLC0415
    import shard_tutorial.problems  # noqa: PLC0415 (the problems' arrange and limits)
    import shard_tutorial.processes  # noqa: F401, PLC0415
    from shard_tutorial.checking.jax_internals import XLA_BACKENDS  # noqa: PLC0415

    if XLA_BACKENDS.get(None):
        msg = "a JAX backend started during the imports: the device count would be fixed"
        raise _Unusable(msg)


def _open_fds() -> set[int]:
    """This process' open file descriptors (not the one that listed them, closed since)."""
    listed = {int(entry.name) for entry in Path("/proc/self/fd").iterdir()}
    return {fd for fd in listed if _is_open(fd)}


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


class _Server:
    """The zygote's loop: fork a worker on each request, report each one's exit."""

    def __init__(self, channel: socket.socket, checker: int, room: _Room, kept: set[int]) -> None:
        self.channel, self.checker, self.room, self.kept = channel, checker, room, kept
        self.me = os.getpid()
        self.selector = selectors.DefaultSelector()
        self.buffer = b""
        self.fds: list[int] = []  # received, not yet taken by a request
        self.children: dict[int, int] = {}  # pid -> its pidfd, while it runs
        self.unreaped: set[int] = set()  # forked and not yet reaped (running, or a zombie)
        # The lowest descriptor a worker has free for its channel (3, unless an import
        # left one open), as a started worker gets the checker's number for it.
        self.target = min(set(range(3, len(kept) + 4)) - kept)

    def serve(self, watch: int) -> NoReturn:
        """Say the zygote is ready, then serve until the checker is gone."""
        self._send({"op": "ready"})
        self.selector.register(self.channel, selectors.EVENT_READ, "checker")
        self.selector.register(watch, selectors.EVENT_READ, "gone")
        while True:
            for key, _ in self.selector.select():
                if key.data == "gone" or (key.data == "checker" and not self._receive()):
                    self._end()
                if isinstance(key.data, int):
                    self._exited(key.data)

    def _end(self) -> NoReturn:
        """The checker is gone (or done): end its workers' sessions, reap them, and exit.

        Each worker not yet released leads its own process group (a zombie's pid is
        not reused), so the group is killed whole. Reaping them here, rather than
        leaving the zombies to the system's first process, means that once the
        zygote has exited no worker of its is left.
        """
        for pid in self.unreaped:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
        self._sweep()
        for pid in self.unreaped:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        os._exit(0)  # nothing to flush or finalise

    def _send(self, message: dict[str, Any]) -> None:
        self.channel.sendall(json.dumps(message).encode() + b"\n")

    def _receive(self) -> bool:
        """Take in the checker's requests; False once its socket is closed."""
        try:
            data, fds, _, _ = socket.recv_fds(self.channel, 1 << 16, 16)
        except OSError:
            return False
        self.fds += fds
        if not data:
            return False
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            message = json.loads(line)
            if message["op"] == "spawn":
                taken, self.fds = self.fds[:3], self.fds[3:]
                self._fork(message, *taken)
            elif message["op"] == "release":
                pid = int(message["pid"])
                self.unreaped.discard(pid)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
                self._sweep()
        return True

    def _fork(self, message: dict[str, Any], request: int, output: int, channel: int) -> None:
        started, ready = os.pipe()
        with warnings.catch_warnings():
            # Python 3.12+ warns of fork() in a process with threads: OpenBLAS's, which
            # stops them around a fork (pthread_atfork).
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            os.close(started)
            self._become_worker(message, request, output, channel, ready)
        self.unreaped.add(pid)
        os.close(ready)
        for fd in (request, output, channel):
            os.close(fd)
        os.read(started, 1)  # its own session now (or it died: its exit says how)
        os.close(started)
        pidfd = os.pidfd_open(pid)
        self.children[pid] = pidfd
        self.selector.register(pidfd, selectors.EVENT_READ, pid)
        self._send({"op": "spawned", "id": message["id"], "pid": pid, "fd": self.target})

    def _sweep(self) -> None:
        """Kill and reap every child that is not a worker: orphans of what workers started.

        The zygote is a subreaper (:func:`shard_tutorial.processes.become_subreaper`):
        a process a worker's child started, then left (a double fork, a new session
        without the check's token in its environment), becomes the zygote's child when
        its parent exits, and is ended here.
        """
        for pid in children(self.me):
            if pid in self.unreaped:
                continue
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            kill_descendants(pid)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)

    def _exited(self, pid: int) -> None:
        """Report worker ``pid``'s exit status; it stays a zombie until released."""
        self._sweep()
        pidfd = self.children.pop(pid)
        self.selector.unregister(pidfd)
        os.close(pidfd)
        try:
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            info = None
        if info is None:  # cannot be: the pidfd said it ended
            status = -signal.SIGKILL
        else:
            status = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
        self._send({"op": "exited", "pid": pid, "returncode": status})

    def _become_worker(
        self, message: dict[str, Any], request: int, output: int, channel: int, ready: int
    ) -> NoReturn:
        """In the forked child: become the worker the checker asked for; never returns."""
        try:
            os.setsid()  # before the checker has the pid: it may killpg it at once
            from shard_tutorial.processes import die_with  # noqa: PLC0415

            die_with(self.me)  # the zygote dies with the checker
            os.write(ready, b"\0")
            # Only the descriptors a started worker has: 0, 1, 2, its channel, and
            # what the imports opened (no socket, pidfd or other worker's pipe).
            first = max(self.kept | {self.target, 2}) + 1
            moved = [_dup_above(fd, first) for fd in (request, output, channel)]
            for fd in _open_fds() - self.kept - set(moved) - {0, 1, 2}:
                with contextlib.suppress(OSError):
                    os.close(fd)
            for fd, target in zip(moved, (0, 1, self.target), strict=True):
                os.dup2(fd, target)
            os.dup2(moved[1], 2)
            for fd in moved:
                os.close(fd)
            os.chdir(message["cwd"])
            environ: dict[str, str] = message["environ"]
            for name in [k for k in os.environ if k not in environ]:
                del os.environ[name]
            own = {k: v for k, v in environ.items() if os.environ.get(k) != v}
            os.environ.update(own)
            self.room.write(own)
            import numpy as np  # noqa: PLC0415

            # NumPy's global generator was seeded when the zygote imported it: a worker's own.
            np.random.seed()  # noqa: NPY002
            del sys.argv[1:]  # the worker's command line: python -m shard_tutorial.checking.worker
        except BaseException as error:  # noqa: BLE001 (reported as the worker's output)
            with contextlib.suppress(OSError):
                os.write(output, f"the forked worker could not be set up: {error!r}\n".encode())
            os._exit(_BROKEN)
        os._exit(_run_as_main())


def _dup_above(fd: int, lowest: int) -> int:
    import fcntl  # noqa: PLC0415 (the zygote only)

    return fcntl.fcntl(fd, fcntl.F_DUPFD, lowest)


def _run_as_main() -> int:
    """Run the worker module as ``python -m`` does, then end as the interpreter does.

    Returns:
      The exit status: that of ``SystemExit``, 1 after an uncaught exception.
    """
    import runpy  # noqa: PLC0415

    code = 0
    try:
        runpy.run_module(_WORKER, run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            code = stop.code or 0
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 (the interpreter prints it and exits with 1)
        sys.excepthook(*sys.exc_info())
        code = 1
    # What the interpreter does at its end: wait for the threads that are not
    # daemons, run the atexit functions, flush the standard streams.
    with contextlib.suppress(BaseException):
        threading._shutdown()  # type: ignore[attr-defined]
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()
    return code & 0xFF


def main(argv: list[str] | None = None) -> int:
    """Serve as the zygote of the checker whose socket and pid the command line gives.

    It exits (with status 0) when the checker is gone or closes the socket.

    Returns:
      The exit status if it cannot serve: 1 if the imports or the environment do not
      allow it, 2 for a command line that the checker did not write, 0 if the checker
      was gone before it could be watched.
    """
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or not all(arg.isdigit() for arg in args):
        sys.stderr.write(
            f"usage: python -m {_ZYGOTE} SOCKET_FD CHECKER_PID (the checker starts it)\n"
        )
        return 2
    channel = socket.socket(fileno=int(args[0]))
    checker = int(args[1])
    watch = os.pidfd_open(checker)
    if os.getppid() != checker:  # gone before it could be watched
        return 0
    try:
        _preload()
        room = _Room()
    except Exception as error:  # noqa: BLE001 (any failure: the checker does without)
        with contextlib.suppress(OSError):
            channel.sendall(json.dumps({"op": "unusable", "reason": repr(error)}).encode() + b"\n")
        return 1
    kept = _open_fds() - {0, 1, 2, channel.fileno(), watch}
    become_subreaper()  # orphans of what the workers start become its own, to end (_sweep)
    return _Server(channel, checker, room, kept).serve(watch)  # it never returns


if __name__ == "__main__":
    sys.exit(main())
