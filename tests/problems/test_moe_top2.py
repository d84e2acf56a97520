"""moe_top2: the NumPy oracle against hand-computed routings, the reference on its cases, its
compiled program (two all-to-alls of fixed-size buffers, one all-reduce of 2 E numbers, none
at capacity 0 where only the traced program has them), and the classic mistakes explained.

Cheap on purpose: the checker runs the reference on every case at 1 and 8 devices on both
stacks (test_pasted_solutions.py, the docs build), and the corpus judges right and wrong
answers (test_solutions.py).
"""

from __future__ import annotations

import functools
import math

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh, get_problem, moe_top2, usable_device_count
from shard_tutorial.compiled import collectives
from shard_tutorial.problem import Case
from shard_tutorial.problems.moe_top2 import local_aux, numpy_moe_top2

PROBLEM = get_problem("moe_top2")
BINDING = PROBLEM.cases[1]  # T=32, E=16, capacity 1: binds, 2 experts per device on 8
EMPTY = PROBLEM.cases[2]  # the same shapes at capacity 0


def test_the_oracle_fills_first_choices_before_second_ones_per_device():
    # 4 tokens, 2 experts; expert e multiplies by 10 ** e. Logits chosen so that every
    # token's first choice is expert 0 except token 3's, and gates are softmax([2, 0]).
    logits = np.array([[2.0, 0.0], [2.0, 0.0], [0.0, 2.0], [2.0, 0.0]])
    w = np.array([[[1.0]], [[10.0]]])
    x = np.ones((4, 1))
    big, small = np.exp(2) / (1 + np.exp(2)), 1 / (1 + np.exp(2))
    # One device, capacity 2: expert 0 takes tokens 0 and 1 (first choices) and is full
    # for token 3's; expert 1 takes token 2's first choice, then token 0's second, and
    # is full for the other second choices. Token 3 keeps none.
    y, _ = numpy_moe_top2(x, logits, w, 2, 1)
    np.testing.assert_allclose(y[:, 0], [big + 10 * small, big, 10 * big, 0.0])
    # Two devices of 2 tokens, capacity 1 each: device 0 keeps token 0's first choice
    # and token 0's second (expert 1 is free); device 1 keeps token 2's and token 3's
    # first choices, and token 3's second finds expert 1 full.
    y, _ = numpy_moe_top2(x, logits, w, 1, 2)
    np.testing.assert_allclose(y[:, 0], [big + 10 * small, 0.0, 10 * big, big])


def test_the_oracles_aux_is_e_times_first_choice_fractions_dot_mean_probabilities():
    logits = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 3.0]])
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    f = np.array([0.5, 0.0, 0.5])  # token 0 chooses expert 0, token 1 expert 2
    _, aux = numpy_moe_top2(np.ones((2, 1)), logits, np.ones((3, 1, 1)), 1, 1)
    assert aux == pytest.approx(3 * f @ p.mean(axis=0), rel=1e-12)
    assert local_aux(logits, 1) == [pytest.approx(float(aux), rel=1e-12)]


def test_the_expected_answer_depends_on_the_mesh_the_contract_gives():
    x, logits, w, capacity = BINDING.args
    on_eight, on_one = PROBLEM.expected(BINDING, 8), PROBLEM.expected(BINDING, 1)
    np.testing.assert_allclose(on_eight[0], numpy_moe_top2(x, logits, w, capacity, 8)[0], 1e-6)
    assert not np.allclose(on_eight[0], on_one[0])  # capacity per device: fewer drops on 8


