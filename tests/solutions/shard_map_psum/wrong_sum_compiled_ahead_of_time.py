"""Mistake: the sum computed by a program compiled ahead of time (jit(f).lower(x).compile()), which JAX runs without the checker seeing it, then relayed through a program with a real psum."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "technique"
PHRASE = "compiled ahead of time"
DEVICES = (1, 8)


def shard_map_psum(x: jax.Array) -> jax.Array:
    mesh = data_mesh(x.shape[0])
    total = jax.jit(jnp.sum).lower(x).compile()(x)  # wrong: the answer, made out of sight
    blocks = jax.device_put(x, NamedSharding(mesh, P("data")))
    total = jax.device_put(total, NamedSharding(mesh, P()))

    def body(block, whole_sum):
        token = jax.lax.psum(jnp.sum(block), "data")
        return whole_sum + jnp.minimum(jnp.abs(token), 0)  # a psum that changes nothing

    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("data"), P()), out_specs=P()))(
        blocks, total
    )
