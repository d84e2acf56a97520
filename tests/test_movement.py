"""Which collectives carry data a problem keeps in place (shard_tutorial.checking.movement).

Each program is traced on the devices this process has (1 or 8), on both stacks: the
rule follows data through JAX's primitives, whose names and loop parameters differ
between jax 0.10 and 0.12 (a scan's constants and carried values are counted by
``num_consts`` on one and a tree on the other).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial.checking.movement import moved
from shard_tutorial.checking.recording import _key, received_bytes, record

N = jax.device_count()
RING = [(i, (i + 1) % N) for i in range(N)]


def _traced(body: Callable[..., Any]) -> Any:
    """The jaxpr of ``body(w, x)`` inside a jitted shard_map, w and x split by rows."""
    mesh = Mesh(jax.devices(), ("x",))

    def program(w: jax.Array, x: jax.Array) -> jax.Array:
        return jax.shard_map(
            body, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P(), check_vma=False
        )(w, x)

    return jax.make_jaxpr(jax.jit(program))(jnp.ones((4 * N, 4)), jnp.ones((2 * N, 4)))


def _ring_fori(w: jax.Array, _x: jax.Array) -> jax.Array:
    return jax.lax.fori_loop(0, N - 1, lambda _, c: jax.lax.ppermute(c, "x", RING), w).sum()


def _ring_scan(w: jax.Array, _x: jax.Array) -> jax.Array:
    def hop(c: jax.Array, _: None) -> tuple[jax.Array, None]:
        return jax.lax.ppermute(c, "x", RING), None

    return jax.lax.scan(hop, w, None, length=3)[0].sum()


def _ring_while(w: jax.Array, _x: jax.Array) -> jax.Array:
    def hop(state: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        return state[0] + 1, jax.lax.ppermute(state[1], "x", RING)

    return jax.lax.while_loop(lambda s: s[0] < 3, hop, (jnp.int32(0), w))[1].sum()


def _ring_second_carry(w: jax.Array, _x: jax.Array) -> jax.Array:
    # w enters the loop as the second carried value, moves to the first, and is passed
    # on from there only from the second iteration on: the fixed point finds it.
    def hop(_: int, c: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        return c[1], jax.lax.ppermute(c[0], "x", RING)

    return jax.lax.fori_loop(0, 3, hop, (jnp.zeros_like(w), w))[1].sum()


def _padded_psum(w: jax.Array, _x: jax.Array) -> jax.Array:
    return jax.lax.psum(jnp.pad(w, ((0, 4), (0, 0))), "x").sum()


def _masked_psum(w: jax.Array, _x: jax.Array) -> jax.Array:
    return jax.lax.psum(jnp.where(jax.lax.axis_index("x") == 0, w, 0.0), "x").sum()


def _all_to_all(w: jax.Array, _x: jax.Array) -> jax.Array:
    return jax.lax.all_to_all(w.reshape(N, -1), "x", 0, 0).sum()


def _in_a_branch(w: jax.Array, x: jax.Array) -> jax.Array:
    passed = jax.lax.cond(x.sum() > 0, lambda: jax.lax.ppermute(w, "x", RING), lambda: w)
    return passed.sum()


def _in_checkpoint(w: jax.Array, _x: jax.Array) -> jax.Array:
    return jax.checkpoint(lambda w: jax.lax.all_gather(w, "x"))(w).sum()


def _through_a_barrier(w: jax.Array, x: jax.Array) -> jax.Array:
    return jax.lax.psum(jax.lax.optimization_barrier((w, x))[0], "x").sum()


def _activation(w: jax.Array, x: jax.Array) -> jax.Array:
    # What a pipeline sends: computed by the layers, not the layers themselves.
    return jax.lax.ppermute(jnp.tanh(x @ w[:4]), "x", RING).sum()


def _gradient(w: jax.Array, x: jax.Array) -> jax.Array:
    grad = jax.grad(lambda w: jnp.tanh(x @ w[:4].T).sum())(w)
    return jax.lax.psum(grad, "x").sum()


def _other_input(w: jax.Array, x: jax.Array) -> jax.Array:
    return jax.lax.ppermute(x, "x", RING).sum() + w.sum()


@pytest.mark.parametrize(
    ("body", "carried"),
    [
        (_ring_fori, {"ppermute"}),
        (_ring_scan, {"ppermute"}),
        (_ring_while, {"ppermute"}),
        (_ring_second_carry, {"ppermute"}),
        (_padded_psum, {"psum"}),
        (_masked_psum, {"psum"}),
        (_all_to_all, {"all_to_all"}),
        (_in_a_branch, {"ppermute"}),
        (_in_checkpoint, {"all_gather"}),
        (_through_a_barrier, {"psum"}),
        (_activation, set()),
        (_gradient, set()),
        (_other_input, set()),
    ],
    ids=lambda v: getattr(v, "__name__", "").strip("_") or None,
)
def test_the_collectives_that_carry_w_are_found(
    body: Callable[..., Any], carried: set[str]
) -> None:
    found = moved(_traced(body), [True, False])
    assert set(found.collectives) == carried


def test_what_a_program_returns_of_the_data_is_said() -> None:
    traced = jax.make_jaxpr(lambda w, x: (w[:2].T, jnp.sin(w), x))(jnp.ones((4, 2)), 1.0)
    assert moved(traced, [True, False]).outputs == (True, False, False)


def test_bad_input_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match="jaxpr must be a traced program"):
        moved("not a program", [True])
    traced = jax.make_jaxpr(lambda w: w)(1.0)
    with pytest.raises(ValueError, match="sources must have one entry per input"):
        moved(traced, [True, False])


def test_eager_code_is_followed_from_one_program_to_the_next() -> None:
    # Eager shard_map runs each operation as a program of its own: the slice of w is
    # one, the ppermute of that slice another.
    mesh = Mesh(jax.devices(), ("x",))
    w = jax.device_put(jnp.arange(8.0 * N).reshape(2 * N, 4), NamedSharding(mesh, P("x")))

    def ring(w: jax.Array) -> jax.Array:
        return jax.lax.ppermute(w[:1], "x", RING)

    with record() as recording:
        recording.keep_in_place([w])
        jax.shard_map(ring, mesh=mesh, in_specs=P("x"), out_specs=P("x"))(w)
    carried = set().union(*(run.carries for run in recording.runs))
    assert carried == {"ppermute"}


def test_a_device_put_that_gathers_w_carries_it_and_one_that_lays_it_out_does_not() -> None:
    mesh = Mesh(jax.devices(), ("x",))
    whole = np.arange(4.0 * N, dtype=np.float32)
    loose = jnp.asarray(whole)  # as the inputs of some problems arrive: not committed
    with record() as recording:
        recording.keep_in_place([loose])
        split = jax.device_put(loose, NamedSharding(mesh, P("x")))
        gathered = jax.device_put(split, NamedSharding(mesh, P()))
    lay_out, gather = recording.copies
    assert (lay_out.received, lay_out.carries) == (0, False)
    assert gather.received == (N - 1) * 4 * 4
    assert gather.carries is (N > 1)
    assert _key(gathered) in recording.stays
    assert received_bytes(split, gathered) == gather.received


def _state_updated_in_place(w: jax.Array, _x: jax.Array) -> jax.Array:
    # One buffer of state (w's rows beside computed ones), its first columns overwritten
    # with computed values, then only those gathered: none of w's data moves.
    state = jnp.concatenate([w, jnp.tanh(w)], axis=1)
    state = state.at[:, :4].set(jnp.sin(w))
    return jax.lax.all_gather(state[:, :4], "x", tiled=True).sum()


def _zeros_written_with_w(w: jax.Array, _x: jax.Array) -> jax.Array:
    # w written into a buffer of zeros (a zero-padded block), then summed over devices.
    padded = jax.lax.dynamic_update_slice_in_dim(jnp.zeros((8 * w.shape[0], 4)), w, 0, 0)
    return jax.lax.psum(padded, "x").sum()


@pytest.mark.parametrize(
    ("body", "carried"),
    [(_state_updated_in_place, set()), (_zeros_written_with_w, {"psum"})],
    ids=["state_updated_in_place", "zeros_written_with_w"],
)
def test_a_buffer_follows_what_is_written_into_it(
    body: Callable[..., Any], carried: set[str]
) -> None:
    assert set(moved(_traced(body), [True, False]).collectives) == carried
