"""Mistake: the partial sums are never added: each device returns only its own share of its own rows."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("model", length): a 1-D mesh

VERDICT = "fail"
PHRASE = "never added"
DEVICES = (8,)


def collective_matmul_reduce_scatter(h: jax.Array, w: jax.Array) -> jax.Array:
    mesh = axis_mesh("model", math.gcd(*h.shape))
    n = mesh.shape["model"]

    def local(h_cols, w_rows):
        me = jax.lax.axis_index("model")
        rows = h_cols.shape[0] // n
        return jax.lax.dynamic_slice_in_dim(h_cols, me * rows, rows, 0) @ w_rows

    specs = (P(None, "model"), P("model", None))
    h, w = (jax.device_put(jnp.asarray(a), NamedSharding(mesh, s)) for a, s in zip((h, w), specs))
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=specs, out_specs=P("model", None)))(h, w)
