"""Fixtures shared by the tests: oracle comparison and compile counting."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import hypothesis
import jax
import numpy as np
import pytest

from shard_tutorial.problem import Case, Problem, precise

sys.path.insert(
    0, str(Path(__file__).parent)
)  # judging.py, processes.py; pytest runs with --import-mode=importlib
from processes import COMMAND_STARTS

# JAX compiles once per new shape, which can take longer than hypothesis' default
# per-example deadline on a loaded machine; the suite has no timing assertions. Each
# example is a new shape, so a compile (0.1 to 0.5 s): 6 examples, not hypothesis' 100.
# Hypothesis tries the small and boundary values first (0, 1, the smallest sizes a
# strategy allows), and the checker's own cases hold the layouts each problem must get
# right (primes, multiples of 8 and not), so the examples are for what no one wrote
# down. On one device every shape has the same layout, that one device: 3 there.
hypothesis.settings.register_profile("jax", deadline=None, max_examples=6)
hypothesis.settings.register_profile("jax-one-device", deadline=None, max_examples=3)


def pytest_configure(config: pytest.Config) -> None:
    one_device = config.getoption("--devices") == 1
    hypothesis.settings.load_profile("jax-one-device" if one_device else "jax")


def check_against_oracle(problem: Problem, case: Case, received: object) -> None:
    """Assert ``received`` has the oracle's shape, dtype and values for ``case``.

    For a problem with several outputs (``problem.outputs``), each one in turn.
    """
    expected = problem.expected(case)
    if problem.outputs:
        assert isinstance(received, tuple), f"{case.label}: not a tuple"
        assert len(received) == len(problem.outputs), f"{case.label}: {len(received)} outputs"
        for name, want, got in zip(problem.outputs, expected, received, strict=True):
            _check_array(problem, case, want, got, f"{case.label}, {name}")
    else:
        _check_array(problem, case, expected, received, case.label)


def _check_array(
    problem: Problem, case: Case, expected: np.ndarray, received: object, label: str
) -> None:
    received = np.asarray(received)
    assert received.shape == expected.shape, f"{label}: shape"
    assert received.dtype == expected.dtype, f"{label}: dtype"
    rtol, atol = problem.tolerance(case, expected.dtype)  # exact for ints, wider for bf16
    close = np.isclose(precise(received), precise(expected), rtol=rtol, atol=atol, equal_nan=True)
    assert close.all(), (
        f"{label}: {np.count_nonzero(~close)} differ, e.g. received "
        f"{received[~close][:3]}, expected {expected[~close][:3]}"
    )


@pytest.fixture
def assert_matches_oracle() -> Callable[[Problem, Case, object], None]:
    return check_against_oracle


@contextlib.contextmanager
def _count_compiles() -> Iterator[list[str]]:
    compiles: list[str] = []

    def listener(event: str, _duration: float, **_kwargs: object) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(event)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield compiles
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)


@pytest.fixture
def count_compiles() -> Callable[[], contextlib.AbstractContextManager[list[str]]]:
    """``with count_compiles() as compiles:`` records XLA compilations in the block."""
    return _count_compiles


@pytest.fixture
def device_count() -> int:
    return jax.device_count()


# `python -m shard_tutorial ARGS` as a terminal's Ctrl-C finds it: with Python's own SIGINT
# handler (Python leaves SIGINT ignored if it started that way, under `nohup` or `&` in a
# script, as pytest's subprocesses may be). With SHARD_TUTORIAL_TEST_CTRL_C_NATIVE set, it
# also presses Ctrl-C itself, at the first moment one of jaxlib's native modules, as it
# initialises, calls Python (nanobind creating an enum class, as JAX is imported): there,
# a KeyboardInterrupt aborts the whole process ("Critical nanobind error").
_INTERRUPTIBLE_CLI = """\
import faulthandler, os, runpy, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
faulthandler.register(signal.SIGUSR1, all_threads=True)  # a hanging test's diagnosis

def initialising(frame):
    # The native module the importer is creating or executing, if it called this frame.
    caller = frame.f_back
    if caller is None or caller.f_code.co_name != "_call_with_frames_removed":
        return None
    if frame.f_code.co_name == "<module>" or frame.f_code.co_filename.startswith("<frozen"):
        return None  # a Python module's code, or the importer's own
    f, args = caller.f_locals.get("f"), caller.f_locals.get("args") or (None,)
    if getattr(f, "__name__", None) not in ("create_dynamic", "exec_dynamic"):
        return None
    return getattr(args[0], "name", None) or getattr(args[0], "__name__", None)

def press_ctrl_c_in_jaxlib(frame, event, arg):
    module = initialising(frame) if event == "call" else None
    if module and module.startswith("jaxlib"):
        sys.setprofile(None)
        print(f"Ctrl-C pressed in {frame.f_code.co_qualname}, called by {module}'s init",
              file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGINT)

if os.environ.get("SHARD_TUTORIAL_TEST_CTRL_C_NATIVE"):
    sys.setprofile(press_ctrl_c_in_jaxlib)
sys.argv = ["shard_tutorial", *sys.argv[1:]]
print(COMMAND_STARTS, file=sys.stderr, flush=True)  # processes.command_started waits for it
runpy.run_module("shard_tutorial", run_name="__main__")
""".replace("COMMAND_STARTS", repr(COMMAND_STARTS))


@pytest.fixture
def interruptible_cli() -> Callable[..., list[str]]:
    """``interruptible_cli(*args)``: the command line of ``python -m shard_tutorial *args``.

    With Python's own Ctrl-C handler, as in a terminal; in an environment with
    ``SHARD_TUTORIAL_TEST_CTRL_C_NATIVE=1`` it interrupts itself while one of jaxlib's
    native modules initialises, and says so on standard error ("Ctrl-C pressed in ...").
    On ``SIGUSR1`` it prints the stack of each of its threads (``processes.communicate``).
    """
    return lambda *args: [sys.executable, "-c", _INTERRUPTIBLE_CLI, *map(str, args)]
