"""Eager shard_map (no jax.jit); Python loops over the experts: each expert's slots filled by its first
choices then its second ones (cumsum of masks), the device's own experts run one by one."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("expert", length): a 1-D mesh


def _validate(x, router_logits, w, capacity):
    for name, a in (("x", x), ("router_logits", router_logits), ("w", w)):
        if not isinstance(a, jax.Array | np.ndarray):
            raise TypeError(f"{name} must be an array, not {type(a).__name__}")
        if not jnp.issubdtype(a.dtype, jnp.floating):
            raise TypeError(f"{name} must hold floating-point numbers, not {a.dtype}")
    if isinstance(capacity, bool) or not isinstance(capacity, int):
        raise TypeError(f"capacity must be an int, not {type(capacity).__name__}")
    if capacity < 0:
        raise ValueError(f"capacity must be >= 0, got {capacity}")
    if x.ndim != 2 or router_logits.ndim != 2 or w.ndim != 3:
        raise ValueError("x must be (T, D), router_logits (T, E) and w (E, D, F)")
    T, D = x.shape
    E, Dw, F = w.shape
    if router_logits.shape != (T, E) or Dw != D:
        raise ValueError(f"shapes do not fit: x {x.shape}, router_logits {router_logits.shape}, w {w.shape}")
    if T == 0 or E < 2 or D == 0 or F == 0:
        raise ValueError("need T >= 1, E >= 2, D >= 1 and F >= 1")


def moe_top2(x, router_logits, w, capacity):
    _validate(x, router_logits, w, capacity)
    T, D = x.shape
    E, _, F = w.shape
    mesh = axis_mesh("expert", math.gcd(T, E))
    n = mesh.shape["expert"]
    k = E // n

    def local(x, logits, w):
        e1 = jnp.argmax(logits, axis=1)
        rest = jnp.where(jnp.arange(E)[None, :] == e1[:, None], -jnp.inf, logits)
        e2 = jnp.argmax(rest, axis=1)
        top = jnp.stack([jnp.max(logits, axis=1), jnp.max(rest, axis=1)], axis=1)
        gates = jax.nn.softmax(top, axis=1)
        buffers, slots = [], []
        for expert in range(E):
            first, second = e1 == expert, e2 == expert
            slot1 = jnp.cumsum(first) - 1
            slot2 = jnp.sum(first) + jnp.cumsum(second) - 1
            # (t, capacity): which token sits in which of this expert's slots
            a = jnp.where(first[:, None], slot1[:, None] == jnp.arange(capacity), False)
            b = jnp.where(second[:, None], slot2[:, None] == jnp.arange(capacity), False)
            slots.append((a, b))
            buffers.append(jnp.einsum("tc,td->cd", (a | b).astype(x.dtype), x))
        inbox = jax.lax.all_to_all(jnp.stack(buffers), "expert", 0, 0, tiled=True)
        inbox = inbox.reshape(n, k, capacity, D)
        out = jnp.stack([inbox[:, j] @ w[j] for j in range(k)], axis=1)  # (n, k, C, F)
        back = jax.lax.all_to_all(out.reshape(E, capacity, F), "expert", 0, 0, tiled=True)
        y = jnp.zeros((x.shape[0], F), back.dtype)
        # At capacity 0 there is nothing to combine (and an eager shard_map fails on a
        # matmul over an empty axis).
        for expert, (a, b) in enumerate(slots if capacity else []):
            y = y + gates[:, :1].astype(back.dtype) * (a.astype(back.dtype) @ back[expert])
            y = y + gates[:, 1:].astype(back.dtype) * (b.astype(back.dtype) @ back[expert])
        probs = jax.nn.softmax(logits, axis=1)
        counts = jnp.sum(jax.nn.one_hot(e1, E, dtype=probs.dtype), axis=0)
        both = jax.lax.psum(jnp.concatenate([counts, probs.sum(axis=0)]), "expert")
        return y, E * jnp.sum(both[:E] * both[E:]) / T**2

    spec = NamedSharding(mesh, P("expert"))
    x, router_logits, w = (jax.device_put(jnp.asarray(a), spec) for a in (x, router_logits, w))
    return jax.shard_map(local, mesh=mesh, in_specs=P("expert"), out_specs=(P("expert"), P()))(
        x, router_logits, w
    )
