"""Problem "Ulysses attention": the sequence split over the devices, re-split over the heads.

DeepSpeed-Ulysses (Jacobs et al., 2023, arXiv:2309.14509) splits one long
sequence over the devices of a ``"seq"`` mesh axis, as ring attention does, but
communicates differently: one :func:`jax.lax.all_to_all` each re-cuts ``q``,
``k`` and ``v`` from blocks of tokens to blocks of heads, so that every device
holds *all* the tokens of ``H / n`` heads. Attention is then an ordinary,
local computation, head by head; a last all-to-all cuts the output back into
blocks of tokens. It needs ``n <= H`` (each device must get a head), sends a
fixed four all-to-alls whatever ``n``, and under a causal mask every device does
the same work.
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

__all__ = ["PROBLEM", "causal_work", "ulysses_attention"]


def ulysses_attention(q: jax.Array, k: jax.Array, v: jax.Array, causal: bool = False) -> jax.Array:
    """Multi-head attention, the tokens split over ``"seq"``, re-split over the heads by all-to-alls.

    For each head ``h``: ``softmax(q[:, h] @ k[:, h].T / sqrt(K)) @ v[:, h]``.
    The mesh is ``axis_mesh("seq", math.gcd(T, H))``: the most devices, up to
    all of them, that divide both the sequence length ``T`` and the number of
    heads ``H``. The tokens (axis 0) of ``q``, ``k`` and ``v`` are split over
    ``"seq"``, and so are the tokens of the result. With ``causal=True``, token
    ``i`` attends to tokens ``0..i`` only.

    This problem practises Ulysses sequence parallelism with ``jax.shard_map``
    and ``jax.lax.all_to_all``: one all-to-all each re-cuts ``q``, ``k`` and
    ``v`` from blocks of tokens to blocks of heads (every device then holds all
    ``T`` tokens of ``H / n`` heads), each device computes the attention of its
    heads alone, and one all-to-all cuts the output back into blocks of tokens.
    On ``n`` devices each device may send four all-to-alls of its ``(T / n, H,
    K)`` block, ``(n - 1) / n`` of it each, and, where ``k`` comes to 64 KiB or
    more and outweighs a device's scores twice over, must hold less than a
    device that holds every head of ``k`` (the checker's budget, read from the
    compiled program); no ppermute and no all-gather.

    How the arguments arrive: placed on the Explicit mesh ``axis_mesh("seq",
    math.gcd(T, H))``, ``q``, ``k`` and ``v`` each split by tokens
    (``P("seq", None, None)``); ``causal`` as a Python bool.

    Args:
      q: queries, shape (T, H, K) (tokens, heads, head size), floating point.
      k: keys, shape (T, H, K), the dtype of ``q``.
      v: values, shape (T, H, K), the dtype of ``q``.
      causal: whether token ``i`` sees only the tokens up to ``i`` (a Python bool).

    Returns:
      The attention output, shape (T, H, K), the dtype of ``q``, its tokens split
      over ``"seq"`` (``P("seq", None, None)``).

    Raises:
      TypeError: for a non-array, a dtype that is not floating point, arrays of
        different dtypes, or a ``causal`` that is not a bool.
      ValueError: for a wrong rank, shapes that differ, or T, H or K of 0.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial import ulysses_attention
      >>> q = jnp.array([[[0.0], [1.0]], [[1.0], [1.0]]])  # T=2 tokens, H=2 heads, K=1
      >>> k = jnp.array([[[1.0], [0.0]], [[1.0], [2.0]]])
      >>> v = jnp.array([[[2.0], [4.0]], [[6.0], [0.0]]])
      >>> ulysses_attention(q, k, v)[:, 0, 0]  # head 0: equal scores, so the mean of v
      Array([4., 4.], dtype=float32)
      >>> ulysses_attention(q, k, v, causal=True)[:, 0, 0]  # token 0 sees itself only
      Array([2., 4.], dtype=float32)

      On 8 devices, 16 tokens and 4 heads use 4 devices (4 divides both):

      >>> out = ulysses_attention(*(jnp.ones((16, 4, 2)),) * 3)
      >>> dict(out.sharding.mesh.shape), tuple(out.sharding.spec), out.addressable_shards[0].data.shape
      ({'seq': 4}, ('seq', None, None), (4, 4, 2))
    """
    _check_inputs(q, k, v, causal)
    length, heads = q.shape[0], q.shape[1]
    traced = any(isinstance(a, jax.core.Tracer) for a in (q, k, v))
    mesh = axis_mesh("seq", math.gcd(length, heads), traced=traced)  # Auto axes when traced
    tokens = NamedSharding(mesh, P("seq", None, None))  # each device: a block of tokens
    q, k, v = (place(a, tokens) for a in (q, k, v))
    return _ulysses(mesh, bool(causal))(q, k, v)


def _check_inputs(q: object, k: object, v: object, causal: object) -> None:
    check_attention_inputs(
        q, k, v, causal, layout="(T, H, K)", sizes="one token, one head and one column"
    )


def _tokens_to_heads(x: jax.Array) -> jax.Array:
    """(T / n, H, K) on each device -> (T, H / n, K): cut the heads, join the tokens."""
    return jax.lax.all_to_all(x, "seq", split_axis=1, concat_axis=0, tiled=True)


def _heads_to_tokens(x: jax.Array) -> jax.Array:
    """(T, H / n, K) on each device -> (T / n, H, K): cut the tokens, join the heads."""
    return jax.lax.all_to_all(x, "seq", split_axis=0, concat_axis=1, tiled=True)


def _attend_by_heads(q: jax.Array, k: jax.Array, v: jax.Array, *, causal: bool) -> jax.Array:
    """One device: its block of tokens in, all tokens of its heads attended to, its block out."""
    dtype = q.dtype
    q, k, v = (_tokens_to_heads(a) for a in (q, k, v))  # every token, H / n heads
    wide = jnp.promote_types(dtype, jnp.float32)  # the softmax in at least float32
    q, k, v = (a.astype(wide) for a in (q, k, v))
    scores = jnp.einsum("thd,shd->hts", q, k) / math.sqrt(q.shape[2])  # (H / n, T, T)
    if causal:  # every device holds all T tokens, in order: positions are 0..T-1
        length = q.shape[0]
        seen = jnp.arange(length)[None, :] <= jnp.arange(length)[:, None]
        scores = jnp.where(seen[None], scores, -jnp.inf)
    out = jnp.einsum("hts,shd->thd", jax.nn.softmax(scores, axis=2), v)  # (T, H / n, K)
    return _heads_to_tokens(out.astype(dtype))


@functools.cache
def _ulysses(mesh: Mesh, causal: bool) -> Callable[[jax.Array, jax.Array, jax.Array], jax.Array]:
    """Build, once per mesh and mask, the compiled Ulysses attention."""
    tokens = P("seq", None, None)
    return jax.jit(
        jax.shard_map(
            functools.partial(_attend_by_heads, causal=causal),
            mesh=mesh,
            in_specs=(tokens, tokens, tokens),  # each device: its block of tokens
            out_specs=tokens,
        )
    )


def causal_work(length: int, heads: int, devices: int) -> np.ndarray:
    """The scores each device computes unmasked in causal Ulysses attention, read from its heads.

    Runs the re-split of :func:`ulysses_attention` on ``devices`` devices with
    the positions of the tokens in place of the queries (an all-to-all from
    blocks of tokens to blocks of heads), and counts on each device the (query,
    key) pairs of each of its heads with the key at or before the query: the
    scores causal attention needs. Every device holds all ``length`` tokens of
    ``heads / devices`` heads, so every device has the same work (compare
    :func:`shard_tutorial.problems.ring_attention.causal_work`).

    Args:
      length: the sequence length T; ``devices`` must divide it.
      heads: the number of heads H; ``devices`` must divide it.
      devices: how many devices share them, at most ``jax.device_count()``.

    Returns:
      An int64 array of shape (devices,): the unmasked scores of each device.

    Raises:
      ValueError: if ``devices`` does not divide ``length`` and ``heads``, or
        there are too few devices.

    Examples:
      On 4 of 8 devices, 8 tokens and 4 heads: one head each, 36 scores a head.

      >>> from shard_tutorial.problems.ulysses_attention import causal_work
      >>> causal_work(8, 4, 4)
      array([36, 36, 36, 36])
    """
    if devices >= 1 and (length < 1 or heads < 1 or length % devices or heads % devices):
        msg = f"length and heads must be positive multiples of {devices}, got {length}, {heads}"
        raise ValueError(msg)
    if devices < 1 or devices > jax.device_count():
        msg = f"devices must be between 1 and {jax.device_count()}, got {devices}"
        raise ValueError(msg)
    positions = np.broadcast_to(np.arange(length, dtype=np.int32)[:, None], (length, heads))
    mesh = axis_mesh("seq", devices)  # all of them: devices divides itself
    tokens = NamedSharding(mesh, P("seq", None))
    counted = _count_unmasked(mesh)(place(jnp.asarray(positions), tokens))
    return np.asarray(counted, dtype=np.int64)


@functools.cache
def _count_unmasked(mesh: Mesh) -> Callable[[jax.Array], jax.Array]:
    def count(mine: jax.Array) -> jax.Array:
        # As _tokens_to_heads: (T / n, H) -> (T, H / n), each column a head's positions.
        theirs = jax.lax.all_to_all(mine, "seq", split_axis=1, concat_axis=0, tiled=True)
        pairs = theirs.T[:, None, :] <= theirs.T[:, :, None]  # (heads, query, key)
        return jnp.sum(pairs, dtype=jnp.int32)[None]

    return jax.jit(jax.shard_map(count, mesh=mesh, in_specs=P("seq", None), out_specs=P("seq")))


def _unsharded(q: jax.Array, k: jax.Array, v: jax.Array, causal: bool = False) -> jax.Array:
    scores = jnp.einsum("thd,shd->hts", q, k) / math.sqrt(q.shape[2])
    if causal:
        scores = jnp.where(jnp.tril(jnp.ones(scores.shape[1:], bool))[None], scores, -jnp.inf)
    return jnp.einsum("hts,shd->thd", jax.nn.softmax(scores, axis=2), v)


def _attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    causal: bool,
    *,
    scale: float | None = None,
    offsets: np.ndarray | None = None,
) -> np.ndarray:
    """Attention head by head in NumPy, with a classic mistake if asked.

    ``scale``: what the scores are multiplied by (right: ``1 / sqrt(K)``).
    ``offsets``: per head, what is added to the queries' positions before the
    causal mask compares them with the keys' (right: 0).
    """
    length, heads, depth = q.shape
    scale = 1 / np.sqrt(depth) if scale is None else scale
    out = np.empty(q.shape, np.float64)
    for h in range(heads):
        scores = q[:, h] @ k[:, h].T * scale
        if causal:
            shift = 0 if offsets is None else offsets[h]
            seen = np.arange(length)[None, :] <= np.arange(length)[:, None] + shift
            scores = np.where(seen, scores, -np.inf)
        weights = np.exp(scores - scores.max(axis=1, keepdims=True))
        out[:, h] = (weights / weights.sum(axis=1, keepdims=True)) @ v[:, h]
    return out


def _oracle(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = False) -> np.ndarray:
    return _attention(precise(q), precise(k), precise(v), bool(causal)).astype(q.dtype)


def _explain(case: Case, _expected: np.ndarray, received: np.ndarray) -> str | None:
    """Recognise the classic mistakes of Ulysses attention in a wrong output.

    - the scores scaled by ``1 / K`` or not at all, not ``1 / sqrt(K)``;
    - no re-split: each device attended over its own block of tokens only;
    - under the causal mask, the queries' positions counted from the device's
      old block of tokens (``me * T / n``, as ring attention counts them), when
      after the all-to-all every device holds every token in order.

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.problem import Case
      >>> from shard_tutorial.problems.ulysses_attention import _attention, _explain
      >>> rng = np.random.default_rng(0)
      >>> q, k, v = (rng.normal(size=(8, 2, 4)) for _ in range(3))
      >>> case = Case("c", (q, k, v, False))
      >>> print(_explain(case, None, _attention(q, k, v, False, scale=1.0)))
      The scores were not scaled: ...
    """
    q, k, v = (precise(np.asarray(a)) for a in case.args[:3])
    causal = bool(case.args[3]) if len(case.args) > 3 else False
    got = precise(np.asarray(received))
    if got.shape != q.shape:
        return None
    length, heads, depth = q.shape

    def close(answer: np.ndarray) -> bool:
        return bool(np.allclose(got, answer, rtol=1e-3, atol=1e-4))

    if depth > 1:
        if close(_attention(q, k, v, causal, scale=1.0)):
            return (
                "The scores were not scaled: each head's q @ k.T must be divided by "
                f"sqrt(K) = sqrt({depth})"
            )
        if close(_attention(q, k, v, causal, scale=1.0 / depth)):
            return (
                f"The scores were divided by K = {depth}, not by sqrt(K): softmax(q @ k.T "
                "/ sqrt(K)) keeps the scores' spread the same whatever the head size"
            )
    for devices in device_counts(length):
        rows = length // devices
        local = np.concatenate(
            [
                _attention(q[b : b + rows], k[b : b + rows], v[b : b + rows], causal)
                for b in range(0, length, rows)
            ]
        )
        if close(local):
            return (
                f"Each of {devices} devices attended over its own {rows} tokens only: q, k "
                "and v must be re-split from tokens to heads (jax.lax.all_to_all) so that "
                "every query meets every key of its head"
            )
    if causal:
        for devices in device_counts(math.gcd(length, heads)):
            owner = np.arange(heads) // (heads // devices)  # the device that holds each head
            shifted = _attention(q, k, v, True, offsets=owner * (length // devices))
            if close(shifted):
                return (
                    f"On {devices} devices, the causal mask counted the queries' positions "
                    "from the device's own block of tokens (me * T / n, as ring attention "
                    "does): after the all-to-all every device holds all T tokens in order, "
                    "at positions 0..T-1"
                )
    return None


def _case(
    rng: np.random.Generator,
    label: str,
    shape: tuple[int, int, int],
    causal: bool,
    dtype: Any = np.float32,
    spread: float = 1.0,
) -> Case:
    q, k, v = (rng.normal(scale=spread, size=shape).astype(dtype) for _ in range(3))
    return Case(label, (q, k, v, causal))


def _generate(rng: np.random.Generator) -> Case:
    """One random case: T and H multiples of a device count up to 8, K up to 8, causal or not."""
    devices = int(rng.integers(1, 9))
    length, heads = devices * int(rng.integers(1, 4)), devices * int(rng.integers(1, 3))
    depth, causal = int(rng.integers(1, 9)), bool(rng.random() < 0.5)
    label = f"random: T={length}, H={heads}, K={depth}, causal={causal}"
    return _case(rng, label, (length, heads, depth), causal)


def _cases() -> list[Case]:
    rng = np.random.default_rng(20261128)
    example = (
        np.array([[[0.0], [1.0]], [[1.0], [1.0]]], np.float32),
        np.array([[[1.0], [0.0]], [[1.0], [2.0]]], np.float32),
        np.array([[[2.0], [4.0]], [[6.0], [0.0]]], np.float32),
    )
    return [
        Case("example from the problem statement", (*example, False)),
        Case("the example, causal", (*example, True)),
        _case(rng, "T=16, H=8, K=4, causal, large scores: one head per device on 8",
              (16, 8, 4), True, spread=3.0),
        _case(rng, "T=16, H=4, K=2: 4 of 8 devices, as H allows", (16, 4, 2), False),
        _case(rng, "T=12, H=6, K=3, causal: 6 of 8 devices", (12, 6, 3), True),
        _case(rng, "T=5, H=3, K=2: T and H share no divisor, one device", (5, 3, 2), False),
        _case(rng, "T=8, H=8, K=4, causal, bfloat16", (8, 8, 4), True, dtype=jnp.bfloat16),
        _case(rng, "T=64, H=8, K=32, causal", (64, 8, 32), True),
    ]  # fmt: skip


def _mesh(args: tuple[Any, ...], devices: int) -> tuple[int, ...]:
    """The contract's mesh: ``axis_mesh("seq", gcd(T, H))``, the most devices that divide both."""
    length, heads = np.shape(args[0])[:2]
    return (usable_device_count(math.gcd(int(length), int(heads)), devices),)


