"""Mistake: ties broken towards the LAST expert (argmax of the reversed logits), where the statement
asks for the first."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("expert", length): a 1-D mesh

VERDICT = "fail"
PHRASE = "differ"  # the values; no diagnosis of the tie-break yet (open)
DEVICES = (1, 8)


def on_mesh(local, x, logits, w):
    mesh = axis_mesh("expert", math.gcd(x.shape[0], w.shape[0]))
    spec = NamedSharding(mesh, P("expert"))
    x, logits, w = (jax.device_put(jnp.asarray(a), spec) for a in (x, logits, w))
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=P("expert"), out_specs=P("expert")))(x, logits, w)


def expert_parallel_moe(x, router_logits, w):
    def local(x, logits, w):
        n, k, d = jax.lax.axis_size("expert"), w.shape[0], x.shape[1]
        e_total = logits.shape[1]
        expert = e_total - 1 - jnp.argmax(logits[:, ::-1], axis=1)  # wrong on ties
        device = expert // k
        message = jnp.concatenate([x, jax.nn.one_hot(expert % k, k, dtype=x.dtype)], axis=1)
        outbox = jnp.where((device[None, :] == jnp.arange(n)[:, None])[:, :, None], message[None], 0)
        inbox = jax.lax.all_to_all(outbox, "expert", 0, 0, tiled=True)
        tokens, chosen = inbox[..., :d], inbox[..., d:]
        every = jnp.einsum("std,edf->stef", tokens, w)
        results = jnp.sum(jnp.where(chosen[..., None] != 0, every, 0), axis=2)
        back = jax.lax.all_to_all(results, "expert", 0, 0, tiled=True)
        return back[device, jnp.arange(x.shape[0])]

    return on_mesh(local, x, router_logits, w)
