"""Mistake: every input cast to float32 first (a habit from float models): right numbers
for float32, but integer inputs come back float32 instead of their own dtype."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_model_mesh  # a (data, model) mesh for any shapes

VERDICT = "fail"
PHRASE = "dtype"
DEVICES = (1, 8)


def tensor_parallel_mlp(x: jax.Array, w1: jax.Array, w2: jax.Array) -> jax.Array:
    x, w1, w2 = (jnp.asarray(a, jnp.float32) for a in (x, w1, w2))  # wrong for integers
    mesh = data_model_mesh(x.shape[0], w1.shape[1])
    specs = (P("data", None), P(None, "model"), P("model", None))
    x, w1, w2 = (jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip((x, w1, w2), specs))
    return jax.jit(
        jax.shard_map(
            lambda x, w1, w2: jax.lax.psum(jax.nn.relu(x @ w1) @ w2, "model"),
            mesh=mesh,
            in_specs=specs,
            out_specs=P("data", None),
        )
    )(x, w1, w2)
