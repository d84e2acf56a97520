"""count_runs: how often one call runs each collective, loops counted, against counts known by hand.

A ``jax.lax.scan`` of ``k`` steps whose psum depends on the carry keeps the psum in
the loop: the all-reduce runs ``k`` times, however the program's text prints it.
On one device XLA may drop a collective over one device, and then there is nothing to count.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh, place
from shard_tutorial.compiled import collectives, count_runs, parse_runs


def _scan_psum(outer: int, inner: int):
    """psum(carry * sum(x)) in a scan of ``inner`` steps, in a scan of ``outer`` steps."""

    def body(x):
        def inner_step(carry, _):
            return carry + jax.lax.psum(carry * jnp.sum(x), "data"), None

        def outer_step(carry, _):
            carry, _ = jax.lax.scan(inner_step, carry, length=inner)
            return carry, None

        total, _ = jax.lax.scan(outer_step, jnp.ones(()) * 1e-3, length=outer)
        return total

    mesh = data_mesh(8)
    x = place(jnp.arange(8.0), NamedSharding(mesh, P("data")))
    return jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=P()), x


@pytest.mark.parametrize(("outer", "inner"), [(1, 3), (2, 3), (5, 1), (4, 2)])
def test_a_psum_in_nested_scans_runs_outer_times_inner(outer, inner):
    f, x = _scan_psum(outer, inner)
    runs = count_runs(f, x)
    assert [c for c, _ in runs] == collectives(f, x)  # the same collectives, in order
    # scans of one step are unrolled; the psum's all-reduce runs once per step of both
    # (on one device XLA may keep it, among one device, or drop it: not counted then)
    expected = [("all-reduce", outer * inner)]
    assert [(c.kind, n) for c, n in runs] == expected or (jax.device_count() == 1 and not runs)
    # and the value is that of the loop run by hand (NumPy)
    carry = 1e-3
    for _ in range(outer * inner):
        carry += carry * np.arange(8.0).sum()
    assert np.isclose(float(jax.jit(f)(x)), carry, rtol=1e-5)


def test_collectives_outside_loops_run_once():
    mesh = data_mesh(8)
    x = place(jnp.arange(16.0), NamedSharding(mesh, P("data")))
    runs = count_runs(jnp.sum, x)
    assert all(n == 1 for _, n in runs)
    assert len(runs) == (1 if jax.device_count() > 1 else 0)


def _program(trip: str) -> str:
    return "\n".join(
        [
            "HloModule jit_f, num_partitions=2",
            "%add (a: f32[], b: f32[]) -> f32[] {",
            "  ROOT %s = f32[] add(%a, %b)",
            "}",
            "%inner (p: f32[2]) -> f32[2] {",
            "  ROOT %ar = f32[2]{0} all-reduce(%p), replica_groups={{0,1}}, to_apply=%add",
            "}",
            "%body (p: f32[2]) -> f32[2] {",
            "  ROOT %c = f32[2]{0} call(%p), to_apply=%inner",
            "}",
            "%unused (p: f32[2]) -> f32[2] {",
            "  ROOT %ag = f32[4]{0} all-gather(%p), replica_groups={{0,1}}, dimensions={0}",
            "}",
            "ENTRY %main (x: f32[2]) -> f32[2] {",
            f"  ROOT %w = f32[2]{{0}} while(%x), condition=%cond, body=%body{trip}",
            "}",
        ]
    )


def test_a_loop_body_calling_a_computation_multiplies_its_runs_and_unknown_counts_are_none():
    known = parse_runs(_program(', backend_config={"known_trip_count":{"n":"7"}}'))
    assert [(c.kind, n) for c, n in known] == [("all-reduce", 7)]  # the unused one left out
    unknown = parse_runs(_program(""))
    assert [(c.kind, n) for c, n in unknown] == [("all-reduce", None)]
