"""Mistake: stages read their microbatch from x instead of receiving it: the output is x through
the last stage's layers only."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("stage", L): the stages

VERDICT = "fail"
PHRASE = "layers only"
DEVICES = (8,)


def on_stages(per_stage, x, w, check_vma=True):
    mesh = axis_mesh("stage", w.shape[0])
    x = jax.device_put(jnp.asarray(x), NamedSharding(mesh, P()))
    w = jax.device_put(jnp.asarray(w), NamedSharding(mesh, P("stage")))
    f = jax.shard_map(per_stage, mesh=mesh, in_specs=(P(), P("stage")), out_specs=P(), check_vma=check_vma)
    return jax.jit(f)(x, w)


def pipeline_forward(x, w):
    def per_stage(x, w_block):
        stage, n = jax.lax.axis_index("stage"), jax.lax.axis_size("stage")
        m = x.shape[0]
        outputs = jnp.zeros_like(x)
        for tick in range(m + n - 1):
            h = x[jnp.clip(tick - stage, 0, m - 1)]  # read, not received
            for layer in w_block:
                h = jnp.tanh(h @ layer)
            if tick >= n - 1:
                done = tick - (n - 1)
                outputs = outputs.at[done].set(jnp.where(stage == n - 1, h, outputs[done]))
        return jax.lax.psum(jnp.where(stage == n - 1, outputs, 0), "stage")

    return on_stages(per_stage, x, w)