def _block(args: tuple[Any, ...]) -> int:
    """The bytes of one device's block of ``k`` on the contract's mesh (``k`` whole on one)."""
    k = args[1]
    n = _mesh(args, jax.device_count())[0]
    return int(np.size(k)) // n * np.dtype(k.dtype).itemsize


def _whole(args: tuple[Any, ...]) -> int:
    """The bytes of the whole of ``k``: what a device holding every head of it holds."""
    return int(np.size(args[1])) * np.dtype(args[1].dtype).itemsize


TECHNIQUE = Technique(
    collectives=(("all-to-all",),),
    forbidden=(
        Forbidden(
            "all-gather",
            "gathering k and v puts every head of every token on each device, which Ulysses "
            "avoids: re-split q, k and v from tokens to heads with all-to-alls instead",
        ),
        Forbidden(
            "collective-permute",
            "passing blocks round a ring of ppermutes is ring attention, another technique; "
            "this problem practises the all-to-alls of Ulysses",
        ),
        Forbidden(
            "all-reduce",
            "an all-reduce as large as a block of k gathers it (a psum of zero-padded "
            "blocks): re-split q, k and v with all-to-alls instead",
            at_least=lambda args: max(1, _whole(args) // 8),
        ),
        Forbidden(
            "reduce-scatter",
            "a reduce-scatter as large as a block of k sums zero-padded blocks: re-split "
            "q, k and v with all-to-alls instead",
            at_least=lambda args: max(1, _whole(args) // 8),
        ),
    ),
    axis="seq",
)
"""What a solution must do besides computing the right values (the statement's
"This problem practises" paragraph says it in words)."""


def _arrange(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The arguments as the contract says they arrive: ``q``, ``k``, ``v`` split by tokens."""
    q, k, v, causal = args
    mesh = axis_mesh("seq", math.gcd(*np.shape(q)[:2]))
    return (*place((q, k, v), NamedSharding(mesh, P("seq", None, None))), causal)


def _limits(args: tuple[Any, ...]) -> dict[str, float]:
    """Four all-to-alls of a block; and less held than every head of ``k``.

    ``sent``: each of the ``n`` devices sends ``(n - 1) / n`` of its ``(T / n,
    H, K)`` block in each of four all-to-alls (``q``, ``k``, ``v`` to heads, the
    output back to tokens; :func:`shard_tutorial.collective_costs.ring_bytes`); nothing
    on one device; a ``bfloat16`` block counted as ``float32``, as XLA's CPU
    backend sends it. ``held``: the buffers XLA assigns a device for any one
    program of the call (arguments, outputs and temporaries, and what the
    call's earlier programs left alive) must come to less than the whole of
    ``k`` besides what Ulysses needs: eight blocks (its own of ``q``, ``k``,
    ``v``, the same re-split, the output in both layouts) and two copies of the
    float32 scores of its ``H / n`` heads (the scores and their softmax).
    Stated only on several devices, where ``k`` comes to at least
    :data:`HELD_FROM` bytes (below that XLA's other buffers outweigh the blocks)
    and where the scores of a device's heads come to at most half of ``k``
    (``T / n <= K / 2``; beyond, a device's memory is its scores, and one that
    gathers ``k`` and ``v`` but keeps one copy of its scores holds as little):
    measured in tests/problems/test_ulysses_attention.py.

    Examples:
      >>> import jax, numpy as np
      >>> from shard_tutorial.problems.ulysses_attention import _limits
      >>> n = min(jax.device_count(), 8)
      >>> args = (np.ones((16, 8, 4), np.float32),) * 3 + (False,)
      >>> _limits(args) == {"sent": 4 * (n - 1) / n * (16 * 8 * 4 // n) * 4}
      True
    """
    q = args[0]
    length, heads, _ = np.shape(q)
    n = _mesh(args, jax.device_count())[0]
    block = _block(args)
    # Counted as XLA's CPU backend sends it (bfloat16 as float32: bytes_per_number).
    sent_block = block // np.dtype(q.dtype).itemsize * bytes_per_number(q.dtype)
    limits: dict[str, float] = {"sent": 4 * (n - 1) / n * sent_block}
    whole = _whole(args)
    scores = (heads // n) * length * length * max(4, np.dtype(q.dtype).itemsize)
    if n > 1 and whole >= HELD_FROM and 2 * scores <= whole:
        limits["held"] = 8 * block + 2 * scores + whole - 1
    return limits


HELD_FROM = 64 * 1024
"""The size of ``k`` from which the budget limits what is held (bytes)."""


BUDGET = Budget(
    _limits,
    "Ulysses sends four all-to-alls, (n - 1) / n of a device's block of tokens each, and "
    "no device ever holds every head of k: gathering k and v, or collecting every block, "
    "holds more",
)
"""What a solution may send and hold per device: four all-to-alls, less than every head."""


def _refusals() -> list[Case]:
    """One input per clause of the statement's "Raises" section, with the error it names."""
    q = k = v = np.ones((4, 2, 2), np.float32)
    n = q.astype(np.int32)
    return [
        Case("q a list, not an array", (q.tolist(), k, v, False), raises="TypeError"),
        Case("int32 q, k and v: not floating point", (n, n, n, False), raises="TypeError"),
        Case("float16 k, float32 q and v", (q, k.astype(np.float16), v, False), raises="TypeError"),
        Case("causal the string 'False'", (q, k, v, "False"), raises="TypeError"),
        Case("2-D q, k and v: no heads axis", (q[:, 0], k[:, 0], v[:, 0], False), raises="ValueError"),
        Case("k of 3 tokens, q of 4", (q, k[:3], v, False), raises="ValueError"),
        Case("T = 0: no tokens", (q[:0], k[:0], v[:0], False), raises="ValueError"),
        Case("H = 0: no heads", (q[:, :0], k[:, :0], v[:, :0], False), raises="ValueError"),
    ]  # fmt: skip


PROBLEM = Problem(
    name="ulysses_attention",
    title="Ulysses attention",
    reference=ulysses_attention,
    oracle=_oracle,
    make_cases=_cases,
    unsharded=_unsharded,
    rtol=1e-5,
    atol=1e-5,  # float32 softmax over up to 64 keys, summed in another order than NumPy's
    explain=_explain,
    imports=(
        "import math",
        "",
        "import jax",
        "import jax.numpy as jnp",
        "from jax.sharding import NamedSharding",
        "from jax.sharding import PartitionSpec as P",
        "",
        'from shard_tutorial import axis_mesh  # axis_mesh("seq", math.gcd(T, H))',
    ),
    generate=_generate,
    technique=TECHNIQUE,
    mesh=_mesh,
    placement=Placement(axis=0, spec='P("seq", None, None)'),
    arrange=_arrange,
    make_refusals=_refusals,
    folder="scale",
    budget=BUDGET,
)
