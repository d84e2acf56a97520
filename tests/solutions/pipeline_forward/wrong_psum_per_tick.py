"""Mistake: activations handed on with a psum of the masked activation every tick (an all-reduce of
(B, D) per tick) instead of a ppermute to the next stage."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("stage", L): the stages

VERDICT = "technique"
PHRASE = "no collective-permute"
DEVICES = (8,)  # on one device the statement asks for shard_map alone


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
        h, outputs = jnp.zeros(x.shape[1:], x.dtype), jnp.zeros_like(x)
        for tick in range(m + n - 1):
            if tick < m:
                h = jnp.where(stage == 0, x[tick], h)
            for layer in w_block:
                h = jnp.tanh(h @ layer)
            if tick >= n - 1:
                done = tick - (n - 1)
                outputs = outputs.at[done].set(jnp.where(stage == n - 1, h, outputs[done]))
            if tick < m + n - 2:
                # every stage s gets stage s - 1's activation, by summing one-hot slots over all stages
                slots = jnp.zeros((n,) + h.shape, h.dtype).at[(stage + 1) % n].set(h)
                h = jax.lax.psum(slots, "stage")[stage]
        return jax.lax.psum(jnp.where(stage == n - 1, outputs, 0), "stage")

    return on_stages(per_stage, x, w)
