"""The one-axis device mesh every reference implementation splits its data over.

``jax.shard_map`` cuts each sharded array axis into *equal* blocks, one per
device along the mesh axis, so the mesh size must divide that axis' length. The
reference implementations therefore do not hard-code a device count: for an axis
of length ``n`` they use the largest number of devices, up to all of them, that
divides ``n``. On 8 devices a batch of 16 uses all 8, a batch of 12 uses 6, and
a batch of 5 uses 5; on 1 device everything uses that one. Every length works,
and nothing is padded or dropped.

The mesh axes are :attr:`jax.sharding.AxisType.Explicit`, what ``jax.make_mesh``
builds by default today: an array's sharding is part of its type, so a function
must place its input on the mesh (``jax.device_put``) before ``jax.shard_map``
accepts it, and that placement is visible in the code rather than implied.

Inside a transformation (``jax.jit``, ``jax.grad``, ``jax.vmap``) the references
use :func:`data_mesh_for` instead, which keeps their mesh out of the caller's
types; its docstring says why.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import TypeVar

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding

__all__ = [
    "DATA_AXIS",
    "MAX_DEVICES",
    "MODEL_AXIS",
    "axis_mesh",
    "data_mesh",
    "data_mesh_for",
    "data_model_mesh",
    "data_model_shape",
    "device_counts",
    "place",
    "usable_device_count",
]

T = TypeVar("T")

DATA_AXIS = "data"
"""Name of the mesh axis that the batch (leading) axis of the data is split over."""

MODEL_AXIS = "model"
"""Name of the mesh axis that a model's hidden units are split over (tensor parallelism)."""

MAX_DEVICES = 8
"""The largest device count the checker runs a solution on."""


def device_counts(length: int, *, at_least: int = 2) -> Iterator[int]:
    """The device counts, ``at_least`` to :data:`MAX_DEVICES`, that divide ``length`` evenly.

    The meshes a solution may have split an axis of ``length`` over: what a
    problem's hints (the answer of each block on its own, on ``d`` devices) and
    cases try.

    Args:
      length: the length of the axis the blocks are cut along.
      at_least: the smallest count to give.

    Yields:
      Each count ``d`` with ``length % d == 0``, smallest first.

    Examples:
      >>> from shard_tutorial.meshes import device_counts
      >>> list(device_counts(12)), list(device_counts(0)), list(device_counts(7))
      ([2, 3, 4, 6], [], [7])
    """
    if length <= 0:
        return
    yield from (d for d in range(at_least, MAX_DEVICES + 1) if length % d == 0)


def usable_device_count(length: int, available: int | None = None) -> int:
    """The largest number of devices, at most ``available``, that divides ``length``.

    Args:
      length: size of the array axis to split into equal blocks, at least 0. An
        empty axis splits over every device (each gets an empty block).
      available: how many devices there are; defaults to ``jax.device_count()``.

    Returns:
      The device count to split ``length`` over: between 1 and ``available``.

    Raises:
      ValueError: if ``length`` is negative or ``available`` is less than 1.

    Examples:
      >>> from shard_tutorial import usable_device_count
      >>> [usable_device_count(n, available=8) for n in (16, 12, 5, 13, 0)]
      [8, 6, 5, 1, 8]
    """
    if available is None:
        available = jax.device_count()
    if length < 0:
        msg = f"length must be at least 0, got {length}"
        raise ValueError(msg)
    if available < 1:
        msg = f"available must be at least 1, got {available}"
        raise ValueError(msg)
    return next(d for d in range(available, 0, -1) if length % d == 0)


