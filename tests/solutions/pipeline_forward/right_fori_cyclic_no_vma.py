"""Jitted shard_map with check_vma=False; a rolled jax.lax.fori_loop over the ticks after the first, each
starting with a ppermute round the whole ring (i -> (i + 1) % n: stage 0 drops what the last stage sends)."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("stage", L): the stages


def pipeline_forward(x: jax.Array, w: jax.Array) -> jax.Array:
    import numpy as np

    if not isinstance(x, (np.ndarray, jax.Array)) or not isinstance(w, (np.ndarray, jax.Array)):
        raise TypeError("x and w must be arrays")
    if not (jnp.issubdtype(x.dtype, jnp.floating) and jnp.issubdtype(w.dtype, jnp.floating)):
        raise TypeError(f"x and w must be floating-point, got {x.dtype} and {w.dtype}")
    if x.ndim != 3 or w.ndim != 3:
        raise ValueError("wrong rank")
    if min(x.shape) < 1 or min(w.shape) < 1:
        raise ValueError("an empty size")
    if tuple(w.shape[1:]) != (x.shape[2], x.shape[2]):
        raise ValueError("shapes do not fit together")

    M, B, D = x.shape
    mesh = axis_mesh("stage", w.shape[0])
    n = mesh.shape["stage"]
    dtype = jnp.result_type(x.dtype, w.dtype)
    ring = [(i, (i + 1) % n) for i in range(n)]

    def stages(x, w_block):
        stage = jax.lax.axis_index("stage")
        x = x.astype(dtype)

        def run(h):
            return jax.lax.fori_loop(0, w_block.shape[0], lambda l, h: jnp.tanh(h @ w_block[l]), h)

        def record(outputs, tick, h):
            done = jnp.maximum(tick - (n - 1), 0)
            keep = (stage == n - 1) & (tick >= n - 1)
            row = jnp.where(keep, h, jax.lax.dynamic_index_in_dim(outputs, done, keepdims=False))
            return jax.lax.dynamic_update_index_in_dim(outputs, row, done, 0)

        h = run(jnp.where(stage == 0, x[0], jnp.zeros((B, D), dtype)))
        outputs = record(jnp.zeros((M, B, D), dtype), 0, h)

        def tick(t, carry):
            h, outputs = carry
            h = jax.lax.ppermute(h, "stage", ring)
            fed = jax.lax.dynamic_index_in_dim(x, jnp.minimum(t, M - 1), keepdims=False)
            h = jnp.where((stage == 0) & (t < M), fed, jnp.where(stage == 0, jnp.zeros_like(h), h))
            h = run(h)
            return h, record(outputs, t, h)

        _, outputs = jax.lax.fori_loop(1, M + n - 1, tick, (h, outputs))
        return jax.lax.psum(jnp.where(stage == n - 1, outputs, jnp.zeros((), dtype)), "stage")

    x = jax.device_put(x, NamedSharding(mesh, P()))
    w = jax.device_put(w, NamedSharding(mesh, P("stage")))
    f = jax.shard_map(stages, mesh=mesh, in_specs=(P(), P("stage")), out_specs=P(), check_vma=False)
    return jax.jit(f)(x, w)
