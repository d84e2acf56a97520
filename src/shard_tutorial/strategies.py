"""Data, fully-sharded and tensor parallelism compared on one model, one batch, one step.

The model is a two-layer network, ``pred = relu(x @ w1) @ w2``, with the loss
``mean((pred - y) ** 2)`` over every element of the batch, and one SGD step
``(w1 - lr * dL/dw1, w2 - lr * dL/dw2)``. Each strategy writes that step with
:func:`jax.shard_map`, as the Part III references do:

- ``"DP"`` (data parallelism, like ``data_parallel_sgd_step``): the batch split
  over ``"data"``, both weights whole on every device; the gradient of a
  replicated weight comes back already summed over the devices.
- ``"FSDP"`` (fully-sharded, like ``fsdp_sgd_step``): the batch and the rows of
  both weights split over ``"data"``; the weights are gathered for the forward
  pass and their gradients reduce-scattered back.
- ``"TP"`` (tensor parallelism, like ``tensor_parallel_mlp`` with its backward
  pass): a 2-D ``("data", "model")`` mesh, the batch over ``"data"``, ``w1``'s
  columns and ``w2``'s rows (the hidden units) over ``"model"``, one ``psum``
  over ``"model"`` in the forward pass.

:func:`measure` reads what each strategy costs from the arrays and the compiled
program themselves: the bytes of parameters and of gradients each device holds
(``addressable_shards``), the collectives of one compiled step with the bytes of
each (:func:`shard_tutorial.compiled.collectives`), and the time of a step.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial.compiled import Collective, collectives, memory
from shard_tutorial.meshes import data_mesh, data_model_mesh, place
from shard_tutorial.pictures import Picture, svg_source
from shard_tutorial.validation import (
    check_array,
    check_floating,
    require_count,
    require_finite_number,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "STRATEGIES",
    "Measurement",
    "bytes_per_device",
    "chart",
    "compare",
    "gradients",
    "make_problem",
    "markdown_table",
    "measure",
    "mesh_for",
    "mlp_loss",
    "oracle_step",
    "sgd_step",
    "unsharded_step",
]

STRATEGIES = ("DP", "FSDP", "TP")
"""The strategies compared: data, fully-sharded data and tensor parallelism."""

Params = tuple[jax.Array, jax.Array]


def mlp_loss(w1: jax.Array, w2: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
    """The loss ``mean((relu(x @ w1) @ w2 - y) ** 2)``, on one device.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial.strategies import mlp_loss
      >>> x, w1, w2 = jnp.array([[1.0, -1.0]]), jnp.array([[1.0], [-1.0]]), jnp.array([[3.0]])
      >>> mlp_loss(w1, w2, x, jnp.array([[5.0]]))  # relu(2) * 3 = 6, one away from 5
      Array(1., dtype=float32)
    """
    return jnp.mean((jax.nn.relu(x @ w1) @ w2 - y) ** 2)


def unsharded_step(
    w1: jax.Array, w2: jax.Array, x: jax.Array, y: jax.Array, lr: float
) -> tuple[jax.Array, jax.Array]:
    """One SGD step on one device, by ``jax.grad`` of :func:`mlp_loss`: the JAX oracle.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial.strategies import unsharded_step
      >>> x, w1, w2 = jnp.array([[1.0, -1.0]]), jnp.array([[1.0], [-1.0]]), jnp.array([[3.0]])
      >>> new_w1, new_w2 = unsharded_step(w1, w2, x, jnp.array([[5.0]]), 0.1)
      >>> new_w1.round(4).tolist(), new_w2.round(4).tolist()  # dw1 = 2 * 3 * x.T, dw2 = 2 * 2
      ([[0.4], [-0.4]], [[2.6]])
    """
    dw1, dw2 = jax.grad(mlp_loss, argnums=(0, 1))(w1, w2, x, y)
    return w1 - lr * dw1, w2 - lr * dw2


def oracle_step(
    w1: np.ndarray, w2: np.ndarray, x: np.ndarray, y: np.ndarray, lr: float
) -> tuple[np.ndarray, np.ndarray]:
    """One SGD step in NumPy, in float64, with the gradients written out by hand.

    With ``h = x @ w1``, ``a = relu(h)`` and ``r = a @ w2 - y`` over ``n``
    elements: ``dL/dw2 = 2 / n * a.T @ r`` and ``dL/dw1 = x.T @ ((2 / n * r @
    w2.T) * (h > 0))``.

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.strategies import oracle_step
      >>> x, w1, w2 = np.array([[1.0, -1.0]]), np.array([[1.0], [-1.0]]), np.array([[3.0]])
      >>> new_w1, new_w2 = oracle_step(w1, w2, x, np.array([[5.0]]), 0.1)
      >>> new_w1.tolist(), new_w2.tolist()
      ([[0.4], [-0.4]], [[2.6]])
    """
    w1, w2, x, y = (np.asarray(a, np.float64) for a in (w1, w2, x, y))
    h = x @ w1
    a = np.maximum(h, 0.0)
    d_pred = 2.0 / y.size * (a @ w2 - y)
    dw2 = a.T @ d_pred
    dw1 = x.T @ ((d_pred @ w2.T) * (h > 0))
    return w1 - lr * dw1, w2 - lr * dw2


def make_problem(
    batch: int = 32, d: int = 16, hidden: int = 64, d_out: int = 8, *, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Random float32 ``(w1, w2, x, y)`` of these sizes, the same for every strategy.

    The defaults let every strategy use all 8 devices: 8 divides the batch and
    both weights' rows (FSDP), and a 2 x 4 ``("data", "model")`` mesh divides
    the batch and the hidden units (TP).

    Examples:
      >>> from shard_tutorial.strategies import make_problem
      >>> [a.shape for a in make_problem()]
      [(16, 64), (64, 8), (32, 16), (32, 8)]
    """
    rng = np.random.default_rng(seed)
    w1 = rng.normal(scale=d**-0.5, size=(d, hidden)).astype(np.float32)
    w2 = rng.normal(scale=hidden**-0.5, size=(hidden, d_out)).astype(np.float32)
    x = rng.normal(size=(batch, d)).astype(np.float32)
    y = rng.normal(size=(batch, d_out)).astype(np.float32)
    return w1, w2, x, y


