"""The checker against careless and hostile solutions: a clear verdict, quickly, and no
process left behind.

Most of these cannot differ by device count, so they run on one device and on a
problem cut down to its first cases: what is tested is the checker, not the problem.
"""

from __future__ import annotations

import dataclasses
import textwrap
import time
from pathlib import Path

import pytest
from judging import judged, pasted_reference
from processes import alive

from shard_tutorial import check
from shard_tutorial.checking import checker
from shard_tutorial.checking.checker import CheckReport
from shard_tutorial.problem import Placement
from shard_tutorial.problems import get_problem

pytestmark = pytest.mark.subprocesses
# How the checker copes with a process that floods, hangs, crashes or starts others does
# not depend on the JAX installed: those tests run on the newest stack only (marker
# `once`). Those where JAX answers (its arrays, errors and configuration) run on both.
ONCE = pytest.mark.once

PSUM = get_problem("shard_map_psum")
# Two of the problem's cases, no random ones and none of the inputs the statement refuses
# (which most of these answers do not check): enough to see each verdict.
SHORT_PSUM = dataclasses.replace(
    PSUM,
    make_cases=lambda: get_problem("shard_map_psum").cases[:2],
    generate=None,
    make_refusals=None,
)
# A right psum to build on, pasted as a reader would (the package's own is judged REFERENCE).
REFERENCE = pasted_reference("shard_map_psum")


def write(tmp_path: Path, source: str | bytes, name: str = "solution.py") -> Path:
    path = tmp_path / name
    if isinstance(source, bytes):
        path.write_bytes(source)
    else:
        path.write_text(textwrap.dedent(source))
    return path


def flat(text: str) -> str:
    """``text`` with its line breaks and indentation as single spaces."""
    return " ".join(text.split())


def statuses(report: CheckReport) -> set[str]:
    return {result.status for run in report.runs for result in run.results}


