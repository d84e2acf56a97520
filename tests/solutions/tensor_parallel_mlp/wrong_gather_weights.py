"""Mistake: w1 and w2 all-gathered whole over "model" and the whole MLP computed on every
device: right values, but the weights are gathered where one psum was asked."""

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_model_mesh  # a (data, model) mesh for any shapes

VERDICT = "technique"
PHRASE = "no all-reduce"
DEVICES = (8,)  # on one device the statement asks for shard_map alone


def tensor_parallel_mlp(x: jax.Array, w1: jax.Array, w2: jax.Array) -> jax.Array:
    mesh = data_model_mesh(x.shape[0], w1.shape[1])
    specs = (P("data", None), P(None, "model"), P("model", None))
    x, w1, w2 = (jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip((x, w1, w2), specs))

    def local(x, w1, w2):
        w1 = jax.lax.all_gather(w1, "model", axis=1, tiled=True, to="invarying")  # wrong
        w2 = jax.lax.all_gather(w2, "model", axis=0, tiled=True, to="invarying")
        return jax.nn.relu(x @ w1) @ w2

    return jax.jit(
        jax.shard_map(local, mesh=mesh, in_specs=specs, out_specs=P("data", None))
    )(x, w1, w2)
