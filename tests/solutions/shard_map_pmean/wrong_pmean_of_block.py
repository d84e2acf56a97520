"""Mistake: pmean of the block itself, a position-by-position mean over the devices, not the mean of the array."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "fail"
PHRASE = "differ"
DEVICES = (1, 8)


def shard_map_pmean(x: jax.Array) -> jax.Array:
    mesh = data_mesh(x.shape[0])
    x = jax.device_put(x, NamedSharding(mesh, P("data")))
    return jax.jit(
        jax.shard_map(
            lambda block: block - jax.lax.pmean(block, "data"),  # wrong: across devices only
            mesh=mesh,
            in_specs=P("data"),
            out_specs=P("data"),
        )
    )(x)
