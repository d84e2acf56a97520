"""The solution checker: every reference passes, every classic mistake is caught and explained.

Each check runs the solution in fresh processes on 1 and 8 fake devices, whatever
device count this test process has.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from judging import pasted_reference
from processes import command_started, communicate

from shard_tutorial import PROBLEMS, check, reference_copy
from shard_tutorial.__main__ import main as cli_main
from shard_tutorial.checking import checker
from shard_tutorial.checking.checker import RANDOM_CASES, CheckReport, DeviceRun

# Each check runs in worker processes with their own device counts (1 and 8): the
# suite's --devices cannot change these outcomes, so nox runs them once per Python.
pytestmark = pytest.mark.subprocesses
# What a check does with processes (hangs, crashes, Ctrl-C, the command line) does not
# depend on the JAX installed: such tests run on the newest stack only (marker `once`).
# What the judge reads from JAX (errors, programs) runs on both: through the worker
# processes here, and for the judge's words on a mistake, in-process on both stacks
# (tests/test_checker_*.py and the corpus, tests/test_solutions.py), so the full checks
# of mistakes here run once.
ONCE = pytest.mark.once

HEADER = """\
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def mesh_for(n):
    d = jax.device_count()
    while n % d:
        d -= 1
    return jax.make_mesh((d,), ("data",), devices=jax.devices()[:d])

