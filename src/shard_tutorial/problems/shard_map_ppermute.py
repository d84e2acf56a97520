"""Problem "shard_map with ppermute": a three-point average across block edges.

A stencil such as the periodic three-point average ``(x[i-1] + x[i] + x[i+1]) / 3``
needs, at each end of a block, one element that lives on the neighbouring device.
:func:`jax.lax.ppermute` sends a value from each device to another along a mesh
axis, by a fixed list of ``(source, destination)`` pairs: every device sends its
last element to the next device and its first element to the previous one (a
*halo exchange*), then averages its block padded with the two elements it
received. The output stays split like the input, ``out_specs=P("data")``.
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

__all__ = ["PROBLEM", "shard_map_ppermute"]


def shard_map_ppermute(x: jax.Array) -> jax.Array:
    """Periodic three-point average: ``ppermute`` brings each block its neighbours' edge elements.

    This problem practises ``jax.shard_map`` with ``jax.lax.ppermute``: each
    device fetches only the edge elements of its neighbours' blocks (collective
    permutes), never the whole array. The mesh is ``data_mesh(len(x))``.

    How the arguments arrive: each array as a ``jax.Array`` on the default device,
    not split.

    Args:
      x: 1-D array of floating-point numbers, length n >= 1.

    Returns:
      ``y`` with ``y[i] = (x[i-1] + x[i] + x[i+1]) / 3``, indices modulo n, of
      the shape and dtype of ``x``, split over the devices like ``x``
      (``P("data")``).

    Raises:
      TypeError: if ``x`` is not an array of floating-point numbers.
      ValueError: if ``x`` is not 1-D, or is empty.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial import shard_map_ppermute
      >>> shard_map_ppermute(jnp.array([3.0, 0.0, 0.0, 0.0, 0.0, 6.0]))
      Array([3., 1., 0., 0., 2., 3.], dtype=float32)

      On 8 devices, each holds its block, edges included:

      >>> y = shard_map_ppermute(jnp.arange(16.0))
      >>> tuple(y.sharding.spec), y.addressable_shards[0].data
      (('data',), Array([5.3333335, 1.       ], dtype=float32))
    """
    _check_input(x)
    mesh = data_mesh_for(x)  # Auto axes when traced (jit, grad, vmap): see its docstring
    x = place(x, NamedSharding(mesh, P("data")))  # jax.device_put, fast on CPU devices
    return _three_point_average(mesh)(x)


def _check_input(x: jax.Array) -> None:
    """Raise unless ``x`` is a non-empty 1-D floating-point array."""
    check_array(x, "x", ndim=1, layout="of shape (n,)")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        msg = f"x must hold floating-point numbers, got dtype {x.dtype}; use x.astype(jnp.float32)"
        raise TypeError(msg)
    if x.shape[0] == 0:
        msg = "x must have at least one element: an empty array has no neighbours to average"
        raise ValueError(msg)


def _average_with_halos(block: jax.Array, devices: int) -> jax.Array:
    to_next = [(i, (i + 1) % devices) for i in range(devices)]  # (source, destination)
    to_previous = [(i, (i - 1) % devices) for i in range(devices)]
    # Each device receives the last element of the block before it (its left halo)...
    left = jax.lax.ppermute(block[-1:], axis_name="data", perm=to_next)
    # ...and the first element of the block after it (its right halo).
    right = jax.lax.ppermute(block[:1], axis_name="data", perm=to_previous)
    padded = jnp.concatenate([left, block, right])
    return (padded[:-2] + padded[1:-1] + padded[2:]) / 3


@functools.cache
def _three_point_average(mesh: Mesh) -> Callable[[jax.Array], jax.Array]:
    """Build, once per mesh, the compiled function that averages each element's neighbourhood."""
    return jax.jit(
        jax.shard_map(
            functools.partial(_average_with_halos, devices=mesh.shape["data"]),
            mesh=mesh,
            in_specs=P("data"),  # each device gets one block of x
            out_specs=P("data"),  # each device returns the averages of its block
        )
    )


def _unsharded(x: jax.Array) -> jax.Array:
    return (jnp.roll(x, 1) + x + jnp.roll(x, -1)) / 3


def _oracle(x: np.ndarray) -> np.ndarray:
    wide = precise(x)
    return ((np.roll(wide, 1) + wide + np.roll(wide, -1)) / 3).astype(x.dtype)