def data_mesh(length: int) -> Mesh:
    """The 1-D mesh (axis ``"data"``) that splits an axis of ``length`` into equal blocks.

    It spans the first :func:`usable_device_count` devices. Meshes are built once
    per size and reused, so jitted functions keyed on them compile once.

    Args:
      length: size of the array axis to split, at least 0.

    Returns:
      A :class:`jax.sharding.Mesh` with one Explicit axis named ``"data"``.

    Examples:
      On 8 devices:

      >>> from shard_tutorial import data_mesh
      >>> mesh = data_mesh(32)
      >>> dict(mesh.shape), [axis_type.name for axis_type in mesh.axis_types]
      ({'data': 8}, ['Explicit'])
      >>> data_mesh(6).devices
      array([CpuDevice(id=0), CpuDevice(id=1), CpuDevice(id=2), CpuDevice(id=3),
             CpuDevice(id=4), CpuDevice(id=5)], dtype=object)
      >>> data_mesh(32) is data_mesh(64)
      True
    """
    return _mesh_of(usable_device_count(length))


def axis_mesh(axis: str, length: int, *, traced: bool = False) -> Mesh:
    """A 1-D mesh with one axis called ``axis`` that splits a length of ``length`` evenly.

    :func:`data_mesh` under another axis name: the first
    :func:`usable_device_count` devices, the most (up to all of them) that divide
    ``length``. Part V's problems name their axis after what it splits
    (``"model"``, ``"expert"``, ``"stage"``, ``"seq"``). Like
    :func:`data_model_mesh`, a function being traced (``traced=True``) gets Auto
    axes, so the mesh stays out of its caller's types; otherwise the axis is
    Explicit. Built once per name, size and axis type.

    Args:
      axis: the mesh axis' name.
      length: the length the device count must divide (for several split
        dimensions, their ``math.gcd``), at least 0.
      traced: whether the caller is inside ``jax.jit``, ``jax.grad``...

    Returns:
      A :class:`jax.sharding.Mesh` with the one axis ``axis``.

    Examples:
      On 8 devices:

      >>> from shard_tutorial import axis_mesh, data_mesh
      >>> mesh = axis_mesh("expert", 12)
      >>> dict(mesh.shape), [t.name for t in mesh.axis_types]
      ({'expert': 6}, ['Explicit'])
      >>> axis_mesh("data", 16) is data_mesh(16)
      True
    """
    size = usable_device_count(length)
    return _mesh_of(size, AxisType.Auto if traced else AxisType.Explicit, axis)


def data_mesh_for(x: jax.Array, *operands: object, length: int | None = None) -> Mesh:
    """The mesh to split ``x``'s axis 0 over: :func:`data_mesh`, or its Auto twin when traced.

    Called on concrete arrays (NumPy or ``jax.Array``), this is
    ``data_mesh(x.shape[0])``: Explicit axes, so the result's type shows its
    sharding (``float32[16@data]``).

    When ``x`` or any array in ``operands`` is a tracer (the function runs inside
    ``jax.jit``, ``jax.grad``, ``jax.vmap``...), the same devices come with
    :attr:`~jax.sharding.AxisType.Auto` axes instead. An Explicit mesh would
    show up in the types of the caller's program, and JAX's Explicit mode then
    wants that mesh in the caller's context (``jax.set_mesh``), which the caller
    did not set and a traced function cannot set (``jax.set_mesh`` refuses
    inside a trace): ``jax.grad`` fails creating its first cotangent ("Please
    enter your `jit` into a mesh context via `jax.set_mesh`"). With Auto axes
    the work is split over the same devices and the caller's types stay as they
    were (``float32[16]``). The exception is an ``x`` whose type already has an
    Explicit mesh (a caller working in Explicit mode, e.g. under
    ``jax.set_mesh``): then the Explicit mesh, as that caller expects.

    Under ``jax.vmap`` ``x.shape`` is the shape of one example, so the mesh fits
    the per-example length, not the batch.

    Args:
      x: the array whose axis 0 is split; it decides the mesh size.
      *operands: the function's other inputs (arrays or pytrees such as an
        ``nnx.State``), looked at only to tell whether the call is traced.
      length: the length the mesh must divide, if not ``x.shape[0]``: e.g.
        ``math.gcd`` of the batch and a weight's rows, when both are split
        over ``"data"`` (fully-sharded data parallelism).

    Returns:
      A 1-D :class:`jax.sharding.Mesh` with axis ``"data"`` over the first
      ``usable_device_count(x.shape[0])`` devices.

    Examples:
      >>> import jax
      >>> import jax.numpy as jnp
      >>> from shard_tutorial import data_mesh, data_mesh_for
      >>> x = jnp.arange(12.0)
      >>> data_mesh_for(x) is data_mesh(12)
      True
      >>> def show_mesh(x):
      ...     mesh = data_mesh_for(x)
      ...     print(dict(mesh.shape), [axis_type.name for axis_type in mesh.axis_types])
      ...     return x
      >>> _ = show_mesh(x)
      {'data': 6} ['Explicit']
      >>> _ = jax.jit(show_mesh)(x)
      {'data': 6} ['Auto']
    """
    traced = any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves((x, operands)))
    explicit = not traced or _has_explicit_mesh(x)
    size = usable_device_count(x.shape[0] if length is None else length)
    return _mesh_of(size, AxisType.Explicit if explicit else AxisType.Auto)


