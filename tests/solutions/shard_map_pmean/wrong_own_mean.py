"""Mistake: each block centred on its own mean, no collective (right on one device only)."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "fail"
PHRASE = "centred on its own mean"
DEVICES = (8,)


def shard_map_pmean(x: jax.Array) -> jax.Array:
    mesh = data_mesh(x.shape[0])
    x = jax.device_put(x, NamedSharding(mesh, P("data")))
    return jax.shard_map(
        lambda block: block - jnp.mean(block),  # wrong: this block's mean
        mesh=mesh,
        in_specs=P("data"),
        out_specs=P("data"),
    )(x)
