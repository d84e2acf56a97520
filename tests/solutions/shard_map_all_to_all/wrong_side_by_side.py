"""Mistake: local transposes put side by side (out_specs=P(None, "data")): the right values, but split by columns, not by rows."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "technique"
PHRASE = "no all-to-all (all_to_all)"
DEVICES = (8,)  # on one device the statement asks for shard_map alone


def shard_map_all_to_all(x: jax.Array) -> jax.Array:
    mesh = data_mesh(math.gcd(*x.shape))
    x = jax.device_put(x, NamedSharding(mesh, P("data")))
    return jax.shard_map(
        lambda rows: rows.T, mesh=mesh, in_specs=P("data"), out_specs=P(None, "data")  # wrong split
    )(x)