# -- The three steps: one device's part of each ----------------------------------------


def _dp_grads(w1: jax.Array, w2: jax.Array, x: jax.Array, y: jax.Array) -> Params:
    """DP: this device's rows of the batch, the whole weights."""

    def loss(w1: jax.Array, w2: jax.Array) -> jax.Array:
        return jax.lax.pmean(mlp_loss(w1, w2, x, y), "data")  # the whole batch's mean

    # w1 and w2 are invariant over "data" (P()): their gradients come back summed.
    return jax.grad(loss, argnums=(0, 1))(w1, w2)


def _fsdp_grads(w1_rows: jax.Array, w2_rows: jax.Array, x: jax.Array, y: jax.Array) -> Params:
    """FSDP: this device's rows of the batch and of both weights."""

    def loss(w1_rows: jax.Array, w2_rows: jax.Array) -> jax.Array:
        w1 = jax.lax.all_gather(w1_rows, "data", axis=0, tiled=True)  # whole, for now
        w2 = jax.lax.all_gather(w2_rows, "data", axis=0, tiled=True)
        return jax.lax.pmean(mlp_loss(w1, w2, x, y), "data")

    # The transpose of all_gather is a reduce-scatter: each device gets its rows' gradient.
    return jax.grad(loss, argnums=(0, 1))(w1_rows, w2_rows)


