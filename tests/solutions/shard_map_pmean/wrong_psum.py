"""Mistake: psum where pmean was meant: the sum of the block means, n_devices times the mean."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "fail"
PHRASE = "differ"
DEVICES = (8,)


def shard_map_pmean(x: jax.Array) -> jax.Array:
    mesh = data_mesh(x.shape[0])
    x = jax.device_put(x, NamedSharding(mesh, P("data")))
    return jax.jit(
        jax.shard_map(
            lambda block: block - jax.lax.psum(jnp.mean(block), "data"),  # wrong: psum
            mesh=mesh,
            in_specs=P("data"),
            out_specs=P("data"),
        )
    )(x)
