"""Jitted shard_map with check_vma=False; each choice's slot from a pairwise count of earlier choices of
the same expert, the local experts run in a jax.lax.fori_loop, aux from a psum of the counts and a pmean
of the mean probabilities."""

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
        t = x.shape[0]
        order = jnp.argsort(-logits, axis=1, stable=True)  # best first, the first index on ties
        e1, e2 = order[:, 0], order[:, 1]
        l1 = jnp.take_along_axis(logits, e1[:, None], 1)[:, 0]
        l2 = jnp.take_along_axis(logits, e2[:, None], 1)[:, 0]
        g1 = 1.0 / (1.0 + jnp.exp(l2 - l1))
        g2 = 1.0 - g1
        e = jnp.concatenate([e1, e2])  # choice i: first choices, then second ones
        i = jnp.arange(2 * t)
        earlier = (e[None, :] == e[:, None]) & (i[None, :] < i[:, None])
        slot = jnp.sum(earlier, axis=1)
        kept = slot < capacity
        buffer = jnp.zeros((E, capacity, D), x.dtype)
        xx = jnp.concatenate([x, x])
        buffer = buffer.at[jnp.where(kept, e, E), jnp.where(kept, slot, 0)].set(xx, mode="drop")
        inbox = jax.lax.all_to_all(buffer, "expert", 0, 0, tiled=True).reshape(n, k, capacity, D)
        out_dtype = jnp.result_type(x.dtype, w.dtype)

        def expert(j, out):
            return out.at[:, j].set(jnp.einsum("scd,df->scf", inbox[:, j], w[j]).astype(out_dtype))

        out = jax.lax.fori_loop(0, k, expert, jnp.zeros((n, k, capacity, F), out_dtype))
        back = jax.lax.all_to_all(out.reshape(E, capacity, F), "expert", 0, 0, tiled=True)
        padded = jnp.concatenate([back, jnp.zeros((E, 1, F), back.dtype)], axis=1)
        got = padded[e, jnp.where(kept, slot, capacity)]  # the zero slot when dropped
        gate = jnp.concatenate([g1, g2]).astype(got.dtype)[:, None]
        y = (gate * got)[:t] + (gate * got)[t:]
        f = jax.lax.psum(jnp.bincount(e1, length=E).astype(logits.dtype), "expert") / T
        p = jax.lax.pmean(jnp.mean(jax.nn.softmax(logits, axis=1), axis=0), "expert")
        return y, E * jnp.dot(f, p)

    spec = NamedSharding(mesh, P("expert"))
    x, router_logits, w = (jax.device_put(jnp.asarray(a), spec) for a in (x, router_logits, w))
    f = jax.shard_map(
        local, mesh=mesh, in_specs=P("expert"), out_specs=(P("expert"), P()), check_vma=False
    )
    return jax.jit(f)(x, router_logits, w)
