"""Test-session setup shared by the tests and the doctests: how many CPU devices JAX gets.

``pytest --devices N`` (default 8) gives the process N fake CPU devices before any
test or doctest runs JAX, so the same suite checks the code on one device and on
many. The count is fixed per process; nox runs the suite once per count.
"""

from __future__ import annotations

import pytest

DEFAULT_DEVICES = 8


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--devices",
        type=int,
        default=DEFAULT_DEVICES,
        help=f"number of fake CPU devices JAX starts with (default {DEFAULT_DEVICES})",
    )


def pytest_configure(config: pytest.Config) -> None:
    from shard_tutorial import use_cpu_devices  # noqa: PLC0415 (after option parsing)

    use_cpu_devices(config.getoption("--devices"))


def pytest_report_header(config: pytest.Config) -> str:
    import flax  # noqa: PLC0415
    import jax  # noqa: PLC0415

    return (
        f"shard_tutorial: {config.getoption('--devices')} fake CPU devices, "
        f"jax {jax.__version__}, flax {flax.__version__}"
    )
