"""Eager shard_map (no jax.jit); untiled jax.lax.all_to_all (tiled=False, one buffer per device along
axis 0), each slot's expert chosen by a one-hot contraction."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("expert", length): a 1-D mesh


def expert_parallel_moe(x: jax.Array, router_logits: jax.Array, w: jax.Array) -> jax.Array:
    for name, a in (("x", x), ("router_logits", router_logits), ("w", w)):
        if not isinstance(a, (np.ndarray, jax.Array)):
            raise TypeError(f"{name} must be an array")
        if not jnp.issubdtype(a.dtype, jnp.number):
            raise TypeError(f"{name} must be numeric, not {a.dtype}")
    if jnp.issubdtype(router_logits.dtype, jnp.complexfloating):
        raise TypeError("router logits must be real numbers, not complex")
    if x.ndim != 2 or router_logits.ndim != 2 or w.ndim != 3:
        raise ValueError("x must be (T, D), router_logits (T, E), w (E, D, F)")
    (T, D), (E, Dw, F) = x.shape, w.shape
    if router_logits.shape != (T, E) or Dw != D:
        raise ValueError("shapes do not fit together")
    if E == 0 or D == 0 or F == 0:
        raise ValueError("no experts, no features or no outputs")

    mesh = axis_mesh("expert", math.gcd(T, E))
    n = mesh.shape["expert"]
    k = E // n
    out_dtype = jnp.result_type(x.dtype, w.dtype)

    def local(x, logits, w):
        t = x.shape[0]
        expert = jnp.argmax(logits, axis=1)
        device = expert // k
        onehot = jax.nn.one_hot(expert % k, k, dtype=x.dtype)
        message = jnp.concatenate([x, onehot], axis=1)
        going = jax.nn.one_hot(device, n, dtype=x.dtype)  # (t, n)
        outbox = jnp.einsum("tj,tc->jtc", going, message)  # (n, t, C): zeros where not going
        inbox = jax.lax.all_to_all(outbox, "expert", 0, 0, tiled=False)
        tokens, chosen = inbox[..., :D], inbox[..., D:]
        per_expert = jnp.einsum("std,edf->stef", tokens, w).astype(out_dtype)
        results = jnp.einsum("stef,ste->stf", per_expert, chosen.astype(out_dtype))
        back = jax.lax.all_to_all(results, "expert", 0, 0, tiled=False)  # (n, t, F)
        return jnp.einsum("jtf,tj->tf", back, jax.nn.one_hot(device, n, dtype=out_dtype))

    put = lambda a: jax.device_put(jnp.asarray(a), NamedSharding(mesh, P("expert")))
    return jax.shard_map(local, mesh=mesh, in_specs=P("expert"), out_specs=P("expert"))(
        put(x), put(router_logits), put(w)
    )
