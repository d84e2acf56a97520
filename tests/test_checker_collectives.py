"""The checker on Part II's problems: each classic mistake of its page, written as a
reader would, fails with its explanation (each reference's file passes, in
test_checker.py, as every problem's does).

Each mistake is judged in this process (judging.check_here: the checker's worker step
and judge, with no subprocess), at the suite's device count, 1 or 8: the checker's
process isolation is tested elsewhere (test_checker.py, test_checker_careless.py).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from judging import check_here

from shard_tutorial import PROBLEMS

PART_II = [name for name, problem in PROBLEMS.items() if problem.folder == "collectives"]

HEADER = """\
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def mesh_for(n):
    d = jax.device_count()
    while n % d:
        d -= 1
    return jax.make_mesh((d,), ("data",), devices=jax.devices()[:d])


def split_rows(x):
    mesh = mesh_for(x.shape[0])
    return mesh, jax.device_put(x, NamedSharding(mesh, P("data")))

"""

# The classic mistakes of each page's "common pitfalls", as a reader would write them:
# (problem, solution, words its explanation must contain, whether its values are right on
# 1 device, where the block is the whole array; None: no claim).
MISTAKES = {
    "pmean: each block's own mean": (
        "shard_map_pmean",
        """
        def shard_map_pmean(x):
            mesh, x = split_rows(x)
            return jax.shard_map(lambda b: b - jnp.mean(b), mesh=mesh,
                                 in_specs=P("data"), out_specs=P("data"))(x)
        """,
        "Each of 8 blocks was centred on its own mean",
        True,
    ),
    "all_gather: no gather": (
        "shard_map_all_gather",
        """
        def shard_map_all_gather(x):
            mesh, x = split_rows(x)
            return jax.shard_map(lambda b: b[:, None] * b[None, :], mesh=mesh,
                                 in_specs=P("data"), out_specs=P("data"))(x)
        """,
        "each device multiplied its block by itself only",
        True,
    ),
    "all_gather: tiled=False": (
        "shard_map_all_gather",
        """
        def shard_map_all_gather(x):
            mesh, x = split_rows(x)

            def rows(b):
                whole = jax.lax.all_gather(b, "data")  # tiled=False: shape (devices, size)
                return b[:, None] * whole[None, :]

            return jax.shard_map(rows, mesh=mesh, in_specs=P("data"), out_specs=P("data"))(x)
        """,
        "all_gather with tiled=False stacks the blocks along a new leading axis",
        False,
    ),
    "all_gather: the wrong axis": (
        "shard_map_all_gather",
        """
        def shard_map_all_gather(x):
            mesh, x = split_rows(x)

            def rows(b):
                row = jax.lax.all_gather(b[None, :], "data", axis=0, tiled=True)  # not axis=1
                return b[:, None] * row

            return jax.shard_map(rows, mesh=mesh, in_specs=P("data"), out_specs=P("data"))(x)
        """,
        "gathered along the wrong axis",
        None,
    ),
    "ppermute: rolled within the block": (
        "shard_map_ppermute",
        """
        def shard_map_ppermute(x):
            mesh, x = split_rows(x)
            return jax.shard_map(lambda b: (jnp.roll(b, 1) + b + jnp.roll(b, -1)) / 3,
                                 mesh=mesh, in_specs=P("data"), out_specs=P("data"))(x)
        """,
        "wrong at every block edge",
        True,
    ),
    "ppermute: halos the wrong way round": (
        "shard_map_ppermute",
        """
        def shard_map_ppermute(x):
            mesh, x = split_rows(x)
            d = mesh.shape["data"]

            def average(b):
                up = [(i, (i + 1) % d) for i in range(d)]
                down = [(i, (i - 1) % d) for i in range(d)]
                left = jax.lax.ppermute(b[-1:], "data", perm=down)  # should be `up`
                right = jax.lax.ppermute(b[:1], "data", perm=up)  # should be `down`
                padded = jnp.concatenate([left, b, right])
                return (padded[:-2] + padded[1:-1] + padded[2:]) / 3

            return jax.shard_map(average, mesh=mesh, in_specs=P("data"), out_specs=P("data"))(x)
        """,
        "The halos went the wrong way round",
        True,
    ),
    "psum_scatter: no collective": (
        "shard_map_psum_scatter",
        """
        def shard_map_psum_scatter(x):
            mesh, x = split_rows(x)
            return jax.shard_map(lambda rows: rows.sum(axis=0), mesh=mesh, in_specs=P("data"),
                                 out_specs=P(), check_vma=False)(x)
        """,
        "one device's partial sums",
        True,
    ),
    "all_to_all: each block transposed locally": (
        "shard_map_all_to_all",
        """
        def shard_map_all_to_all(x):
            mesh, x = split_rows(x)
            return jax.shard_map(lambda rows: rows.T, mesh=mesh,
                                 in_specs=P("data"), out_specs=P("data"))(x)
        """,
        "transposed its own block of rows",
        True,
    ),
    "axis_index: the local cumsum alone": (
        "shard_map_axis_index",
        """
        def shard_map_axis_index(x):
            mesh, x = split_rows(x)
            return jax.shard_map(jnp.cumsum, mesh=mesh,
                                 in_specs=P("data"), out_specs=P("data"))(x)
        """,
        "has its own cumulative sum, starting from 0",
        True,
    ),
}

REPLICATED_SUMS = """
def shard_map_psum_scatter(x):
    mesh, x = split_rows(x)
    return jax.shard_map(lambda rows: jax.lax.psum(rows.sum(axis=0), "data"), mesh=mesh,
                         in_specs=P("data"), out_specs=P())(x)
