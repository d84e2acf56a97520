"""Mistake: the psum left out, with check_vma=False so JAX does not refuse out_specs=P(): one device's partial sum."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "fail"
PHRASE = "one device's partial sum"
DEVICES = (8,)


def shard_map_psum(x: jax.Array) -> jax.Array:
    mesh = data_mesh(x.shape[0])
    x = jax.device_put(x, NamedSharding(mesh, P("data")))
    return jax.shard_map(
        lambda block: jnp.sum(block),  # wrong: each device's partial sum
        mesh=mesh,
        in_specs=P("data"),
        out_specs=P(),
        check_vma=False,
    )(x)
