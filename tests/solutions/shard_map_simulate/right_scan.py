"""Scan style: jax.lax.scan over the shard index, each step a dynamic_slice_in_dim block through the same model (nnx.split/merge); blocks stacked in order."""

import numbers

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def _whole(value, name, minimum=None):
    if isinstance(value, jax.core.Tracer):
        raise TypeError(f"{name} must be a concrete number, but here it is traced by a JAX transformation")
    if isinstance(value, (np.ndarray, np.generic, jax.Array)):
        if np.ndim(value) != 0:
            raise TypeError(f"{name} must be a number, not an array of shape {np.shape(value)}")
        value = np.asarray(value).item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    if not float(value).is_integer():
        raise ValueError(f"{name} must be a whole number, not {value}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, not {value}")
    return value


def shard_map_simulate(seed: float, x: jax.Array, num_shards: float, features: float) -> jax.Array:
    """Simulate a data-parallel nnx.Linear forward pass over num_shards shards."""
    seed = _whole(seed, "seed")
    num_shards = _whole(num_shards, "num_shards", 1)
    features = _whole(features, "features", 1)
    if not isinstance(x, (np.ndarray, jax.Array)):
        raise TypeError(f"x must be an array of numbers, not {type(x).__name__}")
    if x.dtype == jnp.bool_ or not jnp.issubdtype(x.dtype, jnp.number):
        raise TypeError(f"x must hold numbers, not {x.dtype}")
    if x.ndim != 2:
        raise ValueError(f"x must be 2-D, but has shape {x.shape}")
    if x.shape[1] < 1:
        raise ValueError("x has no feature column")
    if x.shape[0] % num_shards:
        raise ValueError(f"num_shards={num_shards} does not divide the batch of {x.shape[0]}")
    x = jnp.asarray(x)
    graphdef, state = nnx.split(nnx.Linear(x.shape[-1], features, rngs=nnx.Rngs(seed)))
    chunk = x.shape[0] // num_shards

    def step(carry, i):
        x_shard = jax.lax.dynamic_slice_in_dim(x, i * chunk, chunk, axis=0)
        return carry, nnx.merge(graphdef, state)(x_shard)

    _, blocks = jax.lax.scan(step, None, jnp.arange(num_shards))  # (num_shards, chunk, features)
    return blocks.reshape(-1)  # the blocks in order along axis 0, flattened
