"""Mistake: no collective: each device's partial sums returned as replicated with check_vma=False (right on one device only)."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "fail"
PHRASE = "one device's partial sums"
DEVICES = (8,)


def shard_map_psum_scatter(x: jax.Array) -> jax.Array:
    mesh = data_mesh(math.gcd(*x.shape))
    x = jax.device_put(x, NamedSharding(mesh, P("data")))
    return jax.shard_map(
        lambda rows: rows.sum(axis=0),  # wrong: this device's rows only
        mesh=mesh,
        in_specs=P("data"),
        out_specs=P(),
        check_vma=False,
    )(x)
