"""A solution's file cannot rewrite the worker that runs it into a pass.

The worker binds what it calls (the recorder, its hooks in JAX, the functions that
describe an answer) before the solution's file runs; a file that replaces them,
or unhooks the recorder from JAX, still gets the verdict its answer deserves. This
needs the real worker process, so it runs once per Python (``subprocesses``).
"""

from __future__ import annotations

import textwrap

import pytest

from shard_tutorial import check

pytestmark = pytest.mark.subprocesses

FORGED = """
import sys

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh
from shard_tutorial.checking.protocol import How, MadeBy, Program

worker = sys.modules["__main__"]
PROGRAM = (
    "HloModule forged, num_partitions=8\\n"
    "%a = f32[] all-reduce(f32[] %p), replica_groups={{0,1,2,3,4,5,6,7}}, "
    'metadata={op_name="jit(f)/shard_map/psum"}'
)


def forged_lineage(recording, received, args, *, shards=False, earlier=()):
    used = ("psum", "shard_map")
    program = Program(0, 8, shard_map=True, primitives=used, live=used, text=PROGRAM)
    return How(True, (program,), made_by=(MadeBy(0, "program"),)), b""


# The old door: the worker looked the technique up by name at each call.
worker.primitives_of = lambda function, args: ["shard_map", "psum"]
worker.describe_lineage = forged_lineage
import shard_tutorial.checking.worker as module
module.describe_lineage = forged_lineage
{unhook}


def shard_map_psum(x):
    mesh = data_mesh(len(x))
    total = np.asarray(x).sum(dtype=np.float64).astype(np.asarray(x).dtype)  # on the host
    return jax.device_put(total, NamedSharding(mesh, P()))
"""

UNHOOK = """
from jax._src import pjit
from shard_tutorial.checking import recording
hooks = recording._Hooks.install()
pjit._pjit_call_impl_python = hooks.call_impl  # JAX's own again: nothing recorded
"""


@pytest.mark.parametrize("unhook", [False, True], ids=["forged-report", "unhooked-recorder"])
def test_a_file_that_rewrites_the_worker_still_fails(tmp_path, unhook):
    path = tmp_path / "shard_map_psum.py"
    path.write_text(textwrap.dedent(FORGED).replace("{unhook}", UNHOOK if unhook else ""))
    report = check("shard_map_psum", path, seed=0)
    assert not report.passed
    eight = report.runs[1]
    statuses = {r.status for r in eight.results if r.label.startswith("length 32")}
    assert statuses == {"technique"}, str(report)
    message = next(r.message for r in eight.results if r.label.startswith("length 32"))
    if unhook:
        assert "replaced the hooks in JAX" in message
    else:
        assert "computed on the host" in message
