"""Mistake: the block is never passed on; each device multiplies only the rows it started with."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("model", length): a 1-D mesh

VERDICT = "fail"
PHRASE = "never reached it"
DEVICES = (8,)


def collective_matmul_all_gather(x: jax.Array, w: jax.Array) -> jax.Array:
    mesh = axis_mesh("model", math.gcd(x.shape[0], w.shape[1]))
    n = mesh.shape["model"]

    def local(x_block, w_cols):
        me = jax.lax.axis_index("model")
        product = x_block @ w_cols
        out = jnp.zeros((n * x_block.shape[0], w_cols.shape[1]), product.dtype)
        return jax.lax.dynamic_update_slice_in_dim(out, product, me * x_block.shape[0], axis=0)

    specs = (P("model", None), P(None, "model"))
    x, w = (jax.device_put(jnp.asarray(a), NamedSharding(mesh, s)) for a, s in zip((x, w), specs))
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=specs, out_specs=P(None, "model")))(x, w)
