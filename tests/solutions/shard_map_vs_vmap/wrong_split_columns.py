"""Mistake: in_specs=P(None, "data") splits the columns (each row cut over the devices), repaired with a psum: communication the problem does not need."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "placement"
PHRASE = "split the work over all of them"
DEVICES = (8,)


def shard_map_vs_vmap(x: jax.Array) -> jax.Array:
    mesh = data_mesh(x.shape[1])
    x = jax.device_put(x, NamedSharding(mesh, P(None, "data")))
    f = jax.vmap(lambda r: jnp.sum(r**2))
    by_devices = jax.jit(
        jax.shard_map(
            lambda cols: jax.lax.psum(f(cols), "data"),
            mesh=mesh,
            in_specs=P(None, "data"),
            out_specs=P(),
        )
    )(x)
    out = jnp.stack([by_devices, f(x)])
    return jax.device_put(out, NamedSharding(data_mesh(x.shape[0]), P(None, "data")))
