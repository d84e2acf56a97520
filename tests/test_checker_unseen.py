"""What the recording cannot see is not credited: answers made outside the recorded call.

The checker records the programs and copies of the very call that answered
(:mod:`shard_tutorial.checking.recording`, through JAX's jit dispatch). An answer computed where
it cannot look (an ahead-of-time compiled program, another thread: the corpus holds
one of each, tests/solutions/shard_map_psum) or on the host and put together with
``jax.make_array_from_callback``, then passed through a program with a real
collective, must not pass as the technique's work. The arrays JAX makes without a
program in right answers (a PRNG key wrapped around a program's output, as Flax's
``nnx.Rngs`` does) are known by their data, not counted as unseen.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from judging import judged

from shard_tutorial import data_mesh
from shard_tutorial.problems import get_problem

PSUM = get_problem("shard_map_psum")
CASE = next(c for c in PSUM.cases if c.args[0].shape == (32,))  # one block per device on 8


def _through_a_real_psum(x: jax.Array, y: jax.Array) -> jax.Array:
    """``y`` relayed through a shard_map whose psum is live (its result is added)."""
    mesh = data_mesh(x.shape[0])
    relay = jax.shard_map(
        lambda b, y: jax.lax.psum(jnp.minimum(jnp.abs(b.sum()), 0.0), "data") + y,
        mesh=mesh, in_specs=(P("data"), P()), out_specs=P(),
    )  # fmt: skip
    return jax.jit(relay)(x, y)


def _placed(x: jax.Array) -> tuple[jax.Array, NamedSharding]:
    mesh = data_mesh(x.shape[0])
    return jax.device_put(x, NamedSharding(mesh, P("data"))), NamedSharding(mesh, P())


def compiled_ahead_of_time(x):
    x, whole = _placed(x)
    total = jax.jit(jnp.sum, out_shardings=whole).lower(x).compile()(x)
    return _through_a_real_psum(x, total)


def made_from_a_callback(x):
    x, whole = _placed(x)
    total = np.asarray(jnp.sum(x) + 0)  # brought to the host
    made = jax.make_array_from_callback((), whole, lambda index: total[index])
    return _through_a_real_psum(x, made)


def test_an_answer_from_an_ahead_of_time_compiled_program_is_not_credited():
    status, message = judged(PSUM, compiled_ahead_of_time, CASE)
    assert status == "technique", message
    assert "made where the checker cannot see how" in message
    assert "compiled ahead of time" in message


def test_an_answer_made_by_a_callback_from_host_values_is_not_credited():
    status, message = judged(PSUM, made_from_a_callback, CASE)
    assert status == "technique", message


def test_a_constant_made_before_the_call_is_no_reason_to_refuse():
    offset = jnp.zeros(())  # made when the file loads: before the call, not unseen

    def right(x):
        x, _ = _placed(x)
        mesh = data_mesh(x.shape[0])
        summed = jax.shard_map(
            lambda b: jax.lax.psum(b.sum(), "data"), mesh=mesh, in_specs=P("data"), out_specs=P()
        )
        return jax.jit(summed)(x) + offset

    status, message = judged(PSUM, right, CASE)
    assert status == "pass", message
