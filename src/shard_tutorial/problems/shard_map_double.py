"""Problem "shard_map basics": double a 1-D array, each device working on its own block.

:func:`jax.shard_map` runs a function once per device, on that device's block of
the input, and assembles the blocks it returns as ``out_specs`` says. The body
here is ``block * 2.0``; what the problem teaches is the pattern around it (a
mesh, the specs, placing the input), which is the same for any element-wise body.
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
from shard_tutorial.problem import (
    Case,
    Problem,
    Technique,
    first_block_only,
    no_communication,
    precise,
)
from shard_tutorial.validation import check_array

__all__ = ["PROBLEM", "shard_map_double"]


def shard_map_double(x: jax.Array) -> jax.Array:
    """Double every element of a 1-D array, each device doubling its own block.

    The array is split along axis 0 over a mesh axis named ``"data"``, into
    equal blocks, one per device. Every length must work, including lengths
    that the device count does not divide (5 on 8 devices) and 0: the mesh then
    uses as many devices as divide the length, which is what
    :func:`~shard_tutorial.data_mesh` builds (``data_mesh(5)`` spans 5 of 8
    devices, ``data_mesh(13)`` one). Any numeric dtype must work, ``bfloat16``
    included.

    This problem practises ``jax.shard_map`` on its own: each device doubles
    its own block of ``x``, with no communication between the devices. The mesh is
    ``data_mesh(len(x))``.

    How the arguments arrive: each array as a ``jax.Array`` on the default device,
    not split.

    Args:
      x: 1-D array of numbers (any integer, float or complex dtype), any length;
        a ``jax.Array`` or a NumPy array.

    Returns:
      ``x * 2.0``, with the dtype ``x * 2.0`` has in JAX (floats keep theirs,
      integers become ``float32``, or ``float64`` with ``jax_enable_x64``). It
      is a ``jax.Array`` sharded along ``"data"`` with an Explicit axis, so its
      sharding is part of its type: ``jax.typeof(y)`` is ``float32[16@data]``.
      Arithmetic on it works as usual; to index it outside ``jax.jit``, fetch it
      (``np.asarray(y)[0]``) or enter the mesh (``with jax.set_mesh(...)``).
      Inside a transformation (``jax.jit``, ``jax.grad``, ``jax.vmap``) the
      axis is Auto instead, see :func:`~shard_tutorial.data_mesh_for`.

    Raises:
      TypeError: if ``x`` is not an array of numbers (a Python number, a list,
        a ``bool`` array).
      ValueError: if ``x`` is not 1-D.

    Examples:
      >>> import jax
      >>> import jax.numpy as jnp
      >>> from shard_tutorial import shard_map_double
      >>> shard_map_double(jnp.array([1.0, 2.0]))
      Array([2., 4.], dtype=float32)

      On 8 devices, 16 elements are split into 8 blocks of 2:

      >>> y = shard_map_double(jnp.arange(16.0))
      >>> jax.typeof(y)
      ShapedArray(float32[16@data])
      >>> tuple(y.sharding.spec), len(y.sharding.device_set)
      (('data',), 8)
      >>> shard_map_double(jnp.ones(5, jnp.bfloat16))  # 5 of the 8 devices
      Array([2, 2, 2, 2, 2], dtype=bfloat16)

      It composes with JAX's transformations like any ``jnp`` function:

      >>> jax.grad(lambda x: shard_map_double(x).sum())(jnp.ones(3))
      Array([2., 2., 2.], dtype=float32)
      >>> jax.vmap(shard_map_double)(jnp.ones((3, 2))).shape
      (3, 2)
    """
    check_array(x, "x", ndim=1, layout="of shape (n,)")
    mesh = data_mesh_for(x)  # data_mesh(len(x)); Auto axes when traced
    x = place(x, NamedSharding(mesh, P("data")))  # jax.device_put, fast on CPU devices
    return _double_each_block(mesh)(x)


@functools.cache
def _double_each_block(mesh: Mesh) -> Callable[[jax.Array], jax.Array]:
    """Build, once per mesh, the compiled function that doubles each device's block."""
    return jax.jit(
        jax.shard_map(
            lambda block: block * 2.0,  # `block` is this device's slice of x
            mesh=mesh,
            in_specs=P("data"),  # split axis 0 of x over the "data" mesh axis
            out_specs=P("data"),  # put the doubled blocks back together along axis 0
        )
    )


def _unsharded(x: jax.Array) -> jax.Array:
    return x * 2.0


def _oracle(x: np.ndarray) -> np.ndarray:
    return precise(x) * 2.0


def _explain(case: Case, expected: np.ndarray, received: np.ndarray) -> str | None:
    if received.shape != expected.shape:
        return first_block_only(expected, received)
    if np.allclose(received, case.args[0]):
        return "The values are x itself, not doubled"
    return None


def _cases() -> list[Case]:
    rng = np.random.default_rng(20260101)
    return [
        Case("example from the problem statement", (np.array([1.0, 2.0], np.float32),)),
        Case("a single element", (np.array([3.5], np.float32),)),
        Case("empty", (np.zeros(0, np.float32),)),
        Case("length 5: 8 devices do not divide it", (np.arange(5, dtype=np.float32),)),
        Case("length 12: split over 6 of 8 devices", (rng.normal(size=12).astype(np.float32),)),
        Case("length 13: a prime, one device", (rng.normal(size=13).astype(np.float32),)),
        Case("length 64, random", (rng.normal(size=64).astype(np.float32),)),
        Case(
            "signs, zero and extreme magnitudes",
            (np.array([-3.5, -0.0, 0.0, 1e30, -1e-30, 7.25, -1e38, 2.0], np.float32),),
        ),
        Case("int32 input gives float32", (np.arange(-4, 4, dtype=np.int32),)),
        Case("length 1000", (rng.uniform(-100, 100, size=1000).astype(np.float32),)),
        Case("bfloat16 stays bfloat16", (rng.normal(size=24).astype(jnp.bfloat16),)),
        Case("float16, length 7", (rng.normal(size=7).astype(np.float16),)),
    ]


def _generate(rng: np.random.Generator) -> Case:
    n = int(rng.integers(0, 300))
    if rng.random() < 0.25:
        x = rng.integers(-1000, 1000, size=n).astype(np.int32)
    else:
        x = rng.normal(scale=float(rng.choice([0.1, 1.0, 100.0])), size=n).astype(np.float32)
    return Case(f"random: length {n}, {x.dtype}", (x,))


TECHNIQUE = Technique(
    forbidden=no_communication(
        "doubling needs no communication: each device doubles its own block"
    ),
)
"""What a solution must do besides computing the right values (the statement's
"This problem practises" paragraph says it in words)."""


def _refusals() -> list[Case]:
    """One input per clause of the statement's "Raises" section, with the error it names."""
    x = np.array([1.0, 2.0], np.float32)
    return [
        Case("x a Python number (2.0), not an array", (2.0,), raises="TypeError"),
        Case("x a list, not an array", (x.tolist(),), raises="TypeError"),
        Case("a bool x", (x > 0,), raises="TypeError"),
        Case("a 2-D x", (x.reshape(1, 2),), raises="ValueError"),
    ]


PROBLEM = Problem(
    name="shard_map_double",
    title="shard_map basics",
    reference=shard_map_double,
    oracle=_oracle,
    make_cases=_cases,
    unsharded=_unsharded,
    explain=_explain,
    generate=_generate,
    technique=TECHNIQUE,
    make_refusals=_refusals,
)
