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

sys.path.insert(0, str(Path(__file__).parent))  # judging.py; pytest runs with --import-mode=importlib

# JAX compiles once per new shape, which can take longer than hypothesis' default
# per-example deadline on a loaded machine; the suite has no timing assertions.
hypothesis.settings.register_profile("jax", deadline=None, max_examples=25)
hypothesis.settings.load_profile("jax")


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
