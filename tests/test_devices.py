"""use_cpu_devices: in fresh interpreters, since the device count is fixed per process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import jax
import pytest

from shard_tutorial import use_cpu_devices


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


@pytest.mark.subprocesses  # a fresh process of its own, whatever this one's --devices
@pytest.mark.parametrize("count", [1, 3, 8])
def test_gives_a_fresh_process_that_many_cpu_devices(count):
    result = run_python(f"""
        import jax
        from shard_tutorial import use_cpu_devices
        use_cpu_devices({count})
        print(jax.device_count(), {{d.platform for d in jax.devices()}})
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(count), "{'cpu'}"]


@pytest.mark.subprocesses  # a fresh process of its own, whatever this one's --devices
def test_too_late_is_a_clear_error():
    result = run_python("""
        import jax, jax.numpy as jnp
        from shard_tutorial import use_cpu_devices
        jnp.zeros(3)  # starts the backend with 1 device
        use_cpu_devices(4)
    """)
    assert result.returncode != 0
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("RuntimeError: use_cpu_devices(4) came too late")
    assert "already started with 1 cpu device(s)" in last_line
    assert "fresh process" in last_line


def test_repeating_the_current_count_is_allowed():
    use_cpu_devices(jax.device_count())  # e.g. a notebook cell run twice


@pytest.mark.parametrize(
    ("count", "error", "message"),
    [
        (0, ValueError, "count must be at least 1, got 0"),
        (-8, ValueError, "count must be at least 1, got -8"),
        (2.0, TypeError, "count must be an integer number of devices, got float 2.0"),
        ("8", TypeError, "count must be an integer number of devices, got str '8'"),
        (True, TypeError, "count must be an integer number of devices, got True"),
    ],
)
def test_bad_counts_are_rejected_before_touching_jax(count, error, message):
    with pytest.raises(error, match=f"^{message}$"):
        use_cpu_devices(count)
