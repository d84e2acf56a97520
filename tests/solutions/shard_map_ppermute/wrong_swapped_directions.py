"""Mistake: the halos sent the wrong way round (last element to the previous device, first to the next), written as if it were right."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "fail"
PHRASE = "wrong way round"
DEVICES = (8,)


def shard_map_ppermute(x: jax.Array) -> jax.Array:
    mesh = data_mesh(x.shape[0])
    n = mesh.shape["data"]
    x = jax.device_put(x, NamedSharding(mesh, P("data")))

    def body(block):
        to_next = [(i, (i - 1) % n) for i in range(n)]  # wrong: this goes to the previous device
        to_previous = [(i, (i + 1) % n) for i in range(n)]  # wrong: this goes to the next device
        left = jax.lax.ppermute(block[-1:], "data", perm=to_next)
        right = jax.lax.ppermute(block[:1], "data", perm=to_previous)
        padded = jnp.concatenate([left, block, right])
        return (padded[:-2] + padded[1:-1] + padded[2:]) / 3

    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=P("data")))(x)
