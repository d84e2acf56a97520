"""Shortcut: jax.value_and_grad of the whole network under jax.jit on a copy of w on every
device, plus a shard_map ppermute of w's blocks whose result is multiplied by 0: the
collective is there, but what it computes never reaches the answer."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh

VERDICT = "technique"
PHRASE = "never reaches the answer"
DEVICES = (8,)  # on one device a ppermute is none


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
    n = mesh.shape["stage"]

    def loss(w):
        h = x
        for layer in range(w.shape[0]):
            h = jnp.tanh(h @ w[layer])
        return jnp.mean((h - y) ** 2)

    hop = jax.shard_map(
        lambda b: jax.lax.ppermute(b, "stage", [(i, (i + 1) % n) for i in range(n)]),
        mesh=mesh,
        in_specs=P("stage"),
        out_specs=P("stage"),
    )

    @jax.jit
    def step(w_all, w):
        value, grad = jax.value_and_grad(loss)(w_all)
        return value, grad + 0 * hop(w)

    return step(jax.device_put(w, NamedSharding(mesh, P())), w)
