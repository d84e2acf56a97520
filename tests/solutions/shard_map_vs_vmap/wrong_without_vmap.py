"""Mistake: the per-row function used directly as the shard_map body, reducing each device's whole block to one number."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "error"
PHRASE = "out_specs entry which is too long"
DEVICES = (1, 8)


def shard_map_vs_vmap(x: jax.Array) -> jax.Array:
    mesh = data_mesh(x.shape[0])
    x = jax.device_put(x, NamedSharding(mesh, P("data")))
    per_device = jax.shard_map(
        lambda rows: jnp.sum(rows**2),  # wrong: one number per block
        mesh=mesh,
        in_specs=P("data"),
        out_specs=P("data"),
    )
    return jnp.stack([per_device(x), jax.vmap(lambda r: jnp.sum(r**2))(x)])