def _tp_grads(w1_cols: jax.Array, w2_rows: jax.Array, x: jax.Array, y: jax.Array) -> Params:
    """TP: this device's rows of the batch ("data") and hidden units ("model")."""

    def loss(w1_cols: jax.Array, w2_rows: jax.Array) -> jax.Array:
        share = jax.nn.relu(x @ w1_cols) @ w2_rows  # these hidden units' share
        pred = jax.lax.psum(share, "model")  # every hidden unit's
        return jax.lax.pmean(jnp.mean((pred - y) ** 2), "data")

    # The weights are invariant over "data": their gradients come back summed over it.
    return jax.grad(loss, argnums=(0, 1))(w1_cols, w2_rows)


_LOCAL_GRADS: dict[str, Callable[..., Params]] = {
    "DP": _dp_grads,
    "FSDP": _fsdp_grads,
    "TP": _tp_grads,
}
_WEIGHT_SPECS = {
    "DP": (P(), P()),
    "FSDP": (P("data", None), P("data", None)),
    "TP": (P(None, "model"), P("model", None)),
}
_BATCH_SPEC = P("data", None)


def _check_strategy(strategy: object) -> str:
    if strategy not in STRATEGIES:
        msg = f"strategy must be one of {', '.join(map(repr, STRATEGIES))}, got {strategy!r}"
        raise ValueError(msg)
    return str(strategy)


def _check_inputs(w1: object, w2: object, x: object, y: object) -> None:
    for value, name, layout in (
        (w1, "w1", "of shape (d, h)"),
        (w2, "w2", "of shape (h, d_out)"),
        (x, "x", "of shape (B, d)"),
        (y, "y", "of shape (B, d_out)"),
    ):
        check_array(value, name, ndim=2, layout=layout)
        check_floating(value, name)  # type: ignore[arg-type]
    (d, h), (h2, d_out), (batch, d_x), y_shape = (np.shape(v) for v in (w1, w2, x, y))
    if d_x != d:
        msg = f"x has {d_x} columns but w1 has {d} rows: x must be (B, d) and w1 (d, h)"
        raise ValueError(msg)
    if h2 != h:
        msg = f"w2 has {h2} rows but w1 has {h} columns: w1 must be (d, h) and w2 (h, d_out)"
        raise ValueError(msg)
    if y_shape != (batch, d_out):
        msg = f"y must have shape (B, d_out) = {(batch, d_out)}, got {y_shape}"
        raise ValueError(msg)


def mesh_for(strategy: str, w1: jax.Array | np.ndarray, x: jax.Array | np.ndarray) -> Mesh:
    """The mesh a strategy runs on, for these shapes (the package's meshes).

    DP splits the batch: ``data_mesh(B)``. FSDP splits the batch and the rows of
    both weights over the same axis: ``data_mesh(gcd(B, d, h))``. TP splits the
    batch and the hidden units: ``data_model_mesh(B, h)``.

    Examples:
      On 8 devices:

      >>> import numpy as np
      >>> from shard_tutorial.strategies import mesh_for
      >>> w1, x = np.ones((16, 64)), np.ones((32, 16))
      >>> [dict(mesh_for(s, w1, x).shape) for s in ("DP", "FSDP", "TP")]
      [{'data': 8}, {'data': 8}, {'data': 2, 'model': 4}]
    """
    strategy = _check_strategy(strategy)
    (batch, _), (d, hidden) = np.shape(x), np.shape(w1)
    if strategy == "DP":
        return data_mesh(batch)
    if strategy == "FSDP":
        return data_mesh(math.gcd(batch, d, hidden))
    return data_model_mesh(batch, hidden)


def _placed(
    strategy: str, w1: jax.Array, w2: jax.Array, x: jax.Array, y: jax.Array
) -> tuple[Mesh, tuple[jax.Array, jax.Array, jax.Array, jax.Array]]:
    """Check the inputs and lay them out as ``strategy`` keeps them."""
    strategy = _check_strategy(strategy)
    _check_inputs(w1, w2, x, y)
    mesh = mesh_for(strategy, w1, x)
    w1_spec, w2_spec = _WEIGHT_SPECS[strategy]
    batch = NamedSharding(mesh, _BATCH_SPEC)
    return mesh, (
        place(w1, NamedSharding(mesh, w1_spec)),
        place(w2, NamedSharding(mesh, w2_spec)),
        place(x, batch),
        place(y, batch),
    )


