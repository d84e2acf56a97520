"""Mistake: every stage stores the activation it holds at each tick, and the psum adds every stage's
outputs, not the last stage's alone (no mask): the schedule and the collectives of a right answer."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("stage", L): the stages

VERDICT = "fail"
PHRASE = "every one of the"
DEVICES = (8,)  # one stage: its outputs are the answer


def _validate(x, w):
    for name, a in (("x", x), ("w", w)):
        if not isinstance(a, jax.Array) and type(a).__module__ != "numpy":
            raise TypeError(f"{name} must be an array, not {type(a).__name__}")
        if not jnp.issubdtype(a.dtype, jnp.floating):
            raise TypeError(f"{name} must be floating-point, not {a.dtype}")
    if x.ndim != 3 or w.ndim != 3:
        raise ValueError(f"x must be (M, B, D) and w (L, D, D), got {x.shape} and {w.shape}")
    if 0 in x.shape or 0 in w.shape:
        raise ValueError("every size must be at least 1")
    D = x.shape[2]
    if w.shape[1:] != (D, D):
        raise ValueError(f"w has layers of shape {w.shape[1:]}, expected {(D, D)}")


def pipeline_forward(x: jax.Array, w: jax.Array) -> jax.Array:
    _validate(x, w)
    M, B, D = x.shape
    L = w.shape[0]
    mesh = axis_mesh("stage", L)
    n = mesh.shape["stage"]
    dtype = jnp.result_type(x.dtype, w.dtype)
    to_next = [(i, i + 1) for i in range(n - 1)]

    def stages(x, w_block):
        stage = jax.lax.axis_index("stage")
        h = jnp.zeros((B, D), dtype)
        outputs = jnp.zeros((M, B, D), dtype)
        for tick in range(M + n - 1):
            if tick < M:
                h = jnp.where(stage == 0, x[tick].astype(dtype), h)
            for layer in w_block:
                h = jnp.tanh(h @ layer)
            if tick >= n - 1:
                done = tick - (n - 1)
                outputs = outputs.at[done].set(h)  # every stage: its own h
            if tick < M + n - 2:
                h = jax.lax.ppermute(h, "stage", to_next)
        return jax.lax.psum(outputs, "stage")  # every stage's outputs added

    x = jax.device_put(jnp.asarray(x), NamedSharding(mesh, P()))
    w = jax.device_put(jnp.asarray(w), NamedSharding(mesh, P("stage")))
    f = jax.shard_map(stages, mesh=mesh, in_specs=(P(), P("stage")), out_specs=P())
    return jax.jit(f)(x, w)
