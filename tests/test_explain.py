"""shard_tutorial.explain: each collective traced to its file and line, with the costs reader's bytes.

The functions explained here are defined in this file, each collective's line marked
with a comment (``# line: NAME``), so a test can say which line a collective must be
traced to: the one the code asked for it on, or, for one XLA inserted, the line of
the operation that needed it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import PROBLEMS
from shard_tutorial.__main__ import main
from shard_tutorial.checking.recording import record
from shard_tutorial.collective_costs import sent_by
from shard_tutorial.compiled import communication_lines
from shard_tutorial.explain import Explanation, explain, program_communication

HERE = Path(__file__)
LINES = {
    text.split("# line: ")[1].strip(): number
    for number, text in enumerate(HERE.read_text().splitlines(), 1)
    if "# line: " in text and "LINES" not in text
}


def auto_mesh() -> jax.sharding.Mesh:
    return jax.make_mesh((jax.device_count(),), ("x",), axis_types=(AxisType.Auto,))


@jax.jit
def layer(x: jax.Array, w: jax.Array) -> jax.Array:
    y = x @ w  # line: matmul
    return jnp.tanh(y)


def psum_in_scan(block: jax.Array) -> jax.Array:
    def step(carry: jax.Array, _: None) -> tuple[jax.Array, None]:
        return carry + jax.lax.psum(carry * block.sum(), "x"), None  # line: psum

    out, _ = jax.lax.scan(step, jnp.ones(()), length=4)
    return out


def gather_keys(q: jax.Array, k: jax.Array) -> jax.Array:
    k = jax.lax.all_gather(k, "x", tiled=True)  # line: all_gather
    return q @ k.T


def sent_in(recording_runs: list) -> float:
    """What collective_costs.sent_by counts for every program a call ran."""
    return sum(sent_by(run.text, run.devices)[0] for run in recording_runs)


def explained(f, *args) -> tuple[Explanation, float]:
    """explain's answer, and sent_by's total over the programs of a second recorded call."""
    found = explain(f, *args, show=False)
    with record() as recording:
        jax.block_until_ready(f(*args))
    return found, sent_in(recording.runs)


def test_an_all_gather_xla_inserted_is_traced_to_the_operation_that_needed_it() -> None:
    mesh = auto_mesh()
    rows = NamedSharding(mesh, P("x", None))
    x = jax.device_put(np.ones((16, 32), np.float32), rows)
    w = jax.device_put(np.ones((32, 8), np.float32), rows)  # w split on the summed dimension
    found, sent = explained(layer, x, w)
    assert found.sent == sent
    if jax.device_count() == 1:
        assert found.sent == 0
        return
    [gather] = found.communications
    assert (gather.kind, gather.asked, gather.moved) == ("all-gather", False, "f32[32,8]")
    assert (gather.line.file, gather.line.line) == (str(HERE), LINES["matmul"])
    assert gather.code == "y = x @ w  # line: matmul"
    assert "dot_general" in gather.because
    assert "argument w" in gather.because
    assert gather.sent == 7 / 8 * 32 * 8 * 4
    fixed = jax.device_put(np.ones((32, 8), np.float32), NamedSharding(mesh, P()))
    assert explain(layer, x, fixed, show=False).communications == ()


def test_a_psum_in_a_loop_is_traced_to_its_line_and_counted_per_iteration() -> None:
    mesh = auto_mesh()
    f = jax.jit(jax.shard_map(psum_in_scan, mesh=mesh, in_specs=P("x"), out_specs=P()))
    x = jax.device_put(jnp.arange(16.0), NamedSharding(mesh, P("x")))
    found, sent = explained(f, x)
    assert found.sent == sent
    if jax.device_count() == 1:
        assert all(c.sent == 0 for c in found.communications)
        return
    [psum] = found.communications
    assert (psum.kind, psum.asked, psum.runs) == ("all-reduce", True, 4)
    assert (psum.line.file, psum.line.line) == (str(HERE), LINES["psum"])
    assert psum.over == f"{jax.device_count()} devices (x)"


def test_an_eager_shard_map_is_traced_past_the_recorder() -> None:
    mesh = auto_mesh()
    f = jax.shard_map(gather_keys, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x"))
    q = jax.device_put(jnp.ones((16, 4)), NamedSharding(mesh, P("x")))
    found, sent = explained(f, q, q)
    assert found.programs > 1  # eager: a program per operation
    assert found.sent == sent
    gathers = [c for c in found.communications if c.kind == "all-gather"]
    if jax.device_count() > 1:
        assert len(gathers) == 1
    for gather in gathers:
        assert gather.asked
        assert (gather.line.file, gather.line.line) == (str(HERE), LINES["all_gather"])


def test_an_uneven_constraint_replicates_for_the_output() -> None:
    # jax-ml/jax#26946: 17 rows over 8 devices; the output comes out whole on each.
    mesh = auto_mesh()

    def doubled(table: jax.Array) -> jax.Array:
        twice = table * 2  # line: uneven
        return jax.lax.with_sharding_constraint(twice, NamedSharding(mesh, P("x", None)))

    found, sent = explained(jax.jit(doubled), jnp.ones((17, 16)))
    assert found.sent == sent
    if jax.device_count() == 1:
        return
    [gather] = found.communications
    assert (gather.kind, gather.asked) == ("all-gather", False)
    assert (gather.line.file, gather.line.line) == (str(HERE), LINES["uneven"])
    assert "output" in gather.because
    assert found.outputs[0].sharding.startswith("P()")


def test_the_recorded_text_gives_the_judge_the_same_lines_and_bytes() -> None:
    mesh = auto_mesh()
    rows = NamedSharding(mesh, P("x", None))
    x = jax.device_put(np.ones((16, 32), np.float32), rows)
    with record() as recording:
        jax.block_until_ready(layer(x, x.T @ x[:, :8]))
    for run in recording.runs:
        whole = program_communication(run.text, run.devices)
        kept = program_communication(communication_lines(run.text), run.devices)
        assert [(c.kind, c.line, c.code, c.sent) for c in kept] == [
            (c.kind, c.line, c.code, c.sent) for c in whole
        ]
        assert sum(c.sent for c in kept) == sent_by(communication_lines(run.text), run.devices)[0]


def test_the_tables_name_the_line_in_text_and_html() -> None:
    mesh = auto_mesh()
    f = jax.jit(jax.shard_map(psum_in_scan, mesh=mesh, in_specs=P("x"), out_specs=P()))
    found = explain(f, jax.device_put(jnp.arange(16.0), NamedSharding(mesh, P("x"))), show=False)
    text, page = str(found), found._repr_html_()
    assert text.startswith("psum_in_scan: 1 program on")
    assert "block" in text
    assert "P('x') over x=" in text
    assert "<table>" in page
    if jax.device_count() > 1:
        assert f"test_explain.py:{LINES['psum']}" in text
        assert "jax.lax.psum(carry * block.sum()" in page


# The Flax models' references compile for seconds more than the rest: once, at 8 devices.
SLOW = {"shard_map_simulate", "nnx_data_parallel_step"}


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=[pytest.mark.once] if n in SLOW else []) for n in PROBLEMS]
)
def test_every_reference_collective_has_its_line_and_the_costs_readers_bytes(name: str) -> None:
    problem = PROBLEMS[name]
    args = problem.arranged(problem.cases[0])  # the statement's example: small, quick
    found, sent = explained(problem.reference, *args)
    assert found.sent == pytest.approx(sent)
    module = Path(sys.modules[problem.reference.__module__].__file__).parent.parent
    for c in found.communications:
        assert c.line is not None, c
        assert Path(c.line.file).is_relative_to(module), c  # the package's own lines
        assert c.code, c


def test_the_command_line_prints_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "mine.py"
    script.write_text(
        "import jax, jax.numpy as jnp\n"
        "from jax.sharding import NamedSharding, PartitionSpec as P\n"
        "from shard_tutorial import data_mesh, place\n"
        "def total(x):\n"
        "    return jnp.sum(x)\n"
        "def make_args():\n"
        "    return (place(jnp.arange(16.0), NamedSharding(data_mesh(16), P('data'))),)\n"
    )
    n = jax.device_count()
    assert main(["explain", str(script), "total", "--devices", str(n)]) == 0
    printed = capsys.readouterr().out
    sent = f"{2 * (n - 1) / n * 4:g}"
    assert printed.startswith(f"total: 1 program on {n} device"), printed
    assert f", {sent} B sent per device" in printed
    if n > 1:
        assert "mine.py:5" in printed
        assert "return jnp.sum(x)" in printed
    with pytest.raises(SystemExit) as stopped:
        main(["explain", str(script), "nothing", "--devices", str(n)])
    assert stopped.value.code == 2
    assert "defines no function named 'nothing'" in capsys.readouterr().err
