"""Every problem's reference on a 2-process x 4-device cluster gives the 1 x 8 results, bit for bit.

One script runs four cases of every problem in ``shard_tutorial.PROBLEMS`` (so problems
added later are covered): the statement's first three and its largest, the last (every
case runs on a cluster through one right answer per problem, in the command-line test
of tests/test_solutions.py). It prints each result's shards, as each process holds them.
It runs twice: launched as a cluster of 2 processes of 4 CPU devices, and alone with 8
devices. The test puts each run's shards back together here, in the parent, with no
JAX collective involved, and compares the arrays' bytes.

Where the computation does not allow the same bits, a problem is listed in ``ROUNDING``
with the reason, and its floating-point results are compared within the problem's own
tolerance instead (its integer results still bit for bit).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest

from shard_tutorial import PROBLEMS, launch

pytestmark = [pytest.mark.subprocesses, pytest.mark.distributed]

ROUNDING = {
    # Measured: the length-1024 case differs in the last bit. One process adds the 8
    # partial sums inside XLA's CPU all-reduce; the cluster's all-reduce goes through
    # gloo, which adds them in another order.
    "shard_map_psum": "a float sum across devices, added in another order by gloo",
    # Measured: pmean's case 7 differs in the last bits, for the same reason. The other
    # two add floats across devices the same way (gloo's reduce-scatter, the earlier
    # blocks' totals), so their bits may differ too.
    "shard_map_pmean": "a float mean across devices, added in another order by gloo",
    "shard_map_psum_scatter": "float sums across devices, added in another order by gloo",
    "shard_map_axis_index": "the earlier blocks' float totals, added across devices by gloo",
    # The training problems add float gradients (and losses) across devices: all-reduces
    # and reduce-scatters that gloo may add in another order.
    "data_parallel_sgd_step": "float gradients summed across devices by gloo",
    "fsdp_sgd_step": "float gradients reduce-scattered across devices by gloo",
    "tensor_parallel_mlp": "float shares of the output summed across devices by gloo",
    # Measured: case 1's kernel differs in the last bit (the all-reduce of the gradient).
    "nnx_data_parallel_step": "float gradients summed across devices by gloo",
    "zero_adam_step": "float gradients reduce-scattered across devices by gloo",
    # Measured: aux of cases 5 and 6 differs in the last bit (y's bits are the same).
    "moe_top2": "aux's float sums of probabilities, added across devices by gloo",
}

# Records go to a file per process, not to standard output, where gloo's threads print
# their connection messages whenever a new group of devices first communicates: a
# record could be cut by one.
EVERY_CASE = """\
import json
import os
import sys

import jax
import numpy as np

import shard_tutorial

shard_tutorial.join_cluster(devices=8)
sink = open(os.path.join(sys.argv[1], f"records-{jax.process_index()}.jsonl"), "w")
for name in shard_tutorial.PROBLEMS:
    problem = shard_tutorial.PROBLEMS[name]
    last = len(problem.cases) - 1
    for number in sorted({0, 1, 2, last} & set(range(last + 1))):
        case = problem.cases[number]
        result = problem.reference(*problem.arranged(case))
        outputs = result if problem.outputs else (result,)
        records = []
        for item, out in enumerate(outputs):
            shards = [
                (
                    [list(s.indices(n)[:2]) for s, n in zip(shard.index, out.shape)],
                    np.asarray(shard.data).tobytes().hex(),
                )
                for shard in out.addressable_shards
            ]
            records.append({
                "problem": name,
                "case": number,
                "item": item,
                "shape": list(out.shape),
                "dtype": str(out.dtype),
                "devices": len(out.sharding.device_set),
                "shards": shards,
            })
        for record in records:
            sink.write(json.dumps(record) + "\\n")
sink.close()
"""


def _assemble(outputs: list[str]) -> dict[tuple[str, int, int], tuple[np.ndarray, int]]:
    """Each case's arrays (one per output) from the shards every process printed, and their device counts.

    Every shard must agree with the others where they overlap (replicated results
    are held whole by several devices), and together they must cover the array.
    """
    arrays: dict[tuple[str, int, int], tuple[np.ndarray, int]] = {}
    covered: dict[tuple[str, int, int], np.ndarray] = {}
    for output in outputs:
        for line in output.splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                pytest.fail(f"a line that is not a record: {line!r}")
            key = (record["problem"], record["case"], record["item"])
            shape, dtype = tuple(record["shape"]), np.dtype(record["dtype"])
            if key not in arrays:
                arrays[key] = (np.zeros(shape, dtype), record["devices"])
                covered[key] = np.zeros(shape, bool)
            array, devices = arrays[key]
            assert (array.shape, array.dtype, devices) == (shape, dtype, record["devices"])
            for index, data in record["shards"]:
                where = tuple(slice(start, stop) for start, stop in index)
                block = np.frombuffer(bytes.fromhex(data), dtype).reshape(array[where].shape)
                seen = covered[key][where]
                assert np.array_equal(array[where][seen], block[seen]), f"{key}: shards differ"
                array[where] = block
                covered[key][where] = True
    for key, mask in covered.items():
        assert mask.all(), f"{key}: no process holds part of the result"
    return arrays


def _cluster_cases(problem) -> list[int]:
    """The cases EVERY_CASE runs: the statement's first three and its last."""
    last = len(problem.cases) - 1
    return sorted({0, 1, 2, last} & set(range(last + 1)))


def test_every_reference_gives_the_same_bits_on_2_processes_as_on_one(tmp_path, tagged_env):
    script = tmp_path / "every_case.py"
    script.write_text(EVERY_CASE)
    alone_dir, cluster_dir = tmp_path / "alone", tmp_path / "cluster"
    alone_dir.mkdir()
    cluster_dir.mkdir()
    # The one-process run, in the background while the cluster runs.
    alone = subprocess.Popen(
        [sys.executable, str(script), str(alone_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **tagged_env},
    )  # fmt: skip
    try:
        cluster = launch(
            script, str(cluster_dir), processes=2, devices_per_process=4, timeout=600,
            env=tagged_env,
        )  # fmt: skip
        _, alone_err = alone.communicate(timeout=600)
    finally:
        alone.kill()
    assert cluster.returncode == 0, cluster.report()
    assert alone.returncode == 0, alone_err
    one = _assemble([path.read_text() for path in sorted(alone_dir.glob("*.jsonl"))])
    two = _assemble([path.read_text() for path in sorted(cluster_dir.glob("*.jsonl"))])
    assert len(list(cluster_dir.glob("*.jsonl"))) == 2
    expected_keys = {
        (name, n, item)
        for name, problem in PROBLEMS.items()
        for n in _cluster_cases(problem)
        for item in range(max(len(problem.outputs), 1))
    }
    assert set(one) == set(two) == expected_keys
    for key in sorted(expected_keys):
        (on_one, devices_one), (on_two, devices_two) = one[key], two[key]
        assert devices_two == devices_one, f"{key}: split over other devices"
        assert (on_two.shape, on_two.dtype) == (on_one.shape, on_one.dtype), key
        if key[0] in ROUNDING and jnp.issubdtype(on_one.dtype, jnp.inexact):  # bfloat16 too
            problem = PROBLEMS[key[0]]
            rtol, atol = problem.tolerance(problem.cases[key[1]], on_one.dtype)
            np.testing.assert_allclose(
                on_two.astype(np.float64),
                on_one.astype(np.float64),
                rtol=rtol,
                atol=atol,
                err_msg=str(key),
            )
        else:
            assert on_two.tobytes() == on_one.tobytes(), f"{key}: different bits"
