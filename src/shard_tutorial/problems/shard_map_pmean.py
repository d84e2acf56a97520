"""Problem "shard_map with pmean": centre an array on its global mean.

Inside :func:`jax.shard_map` each device sees only its block, so ``jnp.mean``
gives that block's mean. :func:`jax.lax.pmean` averages a value over every
device along a mesh axis and hands the result back to each of them (an
all-reduce, like ``psum`` followed by a division by the device count). Because
the blocks have equal lengths, the mean of the block means is the mean of the
whole array: every device can then subtract the *global* mean from its own
block, and the output stays split like the input, ``out_specs=P("data")``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial.meshes import data_mesh_for, device_counts, place
from shard_tutorial.problem import Case, Forbidden, Placement, Problem, Technique, precise
from shard_tutorial.problems._blocks import blockwise
from shard_tutorial.validation import check_array

__all__ = ["PROBLEM", "shard_map_pmean"]


def shard_map_pmean(x: jax.Array) -> jax.Array:
    """Centre a 1-D array on its mean: ``pmean`` turns each block's mean into the global mean.

    This problem practises ``jax.shard_map`` with ``jax.lax.pmean``: each device
    averages its own block, and one all-reduce averages the devices' means. The
    mesh is ``data_mesh(len(x))``.

    How the arguments arrive: each array as a ``jax.Array`` on the default device,
    not split.

    Args:
      x: 1-D array of floating-point numbers, length n >= 1.

    Returns:
      ``x - mean(x)``, of the same shape and dtype, split over the devices like
      ``x`` (``P("data")``).

    Raises:
      TypeError: if ``x`` is not an array of floating-point numbers.
      ValueError: if ``x`` is not 1-D, or is empty (an empty array has no mean).

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial import shard_map_pmean
      >>> shard_map_pmean(jnp.array([1.0, 2.0, 3.0, 6.0]))
      Array([-2., -1.,  0.,  3.], dtype=float32)

      On 8 devices, each holds its block of the centred array:

      >>> y = shard_map_pmean(jnp.arange(16.0))
      >>> tuple(y.sharding.spec), len(y.sharding.device_set), float(y.sum())
      (('data',), 8, 0.0)
    """
    _check_input(x)
    mesh = data_mesh_for(x)  # Auto axes when traced (jit, grad, vmap): see its docstring
    x = place(x, NamedSharding(mesh, P("data")))  # jax.device_put, fast on CPU devices
    return _centre_on_global_mean(mesh)(x)


def _check_input(x: jax.Array) -> None:
    """Raise unless ``x`` is a non-empty 1-D floating-point array."""
    check_array(x, "x", ndim=1, layout="of shape (n,)")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        msg = f"x must hold floating-point numbers, got dtype {x.dtype}; use x.astype(jnp.float32)"
        raise TypeError(msg)
    if x.shape[0] == 0:
        msg = "x must have at least one element: an empty array has no mean"
        raise ValueError(msg)


def _subtract_global_mean(block: jax.Array) -> jax.Array:
    block_mean = jnp.mean(block)  # this device's block only
    global_mean = jax.lax.pmean(block_mean, axis_name="data")  # the mean of the block means
    return block - global_mean


@functools.cache
def _centre_on_global_mean(mesh: Mesh) -> Callable[[jax.Array], jax.Array]:
    """Build, once per mesh, the compiled function that centres ``x`` on its mean."""
    return jax.jit(
        jax.shard_map(
            _subtract_global_mean,
            mesh=mesh,
            in_specs=P("data"),  # each device gets one block of x
            out_specs=P("data"),  # each device returns its block of x - mean(x)
        )
    )


def _unsharded(x: jax.Array) -> jax.Array:
    return x - jnp.mean(x)


def _oracle(x: np.ndarray) -> np.ndarray:
    wide = precise(x)
    return (wide - wide.mean()).astype(x.dtype)


def _explain(case: Case, _expected: np.ndarray, received: np.ndarray) -> str | None:
    x = precise(case.args[0])
    if received.shape != x.shape:
        return None
    for devices in device_counts(x.shape[0]):
        own_means = blockwise(x, devices, lambda block: block - block.mean())
        if np.allclose(received, own_means, rtol=1e-4, atol=1e-4):
            return (
                f"Each of {devices} blocks was centred on its own mean: every device "
                "subtracted the mean of its block, not of the whole array. Average the "
                'block means over the devices with jax.lax.pmean(..., "data") first'
            )
    if np.allclose(received, x, rtol=1e-4, atol=1e-4):
        return "The values are x itself: nothing was subtracted"
    return None


def _generate(rng: np.random.Generator) -> Case:
    """One random case: a length from 1 to 100, float32 values around a random offset."""
    n = int(rng.integers(1, 101))
    x = rng.normal(loc=rng.uniform(-50, 50), size=n).astype(np.float32)
    return Case(f"random, length {n}", (x,))


def _cases() -> list[Case]:
    rng = np.random.default_rng(20260201)
    return [
        Case("example from the problem statement", (np.array([1.0, 2.0, 3.0, 6.0], np.float32),)),
        Case("a single element: centred to 0", (np.array([-2.5], np.float32),)),
        Case("length 5: 8 devices do not divide it", (np.arange(1, 6, dtype=np.float32),)),
        Case("length 12: split over 6 of 8 devices", (rng.normal(size=12).astype(np.float32),)),
        Case("length 13: a prime, one device", (rng.normal(size=13).astype(np.float32),)),
        Case("length 16: blocks with different means", (np.arange(16, dtype=np.float32),)),
        Case("constant: all zeros after", (np.full(24, 7.0, np.float32),)),
        Case("length 64, far from 0", (rng.normal(loc=100.0, size=64).astype(np.float32),)),
        Case("length 1024, random", (rng.normal(size=1024).astype(np.float32),)),
    ]


TECHNIQUE = Technique(
    collectives=(("all-reduce",),),
    forbidden=(
        Forbidden("all-gather", "gathering x whole onto every device is what pmean avoids"),
    ),
)
"""What a solution must do besides computing the right values (the statement's
"This problem practises" paragraph says it in words)."""


def _refusals() -> list[Case]:
    """One input per clause of the statement's "Raises" section, with the error it names."""
    x = np.array([1.0, 2.0, 3.0, 6.0], np.float32)
    return [
        Case("x a list, not an array", (x.tolist(),), raises="TypeError"),
        Case("int32 x: not floating-point", (x.astype(np.int32),), raises="TypeError"),
        Case("a 2-D x", (x.reshape(2, 2),), raises="ValueError"),
        Case("an empty x: it has no mean", (x[:0],), raises="ValueError"),
    ]


PROBLEM = Problem(
    name="shard_map_pmean",
    title="shard_map with pmean",
    reference=shard_map_pmean,
    oracle=_oracle,
    make_cases=_cases,
    unsharded=_unsharded,
    atol=1e-4,  # a float32 mean of up to 1024 values, summed in another order than NumPy's
    explain=_explain,
    folder="collectives",
    generate=_generate,
    technique=TECHNIQUE,
    placement=Placement(axis=0),
    make_refusals=_refusals,
)