# Each: the file's source, the status every case gets ("load" for a file that does not
# load), and what the report must say.
CARELESS = {
    "a structured array returned": (
        "import numpy as np\ndef shard_map_psum(x):\n    return np.zeros(3, [('a', 'i4')])\n",
        "fail",
        "which is not a dtype of numbers",
    ),
    "a float0 array returned": (
        (
            "import jax, numpy as np\ndef shard_map_psum(x):\n"
            "    return np.zeros((), jax.dtypes.float0)\n"
        ),
        "fail",
        "which is not a dtype of numbers",
    ),
    "bytes with no end of line flood the checker's channel": (
        (
            "import os\ndef shard_map_psum(x):\n"
            "    for fd in range(3, 64):\n"
            "        try:\n"
            "            os.write(fd, b'x' * (3 << 20))\n"
            "        except OSError:\n"
            "            pass\n"
        ),
        "crash",
        "something that is not a report on its channel",
    ),
    "sys.exit in the function": (
        "import sys\ndef shard_map_psum(x):\n    sys.exit(3)\n",
        "error",
        "SystemExit: 3\n(The solution called sys.exit()",
    ),
    "SystemExit raised": (
        "def shard_map_psum(x):\n    raise SystemExit\n",
        "error",
        "SystemExit\n(The solution called sys.exit()",
    ),
    "KeyboardInterrupt raised": (
        "def shard_map_psum(x):\n    raise KeyboardInterrupt\n",
        "error",
        "raised KeyboardInterrupt itself",
    ),
    "os._exit at import": (
        "import os\nos._exit(0)\n",
        "load",
        (
            "the process ended while your file was being loaded (exit status 0): does the "
            "file call os._exit()"
        ),
    ),
    "os._exit in the function": (
        "import os\ndef shard_map_psum(x):\n    os._exit(0)\n",
        "crash",
        "ended (exit status 0) during this case: does the solution call os._exit()?",
    ),
    "50 MB printed to stdout": (
        REFERENCE + "def shard_map_psum(x):\n    print('x' * 50_000_000)\n"
        "    return reference(x)\n",
        "pass",
        "PASSED",
    ),
    "50 MB printed to stderr": (
        REFERENCE + "import sys\ndef shard_map_psum(x):\n    sys.stderr.write('y' * 50_000_000)\n"
        "    raise ValueError('after the noise')\n",
        "error",
        "ValueError: after the noise",
    ),
    "endless recursion": (
        "def shard_map_psum(x):\n    return shard_map_psum(x)\n",
        "error",
        "Endless recursion",
    ),
    "a generator": ("def shard_map_psum(x):\n    yield x\n", "fail", "returned a generator"),
    "a list": (
        "def shard_map_psum(x):\n    return [1.0, 2.0, 3.0]\n",
        "fail",
        "returned a list of 3 items, not an array",
    ),
    "a tuple": (
        "def shard_map_psum(x):\n    return (x, x)\n",
        "fail",
        "returned a tuple of 2 items, not an array",
    ),
    "a float": (
        "def shard_map_psum(x):\n    return 6.0\n",
        "fail",
        "returned a Python float (6.0), not an array",
    ),
    "None": ("def shard_map_psum(x):\n    x.sum()\n", "fail", "is a return statement missing?"),
    "a str": (
        "def shard_map_psum(x):\n    return 'six'\n",
        "fail",
        "returned a str ('six'), not an array of numbers",
    ),
    "a NumPy array": (
        REFERENCE + "import numpy as np\n"
        "def shard_map_psum(x):\n    return np.asarray(reference(x))\n",
        "fail",
        "right values, but a NumPy array, not a jax.Array",
    ),
    "the device count changed at import": (
        (
            "import jax\njax.config.update('jax_num_cpu_devices', 4)\n"
            "def shard_map_psum(x):\n    return x.sum()\n"
        ),
        "load",
        "The checker sets the device count itself",
    ),
    "jax.numpy monkeypatched": (
        REFERENCE + "import jax.numpy as jnp, numpy as np\n"
        "jnp.isclose = jnp.allclose = np.isclose = np.allclose = lambda *a, **k: True\n"
        "def shard_map_psum(x):\n    return reference(x) + 1\n",
        "fail",
        "value: expected 6.0, received 7.0",
    ),
    "a syntax error": ("def shard_map_psum(x):\n    return (\n", "load", "SyntaxError"),
    "Latin-1 bytes": (
        b"def shard_map_psum(x):\n    return 'r\xe9sum\xe9'\n",
        "load",
        "The file is not UTF-8 text",
    ),
    "a missing function": (
        "def something_else(x):\n    return x\n",
        "load",
        "the file defines no function named 'shard_map_psum'",
    ),
    "an empty file": ("", "load", "(it defines nothing: is it empty?)"),
    "a class": (
        "class shard_map_psum:\n    def __init__(self, x):\n        self.x = x\n",
        "load",
        "shard_map_psum is a class, not a function: define it with def shard_map_psum(...):",
    ),
    "not callable": ("shard_map_psum = 3\n", "load", "shard_map_psum is a int (3), not a function"),
    "a missing import": (
        "def shard_map_psum(x):\n    return jnp.sum(x)\n",
        "error",
        "NameError: name 'jnp' is not defined\n(Is an import missing at the top of your file?)",
    ),
    "a missing module": ("import jax_helpers_of_mine\n", "load", "No module named 'jax_helpers_"),
}


# The careless solutions whose verdict comes from JAX: its dtypes, devices and modules.
JAX_ANSWERS = {
    "a structured array returned",
    "a float0 array returned",
    "the device count changed at import",
    "jax.numpy monkeypatched",
}


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=() if n in JAX_ANSWERS else ONCE) for n in CARELESS]
)
def test_a_careless_solution_gets_a_clear_verdict(tmp_path, name):
    source, status, message = CARELESS[name]
    report = check(SHORT_PSUM, write(tmp_path, source), devices=(1,))
    (run,) = report.runs
    text = str(report)
    assert flat(message) in flat(text), text
    if status == "load":
        assert run.load_error is not None
    elif status == "pass":
        assert report.passed, text
    else:
        assert run.results[0].status == status, text
    assert "Traceback" not in text
    assert report.seconds < 60


def test_a_file_that_re_exports_the_reference_gets_the_reference_verdict(tmp_path):
    path = write(tmp_path, "from shard_tutorial import shard_map_psum\n", "réponse à x.py")
    report = check(SHORT_PSUM, path, devices=(1,))
    assert statuses(report) == {"reference"}, str(report)
    assert "computed by the package's own solution (problems/shard_map_psum.py)" in flat(
        str(report)
    )
    assert "réponse à x.py" in report.solution


