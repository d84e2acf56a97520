"""Mistake: jnp.roll inside the body rolls each block on itself; the edges take the wrong neighbours (right on one device only)."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "fail"
PHRASE = "wrapped around on itself"
DEVICES = (8,)


def shard_map_ppermute(x: jax.Array) -> jax.Array:
    mesh = data_mesh(x.shape[0])
    x = jax.device_put(x, NamedSharding(mesh, P("data")))
    return jax.shard_map(
        lambda b: (jnp.roll(b, 1) + b + jnp.roll(b, -1)) / 3,  # wrong at the edges
        mesh=mesh,
        in_specs=P("data"),
        out_specs=P("data"),
    )(x)
