"""Mistake: no gather: each device multiplies its block by itself (right on one device only)."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "fail"
PHRASE = "multiplied its block by itself only"
DEVICES = (8,)


def shard_map_all_gather(x: jax.Array) -> jax.Array:
    mesh = data_mesh(x.shape[0])
    x = jax.device_put(x, NamedSharding(mesh, P("data")))
    return jax.shard_map(
        lambda block: block[:, None] * block[None, :],  # wrong: own block only
        mesh=mesh,
        in_specs=P("data"),
        out_specs=P("data"),
    )(x)
