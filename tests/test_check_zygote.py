"""The checker's workers are forked from one zygote per process, and lose no guarantee by it.

A worker forked from the zygote (:mod:`shard_tutorial.checking.zygote`) must behave
as one started afresh: these tests look at what only the fork could change (who its
parent is, which zygote serves which environment, what dies with what); the rest of
the checker's tests run on forked workers too.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from judging import pasted_reference
from processes import alive

from shard_tutorial import check
from shard_tutorial.checking.zygote import SWITCH, ZYGOTES, Zygote
from shard_tutorial.problems import get_problem

pytestmark = [pytest.mark.subprocesses, pytest.mark.once]

# The problem's first two cases, no random ones and no refused inputs: what is tested
# is the process.
SHORT_PSUM = dataclasses.replace(
    get_problem("shard_map_psum"),
    make_cases=lambda: get_problem("shard_map_psum").cases[:2],
    generate=None,
    make_refusals=None,
)
REFERENCE = pasted_reference("shard_map_psum")


def gone_within(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while any(alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def parents(tmp_path: Path, body: str = "") -> tuple[Path, Path]:
    """A right solution whose process writes ``pid ppid`` to a file when loaded, and the file."""
    record = tmp_path / "processes.txt"
    source = (
        REFERENCE
        + "import os\n"
        + f"with open({str(record)!r}, 'a') as out:\n"
        + "    out.write(f'{os.getpid()} {os.getppid()}\\n')\n"
        + textwrap.dedent(body)
        + "shard_map_psum = reference\n"
    )
    path = tmp_path / "solution.py"
    path.write_text(source)
    return path, record


def recorded(record: Path) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in (line.split() for line in record.read_text().splitlines())]


def test_two_checks_fork_their_workers_from_one_zygote(tmp_path):
    path, record = parents(tmp_path)
    before = ZYGOTES.started
    for _ in range(2):
        report = check(SHORT_PSUM, path, devices=(1,))
        assert report.passed, str(report)
    (first, zygote), (second, again) = recorded(record)
    assert zygote == again != os.getpid()  # both forked by the same process, not this one
    assert first != second
    assert ZYGOTES.started - before <= 1  # none if an earlier test of this process started it
    assert zygote in {z.pid for z in ZYGOTES.zygotes.values()}


def test_a_zygote_killed_between_checks_is_replaced(tmp_path):
    path, record = parents(tmp_path)
    assert check(SHORT_PSUM, path, devices=(1,)).passed
    (_, zygote), = recorded(record)  # fmt: skip
    os.kill(zygote, signal.SIGKILL)
    assert gone_within([zygote], 10)
    before = ZYGOTES.started
    report = check(SHORT_PSUM, path, devices=(1,))
    assert report.passed, str(report)
    (_, _), (_, replacement) = recorded(record)
    assert replacement not in {zygote, os.getpid()}
    assert ZYGOTES.started == before + 1


def test_another_environment_gets_a_zygote_of_its_own_for_its_checks_only(tmp_path, monkeypatch):
    path, record = parents(
        tmp_path,
        """
        if os.environ.get("SHARD_TUTORIAL_TEST_ZYGOTE") != "seen":
            raise RuntimeError("the worker does not have the checker's environment")
        """,
    )
    monkeypatch.setenv("SHARD_TUTORIAL_TEST_ZYGOTE", "seen")  # JAX could read such a variable
    report = check(SHORT_PSUM, path, devices=(1,))
    assert report.passed, str(report)
    (_, zygote), = recorded(record)  # fmt: skip
    assert zygote != os.getpid()
    assert not alive(zygote)  # ended with the check: the environment is not the usual one


def test_with_the_switch_off_workers_are_started_afresh(tmp_path, monkeypatch):
    path, record = parents(tmp_path)
    monkeypatch.setenv(SWITCH, "0")
    before = ZYGOTES.started
    assert check(SHORT_PSUM, path, devices=(1,)).passed
    (_, parent), = recorded(record)  # fmt: skip
    assert parent == os.getpid()
    assert ZYGOTES.started == before


def test_a_fork_in_a_session_of_its_own_carries_the_token_and_is_ended(tmp_path):
    # Linux shows in /proc/PID/environ what a process was started with: a forked
    # worker writes its token there, where the checker looks for what a check left.
    pids = tmp_path / "pids.txt"
    source = REFERENCE + textwrap.dedent(
        f"""
        import os, time
        from pathlib import Path

        def shard_map_psum(x):
            token = "SHARD_TUTORIAL_CHECK=" + os.environ["SHARD_TUTORIAL_CHECK"]
            if token.encode() not in Path("/proc/self/environ").read_bytes().split(b"\\0"):
                raise RuntimeError("the token is not in /proc/self/environ")
            pid = os.fork()
            if pid == 0:
                os.setsid()  # out of the worker's process group
                time.sleep(1000)
                os._exit(0)
            with open({str(pids)!r}, "a") as out:
                out.write(f"{{pid}}\\n")
            return reference(x)
        """
    )
    path = tmp_path / "solution.py"
    path.write_text(source)
    report = check(SHORT_PSUM, path, devices=(1,))
    assert report.passed, str(report)
    started = [int(line) for line in pids.read_text().split()]
    assert started
    assert gone_within(started, 5)


def test_the_worker_and_its_zygote_die_with_a_killed_checker(tmp_path):
    path, record = parents(tmp_path, "import time\nwhile True:\n    time.sleep(0.1)\n")
    cli = subprocess.Popen(
        [sys.executable, "-m", "shard_tutorial", "check", "shard_map_psum", str(path),
         "--devices", "1"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not record.exists() or not record.read_text().endswith("\n"):
            assert cli.poll() is None
            assert time.monotonic() < deadline
            time.sleep(0.1)
        (worker, zygote), = recorded(record)  # fmt: skip
        assert zygote != cli.pid
        cli.kill()  # SIGKILL: the checker has no say
        cli.wait()
        assert gone_within([worker, zygote], 10)
    finally:
        cli.kill()
        cli.wait()


def test_the_zygote_refuses_a_command_line_it_was_not_given_by_a_checker():
    ran = subprocess.run(
        [sys.executable, "-m", "shard_tutorial.checking.zygote"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        timeout=60,
    )
    assert ran.returncode == 2
    assert "usage: python -m shard_tutorial.checking.zygote SOCKET_FD CHECKER_PID" in ran.stderr


@pytest.mark.parametrize("worker_state", ["running", "ended, not yet released"])
def test_a_closed_zygote_leaves_no_worker_behind_not_even_a_zombie(tmp_path, worker_state):
    # Before: close() killed the zygote, and its workers' zombies waited for the
    # system's first process to reap them (a Ctrl-C test saw one 0.5 s later).
    zygote, worker = Zygote(os.environ, str(tmp_path)), None
    try:
        assert zygote.wait_ready(give_up=lambda: False)
        read_channel, write_channel = os.pipe()
        with (tmp_path / "output").open("wb") as output:
            worker = zygote.spawn(os.environ, output.fileno(), write_channel)
        os.close(write_channel)
        os.close(read_channel)
        assert worker is not None  # it waits for its request, which never comes
        if worker_state != "running":
            worker.kill()
            assert zygote.status(worker.pid, timeout=30) == -signal.SIGKILL
            assert Path(f"/proc/{worker.pid}").exists()  # a zombie of the zygote's
    finally:
        zygote.close()
        if worker is not None:
            worker.stdin.close()  # closed only now: at its end of file the worker would exit
    assert worker is not None
    with pytest.raises(ProcessLookupError):
        os.kill(worker.pid, 0)
    assert zygote.process.returncode == 0  # it exited by itself, having reaped its workers
