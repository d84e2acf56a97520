"""Mistake: psum of every block's total, own included, added to the local cumulative sum: no axis_index, wrong on every device count."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "fail"
PHRASE = "differ"
DEVICES = (1, 8)


def shard_map_axis_index(x: jax.Array) -> jax.Array:
    mesh = data_mesh(x.shape[0])
    x = jax.device_put(x, NamedSharding(mesh, P("data")))
    return jax.jit(
        jax.shard_map(
            lambda b: jnp.cumsum(b) + jax.lax.psum(jnp.sum(b, dtype=jnp.cumsum(b).dtype), "data"),
            mesh=mesh,
            in_specs=P("data"),
            out_specs=P("data"),
        )
    )(x)
