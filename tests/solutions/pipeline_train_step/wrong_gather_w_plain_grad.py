"""Shortcut: inside a jitted shard_map, every stage all-gathers w (all L layers) and runs
plain jax.value_and_grad of the whole network on every microbatch, then keeps its own
block of the gradient: right values, but the layers left their stages (an all-gather of
w), and no pipeline."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh

VERDICT = "technique"
PHRASE = "runs 1 all-gather"
DEVICES = (8,)  # on one device there is nothing to gather


def pipeline_train_step(x, y, w):
    if not all(isinstance(a, jax.Array) for a in (x, y, w)):
        raise TypeError("x, y and w must be arrays")
    for name, a in (("x", x), ("y", y), ("w", w)):
        if not jnp.issubdtype(a.dtype, jnp.floating):
            raise TypeError(f"{name} must be floating-point")
    if x.ndim != 3 or w.ndim != 3 or y.shape != x.shape or 0 in x.shape or 0 in w.shape:
        raise ValueError("x, y must be (M, B, D) and w (L, D, D), none empty")
    if w.shape[1:] != (x.shape[2],) * 2:
        raise ValueError("w's layers must be (D, D)")
    mesh = axis_mesh("stage", w.shape[0])
    dtype = jnp.result_type(x.dtype, y.dtype, w.dtype)

    def body(x, y, w_block):
        every = jax.lax.all_gather(w_block, "stage", axis=0, tiled=True)
        k = w_block.shape[0]

        def loss(w_all):
            h = x
            for layer in range(w_all.shape[0]):
                h = jnp.tanh(h @ w_all[layer])
            return jnp.mean((h - y) ** 2)

        value, grad = jax.value_and_grad(loss)(every)
        mine = jax.lax.dynamic_slice_in_dim(grad, jax.lax.axis_index("stage") * k, k)
        return value, mine

    f = jax.shard_map(
        body,
        mesh=mesh,
        in_specs=(P(), P(), P("stage")),
        out_specs=(P(), P("stage")),
        check_vma=False,
    )
    x, y = (jax.device_put(a.astype(dtype), NamedSharding(mesh, P())) for a in (x, y))
    return jax.jit(f)(x, y, jax.device_put(w.astype(dtype), NamedSharding(mesh, P("stage"))))
