"""What a traced program's outputs depend on (shard_tutorial.checking.dataflow), against programs
whose answer is known by reading them."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh
from shard_tutorial.checking.dataflow import flow
from shard_tutorial.checking.recording import record


def _flow(f, *args):
    return flow(jax.make_jaxpr(f)(*args))


@pytest.mark.parametrize(
    "f",
    [
        lambda x, y: x + 0 * y,
        lambda x, y: x + y * 0.0,
        lambda x, y: x + jnp.zeros_like(x) * y,  # a zero array, broadcast from a constant
        lambda x, y: x + (0 * y) * 3.0,  # a product of a zero is zero too
        jax.jit(lambda a, b: a + 0 * b),  # inside a nested program
        jax.checkpoint(lambda a, b: a - b * 0),
    ],
    ids=["zero_times", "times_zero", "zeros_like", "zero_product", "nested_jit", "checkpoint"],
)
def test_a_product_with_a_constant_zero_uses_neither_factor(f):
    x, y = jnp.arange(3.0), jnp.ones(3)
    found = _flow(f, x, y)
    assert found.inputs == (True, False)
    assert "mul" not in found.primitives


@pytest.mark.parametrize(
    "f",
    [
        lambda x, y: x + jnp.minimum(jnp.abs(y), 0),
        lambda x, y: x + jnp.maximum(-jnp.abs(y), 0.0),
        lambda x, y: x + (y - y),
        lambda x, y: x + jnp.minimum(jnp.square(y), 0) * 2.0,
        lambda x, y: x - jnp.clip(-(y**2), 0, 1),  # inside clip's nested program
        lambda x, y: x + jax.nn.relu(-jnp.exp(y)),  # inside relu's custom derivative
    ],
    ids=["min_abs", "max_minus_abs", "difference_with_itself", "min_square", "clip", "relu"],
)
def test_a_value_zero_whatever_its_operand_holds_uses_none_of_it(f):
    # A token collective hides behind such zeros: min(|psum(...)|, 0) adds nothing.
    found = _flow(f, jnp.arange(3.0), jnp.ones(3))
    assert found.inputs == (True, False)


@pytest.mark.parametrize(
    "f",
    [
        lambda x, y: x * y,
        lambda x, y: x + 0 * x + y,
        lambda x, y: x * (y - x),  # a difference of two values: not zero
        lambda x, y: x + jnp.minimum(y * y, 1.0),  # never negative, but not zero
        lambda x, y: x + jnp.maximum(-jnp.abs(y), -1.0),  # never positive, but not zero
        lambda x, y: jnp.where(x > 0, x, y),
    ],
)
def test_other_operations_use_their_operands(f):
    found = _flow(f, jnp.arange(3.0), jnp.ones(3))
    assert found.inputs == (True, True)


def test_an_unused_input_and_operation_are_not_live():
    found = _flow(lambda x, y: (jnp.sin(x), jnp.cos(y))[0], 1.0, 2.0)
    assert found.inputs == (True, False)
    assert found.primitives == {"sin"}


def test_a_loop_is_taken_whole():
    # The carry swaps each step: after two steps `a` is x again, but a loop's flow is a
    # fixed point over its steps; the reading keeps every input of a loop it reaches.
    def f(x, y):
        def body(carry, _):
            a, b = carry
            return (b, 0 * a), None

        (a, _), _ = jax.lax.scan(body, (x, y), None, length=2)
        return a

    found = _flow(f, 1.0, 2.0)
    assert found.inputs == (True, True)
    assert "scan" in found.primitives


def test_a_collective_multiplied_by_zero_inside_shard_map_is_not_live(device_count):
    mesh = axis_mesh("data", device_count)

    def body(b):
        n = jax.lax.axis_size("data")
        moved = jax.lax.ppermute(b, "data", [(i, (i + 1) % n) for i in range(n)])
        return b * 2 + 0 * moved, jax.lax.psum(b, "data")

    program = jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=(P("data"), P()))
    x = jax.device_put(jnp.arange(2.0 * device_count), NamedSharding(mesh, P("data")))
    both = _flow(program, x)
    # psum's primitive is psum, psum2 or psum_invariant, by JAX version and types.
    assert {"shard_map", "mul"} <= both.primitives
    assert any(name.startswith("psum") for name in both.primitives)
    assert "ppermute" not in both.primitives
    first_only = _flow(lambda x: program(x)[0], x)
    assert not any(name.startswith("psum") for name in first_only.primitives)


def test_what_is_not_a_program_is_refused():
    with pytest.raises(TypeError, match="jaxpr must be a traced program"):
        flow(lambda x: x)


def test_a_program_whose_answer_is_an_input_records_nothing_live():
    # Before: an empty `live` read as "not read, everything counts", so a program that
    # computed a psum and returned the answer it was given passed the judge's reading.
    mesh = axis_mesh("i", jax.device_count())
    summed = jax.shard_map(
        lambda b: jax.lax.psum(b, "i"), mesh=mesh, in_specs=P("i"), out_specs=P()
    )

    @jax.jit
    def program(x, answer):
        summed(x)  # traced, run, and thrown away
        return answer

    x = jax.device_put(jnp.arange(8.0 * jax.device_count()), NamedSharding(mesh, P("i")))
    answer = jnp.zeros(8)
    with record() as recording:
        program(x, answer)
    (run,) = recording.runs
    assert "shard_map" in run.primitives
    assert run.live == frozenset()
    assert run.live_inputs == (False, True)


def test_an_operation_in_one_branch_of_a_cond_may_never_run():
    # A collective behind a predicate no input makes true: it is in the program, and
    # runs in none of the checker's cases; what every branch computes reaches the output.
    def one_branch(x, y):
        return jax.lax.cond(jnp.sum(x) > 1e30, lambda: jnp.sin(y), lambda: jnp.cos(x))

    found = _flow(one_branch, jnp.arange(3.0), jnp.ones(3))
    assert "sin" not in found.primitives
    assert "cos" not in found.primitives
    assert found.inputs == (True, True)  # either branch may run: y may be read

    def both_branches(x, y):
        return jax.lax.cond(jnp.sum(x) > 0, lambda: jnp.sin(y) + x, lambda: jnp.sin(x) * y)

    assert "sin" in _flow(both_branches, jnp.arange(3.0), jnp.ones(3)).primitives


def test_a_cond_on_a_python_bool_walks_the_branch_it_picks():
    def known(x, y):
        return jax.lax.cond(True, lambda: jnp.sin(y), lambda: jnp.cos(x))

    found = _flow(known, jnp.arange(3.0), jnp.ones(3))
    assert "sin" in found.primitives
    assert "cos" not in found.primitives
    assert found.inputs == (False, True)
