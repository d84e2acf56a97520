"""Mistake: every device all_gathers w (all the experts) and computes its own tokens: right values,
but no token moves and every device holds every expert."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("expert", length): a 1-D mesh

VERDICT = "technique"
PHRASE = "no all-to-all"
DEVICES = (8,)  # on one device the statement asks for shard_map alone


def on_mesh(local, x, logits, w):
    mesh = axis_mesh("expert", math.gcd(x.shape[0], w.shape[0]))
    spec = NamedSharding(mesh, P("expert"))
    x, logits, w = (jax.device_put(jnp.asarray(a), spec) for a in (x, logits, w))
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=P("expert"), out_specs=P("expert")))(x, logits, w)


def expert_parallel_moe(x, router_logits, w):
    def local(x, logits, w):
        every_expert = jax.lax.all_gather(w, "expert", axis=0, tiled=True)
        return jnp.einsum("td,tdf->tf", x, every_expert[jnp.argmax(logits, axis=1)])

    return on_mesh(local, x, router_logits, w)
