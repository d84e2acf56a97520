"""The collectives read from compiled programs: real programs at 1 and 8 devices, and XLA's text formats."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh, place
from shard_tutorial.collective_costs import ring_bytes
from shard_tutorial.compiled import Collective, collectives, group_size, parse_collectives


def test_a_sharded_sum_compiles_to_one_all_reduce_on_several_devices_and_none_on_one(device_count):
    x = place(jnp.arange(16.0), NamedSharding(data_mesh(16), P("data")))
    found = collectives(jnp.sum, x)
    if device_count == 1:
        assert found == []
    else:
        assert [(c.kind, c.result, c.nbytes) for c in found] == [("all-reduce", "f32[]", 4)]


def test_a_gather_of_an_array_split_over_the_devices_is_an_all_gather_of_the_whole(device_count):
    x = place(jnp.ones((16, 4)), NamedSharding(data_mesh(16), P("data")))
    regather = jax.jit(lambda a: a, out_shardings=NamedSharding(data_mesh(16), P()))
    found = collectives(regather, x)
    if device_count == 1:
        assert found == []
    else:
        assert [(c.kind, c.nbytes) for c in found] == [("all-gather", 16 * 4 * 4)]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (  # jax 0.12: groups named by mesh axes, with spaces
            (
                "%p = f32[8,3]{1,0} all-reduce(%f), channel_id=1, "
                "replica_groups=mesh['data'=2,'model'=4] {'model'}, use_global_device_ids=true"
            ),
            Collective("all-reduce", "f32[8,3]", 96, "mesh['data'=2,'model'=4] {'model'}"),
        ),
        (  # older XLA: explicit device ids
            (
                "%r = s32[2,2]{1,0} reduce-scatter(s32[16,2]{1,0} %d), channel_id=3, "
                "replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={0}, to_apply=%add"
            ),
            Collective("reduce-scatter", "s32[2,2]", 16, "{{0,1,2,3,4,5,6,7}}"),
        ),
        (  # an asynchronous start: (operand, result), counted as its result
            (
                "%s = (f32[2]{0}, f32[16]{0}) all-gather-start(f32[2]{0} %p), "
                "replica_groups=[1,8]<=[8], dimensions={0}"
            ),
            Collective("all-gather", "f32[16]", 64, "[1,8]<=[8]"),
        ),
        (
            (
                "%c = bf16[4]{0} collective-permute(bf16[4]{0} %x), channel_id=2, "
                "source_target_pairs={{0,1},{1,0}}"
            ),
            Collective("collective-permute", "bf16[4]", 8, "{{0,1},{1,0}}"),
        ),
    ],
)
def test_each_text_format_of_xla_is_read(line, expected):
    assert parse_collectives(line) == [expected]


def test_done_halves_and_other_operations_are_not_counted():
    program = (
        "%d = f32[16]{0} all-gather-done((f32[2]{0}, f32[16]{0}) %s)\n"
        "%m = f32[16]{0} multiply(f32[16]{0} %a, f32[16]{0} %b)\n"
        "%ar = pred[] all-reduce(pred[] %q), replica_groups={}"
    )
    assert parse_collectives(program) == [Collective("all-reduce", "pred[]", 1, "{}")]


@pytest.mark.parametrize(
    ("groups", "size"),
    [
        ("mesh['data'=8] {'data'}", 8),  # jax 0.12: by mesh axes
        ("mesh['data'=2,'model'=4] {'model'}", 4),
        ("mesh['data'=2,'model'=4] {'data'}", 2),
        ("mesh['data'=2,'model'=4] {'data','model'}", 8),
        ("{{0,1,2,3},{4,5,6,7}}", 4),  # older XLA: device ids
        ("{{0,4},{1,5},{2,6},{3,7}}", 2),
        ("[2,4]<=[8]", 4),  # an iota
        ("[4,2]<=[2,4]T(1,0)", 2),
        ("{}", None),  # every device, count not printed
        ("all devices", None),
    ],
)
def test_the_group_size_is_read_from_each_text_format(groups, size):
    assert group_size(Collective("all-reduce", "f32[4]", 16, groups)) == size


def test_ring_bytes_follow_the_ring_algorithms():
    def of(kind: str, nbytes: int, n: int) -> float:
        return ring_bytes(Collective(kind, "f32[]", nbytes, f"[1,{n}]<=[{n}]"))

    assert of("all-reduce", 6144, 8) == 2 * 7 / 8 * 6144
    # An all-reduce sends what a reduce-scatter and an all-gather of the same data send.
    assert of("reduce-scatter", 6144 // 8, 8) + of("all-gather", 6144, 8) == of(
        "all-reduce", 6144, 8
    )
    assert of("all-to-all", 64, 4) == 48
    assert of("all-reduce", 100, 1) == 0  # a group of one sends nothing
    permute = Collective("collective-permute", "f32[2]", 8, "{{0,1},{1,0}}")
    assert ring_bytes(permute) == 8
    with pytest.raises(ValueError, match="group size"):
        ring_bytes(Collective("all-reduce", "f32[]", 4, "{}"))


def test_a_data_parallel_gradient_sends_what_the_ring_formula_says(device_count):
    mesh = data_mesh(16)
    x = place(jnp.ones((16, 3)), NamedSharding(mesh, P("data")))
    w = place(jnp.ones((3, 2)), NamedSharding(mesh, P()))
    grad = jax.grad(lambda w, x: jnp.sum(x @ w))
    found = collectives(grad, w, x)
    if device_count == 1:
        assert found == []
    else:
        (reduce,) = found
        assert group_size(reduce) == device_count
        n = device_count
        assert ring_bytes(reduce) == 2 * (n - 1) / n * 24
