"""Mistake: doubles with the integer 2, so integer input stays integer instead of becoming float32."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "fail"
PHRASE = "dtype: expected float32, received int32"
DEVICES = (1, 8)


def shard_map_double(x: jax.Array) -> jax.Array:
    mesh = data_mesh(x.shape[0])
    x = jax.device_put(x, NamedSharding(mesh, P("data")))
    return jax.jit(
        jax.shard_map(lambda block: block * 2, mesh=mesh, in_specs=P("data"), out_specs=P("data"))
    )(x)
