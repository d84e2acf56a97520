"""Jitted style: two ppermutes (last element to the next device, first to the previous), permutations from the mesh size; cached per mesh."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length


@functools.cache
def _smoother(mesh):
    n = mesh.shape["data"]
    to_next = [(i, (i + 1) % n) for i in range(n)]
    to_previous = [(i, (i - 1) % n) for i in range(n)]

    def body(block):
        left = jax.lax.ppermute(block[-1:], "data", perm=to_next)  # previous device's last
        right = jax.lax.ppermute(block[:1], "data", perm=to_previous)  # next device's first
        padded = jnp.concatenate([left, block, right])
        return (padded[:-2] + padded[1:-1] + padded[2:]) / 3

    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=P("data")))


def shard_map_ppermute(x: jax.Array) -> jax.Array:
    """Periodic three-point average: ppermute brings each block its neighbours' edge elements."""
    if not isinstance(x, (np.ndarray, jax.Array)) or not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError("x must be an array of floating-point numbers")
    if x.ndim != 1:
        raise ValueError(f"x must be 1-D, but has shape {x.shape}")
    if x.shape[0] == 0:
        raise ValueError("x is empty")
    mesh = data_mesh(x.shape[0])
    return _smoother(mesh)(jax.device_put(x, NamedSharding(mesh, P("data"))))