@ONCE
def test_a_directory_or_a_missing_file_is_refused(tmp_path):
    with pytest.raises(IsADirectoryError, match=r"is a directory, not the \.py file"):
        check(SHORT_PSUM, tmp_path, devices=(1,))


# --- The verdict cannot be forged from the solution's file -------------------------------


def test_a_file_that_patches_the_judge_or_forges_events_does_not_pass(tmp_path):
    patched = write(
        tmp_path,
        """
        from shard_tutorial.problem import Problem
        Problem.diagnose = lambda self, case, received: None
        def shard_map_psum(x):
            return None
        """,
        "patched.py",
    )
    report = check(SHORT_PSUM, patched, devices=(1,))
    assert statuses(report) == {"fail"}
    forged = write(
        tmp_path,
        """
        import json, os
        def shard_map_psum(x):
            for fd in range(3, 64):
                for case in range(2):
                    event = {"event": "result", "case": case, "status": "pass",
                             "message": "", "seconds": 0.0}
                    try:
                        os.write(fd, (json.dumps(event) + "\\n").encode())
                    except OSError:
                        pass
            os._exit(0)
        """,
        "forged.py",
    )
    report = check(SHORT_PSUM, forged, devices=(1,))
    assert not report.passed
    assert "pass" not in statuses(report)


def test_x64_turned_on_by_the_file_does_not_change_the_expected_dtype(tmp_path):
    right = write(
        tmp_path,
        REFERENCE + "import jax\njax.config.update('jax_enable_x64', True)\n"
        "def shard_map_psum(x):\n    return reference(x)\n",
        "right.py",
    )
    report = check(SHORT_PSUM, right, devices=(1,))
    assert report.passed, str(report)
    assert "turns on jax_enable_x64" in flat(str(report))
    wide = write(
        tmp_path,
        REFERENCE + "import jax, jax.numpy as jnp\njax.config.update('jax_enable_x64', True)\n"
        "def shard_map_psum(x):\n    return reference(x).astype(jnp.float64)\n",
        "wide.py",
    )
    report = check(SHORT_PSUM, wide, devices=(1,))
    assert statuses(report) == {"fail"}
    assert "dtype: expected float32, received float64" in flat(str(report))


# --- The technique and the layout ---------------------------------------------------------


@pytest.mark.parametrize(
    ("problem", "body", "message"),
    [
        (
            "shard_map_psum",
            "import jax.numpy as jnp\ndef shard_map_psum(x):\n    return jnp.sum(x)\n",
            "right values, computed with jax.numpy or jax.jit, not with jax.shard_map",
        ),
        (
            "shard_map_double",
            "def shard_map_double(x):\n    return x * 2.0\n",
            "right values, computed with jax.numpy or jax.jit, not with jax.shard_map",
        ),
    ],
)
def test_right_values_without_the_technique_get_their_own_verdict(tmp_path, problem, body, message):
    # These answers check no arguments: the inputs the statement refuses are left out.
    report = check(problem, write(tmp_path, body), devices=(1,), seed=0, refusals=False)
    (run,) = report.runs
    # An empty output shows no technique, and the checker asks none of it (x=float32[0]).
    flagged = [r for r in run.results if r.status == "technique"]
    others = [r for r in run.results if r.status != "technique"]
    assert all(r.status == "pass" and r.arguments.endswith("[0]") for r in others), str(report)
    assert len(flagged) >= len(run.results) - 2, str(report)
    assert message in flat(str(report))
    assert f"{len(flagged)} cases" in flat(str(report))  # one mistake, reported once


def test_a_replicated_output_where_a_split_one_is_asked_for_gets_a_placement_verdict(tmp_path):
    double = get_problem("shard_map_double")
    split = dataclasses.replace(
        double,
        make_cases=lambda: get_problem("shard_map_double").cases[:5],
        generate=None,
        make_refusals=None,
        placement=Placement(axis=0),
    )
    path = write(
        tmp_path,
        """
        import jax
        from jax.sharding import NamedSharding, PartitionSpec as P
        def shard_map_double(x):
            mesh = jax.make_mesh((8,), ("data",))
            x = jax.device_put(x, NamedSharding(mesh, P()))
            return jax.shard_map(lambda b: b * 2.0, mesh=mesh, in_specs=P(), out_specs=P())(x)
        """,
    )
    report = check(split, path, devices=(8,))
    by_label = {r.label: r for r in report.runs[0].results}
    assert by_label["empty"].status == "pass"  # an empty output has no layout
    assert by_label["a single element"].status == "pass"  # nor has one element
    assert by_label["example from the problem statement"].status == "placement"
    assert 'every device holds the whole result: out_specs=P() where P("data")' in flat(str(report))


