"""Eager shard_map (no jax.jit); tick 0, then a jax.lax.scan over the M + n - 2 ticks that each start with
a ppermute; each stage's layers in an inner jax.lax.scan."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("stage", L): the stages


def pipeline_forward(x: jax.Array, w: jax.Array) -> jax.Array:
    for a in (x, w):
        if not isinstance(a, (np.ndarray, jax.Array)):
            raise TypeError(f"expected an array, got {type(a).__name__}")
        if not jnp.issubdtype(a.dtype, jnp.floating):
            raise TypeError(f"expected floating-point numbers, got {a.dtype}")
    if x.ndim != 3 or w.ndim != 3:
        raise ValueError("x must be 3-D and w 3-D")
    if x.size == 0 or w.size == 0:
        raise ValueError("empty size")
    if w.shape[1] != x.shape[2] or w.shape[2] != x.shape[2]:
        raise ValueError("w's layers must be (D, D)")

    M, B, D = x.shape
    mesh = axis_mesh("stage", w.shape[0])
    n = mesh.shape["stage"]
    dtype = jnp.result_type(x.dtype, w.dtype)

    def stages(x, w_block):
        stage = jax.lax.axis_index("stage")
        first = stage == 0

        def my_layers(h):
            h, _ = jax.lax.scan(lambda h, layer: (jnp.tanh(h @ layer), None), h, w_block)
            return h

        # What stage 0 takes in at ticks 1 .. M + n - 2 (zeros once the microbatches run out).
        feed = jnp.concatenate([x[1:].astype(dtype), jnp.zeros((n - 1, B, D), dtype)])
        h0 = my_layers(jnp.where(first, x[0].astype(dtype), jnp.zeros((B, D), dtype)))

        def tick(h, fed):
            h = jax.lax.ppermute(h, "stage", [(i, i + 1) for i in range(n - 1)])
            h = my_layers(jnp.where(first, fed, h))
            return h, h

        _, later = jax.lax.scan(tick, h0, feed)
        every_tick = jnp.concatenate([h0[None], later])  # (M + n - 1, B, D)
        outputs = every_tick[n - 1 :]  # the last stage finishes microbatch t - (n - 1) at tick t
        return jax.lax.psum(jnp.where(stage == n - 1, outputs, 0), "stage")

    x = jax.device_put(jnp.asarray(x), NamedSharding(mesh, P()))
    w = jax.device_put(jnp.asarray(w), NamedSharding(mesh, P("stage")))
    return jax.shard_map(stages, mesh=mesh, in_specs=(P(), P("stage")), out_specs=P())(x, w)
