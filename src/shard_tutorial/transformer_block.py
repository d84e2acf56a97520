"""One transformer block trained on a 2 x 4 mesh: FSDP, tensor and sequence parallelism at once.

The closing page of Part V trains this block with the three ways of splitting a
layer that large models combine, on a mesh with axes ``("data", "model")``:

- **data parallelism and FSDP over** ``"data"``: the batch is split over
  ``"data"``, and so is one dimension of every weight matrix between steps;
  inside the step each weight is gathered whole over ``"data"``
  (``jax.lax.all_gather``), and differentiating that gather reduce-scatters its
  gradient back (see :mod:`shard_tutorial.problems.fsdp_sgd_step`);
- **tensor parallelism over** ``"model"``: the attention heads, and the hidden
  units of the MLP, are split over ``"model"`` (Megatron-LM's layout: the first
  matrix of each sub-layer split by columns, the second by rows, see
  :mod:`shard_tutorial.problems.tensor_parallel_mlp`);
- **sequence parallelism over** ``"model"``: between the sub-layers, where
  tensor parallelism would keep a whole copy of the activations on every
  ``"model"`` device, the sequence is split over ``"model"`` instead. An
  all-gather over ``"model"`` brings the whole sequence in before each
  sub-layer's first matrix, and a reduce-scatter over ``"model"`` adds the
  heads' (or hidden units') partial results and splits the sequence again after
  its second, where tensor parallelism alone would all-reduce.

:func:`block` is the same block on one device, in plain ``jax.numpy``: the
oracle the sharded step is compared with, and the other curve of the page's
figure. :func:`train` trains either for a number of steps with Adam on a
teacher's outputs (:func:`synthetic_data`) and returns the loss of every step.
:func:`predicted_costs` gives what the step holds and sends on each device from
the sizes alone, by the rules of :mod:`shard_tutorial.costs`, at any size.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any, Literal, get_args

import jax
import jax.numpy as jnp
import numpy as np
import optax  # type: ignore[import-untyped]  # ships no type information
from jax.sharding import AbstractMesh, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial.costs import Transfer, sent_per_device
from shard_tutorial.meshes import DATA_AXIS, MODEL_AXIS
from shard_tutorial.validation import require_count

__all__ = [
    "SPECS",
    "BlockConfig",
    "BlockCosts",
    "Params",
    "Strategy",
    "block",
    "init_params",
    "loss",
    "mesh_2x4",
    "placed",
    "predicted_costs",
    "sharded_gradients",
    "synthetic_data",
    "train",
    "training_step",
]

Params = dict[str, jax.Array]
"""The block's parameters by name (see :data:`SPECS` for their shapes and layouts)."""

Strategy = Literal["fsdp_tp_sp", "unsharded"]
"""Where :func:`train` runs: split over a 2 x 4 mesh, or all on one device."""

SPECS: dict[str, P] = {
    "norm1": P(),  # (d_model,): small, a copy on every device
    "qkv": P(DATA_AXIS, None, MODEL_AXIS, None),  # (d_model, 3, heads, head_dim)
    "out": P(MODEL_AXIS, None, DATA_AXIS),  # (heads, head_dim, d_model)
    "norm2": P(),  # (d_model,)
    "up": P(DATA_AXIS, MODEL_AXIS),  # (d_model, d_ff)
    "down": P(MODEL_AXIS, DATA_AXIS),  # (d_ff, d_model)
}
"""How each parameter lies on the mesh between steps: heads and hidden units over
``"model"`` (tensor parallelism), one other dimension over ``"data"`` (FSDP)."""

# The dimension of each parameter that FSDP splits over "data" (gathered in the step).
_FSDP_AXIS = {"qkv": 0, "out": 2, "up": 0, "down": 1}