def test_a_mesh_that_does_not_divide_the_length_is_named(tmp_path):
    path = write(
        tmp_path,
        """
        import jax, jax.numpy as jnp
        from jax.sharding import NamedSharding, PartitionSpec as P
        def shard_map_psum(x):
            mesh = jax.make_mesh((jax.device_count(),), ("data",))
            x = jax.device_put(x, NamedSharding(mesh, P("data")))
            f = jax.shard_map(lambda b: jax.lax.psum(jnp.sum(b), "data"), mesh=mesh,
                              in_specs=P("data"), out_specs=P())
            return f(x)
        """,
    )
    five = dataclasses.replace(SHORT_PSUM, make_cases=lambda: [PSUM.cases[3]])
    report = check(five, path, devices=(8,))
    assert "A mesh of 8 devices does not divide the length 5 into equal blocks" in flat(str(report))
    assert "shard_tutorial.data_mesh(n)" in flat(str(report))


# --- Hangs, crashes and memory stay cheap ------------------------------------------------


@ONCE
def test_a_solution_that_hangs_on_every_case_stops_after_two_hangs(tmp_path):
    path = write(tmp_path, "import time\ndef shard_map_psum(x):\n    time.sleep(1000)\n")
    report = check("shard_map_psum", path, devices=(1,), timeout=2, seed=0)
    (run,) = report.runs
    assert [r.status for r in run.results[:2]] == ["timeout", "timeout"]
    assert {r.status for r in run.results[2:]} == {"not run"}
    assert "not run, after 2 hangs" in flat(str(report))
    assert report.seconds < 2 * 2 + 60  # two timeouts, two starts of JAX


def test_a_collective_that_xla_gave_up_on_is_named_without_a_stack_dump(tmp_path):
    # What XLA's CPU runtime does when some devices never reach a collective (after
    # 40 s): a "may be stuck" warning, a stack dump, then abort.
    path = write(
        tmp_path,
        """
        import os, sys
        def shard_map_psum(x):
            sys.stderr.write("W external/xla/...: This thread may be stuck\\n*** stack ***\\n")
            sys.stderr.flush()
            os.abort()
        """,
    )
    report = check(SHORT_PSUM, path, devices=(1,))
    text = str(report)
    assert "a collective that not every device reached" in text
    assert "*** stack ***" not in text


@ONCE
def test_memory_is_capped_and_named(tmp_path):
    path = write(
        tmp_path,
        """
        import numpy as np
        def shard_map_psum(x):
            blocks = []
            while True:
                blocks.append(np.empty(2**26))  # 512 MiB more each time, without end
        """,
    )
    report = check(SHORT_PSUM, path, devices=(1,))
    assert statuses(report) <= {"memory", "not run"}
    assert f"used more than {checker.MEMORY_LIMIT / 2**30:g} GiB of memory" in flat(str(report))


# --- Nothing the solution starts outlives the check ---------------------------------------