"""


def test_each_of_part_iis_six_problems_has_its_classic_mistakes_here():
    # The names and their order are shard_tutorial.problem_names' (tests/test_problem.py).
    assert len(PART_II) == 6
    assert {name for name, *_ in MISTAKES.values()} == set(PART_II)


def flat(text: str) -> str:
    return " ".join(text.split())  # the report wraps lines


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_each_classic_mistake_fails_on_8_devices_with_its_explanation(
    mistake, tmp_path, device_count
):
    name, body, words, right_on_one_device = MISTAKES[mistake]
    path = tmp_path / f"{name}.py"
    path.write_text(HEADER + textwrap.dedent(body))
    report = check_here(name, path)
    (run,) = report.runs
    if device_count == 1:
        if right_on_one_device is not None:
            # Right values, at most without the collective the problem practises:
            right = all(r.status in ("pass", "technique") for r in run.results)
            assert right is right_on_one_device, str(report)
        return
    assert not run.passed
    assert words in flat(str(report)), str(report)


def test_right_sums_held_whole_by_every_device_are_flagged(tmp_path, device_count):
    path = tmp_path / "shard_map_psum_scatter.py"
    path.write_text(HEADER + REPLICATED_SUMS)
    report = check_here("shard_map_psum_scatter", path)
    (run,) = report.runs
    statuses = {r.status for r in run.results}
    if device_count == 1:  # a sum over one device adds nothing: shard_map alone is asked
        assert statuses == {"pass"}, str(report)
        return
    # Right values everywhere; a psum where psum_scatter is practised, on every case whose
    # mesh has several devices (on a mesh of one, shard_map alone is asked: pass*).
    judged = [r for r in run.results if not (r.status == "pass" and r.message)]
    # Where the reduce-scatter would span one device, its absence is no mistake, but the
    # sums held whole on every device still are: PLACEMENT.
    assert {r.status for r in judged} <= {"technique", "placement"}, str(report)
    assert "technique" in {r.status for r in judged}, str(report)
    assert "1 all-reduce of" in flat(str(report)), str(report)


def test_the_mistakes_are_written_as_files_the_checker_can_load():
    # Guards the table above: each entry names a problem of Part II and the right function.
    for name, body, _words, _one in MISTAKES.values():
        assert name in PART_II
        assert f"def {name}(x):" in body
    assert Path(__file__).name == "test_checker_collectives.py"