@dataclasses.dataclass(frozen=True)
class BlockConfig:
    """The sizes of the block and of a batch.

    Attributes:
      d_model: features per token.
      heads: attention heads; ``d_model`` must be a multiple of it.
      d_ff: hidden units of the MLP.
      seq: tokens per sequence.
      batch: sequences per batch.

    Examples:
      >>> from shard_tutorial.transformer_block import BlockConfig
      >>> BlockConfig().head_dim
      8
    """

    d_model: int = 32
    heads: int = 4
    d_ff: int = 64
    seq: int = 16
    batch: int = 8

    def __post_init__(self) -> None:
        """Check that every size is positive and the heads divide ``d_model``."""
        for name in ("d_model", "heads", "d_ff", "seq", "batch"):
            require_count(getattr(self, name), name)
        if self.d_model % self.heads:
            msg = f"d_model ({self.d_model}) must be a multiple of heads ({self.heads})"
            raise ValueError(msg)

    @property
    def head_dim(self) -> int:
        """Features per head: ``d_model // heads``."""
        return self.d_model // self.heads


def init_params(config: BlockConfig, seed: int) -> dict[str, np.ndarray]:
    """The block's initial parameters, as NumPy float32 arrays made from ``seed``.

    Matrices are drawn with a standard deviation of ``1 / sqrt(fan_in)``; the
    norms' scales start at 1.

    Examples:
      >>> from shard_tutorial.transformer_block import BlockConfig, init_params
      >>> {k: v.shape for k, v in init_params(BlockConfig(), 0).items()}["qkv"]
      (32, 3, 4, 8)
    """
    rng = np.random.default_rng(seed)
    shapes = _shapes(config)
    d, f = config.d_model, config.d_ff

    def normal(name: str, fan_in: int) -> np.ndarray:
        return (rng.normal(size=shapes[name]) / math.sqrt(fan_in)).astype(np.float32)

    return {
        "norm1": np.ones(shapes["norm1"], np.float32),
        "qkv": normal("qkv", d),
        "out": normal("out", d),
        "norm2": np.ones(shapes["norm2"], np.float32),
        "up": normal("up", d),
        "down": normal("down", f),
    }


def _shapes(config: BlockConfig) -> dict[str, tuple[int, ...]]:
    """Each parameter's shape: what :func:`init_params` draws, and :func:`predicted_costs` lays out."""
    d, h, e, f = config.d_model, config.heads, config.head_dim, config.d_ff
    return {
        "norm1": (d,), "qkv": (d, 3, h, e), "out": (h, e, d),
        "norm2": (d,), "up": (d, f), "down": (f, d),
    }  # fmt: skip


def _rms_norm(x: jax.Array, scale: jax.Array) -> jax.Array:
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * scale


def _attention(h: jax.Array, qkv: jax.Array) -> jax.Array:
    """Causal self-attention of ``h`` (b, T, d) with the heads of ``qkv``: (b, T, heads, e)."""
    q, k, v = (jnp.einsum("btd,dhe->bthe", h, qkv[:, i]) for i in range(3))
    scores = jnp.einsum("bqhe,bkhe->bhqk", q, k) / math.sqrt(q.shape[-1])
    length = h.shape[1]
    causal = jnp.tril(jnp.ones((length, length), bool))
    weights = jax.nn.softmax(jnp.where(causal, scores, -jnp.inf), axis=-1)
    return jnp.einsum("bhqk,bkhe->bqhe", weights, v)


def block(params: Params, x: jax.Array) -> jax.Array:
    """The block on one device: ``x + attention(norm(x))``, then ``+ mlp(norm(.))``.

    Pre-norm residual sub-layers, RMS norms, causal multi-head attention, a
    GELU MLP. No biases, so every weight is a matrix that the sharded step
    splits.

    Args:
      params: the parameters (see :func:`init_params`).
      x: tokens, shape (batch, seq, d_model).

    Returns:
      The block's output, the shape of ``x``.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial.transformer_block import BlockConfig, block, init_params
      >>> params = {k: jnp.asarray(v) for k, v in init_params(BlockConfig(), 0).items()}
      >>> block(params, jnp.ones((2, 16, 32))).shape
      (2, 16, 32)
    """
    heads = _attention(_rms_norm(x, params["norm1"]), params["qkv"])
    x = x + jnp.einsum("bthe,hed->btd", heads, params["out"])
    hidden = jax.nn.gelu(_rms_norm(x, params["norm2"]) @ params["up"])
    return x + hidden @ params["down"]


