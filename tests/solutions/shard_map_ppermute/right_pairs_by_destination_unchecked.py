"""check_vma=False style: the same two permutations written by destination ((source of i, i) pairs); jitted."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

_programs = {}


def _program(mesh):
    n = mesh.devices.size
    from_previous = [((i - 1) % n, i) for i in range(n)]  # device i receives from i - 1
    from_next = [((i + 1) % n, i) for i in range(n)]  # device i receives from i + 1

    def body(block):
        halo_left = jax.lax.ppermute(block[-1:], axis_name="data", perm=from_previous)
        halo_right = jax.lax.ppermute(block[:1], axis_name="data", perm=from_next)
        padded = jnp.concatenate([halo_left, block, halo_right])
        return (padded[:-2] + padded[1:-1] + padded[2:]) / 3

    return jax.jit(
        jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=P("data"), check_vma=False)
    )


def shard_map_ppermute(x: jax.Array) -> jax.Array:
    """Periodic three-point average: ppermute brings each block its neighbours' edge elements."""
    if not isinstance(x, (np.ndarray, jax.Array)) or not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError("x must be an array of floating-point numbers")
    if x.ndim != 1:
        raise ValueError(f"x must be 1-D, but has shape {x.shape}")
    if x.shape[0] == 0:
        raise ValueError("x is empty")
    mesh = data_mesh(x.shape[0])
    if mesh not in _programs:
        _programs[mesh] = _program(mesh)
    return _programs[mesh](jax.device_put(x, NamedSharding(mesh, P("data"))))