@ONCE
@pytest.mark.parametrize(
    ("what", "start"),
    [
        (
            "a program",
            "import subprocess\nchild = subprocess.Popen(['sleep', '1000'])\npid = child.pid\n",
        ),
        (
            "a multiprocessing.Process",
            (
                "import multiprocessing, time\n"
                "context = multiprocessing.get_context('fork')\n"
                "child = context.Process(target=time.sleep, args=(1000,))\n"
                "child.start()\npid = child.pid\n"
            ),
        ),
        (
            "a program in a session of its own",
            (
                "import subprocess\n"
                "child = subprocess.Popen(['sleep', '1000'], start_new_session=True)\n"
                "pid = child.pid\n"
            ),
        ),
        (
            "a program in a session of its own, with no environment",
            (
                "import subprocess\n"
                "child = subprocess.Popen(['sleep', '1000'], start_new_session=True, env={})\n"
                "pid = child.pid\n"
            ),
        ),
        (
            "a daemon: a double fork into a new session, the environment emptied",
            (
                "import time\nread, write = os.pipe()\n"
                "if os.fork() == 0:\n"
                "    os.setsid()\n"
                "    if os.fork() == 0:\n"
                "        os.environ.clear()\n"
                "        os.write(write, str(os.getpid()).encode())\n"
                "        os.execve('/bin/sleep', ['sleep', '1000'], {})\n"
                "    os._exit(0)\n"
                "pid = int(os.read(read, 32))\n"
            ),
        ),
        (
            "a fork that crashes while the worker carries on",
            (
                "import time\npid = os.fork()\nif pid == 0:\n"
                "    time.sleep(0.5)\n    raise RuntimeError('the fork fails')\n"
            ),
        ),
    ],
)
def test_processes_the_solution_starts_are_ended_with_it(tmp_path, what, start):
    pids = tmp_path / "pids.txt"
    body = textwrap.indent(start, "    ")
    source = (
        REFERENCE + "import os\n"
        "def shard_map_psum(x):\n"
        f"{body}"
        f"    with open({str(pids)!r}, 'a') as f:\n"
        "        f.write(f'{pid}\\n')\n"
        "    return reference(x)\n"
    )
    report = check(SHORT_PSUM, write(tmp_path, source), devices=(1,))
    assert report.passed, str(report)
    time.sleep(0.5)
    started = [int(line) for line in pids.read_text().split()]
    assert len(started) >= 2  # at least one per case (tracing the solution calls it again)
    assert not [pid for pid in started if alive(pid)], what


@ONCE
def test_a_crash_is_a_crash_even_when_a_child_keeps_the_channel_open(tmp_path):
    path = write(
        tmp_path,
        """
        import os, time
        def shard_map_psum(x):
            if os.fork() == 0:
                time.sleep(1000)  # holds every file the worker had open
            os._exit(7)
        """,
    )
    report = check(SHORT_PSUM, path, devices=(1,), timeout=30)
    (run,) = report.runs
    assert run.results[0].status == "crash", str(report)
    assert "exit status 7" in run.results[0].message
    assert report.seconds < 30


@ONCE
def test_a_process_that_never_ends_does_not_keep_the_check_waiting(tmp_path):
    pids = tmp_path / "pids.txt"
    path = write(
        tmp_path,
        REFERENCE + "import os, threading, time\n"
        "threading.Thread(target=time.sleep, args=(3600,)).start()  # not a daemon\n"
        f"open({str(pids)!r}, 'w').write(str(os.getpid()))\n"
        "def shard_map_psum(x):\n    return reference(x)\n",
    )
    report = check(SHORT_PSUM, path, devices=(1,))
    assert report.passed, str(report)
    assert report.seconds < 30
    assert not alive(int(pids.read_text()))


@ONCE
def test_a_check_has_a_deadline_and_says_so(tmp_path):
    path = write(
        tmp_path, REFERENCE + "import time\ndef shard_map_psum(x):\n    time.sleep(1.5)\n"
        "    return reference(x)\n",
    )  # fmt: skip
    report = check("shard_map_psum", path, devices=(1,), deadline=6, seed=0)
    text = flat(str(report))
    (run,) = report.runs
    assert any(r.status == "pass" for r in run.results), text
    assert any("the check's deadline of 6 s was reached" in r.message for r in run.results), text
    assert "(deadline 6 s)" in text
    assert report.seconds < 6 + 15  # the case under way is stopped; JAX's start on a busy machine


@ONCE
def test_a_check_leaves_no_file_behind(tmp_path):
    import tempfile  # noqa: PLC0415

    def ours() -> set[str]:
        return {p.name for p in Path(tempfile.gettempdir()).glob("shard-tutorial-check-*")}

    before = ours()
    report = check(SHORT_PSUM, write(tmp_path, REFERENCE + "shard_map_psum = reference\n"),
                   devices=(1,))  # fmt: skip
    assert report.passed, str(report)
    assert ours() <= before


def test_an_exception_whose_str_raises_is_an_error_not_a_crash():
    class Unprintable(Exception):
        def __str__(self):
            raise RuntimeError

    def shard_map_psum(_x):
        raise Unprintable

    problem = get_problem("shard_map_psum")
    status, message = judged(problem, shard_map_psum, problem.cases[0])
    assert status == "error", message
    assert "Unprintable: <exception str() failed>" in message, message