@functools.cache
def _compiled_step(strategy: str, mesh: Mesh) -> Callable[..., Params]:
    """The jitted SGD step of ``strategy`` on ``mesh``, built once."""
    local_grads = _LOCAL_GRADS[strategy]

    def local_step(
        w1: jax.Array, w2: jax.Array, x: jax.Array, y: jax.Array, lr: jax.Array
    ) -> Params:
        dw1, dw2 = local_grads(w1, w2, x, y)
        return w1 - lr * dw1, w2 - lr * dw2

    weights = _WEIGHT_SPECS[strategy]
    return jax.jit(
        jax.shard_map(
            local_step,
            mesh=mesh,
            in_specs=(*weights, _BATCH_SPEC, _BATCH_SPEC, P()),
            out_specs=weights,  # the new weights, laid out as the old ones
        )
    )


@functools.cache
def _compiled_grads(strategy: str, mesh: Mesh) -> Callable[..., Params]:
    """The jitted gradients of ``strategy`` on ``mesh``, laid out as its weights."""
    weights = _WEIGHT_SPECS[strategy]
    return jax.jit(
        jax.shard_map(
            _LOCAL_GRADS[strategy],
            mesh=mesh,
            in_specs=(*weights, _BATCH_SPEC, _BATCH_SPEC),
            out_specs=weights,
        )
    )


def sgd_step(
    strategy: str, w1: jax.Array, w2: jax.Array, x: jax.Array, y: jax.Array, lr: float
) -> tuple[jax.Array, jax.Array]:
    """One SGD step of the two-layer network, written with ``jax.shard_map`` as ``strategy`` splits it.

    Args:
      strategy: ``"DP"``, ``"FSDP"`` or ``"TP"``.
      w1: first layer, shape (d, h), floating-point.
      w2: second layer, shape (h, d_out), floating-point.
      x: inputs, shape (B, d), floating-point.
      y: targets, shape (B, d_out), floating-point.
      lr: learning rate, a finite Python float.

    Returns:
      The new ``(w1, w2)``, laid out as the strategy keeps them: replicated
      (DP), split by rows over ``"data"`` (FSDP), split by hidden unit over
      ``"model"`` (TP).

    Raises:
      ValueError: for an unknown strategy, shapes that do not fit together, or
        an ``lr`` that is nan or infinite.
      TypeError: for a non-array, a dtype that is not floating-point, or an
        ``lr`` that is not a real number.

    Examples:
      Every strategy takes the step :func:`oracle_step` takes:

      >>> import numpy as np
      >>> from shard_tutorial.strategies import make_problem, oracle_step, sgd_step
      >>> w1, w2, x, y = make_problem()
      >>> want = oracle_step(w1, w2, x, y, 0.1)
      >>> for strategy in ("DP", "FSDP", "TP"):
      ...     new = sgd_step(strategy, w1, w2, x, y, 0.1)
      ...     print(strategy, all(np.allclose(a, b, atol=1e-5) for a, b in zip(new, want)),
      ...           "w1 on device 0:", new[0].addressable_shards[0].data.shape)
      DP True w1 on device 0: (16, 64)
      FSDP True w1 on device 0: (2, 64)
      TP True w1 on device 0: (16, 16)
      >>> sgd_step("ZeRO", w1, w2, x, y, 0.1)
      Traceback (most recent call last):
      ...
      ValueError: strategy must be one of 'DP', 'FSDP', 'TP', got 'ZeRO'
    """
    mesh, placed = _placed(strategy, w1, w2, x, y)
    lr = require_finite_number(lr, "lr")  # type: ignore[assignment]
    return _compiled_step(strategy, mesh)(*placed, lr)