def loss(params: Params, x: jax.Array, y: jax.Array) -> jax.Array:
    """The mean squared difference between the block's output and ``y``, on one device."""
    return jnp.mean((block(params, x) - y) ** 2)


def synthetic_data(config: BlockConfig, seed: int, batches: int) -> tuple[np.ndarray, np.ndarray]:
    """``batches`` batches of random tokens and a teacher block's outputs for them.

    The teacher is a block with its own random parameters (from ``seed + 1``):
    the student (from :func:`init_params`) learns to reproduce it, so the
    loss can go far down, and any difference between two ways of computing a
    step shows in it.

    Returns:
      ``(x, y)``, each of shape (batches, batch, seq, d_model), float32.
    """
    rng = np.random.default_rng(seed)
    shape = (batches, config.batch, config.seq, config.d_model)
    x = rng.normal(size=shape).astype(np.float32)
    teacher = {k: jnp.asarray(v) for k, v in init_params(config, seed + 1).items()}
    y = np.asarray(_blocks(teacher, jnp.asarray(x)))
    return x, y


# The block applied to every batch of a stack of batches: (batches, b, t, d) -> same.
_blocks = jax.jit(jax.vmap(block, in_axes=(None, 0)))


def _gathered(params: Params) -> Params:
    """Each FSDP-split weight gathered whole over ``"data"`` (its ``"model"`` split kept)."""
    return {
        name: jax.lax.all_gather(value, DATA_AXIS, axis=_FSDP_AXIS[name], tiled=True)
        if name in _FSDP_AXIS
        else value
        for name, value in params.items()
    }


def _local_loss(params: Params, x: jax.Array, y: jax.Array) -> jax.Array:
    """One device's part of the loss: its sequences over ``"data"``, its tokens over ``"model"``.

    ``x`` and ``y`` are (batch / data, seq / model, d_model); the weights are
    this device's blocks, laid out as :data:`SPECS` says.
    """
    w = _gathered(params)

    def sub_layer(x: jax.Array, first: Callable[[jax.Array], jax.Array]) -> jax.Array:
        # Sequence parallel -> tensor parallel: every "model" device needs every token.
        whole = jax.lax.all_gather(x, MODEL_AXIS, axis=1, tiled=True)
        partial = first(whole)  # this device's heads (or hidden units) only
        # Add the heads' parts and split the sequence again: one reduce-scatter.
        return jax.lax.psum_scatter(partial, MODEL_AXIS, scatter_dimension=1, tiled=True)

    x = x + sub_layer(
        _rms_norm(x, w["norm1"]),
        lambda h: jnp.einsum("bthe,hed->btd", _attention(h, w["qkv"]), w["out"]),
    )
    x = x + sub_layer(_rms_norm(x, w["norm2"]), lambda h: jax.nn.gelu(h @ w["up"]) @ w["down"])
    count = x.size * jax.lax.axis_size(DATA_AXIS) * jax.lax.axis_size(MODEL_AXIS)
    return jax.lax.psum(jnp.sum((x - y) ** 2), (DATA_AXIS, MODEL_AXIS)) / count


_F32 = 4  # bytes of a float32: every parameter, moment and activation


@dataclasses.dataclass(frozen=True)
class BlockCosts:
    """What each device holds and sends for one step of the split block (:func:`predicted_costs`).

    Attributes:
      mesh: the mesh's sizes, ``{"data": ..., "model": ...}``.
      params: bytes of the device's blocks of the parameters.
      optimizer_state: bytes of Adam's two moments (laid out as the parameters)
        and its step count (one int32).
      batch: bytes of the device's blocks of ``x`` and ``y``.
      transfers: the step's collectives, by purpose.
    """

    mesh: dict[str, int]
    params: int
    optimizer_state: int
    batch: int
    transfers: tuple[Transfer, ...]

    @property
    def arguments(self) -> int:
        """The step's arguments on a device: parameters, optimizer state and batch."""
        return self.params + self.optimizer_state + self.batch

    @property
    def sent(self) -> float:
        """The bytes each device sends per step, over every collective."""
        return sum(t.sent for t in self.transfers)

    @property
    def collectives(self) -> int:
        """How many collectives the step runs."""
        return sum(t.count for t in self.transfers)


