"""How :func:`shard_tutorial.launch` runs the script in each process.

Each process runs ``python .../_launched.py SCRIPT ARGS``, which runs SCRIPT as
``python SCRIPT ARGS`` would (as ``__main__``, with the same ``sys.argv`` and
``sys.path[0]``, an uncaught exception printed the same way, the same exit status),
and tells the launcher when the script fails (an uncaught exception, or ``sys.exit``
with a status other than 0), with that status, before the process exits.

The process may not exit for a long while: after the script, JAX shuts its
distributed runtime down, and that waits at a barrier (for up to five minutes) until
every process of the cluster gets there. A process waiting in a collective for the
failed one never does, until gloo gives up (after 30 s), and then it seems to be the
one that failed. Told at once, the launcher names the failed process, and stops the
others (and the failed one, still at the barrier) ``grace`` seconds later, unless
they all finish by then.

This file imports nothing but Python's standard library, and the launcher runs it by
its path, so any Python with JAX can run a script through it.
"""

from __future__ import annotations

import contextlib
import os
import runpy
import signal
import sys
from collections.abc import Sequence

STATUS_FD = "SHARD_TUTORIAL_STATUS_FD"
"""The environment variable that names the descriptor to write a failed script's status to."""


def run(script: str, args: Sequence[str] = ()) -> int:
    r"""Run ``script`` as ``python script *args`` would; return its exit status.

    It sets ``sys.argv`` and ``sys.path[0]`` for the script, for good: this is the
    main function of a process that exists to run the script. If the script fails,
    the launcher is told its status before this returns.

    Args:
      script: the path of the Python file, as given (tracebacks show it so).
      args: its command-line arguments (``sys.argv[1:]``).

    Returns:
      The exit status it asked for (0 when it ran to its end), or 1 if it raised an
      exception, whose traceback is printed (through ``sys.excepthook``, from the
      script's own frames on, as Python does).

    Raises:
      KeyboardInterrupt: if the script did not catch one, as Python would end by it.

    Examples:
      As :func:`~shard_tutorial.launch` runs a script, here in a process of its own:

      >>> import subprocess, sys, tempfile
      >>> from pathlib import Path
      >>> from shard_tutorial import _launched
      >>> script = Path(tempfile.mkdtemp()) / "steps.py"
      >>> _ = script.write_text(
      ...     "import sys\n"
      ...     "print(sys.argv)\n"
      ...     "def step(n):\n"
      ...     "    raise ValueError(f'step {n} failed')\n"
      ...     "step(3)\n"
      ... )
      >>> ran = subprocess.run(
      ...     [sys.executable, _launched.__file__, str(script), "--steps", "3"],
      ...     capture_output=True, text=True,
      ... )
      >>> ran.returncode, ran.stdout == f"[{str(script)!r}, '--steps', '3']\n"
      (1, True)
      >>> print(ran.stderr, end="")
      Traceback (most recent call last):
        File ".../steps.py", line 5, in <module>
          step(3)...
        File ".../steps.py", line 4, in step
          raise ValueError(f'step {n} failed')
      ValueError: step 3 failed
    """
    sys.argv = [script, *args]
    sys.path[0:1] = [os.path.dirname(os.path.realpath(script))]  # noqa: PTH120 (as Python)
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exit_:
        status = _status(exit_.code)
    except KeyboardInterrupt:
        _tell_launcher(-signal.SIGINT)  # Python ends by SIGINT after one
        raise
    except BaseException as error:  # noqa: BLE001 (what Python would print, it prints)
        traceback = error.__traceback__
        while traceback is not None and traceback.tb_frame.f_code.co_filename != script:
            traceback = traceback.tb_next  # this file's frames and runpy's
        sys.excepthook(type(error), error.with_traceback(traceback), traceback)
        status = 1
    else:
        status = 0
    _tell_launcher(status)
    return status


def _status(code: object) -> int:
    """The exit status of ``sys.exit(code)``, printing ``code`` if it is not a number, as Python.

    Examples:
      >>> from shard_tutorial._launched import _status
      >>> _status(None), _status(3), _status(True)
      (0, 3, 1)
      >>> _status("no data")  # and prints "no data" to standard error
      1
    """
    if code is None:
        return 0
    if isinstance(code, int):
        return int(code)  # True is 1
    print(code, file=sys.stderr)
    return 1


def _status_fd() -> int | None:
    """The launcher's descriptor for a failed status, kept from the script's own children."""
    fd = os.environ.pop(STATUS_FD, "")
    if not fd.isdigit():
        return None
    with contextlib.suppress(OSError):
        os.set_inheritable(int(fd), False)
        return int(fd)
    return None


_STATUS_FD = _status_fd() if __name__ == "__main__" else None


def _tell_launcher(status: int) -> None:
    """Write a failed script's status to the launcher, before JAX's exit can hold the process."""
    if status and _STATUS_FD is not None:
        for stream in (sys.stdout, sys.stderr):  # what the script printed comes first
            with contextlib.suppress(Exception):  # closed by the script, say
                stream.flush()
        with contextlib.suppress(OSError):
            os.write(_STATUS_FD, f"{status}\n".encode())


if __name__ == "__main__":
    sys.exit(run(sys.argv[1], sys.argv[2:]))
