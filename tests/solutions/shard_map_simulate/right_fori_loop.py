"""fori_loop style: jax.lax.fori_loop writes each shard's output into its rows of a buffer (dynamic_update_slice); ints and 0-d arrays accepted."""

import operator

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def _whole(value, name, minimum=None):
    if isinstance(value, jax.core.Tracer):
        raise TypeError(f"{name} must be a concrete number, but here it is traced by a JAX transformation")
    if isinstance(value, (bool, np.bool_, str, bytes)) or value is None:
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    try:
        as_float = float(value)  # Python numbers, NumPy scalars, 0-d arrays
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}") from None
    if not as_float.is_integer():
        raise ValueError(f"{name} must be a whole number, not {value}")
    if minimum is not None and as_float < minimum:
        raise ValueError(f"{name} must be at least {minimum}, not {value}")
    return int(as_float)


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
    if operator.mod(x.shape[0], num_shards):
        raise ValueError(f"num_shards={num_shards} does not divide the batch of {x.shape[0]}")
    x = jnp.asarray(x)
    model = nnx.Linear(x.shape[-1], features, rngs=nnx.Rngs(seed))
    graphdef, state = nnx.split(model)
    chunk = x.shape[0] // num_shards
    out_dtype = jax.eval_shape(lambda s, a: nnx.merge(graphdef, s)(a), state, x[:chunk]).dtype
    buffer = jnp.zeros((x.shape[0], features), out_dtype)

    def step(i, buffer):
        x_shard = jax.lax.dynamic_slice_in_dim(x, i * chunk, chunk, axis=0)
        y_shard = nnx.merge(graphdef, state)(x_shard)
        return jax.lax.dynamic_update_slice_in_dim(buffer, y_shard, i * chunk, axis=0)

    return jax.lax.fori_loop(0, num_shards, step, buffer).reshape(-1)
