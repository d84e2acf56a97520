"""Mistake: a new model, so new parameters, built for every shard inside the loop."""

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

VERDICT = "fail"
PHRASE = "build the model once, outside the loop"
DEVICES = (1, 8)


def shard_map_simulate(seed, x, num_shards, features):
    num_shards, features = int(num_shards), int(features)
    chunk = x.shape[0] // num_shards
    outs = []
    for i in range(num_shards):
        model = nnx.Linear(x.shape[-1], features, rngs=nnx.Rngs(int(seed) + i))  # wrong
        outs.append(model(jax.lax.dynamic_slice_in_dim(x, i * chunk, chunk, axis=0)))
    return jnp.concatenate(outs, axis=0).reshape(-1)
