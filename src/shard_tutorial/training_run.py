"""A real training run: a small Flax NNX model trained with optax, data-parallel or on one device.

:func:`train` trains :class:`MLP` (two ``tanh`` hidden layers) to fit a smooth
function of four inputs, for a few hundred steps of SGD with momentum
(``optax.sgd(lr, momentum=0.9)``), and returns
the loss of every step. The data are made from a seed (:func:`synthetic_data`),
so two runs see the same batches in the same order, and the only difference
between the two strategies is where the work happens:

- ``"unsharded"``: the whole batch and the model on one device, a plain
  ``jax.jit`` step.
- ``"data_parallel"``: the batch's rows split over the devices of a ``"data"``
  mesh axis, the model and the optimizer state replicated on every device, the
  step written with :func:`jax.shard_map`. The model goes through ``shard_map``
  as a pytree (Flax 0.12 modules are pytrees), so its parameters arrive
  *invariant* over ``"data"``: ``jax.grad`` of the per-device loss already sums
  their gradient over the devices. The loss to differentiate is therefore the
  whole batch's mean, ``jax.lax.pmean`` of the blocks' means (see
  :mod:`shard_tutorial.problems.data_parallel_sgd_step`), and no collective is
  applied to the gradients.

Both compute the same mean over the same rows, only summed in another order, so
their losses agree to float32 rounding at every step: that is what the page
"A real training run" draws and what ``tests/test_training_run.py`` asserts.
:func:`loss_plot` draws the curves, with a text alternative.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Literal, TypeVar, get_args

import jax
import jax.numpy as jnp
import numpy as np
import optax  # type: ignore[import-untyped]  # ships no type information
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial.meshes import DATA_AXIS, usable_device_count
from shard_tutorial.pictures import Picture, svg_source
from shard_tutorial.validation import require_count, require_finite_number

__all__ = [
    "D_IN",
    "D_OUT",
    "MLP",
    "Strategy",
    "loss_plot",
    "mse",
    "synthetic_data",
    "train",
    "training_step",
]

T = TypeVar("T")

Strategy = Literal["data_parallel", "unsharded"]
"""Where :func:`train` runs: the batch split over the devices, or all on one device."""

D_IN = 4
"""Inputs per example."""

D_OUT = 1
"""Targets per example."""

Step = Callable[
    ["MLP", nnx.Optimizer, jax.Array, jax.Array],
    tuple["MLP", nnx.Optimizer, jax.Array],
]


class MLP(nnx.Module):
    """A regression network: two ``tanh`` hidden layers and a linear output layer.

    Args:
      hidden: units in each hidden layer.
      rngs: where the initial parameters come from, e.g. ``nnx.Rngs(0)``.

    Examples:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from shard_tutorial.training_run import MLP
      >>> model = MLP(hidden=8, rngs=nnx.Rngs(0))
      >>> model(jnp.ones((5, 4))).shape
      (5, 1)
    """

    def __init__(self, hidden: int = 32, *, rngs: nnx.Rngs) -> None:
        """Create the three layers, their parameters drawn from ``rngs``."""
        self.hidden1 = nnx.Linear(D_IN, hidden, rngs=rngs)
        self.hidden2 = nnx.Linear(hidden, hidden, rngs=rngs)
        self.output = nnx.Linear(hidden, D_OUT, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        """The predictions for the rows of ``x`` (B, 4): shape (B, 1)."""
        x = jnp.tanh(self.hidden1(x))
        x = jnp.tanh(self.hidden2(x))
        return self.output(x)


def synthetic_data(seed: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and noisy targets for the regression, the same for the same seed.

    ``x`` is standard normal; the target is ``sin(2 * x @ a)`` for a random unit
    direction ``a``, plus normal noise of standard deviation 0.05 (so the best
    possible loss is about 0.0025).

    Args:
      seed: seeds NumPy's generator.
      rows: how many examples, at least 1.

    Returns:
      ``(x, y)``: float32 arrays of shapes (rows, 4) and (rows, 1). Their first
      rows do not depend on ``rows``.

    Examples:
      >>> from shard_tutorial.training_run import synthetic_data
      >>> x, y = synthetic_data(0, rows=3)
      >>> x.shape, y.shape, y.dtype
      ((3, 4), (3, 1), dtype('float32'))
      >>> bool((synthetic_data(0, 300)[1][:3] == y).all())  # the same first rows
      True
    """
    rows = require_count(rows, "rows")
    # One stream each, so that the first rows are the same whatever ``rows`` is.
    for_direction, for_x, for_noise = np.random.default_rng(seed).spawn(3)
    direction = for_direction.normal(size=(D_IN, D_OUT))
    direction /= np.linalg.norm(direction)
    x = for_x.normal(size=(rows, D_IN)).astype(np.float32)
    y = np.sin(2.0 * x @ direction) + 0.05 * for_noise.normal(size=(rows, D_OUT))
    return x, y.astype(np.float32)


