"""Mistake: psum where a split result was asked: right values, but every device holds all n sums (out_specs=P())."""

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
    return jax.jit(
        jax.shard_map(
            lambda rows: jax.lax.psum(rows.sum(axis=0), "data"),
            mesh=mesh,
            in_specs=P("data"),
            out_specs=P(),
        )
    )(x)