def predicted_costs(
    config: BlockConfig | None = None, *, data: int = 2, model: int = 4
) -> BlockCosts:
    """What one training step holds and sends per device, from the sizes alone.

    Nothing is allocated or compiled: each parameter's block is
    ``NamedSharding(mesh, SPECS[name]).shard_shape(shape)`` on an abstract
    ``data x model`` mesh, and each collective's bytes are those of a ring
    (:func:`shard_tutorial.costs.sent_per_device`). The collectives are those
    :func:`sharded_gradients` asks for and JAX's transposes add:

    - FSDP: an all-gather over ``"data"`` of each of the four weight matrices
      (its ``"model"`` block made whole), and its transpose, a reduce-scatter of
      the weight's gradient;
    - sequence parallelism, in each of the two sub-layers: an all-gather over
      ``"model"`` of the device's sequences, every token, before the first
      matrix, and a reduce-scatter over ``"model"`` after the second, in the
      forward pass; in the backward pass the transpose of each (a reduce-scatter
      for the all-gather, an all-gather for the reduce-scatter);
    - one all-reduce over every device of the loss and the norms' scales'
      gradients (XLA combines them into one).

    The tests and the page compare these with the collectives of the compiled
    step and with XLA's memory analysis of its arguments, on the 2 x 4 mesh.

    Args:
      config: the sizes (default :class:`BlockConfig`).
      data: devices along ``"data"``: divides the batch and ``d_model``.
      model: devices along ``"model"``: divides the heads, ``d_ff`` and the sequence.

    Returns:
      A :class:`BlockCosts`.

    Raises:
      ValueError: for a size the mesh does not divide, naming it.

    Examples:
      The block of the page, on 2 x 4: 57,799 bytes sent per device per step,
      half of it by the sequence-parallel all-gathers and reduce-scatters:

      >>> from shard_tutorial.transformer_block import predicted_costs
      >>> costs = predicted_costs()
      >>> costs.params, costs.optimizer_state, costs.batch, costs.sent, costs.collectives
      (4352, 8708, 4096, 57799.0, 17)
      >>> predicted_costs(data=3)
      Traceback (most recent call last):
      ...
      ValueError: config.batch (8) must be a multiple of data (3)
    """
    config = config or BlockConfig()
    data, model = require_count(data, "data"), require_count(model, "model")
    for name, size, parts, axis in (
        ("batch", config.batch, data, "data"),
        ("d_model", config.d_model, data, "data"),
        ("heads", config.heads, model, "model"),
        ("d_ff", config.d_ff, model, "model"),
        ("seq", config.seq, model, "model"),
    ):
        if size % parts:
            msg = f"config.{name} ({size}) must be a multiple of {axis} ({parts})"
            raise ValueError(msg)
    mesh = AbstractMesh((data, model), (DATA_AXIS, MODEL_AXIS))
    d = config.d_model
    shapes = _shapes(config)

    def nbytes(shape: tuple[int, ...], spec: P) -> int:
        return math.prod(NamedSharding(mesh, spec).shard_shape(shape)) * _F32

    def gathered(spec: P) -> P:  # the "data" split made whole
        return P(*(None if entry == DATA_AXIS else entry for entry in spec))

    params = sum(nbytes(shapes[name], SPECS[name]) for name in shapes)
    held = sum(nbytes(shapes[name], SPECS[name]) for name in _FSDP_AXIS)
    whole = sum(nbytes(shapes[name], gathered(SPECS[name])) for name in _FSDP_AXIS)
    sequences = config.batch // data * config.seq * d * _F32  # every token of its sequences
    tokens = sequences // model  # its tokens of each
    weights = len(_FSDP_AXIS)
    transfers: list[Transfer] = []
    if data > 1:
        transfers += [
            Transfer("weights", "all-gather", (DATA_AXIS,), data, weights, whole,
                     sent_per_device("all-gather", data, whole)),
            Transfer("weights' gradients", "reduce-scatter", (DATA_AXIS,), data, weights, held,
                     sent_per_device("reduce-scatter", data, held)),
        ]  # fmt: skip
    if model > 1:
        # Two sub-layers, each one of each kind forward and one of each kind backward.
        transfers += [
            Transfer("activations", "all-gather", (MODEL_AXIS,), model, 4, 4 * sequences,
                     sent_per_device("all-gather", model, 4 * sequences)),
            Transfer("activations", "reduce-scatter", (MODEL_AXIS,), model, 4, 4 * tokens,
                     sent_per_device("reduce-scatter", model, 4 * tokens)),
        ]  # fmt: skip
    if data * model > 1:
        summed = _F32 + 2 * d * _F32  # the loss, and the gradients of the two norms' scales
        transfers.append(
            Transfer("loss and norms' gradients", "all-reduce", (DATA_AXIS, MODEL_AXIS),
                     data * model, 1, summed, sent_per_device("all-reduce", data * model, summed))
        )  # fmt: skip
    return BlockCosts(
        mesh={DATA_AXIS: data, MODEL_AXIS: model},
        params=params,
        optimizer_state=2 * params + 4,  # Adam's mu and nu, and its int32 step count
        batch=2 * tokens,  # x and y
        transfers=tuple(transfers),
    )


