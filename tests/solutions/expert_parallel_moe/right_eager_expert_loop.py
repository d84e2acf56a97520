"""Eager shard_map (no jax.jit); a Python loop over the device's experts, each masked to its own slots;
the results picked out of the return buffers with a one-hot sum."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("expert", length): a 1-D mesh


def expert_parallel_moe(x: jax.Array, router_logits: jax.Array, w: jax.Array) -> jax.Array:
    arrays = {"x": x, "router_logits": router_logits, "w": w}
    for name, a in arrays.items():
        if not isinstance(a, (np.ndarray, jax.Array)):
            raise TypeError(f"{name} is not an array")
        if a.dtype == np.bool_ or not jnp.issubdtype(a.dtype, jnp.number):  # bfloat16 too
            raise TypeError(f"{name} has the non-numeric dtype {a.dtype}")
    if np.issubdtype(np.dtype(router_logits.dtype), np.complexfloating):
        raise TypeError("router logits must be real numbers")
    if (x.ndim, router_logits.ndim, w.ndim) != (2, 2, 3):
        raise ValueError("expected x (T, D), router_logits (T, E), w (E, D, F)")
    T, D = x.shape
    E, _, F = w.shape
    if router_logits.shape[0] != T or router_logits.shape[1] != E or w.shape[1] != D:
        raise ValueError("shapes do not fit together")
    if min(D, E, F) < 1:
        raise ValueError("D, E and F must be at least 1")

    mesh = axis_mesh("expert", math.gcd(T, E))
    n = mesh.shape["expert"]
    k = E // n

    def local(x, logits, w):
        t = x.shape[0]
        expert = jnp.argmax(logits, axis=-1)
        home = expert // k
        onehot = (jnp.arange(k)[None, :] == (expert % k)[:, None]).astype(x.dtype)
        message = jnp.concatenate([x, onehot], axis=-1)
        outbox = jnp.stack([jnp.where((home == j)[:, None], message, 0) for j in range(n)])
        inbox = jax.lax.all_to_all(outbox, "expert", split_axis=0, concat_axis=0, tiled=True)
        tokens = inbox[:, :, :D]
        results = None
        for e in range(k):  # this device's experts, one at a time
            mine = inbox[:, :, D + e] != 0
            part = jnp.where(mine[..., None], tokens @ w[e], 0)
            results = part if results is None else results + part
        back = jax.lax.all_to_all(results, "expert", split_axis=0, concat_axis=0, tiled=True)
        pick = (jnp.arange(n)[:, None] == home[None, :])[..., None]  # (n, t, 1)
        return jnp.sum(jnp.where(pick, back, 0), axis=0)  # (t, F)

    put = lambda a: jax.device_put(jnp.asarray(a), NamedSharding(mesh, P("expert")))
    return jax.shard_map(local, mesh=mesh, in_specs=P("expert"), out_specs=P("expert"))(
        put(x), put(router_logits), put(w)
    )
