"""Jitted shard_map; slots counted by two jax.lax.scan over the device's tokens (first choices, then
second ones), the buffer filled by a scatter that drops the full slots, results gathered back from a
zero-padded buffer."""

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


def _top2(logits):
    E = logits.shape[1]
    e1 = jnp.argmax(logits, axis=1)
    e2 = jnp.argmax(jnp.where(jnp.arange(E) == e1[:, None], -jnp.inf, logits), axis=1)
    pair = jnp.stack([logits[jnp.arange(len(e1)), e1], logits[jnp.arange(len(e2)), e2]], axis=1)
    g = jax.nn.softmax(pair, axis=1)
    return e1, e2, g[:, 0], g[:, 1]


def moe_top2(x, router_logits, w, capacity):
    _validate(x, router_logits, w, capacity)
    T, D = x.shape
    E, _, F = w.shape
    mesh = axis_mesh("expert", math.gcd(T, E))
    n = mesh.shape["expert"]

    def local(x, logits, w):
        e1, e2, g1, g2 = _top2(logits)

        def take(used, e):  # the next free slot of expert e, if any
            return used.at[e].add(1), used[e]

        # The counts differ between devices: the carry must be varying over "expert".
        start = jax.lax.pcast(jnp.zeros(E, jnp.int32), "expert", to="varying")
        used, slot1 = jax.lax.scan(take, start, e1)
        _, slot2 = jax.lax.scan(take, used, e2)
        buffer = jnp.zeros((E, capacity, D), x.dtype)
        buffer = buffer.at[e1, slot1].set(x, mode="drop")  # a slot >= capacity is dropped
        buffer = buffer.at[e2, slot2].set(x, mode="drop")
        inbox = jax.lax.all_to_all(buffer, "expert", 0, 0, tiled=True)
        inbox = inbox.reshape(n, E // n, capacity, D)
        out = jnp.einsum("skcd,kdf->skcf", inbox, w).reshape(E, capacity, F)
        back = jax.lax.all_to_all(out, "expert", 0, 0, tiled=True)
        # One zero slot past the last: where a dropped choice reads (a gather from an
        # axis of length 0, at capacity 0, is refused even in "fill" mode).
        padded = jnp.concatenate([back, jnp.zeros((E, 1, F), back.dtype)], axis=1)
        r1 = padded[e1, jnp.minimum(slot1, capacity)]
        r2 = padded[e2, jnp.minimum(slot2, capacity)]
        y = g1[:, None].astype(back.dtype) * r1 + g2[:, None].astype(back.dtype) * r2
        probs = jax.nn.softmax(logits, axis=1)
        first = jnp.zeros(E, probs.dtype).at[e1].add(1)
        total = jax.lax.psum(jnp.stack([first, probs.sum(axis=0)]), "expert") / T
        return y, E * jnp.sum(total[0] * total[1])

    spec = NamedSharding(mesh, P("expert"))
    x, router_logits, w = (jax.device_put(jnp.asarray(a), spec) for a in (x, router_logits, w))
    f = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=P("expert"), out_specs=(P("expert"), P())))
    return f(x, router_logits, w)
