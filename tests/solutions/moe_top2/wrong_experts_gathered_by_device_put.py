"""Mistake: w copied whole to every device by a jax.device_put to P() outside the shard_map; each
device runs every expert its own tokens chose, with no dispatch and no return, and aux's sums
are reduce-scattered by an all_to_all, which keeps an all-to-all in the program."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("expert", length): a 1-D mesh

VERDICT = "technique"
PHRASE = "w (the experts) travels"
DEVICES = (8,)  # on one device nothing moves


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

    def local(x, logits, w_all):
        t = x.shape[0]
        e1 = jnp.argmax(logits, axis=1)
        masked = jnp.where(jax.nn.one_hot(e1, E, dtype=bool), -jnp.inf, logits)
        e2 = jnp.argmax(masked, axis=1)
        l1 = jnp.take_along_axis(logits, e1[:, None], axis=1)
        l2 = jnp.take_along_axis(logits, e2[:, None], axis=1)
        gates = jax.nn.softmax(jnp.concatenate([l1, l2], axis=1), axis=1)
        experts = jnp.concatenate([e1, e2])
        chosen = jax.nn.one_hot(experts, E, dtype=jnp.int32)
        position = jnp.sum((jnp.cumsum(chosen, axis=0) - 1) * chosen, axis=1)
        kept = position < C
        dt = jnp.result_type(x.dtype, w_all.dtype)
        g = jnp.concatenate([gates[:, 0], gates[:, 1]]).astype(dt) * kept.astype(dt)
        xx = jnp.concatenate([x, x]).astype(dt)
        # every expert on this device, from the whole w: no dispatch, no return
        outs = jnp.einsum("sd,sdf->sf", xx, w_all.astype(dt)[experts])
        per_choice = g[:, None] * outs
        y = per_choice[:t] + per_choice[t:]
        probs = jax.nn.softmax(logits, axis=1)
        sums = jnp.concatenate(
            [jnp.sum(chosen[:t], axis=0).astype(probs.dtype), jnp.sum(probs, axis=0)]
        ).reshape(2, n, E // n)
        # aux's sums reduce-scattered with an all_to_all: each device sums its experts' part
        mine = jnp.sum(
            jax.lax.all_to_all(sums, "expert", 1, 1, tiled=True), axis=1
        )  # (2, n * E/n)?
        part = jnp.sum(mine[0] / T * mine[1] / T)
        aux = E * jax.lax.psum(part, "expert")
        return y, aux

    spec = NamedSharding(mesh, P("expert"))
    x, router_logits = (jax.device_put(jnp.asarray(a), spec) for a in (x, router_logits))
    w = jax.device_put(jnp.asarray(w), NamedSharding(mesh, P()))  # every expert on every device
    f = jax.shard_map(
        local, mesh=mesh, in_specs=(P("expert"), P("expert"), P()), out_specs=(P("expert"), P())
    )
    return jax.jit(f)(x, router_logits, w)
