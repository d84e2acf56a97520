"""Mistake: the psum sits in one branch of a lax.cond whose predicate no input makes true; the branch that runs returns each device's own partial sum, put whole on every device beforehand."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "technique"
PHRASE = "never reaches the answer"
DEVICES = (8,)


def shard_map_psum(x: jax.Array) -> jax.Array:
    mesh = data_mesh(x.shape[0])
    blocks = jax.device_put(x, NamedSharding(mesh, P("data")))
    whole = jax.device_put(x, NamedSharding(mesh, P()))  # wrong: every device gets all of x

    def body(block, everything):
        return jax.lax.cond(
            jnp.sum(everything) > 1e30,  # never true for the checker's inputs
            lambda: jax.lax.psum(jnp.sum(block), "data"),
            lambda: jnp.sum(everything),  # wrong: the sum computed alone
        )

    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("data"), P()), out_specs=P()))(
        blocks, whole
    )
