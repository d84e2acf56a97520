"""Mistake: the ring goes round twice, 2 (n - 1) hops, in a while_loop whose trip count depends on the
values, so XLA cannot know it: the program's text shows one collective-permute, which runs 2 (n - 1)
times."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("model", length): a 1-D mesh

VERDICT = "budget"
PHRASE = "whose number of iterations XLA cannot know"
DEVICES = (8,)  # on one device the ring has no hop


def _validate(x, w):
    for name, a in (("x", x), ("w", w)):
        if not isinstance(a, jax.Array) and type(a).__module__ != "numpy":
            raise TypeError(f"{name} must be an array, not {type(a).__name__}")
        if not hasattr(a, "dtype") or not jnp.issubdtype(a.dtype, jnp.number):
            raise TypeError(f"{name} must be numeric, not {getattr(a, 'dtype', None)}")
    if x.ndim != 2 or w.ndim != 2:
        raise ValueError(f"x and w must be 2-D, got shapes {x.shape} and {w.shape}")
    if 0 in x.shape or 0 in w.shape:
        raise ValueError(f"empty dimension in {x.shape} or {w.shape}")
    if w.shape[0] != x.shape[1]:
        raise ValueError(f"w has {w.shape[0]} rows, x has {x.shape[1]} columns")


def collective_matmul_all_gather(x: jax.Array, w: jax.Array) -> jax.Array:
    _validate(x, w)
    S, F = x.shape[0], w.shape[1]
    mesh = axis_mesh("model", math.gcd(S, F))
    n = mesh.shape["model"]
    to_previous = [(i, (i - 1) % n) for i in range(n)]

    def local(x_block, w_cols):
        me = jax.lax.axis_index("model")
        rows = x_block.shape[0]

        def place(out, block, held):
            return jax.lax.dynamic_update_slice_in_dim(out, block @ w_cols, held * rows, axis=0)

        def step(carry):
            i, out, block = carry
            block = jax.lax.ppermute(block, "model", perm=to_previous)
            return i + 1, place(out, block, (me + i) % n), block

        product = x_block @ w_cols
        out = jnp.zeros((n * rows, w_cols.shape[1]), product.dtype)
        out = place(out, x_block, me)
        # wrong: twice round the ring (each block placed again where it was), and a bound
        # that reads the values (x * 0 is 0 for every finite x), so XLA cannot count it
        stop = 2 * n - 1 + jnp.sum(x_block * 0).astype(jnp.int32)
        _, out, _ = jax.lax.while_loop(lambda c: c[0] < stop, step, (1, out, x_block))
        return out

    x = jax.device_put(jnp.asarray(x), NamedSharding(mesh, P("model", None)))
    w = jax.device_put(jnp.asarray(w), NamedSharding(mesh, P(None, "model")))
    f = jax.shard_map(
        local, mesh=mesh, in_specs=(P("model", None), P(None, "model")), out_specs=P(None, "model")
    )
    return jax.jit(f)(x, w)