@functools.cache
def mesh_2x4() -> Mesh:
    """The 2 x 4 mesh, axes ``("data", "model")``, on the first 8 devices.

    Raises:
      ValueError: with fewer than 8 devices.
    """
    if jax.device_count() < 8:
        msg = f"the 2 x 4 mesh needs 8 devices, and JAX has {jax.device_count()}"
        raise ValueError(msg)
    devices = np.array(jax.devices()[:8]).reshape(2, 4)
    return Mesh(devices, (DATA_AXIS, MODEL_AXIS))


def sharded_gradients(mesh: Mesh) -> Callable[[Params, jax.Array, jax.Array], tuple]:
    """The loss and its gradients, computed with ``jax.shard_map`` over ``mesh``.

    Every argument arrives laid out as the step keeps it: the parameters as
    :data:`SPECS` says, ``x`` and ``y`` with their sequences over ``"data"`` and
    their tokens over ``"model"``. The gradients leave laid out as the
    parameters: each weight's gradient reduce-scattered over ``"data"`` by the
    transpose of its gather; the norms' scales, a copy on every device, get
    theirs summed over every device by JAX (the transpose of their implicit
    broadcast; see the page "Gradients across devices").
    """
    tokens = P(DATA_AXIS, MODEL_AXIS, None)
    return jax.shard_map(
        jax.value_and_grad(_local_loss),
        mesh=mesh,
        in_specs=(SPECS, tokens, tokens),
        out_specs=(P(), SPECS),
    )


def _optimizer(lr: float) -> optax.GradientTransformation:
    return optax.adam(lr)


