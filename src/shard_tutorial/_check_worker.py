"""The process that runs a solution on a problem's cases, for :mod:`shard_tutorial.checker`.

One worker runs on one device count, which it fixes before anything else touches JAX.
It reads its request from the pickle file named on the command line and reports on the
pipe named in the request, one JSON object per line, so that whatever the solution
prints cannot be mistaken for a report:

- ``{"event": "ready"}`` once the solution is loaded, or ``{"event": "load_error", ...}``;
- ``{"event": "start", "case": i}`` before each case, so the parent knows which one a
  hang or a crash happened in;
- ``{"event": "result", "case": i, "status": "pass" | "fail" | "error", ...}`` after it;
- ``{"event": "done"}`` at the end.
"""

from __future__ import annotations

import functools
import json
import os
import pickle
import re
import runpy
import sys
import sysconfig
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

MESSAGE_LIMIT = 4000  # characters of an error message kept in a report
# JAX's note that it hid its own frames: true here too, and not what a reader needs.
JAX_FILTER_NOTE = re.compile(
    r"-{20}\nFor simplicity, JAX has removed its internal frames.*", re.DOTALL
)


@functools.cache
def library_dirs() -> tuple[Path, ...]:
    """Folders of code that is not the reader's: the stdlib, installed packages, this one."""
    paths = sysconfig.get_paths()
    dirs = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    dirs.add(str(Path(__file__).parent))
    return tuple(Path(d).resolve() for d in dirs)


def is_library_file(filename: str) -> bool:
    """Whether ``filename`` is library code (see :func:`library_dirs`), not the reader's."""
    path = Path(filename).resolve()
    return any(path.is_relative_to(directory) for directory in library_dirs())


def describe_exception(error: BaseException) -> str:
    """The error's type and message, then the frames of the solution's own code."""
    frames = [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if not frame.filename.startswith("<frozen") and not is_library_file(frame.filename)
    ]
    message = "".join(traceback.format_exception_only(type(error), error)).strip()
    message = JAX_FILTER_NOTE.sub("", message).strip()
    if len(message) > MESSAGE_LIMIT:
        message = message[:MESSAGE_LIMIT] + " [...]"
    if "use_cpu_devices" in message:
        message += (
            "\n(The checker sets the device count itself: leave use_cpu_devices out of the "
            "code you check.)"
        )
    if not frames:
        return message
    return message + "\nin your code:\n" + "".join(traceback.format_list(frames)).rstrip()


def load_solution(spec: dict[str, Any]) -> Callable[..., Any]:
    """The solution function: from a file (run as a module) or from a pickled function."""
    if spec["kind"] == "file":
        namespace = runpy.run_path(spec["path"], run_name="solution")
        function = namespace.get(spec["function"])
        if not callable(function):
            msg = f"{spec['path']} defines no function named {spec['function']!r}"
            raise NameError(msg)
        return function
    import cloudpickle  # noqa: PLC0415 (only needed for functions passed from Python)

    function = cloudpickle.loads(spec["pickle"])
    if not callable(function):
        msg = f"the solution is a {type(function).__name__}, not a function"
        raise TypeError(msg)
    return function


def main(request_file: str) -> int:
    """Run the request in ``request_file``; report on its pipe."""
    request = pickle.loads(Path(request_file).read_bytes())  # written by our parent
    channel = os.fdopen(request["fd"], "w", buffering=1)

    def emit(**event: Any) -> None:
        channel.write(json.dumps(event) + "\n")
        channel.flush()

    from shard_tutorial.devices import use_cpu_devices  # noqa: PLC0415 (before JAX starts)

    use_cpu_devices(request["devices"])
    import jax  # noqa: PLC0415

    jax.devices()  # start the backend now, so the solution cannot change the device count

    from shard_tutorial.problems import get_problem  # noqa: PLC0415

    problem = get_problem(request["problem"])
    sys.path.insert(0, str(Path.cwd()))
    # The solution's code may raise anything, SystemExit included; only Ctrl-C
    # (KeyboardInterrupt) stops the worker, as the reader meant.
    try:
        solution = load_solution(request["solution"])
    except (Exception, SystemExit) as error:  # noqa: BLE001
        emit(event="load_error", message=describe_exception(error))
        return 0
    emit(event="ready")
    for index in range(request["start"], len(problem.cases)):
        case = problem.cases[index]
        emit(event="start", case=index)
        began = time.perf_counter()
        try:
            received = jax.block_until_ready(solution(*case.jax_args()))
            diagnosis = problem.diagnose(case, received)
        except (Exception, SystemExit) as error:  # noqa: BLE001 (as above)
            status, message = "error", describe_exception(error)
        else:
            status, message = ("pass", "") if diagnosis is None else ("fail", diagnosis)
        emit(
            event="result",
            case=index,
            status=status,
            message=message,
            seconds=round(time.perf_counter() - began, 3),
        )
    emit(event="done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
