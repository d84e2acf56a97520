"""Problem "shard_map vs vmap": the same per-row function, mapped two ways.

:func:`jax.vmap` maps a function over an axis *logically*: one program, no
devices named, and the compiler decides where each row is computed.
:func:`jax.shard_map` maps over *devices*: each device runs the function on its
own block of rows. Inside a ``shard_map`` body, ``vmap`` is still how you apply
a per-row function to the rows of that block, so the two compose.
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

__all__ = ["PROBLEM", "shard_map_vs_vmap"]


def shard_map_vs_vmap(x: jax.Array) -> jax.Array:
    """Per-row sums of squares computed by ``shard_map`` and by ``vmap``, stacked.

    The ``shard_map`` path splits the rows over a mesh axis named ``"data"``, in
    equal blocks, one per device, and applies ``jax.vmap(lambda r: jnp.sum(r**2))``
    to each device's block of rows; the ``vmap`` path applies the same function
    to all rows at once. Both give the same numbers (up to float rounding: the
    compiler may add a row's squares in a different order on each path).

    Every number of rows must work, including numbers that the device count
    does not divide (3 rows on 8 devices) and 0: the mesh then uses as many
    devices as divide the number of rows, which is what
    :func:`~shard_tutorial.data_mesh` builds (``data_mesh(3)`` spans 3 of 8
    devices). Any numeric dtype must work, ``bfloat16`` included.

    This problem practises ``jax.shard_map`` beside ``jax.vmap``: the
    ``shard_map`` path splits the rows over the devices, with no communication.

    How the arguments arrive: each array as a ``jax.Array`` on the default device,
    not split.

    Args:
      x: 2-D array of shape ``(B, d)``: ``B`` rows of ``d`` numbers (any
        integer, float or complex dtype); a ``jax.Array`` or a NumPy array.

    Returns:
      Array of shape ``(2, B)``: row 0 from ``shard_map``, row 1 from ``vmap``,
      with the dtype ``jnp.sum(x**2, axis=1)`` has. It is a ``jax.Array``
      sharded by column along ``"data"`` on an Explicit mesh, so the sharding
      is part of its type: ``jax.typeof(y)`` is ``float32[2,16@data]`` for 16
      rows. Arithmetic on it works as usual; to index it outside ``jax.jit``,
      fetch it (``np.asarray(y)[0]``) or enter the mesh (``with
      jax.set_mesh(...)``). Inside a transformation (``jax.jit``, ``jax.grad``,
      ``jax.vmap``) the axis is Auto instead, see
      :func:`~shard_tutorial.data_mesh_for`.

    Raises:
      TypeError: if ``x`` is not an array of numbers (a Python number, a list,
        a ``bool`` array).
      ValueError: if ``x`` is not 2-D.

    Examples:
      >>> import jax
      >>> import jax.numpy as jnp
      >>> from shard_tutorial import shard_map_vs_vmap
      >>> shard_map_vs_vmap(jnp.array([[1.0, 0.0], [0.0, 1.0]]))
      Array([[1., 1.],
             [1., 1.]], dtype=float32)
      >>> shard_map_vs_vmap(jnp.array([[1.0, 2.0], [3.0, 4.0], [0.5, 0.5]]))
      Array([[ 5. , 25. ,  0.5],
             [ 5. , 25. ,  0.5]], dtype=float32)
      >>> jax.typeof(shard_map_vs_vmap(jnp.ones((16, 3))))
      ShapedArray(float32[2,16@data])
    """
    check_array(x, "x", ndim=2, layout="of shape (B, d)")
    mesh = data_mesh_for(x)  # data_mesh(len(x)); Auto axes when traced
    x = place(x, NamedSharding(mesh, P("data")))  # jax.device_put, fast on CPU devices
    return _both_ways(mesh)(x)


def _sum_of_squares(row: jax.Array) -> jax.Array:
    return jnp.sum(row**2)


@functools.cache
def _both_ways(mesh: Mesh) -> Callable[[jax.Array], jax.Array]:
    """Build, once per mesh, the compiled function that maps ``_sum_of_squares`` both ways."""
    per_device = jax.shard_map(
        jax.vmap(_sum_of_squares),  # runs on one device's block of rows
        mesh=mesh,
        in_specs=P("data"),  # split the rows (axis 0); each row stays whole
        out_specs=P("data"),  # one sum per row, back in row order
    )

    @jax.jit
    def both_ways(x: jax.Array) -> jax.Array:
        return jnp.stack([per_device(x), jax.vmap(_sum_of_squares)(x)], axis=0)

    return both_ways


def _unsharded(x: jax.Array) -> jax.Array:
    sums = jnp.sum(x**2, axis=1)
    return jnp.stack([sums, sums], axis=0)


def _oracle(x: np.ndarray) -> np.ndarray:
    sums = np.sum(precise(x) ** 2, axis=1)
    return np.stack([sums, sums], axis=0)


def _explain(case: Case, expected: np.ndarray, received: np.ndarray) -> str | None:
    rows = expected.shape[1]
    if received.shape == (rows, 2):
        return "The two results are stacked as columns: stack them as rows, jnp.stack(..., axis=0)"
    if received.shape != expected.shape:
        return first_block_only(expected, received, axis=1)
    shard_map_right = np.allclose(received[0], expected[0], rtol=1e-5, atol=1e-6)
    vmap_right = np.allclose(received[1], expected[1], rtol=1e-5, atol=1e-6)
    if vmap_right and not shard_map_right:
        return "Row 1 (vmap) is right and row 0 (shard_map) is not"
    if shard_map_right and not vmap_right:
        return "Row 0 (shard_map) is right and row 1 (vmap) is not"
    del case
    return None


def _cases() -> list[Case]:
    rng = np.random.default_rng(20260102)

    def normal(*shape: int) -> np.ndarray:
        return rng.normal(size=shape).astype(np.float32)

    return [
        Case("example from the problem statement", (np.eye(2, dtype=np.float32),)),
        Case("a single row", (np.array([[1.0, 2.0, 3.0]], np.float32),)),
        Case("no rows", (np.zeros((0, 3), np.float32),)),
        Case("rows of zero length", (np.zeros((4, 0), np.float32),)),
        Case("3 rows: 8 devices do not divide them", (normal(3, 4),)),
        Case("12 rows: split over 6 of 8 devices", (normal(12, 5),)),
        Case("16 rows of 1 value", (normal(16, 1),)),
        Case("64 rows of 32 values", (normal(64, 32),)),
        Case("int32 input stays int32", (np.arange(-12, 12, dtype=np.int32).reshape(8, 3),)),
        Case("7 rows of 100 values", (rng.uniform(-10, 10, size=(7, 100)).astype(np.float32),)),
        Case("bfloat16 stays bfloat16", (normal(8, 6).astype(jnp.bfloat16),)),
        Case("float16, 5 rows", (normal(5, 3).astype(np.float16),)),
    ]


def _generate(rng: np.random.Generator) -> Case:
    rows, columns = int(rng.integers(0, 40)), int(rng.integers(0, 20))
    if rng.random() < 0.25:
        x = rng.integers(-100, 100, size=(rows, columns)).astype(np.int32)
    else:
        x = rng.normal(size=(rows, columns)).astype(np.float32)
    return Case(f"random: {rows} rows of {columns}, {x.dtype}", (x,))


TECHNIQUE = Technique(
    forbidden=no_communication(
        "each row's sum needs no communication: each device maps its own rows"
    ),
)
"""What a solution must do besides computing the right values (the statement's
"This problem practises" paragraph says it in words)."""


def _refusals() -> list[Case]:
    """One input per clause of the statement's "Raises" section, with the error it names."""
    x = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    return [
        Case("x a Python number (2.0), not an array", (2.0,), raises="TypeError"),
        Case("x a list of rows, not an array", (x.tolist(),), raises="TypeError"),
        Case("a bool x", (x > 0,), raises="TypeError"),
        Case("a 1-D x", (x[0],), raises="ValueError"),
    ]


PROBLEM = Problem(
    name="shard_map_vs_vmap",
    title="shard_map vs vmap",
    reference=shard_map_vs_vmap,
    oracle=_oracle,
    make_cases=_cases,
    unsharded=_unsharded,
    explain=_explain,
    generate=_generate,
    technique=TECHNIQUE,
    make_refusals=_refusals,
)
