"""Mistake: relu applied after the psum, to the output: relu(x @ w1 @ w2), a different
function, wrong on any mesh, one device included."""

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_model_mesh  # a (data, model) mesh for any shapes

VERDICT = "fail"
PHRASE = "relu was applied after the psum"
DEVICES = (1, 8)


def tensor_parallel_mlp(x: jax.Array, w1: jax.Array, w2: jax.Array) -> jax.Array:
    mesh = data_model_mesh(x.shape[0], w1.shape[1])
    specs = (P("data", None), P(None, "model"), P("model", None))
    x, w1, w2 = (jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip((x, w1, w2), specs))
    return jax.jit(
        jax.shard_map(
            lambda x, w1, w2: jax.nn.relu(jax.lax.psum(x @ w1 @ w2, "model")),  # wrong
            mesh=mesh,
            in_specs=specs,
            out_specs=P("data", None),
        )
    )(x, w1, w2)
