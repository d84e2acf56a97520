"""Mistake: all_gather x's rows first, then multiply: right values, but the all-gather the ring replaces."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("model", length): a 1-D mesh

VERDICT = "technique"
PHRASE = "no collective-permute"
DEVICES = (8,)  # on one device the statement asks for shard_map alone


def collective_matmul_all_gather(x: jax.Array, w: jax.Array) -> jax.Array:
    mesh = axis_mesh("model", math.gcd(x.shape[0], w.shape[1]))

    def local(x_block, w_cols):
        whole = jax.lax.all_gather(x_block, "model", axis=0, tiled=True)
        return whole @ w_cols

    specs = (P("model", None), P(None, "model"))
    x, w = (jax.device_put(jnp.asarray(a), NamedSharding(mesh, s)) for a, s in zip((x, w), specs))
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=specs, out_specs=P(None, "model")))(x, w)
