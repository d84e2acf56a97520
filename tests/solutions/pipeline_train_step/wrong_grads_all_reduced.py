"""Mistake: a GPipe-like pipeline where each stage writes its layers' gradient into a
zero (L, D, D) array and the stages psum it, each then slicing its own block: right
values, but every stage's gradient left it (an all-reduce the size of w)."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh

VERDICT = "technique"
PHRASE = "gradients never leave it"
DEVICES = (8,)  # on one device there is nothing to add


def _layers(h, w_block):
    for layer in w_block:
        h = jnp.tanh(h @ layer)
    return h


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
    M, B, D = x.shape
    L = w.shape[0]
    mesh = axis_mesh("stage", L)
    n = mesh.shape["stage"]
    dtype = jnp.result_type(x.dtype, y.dtype, w.dtype)
    to_next = [(i, i + 1) for i in range(n - 1)]
    to_prev = [(i + 1, i) for i in range(n - 1)]

    def body(x, y, w_block):
        s = jax.lax.axis_index("stage")
        k = w_block.shape[0]
        h = jnp.zeros((B, D), dtype)
        inputs = []
        for t in range(M + n - 1):  # every forward
            h = jnp.where(s == 0, x[min(t, M - 1)], h)
            inputs.append(h)
            h = jax.lax.ppermute(_layers(h, w_block), "stage", to_next)
        g = jnp.zeros((B, D), dtype)
        grad = jnp.zeros_like(w_block)
        loss = jnp.zeros((), dtype)
        for t in range(M + n - 1):  # every backward
            m = t - (n - 1) + s  # the microbatch at stage s: reached by index arithmetic below
            active = (m >= 0) & (m < M)
            mm = jnp.clip(m, 0, M - 1)
            h_in = jnp.stack(inputs)[jnp.clip(mm + s, 0, M + n - 2)]
            out, pull = jax.vjp(_layers, h_in, w_block)
            err = out - y[mm]
            dh, dw = pull(jnp.where(s == n - 1, 2 * err / x.size, g))
            grad = grad + jnp.where(active, dw, 0)
            loss = loss + jnp.where(active & (s == n - 1), jnp.sum(err**2) / x.size, 0)
            g = jax.lax.ppermute(dh, "stage", to_prev)
        whole = jax.lax.dynamic_update_slice_in_dim(jnp.zeros((L, D, D), dtype), grad, s * k, 0)
        whole = jax.lax.psum(whole, "stage")  # the mistake: every stage's gradient sent
        return jax.lax.psum(loss, "stage"), jax.lax.dynamic_slice_in_dim(whole, s * k, k)

    f = jax.shard_map(
        body,
        mesh=mesh,
        in_specs=(P(), P(), P("stage")),
        out_specs=(P(), P("stage")),
        check_vma=False,
    )
    x, y = (jax.device_put(a.astype(dtype), NamedSharding(mesh, P())) for a in (x, y))
    return jax.jit(f)(x, y, jax.device_put(w.astype(dtype), NamedSharding(mesh, P("stage"))))
