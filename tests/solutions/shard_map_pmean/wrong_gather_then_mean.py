"""Mistake: all_gather the whole array onto every device and take its mean there: a gather where one all-reduce of a scalar is asked."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "technique"
PHRASE = "no all-reduce (psum, pmean)"
DEVICES = (8,)  # on one device the statement asks for shard_map alone


def shard_map_pmean(x: jax.Array) -> jax.Array:
    mesh = data_mesh(x.shape[0])
    x = jax.device_put(x, NamedSharding(mesh, P("data")))
    return jax.jit(
        jax.shard_map(
            lambda block: block - jnp.mean(jax.lax.all_gather(block, "data", tiled=True)),
            mesh=mesh,
            in_specs=P("data"),
            out_specs=P("data"),
        )
    )(x)
