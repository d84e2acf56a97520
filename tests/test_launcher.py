"""The launcher's refusals: impossible arguments are named before any process starts."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from shard_tutorial import join_cluster, launch


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "script.py"
    path.write_text("print('never run')\n")
    return path


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"processes": 0}, ValueError, "processes must be at least 1, got 0"),
        ({"processes": 2.0}, TypeError, "processes must be an integer, got float 2.0"),
        ({"processes": True}, TypeError, "processes must be an integer, got True"),
        ({"devices_per_process": -1}, ValueError, "devices_per_process must be at least 1"),
        ({"timeout": 0}, ValueError, "timeout must be a positive, finite number of seconds"),
        ({"grace": float("inf")}, ValueError, "grace must be a positive, finite number"),
        ({"port": 70000}, ValueError, "port must be between 1 and 65535, got 70000"),
        ({"port": "80"}, TypeError, "port must be an integer or None, got '80'"),
    ],
)
def test_impossible_arguments_are_refused(script, kwargs, error, message):
    with pytest.raises(error, match=message):
        launch(script, **{"processes": 2, "devices_per_process": 4, **kwargs})


def test_a_missing_script_is_refused(tmp_path):
    missing = tmp_path / "nowhere.py"
    with pytest.raises(ValueError, match=r"script must be an existing Python file, got .*nowhere"):
        launch(missing, processes=2, devices_per_process=4)


def test_a_port_in_use_is_refused(script):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ValueError, match=f"port {port} cannot be bound on 127.0.0.1"):
            launch(script, processes=2, devices_per_process=4, port=port)


def test_outside_a_launch_join_cluster_joins_nothing():
    assert join_cluster() is False


# What gloo's threads print to descriptor 1 (a whole message, then the pieces that
# interleaving leaves), another native line, and the script's own prints.
NATIVE_AND_PYTHON = """\
import os

from shard_tutorial.launcher import _filter_native_stdout

print("before")
thread = _filter_native_stdout()
os.write(1, b"[Gloo] Rank 3 is connected to 7 peer ranks. ")
print("496")
os.write(1, b"Expected number of connected peer ranks is : 7\\n")
os.write(1, b"[Gloo] Rank [Gloo] Rank 5 is connected to \\n7\\n")
os.write(1, b"a native warning\\n")
print("after", flush=True)
os.close(1)  # the end of the native stream: the forwarding thread finishes
thread.join(timeout=10)
"""


@pytest.mark.subprocesses  # a fresh process of its own, whatever this one's --devices
def test_native_output_is_kept_out_of_the_scripts_lines(tmp_path):
    path = tmp_path / "native.py"
    path.write_text(NATIVE_AND_PYTHON)
    ran = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "before\n496\nafter\n"
    assert ran.stderr == "a native warning\n"


@pytest.mark.subprocesses
def test_a_launched_script_runs_as_python_would_run_it(tmp_path):
    (tmp_path / "helper.py").write_text("NAME = 'helper'\n")
    path = tmp_path / "script.py"
    path.write_text(
        "import sys\n"
        "import helper  # beside the script: sys.path[0] is the script's folder\n"
        "print(__name__, sys.argv[1:], helper.NAME)\n"
        "if sys.argv[1] == 'raise':\n"
        "    raise RuntimeError('gave up')\n"
        "sys.exit(int(sys.argv[1]))\n"
    )
    ok = launch(path, "0", processes=1, devices_per_process=1)
    assert (ok.returncode, ok.processes[0].output) == (0, "__main__ ['0'] helper\n")
    exits = launch(path, "3", processes=1, devices_per_process=1)
    assert exits.failure == "process 0 failed (exit status 3)"
    assert exits.processes[0].returncode == 3
    raises = launch(path, "raise", processes=1, devices_per_process=1)
    assert raises.processes[0].returncode == 1
    # Python's traceback, from the script's own line: not the lines that ran the script.
    assert raises.processes[0].output.splitlines()[1:] == [
        "Traceback (most recent call last):",
        f'  File "{path}", line 5, in <module>',
        "    raise RuntimeError('gave up')",
        "RuntimeError: gave up",
    ]
