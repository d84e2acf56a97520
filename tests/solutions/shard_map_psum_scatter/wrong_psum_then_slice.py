"""Mistake: a full psum (all-reduce) and then each device keeps its block: split result, but more communication than one reduce-scatter."""

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
        total = jax.lax.psum(rows.sum(axis=0), "data")  # all n sums on every device
        width = total.shape[0] // jax.lax.axis_size("data")
        return jax.lax.dynamic_slice_in_dim(total, jax.lax.axis_index("data") * width, width)

    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=P("data")))(x)