"""

# The classic mistakes of each problem's "common pitfalls", as a reader would write them.
# None checks its arguments: their checks leave out the inputs the statements refuse
# (refusals=False, as on the pages), to read the verdict on the mistake alone.
WRONG = {
    "psum left out": (
        "shard_map_psum",
        """
        def shard_map_psum(x):
            mesh = mesh_for(x.shape[0])
            x = jax.device_put(x, NamedSharding(mesh, P("data")))
            f = jax.shard_map(lambda b: jnp.sum(b), mesh=mesh, in_specs=P("data"),
                              out_specs=P(), check_vma=False)
            return f(x)
        """,
    ),
    "out_specs says replicated": (
        "shard_map_double",
        """
        def shard_map_double(x):
            mesh = mesh_for(x.shape[0])
            x = jax.device_put(x, NamedSharding(mesh, P("data")))
            f = jax.shard_map(lambda b: b * 2.0, mesh=mesh, in_specs=P("data"),
                              out_specs=P(), check_vma=False)
            return f(x)
        """,
    ),
    "model built per shard": (
        "shard_map_simulate",
        """
        def shard_map_simulate(seed, x, num_shards, features):
            num_shards, features = int(num_shards), int(features)
            chunk = x.shape[0] // num_shards
            outs = []
            for i in range(num_shards):
                model = nnx.Linear(x.shape[-1], features, rngs=nnx.Rngs(int(seed) + i))
                outs.append(model(jax.lax.dynamic_slice_in_dim(x, i * chunk, chunk, axis=0)))
            return jnp.concatenate(outs, axis=0).reshape(-1)
        """,
    ),
    "concatenated on the wrong axis": (
        "shard_map_simulate",
        """
        def shard_map_simulate(seed, x, num_shards, features):
            num_shards, features = int(num_shards), int(features)
            model = nnx.Linear(x.shape[-1], features, rngs=nnx.Rngs(int(seed)))
            chunk = x.shape[0] // num_shards
            outs = [model(jax.lax.dynamic_slice_in_dim(x, i * chunk, chunk, axis=0))
                    for i in range(num_shards)]
            return jnp.concatenate(outs, axis=1).reshape(-1)
        """,
    ),
    "per-row function on the whole block": (
        "shard_map_vs_vmap",
        """
        def shard_map_vs_vmap(x):
            mesh = mesh_for(x.shape[0])
            x = jax.device_put(x, NamedSharding(mesh, P("data")))
            f = jax.shard_map(lambda rows: jnp.sum(rows**2), mesh=mesh,
                              in_specs=P("data"), out_specs=P("data"))
            return jnp.stack([f(x), jax.vmap(lambda r: jnp.sum(r**2))(x)])
        """,
    ),
}


def solution_file(tmp_path: Path, body: str, name: str = "solution.py") -> Path:
    path = tmp_path / name
    path.write_text(HEADER + textwrap.dedent(body))
    return path


def flat(text: str) -> str:
    """``text`` with its line breaks and indentation as single spaces."""
    return " ".join(text.split())


def test_random_cases_come_from_the_seed_given(tmp_path):
    problem = PROBLEMS["shard_map_double"]
    report = check(problem, reference_copy(problem, tmp_path), devices=(1,), seed=5)
    assert report.seed == 5
    assert report.passed, str(report)
    rng = np.random.default_rng(5)
    expected = [problem.generate(rng).label for _ in range(RANDOM_CASES)]
    # After the problem's own cases, before the inputs the statement refuses.
    labels = [r.label for r in report.runs[0].results]
    start = len(problem.cases)
    assert labels[start : start + RANDOM_CASES] == expected
    assert labels[start + RANDOM_CASES :] == [c.label for c in problem.refusals]


@ONCE
def test_a_missing_psum_passes_on_1_device_and_is_caught_on_8(tmp_path):
    report = check(
        "shard_map_psum", solution_file(tmp_path, WRONG["psum left out"][1]), refusals=False
    )
    one, eight = report.runs
    # On 1 device a sum over the one device adds nothing: the statement asks for shard_map
    # alone there, and the report says those cases could not show the psum.
    assert one.passed, str(report)
    assert all(r.message for r in one.results)
    assert not eight.passed
    text = flat(str(report))
    assert "Passed, judged in part (pass*" in text
    assert "on a mesh of one device a ring of n - 1 hops makes none" in text
    assert "value: expected 496.0, received 6.0" in text
    assert "one device's partial sum" in text
    assert 'with jax.lax.psum over "data"' in text
    # Each wrong answer says what it is (one device's partial sum): no generic hint.
    assert "Every case gets the right values on 1 device" not in text


@ONCE
def test_an_out_specs_that_drops_blocks_is_caught(tmp_path):
    report = check(
        "shard_map_double",
        solution_file(tmp_path, WRONG["out_specs says replicated"][1]),
        refusals=False,
    )
    one, eight = report.runs
    assert one.passed
    assert not eight.passed
    assert "shape: expected (64,), received (8,)" in flat(str(report))
    assert "out_specs must put the blocks of all devices back together" in flat(str(report))


@ONCE
def test_a_model_built_per_shard_is_caught(tmp_path):
    path = solution_file(tmp_path, WRONG["model built per shard"][1])
    report = check("shard_map_simulate", path, refusals=False)
    assert not any(run.passed for run in report.runs)
    assert "build the model once, outside the loop" in flat(str(report))


@ONCE
def test_blocks_joined_on_the_wrong_axis_are_caught(tmp_path):
    path = solution_file(tmp_path, WRONG["concatenated on the wrong axis"][1])
    report = check("shard_map_simulate", path, refusals=False)
    assert not any(run.passed for run in report.runs)
    assert "joined along axis 1" in flat(str(report))


@ONCE
def test_a_body_that_is_not_vmapped_is_caught_with_jaxs_error(tmp_path):
    path = solution_file(tmp_path, WRONG["per-row function on the whole block"][1])
    report = check("shard_map_vs_vmap", path, refusals=False)
    for run in report.runs:
        assert {r.status for r in run.results} == {"error"}
        message = flat(run.results[0].message)
        assert "was given an out_specs entry which is too long" in message
        assert f'File "{path}", line' in run.results[0].message  # the reader's call


def test_an_exception_shows_its_message_and_the_readers_own_lines(tmp_path):
    path = solution_file(
        tmp_path,
        """
        def helper(x):
            return x.reshape(3, -1)  # fails unless the length divides by 3

        def shard_map_double(x):
            return helper(x) * 2.0
        """,
    )
    report = check("shard_map_double", path, devices=[1])
    (run,) = report.runs
    errors = [r for r in run.results if r.status == "error"]
    assert errors
    message = errors[0].message
    assert message.startswith(("TypeError", "ValueError"))
    assert "in your code:" in message
    assert f'File "{path}", line' in message
    assert "in helper" in message
    assert "in shard_map_double" in message
    assert "site-packages" not in message  # JAX's own frames are left out


@ONCE
def test_a_hang_is_stopped_and_the_other_cases_still_run(tmp_path):
    path = solution_file(
        tmp_path,
        pasted_reference("shard_map_psum")
        + textwrap.dedent(
            """
            def shard_map_psum(x):
                while np.shape(x)[:1] == (32,):  # np.shape: a refused input is not an array
                    pass
                return reference(x)
            """
        ),
    )
    # Seed 0's random cases have other lengths (255 and 181): one case of length 32 hangs.
    report = check("shard_map_psum", path, devices=[1, 8], timeout=3, seed=0)
    for run in report.runs:
        statuses = {r.label: r.status for r in run.results}
        assert statuses.pop("length 32, one block per device on 8") == "timeout"
        assert set(statuses.values()) == {"pass"}
    # A busy loop: stopped once it has used 3 s of CPU on each core the checker may use.
    assert "of CPU time, the limit of --timeout 3 on" in flat(str(report))
    assert "an endless loop?" in flat(str(report))


@ONCE
def test_a_crash_is_reported_with_the_processs_last_output(tmp_path):
    path = solution_file(
        tmp_path,
        pasted_reference("shard_map_psum")
        + textwrap.dedent(
            """
            import os

            def shard_map_psum(x):
                if np.shape(x)[:1] == (12,):  # np.shape: a refused input is not an array
                    print("giving up on", x.shape)
                    os._exit(7)
                return reference(x)
            """
        ),
    )
    # Seed 0's random cases have other lengths (255 and 181): one case of length 12 crashes.
    report = check("shard_map_psum", path, devices=[8], seed=0)
    (run,) = report.runs
    crashed = [r for r in run.results if r.status == "crash"]
    assert [r.label for r in crashed] == ["length 12: split over 6 of 8 devices"]
    assert "exit status 7" in crashed[0].message
    assert "giving up on (12,)" in crashed[0].message
    assert sum(r.status == "pass" for r in run.results) == len(run.results) - 1


@ONCE
def test_a_thread_the_solution_leaves_running_does_not_keep_the_check_waiting(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(checker, "EXIT_GRACE", 1.0)  # how long a finished worker may linger
    path = solution_file(
        tmp_path,
        """
        import threading, time

        threading.Thread(target=time.sleep, args=(3600,)).start()  # not a daemon
        raise RuntimeError("broken on purpose")
        """,
    )
    report = check("shard_map_psum", path, devices=[1])  # before the fix: waited an hour
    assert "RuntimeError: broken on purpose" in report.runs[0].load_error


@ONCE
def test_ctrl_c_stops_the_check_and_its_processes(tmp_path, interruptible_cli):
    marker = tmp_path / "workers.txt"  # each worker adds its process id when its case starts
    path = solution_file(
        tmp_path,
        f"""
        import os

        def shard_map_psum(x):
            with open({str(marker)!r}, "a") as pids:
                pids.write(f"{{os.getpid()}}\\n")
            while True:
                pass
        """,
    )

    def workers() -> list[int]:
        return [int(line) for line in marker.read_text().split()] if marker.exists() else []

    with subprocess.Popen(  # its pipes are closed whatever happens
        interruptible_cli("check", "shard_map_psum", path),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    ) as cli:
        try:
            while len(workers()) < 2:  # a case is running on 1 and on 8 devices
                assert cli.poll() is None, cli.communicate()
                time.sleep(0.1)
            cli.send_signal(signal.SIGINT)  # to the command only, as a notebook interrupts
            _, stderr = communicate(cli, timeout=60)
            assert cli.returncode == 130
            assert "interrupted: the check was stopped" in stderr
            # The command ended its workers, and reaped them (with the zygote they were
            # forked from) before it exited: not even a zombie is left.
            for worker in workers():
                with pytest.raises(ProcessLookupError):
                    os.kill(worker, 0)
        finally:
            cli.kill()
            for worker in workers():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker, signal.SIGKILL)


# While JAX is imported (a native module of jaxlib initialising, then a few moments
# into the import), while the check starts its workers, while a case runs.
CTRL_C_MOMENTS = ["jaxlib-init", 0.2, 0.6, 1.0, 1.5, 4.0]


@pytest.mark.parametrize("moment", CTRL_C_MOMENTS)
def test_ctrl_c_at_any_moment_stops_the_command(tmp_path, interruptible_cli, moment):
    path = solution_file(tmp_path, "def shard_map_psum(x):\n    while True:\n        pass\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    if moment == "jaxlib-init":
        env["SHARD_TUTORIAL_TEST_CTRL_C_NATIVE"] = "1"  # the command interrupts itself
    with subprocess.Popen(  # its pipes are closed whatever happens
        interruptible_cli("check", "shard_map_psum", path),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as cli:
        try:
            command_started(cli)  # Python has started: the moment counts from here
            if moment != "jaxlib-init":
                time.sleep(moment)
                cli.send_signal(signal.SIGINT)
            _, stderr = communicate(cli, timeout=30)  # not the whole check (2 hangs: 20 s+)
        finally:
            cli.kill()
    assert "nanobind" not in stderr
    if moment == "jaxlib-init":
        # Held until the import ended (before the fix: "Critical nanobind error", -6).
        assert "Ctrl-C pressed in " in stderr, stderr
        assert (cli.returncode, stderr.splitlines()[-1]) == (
            130,
            "interrupted: the check was stopped",
        ), stderr
    elif cli.returncode != -signal.SIGINT:  # before main(), Python's own handler: -2
        assert cli.returncode == 130, (moment, stderr)
        assert stderr.endswith("interrupted: the check was stopped\n"), (moment, stderr)


@ONCE
def test_a_file_that_does_not_load_is_reported_not_raised(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("def shard_map_psum(x):\n    return (\n")
    report = check("shard_map_psum", path, devices=[1])
    assert not report.passed
    assert "SyntaxError" in report.runs[0].load_error
    assert "could not load the solution" in report.verdict()


def test_a_function_from_python_is_checked_too():
    def my_psum(x):  # a local function, as in a notebook
        if not isinstance(x, jax.Array) or x.dtype == bool:
            msg = f"x must be an array of numbers, not {type(x).__name__}"
            raise TypeError(msg)
        if x.ndim != 1:
            msg = f"x must be 1-D, got shape {x.shape}"
            raise ValueError(msg)
        n = jax.device_count()
        while x.shape[0] % n:
            n -= 1
        mesh = jax.make_mesh((n,), ("data",), devices=jax.devices()[:n])
        x = jax.device_put(x, NamedSharding(mesh, P("data")))
        return jax.shard_map(
            lambda b: jax.lax.psum(jnp.sum(b), "data"), mesh=mesh, in_specs=P("data"), out_specs=P()
        )(x)

    report = check("shard_map_psum", my_psum)
    assert report.passed, str(report)
    assert sum(r.raises is not None for r in report.runs[0].results) == len(
        PROBLEMS["shard_map_psum"].refusals
    )
    assert report.solution == "function test_a_function_from_python_is_checked_too.<locals>.my_psum"


@ONCE
def test_a_function_holding_something_unpicklable_gets_advice():
    lock = threading.Lock()

    def holds_a_lock(x):
        with lock:
            return x * 2.0

    report = check("shard_map_double", holds_a_lock)
    assert not report.passed
    assert "Create such things inside the function" in report.runs[0].load_error


@ONCE
def test_bad_arguments_are_named():
    with pytest.raises(KeyError, match="no problem named 'psum'"):
        check("psum", lambda x: x)
    with pytest.raises(
        FileNotFoundError, match=re.escape("solution file 'nowhere.py' does not exist")
    ):
        check("shard_map_psum", "nowhere.py")
    with pytest.raises(ValueError, match=r"devices must be device counts \(ints >= 1\).*\(0, 8\)"):
        check("shard_map_psum", lambda x: x, devices=(0, 8))
    for timeout in (0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="timeout must be a positive, finite number of sec"):
            check("shard_map_psum", lambda x: x, timeout=timeout)
    with pytest.raises(TypeError, match="timeout must be a number of seconds, got str '3'"):
        check("shard_map_psum", lambda x: x, timeout="3")
    with pytest.raises(TypeError, match=r"seed must be a whole number, got float 1\.5"):
        check("shard_map_psum", lambda x: x, seed=1.5)
    with pytest.raises(ValueError, match="seed must be at least 0, got -1"):
        check("shard_map_psum", lambda x: x, seed=-1)
    with pytest.raises(ValueError, match="function='f' names a function in a file"):
        check("shard_map_psum", lambda x: x, function="f")
    with pytest.raises(TypeError, match="refusals must be True or False, got str 'no'"):
        check("shard_map_psum", lambda x: x, refusals="no")
    with pytest.raises(
        TypeError, match=re.escape("solution must be a function or the path of a .py file, got int")
    ):
        check("shard_map_psum", 3)


@ONCE
def test_the_report_renders_as_text_and_as_an_html_table(tmp_path):
    # By default, with a row for each input the statement refuses, labelled as such:
    # this mistake checks no arguments, so it computes an answer for them and fails them.
    problem = PROBLEMS["shard_map_psum"]
    report = check("shard_map_psum", solution_file(tmp_path, WRONG["psum left out"][1]))
    assert isinstance(report, CheckReport)
    html = report._repr_html_()
    assert "<table>" in html
    rows = len(problem.cases) + RANDOM_CASES + len(problem.refusals)
    assert html.count("<tr>") == rows + 1
    assert "one device&#x27;s partial sum" in html
    assert "FAILED" in html
    for case in problem.refusals:
        assert f">refused ({case.raises}): {case.label}</td>" in html
    text = flat(str(report))
    assert "refused (ValueError): a 2-D x (x=float32[1,3]): WRONG" in text
    assert "returned a value where the statement's Raises section asks for ValueError" in text
    # The refused inputs fail on 1 device too; the values are judged all the same, and
    # each wrong one already says what it is (one device's partial sum): no generic hint.
    assert "one device's partial sum" in text
    assert "Every case gets the right values on 1 device" not in text


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shard_tutorial", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        timeout=600,
    )


@ONCE
def test_the_cli_lists_writes_starters_and_checks_with_exit_statuses(tmp_path):
    listing = run_cli("list", cwd=tmp_path)
    assert listing.returncode == 0
    lines = listing.stdout.splitlines()
    assert lines[0] == "Part I: shard_map and its first collective"
    assert lines[1].split()[0] == "shard_map_double"
    assert "Part III: training across devices" in lines
    assert "shard_map with psum: Sum a 1-D array" in listing.stdout

    starter = run_cli("starter", "shard_map_psum", cwd=tmp_path)
    assert starter.returncode == 0
    (tmp_path / "shard_map_psum.py").write_text(starter.stdout)
    unfinished = run_cli(
        "check", "shard_map_psum", "shard_map_psum.py", "--devices", "1", cwd=tmp_path
    )
    assert unfinished.returncode == 1
    assert "NotImplementedError: write your solution here" in unfinished.stdout

    wrong = solution_file(tmp_path, WRONG["psum left out"][1], name="wrong.py")
    failing = run_cli(
        "check", "shard_map_psum", str(wrong), "--seed", "3", "--no-refusals", cwd=tmp_path
    )
    assert failing.returncode == 1
    # On 1 device every case passes (nothing to add up across devices, and the inputs the
    # statement refuses, which it computes an answer for, are left out); on 8 it is caught.
    failed = "FAILED (8 devices: "
    assert failed in failing.stdout
    assert "from seed 3; --seed 3" in failing.stdout
    assert "refused (" not in failing.stdout
    # By default those inputs run too: it does not refuse them, on any device count.
    careless = run_cli("check", "shard_map_psum", str(wrong), "--devices", "1", cwd=tmp_path)
    assert careless.returncode == 1, careless.stdout + careless.stderr
    assert "FAILED (1 device: 4 of " in careless.stdout
    assert "returned a value where the statement's Raises section asks for TypeError" in (
        flat(careless.stdout)
    )

    (tmp_path / "copy").mkdir()
    right = reference_copy("shard_map_psum", tmp_path / "copy")
    passing = run_cli("check", "shard_map_psum", str(right), "--devices", "1", cwd=tmp_path)
    assert passing.returncode == 0, passing.stdout + passing.stderr
    assert "PASSED: every case on 1 device" in passing.stdout
    assert "refused (ValueError): a 2-D x" in passing.stdout  # the reference refuses it

    imported = solution_file(tmp_path, "from shard_tutorial import *\n", name="imported.py")
    refused = run_cli("check", "shard_map_psum", str(imported), "--devices", "1", cwd=tmp_path)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "REFERENCE" in refused.stdout
    assert "computed by the package's own solution" in flat(refused.stdout)


@ONCE
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("check", "nope", "x.py"), "no problem named 'nope'"),
        (("check", "shard_map_psum", "missing.py"), "no such file: missing.py"),
        (
            ("check", "shard_map_psum", "other.py"),
            "other.py defines no function named 'shard_map_psum'",
        ),
        (("check", "shard_map_psum", "other.py", "--devices", "0"), "expected device counts >= 1"),
        (("check", "shard_map_psum", "other.py", "--timeout", "0"), "a positive, finite number"),
        (("check", "shard_map_psum", "other.py", "--timeout", "soon"), "got 'soon'"),
        (("check", "shard_map_psum", "other.py", "--seed", "-3"), "a whole number >= 0"),
        (("check", "shard_map_psum", "other.py", "--processes", "0"), "a whole number >= 1"),
        (
            ("check", "shard_map_psum", "good.py", "--processes", "3"),
            "--processes 3 must divide every device count above 1",
        ),
        (("check", "shard_map_psum", "value.py"), "value.py defines shard_map_psum as a value"),
        (("check", "shard_map_psum", "klass.py"), "klass.py defines shard_map_psum as a class"),
        (("check", "shard_map_psum", "empty.py"), "empty.py defines no function named"),
        (("check", "shard_map_psum", "folder"), "folder is a directory"),
        (("starter", "nope"), "no problem named 'nope'"),
        (("frobnicate",), "invalid choice: 'frobnicate'"),
    ],
)
def test_cli_usage_errors_exit_with_status_2(tmp_path, monkeypatch, capsys, args, message):
    (tmp_path / "other.py").write_text("def something_else(x):\n    return x\n")
    (tmp_path / "value.py").write_text("shard_map_psum = 3\n")
    (tmp_path / "good.py").write_text("def shard_map_psum(x):\n    return x\n")
    (tmp_path / "klass.py").write_text("class shard_map_psum:\n    pass\n")
    (tmp_path / "empty.py").write_text("")
    (tmp_path / "folder").mkdir()
    monkeypatch.chdir(tmp_path)
    # The command's own main(), in this process: a usage error is found before any
    # check starts (test_the_cli_lists_writes_starters_and_checks_with_exit_statuses
    # runs the command as a reader does, `python -m shard_tutorial`, in processes).
    with pytest.raises(SystemExit) as exited:
        cli_main(list(args))
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "refusals"), [((), True), (("--refusals",), True), (("--no-refusals",), False)]
)
def test_the_cli_runs_the_refusals_unless_told_not_to(tmp_path, monkeypatch, flags, refusals):
    # The command's own main(), in this process, with the check it calls recorded.
    (tmp_path / "good.py").write_text("def shard_map_psum(x):\n    return x\n")
    monkeypatch.chdir(tmp_path)
    asked = {}

    def recorded(problem, solution, **options):
        asked.update(options)
        return CheckReport(problem.name, str(solution), (DeviceRun(1, ()),), 0.0)

    monkeypatch.setattr(checker, "check", recorded)
    assert cli_main(["check", "shard_map_psum", "good.py", "--devices", "1", *flags]) == 0
    assert asked["refusals"] is refusals


@ONCE
def test_a_default_check_runs_the_refusals_and_refusals_false_leaves_them_out(tmp_path):
    # Each refused input reaches the solution as it arrives, after the other cases; an
    # answer that checks its argument raises the named error and passes, one that
    # computes anyway fails, with what the statement asks for.
    problem = PROBLEMS["shard_map_double"]
    (tmp_path / "right").mkdir()
    right = reference_copy("shard_map_double", tmp_path / "right")
    report = check(problem, right, devices=(1,), seed=0)
    assert report.passed, str(report)
    results = report.runs[0].results
    refused = results[-len(problem.refusals) :]
    assert [r.label for r in refused] == [c.label for c in problem.refusals]
    assert [r.raises for r in refused] == [c.raises for c in problem.refusals]
    assert all(r.raises is None for r in results[: -len(problem.refusals)])
    assert "refused (TypeError): a bool x" in str(report)
    # Right in values and in technique, but blind to its arguments.
    careless = solution_file(
        tmp_path,
        """
        def shard_map_double(x):
            mesh = mesh_for(x.shape[0])
            x = jax.device_put(x, NamedSharding(mesh, P("data")))
            return jax.shard_map(lambda b: b * 2.0, mesh=mesh, in_specs=P("data"),
                                 out_specs=P("data"))(x)
        """,
    )
    report = check(problem, careless, devices=(1,), seed=0)
    text = flat(str(report))
    assert not report.passed
    failed = [r for r in report.runs[0].results if r.status != "pass"]
    assert failed
    assert all(r.raises is not None for r in failed)  # the refused inputs alone
    assert "refused (TypeError): a bool x (x=bool[2]): WRONG" in text
    assert (
        "returned a value where the statement's Raises section asks for TypeError (a bool x): "
        "check the arguments before computing with them"
    ) in text
    # refusals=False: the same answer is judged on the other cases alone, and passes.
    alone = check(problem, careless, devices=(1,), seed=0, refusals=False)
    assert alone.passed, str(alone)
    assert all(r.raises is None for r in alone.runs[0].results)
    assert len(alone.runs[0].results) == len(results) - len(problem.refusals)
    assert "refused (" not in str(alone)
