"""Mistake: each block transposed locally and the blocks stacked (out_specs=P("data")): right on one device only."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "fail"
PHRASE = "shape: expected"
DEVICES = (8,)


def shard_map_all_to_all(x: jax.Array) -> jax.Array:
    mesh = data_mesh(math.gcd(*x.shape))
    x = jax.device_put(x, NamedSharding(mesh, P("data")))
    return jax.shard_map(
        lambda rows: rows.T, mesh=mesh, in_specs=P("data"), out_specs=P("data")  # wrong
    )(x)
