"""The checker on a 2-process x 4-device cluster: ``check(..., processes=2)``, ``--processes 2``.

Each process of the cluster sends back the shards it holds; the checker puts every
output back together and judges it as on one process. A right answer of every
problem passes the command line on a cluster (test_solutions.py), and every reference
runs on one (test_problems_across_processes.py); these tests run a bug that only a
cluster shows, and a hang or a crash in one process only.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from judging import pasted_reference

from shard_tutorial import check
from shard_tutorial.launcher import COORDINATOR

pytestmark = [pytest.mark.subprocesses, pytest.mark.distributed]

CLUSTER = "2 processes x 4 devices"

# A reader's solution that is right on one process: its mesh is made of this
# process's devices. In a cluster each process builds a mesh of its own 4 devices and
# returns an array of its own, which is not one array over the cluster.
LOCAL_MESH = """\
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P


def shard_map_double(x):
    devices = jax.local_devices()  # the bug: jax.devices() lists every process's
    n = max(d for d in range(1, len(devices) + 1) if len(x) % d == 0)
    mesh = Mesh(np.array(devices[:n]), ("data",))
    x = jax.device_put(x, NamedSharding(mesh, P("data")))
    double = jax.shard_map(lambda b: b * 2.0, mesh=mesh, in_specs=P("data"), out_specs=P("data"))
    return double(x)
"""

# Right on every case (a pasted copy of the reference: the package's own is judged
# REFERENCE), but process 1 never finishes the first one (float32, length 2; the inputs
# the statement refuses, which come last, are not arrays of floats).
HANGS_ON_PROCESS_1 = (
    pasted_reference("shard_map_double")
    + """\
import time

import jax


def shard_map_double(x):
    if jax.process_index() == 1 and getattr(x, "dtype", None) == "float32" and x.shape == (2,):
        time.sleep(1000)
    return reference(x)
"""
)


@pytest.fixture
def tagged(monkeypatch, tagged_env):
    """Every process the checker starts carries the tag: the fixture fails on any left."""
    for key, value in tagged_env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv(COORDINATOR, raising=False)


@pytest.mark.usefixtures("tagged")
def test_a_mesh_of_local_devices_passes_on_one_process_and_fails_on_a_cluster(tmp_path):
    solution = tmp_path / "local_mesh.py"
    solution.write_text(LOCAL_MESH)
    # It checks no arguments: the inputs the statement refuses are left out, to read the
    # verdict on the mesh alone.
    alone = check("shard_map_double", solution, devices=(8,), seed=5, refusals=False)
    assert alone.passed, str(alone)
    # From the command line, on 1 device and on the cluster.
    ran = subprocess.run(
        [sys.executable, "-m", "shard_tutorial", "check", "shard_map_double", str(solution),
         "--processes", "2", "--seed", "5", "--no-refusals"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert ran.returncode == 1, ran.stdout + ran.stderr
    text = ran.stdout
    assert f"on 1 device and {CLUSTER}: FAILED ({CLUSTER}: " in text.splitlines()[0]
    # Where the mesh has several devices per process; of one device, it is the same array
    # (and a pass judged in part: one device asks for jax.shard_map alone).
    assert any(
        line.startswith("length 64, random") and line.split()[-2:] == ["pass*", "WRONG"]
        for line in text.splitlines()
    ), text
    assert f"What went wrong on {CLUSTER}:" in text
    assert "What went wrong on 1 device" not in text
    assert "each process returned an array of its own" in text
    assert "not jax.local_devices()" in text


@pytest.mark.usefixtures("tagged")
def test_a_hang_in_one_process_stops_the_cluster_and_the_rest_run_on_a_fresh_one(
    tmp_path, left_behind
):
    solution = tmp_path / "hangs.py"
    solution.write_text(HANGS_ON_PROCESS_1)
    report = check("shard_map_double", solution, devices=(8,), processes=2, timeout=5, seed=5)
    results = report.runs[0].results
    assert results[0].label == "example from the problem statement"
    assert results[0].status == "timeout"
    assert results[0].message.startswith("process 1 of 2: stopped after ")
    assert "Every process of the cluster was stopped." in results[0].message
    assert [r.status for r in results[1:]] == ["pass"] * (len(results) - 1)
    assert left_behind() == []


@pytest.mark.usefixtures("tagged")
def test_a_crash_in_one_process_is_reported_with_its_index(tmp_path, left_behind):
    solution = tmp_path / "crashes.py"
    solution.write_text(HANGS_ON_PROCESS_1.replace("time.sleep(1000)", "os._exit(3)").replace(
        "import time", "import os"
    ))  # fmt: skip
    report = check("shard_map_double", solution, devices=(8,), processes=2, seed=5)
    results = report.runs[0].results
    assert results, str(report)  # the cluster loaded the solution
    assert results[0].status == "crash"
    assert results[0].message.startswith(
        "process 1 of 2: the process running the solution ended (exit status 3)"
    )
    assert [r.status for r in results[1:]] == ["pass"] * (len(results) - 1)
    assert left_behind() == []
