"""Problem "Ring attention": attention over a sequence split over the devices.

Context parallelism splits one long sequence over the devices of a ``"seq"``
mesh axis: each device holds a block of the queries, keys and values. A query
must see *every* key, so the key and value blocks travel round the ring of
devices with :func:`jax.lax.ppermute`, one hop per step, while each device keeps
its own queries. The softmax over all the keys is accumulated block by block with
a running maximum and a running sum (the online softmax), so that no device ever
holds the whole of ``k`` or ``v``, nor a row of scores over the whole sequence.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial.communication import bytes_per_number
from shard_tutorial.meshes import axis_mesh, device_counts, place, usable_device_count
from shard_tutorial.problem import Budget, Case, Forbidden, Placement, Problem, Technique, precise
from shard_tutorial.validation import check_attention_inputs

__all__ = ["PROBLEM", "causal_work", "ring_attention"]


def ring_attention(q: jax.Array, k: jax.Array, v: jax.Array, causal: bool = False) -> jax.Array:
    """``softmax(q @ k.T / sqrt(D)) @ v``, the sequence split over ``"seq"``, k and v sent round a ring.

    The mesh is ``axis_mesh("seq", T)``: the most devices, up to all of them,
    that divide the sequence length ``T``. The rows (the sequence) of ``q``,
    ``k`` and ``v`` are split over ``"seq"``, and so are the rows of the result.
    With ``causal=True``, query ``i`` attends to keys ``0..i`` only.

    This problem practises context parallelism with ``jax.shard_map`` and
    ``jax.lax.ppermute``: the blocks of ``k`` and ``v`` go round the ring of
    devices, one hop per step, and each device accumulates the softmax of its
    own queries over the blocks as they pass (a running maximum and a running
    sum), so that no device ever holds the whole of ``k`` or ``v``. On ``n``
    devices, each device may send the ``n - 1`` hops of its ``(T / n, D)``
    blocks of ``k`` and ``v``, and must hold less at its peak than a device that
    gathers ``k`` and ``v`` whole (the checker's budget, read from the compiled
    program); no all-gather and no all-to-all.

    How the arguments arrive: each array as a ``jax.Array`` on the default device,
    not split; ``causal`` as a Python bool.

    Args:
      q: queries, shape (T, D), floating point.
      k: keys, shape (T, D), the dtype of ``q``.
      v: values, shape (T, D), the dtype of ``q``.
      causal: whether query ``i`` sees only the keys up to ``i`` (a Python bool).

    Returns:
      The attention output, shape (T, D), the dtype of ``q``, its rows split over
      ``"seq"`` (``P("seq", None)``).

    Raises:
      TypeError: for a non-array, a dtype that is not floating point, arrays of
        different dtypes, or a ``causal`` that is not a bool.
      ValueError: for a wrong rank, shapes that differ, or T or D of 0.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial import ring_attention
      >>> q = jnp.array([[0.0, 0.0], [1.0, 1.0]])
      >>> k = jnp.array([[1.0, 0.0], [0.0, 1.0]])
      >>> v = jnp.array([[2.0, 0.0], [0.0, 4.0]])
      >>> ring_attention(q, k, v)  # equal scores: each row is the mean of v's rows
      Array([[1., 2.],
             [1., 2.]], dtype=float32)
      >>> ring_attention(q, k, v, causal=True)  # row 0 sees key 0 only
      Array([[2., 0.],
             [1., 2.]], dtype=float32)

      On 8 devices, 16 rows are 8 blocks of 2:

      >>> out = ring_attention(jnp.ones((16, 4)), jnp.ones((16, 4)), jnp.ones((16, 4)))
      >>> dict(out.sharding.mesh.shape), tuple(out.sharding.spec), out.addressable_shards[0].data.shape
      ({'seq': 8}, ('seq', None), (2, 4))
    """
    _check_inputs(q, k, v, causal)
    traced = any(isinstance(a, jax.core.Tracer) for a in (q, k, v))
    mesh = axis_mesh("seq", q.shape[0], traced=traced)  # Auto axes when traced
    rows = NamedSharding(mesh, P("seq", None))  # each device gets a block of the sequence
    q, k, v = (place(a, rows) for a in (q, k, v))
    return _ring(mesh, bool(causal))(q, k, v)


def _check_inputs(q: object, k: object, v: object, causal: object) -> None:
    check_attention_inputs(q, k, v, causal, layout="(T, D)", sizes="one row and one column")


def _held_block(device: Any, step: int, devices: int) -> Any:
    """Which block of ``k`` and ``v`` a device holds after ``step`` hops: its own, then the one before."""
    return (device - step) % devices


def _attend_round_the_ring(
    q: jax.Array, k: jax.Array, v: jax.Array, *, causal: bool, devices: int
) -> jax.Array:
    """One device: its queries against every block of k and v, as the blocks come round."""
    me = jax.lax.axis_index("seq")
    rows, depth = q.shape
    dtype = q.dtype
    wide = jnp.promote_types(q.dtype, jnp.float32)  # accumulate in at least float32
    q = q.astype(wide) / math.sqrt(depth)
    mine = me * rows + jnp.arange(rows)  # the positions of this device's queries
    to_next = [(i, (i + 1) % devices) for i in range(devices)]  # (source, destination)
    running_max = jnp.full((rows,), -jnp.inf, wide)
    running_sum = jnp.zeros((rows,), wide)
    out = jnp.zeros((rows, depth), wide)
    for step in range(devices):
        # Pass the blocks on: each device gets the previous device's. (On one device, the
        # ring of one: a hop to itself, which sends nothing.)
        if step > 0 or devices == 1:
            # Not before this step's block is used: else XLA may fetch every block early.
            k, v, out = jax.lax.optimization_barrier((k, v, out))
            k, v = jax.lax.ppermute((k, v), "seq", perm=to_next)
        scores = q @ k.astype(wide).T  # (rows, rows): this block of keys only
        if causal:
            theirs = _held_block(me, step, devices) * rows + jnp.arange(rows)
            scores = jnp.where(theirs[None, :] <= mine[:, None], scores, -jnp.inf)
        # The softmax is unchanged by the maximum it subtracts: no gradient through it.
        new_max = jax.lax.stop_gradient(jnp.maximum(running_max, scores.max(axis=1)))
        rescale = jnp.exp(running_max - new_max)  # brings the terms so far to the new maximum
        weights = jnp.exp(scores - new_max[:, None])
        running_sum = running_sum * rescale + weights.sum(axis=1)
        out = out * rescale[:, None] + weights @ v.astype(wide)
        running_max = new_max
    return (out / running_sum[:, None]).astype(dtype)


@functools.cache
def _ring(mesh: Mesh, causal: bool) -> Callable[[jax.Array, jax.Array, jax.Array], jax.Array]:
    """Build, once per mesh and mask, the compiled ring attention."""
    rows = P("seq", None)
    return jax.jit(
        jax.shard_map(
            functools.partial(_attend_round_the_ring, causal=causal, devices=mesh.shape["seq"]),
            mesh=mesh,
            in_specs=(rows, rows, rows),  # each device: its block of q, k and v
            out_specs=rows,  # each device: the output rows of its queries
        )
    )


def causal_work(length: int, devices: int, *, zigzag: bool = False) -> np.ndarray:
    """The scores each device computes unmasked in causal ring attention, read from the ring.

    Runs the ring of :func:`ring_attention` on ``devices`` devices (the same
    ``ppermute`` pairs and the same block each device holds at each step), with
    the positions of the keys in place of the keys: at each step each device
    counts the (query, key) pairs of its block with the key at or before the
    query, the scores causal attention needs. With the sequence cut into
    ``devices`` consecutive blocks, the last device has the most work and the
    first the least. With ``zigzag``, the sequence is cut into ``2 * devices``
    chunks and device ``i`` holds chunks ``i`` and ``2 * devices - 1 - i`` (an
    early one and a late one; Llama 3's context parallelism): every device does
    the same work.

    Args:
      length: the sequence length T; ``devices`` (or ``2 * devices`` with
        ``zigzag``) must divide it.
      devices: how many devices share the sequence, at most ``jax.device_count()``.
      zigzag: cut the sequence in the zig-zag order rather than consecutively.

    Returns:
      An int64 array of shape (devices, devices): the unmasked scores of each
      device (row) at each step of the ring (column).

    Raises:
      ValueError: if the counts do not divide ``length`` or there are too few devices.

    Examples:
      On 4 of 8 devices, 8 positions:

      >>> from shard_tutorial.problems.ring_attention import causal_work
      >>> causal_work(8, 4).sum(axis=1), causal_work(8, 4, zigzag=True).sum(axis=1)
      (array([ 3,  7, 11, 15]), array([9, 9, 9, 9]))
      >>> causal_work(8, 4)[3]  # the last device: its own block, then 3 full blocks
      array([3, 4, 4, 4])
    """
    blocks = 2 * devices if zigzag else devices
    if devices >= 1 and (length < 1 or length % blocks):
        msg = f"length must be a positive multiple of {blocks}, got {length}"
        raise ValueError(msg)
    if devices < 1 or devices > jax.device_count():
        msg = f"devices must be between 1 and {jax.device_count()}, got {devices}"
        raise ValueError(msg)
    positions = np.arange(length, dtype=np.int32)
    if zigzag:  # device i: chunk i, then chunk 2n - 1 - i
        chunks = np.split(positions, blocks)
        positions = np.concatenate(
            [np.concatenate([chunks[i], chunks[blocks - 1 - i]]) for i in range(devices)]
        )
    mesh = axis_mesh("seq", devices)  # all of them: devices divides itself
    place_rows = NamedSharding(mesh, P("seq"))
    counted = _count_unmasked(mesh, devices)(place(jnp.asarray(positions), place_rows))
    return np.asarray(counted, dtype=np.int64).reshape(devices, devices)


@functools.cache
def _count_unmasked(mesh: Mesh, devices: int) -> Callable[[jax.Array], jax.Array]:
    to_next = [(i, (i + 1) % devices) for i in range(devices)]  # as _attend_round_the_ring

    def count(mine: jax.Array) -> jax.Array:
        theirs, counts = mine, []
        for step in range(devices):
            if step > 0:
                theirs = jax.lax.ppermute(theirs, "seq", perm=to_next)
            counts.append(jnp.sum(theirs[None, :] <= mine[:, None], dtype=jnp.int32))
        return jnp.stack(counts)

    return jax.jit(jax.shard_map(count, mesh=mesh, in_specs=P("seq"), out_specs=P("seq")))


def _unsharded(q: jax.Array, k: jax.Array, v: jax.Array, causal: bool = False) -> jax.Array:
    scores = q @ k.T / math.sqrt(q.shape[1])
    if causal:
        scores = jnp.where(jnp.tril(jnp.ones(scores.shape, bool)), scores, -jnp.inf)
    return jax.nn.softmax(scores, axis=1) @ v


def _softmax_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    scores = q @ k.T / np.sqrt(q.shape[1])
    if causal:
        scores = np.where(np.tril(np.ones(scores.shape, bool)), scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    return (weights / weights.sum(axis=1, keepdims=True)) @ v


def _oracle(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = False) -> np.ndarray:
    return _softmax_attention(precise(q), precise(k), precise(v), bool(causal)).astype(q.dtype)


def _ring_in_numpy(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    devices: int,
    *,
    causal: bool,
    rescale: bool = True,
    held: Callable[[int, int, int], int] = _held_block,
) -> np.ndarray:
    """The ring on ``devices`` devices in NumPy, with a classic mistake if asked.

    ``rescale=False``: the running sum and output are not rescaled when the
    maximum grows. ``held``: the block index the causal mask takes for a device
    at a step (the right one is :func:`_held_block`).
    """
    rows, depth = q.shape[0] // devices, q.shape[1]
    outputs = []
    for me in range(devices):
        mine = me * rows + np.arange(rows)
        queries = q[mine] / np.sqrt(depth)
        top, total, out = np.full(rows, -np.inf), np.zeros(rows), np.zeros((rows, depth))
        for step in range(devices):
            block = (me - step) % devices  # the block this device really holds
            keys = k[block * rows : (block + 1) * rows]
            scores = queries @ keys.T
            if causal:
                theirs = held(me, step, devices) * rows + np.arange(rows)
                scores = np.where(theirs[None, :] <= mine[:, None], scores, -np.inf)
            new = np.maximum(top, scores.max(axis=1))
            with np.errstate(invalid="ignore"):
                factor = np.exp(top - new) if rescale else np.ones(rows)
                weights = np.exp(scores - new[:, None])
            total = total * factor + weights.sum(axis=1)
            out = out * factor[:, None] + weights @ v[block * rows : (block + 1) * rows]
            top = new
        with np.errstate(invalid="ignore", divide="ignore"):
            outputs.append(out / total[:, None])
    return np.concatenate(outputs)


def _explain(case: Case, _expected: np.ndarray, received: np.ndarray) -> str | None:
    """Recognise the classic mistakes of ring attention in a wrong output.

    - the running sum and output not rescaled when the running maximum grows;
    - the causal mask computed for the wrong block: the device's own block at
      every step (a triangle on every block), or the block one step the other
      way round the ring;
    - no ring at all: each device attended to its own block only.

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.problem import Case
      >>> from shard_tutorial.problems.ring_attention import _explain, _ring_in_numpy
      >>> rng = np.random.default_rng(0)
      >>> q, k, v = (rng.normal(size=(8, 2)) for _ in range(3))
      >>> case = Case("c", (q, k, v, False))
      >>> print(_explain(case, None, _ring_in_numpy(q, k, v, 4, causal=False, rescale=False)))
      This is the ring on 4 devices without rescaling...
    """
    q, k, v = (precise(np.asarray(a)) for a in case.args[:3])
    causal = bool(case.args[3]) if len(case.args) > 3 else False
    got = precise(np.asarray(received))
    if got.shape != q.shape:
        return None

    def close(answer: np.ndarray) -> bool:
        return bool(np.allclose(got, answer, rtol=1e-3, atol=1e-4))

    for devices in device_counts(q.shape[0]):
        if close(_ring_in_numpy(q, k, v, devices, causal=causal, rescale=False)):
            return (
                f"This is the ring on {devices} devices without rescaling: when a block "
                "raises a row's running maximum, the running sum and the output so far "
                "were computed against the old maximum and must be multiplied by "
                "exp(old maximum - new maximum) before the new block's terms are added"
            )
        if causal:
            own = _ring_in_numpy(q, k, v, devices, causal=True, held=lambda me, _s, _n: me)
            if close(own):
                return (
                    f"On {devices} devices, every block of keys was masked as if it were the "
                    "device's own (a triangle on each): after s hops a device holds the "
                    "block of device (i - s) mod n, and the mask must compare the positions "
                    "of that block's keys with the queries'"
                )
            other_way = _ring_in_numpy(
                q, k, v, devices, causal=True, held=lambda me, s, n: (me + s) % n
            )
            if close(other_way):
                return (
                    f"On {devices} devices, the causal mask took the block from the wrong "
                    "direction: with perm=[(i, (i + 1) % n)], a device receives from the "
                    "device before it, so after s hops it holds block (i - s) mod n, "
                    "not (i + s) mod n"
                )
        rows = q.shape[0] // devices
        local = np.concatenate(
            [
                _softmax_attention(q[b : b + rows], k[b : b + rows], v[b : b + rows], causal)
                for b in range(0, q.shape[0], rows)
            ]
        )
        if close(local):
            return (
                f"Each of {devices} devices attended to its own block of keys only: the "
                "blocks of k and v must go round the ring (jax.lax.ppermute), so that every "
                "query meets every key"
            )
    return None


def _case(
    rng: np.random.Generator,
    label: str,
    length: int,
    depth: int,
    causal: bool,
    dtype: Any = np.float32,
    spread: float = 1.0,
) -> Case:
    q, k, v = (rng.normal(scale=spread, size=(length, depth)).astype(dtype) for _ in range(3))
    return Case(label, (q, k, v, causal))


def _generate(rng: np.random.Generator) -> Case:
    """One random case: T a multiple of a device count up to 8, D up to 8, causal or not."""
    devices = int(rng.integers(1, 9))
    length, depth = devices * int(rng.integers(1, 5)), int(rng.integers(1, 9))
    causal = bool(rng.random() < 0.5)
    return _case(rng, f"random: T={length}, D={depth}, causal={causal}", length, depth, causal)


def _cases() -> list[Case]:
    rng = np.random.default_rng(20261125)
    example = (
        np.array([[0.0, 0.0], [1.0, 1.0]], np.float32),
        np.array([[1.0, 0.0], [0.0, 1.0]], np.float32),
        np.array([[2.0, 0.0], [0.0, 4.0]], np.float32),
    )
    return [
        Case("example from the problem statement", (*example, False)),
        Case("the example, causal", (*example, True)),
        _case(rng, "T=1: one query, one key", 1, 3, False),
        _case(rng, "T=8, D=4: one row per device on 8", 8, 4, False),
        # Large scores: the running maximum grows from block to block, as rescaling needs.
        _case(rng, "T=16, D=4, causal, large scores", 16, 4, True, spread=3.0),
        _case(rng, "T=12, D=3, causal: 6 of 8 devices", 12, 3, True),
        _case(rng, "T=5, D=2: 5 of 8 devices", 5, 2, False),
        _case(rng, "T=32, D=8", 32, 8, False),
        _case(rng, "T=512, D=64, causal", 512, 64, True),
        # The output in the dtype of q (each a right answer whether its scores are
        # kept in float32 or in the dtype itself: both within the dtype's rounding).
        _case(rng, "T=16, D=4 in bfloat16", 16, 4, False, dtype=jnp.bfloat16),
        _case(rng, "T=8, D=2 in float16, causal", 8, 2, True, dtype=np.float16),
    ]


def _mesh(args: tuple[Any, ...], devices: int) -> tuple[int, ...]:
    """The contract's mesh: ``axis_mesh("seq", T)``, the most devices that divide T."""
    return (usable_device_count(np.shape(args[0])[0], devices),)


def _whole(args: tuple[Any, ...]) -> int:
    """The bytes of the whole of ``k``: what a device holding it whole holds."""
    return int(np.size(args[1])) * np.dtype(args[1].dtype).itemsize


TECHNIQUE = Technique(
    collectives=(("collective-permute",),),
    forbidden=(
        Forbidden(
            "all-gather",
            "gathering k and v whole puts the whole sequence's keys on every device, which "
            "context parallelism exists to avoid: pass the blocks round the ring instead",
        ),
        Forbidden(
            "all-to-all",
            "an all-to-all of heads and tokens is Ulysses sequence parallelism, another "
            "technique; this problem practises the ring of ppermutes",
        ),
        Forbidden(
            "all-reduce",
            "an all-reduce as large as k gathers it whole (a psum of zero-padded blocks): "
            "pass the blocks round the ring instead",
            at_least=_whole,
        ),
    ),
    axis="seq",
)
"""What a solution must do besides computing the right values (the statement's
"This problem practises" paragraph says it in words)."""


def _limits(args: tuple[Any, ...]) -> dict[str, float]:
    """The n - 1 hops of the blocks of k and v; and less held than the whole of k and v.

    ``sent``: each of the ``n`` devices sends its ``(T / n, D)`` blocks of ``k``
    and ``v`` on ``n - 1`` hops. ``held``: the buffers XLA assigns a device for
    any one program of the call (arguments, outputs and temporaries, and what the
    call's earlier programs left alive) must come to less than the whole of ``k``
    and ``v`` besides six blocks: its own of ``q``, ``k``, ``v`` and of the output,
    and two in flight (XLA's buffers differ between versions: a right ring held
    330,756 bytes on jax 0.10 where 0.12 held 164,928). Stated only on several devices and
    where ``k`` and ``v`` come to at least :data:`HELD_FROM` bytes: below that,
    the per-row vectors of every step and XLA's other buffers outweigh the blocks
    (measured in tests/problems/test_ring_attention.py). XLA's ``peak`` cannot
    tell a ring from a gather on the CPU backend: it counts no temporaries.

    Examples:
      >>> import jax, numpy as np
      >>> n = jax.device_count()
      >>> args = (np.ones((16, 4), np.float32),) * 3 + (False,)
      >>> _limits(args) == {"sent": (n - 1) * 2 * (16 // n) * 4 * 4}
      True
      >>> big = (np.ones((512, 64), np.float32),) * 3 + (True,)
      >>> _limits(big).get("held") == (6 * 64 * 64 * 4 + 2 * 512 * 64 * 4 - 1 if n == 8 else None)
      True
    """
    k = args[1]
    length, depth = np.shape(k)
    n = usable_device_count(length, jax.device_count())
    block = (length // n) * depth * np.dtype(k.dtype).itemsize
    limits: dict[str, float] = {
        "sent": (n - 1) * 2 * (length // n) * depth * bytes_per_number(k.dtype)
    }
    whole = 2 * _whole(args)  # k and v
    if n > 1 and whole >= HELD_FROM:
        # Its blocks of q, k, v and out, two more in flight, and all of k and v: a device
        # that gathers k and v holds that and its scores against every key besides.
        limits["held"] = 6 * block + whole - 1
    return limits


HELD_FROM = 64 * 1024
"""The size of ``k`` and ``v`` together from which the budget limits what is held (bytes)."""


BUDGET = Budget(
    _limits,
    "ring attention sends each device's blocks of k and v round the ring, n - 1 hops, "
    "and never holds the whole of k and v: gathering them, or joining the blocks as they "
    "come, holds more",
)
"""What a solution may send and hold per device: the ring's hops, less than gathering."""


def _refusals() -> list[Case]:
    """One input per clause of the statement's "Raises" section, with the error it names."""
    q = k = v = np.ones((4, 2), np.float32)
    n = q.astype(np.int32)
    return [
        Case("q a list, not an array", (q.tolist(), k, v, False), raises="TypeError"),
        Case("int32 q, k and v: not floating point", (n, n, n, False), raises="TypeError"),
        Case("float16 k, float32 q and v", (q, k.astype(np.float16), v, False), raises="TypeError"),
        Case("causal the string 'False'", (q, k, v, "False"), raises="TypeError"),
        Case("1-D q, k and v", (q[0], k[0], v[0], False), raises="ValueError"),
        Case("k of 3 rows, q of 4", (q, k[:3], v, False), raises="ValueError"),
        Case("T = 0: no rows", (q[:0], k[:0], v[:0], False), raises="ValueError"),
        Case("D = 0: no columns", (q[:, :0], k[:, :0], v[:, :0], False), raises="ValueError"),
    ]


PROBLEM = Problem(
    name="ring_attention",
    title="Ring attention",
    reference=ring_attention,
    oracle=_oracle,
    make_cases=_cases,
    unsharded=_unsharded,
    rtol=1e-5,
    atol=1e-5,  # float32 softmax over up to 512 keys, summed in another order than NumPy's
    explain=_explain,
    imports=(
        "import math",
        "",
        "import jax",
        "import jax.numpy as jnp",
        "from jax.sharding import NamedSharding",
        "from jax.sharding import PartitionSpec as P",
        "",
        'from shard_tutorial import axis_mesh  # axis_mesh("seq", T): a mesh that divides T',
    ),
    generate=_generate,
    technique=TECHNIQUE,
    mesh=_mesh,
    placement=Placement(axis=0, spec='P("seq", None)'),
    make_refusals=_refusals,
    folder="parallelism",
    budget=BUDGET,
)