# The ties and capacity 0 (the checker judges the reference on every case elsewhere).
@pytest.mark.parametrize("case", [EMPTY, PROBLEM.cases[4]], ids=lambda c: c.label)
def test_the_reference_matches_the_oracle(case, assert_matches_oracle, device_count):
    y, aux = moe_top2(*PROBLEM.arranged(case))
    assert_matches_oracle(PROBLEM, case, (y, aux))
    (tokens, experts), outputs = case.args[1].shape, case.args[2].shape[2]
    n = usable_device_count(math.gcd(tokens, experts), device_count)
    assert {s.data.shape for s in y.addressable_shards} == {(tokens // n, outputs)}
    assert aux.sharding.is_fully_replicated


def _over_devices(layer, case, device_count):
    """The collectives of ``layer``'s compiled program that span more than one device."""
    found = collectives(layer, *PROBLEM.arranged(case)[:3])
    return [c for c in found if (c.group_size or device_count) > 1]


def test_the_compiled_program_exchanges_fixed_size_buffers(device_count):
    capacity = BINDING.args[3]  # E=16, capacity 1, D=4, F=3
    found = _over_devices(functools.partial(moe_top2, capacity=capacity), BINDING, device_count)
    if device_count == 1:
        assert found == []  # nothing over more than one device
        return
    # Bytes per device: the (16, 1, 4) dispatch, the (16, 1, 3) return (XLA's CPU
    # backend prints an all-to-all as a tuple of 8 blocks), aux's (2, 16) sums.
    kinds = sorted((c.kind, c.nbytes) for c in found)
    assert kinds == [
        ("all-reduce", 2 * 16 * 4),
        ("all-to-all", 16 * 3 * 4),
        ("all-to-all", 16 * 4 * 4),
    ]
    assert not any(c.kind == "all-gather" for c in found)


def test_at_capacity_0_only_the_traced_program_has_the_all_to_alls(device_count):
    layer = functools.partial(moe_top2, capacity=0)
    found = _over_devices(layer, EMPTY, device_count)
    assert [c.kind for c in found] == (["all-reduce"] if device_count > 1 else [])
    assert str(jax.make_jaxpr(layer)(*PROBLEM.arranged(EMPTY)[:3])).count("all_to_all") == 2


def test_a_fixed_capacity_compiles_once_for_any_routing(count_compiles):
    x, logits, w, capacity = BINDING.args
    layer = jax.jit(moe_top2, static_argnames="capacity")
    args = PROBLEM.arranged(BINDING)
    layer(*args)
    with count_compiles() as compiles:
        other = PROBLEM.arranged(Case("reversed", (x, logits[:, ::-1].copy(), w, capacity)))
        layer(*other)
    assert compiles == []  # other choices, the same shapes


@pytest.mark.parametrize(
    ("mistake", "words"),
    [
        ({"seconds_first": True}, "the second choices took the experts' slots before"),
        ({"full_softmax": True}, "the gates are the softmax of all E logits"),
        ({"devices": 1}, "the capacity was counted over 32 tokens (all of them)"),
    ],
)
def test_each_mistake_in_y_is_explained(mistake, words):
    x, logits, w, capacity = BINDING.args
    y = numpy_moe_top2(x, logits, w, capacity, mistake.pop("devices", 8), **mistake)[0]
    right_aux = PROBLEM.expected(BINDING, 8)[1]
    verdict = PROBLEM.diagnose(BINDING, (y.astype(np.float32), right_aux), 8)
    assert verdict.startswith("y: values:")
    assert words in verdict


def test_aux_from_local_tokens_is_explained():
    y, _ = PROBLEM.expected(BINDING, 8)
    for local in (local_aux(BINDING.args[1], 8)[0], np.mean(local_aux(BINDING.args[1], 8))):
        verdict = PROBLEM.diagnose(BINDING, (y, np.float32(local)), 8)
        assert verdict.startswith("aux: value:"), verdict
        assert "aux is that of one device's own 4 tokens" in verdict


def test_an_all_to_all_of_empty_buffers_is_whole_on_jax_0_12_and_not_on_0_10(device_count):
    # What the page says where capacity 0 matters: the (E, 0, D) buffers must not leave
    # shard_map as an output on jax 0.10, whose shards of it each have the whole shape.
    if device_count == 1:
        pytest.skip("one device exchanges nothing")
    mesh = axis_mesh("expert", 8)
    exchange = jax.jit(
        jax.shard_map(
            lambda b: jax.lax.all_to_all(b, "expert", 0, 0, tiled=True),
            mesh=mesh,
            in_specs=P("expert"),
            out_specs=P("expert"),
        )
    )
    out = exchange(
        jax.device_put(np.zeros((8 * 16, 0, 4), np.float32), NamedSharding(mesh, P("expert")))
    )
    shards = {s.data.shape for s in out.addressable_shards}
    if jax.__version__.startswith("0.10."):
        assert shards == {(128, 0, 4)}
        with pytest.raises(ValueError, match="could not broadcast"):
            np.asarray(out)
    else:
        assert shards == {(16, 0, 4)}
        assert np.asarray(out).shape == (128, 0, 4)
