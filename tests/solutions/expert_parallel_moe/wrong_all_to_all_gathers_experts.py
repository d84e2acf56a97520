"""Mistake: w gathered whole with an all-to-all instead of an all-gather (each device's experts,
copied n times, one copy to each device), then every device computes its own tokens: the
all-to-all the statement asks for is there, but it carries the experts' weights, not the tokens,
so no token moves and every device holds every expert: the rule of what stays on its devices
finds w itself in the all-to-all."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("expert", length): a 1-D mesh

VERDICT = "technique"
PHRASE = "travels between devices"
DEVICES = (
    8,
)  # on one device there is nothing to gather; the budget binds where w outweighs the tokens


def on_mesh(local, x, logits, w):
    mesh = axis_mesh("expert", math.gcd(x.shape[0], w.shape[0]))
    spec = NamedSharding(mesh, P("expert"))
    x, logits, w = (jax.device_put(jnp.asarray(a), spec) for a in (x, logits, w))
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=P("expert"), out_specs=P("expert")))(
        x, logits, w
    )


def expert_parallel_moe(x, router_logits, w):
    def local(x, logits, w):
        n = jax.lax.axis_size("expert")
        copies = jnp.broadcast_to(w[None], (n, *w.shape))  # one copy for each device
        every_expert = jax.lax.all_to_all(copies, "expert", 0, 0).reshape(-1, *w.shape[1:])
        return jnp.einsum("td,tdf->tf", x, every_expert[jnp.argmax(logits, axis=1)])

    return on_mesh(local, x, router_logits, w)
