"""Put a cluster's answers back together: one array from the shards each process holds.

On a cluster (``check(..., processes=2)``) each process of the solution sends the
blocks of the output that it holds; no collective runs to gather them, so a
process that cannot see every device never waits for one. The blocks are put back
together here, each element checked to be held, and held with the same values by
every process that holds it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from shard_tutorial.checking.protocol import Output

__all__ = ["Disagree", "array", "assemble", "combine", "dtype", "items", "own"]


def items(output: Output, payload: bytes) -> list[bytes]:
    """The bytes of each item of a tuple or list a worker described.

    Raises:
      ValueError: if ``output`` has no items, or they do not account for ``payload``
        (never, for an output :func:`~shard_tutorial.checking.protocol.decode_answer`
        read).
    """
    if output.items is None:
        raise ValueError(output.kind)
    parts, offset = [], 0
    for item in output.items:
        size = item.nbytes or 0
        parts.append(payload[offset : offset + size])
        offset += size
    if offset != len(payload):
        raise ValueError(offset)
    return parts


def combine(outputs: list[Output], payloads: list[bytes]) -> tuple[Output, bytes] | str | None:
    """One array from every process' shards of it.

    Returns:
      The array's header and bytes; or a sentence saying why the shards do not
      make one array; or None when each process returned an array of its own on
      one of its devices (or something that is not a ``jax.Array``), to be judged
      process by process.
    """
    if not all(o.kind == "jax.Array" and o.shards is not None for o in outputs):
        return None
    placed = {o.device_ids for o in outputs}
    if len(placed) > 1 and all(len(o.device_ids or ()) == 1 for o in outputs):
        return None  # unsharded: each process computed the whole output on one of its devices
    if len(placed) > 1:
        return (
            "each process returned an array of its own, on its own devices only, not "
            "one array over the cluster's devices: build the mesh from jax.devices() (the devices of "
            "every process), not jax.local_devices()"
        )
    first = outputs[0]
    if any((o.dtype, o.shape) != (first.dtype, first.shape) for o in outputs):
        return "the processes returned arrays of different shapes or dtypes"
    try:
        assembled = assemble(first, outputs, payloads)
    except Disagree as error:
        return str(error)
    whole = dataclasses.replace(
        first,
        shards=None,
        device_ids=None,
        # An item of a tuple: its size is now the whole array's.
        nbytes=None if first.nbytes is None else len(assembled),
        replicas_differ=any(o.replicas_differ for o in outputs),
    )
    return whole, assembled


def own(output: Output, payload: bytes) -> tuple[Output, bytes]:
    """One process' answer, to judge on its own: its arrays made whole from its shards.

    Raises:
      Disagree: if the process does not hold the whole of an array.
    """
    if output.kind == "jax.Array" and output.shards is not None:
        return output, assemble(output, [output], [payload])
    if output.items is not None:
        owned = [
            own(item, part) for item, part in zip(output.items, items(output, payload), strict=True)
        ]
        described = tuple(dataclasses.replace(item, nbytes=len(data)) for item, data in owned)
        return dataclasses.replace(output, items=described), b"".join(data for _, data in owned)
    return output, payload


class Disagree(ValueError):
    """The processes' shards do not make one array."""


def assemble(first: Output, outputs: list[Output], payloads: list[bytes]) -> bytes:
    """The global array's bytes, from every process' shards; each element checked once held."""
    whole: np.ndarray[Any, Any] = np.zeros(first.shape or (), dtype(str(first.dtype)))
    held = np.zeros(whole.shape, bool)
    for process, (output, payload) in enumerate(zip(outputs, payloads, strict=True)):
        offset = 0
        for shard in output.shards or ():
            where = tuple(slice(a, b) for a, b in shard.index)
            size = shard.nbytes
            if size != whole[where].size * whole.itemsize:
                msg = (
                    f"process {process} sent a block of the output of another size than its "
                    "place in the array: the report of its blocks was garbled"
                )
                raise Disagree(msg)
            block = np.frombuffer(payload[offset : offset + size], whole.dtype)
            block = block.reshape(whole[where].shape)
            offset += size
            seen = held[where]
            if not np.array_equal(whole[where][seen], block[seen]):
                msg = (
                    f"process {process} holds other values than another process for the same "
                    "block of the output: did a process compute with data the others did not have?"
                )
                raise Disagree(msg)
            whole[where] = block
            held[where] = True
        if offset != len(payload):
            raise ValueError(offset)
    if not held.all():
        msg = "no process holds part of the output"
        raise Disagree(msg)
    return whole.tobytes()


def array(output: Output, payload: bytes) -> np.ndarray:
    """The values a worker sent, as a read-only NumPy array (never unpickled).

    Raises:
      ValueError: if they are not numbers, or not as many as ``output``'s shape says.
    """
    if output.dtype is None or output.shape is None:
        raise ValueError(output.kind)
    name = output.dtype
    kind = dtype(name)
    # Numbers only: not objects, text, dates, records (structured), raw bytes ("V";
    # bfloat16 and the other ml_dtypes are "V" too, and numbers).
    raw = kind.kind == "V" and type(kind.type).__module__ == "numpy" and kind.names is None
    if kind.kind in "OSUMm" or kind.names is not None or (raw and not _is_ml_dtype(name)):
        raise ValueError(name)
    shape = output.shape
    if len(payload) != math.prod(shape) * kind.itemsize:
        raise ValueError(shape)
    return np.frombuffer(payload, kind).reshape(shape)


def _is_ml_dtype(name: str) -> bool:
    import ml_dtypes  # noqa: PLC0415

    return hasattr(ml_dtypes, name)


def dtype(name: str) -> np.dtype[Any]:
    """The NumPy dtype named ``name``, bfloat16 and JAX's other extra types included.

    Raises:
      ValueError: for a name that is neither NumPy's nor ml_dtypes' (``float0``, a
        structured dtype's description).
    """
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes  # noqa: PLC0415 (bfloat16 and friends, installed with JAX)

        found = getattr(ml_dtypes, name, None)
        if found is None:
            msg = f"not a dtype of numbers: {name}"
            raise ValueError(msg) from None
        return np.dtype(found)
