"""Mistake: the gates taken from the softmax of all E logits at e1 and e2, not from the softmax of
the two chosen logits."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("expert", length): a 1-D mesh

VERDICT = "fail"
PHRASE = "softmax of all E logits"


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
    C = capacity

    def local(x, logits, w):
        t = x.shape[0]
        e1 = jnp.argmax(logits, axis=1)
        masked = jnp.where(jax.nn.one_hot(e1, E, dtype=bool), -jnp.inf, logits)
        e2 = jnp.argmax(masked, axis=1)
        l1 = jnp.take_along_axis(logits, e1[:, None], axis=1)
        l2 = jnp.take_along_axis(logits, e2[:, None], axis=1)
        full = jax.nn.softmax(logits, axis=1)
        gates = jnp.concatenate([jnp.take_along_axis(full, e1[:, None], 1), jnp.take_along_axis(full, e2[:, None], 1)], axis=1)
        experts = jnp.concatenate([e1, e2])  # every first choice, then every second one
        chosen = jax.nn.one_hot(experts, E, dtype=jnp.int32)  # (2t, E)
        position = jnp.sum((jnp.cumsum(chosen, axis=0) - 1) * chosen, axis=1)
        slot = jax.nn.one_hot(position, C, dtype=x.dtype)  # all zeros past the capacity
        dispatch = chosen.astype(x.dtype)[:, :, None] * slot[:, None, :]  # (2t, E, C)
        buffer = jnp.einsum("sec,sd->ecd", dispatch, jnp.concatenate([x, x]))
        inbox = jax.lax.all_to_all(buffer, "expert", 0, 0, tiled=True)
        inbox = inbox.reshape(n, E // n, C, D)
        out = jnp.einsum("skcd,kdf->skcf", inbox, w).reshape(E, C, F)
        back = jax.lax.all_to_all(out, "expert", 0, 0, tiled=True)
        g = jnp.concatenate([gates[:, 0], gates[:, 1]]).astype(back.dtype)
        per_choice = jnp.einsum("sec,ecf->sf", dispatch.astype(back.dtype) * g[:, None, None], back)
        y = per_choice[:t] + per_choice[t:]
        probs = jax.nn.softmax(logits, axis=1)
        counts = jax.lax.psum(jnp.sum(chosen[:t], axis=0).astype(probs.dtype), "expert")
        mass = jax.lax.psum(jnp.sum(probs, axis=0), "expert")
        aux = E * jnp.sum((counts / T) * (mass / T))
        return y, aux

    spec = NamedSharding(mesh, P("expert"))
    x, router_logits, w = (jax.device_put(jnp.asarray(a), spec) for a in (x, router_logits, w))
    f = jax.shard_map(local, mesh=mesh, in_specs=P("expert"), out_specs=(P("expert"), P()))
    return jax.jit(f)(x, router_logits, w)
