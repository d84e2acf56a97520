"""Mistake: the last stage hands each finished output on round the ring to stage 0, which collects them:
right values, but M + n - 1 activations sent per device where the schedule needs M + n - 2."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("stage", L): the stages

VERDICT = "budget"
PHRASE = "bytes"
DEVICES = (8,)


def pipeline_forward(x, w):
    mesh = axis_mesh("stage", w.shape[0])
    n = mesh.shape["stage"]
    M, B, D = x.shape
    dtype = jnp.result_type(x.dtype, w.dtype)
    ring = [(i, (i + 1) % n) for i in range(n)]

    def stages(x, w_block):
        stage = jax.lax.axis_index("stage")
        h = jnp.where(stage == 0, x[0].astype(dtype), jnp.zeros((B, D), dtype))
        outputs = jnp.zeros((M, B, D), dtype)
        for tick in range(M + n - 1):
            for layer in w_block:
                h = jnp.tanh(h @ layer)
            h = jax.lax.ppermute(h, "stage", ring)  # every tick, the last one too
            if tick >= n - 1:  # stage 0 just received the last stage's microbatch tick - (n - 1)
                done = tick - (n - 1)
                outputs = outputs.at[done].set(jnp.where(stage == 0, h, outputs[done]))
            if tick + 1 < M:
                h = jnp.where(stage == 0, x[tick + 1].astype(dtype), h)
        return jax.lax.psum(jnp.where(stage == 0, outputs, 0), "stage")

    x = jax.device_put(jnp.asarray(x), NamedSharding(mesh, P()))
    w = jax.device_put(jnp.asarray(w), NamedSharding(mesh, P("stage")))
    return jax.jit(jax.shard_map(stages, mesh=mesh, in_specs=(P(), P("stage")), out_specs=P()))(x, w)