def _has_explicit_mesh(x: jax.Array) -> bool:
    mesh = jax.typeof(x).sharding.mesh
    return not mesh.empty and AxisType.Explicit in mesh.axis_types


@functools.cache
def _mesh_of(
    num_devices: int, axis_type: AxisType = AxisType.Explicit, axis: str = DATA_AXIS
) -> Mesh:
    return jax.make_mesh(
        (num_devices,),
        (axis,),
        axis_types=(axis_type,),
        devices=jax.devices()[:num_devices],
    )


def data_model_shape(batch: int, hidden: int, available: int | None = None) -> tuple[int, int]:
    """How many devices a 2-D ``("data", "model")`` mesh puts on each axis.

    ``"data"`` must divide ``batch`` and ``"model"`` must divide ``hidden``. Of
    the shapes that allow, the one that uses the most devices wins; then one
    with both axes above 1, so both kinds of parallelism show; then the one with
    the larger ``"model"`` axis. On 8 devices a batch of 16 and 32 hidden units
    give 2 x 4; any shapes give some mesh, 1 x 1 at worst.

    Args:
      batch: rows of the input, split over ``"data"``; at least 0.
      hidden: hidden units of the layer, split over ``"model"``; at least 0.
      available: how many devices there are; defaults to ``jax.device_count()``.

    Returns:
      ``(data, model)``, with ``data * model <= available``.

    Raises:
      ValueError: if ``batch`` or ``hidden`` is negative, or ``available`` below 1.

    Examples:
      >>> from shard_tutorial import data_model_shape
      >>> [data_model_shape(b, h, available=8) for b, h in [(16, 32), (6, 4), (5, 8), (7, 3)]]
      [(2, 4), (2, 4), (1, 8), (7, 1)]
      >>> data_model_shape(16, 32, available=1)
      (1, 1)
    """
    if available is None:
        available = jax.device_count()
    for name, length in (("batch", batch), ("hidden", hidden)):
        if length < 0:
            msg = f"{name} must be at least 0, got {length}"
            raise ValueError(msg)
    if available < 1:
        msg = f"available must be at least 1, got {available}"
        raise ValueError(msg)
    shapes = [
        (data, model)
        for data in range(1, available + 1)
        for model in range(1, available // data + 1)
        if batch % data == 0 and hidden % model == 0
    ]
    return max(shapes, key=lambda s: (s[0] * s[1], min(s) > 1, s[1]))


def data_model_mesh(batch: int, hidden: int, *, traced: bool = False) -> Mesh:
    """The 2-D mesh, axes ``("data", "model")``, for tensor parallelism on these shapes.

    Its shape is :func:`data_model_shape`; it spans the first ``data * model``
    devices, and is built once per shape. Like :func:`data_mesh_for`, a
    function being traced (``traced=True``) gets Auto axes, so the mesh stays
    out of its caller's types; otherwise the axes are Explicit.

    Args:
      batch: rows of the input, split over ``"data"``.
      hidden: hidden units, split over ``"model"``.
      traced: whether the caller is inside ``jax.jit``, ``jax.grad``...

    Returns:
      A :class:`jax.sharding.Mesh` with axes ``"data"`` and ``"model"``.

    Examples:
      On 8 devices:

      >>> from shard_tutorial import data_model_mesh
      >>> mesh = data_model_mesh(16, 32)
      >>> dict(mesh.shape), [t.name for t in mesh.axis_types]
      ({'data': 2, 'model': 4}, ['Explicit', 'Explicit'])
      >>> dict(data_model_mesh(3, 5).shape)
      {'data': 1, 'model': 5}
    """
    data, model = data_model_shape(batch, hidden)
    return _mesh_2d(data, model, AxisType.Auto if traced else AxisType.Explicit)


@functools.cache
def _mesh_2d(data: int, model: int, axis_type: AxisType) -> Mesh:
    return jax.make_mesh(
        (data, model),
        (DATA_AXIS, MODEL_AXIS),
        axis_types=(axis_type, axis_type),
        devices=jax.devices()[: data * model],
    )


def place(tree: T, sharding: NamedSharding) -> T:
    """Put every array in ``tree`` on ``sharding``'s devices: ``jax.device_put``, fast on CPU.

    The result is what ``jax.device_put(tree, sharding)`` returns. The difference
    is speed on the CPU backend, where every device is a slice of host memory:
    an array on a single CPU device (or a NumPy array) is cut into blocks through
    a NumPy view of its buffer, with no copy, instead of by the device-to-device
    copy program XLA would compile and run, which costs about as much as the
    computation it feeds. Every other concrete array (on an accelerator, already
    sharded) goes to ``jax.device_put``, and so does a traced one (inside
    ``jax.jit``, ``jax.grad``, ``jax.vmap``) bound for an Explicit mesh. A traced
    array bound for an Auto mesh (see :func:`data_mesh_for`) goes to
    ``jax.lax.with_sharding_constraint``, which, unlike ``jax.device_put``, keeps
    the spec on the right axis when ``jax.vmap`` adds a batch axis.

    Args:
      tree: an array, or a pytree of arrays (NumPy or JAX), such as an
        ``nnx.State``.
      sharding: where the arrays go, e.g. ``NamedSharding(mesh, P("data"))``.

    Returns:
      ``tree`` with every array laid out as ``sharding`` says.

    Examples:
      >>> import jax.numpy as jnp
      >>> from jax.sharding import NamedSharding, PartitionSpec as P
      >>> from shard_tutorial import data_mesh, place
      >>> mesh = data_mesh(16)
      >>> x = place(jnp.arange(16), NamedSharding(mesh, P("data")))
      >>> [shard.data.tolist() for shard in x.addressable_shards][:3]
      [[0, 1], [2, 3], [4, 5]]
    """
    return jax.tree.map(functools.partial(_place_array, sharding=sharding), tree)


def _place_array(array: object, sharding: NamedSharding) -> jax.Array:
    if isinstance(array, jax.core.Tracer):
        if AxisType.Explicit in sharding.mesh.axis_types:
            return jax.device_put(array, sharding)
        # Not jax.device_put: under jax.vmap it would leave the spec on the batch axis.
        return jax.lax.with_sharding_constraint(array, sharding)
    if isinstance(array, jax.Array) and array.sharding == sharding:
        return array  # already there
    if isinstance(array, np.ndarray) or (
        isinstance(array, jax.Array)
        and len(array.sharding.device_set) == 1
        and next(iter(array.sharding.device_set)).platform == "cpu"  # type: ignore[attr-defined]
    ):
        host = np.asarray(array)  # a CPU array's buffer viewed from NumPy: no copy
        # dtype: in a cluster, a process may hold no block of a small array (the mesh
        # spans only the first process' devices); it still takes part, with no data.
        return jax.make_array_from_callback(
            host.shape, sharding, host.__getitem__, dtype=host.dtype
        )
    return jax.device_put(array, sharding)
