"""What a collective costs in bytes: the formulas the pages, the tests and the judge share.

:func:`traffic` says how many bytes each device sends and receives for one
collective over ``n`` devices, and how many rounds of messages it takes, under the
standard algorithms (:data:`ALGORITHMS`; :mod:`shard_tutorial.communication` describes
them and turns bytes into time). :func:`full_size` reads the size it takes from a
collective of a compiled program (:class:`~shard_tutorial.compiled.Collective`),
:func:`ring_bytes` gives the bytes each device sends for one, and :func:`sent_by`
adds them up for a whole program, as often as each runs: the figure the checker's
budgets and :func:`shard_tutorial.explain.explain` count.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from shard_tutorial.compiled import Collective, group_size, parse_runs

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "Traffic",
    "full_size",
    "ring_bytes",
    "sent_by",
    "traffic",
    "uncounted",
]

Algorithm = Literal["direct", "ring", "bidirectional ring"]

ALGORITHMS: tuple[Algorithm, ...] = ("direct", "ring", "bidirectional ring")
"""The algorithms :func:`traffic` models."""

_KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")


@dataclasses.dataclass(frozen=True)
class Traffic:
    """What one collective costs each device under one algorithm.

    Attributes:
      sent: bytes each device sends, pieces it forwards included.
      received: bytes each device receives (the same as ``sent``: in these
        algorithms every device plays the same part).
      busiest_link: bytes that cross the busiest one-way link out of a device;
        with one link (``"direct"``, ``"ring"``) that is ``sent``.
      rounds: messages in a row, each waiting for the one before: the number of
        latencies the collective pays.
    """

    sent: float
    received: float
    busiest_link: float
    rounds: int


def traffic(kind: str, devices: int, size: float, algorithm: Algorithm = "ring") -> Traffic:
    """The bytes each device sends and receives for a collective, and its rounds.

    With ``n`` devices and ``S`` = ``size`` (the larger of the operand and the
    result on one device), each device sends:

    ========================  ===============  ===============  ======================
    collective                direct           ring             bidirectional ring
    ========================  ===============  ===============  ======================
    all-gather                (n-1)/n S        (n-1)/n S        (n-1)/n S, half each way
    reduce-scatter            (n-1)/n S        (n-1)/n S        (n-1)/n S, half each way
    all-reduce                2 (n-1)/n S      2 (n-1)/n S      2 (n-1)/n S, half each way
    all-to-all                (n-1)/n S        (n-1)/2 S        sum of min(k, n-k) S/n
    collective-permute        S                S                S
    ========================  ===============  ===============  ======================

    An all-reduce is a reduce-scatter followed by an all-gather, so it costs
    their sum. On a ring an all-to-all forwards each block ``k`` times to reach
    the device ``k`` places on; both ways round, ``min(k, n - k)`` times. A
    collective-permute is modelled as the ring shift by one, the pattern of a
    halo exchange: one message to a neighbour.

    Args:
      kind: the HLO collective, e.g. ``"all-reduce"`` (see
        :data:`shard_tutorial.compiled.KINDS`).
      devices: how many devices take part together (the group size).
      size: bytes, the larger of the operand and the result on one device.
      algorithm: one of :data:`ALGORITHMS`.

    Returns:
      The :class:`Traffic`; all zero for one device (nothing moves).

    Raises:
      ValueError: for an unknown ``kind`` or ``algorithm``, or fewer than one device.

    Examples:
      An all-reduce of 1 MB over 8 devices sends 1.75 MB from each, over a ring
      or straight to each device:

      >>> from shard_tutorial.collective_costs import traffic
      >>> traffic("all-reduce", 8, 1e6)
      Traffic(sent=1750000.0, received=1750000.0, busiest_link=1750000.0, rounds=14)
      >>> traffic("all-reduce", 8, 1e6, "bidirectional ring")
      Traffic(sent=1750000.0, received=1750000.0, busiest_link=1000000.0, rounds=8)
      >>> [traffic("all-to-all", 8, 1e6, a).sent for a in ("direct", "ring", "bidirectional ring")]
      [875000.0, 3500000.0, 2000000.0]
    """
    if kind not in _KINDS:
        msg = f"kind must be one of {_KINDS}, got {kind!r}"
        raise ValueError(msg)
    if algorithm not in ALGORITHMS:
        msg = f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}"
        raise ValueError(msg)
    if devices < 1:
        msg = f"devices must be at least 1, got {devices}"
        raise ValueError(msg)
    n = devices
    if n == 1:
        return Traffic(0.0, 0.0, 0.0, 0)
    block = size / n
    if kind == "collective-permute":
        return Traffic(float(size), float(size), float(size), 1)
    if kind == "all-to-all":
        if algorithm == "direct":
            sent = (n - 1) * block
            return Traffic(sent, sent, sent, 1)
        if algorithm == "ring":
            sent = sum(range(1, n)) * block  # the block k places on is sent k times
            return Traffic(sent, sent, sent, n - 1)
        sent = sum(min(k, n - k) for k in range(1, n)) * block
        one_way = sum(range(1, n // 2 + 1)) * block  # the longer way: ties go this way
        return Traffic(sent, sent, one_way, n // 2)
    phases = 2 if kind == "all-reduce" else 1  # an all-reduce: reduce-scatter, then all-gather
    sent = phases * (n - 1) * block
    if algorithm == "direct":
        return Traffic(sent, sent, sent, phases)
    if algorithm == "ring":
        return Traffic(sent, sent, sent, phases * (n - 1))
    return Traffic(sent, sent, phases * (n // 2) * block, phases * (n // 2))


def full_size(collective: Collective, devices: int | None = None) -> int:
    """The ``size`` :func:`traffic` takes, from a collective of a compiled program.

    The larger of what the collective takes in and gives out on one device:
    its operand when XLA printed or named it (read with
    ``parse_collectives(..., resolve_operands=True)``), or else worked out from
    its result, which is ``n`` times smaller than the operand for a
    reduce-scatter only.

    Args:
      collective: the collective.
      devices: the group's size when the program's text does not print it.

    Examples:
      >>> from shard_tutorial.compiled import Collective
      >>> from shard_tutorial.collective_costs import full_size
      >>> full_size(Collective("reduce-scatter", "f32[2]", 8, "{{0,1,2,3}}"))
      32
      >>> full_size(Collective("reduce-scatter", "f32[2]", 8, "{{0,1,2,3}}", operand_bytes=32))
      32
    """
    if collective.operand_bytes is not None:
        return max(collective.nbytes, collective.operand_bytes)
    if collective.kind == "reduce-scatter":
        n = group_size(collective) or devices
        if n is None:
            msg = f"the group size of {collective} is not in the program's text"
            raise ValueError(msg)
        return collective.nbytes * n
    return collective.nbytes


def sent_by(program: str, devices: int) -> tuple[float, list[Collective]]:
    r"""What each device sends in one call of a compiled program, and the collectives sending it.

    Each collective over more than one device counts as its ring algorithm sends it
    (:func:`ring_bytes`), as often as it runs (:func:`~shard_tutorial.compiled.parse_runs`: once per iteration
    of a loop around it; once where XLA gives the loop no trip count).

    Args:
      program: the program's text (whole, or its :func:`~shard_tutorial.compiled.communication_lines`).
      devices: how many devices it runs on (for collectives that name no groups).

    Returns:
      ``(bytes, collectives)``, a collective listed once for each time it runs.

    Examples:
      >>> from shard_tutorial.collective_costs import sent_by
      >>> program = "\n".join([
      ...     "%body (p: f32[2]) -> f32[2] {",
      ...     "  ROOT %ar = f32[2]{0} all-reduce(%p), replica_groups={{0,1}}, to_apply=%add",
      ...     "}",
      ...     "ENTRY %main (x: f32[2]) -> f32[2] {",
      ...     '  ROOT %w = f32[2]{0} while(%x), condition=%cond, body=%body, '
      ...     'backend_config={"known_trip_count":{"n":"3"}}',
      ...     "}",
      ... ])
      >>> sent, found = sent_by(program, 2)
      >>> sent, len(found)  # 3 all-reduces of 8 bytes over 2 devices, 8 bytes sent each
      (24.0, 3)
    """
    sent, found = 0.0, []
    for collective, runs in parse_runs(program):
        if (collective.group_size or devices) > 1:
            found.extend([collective] * (runs or 1))
            sent += (runs or 1) * ring_bytes(collective, devices)
    return sent, found


def uncounted(program: str, devices: int) -> list[Collective]:
    r"""The collectives over several devices that run in a loop XLA gives no trip count.

    A ``while`` loop whose condition reads values the program computes runs a number
    of times no one can know from the program's text: :func:`sent_by` counts each
    collective in it once, which may be far fewer times than it runs.

    Args:
      program: the program's text (whole, or its communication lines).
      devices: how many devices it runs on (for collectives that name no groups).

    Returns:
      Those collectives, in program order (empty when every loop has a known count).

    Examples:
      >>> from shard_tutorial.collective_costs import uncounted
      >>> program = "\n".join([
      ...     "%body (p: f32[2]) -> f32[2] {",
      ...     "  ROOT %ar = f32[2]{0} all-reduce(%p), replica_groups={{0,1}}, to_apply=%add",
      ...     "}",
      ...     "ENTRY %main (x: f32[2]) -> f32[2] {",
      ...     "  ROOT %w = f32[2]{0} while(%x), condition=%cond, body=%body",
      ...     "}",
      ... ])
      >>> known = 'body=%body, backend_config={"known_trip_count":{"n":"3"}}'
      >>> [c.kind for c in uncounted(program, 2)], uncounted(program.replace("body=%body", known), 2)
      (['all-reduce'], [])
    """
    return [
        collective
        for collective, runs in parse_runs(program)
        if runs is None and (collective.group_size or devices) > 1
    ]


def ring_bytes(collective: Collective, devices: int | None = None) -> float:
    """The bytes each device sends for ``collective`` when it runs as a ring algorithm.

    The usual model of a collective's cost in bandwidth: the ``n`` devices of a
    group pass pieces round a ring, each sending to the next. With ``S`` the
    size of the result on each device (:attr:`~shard_tutorial.compiled.Collective.nbytes`):

    - all-gather: each device sends the ``n - 1`` blocks it does not start
      with, ``(n - 1) / n * S``;
    - reduce-scatter: each device's result is one block of an input ``n``
      times larger, and it sends ``n - 1`` partial blocks, ``(n - 1) * S``;
    - all-reduce: a reduce-scatter then an all-gather, ``2 * (n - 1) / n * S``;
    - all-to-all: each device keeps one of its ``n`` blocks and sends the
      others, ``(n - 1) / n * S``;
    - collective-permute: each device sends its operand once, ``S`` (nothing
      when every device sends to itself, as on one device).

    These are the bytes of the ``"direct"`` algorithm of
    :func:`traffic` (where the formulas live), the
    fewest a device can send: the ring algorithms send as many for all but the
    all-to-all, which a ring forwards. XLA may pick other algorithms; this is
    the figure to compare strategies by, not a measurement.

    Args:
      collective: the collective.
      devices: the group's size when the program's text does not print groups
        (then every device of the program takes part): its device count.

    Raises:
      ValueError: if the group's size is neither in the program's text nor given.

    Examples:
      >>> from shard_tutorial.collective_costs import ring_bytes
      >>> from shard_tutorial.compiled import Collective
      >>> ring_bytes(Collective("all-reduce", "f32[1536]", 6144, "[1,8]<=[8]"))
      10752.0
      >>> ring_bytes(Collective("reduce-scatter", "f32[2,64]", 512, "[1,8]<=[8]"))
      3584.0
    """
    n = collective.group_size if collective.kind == "collective-permute" else None
    n = n or group_size(collective) or devices
    if n is None:
        msg = f"the group size of {collective} is not in the program's text"
        raise ValueError(msg)
    return traffic(collective.kind, n, full_size(collective, n), "direct").sent
