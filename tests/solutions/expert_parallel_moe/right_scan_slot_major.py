"""Jitted; buffers laid out slot-major (T/n, n, C) and exchanged along axis 1 with jax.lax.all_to_all;
each slot's expert weight gathered from the local experts inside a jax.lax.scan over the senders."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("expert", length): a 1-D mesh


def expert_parallel_moe(x: jax.Array, router_logits: jax.Array, w: jax.Array) -> jax.Array:
    for a in (x, router_logits, w):
        if isinstance(a, (list, tuple, int, float, complex)) or not hasattr(a, "dtype"):
            raise TypeError("x, router_logits and w must be arrays")
        if a.dtype == bool or not jnp.issubdtype(a.dtype, jnp.number):
            raise TypeError(f"non-numeric dtype {a.dtype}")
    if jnp.iscomplexobj(router_logits):
        raise TypeError("complex router logits")
    if x.ndim != 2 or router_logits.ndim != 2 or w.ndim != 3:
        raise ValueError("x, router_logits and w must be 2-D, 2-D and 3-D")
    T, D = x.shape
    E, Dw, F = w.shape
    if router_logits.shape != (T, E) or Dw != D:
        raise ValueError(f"shapes {x.shape}, {router_logits.shape}, {w.shape} do not fit together")
    if E < 1 or D < 1 or F < 1:
        raise ValueError("E, D and F must be at least 1")

    mesh = axis_mesh("expert", math.gcd(T, E))
    n = mesh.shape["expert"]
    k = E // n
    dtype = jnp.result_type(x.dtype, w.dtype)

    def local(x, logits, w):
        t = x.shape[0]
        expert = jnp.argmax(logits, axis=1)
        device = expert // k
        message = jnp.concatenate([x, jax.nn.one_hot(expert % k, k, dtype=x.dtype)], axis=1)
        to = (device[:, None] == jnp.arange(n)[None, :])[..., None]  # (t, n, 1)
        outbox = jnp.where(to, message[:, None, :], jnp.zeros((), x.dtype))  # (t, n, C)
        inbox = jax.lax.all_to_all(outbox, "expert", split_axis=1, concat_axis=1, tiled=True)

        def one_sender(_, slots):  # slots (t, C): what one device sent here
            tokens, chosen = slots[:, :D], slots[:, D:]
            busy = jnp.any(chosen != 0, axis=1)
            weights = w[jnp.argmax(chosen != 0, axis=1)]  # (t, D, F)
            y = jnp.einsum("td,tdf->tf", tokens, weights).astype(dtype)
            return None, jnp.where(busy[:, None], y, jnp.zeros((), dtype))

        _, results = jax.lax.scan(one_sender, None, jnp.swapaxes(inbox, 0, 1))  # (n, t, F)
        results = jnp.swapaxes(results, 0, 1)  # (t, n, F)
        back = jax.lax.all_to_all(results, "expert", split_axis=1, concat_axis=1, tiled=True)
        return jnp.sum(jnp.where(to, back, jnp.zeros((), dtype)), axis=1)

    @jax.jit
    def run(x, logits, w):
        return jax.shard_map(local, mesh=mesh, in_specs=P("expert"), out_specs=P("expert"))(x, logits, w)

    spec = NamedSharding(mesh, P("expert"))
    return run(*(jax.device_put(jnp.asarray(a), spec) for a in (x, router_logits, w)))