@functools.cache
def training_step(
    strategy: Strategy, lr: float
) -> Callable[[Params, Any, jax.Array, jax.Array], tuple]:  # Any: optax's OptState (a chex alias)
    """One Adam step, jitted: ``(params, opt_state, x, y) -> (params, opt_state, loss)``.

    With ``"fsdp_tp_sp"`` the gradients come from :func:`sharded_gradients` on
    :func:`mesh_2x4`, and Adam's update, element by element, keeps every
    parameter and moment where it lies; with ``"unsharded"``, from
    ``jax.value_and_grad(loss)`` on one device.
    """
    gradients = (
        sharded_gradients(mesh_2x4()) if strategy == "fsdp_tp_sp" else jax.value_and_grad(loss)
    )
    optimizer = _optimizer(lr)

    @jax.jit
    def step(
        params: Params, opt_state: optax.OptState, x: jax.Array, y: jax.Array
    ) -> tuple[Params, optax.OptState, jax.Array]:
        value, grads = gradients(params, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    return step


def placed(
    strategy: Strategy, params: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray
) -> tuple[Params, list[jax.Array], list[jax.Array]]:
    """The parameters and each batch of ``x`` and ``y``, where ``strategy`` keeps them.

    On one device for ``"unsharded"``; on :func:`mesh_2x4` for ``"fsdp_tp_sp"``:
    the parameters as :data:`SPECS` says, each batch's sequences over ``"data"``
    and its tokens over ``"model"``.

    Returns:
      ``(params, xs, ys)``: the parameters, and a list of batches of each.

    Examples:
      >>> from shard_tutorial.transformer_block import BlockConfig, init_params, placed
      >>> import numpy as np
      >>> x = np.zeros((2, 8, 16, 32), np.float32)
      >>> params, xs, ys = placed("fsdp_tp_sp", init_params(BlockConfig(), 0), x, x)
      >>> len(xs), xs[0].addressable_shards[0].data.shape
      (2, (4, 4, 32))
    """
    if strategy == "unsharded":
        device = jax.devices()[0]
        return (
            {k: jax.device_put(v, device) for k, v in params.items()},
            [jax.device_put(batch, device) for batch in x],
            [jax.device_put(batch, device) for batch in y],
        )
    mesh = mesh_2x4()
    tokens = NamedSharding(mesh, P(DATA_AXIS, MODEL_AXIS, None))  # (batch, seq, d_model)
    return (
        {k: jax.device_put(v, NamedSharding(mesh, SPECS[k])) for k, v in params.items()},
        [jax.device_put(batch, tokens) for batch in x],
        [jax.device_put(batch, tokens) for batch in y],
    )


def train(
    strategy: Strategy,
    *,
    steps: int = 200,
    lr: float = 3e-3,
    config: BlockConfig | None = None,
    seed: int = 0,
) -> np.ndarray:
    """Train the block from :func:`init_params` on the teacher's data; the loss of every step.

    Both strategies start from the same parameters and see the same batches in
    the same order (``steps`` batches of :func:`synthetic_data`, cycled through
    16 distinct ones).

    Args:
      strategy: ``"fsdp_tp_sp"`` (on :func:`mesh_2x4`) or ``"unsharded"``.
      steps: how many steps, at least 1.
      lr: Adam's learning rate.
      config: the sizes (default :class:`BlockConfig`); on the 2 x 4 mesh the
        batch must be a multiple of 2, the heads, ``d_ff`` and the sequence of 4.
      seed: the seed of the parameters and the data.

    Returns:
      The loss before each step's update, shape ``(steps,)``.

    Raises:
      ValueError: for an unknown strategy, steps below 1, or sizes the mesh
        does not divide.

    Examples:
      >>> from shard_tutorial.transformer_block import train
      >>> losses = train("fsdp_tp_sp", steps=3)
      >>> losses.shape, bool(losses[2] < losses[0])
      ((3,), True)
    """
    if strategy not in get_args(Strategy):
        msg = f"strategy must be one of {get_args(Strategy)}, got {strategy!r}"
        raise ValueError(msg)
    require_count(steps, "steps")
    config = config or BlockConfig()
    if strategy == "fsdp_tp_sp":
        for name, size, parts in (
            ("batch", config.batch, 2),
            ("heads", config.heads, 4),
            ("d_ff", config.d_ff, 4),
            ("seq", config.seq, 4),
            ("d_model", config.d_model, 2),
        ):
            if size % parts:
                msg = f"config.{name} ({size}) must be a multiple of {parts} on the 2 x 4 mesh"
                raise ValueError(msg)
    x, y = synthetic_data(config, seed, batches=16)
    params, xs, ys = placed(strategy, init_params(config, seed), x, y)
    step = training_step(strategy, lr)
    opt_state = _optimizer(lr).init(params)
    losses = []
    for i in range(steps):
        params, opt_state, value = step(params, opt_state, xs[i % 16], ys[i % 16])
        # One step in flight at a time. XLA's CPU client runs each device's share of a
        # program on a pool of at least as many threads as devices
        # (xla/pjrt/cpu/cpu_client.cc). With all 40 steps and their batches queued at
        # once, a loaded machine once had 7 devices wait in an all-gather for an 8th
        # that never came, until XLA aborted the process at its 40 s collective timeout
        # (jax 0.10.2: 1 of 32 fresh processes, 4 at once on 2 cores). Waiting for each
        # step leaves the pool to that step alone: a precaution, not a proven fix, since
        # 30 runs under load aborted neither with it nor without it.
        losses.append(float(value))
    return np.asarray(losses, np.float32)