def gradients(
    strategy: str, w1: jax.Array, w2: jax.Array, x: jax.Array, y: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """``(dL/dw1, dL/dw2)`` as ``strategy`` computes them, laid out as it keeps them.

    Examples:
      FSDP keeps one eighth of each gradient on each of 8 devices:

      >>> from shard_tutorial.strategies import gradients, make_problem
      >>> dw1, dw2 = gradients("FSDP", *make_problem())
      >>> dw1.shape, dw1.addressable_shards[0].data.shape
      ((16, 64), (2, 64))
    """
    mesh, placed = _placed(strategy, w1, w2, x, y)
    return _compiled_grads(strategy, mesh)(*placed)


def bytes_per_device(tree: Any) -> dict[int, int]:
    """How many bytes of the arrays in ``tree`` each device holds, read from their shards.

    Args:
      tree: a ``jax.Array`` or a pytree of them.

    Returns:
      Device id -> the bytes of every shard on that device, over every array.

    Examples:
      >>> import jax.numpy as jnp
      >>> from jax.sharding import NamedSharding, PartitionSpec as P
      >>> from shard_tutorial import data_mesh, place
      >>> from shard_tutorial.strategies import bytes_per_device
      >>> mesh = data_mesh(8)
      >>> split = place(jnp.ones((8, 4)), NamedSharding(mesh, P("data")))  # 16 bytes each
      >>> whole = place(jnp.ones(4), NamedSharding(mesh, P()))  # 16 bytes on every device
      >>> bytes_per_device((split, whole))
      {0: 32, 1: 32, 2: 32, 3: 32, 4: 32, 5: 32, 6: 32, 7: 32}
    """
    held: dict[int, int] = {}
    for array in jax.tree.leaves(tree):
        for shard in array.addressable_shards:
            held[shard.device.id] = held.get(shard.device.id, 0) + shard.data.nbytes
    return dict(sorted(held.items()))


@dataclasses.dataclass(frozen=True)
class Measurement:
    """What one strategy's step costs, as measured.

    Attributes:
      strategy: ``"DP"``, ``"FSDP"`` or ``"TP"``.
      mesh: the mesh's axes and sizes, e.g. ``{"data": 2, "model": 4}``.
      param_bytes: the most bytes of parameters any one device holds.
      grad_bytes: the most bytes of gradients any one device holds.
      collectives: the collectives of one compiled step, in program order.
      step_seconds: the time of one step, the fastest of several (the least
        disturbed by other work). Fake CPU devices share the machine's cores:
        this is not a measure of speed-up.
      params: the new ``(w1, w2)`` after one step, as NumPy arrays.
      memory: XLA's memory analysis of the compiled step, per device, in bytes
        (``argument``, ``output``, ``temp``, ``alias``, ``peak``: see
        :func:`shard_tutorial.compiled.memory`).
    """

    strategy: str
    mesh: dict[str, int]
    param_bytes: int
    grad_bytes: int
    collectives: tuple[Collective, ...]
    step_seconds: float
    params: tuple[np.ndarray, np.ndarray]
    memory: dict[str, int] = dataclasses.field(default_factory=dict, compare=False)

    @property
    def collective_bytes(self) -> int:
        """The bytes of every collective's result on one device, added up."""
        return sum(c.nbytes for c in self.collectives)


def measure(
    strategy: str,
    w1: jax.Array | np.ndarray,
    w2: jax.Array | np.ndarray,
    x: jax.Array | np.ndarray,
    y: jax.Array | np.ndarray,
    lr: float,
    *,
    repeats: int = 20,
) -> Measurement:
    """Run one strategy's step and read what it costs from its arrays and compiled program.

    Args:
      strategy: ``"DP"``, ``"FSDP"`` or ``"TP"``.
      w1: first layer, shape (d, h), floating-point.
      w2: second layer, shape (h, d_out), floating-point.
      x: inputs, shape (B, d), floating-point.
      y: targets, shape (B, d_out), floating-point.
      lr: learning rate, a finite Python float.
      repeats: how many steps are timed, at least 1; the fastest is kept.

    Returns:
      A :class:`Measurement`.

    Raises:
      ValueError: for a bad argument, as :func:`sgd_step` says, or ``repeats``
        below 1.
      TypeError: likewise, or a ``repeats`` that is not an integer.

    Examples:
      >>> from shard_tutorial.strategies import make_problem, measure
      >>> fsdp = measure("FSDP", *make_problem(), 0.1, repeats=1)
      >>> fsdp.mesh, fsdp.param_bytes, fsdp.grad_bytes
      ({'data': 8}, 768, 768)
      >>> sorted({c.kind for c in fsdp.collectives})
      ['all-gather', 'reduce-scatter']
      >>> fsdp.memory["argument"]  # w1 and w2's rows, x and y's rows, lr: 768 + 384 + 4
      1156
    """
    repeats = require_count(repeats, "repeats")
    mesh, placed = _placed(strategy, w1, w2, x, y)  # type: ignore[arg-type]
    lr = require_finite_number(lr, "lr")  # type: ignore[assignment]
    step = _compiled_step(strategy, mesh)
    new = jax.block_until_ready(step(*placed, lr))  # compiled and run once
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(step(*placed, lr))
        times.append(time.perf_counter() - start)
    grads = _compiled_grads(strategy, mesh)(*placed)
    return Measurement(
        strategy=strategy,
        mesh={str(name): int(size) for name, size in mesh.shape.items()},
        param_bytes=max(bytes_per_device(new).values()),
        grad_bytes=max(bytes_per_device(grads).values()),
        collectives=tuple(collectives(step, *placed, lr)),
        step_seconds=min(times),
        params=(np.asarray(new[0]), np.asarray(new[1])),
        memory=memory(step, *placed, lr),
    )


def compare(
    w1: jax.Array | np.ndarray,
    w2: jax.Array | np.ndarray,
    x: jax.Array | np.ndarray,
    y: jax.Array | np.ndarray,
    lr: float,
    *,
    repeats: int = 20,
) -> list[Measurement]:
    """:func:`measure` every strategy in :data:`STRATEGIES` on the same arguments.

    Examples:
      >>> from shard_tutorial.strategies import compare, make_problem
      >>> [(m.strategy, m.param_bytes) for m in compare(*make_problem(), 0.1, repeats=1)]
      [('DP', 6144), ('FSDP', 768), ('TP', 1536)]
    """
    return [measure(s, w1, w2, x, y, lr, repeats=repeats) for s in STRATEGIES]


# -- Showing the comparison ------------------------------------------------------------


def _mesh_text(mesh: dict[str, int]) -> str:
    return " x ".join(f"{size} ({name})" for name, size in mesh.items())


def markdown_table(measurements: Sequence[Measurement]) -> str:
    """The comparison as a Markdown table, one row per strategy.

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.compiled import Collective
      >>> from shard_tutorial.strategies import Measurement, markdown_table
      >>> m = Measurement("DP", {"data": 8}, 6144, 6144,
      ...                 (Collective("all-reduce", "(f32[16,64], f32[64,8])", 6144, "{{0,1}}"),),
      ...                 0.0012, (np.zeros(1), np.zeros(1)))
      >>> print(markdown_table([m]))
      | strategy | mesh | parameter bytes per device | gradient bytes per device | collectives per step | their bytes per device | step time |
      |:--|:--|--:|--:|--:|--:|--:|
      | DP | 8 (data) | 6,144 | 6,144 | 1 | 6,144 | 1.20 ms |
    """
    lines = [
        (
            "| strategy | mesh | parameter bytes per device | gradient bytes per device "
            "| collectives per step | their bytes per device | step time |"
        ),
        "|:--|:--|--:|--:|--:|--:|--:|",
    ]
    lines += [
        f"| {m.strategy} | {_mesh_text(m.mesh)} | {m.param_bytes:,} | {m.grad_bytes:,} "
        f"| {len(m.collectives)} | {m.collective_bytes:,} | {m.step_seconds * 1e3:.2f} ms |"
        for m in measurements
    ]
    return "\n".join(lines)


INK = "#111111"
"""Text and outlines: dark, on the white page and on the light grey panel the theme
puts behind HTML outputs in dark mode."""

BAR_STYLES = {
    "DP": ("#E69F00", ""),  # orange, plain
    "FSDP": ("#56B4E9", "//"),  # sky blue, hatched
    "TP": ("#009E73", ".."),  # bluish green, dotted
}
"""Each strategy's bar: an Okabe-Ito colour and a hatch, so colour is never the only cue."""

_PANELS = (
    ("Parameter bytes per device", "param_bytes", "{:,.0f} B"),
    ("Gradient bytes per device", "grad_bytes", "{:,.0f} B"),
    ("Collective bytes per step, per device", "collective_bytes", "{:,.0f} B"),
    ("Step time (shared CPU cores: not a speed-up)", "step_ms", "{:.2f} ms"),
)


def _value(m: Measurement, field: str) -> float:
    if field == "step_ms":
        return m.step_seconds * 1e3
    return float(getattr(m, field))


def _figure(measurements: Sequence[Measurement]) -> Figure:
    from matplotlib.figure import Figure  # noqa: PLC0415 (drawing is optional)

    names = [m.strategy for m in measurements]
    fig = Figure(figsize=(4.4, 0.6 + 1.45 * len(_PANELS)), layout="constrained")
    fig.patch.set_alpha(0.0)  # the page's (or the output panel's) own background shows
    axes = fig.subplots(len(_PANELS), 1)
    for ax, (title, field, fmt) in zip(axes, _PANELS, strict=True):
        values = [_value(m, field) for m in measurements]
        for row, (name, value) in enumerate(zip(names, values, strict=True)):
            colour, hatch = BAR_STYLES.get(name, ("#BBBBBB", "xx"))
            ax.barh(row, value, color=colour, hatch=hatch, edgecolor=INK, linewidth=0.8)
            ax.text(value, row, " " + fmt.format(value), va="center", ha="left", color=INK)
        ax.set_yticks(range(len(names)), names, color=INK)
        ax.invert_yaxis()
        ax.set_xlim(0, max([*values, 1e-9]) * 1.35)  # room for the value labels
        ax.set_title(title, loc="left", color=INK, fontsize=10.5, fontweight="bold")
        ax.patch.set_alpha(0.0)
        ax.tick_params(colors=INK, labelsize=9)
        ax.set_xticks([])
        for side in ("top", "right", "bottom"):
            ax.spines[side].set_visible(False)
        ax.spines["left"].set_color(INK)
    return fig


def chart(measurements: Sequence[Measurement]) -> Picture:
    """Draw the comparison: one panel of horizontal bars per figure, each bar labelled.

    Every bar carries its strategy's name and its value as text, and a hatch as
    well as a colour; the text alternative gives every figure.

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.strategies import Measurement, chart
      >>> m = Measurement("FSDP", {"data": 8}, 768, 768, (), 0.002, (np.zeros(1), np.zeros(1)))
      >>> picture = chart([m])
      >>> picture.alt
      'Bar charts comparing FSDP. Parameter bytes per device: FSDP 768 B. Gradient bytes per device: FSDP 768 B. Collective bytes per step, per device: FSDP 0 B. Step time (shared CPU cores: not a speed-up): FSDP 2.00 ms.'
      >>> picture.svg.lstrip().startswith("<?xml")
      True
    """
    names = ", ".join(m.strategy for m in measurements)
    sentences = [f"Bar charts comparing {names}."]
    for title, field, fmt in _PANELS:
        values = "; ".join(f"{m.strategy} {fmt.format(_value(m, field))}" for m in measurements)
        sentences.append(f"{title}: {values}.")
    # Transparent, with dark ink: in dark mode pydata-sphinx-theme draws HTML outputs on
    # a light panel, and the dark-light class keeps the theme from dimming the picture.
    return Picture(
        svg_source(_figure(measurements)),
        " ".join(sentences),
        css_class="strategies-chart dark-light",
        max_width="28rem",
    )
