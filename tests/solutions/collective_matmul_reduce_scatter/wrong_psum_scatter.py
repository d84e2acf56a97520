"""Mistake: multiply, then jax.lax.psum_scatter: right values, but the reduce-scatter the ring replaces."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("model", length): a 1-D mesh

VERDICT = "technique"
PHRASE = "no collective-permute"
DEVICES = (8,)  # on one device the statement asks for shard_map alone


def collective_matmul_reduce_scatter(h: jax.Array, w: jax.Array) -> jax.Array:
    mesh = axis_mesh("model", math.gcd(*h.shape))

    def local(h_cols, w_rows):
        return jax.lax.psum_scatter(h_cols @ w_rows, "model", scatter_dimension=0, tiled=True)

    specs = (P(None, "model"), P("model", None))
    h, w = (jax.device_put(jnp.asarray(a), NamedSharding(mesh, s)) for a, s in zip((h, w), specs))
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=specs, out_specs=P("model", None)))(h, w)
