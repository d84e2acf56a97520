"""Mistake: out_specs=P() with check_vma=False, so each device's block comes back as if it were the whole array."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "fail"
PHRASE = "out_specs must put the blocks of all devices back together"
DEVICES = (8,)


def shard_map_double(x: jax.Array) -> jax.Array:
    mesh = data_mesh(x.shape[0])
    x = jax.device_put(x, NamedSharding(mesh, P("data")))
    return jax.jit(
        jax.shard_map(
            lambda block: block * 2.0,
            mesh=mesh,
            in_specs=P("data"),
            out_specs=P(),  # wrong: the blocks differ
            check_vma=False,
        )
    )(x)
