"""What a collective costs: bytes per device under the standard algorithms, and time.

The cost model the pages, the tests and the judge share. Its byte counts live in
:mod:`shard_tutorial.collective_costs`: :func:`~shard_tutorial.collective_costs.traffic`
says how many bytes each device sends and receives for one collective over ``n``
devices, and how many rounds of messages it takes, under three standard algorithms:

- ``"direct"``: each device sends each piece straight to the device that needs
  it, as over a switch that connects every pair (an NVSwitch inside a GPU node).
  It sends the fewest bytes any algorithm can without reducing inside the
  network; :func:`shard_tutorial.collective_costs.ring_bytes` is its figure.
- ``"ring"``: the devices pass pieces to their next neighbour round a ring, one
  way; a piece meant for a device ``k`` places on is forwarded ``k`` times.
- ``"bidirectional ring"``: the same ring used both ways at once (a TPU's ICI
  axis with its wraparound link), each piece going the shorter way round.

``size`` is always the larger of the collective's operand and result on one device
(:func:`~shard_tutorial.collective_costs.full_size` reads it from a compiled program):
the whole array of an all-reduce or an all-to-all, the gathered result of an
all-gather, the input of a reduce-scatter. :func:`predicted_time` turns a figure into
seconds with the alpha-beta model, ``rounds * latency + bytes on the busiest link /
bandwidth``, for the links in :data:`LINKS`. These are predictions from published
figures, not measurements.

:func:`ring_all_reduce` runs an all-reduce as a ring of :func:`jax.lax.ppermute`
calls (a reduce-scatter phase, then an all-gather phase) and records what every
device holds after every step; :func:`ring_picture` draws it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from shard_tutorial.collective_costs import Algorithm, Traffic, ring_bytes, traffic
from shard_tutorial.compiled import Collective, compiled_text, parse_collectives
from shard_tutorial.pictures import Picture, svg_source

if TYPE_CHECKING:
    import jax
    from matplotlib.figure import Figure

__all__ = [
    "LINKS",
    "PRIMITIVES",
    "Link",
    "Measured",
    "RingRun",
    "bytes_per_number",
    "measure",
    "predicted_time",
    "ring_all_reduce",
    "ring_picture",
]


def bytes_per_number(dtype: object) -> int:
    """The bytes one number of ``dtype`` takes in a collective of XLA's CPU backend.

    XLA on CPU sends ``bfloat16`` as ``float32`` and the ``float8`` types as
    ``float16``: its compiled program converts them before the collective and
    back after it (read from the compiled programs, jax 0.10 and 0.12). Every
    other dtype travels as itself. The checker's budgets of bytes sent count
    what the program sends, so they count these sizes.

    Args:
      dtype: a NumPy or JAX dtype (the ML dtypes included), or anything
        :func:`numpy.dtype` accepts.

    Returns:
      The bytes per number sent.

    Examples:
      >>> import jax.numpy as jnp, numpy as np
      >>> from shard_tutorial.communication import bytes_per_number
      >>> [bytes_per_number(d) for d in (jnp.bfloat16, jnp.float8_e4m3fn, np.float16, np.int8)]
      [4, 2, 2, 1]
    """
    import jax.numpy as jnp  # noqa: PLC0415 (knows the ML dtypes' kinds; NumPy does not)

    found = np.dtype(dtype)  # type: ignore[call-overload]
    if found == jnp.bfloat16:
        return 4
    if jnp.issubdtype(found, jnp.floating) and found.itemsize == 1:  # the float8 types
        return 2
    return found.itemsize


@dataclasses.dataclass(frozen=True)
class Link:
    """A link between two accelerators, as its maker or a textbook publishes it.

    Attributes:
      name: e.g. ``"TPU v5e ICI"``.
      bandwidth: bytes per second one way over the link (the ``beta`` of the
        alpha-beta model).
      latency: seconds each message pays whatever its size (``alpha``); None
        where the sources cited give no figure.
      topology: which algorithm the link suits: ``"bidirectional ring"`` for a
        TPU's torus axis, ``"direct"`` for GPUs behind a switch.
      source: where the figures come from (a URL).
      note: what the figure means, in words.
    """

    name: str
    bandwidth: float
    latency: float | None
    topology: Algorithm
    source: str
    note: str


LINKS = (
    Link(
        name="TPU v5e ICI",
        bandwidth=4.5e10,
        latency=1e-6,
        topology="bidirectional ring",
        source="https://jax-ml.github.io/scaling-book/tpus/",
        note=(
            "4.5e10 bytes/s one way per ICI link (9e10 both ways); about 1 us per hop"
            " (https://jax-ml.github.io/scaling-book/sharding/)"
        ),
    ),
    Link(
        name="TPU v5p ICI",
        bandwidth=9e10,
        latency=1e-6,
        topology="bidirectional ring",
        source="https://jax-ml.github.io/scaling-book/tpus/",
        note=(
            "9e10 bytes/s one way per ICI link (1.8e11 both ways); about 1 us per hop"
            " (https://jax-ml.github.io/scaling-book/sharding/)"
        ),
    ),
    Link(
        name="H100 NVLink",
        bandwidth=4.5e11,
        latency=None,
        topology="direct",
        source="https://www.nvidia.com/en-us/data-center/h100/",
        note=(
            "900 GB/s of NVLink per H100 SXM GPU, both ways together: 18 links of 25 GB/s"
            " each way, 450 GB/s out of each GPU (https://jax-ml.github.io/scaling-book/gpus/)"
        ),
    ),
)
"""Published link figures of one GPU and two TPU systems, each with its source."""


def predicted_time(
    kind: str, devices: int, size: float, link: Link, algorithm: Algorithm | None = None
) -> float:
    """Seconds a collective should take over ``link``: ``rounds * alpha + bytes / beta``.

    The bytes are those on the busiest one-way link (:attr:`~shard_tutorial.collective_costs.Traffic.busiest_link`);
    a link with no published latency pays none. A prediction from published
    figures: real collectives reach less than the peak bandwidth, most of all for
    small arrays.

    Args:
      kind: the HLO collective.
      devices: the group size.
      size: bytes, the larger of the operand and the result on one device.
      link: the link, e.g. one of :data:`LINKS`.
      algorithm: the algorithm; by default the one the link suits.

    Examples:
      An all-gather of a 100 MB result over 8 TPU v5e chips on one axis with a
      wraparound link: half the 87.5 MB each chip sends goes each way, in 4 hops.

      >>> from shard_tutorial.communication import LINKS, predicted_time
      >>> v5e = LINKS[0]
      >>> round(predicted_time("all-gather", 8, 100e6, v5e) * 1e3, 3)  # milliseconds
      1.115
    """
    cost = traffic(kind, devices, size, algorithm or link.topology)
    return cost.rounds * (link.latency or 0.0) + cost.busiest_link / link.bandwidth


# --- The same collectives, compiled -----------------------------------------------------------

PRIMITIVES = {
    "psum": "all-reduce",
    "all_gather": "all-gather",
    "psum_scatter": "reduce-scatter",
    "all_to_all": "all-to-all",
    "ppermute": "collective-permute",
}
"""Each ``jax.lax`` collective -> the HLO operation it compiles to."""


@dataclasses.dataclass(frozen=True)
class Measured:
    """One collective compiled on ``devices`` devices, and what the model says of it.

    Attributes:
      primitive: the ``jax.lax`` function, e.g. ``"psum"``.
      kind: the HLO operation the compiled program runs.
      devices: how many devices take part (the group size XLA printed).
      operand_bytes: what it takes in on each device, from the compiled program.
      result_bytes: what it gives out on each device, from the compiled program.
      ring_bytes: :func:`shard_tutorial.collective_costs.ring_bytes` of it.
      roofline_bytes: what ``jax.experimental.roofline`` says crosses the
        mesh axis (its ``ici_bytes``).
    """

    primitive: str
    kind: str
    devices: int
    operand_bytes: int
    result_bytes: int
    ring_bytes: float
    roofline_bytes: int

    @property
    def size(self) -> int:
        """The larger of operand and result: the ``size`` of :func:`~shard_tutorial.collective_costs.traffic`."""
        return max(self.operand_bytes, self.result_bytes)

    def traffic(self, algorithm: Algorithm) -> Traffic:
        """:func:`~shard_tutorial.collective_costs.traffic` of this collective under ``algorithm``."""
        return traffic(self.kind, self.devices, self.size, algorithm)


def _body(primitive: str, n: int, axis_name: str) -> Callable[[jax.Array], jax.Array]:
    """The function each device runs: ``jax.lax.<primitive>`` of its block."""
    import jax  # noqa: PLC0415

    bodies: dict[str, Callable[[jax.Array], jax.Array]] = {
        "psum": lambda b: jax.lax.psum(b, axis_name),
        "all_gather": lambda b: jax.lax.all_gather(b, axis_name, tiled=True),
        "psum_scatter": lambda b: jax.lax.psum_scatter(b, axis_name, tiled=True),
        # A tuple of axis names: roofline's all_to_all rule iterates over the name.
        "all_to_all": lambda b: jax.lax.all_to_all(b, (axis_name,), 0, 0, tiled=True),
        "ppermute": lambda b: jax.lax.ppermute(b, axis_name, [(i, (i + 1) % n) for i in range(n)]),
    }
    return bodies[primitive]


def measure(primitive: str, devices: int, elements: int, dtype: str = "float32") -> Measured:
    """Compile ``jax.lax.<primitive>`` of a block of ``elements`` per device, and read its cost.

    Runs the collective inside :func:`jax.shard_map` over the first ``devices``
    devices, reads the compiled program (operand and result types, resolved by
    :func:`shard_tutorial.compiled.parse_collectives`), and asks
    ``jax.experimental.roofline`` for the same program.

    Args:
      primitive: one of :data:`PRIMITIVES`.
      devices: how many devices; at most ``len(jax.devices())``.
      elements: how many elements each device's block has; a multiple of
        ``devices`` (``psum_scatter`` and ``all_to_all`` cut it in ``devices``).
      dtype: the blocks' dtype.

    Returns:
      The :class:`Measured` collective.

    Raises:
      ValueError: if the compiled program does not run exactly one collective
        of the expected kind (on one device it runs none).

    Examples:
      >>> from shard_tutorial.communication import measure
      >>> m = measure("all_gather", 2, 8)
      >>> m.kind, m.operand_bytes, m.result_bytes, m.ring_bytes, m.roofline_bytes
      ('all-gather', 32, 64, 32.0, 32)
    """
    import jax  # noqa: PLC0415
    import jax.numpy as jnp  # noqa: PLC0415
    from jax.experimental import roofline  # noqa: PLC0415
    from jax.sharding import NamedSharding  # noqa: PLC0415
    from jax.sharding import PartitionSpec as P  # noqa: PLC0415

    mesh = jax.make_mesh((devices,), ("data",), devices=jax.devices()[:devices])
    # Its shape and layout are all the compiler needs: nothing is allocated.
    layout = NamedSharding(mesh, P("data"))
    x = jax.ShapeDtypeStruct((devices * elements,), jnp.dtype(dtype), sharding=layout)
    f = jax.shard_map(
        _body(primitive, devices, "data"), mesh=mesh, in_specs=P("data"), out_specs=P("data")
    )
    found = parse_collectives(compiled_text(f, x), resolve_operands=True)
    kind = PRIMITIVES[primitive]
    if len(found) != 1 or found[0].kind != kind or found[0].operand_bytes is None:
        msg = f"expected one {kind} with its operand's type, the program runs {found}"
        raise ValueError(msg)
    collective = found[0]
    operand = collective.operand_bytes
    assert operand is not None  # checked above
    _, estimate = roofline.roofline(f, mesh=mesh)(x)
    return Measured(
        primitive=primitive,
        kind=kind,
        devices=_group(collective, devices),
        operand_bytes=operand,
        result_bytes=collective.nbytes,
        ring_bytes=ring_bytes(collective, devices),
        roofline_bytes=int(estimate.ici_bytes.get("data", 0)),
    )


def _group(collective: Collective, devices: int) -> int:
    """The group size XLA printed (for a permute, the devices its pairs name)."""
    size = collective.group_size
    if size is None:
        msg = f"the group size of {collective} is not in the program's text"
        raise ValueError(msg)
    if size != devices:
        msg = f"{collective} runs among {size} devices, not {devices}"
        raise ValueError(msg)
    return size


# --- A ring all-reduce, run for real and recorded step by step ---------------------------------


@dataclasses.dataclass(frozen=True)
class RingRun:
    """What each device held after each step of a ring all-reduce.

    Attributes:
      values: ``values[step, device, chunk]``: the value of each chunk each
        device holds, step 0 being the input.
      counts: ``counts[step, device, chunk]``: how many devices' inputs that
        value sums.
      phases: the phase of each step: ``"input"``, ``"reduce-scatter"`` or
        ``"all-gather"``.
      result: the all-reduced array, each device's copy, ``(devices, chunks)``.
    """

    values: np.ndarray
    counts: np.ndarray
    phases: tuple[str, ...]
    result: np.ndarray

    @property
    def devices(self) -> int:
        """How many devices took part."""
        return int(self.values.shape[1])


def ring_all_reduce(x: jax.Array, axis_name: str = "data") -> RingRun:
    """All-reduce ``x`` round a ring of devices with ``ppermute``, recording every step.

    ``x`` has one row per device, split over the mesh axis ``axis_name``;
    each row is cut into as many chunks as there are devices. In the
    reduce-scatter phase, at step ``s`` device ``d`` passes its running sum of
    chunk ``(d - s) mod n`` to device ``d + 1``, which adds its own; after
    ``n - 1`` steps device ``d`` holds the total of chunk ``(d + 1) mod n``. In
    the all-gather phase the totals go round the ring the same way, ``n - 1``
    steps more. Each step is one :func:`jax.lax.ppermute` of one chunk, so each
    device sends ``2 (n - 1)`` chunks: ``2 (n - 1) / n`` of its row.

    Args:
      x: shape ``(n, n)``, its rows split over the ``n`` devices of the mesh
        axis: one element per chunk, to keep the picture readable.
      axis_name: the mesh axis.

    Returns:
      The :class:`RingRun`; its ``result`` equals ``jax.lax.psum`` of the rows.

    Raises:
      ValueError: if ``x`` is not ``(n, n)``.

    Examples:
      >>> import jax
      >>> import jax.numpy as jnp
      >>> from jax.sharding import NamedSharding, PartitionSpec as P
      >>> from shard_tutorial.communication import ring_all_reduce
      >>> mesh = jax.make_mesh((4,), ("data",), devices=jax.devices()[:4])
      >>> x = jax.device_put(jnp.arange(1.0, 17.0).reshape(4, 4), NamedSharding(mesh, P("data")))
      >>> run = ring_all_reduce(x)
      >>> run.result[0].tolist(), run.phases
      ([28.0, 32.0, 36.0, 40.0], ('input', 'reduce-scatter', 'reduce-scatter', 'reduce-scatter', 'all-gather', 'all-gather', 'all-gather'))
    """
    mesh = x.sharding.mesh  # type: ignore[attr-defined]
    n = int(mesh.shape[axis_name])
    if x.shape != (n, n):
        msg = f"x must have shape ({n}, {n}), its rows split over {axis_name!r}, got {x.shape}"
        raise ValueError(msg)
    held, summed = _ring_program(mesh, axis_name)(x)
    values = np.asarray(held).reshape(2 * (n - 1) + 1, n, n)
    counts = np.asarray(summed).reshape(2 * (n - 1) + 1, n, n)
    phases = ("input",) + ("reduce-scatter",) * (n - 1) + ("all-gather",) * (n - 1)
    return RingRun(values, counts, phases, values[-1])


@functools.cache
def _ring_program(
    mesh: jax.sharding.Mesh, axis_name: str
) -> Callable[[jax.Array], tuple[jax.Array, jax.Array]]:
    """The jitted shard_map of :func:`ring_all_reduce` for one mesh."""
    import jax  # noqa: PLC0415
    import jax.numpy as jnp  # noqa: PLC0415
    from jax.sharding import PartitionSpec as P  # noqa: PLC0415

    n = int(mesh.shape[axis_name])
    to_next = [(d, (d + 1) % n) for d in range(n)]

    def body(row: jax.Array) -> tuple[jax.Array, jax.Array]:
        me = jax.lax.axis_index(axis_name)
        chunks = row.reshape(n, -1)
        count = jnp.ones(n, jnp.int32)
        history, counted = [chunks], [count]
        for step in range(n - 1):  # reduce-scatter: pass a running sum on, add your own
            out = (me - step) % n
            sent = jax.lax.ppermute(chunks[out], axis_name, to_next)
            sent_count = jax.lax.ppermute(count[out], axis_name, to_next)
            into = (me - step - 1) % n
            chunks = chunks.at[into].add(sent)
            count = count.at[into].add(sent_count)
            history.append(chunks)
            counted.append(count)
        for step in range(n - 1):  # all-gather: pass the totals on, keep them
            out = (me + 1 - step) % n
            sent = jax.lax.ppermute(chunks[out], axis_name, to_next)
            sent_count = jax.lax.ppermute(count[out], axis_name, to_next)
            into = (me - step) % n
            chunks = chunks.at[into].set(sent)
            count = count.at[into].set(sent_count)
            history.append(chunks)
            counted.append(count)
        return jnp.stack(history)[:, None], jnp.stack(counted)[:, None]

    spec = P(None, axis_name)
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P(axis_name), out_specs=(spec, spec)))


def _describe_step(run: RingRun, step: int) -> str:
    """One sentence for the text alternative: what each device holds after ``step``."""
    held = "; ".join(
        f"device {d}: "
        + ", ".join(
            _text(v) + ("" if c == 1 else f" (sum of {c})")
            for v, c in zip(run.values[step, d], run.counts[step, d], strict=True)
        )
        for d in range(run.devices)
    )
    title = "Input" if step == 0 else f"After step {step} ({run.phases[step]})"
    return f"{title}: {held}."


def _text(value: float) -> str:
    """A value as short as it can be printed."""
    return str(int(value)) if float(value).is_integer() else f"{value:.3g}"


def ring_picture(run: RingRun) -> Picture:
    """Draw a :class:`RingRun`: one row of devices per step, each device's chunks.

    A chunk holding only its own device's input has that device's colour
    (:data:`shard_tutorial.collective_diagrams.DEVICE_COLOURS`); a partial sum is
    grey, darker the more devices it sums; a complete total is near-white
    (:data:`shard_tutorial.collective_diagrams.COMBINED`). The chunk a device
    received at that step has a thick black outline inside a white one, which
    shows on light and dark pages alike.

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.communication import RingRun, ring_picture
      >>> values = np.array([[[1, 2], [3, 4]], [[1, 6], [4, 4]], [[4, 6], [4, 6]]])
      >>> counts = np.array([[[1, 1], [1, 1]], [[1, 2], [2, 1]], [[2, 2], [2, 2]]])
      >>> run = RingRun(values, counts, ("input", "reduce-scatter", "all-gather"), values[-1])
      >>> picture = ring_picture(run)
      >>> picture.alt.split(". ")[0]
      'A ring all-reduce over 2 devices, step by step'
    """
    figure = _ring_figure(run)
    alt = " ".join(
        [
            (
                f"A ring all-reduce over {run.devices} devices, step by step. Each row is"
                " one step; each device holds one value per chunk."
            ),
            *(_describe_step(run, step) for step in range(len(run.phases))),
        ]
    )
    return Picture(svg_source(figure), alt, css_class="ring-all-reduce", max_width="40rem")


def _count_colour(count: int, devices: int) -> str:
    """Grey for a partial sum, darker the more devices it sums."""
    shade = int(0xD8 - (0xD8 - 0x70) * (count - 1) / max(devices - 2, 1))
    return f"#{shade:02X}{shade:02X}{shade:02X}"


def _ring_figure(run: RingRun) -> Figure:
    """The matplotlib figure of :func:`ring_picture`."""
    from matplotlib.figure import Figure  # noqa: PLC0415 (drawing is optional)
    from matplotlib.patches import Rectangle  # noqa: PLC0415

    from shard_tutorial.collective_diagrams import (  # noqa: PLC0415
        COMBINED,
        DEVICE_COLOURS,
        INK,
        LABEL_FILL,
        _ink,
    )

    n = run.devices
    steps = len(run.phases)
    label_width = 4.6
    gap = 0.5
    width = label_width + n * (n + gap)
    heading = 1.4
    height = heading + steps * 1.2
    fig = Figure(figsize=(0.36 * width, 0.36 * height))
    fig.patch.set_alpha(0.0)
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_xlim(-0.1, width + 0.1)
    ax.set_ylim(height + 0.1, -0.1)
    ax.axis("off")
    box = {"boxstyle": "round,pad=0.2", "facecolor": LABEL_FILL, "edgecolor": "none"}
    for d in range(n):
        ax.text(
            label_width + d * (n + gap) + n / 2,
            0.6,
            f"device {d}",
            ha="center",
            va="center",
            fontsize=8.5,
            color=INK,
            bbox=box,
        )
    for step in range(steps):
        y = heading + step * 1.2
        title = "input" if step == 0 else f"{step}: {run.phases[step]}"
        ax.text(0.0, y + 0.5, title, ha="left", va="center", fontsize=8, color=INK, bbox=box)
        for d in range(n):
            for c in range(n):
                count = int(run.counts[step, d, c])
                if count == 1:
                    colour = DEVICE_COLOURS[d % len(DEVICE_COLOURS)]
                elif count >= n:
                    colour = COMBINED
                else:
                    colour = _count_colour(count, n)
                changed = step > 0 and (
                    run.counts[step, d, c] != run.counts[step - 1, d, c]
                    or run.values[step, d, c] != run.values[step - 1, d, c]
                )
                x = label_width + d * (n + gap) + c
                if changed:  # black inside white: seen on light and dark pages alike
                    ax.add_patch(
                        Rectangle(
                            (x + 0.04, y + 0.08),
                            0.92,
                            0.84,
                            facecolor="none",
                            edgecolor="#FFFFFF",
                            linewidth=4.5,
                        )
                    )
                ax.add_patch(
                    Rectangle(
                        (x + 0.04, y + 0.08),
                        0.92,
                        0.84,
                        facecolor=colour,
                        edgecolor="#000000" if changed else "#555555",
                        linewidth=2.0 if changed else 0.6,
                    )
                )
                ax.text(
                    x + 0.5,
                    y + 0.5,
                    _text(float(run.values[step, d, c])),
                    ha="center",
                    va="center",
                    fontsize=7.5,
                    color=_ink(colour),
                )
    return fig
