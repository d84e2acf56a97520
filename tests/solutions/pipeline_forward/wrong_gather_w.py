"""Mistake: every device all_gathers w and runs the whole network itself: right values, no pipeline."""

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
        h = x
        for layer in jax.lax.all_gather(w_block, "stage", tiled=True):
            h = jnp.tanh(h @ layer)
        return h

    return on_stages(per_stage, x, w, check_vma=False)
