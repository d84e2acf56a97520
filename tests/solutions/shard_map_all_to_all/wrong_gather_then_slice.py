"""Mistake: gather-then-slice: all_gather the whole matrix on every device, transpose it, keep this device's rows; x is gathered whole."""

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
    n, m = x.shape
    mesh = data_mesh(math.gcd(n, m))
    x = jax.device_put(x, NamedSharding(mesh, P("data")))
    if n == 0 or m == 0:
        return jax.device_put(jnp.zeros((m, n), x.dtype), NamedSharding(mesh, P("data")))

    def body(rows):
        whole_t = jax.lax.all_gather(rows, "data", tiled=True).T  # (m, n) on every device
        width = m // jax.lax.axis_size("data")
        return jax.lax.dynamic_slice_in_dim(whole_t, jax.lax.axis_index("data") * width, width)

    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=P("data")))(x)
