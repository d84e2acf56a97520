"""Mistake: a capacity of max(T / n / n, 1) slots per destination, enough for an even spread only:
the tokens beyond it are dropped (rows of zeros)."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("expert", length): a 1-D mesh

VERDICT = "fail"
PHRASE = "dropped"
DEVICES = (8,)


def on_mesh(local, x, logits, w):
    mesh = axis_mesh("expert", math.gcd(x.shape[0], w.shape[0]))
    spec = NamedSharding(mesh, P("expert"))
    x, logits, w = (jax.device_put(jnp.asarray(a), spec) for a in (x, logits, w))
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=P("expert"), out_specs=P("expert")))(x, logits, w)


def expert_parallel_moe(x, router_logits, w):
    def local(x, logits, w):
        n, t, k = jax.lax.axis_size("expert"), x.shape[0], w.shape[0]
        capacity = max(t // n, 1)
        expert = jnp.argmax(logits, axis=1)
        device = expert // k
        to = device[None, :] == jnp.arange(n)[:, None]
        rank = jnp.cumsum(to, axis=1)[device, jnp.arange(t)] - 1
        kept = rank < capacity
        slot = jnp.where(kept, rank, capacity)
        message = jnp.concatenate([x, jax.nn.one_hot(expert % k, k, dtype=x.dtype)], axis=1)
        outbox = jnp.zeros((n, capacity + 1, message.shape[1]), x.dtype).at[device, slot].set(message)
        inbox = jax.lax.all_to_all(outbox[:, :capacity], "expert", 0, 0, tiled=True)
        tokens, chosen = inbox[..., : x.shape[1]], inbox[..., x.shape[1] :]
        every = jnp.einsum("std,edf->stef", tokens, w)
        results = jnp.sum(jnp.where(chosen[..., None] != 0, every, 0), axis=2)
        back = jax.lax.all_to_all(results, "expert", 0, 0, tiled=True)
        return jnp.where(kept[:, None], back[device, jnp.minimum(slot, capacity - 1)], 0)

    return on_mesh(local, x, router_logits, w)
