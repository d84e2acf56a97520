"""What the multi-process tests share: scripts to launch, and a scan for processes left behind."""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

MARKER = "SHARD_TUTORIAL_TEST_LAUNCH"


def processes_with(tag: str) -> list[int]:
    """The live processes whose environment holds ``MARKER=tag`` (from /proc, no psutil)."""
    entry = f"{MARKER}={tag}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes()  # empty for a zombie: it is gone
        except OSError:  # ended meanwhile, or not ours to read
            continue
        if entry in environ.split(b"\0"):
            found.append(int(proc.name))
    return found


@pytest.fixture
def tagged_env() -> Iterator[dict[str, str]]:
    """An environment entry for launched processes; the test fails if any outlives it."""
    tag = uuid.uuid4().hex
    yield {MARKER: tag}
    left = processes_with(tag)
    for pid in left:  # clean up before failing, so one failure does not spoil the machine
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:  # noqa: PTH123
            print(pid, cmdline.read().replace(b"\0", b" "))
    if left:
        import os  # noqa: PLC0415
        import signal  # noqa: PLC0415

        for pid in left:
            os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left behind: {left}"


@pytest.fixture
def left_behind(tagged_env: dict[str, str]) -> Callable[[], list[int]]:
    """``left_behind()``: the processes, still alive, that a test launched with ``tagged_env``."""
    return lambda: processes_with(tagged_env[MARKER])


@pytest.fixture
def script(tmp_path: Path) -> Callable[[str], Path]:
    """``script(source)`` writes a script (dedented) and returns its path."""

    def write(source: str, name: str = "script.py") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(source))
        return path

    return write
