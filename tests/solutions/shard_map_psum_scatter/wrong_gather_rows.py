"""Mistake: gather-then-slice: all_gather every row, sum the whole batch on every device, keep this device's block of the sums."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "technique"
PHRASE = "no reduce-scatter (psum_scatter)"
DEVICES = (8,)  # on one device the statement asks for shard_map alone


def shard_map_psum_scatter(x: jax.Array) -> jax.Array:
    mesh = data_mesh(math.gcd(*x.shape))
    x = jax.device_put(x, NamedSharding(mesh, P("data")))

    def body(rows):
        batch = jax.lax.all_gather(rows, "data", tiled=True)  # every row on every device
        sums = batch.sum(axis=0)
        width = sums.shape[0] // jax.lax.axis_size("data")
        return jax.lax.dynamic_slice_in_dim(sums, jax.lax.axis_index("data") * width, width)

    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=P("data")))(x)
