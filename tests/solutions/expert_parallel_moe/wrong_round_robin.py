"""Mistake: experts looked for as if dealt round-robin (expert e on device e % n, its local
expert e // n), where w split over "expert" gives device d the consecutive experts d * E / n
onwards. Everything else as a right answer: two tiled all_to_all, one einsum."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("expert", length): a 1-D mesh

VERDICT = "fail"
PHRASE = "round-robin"
DEVICES = (8,)  # on one device every expert is local: round-robin is the right owner


def _validate(x, router_logits, w):
    for name, a in (("x", x), ("router_logits", router_logits), ("w", w)):
        if not isinstance(a, jax.Array) and type(a).__module__ != "numpy":
            raise TypeError(f"{name} must be an array, not {type(a).__name__}")
        if not hasattr(a, "dtype") or not jnp.issubdtype(a.dtype, jnp.number):
            raise TypeError(f"{name} must have a numeric dtype, not {getattr(a, 'dtype', None)}")
    if jnp.issubdtype(router_logits.dtype, jnp.complexfloating):
        raise TypeError("router_logits must be real")
    if x.ndim != 2 or router_logits.ndim != 2 or w.ndim != 3:
        raise ValueError("x must be 2-D, router_logits 2-D and w 3-D")
    T, D = x.shape
    E, Dw, F = w.shape
    if router_logits.shape != (T, E):
        raise ValueError(f"router_logits has shape {router_logits.shape}, expected {(T, E)}")
    if Dw != D:
        raise ValueError(f"w maps {Dw} features, x has {D}")
    if E == 0 or D == 0 or F == 0:
        raise ValueError("no experts, no features or no outputs")


def expert_parallel_moe(x: jax.Array, router_logits: jax.Array, w: jax.Array) -> jax.Array:
    _validate(x, router_logits, w)
    T, D = x.shape
    E, _, F = w.shape
    mesh = axis_mesh("expert", math.gcd(T, E))
    n = mesh.shape["expert"]
    per_device = E // n  # experts per device
    out_dtype = jnp.result_type(x.dtype, w.dtype)

    def local(x, logits, w):  # x (T/n, D), logits (T/n, E), w (E/n, D, F)
        expert = jnp.argmax(logits, axis=1)  # first on ties
        device = expert % n  # dealt round-robin: expert e on device e % n
        choice = jax.nn.one_hot(expert // n, per_device, dtype=x.dtype)
        message = jnp.concatenate([x, choice], axis=1)  # (T/n, D + E/n)
        to_device = device[None, :] == jnp.arange(n)[:, None]  # (n, T/n)
        outbox = jnp.where(to_device[:, :, None], message[None], jnp.zeros((), x.dtype))
        inbox = jax.lax.all_to_all(outbox, "expert", 0, 0, tiled=True)  # inbox[s]: from device s
        tokens, chosen = inbox[..., :D], inbox[..., D:]
        every = jnp.einsum("std,edf->stef", tokens, w).astype(out_dtype)
        results = jnp.sum(jnp.where(chosen[..., None] != 0, every, jnp.zeros((), out_dtype)), axis=2)
        back = jax.lax.all_to_all(results, "expert", 0, 0, tiled=True)  # back[j]: from device j
        return back[device, jnp.arange(x.shape[0])]

    spec = NamedSharding(mesh, P("expert"))
    x, router_logits, w = (jax.device_put(jnp.asarray(a), spec) for a in (x, router_logits, w))
    f = jax.shard_map(local, mesh=mesh, in_specs=P("expert"), out_specs=P("expert"))
    return jax.jit(f)(x, router_logits, w)
