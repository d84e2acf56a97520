"""Mistake: the sum computed in a thread of its own, where the checker cannot see it, then relayed through a program with a real psum."""

import concurrent.futures

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "technique"
PHRASE = "made where the checker cannot see how"
DEVICES = (1, 8)


def shard_map_psum(x: jax.Array) -> jax.Array:
    mesh = data_mesh(x.shape[0])
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        total = pool.submit(jnp.sum, x).result()  # wrong: the answer, made out of sight
    blocks = jax.device_put(x, NamedSharding(mesh, P("data")))
    total = jax.device_put(total, NamedSharding(mesh, P()))

    def body(block, whole_sum):
        token = jax.lax.psum(jnp.sum(block), "data")
        return whole_sum + jnp.minimum(jnp.abs(token), 0)  # a psum that changes nothing

    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("data"), P()), out_specs=P()))(
        blocks, total
    )