def mse(model: MLP, x: jax.Array, y: jax.Array) -> jax.Array:
    """The mean squared error of ``model`` on the rows it is given."""
    return jnp.mean((model(x) - y) ** 2)


def train(
    strategy: Strategy = "data_parallel",
    *,
    devices: int | None = None,
    steps: int = 300,
    batch: int = 64,
    lr: float = 0.1,
    seed: int = 0,
) -> np.ndarray:
    """Train :class:`MLP` with ``optax.sgd(lr, momentum=0.9)``; return the loss of every step.

    Step ``i`` takes rows ``i * batch`` to ``(i + 1) * batch`` of
    ``synthetic_data(seed, steps * batch)``, records their mean squared error
    under the current parameters, and updates the parameters from its gradient.
    The model's initial parameters come from ``nnx.Rngs(seed)``. The step is
    compiled once and reused for every batch.

    Args:
      strategy: ``"data_parallel"`` splits each batch's rows over ``devices``
        devices with ``jax.shard_map``, the model and the optimizer replicated;
        ``"unsharded"`` runs everything on the first device with ``jax.jit``.
      devices: how many devices the data-parallel run uses; it must divide
        ``batch``. By default as many as divide ``batch``, up to all of them.
        The unsharded run uses one (``None`` or ``1``).
      steps: training steps, at least 1.
      batch: examples per step, at least 1.
      lr: the learning rate, a positive finite number.
      seed: seeds the data and the initial parameters.

    Returns:
      The ``steps`` losses, a float32 NumPy array. A data-parallel run's loss is
      the mean over the whole batch (the ``pmean`` of the devices' means).

    Raises:
      TypeError: for a count that is not an integer, or an ``lr`` that is not
        a real number.
      ValueError: for an unknown ``strategy``, a count below 1, more devices
        than there are or a number that does not divide ``batch``, several
        devices for the unsharded run, or an ``lr`` that is not positive and
        finite.

    Examples:
      Ten steps on 8 devices and on one give the same losses, to float32 rounding:

      >>> import numpy as np
      >>> from shard_tutorial.training_run import train
      >>> split = train("data_parallel", steps=10)
      >>> whole = train("unsharded", steps=10)
      >>> split.shape, split.dtype
      ((10,), dtype('float32'))
      >>> np.allclose(split, whole, rtol=1e-5, atol=0)
      True
      >>> train("unsharded", devices=8)
      Traceback (most recent call last):
      ...
      ValueError: devices must be 1 (or None) for the unsharded strategy, got 8
    """
    steps = require_count(steps, "steps")
    step, (model, optimizer), where = training_step(
        strategy, devices=devices, batch=batch, lr=lr, seed=seed
    )
    x_all, y_all = synthetic_data(seed, steps * batch)
    losses = []
    for i in range(steps):
        rows = slice(i * batch, (i + 1) * batch)
        x, y = jax.device_put((x_all[rows], y_all[rows]), where)
        model, optimizer, loss = step(model, optimizer, x, y)
        # One step in flight at a time. Dispatched ahead, the next step's all-reduce can
        # hold the CPU client's threads while a device still finishes this step: seen once
        # with jax 0.10.2 on a loaded machine, XLA aborted after 40 s of "7 of 8 threads".
        losses.append(jax.block_until_ready(loss))
    return np.asarray(jax.device_get(losses), dtype=np.float32)


def training_step(
    strategy: Strategy = "data_parallel",
    *,
    devices: int | None = None,
    batch: int = 64,
    lr: float = 0.1,
    seed: int = 0,
) -> tuple[Step, tuple[MLP, nnx.Optimizer], jax.Device | NamedSharding]:
    """What :func:`train` runs: the compiled step, the initial state, where batches go.

    The arguments are :func:`train`'s. The step is
    ``step(model, optimizer, x, y) -> (model, optimizer, loss)``, compiled once
    per strategy and mesh; ``model`` and ``optimizer`` start laid out as it
    wants them (on the first device, or a whole copy on each of the mesh's);
    ``jax.device_put(rows, where)`` lays a batch out as it wants it.

    Returns:
      ``(step, (model, optimizer), where)``.

    Raises:
      TypeError: as :func:`train` does.
      ValueError: as :func:`train` does.

    Examples:
      >>> import jax
      >>> from shard_tutorial.training_run import synthetic_data, training_step
      >>> step, (model, optimizer), where = training_step("data_parallel")
      >>> tuple(where.spec), dict(where.mesh.shape)
      (('data',), {'data': 8})
      >>> x, y = jax.device_put(synthetic_data(0, 64), where)
      >>> model, optimizer, loss = step(model, optimizer, x, y)
      >>> float(loss)  # doctest: +ELLIPSIS
      0.7231...
    """
    device_count = _check_devices(strategy, devices, batch)
    lr = _check_lr(lr)
    model = MLP(rngs=nnx.Rngs(seed))
    optimizer = nnx.Optimizer(model, _sgd(lr), wrt=nnx.Param)
    if strategy == "unsharded":
        first = jax.devices()[0]
        return _unsharded_step(), jax.device_put((model, optimizer), first), first
    mesh = _data_mesh(device_count)
    rows_split = NamedSharding(mesh, P(DATA_AXIS))  # a block of rows on each device
    return _data_parallel_step(mesh), _replicate((model, optimizer), mesh), rows_split


