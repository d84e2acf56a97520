"""Mistake: every stage's layers passed round a ring of ppermutes (w gathered whole by the hops
the statement asks for, but of the weights), then value_and_grad of the whole network on every
device, one microbatch at a time: no pipeline, and a stage's layers leave it."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh

VERDICT = "technique"
PHRASE = "w (each stage's layers) travels"
DEVICES = (8,)  # on one stage there is no ring


def _validate(x, y, w):
    for name, a in (("x", x), ("y", y), ("w", w)):
        if not isinstance(a, jax.Array) and type(a).__module__ != "numpy":
            raise TypeError(f"{name} must be an array, not {type(a).__name__}")
        if not jnp.issubdtype(a.dtype, jnp.floating):
            raise TypeError(f"{name} must be floating-point, not {a.dtype}")
    if x.ndim != 3 or y.ndim != 3 or w.ndim != 3:
        raise ValueError("x and y must be (M, B, D) and w (L, D, D)")
    if 0 in x.shape or 0 in w.shape or y.shape != x.shape:
        raise ValueError(f"sizes do not fit: x {x.shape}, y {y.shape}, w {w.shape}")
    if w.shape[1:] != (x.shape[2], x.shape[2]):
        raise ValueError(f"w has layers of shape {w.shape[1:]}, x has {x.shape[2]} features")


def _layers(h, w):
    for l in range(w.shape[0]):
        h = jnp.tanh(h @ w[l])
    return h


def pipeline_train_step(x, y, w):
    _validate(x, y, w)
    M, B, D = x.shape
    L = w.shape[0]
    mesh = axis_mesh("stage", L)
    n = mesh.shape["stage"]
    k = L // n
    dtype = jnp.result_type(x.dtype, y.dtype, w.dtype)

    def stage_fn(x, y, w_block):
        s = jax.lax.axis_index("stage")
        # every stage's layers, passed round a ring of ppermutes: n - 1 hops
        blocks = [w_block]
        cur = w_block
        for _ in range(n - 1):
            cur = jax.lax.ppermute(cur, "stage", [(i, (i + 1) % n) for i in range(n)])
            blocks.append(cur)
        # blocks[j] came from stage (s - j) mod n
        stacked = jnp.stack(blocks)  # (n, k, D, D)
        order = (s - jnp.arange(n)) % n
        W = jnp.zeros_like(stacked).at[order].set(stacked).reshape(L, D, D)  # every layer

        def one(carry, xy):
            xm, ym = xy
            loss_m, g = jax.value_and_grad(lambda W: jnp.sum((_layers(xm, W) - ym) ** 2))(W)
            return (carry[0] + loss_m, carry[1] + g), None

        (sq, g), _ = jax.lax.scan(one, (jnp.zeros((), dtype), jnp.zeros_like(W)), (x, y))
        size = x.size
        loss, grad = sq / size, g / size
        return loss, jax.lax.dynamic_slice_in_dim(grad, s * k, k, 0)

    x, y = (jax.device_put(a.astype(dtype), NamedSharding(mesh, P())) for a in (x, y))
    w = jax.device_put(w.astype(dtype), NamedSharding(mesh, P("stage")))
    f = jax.shard_map(
        stage_fn,
        mesh=mesh,
        in_specs=(P(), P(), P("stage")),
        out_specs=(P(), P("stage")),
        check_vma=False,
    )
    return jax.jit(f)(x, y, w)
