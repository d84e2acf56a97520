"""check_vma=False style: untiled all_to_all over an explicit (devices, ...) axis of chunks, reassembled with reshapes; jitted."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

_programs = {}


def _make(mesh, n, m):
    d = mesh.shape["data"]

    def body(rows):  # (n/d, m)
        chunks = rows.reshape(n // d, d, m // d).transpose(1, 0, 2)  # (d, n/d, m/d): chunk j for device j
        received = jax.lax.all_to_all(chunks, "data", split_axis=0, concat_axis=0, tiled=False)
        # received[k]: the chunk from device k, rows k*n/d... of x, my m/d columns
        return received.transpose(2, 0, 1).reshape(m // d, n)  # (m/d, n): my rows of x.T

    return jax.jit(
        jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=P("data"), check_vma=False)
    )


def shard_map_all_to_all(x: jax.Array) -> jax.Array:
    """Transpose a matrix whose rows are split: all_to_all swaps which axis is split."""
    if not isinstance(x, (np.ndarray, jax.Array)):
        raise TypeError(f"x must be a numeric array, not {type(x).__name__}")
    if x.dtype == jnp.bool_ or not jnp.issubdtype(x.dtype, jnp.number):
        raise TypeError(f"x must be a numeric array, not {x.dtype}")
    if x.ndim != 2:
        raise ValueError(f"x must be 2-D, but has shape {x.shape}")
    n, m = x.shape
    mesh = data_mesh(math.gcd(n, m))
    placed = jax.device_put(x, NamedSharding(mesh, P("data")))
    if n == 0 or m == 0:
        return jax.device_put(jnp.zeros((m, n), placed.dtype), NamedSharding(mesh, P("data")))
    key = (mesh, n, m)
    if key not in _programs:
        _programs[key] = _make(mesh, n, m)
    return _programs[key](placed)