def _explain(case: Case, _expected: np.ndarray, received: np.ndarray) -> str | None:
    x = precise(case.args[0])
    if received.shape != x.shape:
        return None
    for devices in device_counts(x.shape[0]):

        def within_block(block: np.ndarray) -> np.ndarray:
            return (np.roll(block, 1) + block + np.roll(block, -1)) / 3

        if np.allclose(received, blockwise(x, devices, within_block), rtol=1e-4, atol=1e-4):
            return (
                f"Each of {devices} blocks was averaged as if it wrapped around on itself: "
                "right inside the blocks, wrong at every block edge. Fetch the neighbouring "
                "devices' edge elements with jax.lax.ppermute (a halo exchange)"
            )
        blocks = np.split(x, devices)
        swapped_left = np.array([blocks[(i + 1) % devices][-1] for i in range(devices)])
        swapped_right = np.array([blocks[(i - 1) % devices][0] for i in range(devices)])
        swapped = np.concatenate(
            [
                within_block(np.concatenate([[lo], block, [hi]]))[1:-1]
                for lo, block, hi in zip(swapped_left, blocks, swapped_right, strict=True)
            ]
        )
        if np.allclose(received, swapped, rtol=1e-4, atol=1e-4):
            return (
                f"The halos went the wrong way round (on {devices} devices): each block's "
                "first element was averaged with the last element of the block after it, "
                "and its last element with the first element of the block before it. The "
                "last element goes to the next device, perm=[(i, (i + 1) % n), ...]"
            )
    return None


def _generate(rng: np.random.Generator) -> Case:
    """One random case: a length from 1 to 100, float32 values."""
    n = int(rng.integers(1, 101))
    return Case(f"random, length {n}", (rng.normal(size=n).astype(np.float32),))


def _cases() -> list[Case]:
    rng = np.random.default_rng(20260203)
    return [
        Case(
            "example from the problem statement",
            (np.array([3.0, 0.0, 0.0, 0.0, 0.0, 6.0], np.float32),),
        ),
        Case("a single element: its own neighbours", (np.array([-2.5], np.float32),)),
        Case("two elements", (np.array([3.0, 6.0], np.float32),)),
        Case("length 5: 8 devices do not divide it", (np.arange(1, 6, dtype=np.float32),)),
        Case("length 12: split over 6 of 8 devices", (rng.normal(size=12).astype(np.float32),)),
        Case("length 13: a prime, one device", (rng.normal(size=13).astype(np.float32),)),
        Case("length 8: one element per device on 8", (np.arange(8, dtype=np.float32),)),
        Case("length 32: a ramp, its edges differ", (np.arange(32, dtype=np.float32),)),
        Case("length 1024, random", (rng.normal(size=1024).astype(np.float32),)),
        Case("bfloat16 stays bfloat16", (rng.normal(size=24).astype(jnp.bfloat16),)),
        Case("float16 stays float16, length 20", (rng.normal(size=20).astype(np.float16),)),
    ]


TECHNIQUE = Technique(
    collectives=(("collective-permute",),),
    forbidden=(
        Forbidden(
            "all-gather",
            "a device needs only its neighbours' edge elements, not the whole array: "
            "fetch them with ppermute",
        ),
        Forbidden("all-reduce", "a device needs only its neighbours' edge elements"),
    ),
)
"""What a solution must do besides computing the right values (the statement's
"This problem practises" paragraph says it in words)."""


def _refusals() -> list[Case]:
    """One input per clause of the statement's "Raises" section, with the error it names."""
    x = np.array([3.0, 0.0, 0.0, 6.0], np.float32)
    return [
        Case("x a list, not an array", (x.tolist(),), raises="TypeError"),
        Case("int32 x: not floating-point", (x.astype(np.int32),), raises="TypeError"),
        Case("a 2-D x", (x.reshape(2, 2),), raises="ValueError"),
        Case("an empty x", (x[:0],), raises="ValueError"),
    ]


PROBLEM = Problem(
    name="shard_map_ppermute",
    title="shard_map with ppermute",
    reference=shard_map_ppermute,
    oracle=_oracle,
    make_cases=_cases,
    unsharded=_unsharded,
    explain=_explain,
    folder="collectives",
    generate=_generate,
    technique=TECHNIQUE,
    placement=Placement(axis=0),
    make_refusals=_refusals,
)
