"""The launcher on real 2-process JAX clusters: results, a killed process, a hang, Ctrl-C.

Every test launches scripts that join JAX's distributed runtime on 127.0.0.1 (gloo
collectives), and proves through /proc that no process outlives it (``tagged_env``).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest
from processes import command_started, communicate

from shard_tutorial import launch

# The work runs in the launched processes, with their own device counts.
pytestmark = [pytest.mark.subprocesses, pytest.mark.distributed]

PSUM_SCRIPT = """\
import jax.numpy as jnp

import shard_tutorial

shard_tutorial.join_cluster(devices=8)
print(shard_tutorial.shard_map_psum(jnp.arange(32)))
"""


def test_the_psum_script_prints_496_once_per_process_and_runs_alone_too(script, tagged_env):
    path = script(PSUM_SCRIPT)
    env = {**os.environ, **tagged_env}
    command = [sys.executable, "-m", "shard_tutorial", "launch", "--processes", "2"]
    launched = subprocess.run(
        [*command, "--devices-per-process", "4", str(path)],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    assert sorted(launched.stdout.splitlines()) == ["[0] 496", "[1] 496"]
    assert launched.stderr == ""  # gloo's connection messages are filtered out
    alone = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=300, check=False
    )  # fmt: skip
    assert (alone.returncode, alone.stdout) == (0, "496\n"), alone.stderr


STEPS_SCRIPT = """\
import os
import re
import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp

import shard_tutorial

shard_tutorial.join_cluster()
# A child of the script, which must go with it (the launcher kills process groups).
subprocess.Popen(["sleep", "600"])
for step in range(600):
    total = shard_tutorial.shard_map_psum(jnp.arange(32) + step)
    print(f"step {step}: {total}", flush=True)
    if step == 3 and jax.process_index() == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would
    time.sleep(0.1)
"""


def test_a_script_launched_again_runs_with_jaxs_persistent_cache_on(script, tagged_env, tmp_path):
    # The second launch would read the cluster's programs back from the cache: with jax
    # 0.12.1 they hung in their first collective, so every process of a cluster turns the
    # cache off (shard_tutorial.devices.join_cpu_cluster). Both launches must finish.
    path = script(PSUM_SCRIPT)
    env = {**tagged_env, "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "cache"),
           "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
           "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}  # fmt: skip
    for _ in range(2):
        result = launch(path, processes=2, devices_per_process=4, timeout=60, env=env)
        assert result.returncode == 0, result.failure
        assert [p.output.strip() for p in result.processes] == ["496", "496"]


def test_a_killed_process_stops_the_others_and_is_named(script, tagged_env):
    result = launch(
        script(STEPS_SCRIPT), processes=2, devices_per_process=4, grace=1, env=tagged_env
    )
    assert result.returncode == 1
    zero, one = result.processes
    assert (one.returncode, one.stopped) == (-signal.SIGKILL, False)
    assert one.output.splitlines()[-1] == "step 3: 592"
    assert zero.stopped  # waiting for process 1 in the next psum: killed by the launcher
    assert "step 3: 592" in zero.output
    assert "step 5:" not in zero.output  # step 4 needs process 1: it cannot be complete
    assert result.failure == (
        "process 1 failed (exit status -9, killed by SIGKILL); process 0 stopped 1 s later"
    )
    report = result.report()
    assert "process 1 exited with status -9, killed by SIGKILL; its last output:" in report
    assert "  [1] step 3: 592" in report
    assert "process 0 was stopped by the launcher" in report


def test_a_failing_process_is_reported_with_its_traceback(script, tagged_env):
    path = script(
        """\
        import jax
        import shard_tutorial

        shard_tutorial.join_cluster()
        if jax.process_index() == 0:
            raise RuntimeError("process 0 gave up")
        jax.numpy.zeros(3).block_until_ready()
        print("process 1 done", flush=True)
        """
    )
    result = launch(path, processes=2, devices_per_process=1, env=tagged_env)
    assert result.returncode == 1
    assert result.failure.startswith("process 0 failed (exit status 1)")
    assert "RuntimeError: process 0 gave up" in result.processes[0].output
    assert "  [0] RuntimeError: process 0 gave up" in result.report()


EARLY_EXIT_SCRIPT = """\
import sys
import time

import jax
import jax.numpy as jnp

import shard_tutorial

shard_tutorial.join_cluster()
if jax.process_index() == 1:
    print(f"exits at {time.time()}", flush=True)
    sys.exit(3)  # before the collective, in which process 0 waits for it
print(shard_tutorial.shard_map_psum(jnp.arange(32)), flush=True)
"""


@pytest.mark.parametrize("via", ["python", "command"])
def test_a_process_that_exits_early_stops_the_cluster_within_seconds(script, tagged_env, via):
    path = script(EARLY_EXIT_SCRIPT)
    if via == "python":
        result = launch(path, processes=2, devices_per_process=4, env=tagged_env)
        ended = time.time()
        returncode, report = result.returncode, result.report()
        output = result.processes[1].output
    else:
        run = subprocess.run(
            [sys.executable, "-m", "shard_tutorial", "launch", "--processes", "2",
             "--devices-per-process", "4", str(path)],
            capture_output=True, text=True, env={**os.environ, **tagged_env}, timeout=300,
            check=False,
        )  # fmt: skip
        ended = time.time()
        returncode, report, output = run.returncode, run.stderr, run.stdout
    exited = float(re.search(r"exits at ([0-9.]+)", output).group(1))
    # Not gloo's 30 s for process 0's collective, nor the 5 minutes of JAX's exit barrier
    # for process 1: the launcher's grace (2 s) after process 1 exits, and the stopping.
    assert ended - exited < 15, report
    assert returncode == 1
    assert report.splitlines()[0] == (
        "process 1 failed (exit status 3); process 0 stopped 2 s later"
    ), report


HANG_SCRIPT = """\
import time

