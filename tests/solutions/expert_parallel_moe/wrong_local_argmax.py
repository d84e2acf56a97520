"""Mistake: each token takes the best of the experts on its OWN device (argmax over the local slice
of the logits): no communication, and a router that sees E / n experts."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("expert", length): a 1-D mesh

VERDICT = "fail"
PHRASE = "own device"
DEVICES = (8,)


def on_mesh(local, x, logits, w):
    mesh = axis_mesh("expert", math.gcd(x.shape[0], w.shape[0]))
    spec = NamedSharding(mesh, P("expert"))
    x, logits, w = (jax.device_put(jnp.asarray(a), spec) for a in (x, logits, w))
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=P("expert"), out_specs=P("expert")))(x, logits, w)


def expert_parallel_moe(x, router_logits, w):
    def local(x, logits, w):
        first = jax.lax.axis_index("expert") * w.shape[0]
        mine = jax.lax.dynamic_slice_in_dim(logits, first, w.shape[0], axis=1)
        return jnp.einsum("td,tdf->tf", x, w[jnp.argmax(mine, axis=1)])

    return on_mesh(local, x, router_logits, w)