def _update(
    model: MLP, optimizer: nnx.Optimizer, x: jax.Array, y: jax.Array, axis: str | None
) -> tuple[MLP, nnx.Optimizer, jax.Array]:
    """One training step on the rows at hand; ``axis`` names the mesh axis they are split over."""

    def loss_fn(model: MLP) -> jax.Array:
        loss = mse(model, x, y)  # this device's rows (all of them, unsharded)
        return loss if axis is None else jax.lax.pmean(loss, axis)  # the whole batch's

    # Under shard_map the parameters are invariant over `axis` (in_specs=P()): their
    # gradient comes back summed over the devices. No psum or pmean of the gradients.
    loss, grads = jax.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return model, optimizer, loss


@functools.cache
def _sgd(lr: float) -> optax.GradientTransformation:
    """SGD with momentum, one object per learning rate, shared by every run with that rate.

    Not Adam: Adam divides each gradient by its own running scale, so a gradient 8
    or 64 times too large (the classic data-parallel mistakes) would train almost
    exactly as the right one, and comparing loss curves could not catch it.

    The optimizer object is part of the step's pytree structure (``nnx.Optimizer``
    holds it), so a new one would make ``jax.jit`` compile the step again each run.
    """
    return optax.sgd(lr, momentum=0.9)


@functools.cache
def _unsharded_step() -> Step:
    """The step on one device, compiled once."""
    return jax.jit(functools.partial(_update, axis=None))


@functools.cache
def _data_parallel_step(mesh: Mesh) -> Step:
    """The data-parallel step on ``mesh``, compiled once per mesh."""
    return jax.jit(
        jax.shard_map(
            functools.partial(_update, axis=DATA_AXIS),
            mesh=mesh,
            in_specs=(P(), P(), P(DATA_AXIS), P(DATA_AXIS)),  # model, optimizer, x, y
            out_specs=(P(), P(), P()),  # the same model, optimizer and loss everywhere
        )
    )


@functools.cache
def _data_mesh(devices: int) -> Mesh:
    return jax.make_mesh((devices,), (DATA_AXIS,), devices=jax.devices()[:devices])


def _replicate(tree: T, mesh: Mesh) -> T:
    """A whole copy of every array on every device of ``mesh``.

    The spec names every axis (``P(None, None)`` for a matrix), as the step's
    outputs do: an equal sharding spelled ``P()`` would make the step compile a
    second time for its second call.
    """

    def whole_copy(array: jax.Array) -> jax.Array:
        return jax.device_put(array, NamedSharding(mesh, P(*[None] * np.ndim(array))))

    return jax.tree.map(whole_copy, tree)


def _check_devices(strategy: object, devices: object, batch: object) -> int:
    """The number of devices the run uses, after checking the arguments that set it."""
    if strategy not in get_args(Strategy):
        msg = f"strategy must be one of {get_args(Strategy)}, got {strategy!r}"
        raise ValueError(msg)
    batch = require_count(batch, "batch")
    if strategy == "unsharded":
        if devices not in (None, 1):
            msg = f"devices must be 1 (or None) for the unsharded strategy, got {devices!r}"
            raise ValueError(msg)
        return 1
    available = jax.device_count()
    if devices is None:
        return usable_device_count(batch, available)
    count = require_count(devices, "devices", unit=" number of devices")
    if count > available:
        msg = f"devices must be at most the {available} devices JAX has, got {count}"
        raise ValueError(msg)
    if batch % count:
        msg = f"devices must divide batch ({batch}) into equal blocks of rows, got {count}"
        raise ValueError(msg)
    return count


def _check_lr(lr: object) -> float:
    real = require_finite_number(lr, "lr")
    if not isinstance(real, float) or real <= 0:
        msg = f"lr must be a positive finite number, got {lr!r}"
        raise ValueError(msg)
    return real


