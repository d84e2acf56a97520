"""Mistake: w gathered whole with all-to-alls instead of an all-gather, then every device runs its own
tokens' kept choices locally: the two all-to-alls the statement asks for are there, but they carry
the experts' weights, not the tokens, so no token moves and each device holds every expert. Each
half of w's outputs goes to every device in one all_to_all: together (n - 1) / n of w per device,
more than the dispatch and the return send wherever w outweighs the (E, capacity, D + F) buffers;
and at any size, the all-to-alls carry w itself (the rule of what stays on its devices)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("expert", length): a 1-D mesh

VERDICT = "technique"
PHRASE = "travels between devices"
DEVICES = (8,)  # on one device there is nothing to gather


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
        raise ValueError(
            f"shapes do not fit: x {x.shape}, router_logits {router_logits.shape}, w {w.shape}"
        )
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
        gates = jax.nn.softmax(jnp.concatenate([l1, l2], axis=1), axis=1)
        experts = jnp.concatenate([e1, e2])  # every first choice, then every second one
        chosen = jax.nn.one_hot(experts, E, dtype=jnp.int32)  # (2t, E)
        position = jnp.sum((jnp.cumsum(chosen, axis=0) - 1) * chosen, axis=1)
        slot = jax.nn.one_hot(position, C, dtype=x.dtype)  # all zeros past the capacity
        dispatch = chosen.astype(x.dtype)[:, :, None] * slot[:, None, :]  # (2t, E, C)
        # (wrong) every expert here: each device's block, copied n times, one copy to each
        # device, in two all-to-alls (one per half of F).
        half = F // 2 or F
        parts = [w[:, :, :half], w[:, :, half:]] if half < F else [w]
        gathered = [
            jax.lax.all_to_all(jnp.broadcast_to(p[None], (n, *p.shape)), "expert", 0, 0)
            for p in parts
        ]
        every = jnp.concatenate([g.reshape(E, D, -1) for g in gathered], axis=2)
        kept = jnp.sum(dispatch, axis=2)  # (2t, E): the choice's expert, if it has a slot
        g = jnp.concatenate([gates[:, 0], gates[:, 1]])
        xx = jnp.concatenate([x, x])
        per_choice = jnp.einsum("se,sd,edf->sf", kept * g[:, None], xx, every)
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