import jax
import jax.numpy as jnp

import shard_tutorial

shard_tutorial.join_cluster()
# Each value is computed before its line is printed: gloo connects during the first
# collective and prints from C++ into the middle of whatever line Python is writing.
first = shard_tutorial.shard_map_psum(jnp.arange(32))
print(f"first psum: {first}", flush=True)
if jax.process_index() == 1:
    time.sleep(3600)  # process 1 never reaches the second psum: process 0 waits in it
second = shard_tutorial.shard_map_psum(jnp.arange(32))
print(f"second psum: {second}", flush=True)
"""


def test_a_hang_in_a_collective_is_stopped_at_the_timeout(script, tagged_env):
    start = time.monotonic()
    result = launch(
        script(HANG_SCRIPT), processes=2, devices_per_process=4, timeout=25, env=tagged_env
    )
    assert time.monotonic() - start < 40  # stopped at the timeout, not at XLA's own
    assert result.returncode == 1
    assert result.failure == "timed out after 25 s: processes 0, 1 still running (hung?), stopped"
    zero, one = result.processes
    assert zero.stopped
    assert one.stopped
    # Both printed the first total; process 0 waits in the second collective for process
    # 1, which sleeps: neither prints the second.
    assert zero.output.splitlines()[0] == "first psum: 496"
    assert one.output.splitlines()[0] == "first psum: 496"
    assert "second psum" not in zero.output
    assert "second psum" not in one.output


def test_ctrl_c_stops_every_process(script, tagged_env, interruptible_cli):
    path = script(STEPS_SCRIPT.replace("process_index() == 1", "process_index() == 99"))
    with subprocess.Popen(  # its pipes are closed whatever happens
        interruptible_cli("launch", "--processes", "2", "--devices-per-process", "2", path),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **tagged_env},
    ) as cli:  # fmt: skip
        try:
            seen: set[str] = set()
            assert cli.stdout is not None
            for line in cli.stdout:  # both processes are in their loop of psums
                seen.add(line.split()[0])
                if seen == {"[0]", "[1]"}:
                    break
            cli.send_signal(signal.SIGINT)  # to the command only, as a terminal's Ctrl-C
            _, stderr = communicate(cli, timeout=60)
        finally:
            cli.kill()
    assert cli.returncode == 130
    assert stderr.endswith("interrupted: every process was stopped\n")


# While JAX is imported (a native module of jaxlib initialising, then a moment into the
# import), while the processes start and join, while they run.
@pytest.mark.parametrize("moment", ["jaxlib-init", 0.5, 1.5, 3.0, 6.0])
def test_ctrl_c_at_any_moment_stops_the_launch(script, tagged_env, interruptible_cli, moment):
    path = script(STEPS_SCRIPT.replace("process_index() == 1", "process_index() == 99"))
    env = {**os.environ, **tagged_env}
    if moment == "jaxlib-init":
        env["SHARD_TUTORIAL_TEST_CTRL_C_NATIVE"] = "1"  # the command interrupts itself
    with subprocess.Popen(  # its pipes are closed whatever happens
        interruptible_cli("launch", "--processes", "2", "--devices-per-process", "2", path),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    ) as cli:  # fmt: skip
        try:
            command_started(cli)  # Python has started: the moment counts from here
            if moment != "jaxlib-init":
                time.sleep(moment)
                cli.send_signal(signal.SIGINT)
            stdout, stderr = communicate(cli, timeout=60)  # the script runs a minute or more
        finally:
            cli.kill()
    assert "nanobind" not in stderr
    if moment == "jaxlib-init":
        # Held until the import ended (before the fix: "Critical nanobind error", -6),
        # then taken before any process started.
        assert "Ctrl-C pressed in " in stderr, stderr
        assert (cli.returncode, stdout) == (130, ""), stderr
        assert stderr.endswith("interrupted: every process was stopped\n"), stderr
    elif cli.returncode != -signal.SIGINT:  # before main(), Python's own handler: -2
        assert cli.returncode == 130, (moment, stderr)
        assert stderr.endswith("interrupted: every process was stopped\n"), (moment, stderr)
    # tagged_env: no process of the launch is left behind.


def test_killing_the_launcher_itself_kills_its_processes(script, tagged_env, left_behind):
    # Quiet after one line: a process that prints would die of the closed pipe anyway.
    path = script(PSUM_SCRIPT + "import time\ntime.sleep(600)\n")
    with subprocess.Popen(
        [sys.executable, "-m", "shard_tutorial", "launch", "--processes", "2",
         "--devices-per-process", "2", str(path)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={**os.environ, **tagged_env},
    ) as cli:  # fmt: skip
        try:
            seen: set[str] = set()
            assert cli.stdout is not None
            for line in cli.stdout:  # both processes joined and summed: they are alive
                seen.add(line.split()[0])
                if seen == {"[0]", "[1]"}:
                    break
        finally:
            cli.kill()  # SIGKILL: the launcher cannot stop anything itself
    deadline = time.monotonic() + 10
    while left_behind() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left_behind() == []  # Linux killed them with their parent