# Okabe and Ito's colour-blind-safe palette; each curve has its own line style too.
_STYLES = (
    {"color": "#0072B2", "linestyle": "solid", "linewidth": 3.0, "style": "a thick solid line"},
    {"color": "#D55E00", "linestyle": "dashed", "linewidth": 1.6, "style": "a dashed line"},
    {"color": "#000000", "linestyle": "dotted", "linewidth": 1.6, "style": "a dotted line"},
)
_INK = "#1a1a1a"  # text and axes, on the figure's white background (17:1)


def loss_plot(curves: Mapping[str, np.ndarray], *, title: str = "Training loss") -> Picture:
    """Draw loss curves against the step, on a log scale, in one figure.

    Each curve has its own colour *and* line style (a thick solid line, a dashed
    one, a dotted one), drawn in order, so curves that lie on top of each other
    all stay visible and are told apart without colour. The text alternative says
    where each curve starts and ends, and how far apart the curves are at most.

    Args:
      curves: a legend label for each curve, and its losses (one per step); at
        most 3 curves, all of the same length, positive numbers.
      title: the figure's heading.

    Returns:
      A :class:`~shard_tutorial.pictures.Picture`, which notebooks show as a
      picture with its text alternative.

    Raises:
      ValueError: for no curve or more than 3, curves of different lengths, or
        losses that are not positive finite numbers.

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.training_run import loss_plot
      >>> plot = loss_plot({"one": np.array([1.0, 0.5, 0.25]), "two": np.array([1.0, 0.5, 0.25])})
      >>> print(plot.alt)
      Training loss (log scale) against the step, 3 steps. one (a thick solid line) falls from 1 to 0.25. two (a dashed line) falls from 1 to 0.25. The curves lie on top of each other: at every step they differ by at most 0 of the loss.
      >>> plot.svg.lstrip().startswith("<?xml")
      True
    """
    from matplotlib.figure import Figure  # noqa: PLC0415 (drawing is optional)

    arrays = {label: np.asarray(losses, dtype=np.float64) for label, losses in curves.items()}
    _check_curves(arrays)
    figure = Figure(figsize=(5.0, 3.3), layout="constrained")  # small: big text on a phone
    figure.patch.set_facecolor("#ffffff")
    ax = figure.add_subplot()
    described = []
    for (label, losses), style in zip(arrays.items(), _STYLES, strict=False):
        ax.plot(
            np.arange(len(losses)),
            losses,
            label=label,
            color=style["color"],
            linestyle=style["linestyle"],
            linewidth=style["linewidth"],
        )
        described.append(
            f"{label} ({style['style']}) falls from {losses[0]:.3g} to {losses[-1]:.3g}."
        )
    ax.set_yscale("log")
    ax.set_xlabel("step", color=_INK, fontsize=11)
    ax.set_ylabel("loss (mean squared error)", color=_INK, fontsize=11)
    ax.set_title(title, color=_INK, fontsize=12)
    ax.tick_params(colors=_INK, which="both", labelsize=10)
    for spine in ax.spines.values():
        spine.set_color(_INK)
    ax.grid(visible=True, which="major", color="#d0d0d0", linewidth=0.6)
    ax.legend(frameon=True, labelcolor=_INK, fontsize=10)
    steps = len(next(iter(arrays.values())))
    alt = [f"{title} (log scale) against the step, {steps} steps.", *described]
    if len(arrays) > 1:
        stacked = np.stack(list(arrays.values()))
        apart = float(np.max((stacked.max(0) - stacked.min(0)) / stacked.min(0)))
        together = "lie on top of each other" if apart < 1e-3 else "are apart"
        alt.append(
            f"The curves {together}: at every step they differ by at most {apart:.2g} of the loss."
        )
    return Picture(
        svg_source(figure, transparent=False),
        " ".join(alt),
        css_class="loss-plot",
        max_width="36rem",
        # A white card: the axes stay readable in light and dark themes alike.
        style="background:#ffffff;border-radius:0.5rem",
    )


def _check_curves(curves: Mapping[str, np.ndarray]) -> None:
    if not 1 <= len(curves) <= len(_STYLES):
        msg = f"curves must hold 1 to {len(_STYLES)} curves, got {len(curves)}"
        raise ValueError(msg)
    lengths = {label: losses.shape for label, losses in curves.items()}
    if len(set(lengths.values())) > 1 or any(len(s) != 1 or s[0] < 1 for s in lengths.values()):
        msg = f"curves must be 1-D and of one length, got shapes {lengths}"
        raise ValueError(msg)
    for label, losses in curves.items():
        if not (np.isfinite(losses).all() and (losses > 0).all()):
            msg = f"curves[{label!r}] must hold positive finite losses (a log scale)"
            raise ValueError(msg)
