"""Pipeline schedules: which stage runs which microbatch when, their bubble and their memory.

A pipeline's devices each hold consecutive layers (a *stage*); a microbatch's forward
pass goes through them in order, its backward pass in reverse. A *schedule* says in
which order each device runs its forward (F) and backward (B) steps. :func:`schedule`
works out three classic ones by running each device's order against the dependencies
(a forward step needs the stage before to have finished it, a backward step the stage
after), with every step taking one unit of time:

- ``"gpipe"`` (Huang et al., 2019): every forward step, then every backward step;
- ``"1f1b"`` (PipeDream-Flush, Narayanan et al., 2019 and 2021): a few forward steps,
  then one forward and one backward in turn, so a stage holds the activations of at
  most ``n`` microbatches instead of all ``M``;
- ``"interleaved"`` (Narayanan et al., 2021): 1F1B where each device holds ``v``
  smaller chunks of layers (device ``d`` holds chunks ``d, d + n, ...``), so each step
  is ``v`` times shorter and the bubble ``v`` times smaller.

:func:`from_ticks` reads a forward schedule recorded by a real program
(:func:`shard_tutorial.problems.pipeline_forward.pipeline_forward_schedule`), and
:func:`schedule_picture` draws any of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from shard_tutorial.pictures import Picture, grid_axes, svg_source

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["KINDS", "Schedule", "Step", "from_ticks", "schedule", "schedule_picture"]

KINDS = ("gpipe", "1f1b", "interleaved")
"""The schedules :func:`schedule` knows."""


@dataclasses.dataclass(frozen=True)
class Step:
    """One step of a schedule: a device runs one chunk of layers on one microbatch.

    Attributes:
      device: the device (pipeline rank) that runs it.
      start: when it starts, in units of one step.
      kind: ``"F"`` (forward) or ``"B"`` (backward).
      microbatch: which microbatch.
      chunk: which of the device's chunks of layers (0 unless interleaved).
    """

    device: int
    start: int
    kind: str
    microbatch: int
    chunk: int = 0


@dataclasses.dataclass(frozen=True)
class Schedule:
    """A pipeline schedule: every step of every device, each one unit of time long.

    Attributes:
      name: what to call it, e.g. ``"1F1B"``.
      devices: the pipeline's devices, ``n``.
      microbatches: ``M``.
      chunks: chunks of layers per device, ``v`` (1 unless interleaved); a step
        runs ``1 / v`` of a device's layers.
      steps: the steps, in no particular order.
    """

    name: str
    devices: int
    microbatches: int
    chunks: int
    steps: tuple[Step, ...]

    @property
    def span(self) -> int:
        """How long the schedule takes, in steps, from the first start to the last end."""
        return max((s.start + 1 for s in self.steps), default=0)

    @property
    def bubble(self) -> float:
        """The fraction of the devices' time spent idle: 1 - steps / (devices x span).

        Examples:
          >>> from shard_tutorial.pipeline_schedules import schedule
          >>> schedule("gpipe", 4, 8).bubble  # (n - 1) / (M + n - 1)
          0.2727272727272727
        """
        total = self.devices * self.span
        return 1 - len(self.steps) / total if total else 0.0

    def activations(self) -> np.ndarray:
        """Each device's peak of activations held for backward steps, in microbatches.

        A forward step's activations are held from its start to the end of the
        same microbatch's backward step on that chunk; a chunk is ``1 / v`` of a
        device's layers, so it counts ``1 / v`` of a microbatch. (A forward-only
        schedule holds each microbatch's activations for the step alone.)

        Returns:
          One number per device: the most it holds at once, in units of one
          microbatch's activations through all of that device's layers.

        Examples:
          >>> from shard_tutorial.pipeline_schedules import schedule
          >>> schedule("gpipe", 4, 8).activations().tolist()
          [8.0, 8.0, 8.0, 8.0]
          >>> schedule("1f1b", 4, 8).activations().tolist()
          [4.0, 3.0, 2.0, 1.0]
        """
        peaks = np.zeros(self.devices)
        for device in range(self.devices):
            held = np.zeros(self.span + 1)
            mine = [s for s in self.steps if s.device == device]
            backward = {(s.microbatch, s.chunk): s.start for s in mine if s.kind == "B"}
            for step in mine:
                if step.kind == "F":
                    end = backward.get((step.microbatch, step.chunk), step.start) + 1
                    held[step.start : end] += 1 / self.chunks
            peaks[device] = float(np.max(held))
        return peaks

    def grid(self) -> list[list[Step | None]]:
        """The schedule as rows of devices and columns of time: the step, or None (idle).

        Examples:
          >>> from shard_tutorial.pipeline_schedules import schedule
          >>> [["." if s is None else f"{s.kind}{s.microbatch}" for s in row]
          ...  for row in schedule("gpipe", 2, 2).grid()]
          [['F0', 'F1', '.', '.', 'B0', 'B1'], ['.', 'F0', 'F1', 'B0', 'B1', '.']]
        """
        rows: list[list[Step | None]] = [[None] * self.span for _ in range(self.devices)]
        for step in self.steps:
            rows[step.device][step.start] = step
        return rows


def schedule(kind: str, devices: int, microbatches: int, chunks: int = 1) -> Schedule:
    """Work out a classic pipeline schedule, each step one unit of time.

    Each device runs its steps in the order ``kind`` gives it, each as soon as the
    device is free and the step's input is ready: a forward step once the
    previous chunk of layers (on another device) has finished it, a backward step
    once the next chunk has. Backward steps are drawn as long as forward ones
    (in practice they take about twice as long; the bubble's fraction is the same).

    Args:
      kind: one of :data:`KINDS`.
      devices: the pipeline's devices, ``n`` >= 1.
      microbatches: ``M`` >= 1; for ``"interleaved"``, a multiple of ``n``.
      chunks: chunks of layers per device, ``v`` >= 1; more than 1 only for
        ``"interleaved"`` (which needs at least 2).

    Returns:
      The :class:`Schedule`.

    Raises:
      ValueError: for an unknown ``kind``, a count below 1, or counts the
        schedule does not allow.

    Examples:
      >>> from shard_tutorial.pipeline_schedules import schedule
      >>> for kind, v in [("gpipe", 1), ("1f1b", 1), ("interleaved", 2)]:
      ...     s = schedule(kind, 4, 8, chunks=v)
      ...     print(f"{s.name}: {s.span} steps, bubble {s.bubble:.3f}, "
      ...           f"device 0 holds {s.activations()[0]:g} microbatches")
      GPipe: 22 steps, bubble 0.273, device 0 holds 8 microbatches
      1F1B: 22 steps, bubble 0.273, device 0 holds 4 microbatches
      interleaved 1F1B (v=2): 38 steps, bubble 0.158, device 0 holds 5.5 microbatches
    """
    if kind not in KINDS:
        msg = f"kind must be one of {KINDS}, got {kind!r}"
        raise ValueError(msg)
    for name, value in (("devices", devices), ("microbatches", microbatches), ("chunks", chunks)):
        if isinstance(value, bool) or value < 1:
            msg = f"{name} must be a whole number of at least 1, got {value!r}"
            raise ValueError(msg)
    if kind == "interleaved" and (chunks < 2 or microbatches % devices):
        msg = (
            "the interleaved schedule needs chunks >= 2 and microbatches a multiple of "
            f"devices, got chunks={chunks}, microbatches={microbatches}, devices={devices}"
        )
        raise ValueError(msg)
    if kind != "interleaved" and chunks != 1:
        msg = f"chunks must be 1 for {kind!r}, got {chunks}: only 'interleaved' has several"
        raise ValueError(msg)
    orders = [_order(kind, devices, microbatches, chunks, d) for d in range(devices)]
    names = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": f"interleaved 1F1B (v={chunks})"}
    return Schedule(names[kind], devices, microbatches, chunks, _run(orders, devices, chunks))


def _order(kind: str, n: int, m: int, v: int, device: int) -> list[tuple[str, int, int]]:
    """Device ``device``'s steps, in order: (kind, microbatch, chunk)."""
    if kind == "gpipe":
        return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)]
    total = m * v

    def which(k: int, forward: bool) -> tuple[int, int]:
        """Megatron-LM's k-th forward or backward step: (microbatch, chunk)."""
        chunk = (k % (n * v)) // n
        return (k // (n * v)) * n + k % n, chunk if forward else v - 1 - chunk

    warmup = n - device - 1 if kind == "1f1b" else (n - device - 1) * 2 + (v - 1) * n
    warmup = min(warmup, total)
    steps = [("F", *which(k, True)) for k in range(warmup)]
    for k in range(total - warmup):
        steps += [("F", *which(warmup + k, True)), ("B", *which(k, False))]
    steps += [("B", *which(k, False)) for k in range(total - warmup, total)]
    return steps


def _run(orders: list[list[tuple[str, int, int]]], n: int, v: int) -> tuple[Step, ...]:
    """Each device's steps, each at the first time its device and its input allow."""
    last = n * v - 1  # the last chunk of layers (virtual stage)
    done: dict[tuple[str, int, int], int] = {}  # (kind, microbatch, virtual stage) -> end
    free = [0] * n
    position = [0] * n
    steps = []
    while any(p < len(o) for p, o in zip(position, orders, strict=True)):
        progressed = False
        for d in range(n):
            if position[d] == len(orders[d]):
                continue
            kind, micro, chunk = orders[d][position[d]]
            stage = chunk * n + d
            needs = (
                ("F", micro, stage - 1)
                if kind == "F"
                else ("B", micro, stage + 1)
                if stage < last
                else ("F", micro, stage)
            )
            if kind == "F" and stage == 0:
                ready = 0
            elif needs in done:
                ready = done[needs]
            else:
                continue
            start = max(free[d], ready)
            done[(kind, micro, stage)] = start + 1
            free[d] = start + 1
            steps.append(Step(d, start, kind, micro, chunk))
            position[d] += 1
            progressed = True
        if not progressed:
            msg = "the orders wait on each other: no schedule"
            raise RuntimeError(msg)
    return tuple(steps)


def from_ticks(ticks: np.ndarray | Sequence[Sequence[int]], name: str = "GPipe") -> Schedule:
    """The forward schedule a program recorded: ``ticks[s, t]`` is stage s's microbatch at t.

    Args:
      ticks: an integer array of shape (stages, ticks); -1 where a stage ran no
        microbatch.
      name: what to call the schedule.

    Returns:
      A :class:`Schedule` of forward steps, one per recorded microbatch.

    Examples:
      >>> from shard_tutorial.pipeline_schedules import from_ticks
      >>> s = from_ticks([[0, 1, -1], [-1, 0, 1]])
      >>> s.span, s.bubble, s.microbatches
      (3, 0.33333333333333337, 2)
    """
    grid = np.asarray(ticks)
    if grid.ndim != 2:
        msg = f"ticks must be 2-D, (stages, ticks), got shape {grid.shape}"
        raise ValueError(msg)
    steps = tuple(
        Step(int(d), int(t), "F", int(grid[d, t]))
        for d, t in zip(*np.nonzero(grid >= 0), strict=True)
    )
    microbatches = int(grid.max(initial=-1)) + 1
    return Schedule(name, grid.shape[0], microbatches, 1, steps)


def schedule_picture(plan: Schedule, *, width: float = 40.0) -> Picture:
    """Draw a schedule: one row per device, one cell per step, the bubble left empty.

    A forward step is filled with its microbatch's colour, a backward step
    outlined in it on a light box; each is labelled with its microbatch (and, when
    interleaved, a second chunk hatched). Labels sit on boxes of their own, and the
    background is transparent, so the picture reads on light and dark pages.

    Args:
      plan: the schedule.
      width: the widest the picture is drawn, in ``rem``.

    Returns:
      A :class:`~shard_tutorial.pictures.Picture` whose text alternative says,
      device by device, what runs when.

    Examples:
      >>> from shard_tutorial.pipeline_schedules import schedule, schedule_picture
      >>> picture = schedule_picture(schedule("1f1b", 2, 2))
      >>> print(picture.alt)
      1F1B on 2 devices, 2 microbatches, 6 steps; bubble 33%. Device 0: F0, F1, idle, B0, idle, B1. Device 1: idle, F0, B0, F1, B1, idle.
    """
    figure = _figure(plan)
    rows = []
    for d, row in enumerate(plan.grid()):
        cells = [
            "idle"
            if s is None
            else f"{s.kind}{s.microbatch}" + (f" chunk {s.chunk}" if plan.chunks > 1 else "")
            for s in row
        ]
        rows.append(f"Device {d}: {', '.join(cells)}.")
    alt = (
        f"{plan.name} on {plan.devices} devices, {plan.microbatches} microbatches, "
        f"{plan.span} steps; bubble {plan.bubble:.0%}. " + " ".join(rows)
    )
    return Picture(svg_source(figure), alt, css_class="pipeline-schedule", max_width=f"{width}rem")


def _figure(plan: Schedule) -> Figure:
    """The matplotlib figure of :func:`schedule_picture`."""
    from matplotlib.patches import Rectangle  # noqa: PLC0415 (drawing is optional)

    from shard_tutorial.collective_diagrams import (  # noqa: PLC0415
        DEVICE_COLOURS,
        INK,
        LABEL_FILL,
        _ink,
    )

    label_width = 3.2
    span = max(plan.span, 1)
    cell = max(0.45, min(1.0, 24 / span))
    width = label_width + span * cell
    heading = 1.0
    height = heading + plan.devices * 1.0
    fig, ax = grid_axes(width, height)
    box = {"boxstyle": "round,pad=0.2", "facecolor": LABEL_FILL, "edgecolor": "none"}
    title = f"{plan.name}: {plan.devices} devices, {plan.microbatches} microbatches"
    ax.text(0.0, 0.4, f"{title}, bubble {plan.bubble:.0%}", fontsize=9, color=INK, bbox=box,
            va="center")  # fmt: skip
    hatches = ("", "//", "..", "xx")
    for d, row in enumerate(plan.grid()):
        y = heading + d
        ax.text(0.0, y + 0.5, f"device {d}", fontsize=8.5, color=INK, bbox=box, va="center")
        for t, step in enumerate(row):
            x = label_width + t * cell
            if step is None:  # the bubble: an empty frame
                ax.add_patch(Rectangle((x + 0.03, y + 0.1), cell - 0.06, 0.8, facecolor="none",
                                       edgecolor="#8a8a8a", linewidth=0.5, linestyle=":"))  # fmt: skip
                continue
            colour = DEVICE_COLOURS[step.microbatch % len(DEVICE_COLOURS)]
            forward = step.kind == "F"
            ax.add_patch(
                Rectangle((x + 0.03, y + 0.1), cell - 0.06, 0.8,
                          facecolor=colour if forward else LABEL_FILL,
                          edgecolor=colour if not forward else "#333333",
                          linewidth=2.2 if not forward else 0.5,
                          hatch=hatches[step.chunk % len(hatches)])
            )  # fmt: skip
            ax.text(x + cell / 2, y + 0.5, f"{step.microbatch}", ha="center", va="center",
                    fontsize=7 if cell < 0.7 else 8, color=_ink(colour) if forward else INK,
                    bbox={"boxstyle": "square,pad=0.1", "facecolor": colour if forward
                          else LABEL_FILL, "edgecolor": "none"})  # fmt: skip
    return fig
