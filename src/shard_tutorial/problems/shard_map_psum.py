"""Problem "shard_map with psum": a global sum from per-device partial sums.

Inside :func:`jax.shard_map` each device sees only its block, so ``jnp.sum`` gives
that device's *partial* sum. :func:`jax.lax.psum` is the collective that adds the
partial sums of every device along a mesh axis and hands the total back to each
of them (an all-reduce): the step that turns per-device gradients into the global
gradient in data-parallel training. Because every device ends up holding the
same total, the output is replicated: ``out_specs=P()``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial.meshes import data_mesh_for, place
from shard_tutorial.problem import Case, Forbidden, Problem, Technique, precise
from shard_tutorial.validation import check_array

__all__ = ["PROBLEM", "shard_map_psum"]


def shard_map_psum(x: jax.Array) -> jax.Array:
    """Sum a 1-D array: each device sums its block, then ``psum`` adds the partial sums.

    The array is split along axis 0 over a mesh axis named ``"data"``, into
    equal blocks, one per device. Every length must work, including lengths
    that the device count does not divide (5 on 8 devices) and 0 (the sum is
    0): the mesh then uses as many devices as divide the length, which is what
    :func:`~shard_tutorial.data_mesh` builds (``data_mesh(5)`` spans 5 of 8
    devices, ``data_mesh(13)`` one). Any numeric dtype must work, ``bfloat16``
    included.

    This problem practises ``jax.shard_map`` with ``jax.lax.psum``: each device
    sums its own block, and one all-reduce adds the partial sums up. The mesh is
    ``data_mesh(len(x))``.

    How the arguments arrive: each array as a ``jax.Array`` on the default device,
    not split.

    Args:
      x: 1-D array of numbers (any integer, float or complex dtype), any length;
        a ``jax.Array`` or a NumPy array.

    Returns:
      A scalar (0-d array), ``jnp.sum(x)``, with the dtype ``jnp.sum`` gives
      (``int32`` and ``float32`` stay, ``bfloat16`` stays, ``int8`` becomes
      ``int32``). It is a ``jax.Array`` replicated on every device used, on an
      Explicit mesh: ``jax.typeof(total)`` is ``float32[]`` and its sharding's
      spec is ``P()``. Inside a transformation (``jax.jit``, ``jax.grad``,
      ``jax.vmap``) the mesh axis is Auto instead, see
      :func:`~shard_tutorial.data_mesh_for`.

    Raises:
      TypeError: if ``x`` is not an array of numbers (a Python number, a list,
        a ``bool`` array).
      ValueError: if ``x`` is not 1-D.

    Examples:
      >>> import jax
      >>> import jax.numpy as jnp
      >>> from shard_tutorial import shard_map_psum
      >>> shard_map_psum(jnp.array([1.0, 2.0, 3.0]))
      Array(6., dtype=float32)

      On 8 devices, each of them holds the whole total:

      >>> total = shard_map_psum(jnp.arange(32))
      >>> total, tuple(total.sharding.spec), len(total.sharding.device_set)
      (Array(496, dtype=int32), (), 8)
      >>> jax.typeof(total)
      ShapedArray(int32[])
      >>> shard_map_psum(jnp.ones(5, jnp.bfloat16))  # 5 of the 8 devices
      Array(5, dtype=bfloat16)

      The gradient of a sum is 1 for every element, as for ``jnp.sum``:

      >>> jax.grad(shard_map_psum)(jnp.arange(3.0))
      Array([1., 1., 1.], dtype=float32)
    """
    check_array(x, "x", ndim=1, layout="of shape (n,)")
    mesh = data_mesh_for(x)  # data_mesh(len(x)); Auto axes when traced
    x = place(x, NamedSharding(mesh, P("data")))  # jax.device_put, fast on CPU devices
    return _sum_all_blocks(mesh)(x)


def _block_sum_then_psum(block: jax.Array) -> jax.Array:
    partial_sum = jnp.sum(block)  # this device's block only
    return jax.lax.psum(partial_sum, axis_name="data")  # add up every device's partial sum


@functools.cache
def _sum_all_blocks(mesh: Mesh) -> Callable[[jax.Array], jax.Array]:
    """Build, once per mesh, the compiled function that sums ``x`` across the devices."""
    return jax.jit(
        jax.shard_map(
            _block_sum_then_psum,
            mesh=mesh,
            in_specs=P("data"),  # each device gets one block of x
            out_specs=P(),  # after psum every device holds the same total: replicated
        )
    )


def _oracle(x: np.ndarray) -> np.ndarray:
    return np.sum(precise(x))


def _explain(case: Case, expected: np.ndarray, received: np.ndarray) -> str | None:
    x = precise(case.args[0])
    n = x.shape[0]
    if received.ndim == 1 and 1 < received.shape[0] <= n and n % received.shape[0] == 0:
        if np.isclose(np.sum(received), expected, rtol=1e-5, atol=1e-4):
            return (
                f"These are {received.shape[0]} partial sums, one per device: add them "
                'with jax.lax.psum over "data" and return the total with out_specs=P()'
            )
        return None
    if received.shape != ():
        return None
    for devices in range(2, n + 1):
        block = n // devices
        if n % devices == 0 and np.isclose(received, np.sum(x[:block]), rtol=1e-5, atol=1e-4):
            return (
                f"That is the sum of the first {block} of the {n} elements only: one device's "
                "partial sum. The partial sums of the blocks must be added up across the "
                'devices, with jax.lax.psum over "data"'
            )
    return None


def _cases() -> list[Case]:
    rng = np.random.default_rng(20260103)
    return [
        Case("example from the problem statement", (np.array([1.0, 2.0, 3.0], np.float32),)),
        Case("a single element", (np.array([-2.5], np.float32),)),
        Case("empty: the sum is 0", (np.zeros(0, np.float32),)),
        Case(
            "length 5 in bfloat16: 8 devices do not divide it",
            (np.arange(1, 6).astype(jnp.bfloat16),),
        ),
        Case("length 32, one block per device on 8", (np.arange(32, dtype=np.float32),)),
        Case("length 12: split over 6 of 8 devices", (rng.normal(size=12).astype(np.float32),)),
        Case(
            "length 13 in float16: a prime, one device", (rng.normal(size=13).astype(np.float16),)
        ),
        Case("int32 input stays int32", (np.arange(-40, 24, dtype=np.int32),)),
        Case("values that cancel out", (np.array([5.0, -5.0] * 8, np.float32),)),
        Case("length 1024, random", (rng.normal(size=1024).astype(np.float32),)),
    ]


def _generate(rng: np.random.Generator) -> Case:
    n = int(rng.integers(0, 300))
    if rng.random() < 0.25:
        x = rng.integers(-1000, 1000, size=n).astype(np.int32)
    else:
        x = rng.normal(scale=float(rng.choice([0.1, 1.0, 100.0])), size=n).astype(np.float32)
    return Case(f"random: length {n}, {x.dtype}", (x,))


TECHNIQUE = Technique(
    collectives=(("all-reduce",),),
    forbidden=(Forbidden("all-gather", "gathering x whole onto every device is what psum avoids"),),
)
"""What a solution must do besides computing the right values (the statement's
"This problem practises" paragraph says it in words)."""


def _refusals() -> list[Case]:
    """One input per clause of the statement's "Raises" section, with the error it names."""
    x = np.array([1.0, 2.0, 3.0], np.float32)
    return [
        Case("x a Python number (2.0), not an array", (2.0,), raises="TypeError"),
        Case("x a list, not an array", (x.tolist(),), raises="TypeError"),
        Case("a bool x", (x > 0,), raises="TypeError"),
        Case("a 2-D x", (x.reshape(1, 3),), raises="ValueError"),
    ]


PROBLEM = Problem(
    name="shard_map_psum",
    title="shard_map with psum",
    reference=shard_map_psum,
    oracle=_oracle,
    make_cases=_cases,
    unsharded=jnp.sum,
    atol=1e-4,  # a float32 sum of 1024 values, added in a different order than NumPy's
    # A sum of 300 values of size 100 rounds by more than atol: 3.3e-4 in one case
    # (jnp.sum on one device). Summed in order, backwards, pairwise or in 8 blocks, the
    # generator's float32 cases stayed within 1.7 eps of the size of their terms (15,000
    # cases, measured with NumPy; tests/problems/test_shard_map_psum.py keeps the 708 of
    # 3,000 draws whose terms exceed 1,000); a sum in any order is within (n - 1) / 2 eps
    # of it (Higham, "Accuracy and Stability of Numerical Algorithms", 4.2).
    sum_rounding=4.0,
    explain=_explain,
    generate=_generate,
    technique=TECHNIQUE,
    make_refusals=_refusals,
)
