"""`python -m shard_tutorial explain --processes 2` prints the table one process of 8 devices prints."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.subprocesses, pytest.mark.distributed]

PROGRAM = """\
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


def mesh():
    return jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))


@jax.jit
def layer(x, w):
    y = x @ w  # XLA gathers w: its rows are split like x's
    total = jax.shard_map(
        lambda block: jax.lax.psum(block.sum(), "x"), mesh=mesh(), in_specs=P("x"), out_specs=P()
    )(y)
    return jnp.tanh(y), total


def make_args():
    rows = NamedSharding(mesh(), P("x", None))
    x = jax.make_array_from_callback((16, 32), rows, lambda i: np.ones((16, 32), np.float32)[i])
    w = jax.make_array_from_callback((32, 8), rows, lambda i: np.ones((32, 8), np.float32)[i])
    return x, w
"""


def test_a_cluster_prints_the_table_of_one_process(tmp_path: Path, tagged_env: dict) -> None:
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent(PROGRAM))
    outputs = []
    for processes in ("1", "2"):
        run = subprocess.run(
            [sys.executable, "-m", "shard_tutorial", "explain", str(script), "layer",
             "--devices", "8", "--processes", processes],
            capture_output=True, text=True, timeout=300, check=False,
            env={**os.environ, **tagged_env, "COLUMNS": "100"},
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        outputs.append(run.stdout)
    alone, cluster = outputs
    assert alone == cluster
    assert alone.startswith("layer: 1 program on 8 devices, 2 collectives")
    lines = PROGRAM.splitlines()
    matmul = next(i for i, line in enumerate(lines, 1) if "y = x @ w" in line)
    psum = next(i for i, line in enumerate(lines, 1) if "psum" in line)
    assert f"program.py:{matmul}" in alone
    assert f"program.py:{psum}" in alone
