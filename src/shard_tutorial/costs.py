"""What a transformer's training step costs per device, from its shapes alone.

:func:`costs` answers, for a model's shapes (a :class:`TransformerConfig`), a
mesh's shape (axes ``"data"``, ``"fsdp"`` and ``"model"``) and a strategy (one
of :data:`STRATEGIES`): how many bytes of parameters, of gradients and of
optimizer state each device holds, and how many bytes each device sends per
step for the collectives the strategy needs. Nothing is allocated: the
parameters' shapes come from :func:`jax.eval_shape` of :func:`init_params`
(:class:`jax.ShapeDtypeStruct`), and each device's block of each parameter from
a :class:`jax.sharding.NamedSharding` on a :class:`jax.sharding.AbstractMesh`,
a mesh with sizes and no devices, so a 256-device mesh is as cheap as an
8-device one.

The model is a decoder-only transformer shaped like Llama's (:data:`LLAMA3_8B`
ships the shapes of Llama 3 8B): an embedding table, ``n_layers`` blocks of
grouped-query attention and a SwiGLU MLP, each after an RMSNorm, a last RMSNorm
and an output layer not tied to the embedding. Rotary position embeddings are
left out: they have no parameters and move nothing. :func:`train_step` is that
model's real training step, written with :func:`jax.shard_map` for each
strategy, so the calculator's figures can be checked against XLA's memory
analysis and the collectives of the compiled program on the fake devices (the
tests do, for :data:`SMALL`).

The strategies, each a way to lay the parameters on the mesh:

- ``"DP"``: every parameter whole on every device; the batch split over
  ``"data"`` (and ``"fsdp"``, if that axis is longer than 1); the gradients
  all-reduced.
- ``"FSDP"``: every parameter split along its first axis over ``"fsdp"``,
  gathered whole for the forward and the backward pass; the gradients
  reduce-scattered back (and all-reduced over ``"data"``, if longer than 1).
- ``"TP"``: Megatron-style tensor parallelism over ``"model"``: the query, key,
  value, gate and up projections split by columns (heads, hidden units), the
  attention output and down projections by rows; each block's two partial
  outputs all-reduced over ``"model"`` in the forward pass and the gradients of
  their inputs in the backward pass. The embedding, the output layer and the
  norms stay whole on every device.
- ``"FSDP x TP"``: TP's layout over ``"model"``, with every parameter also
  split over ``"fsdp"`` along its other axis (the embedding, output layer and
  norms along their first).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AbstractMesh, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial.pictures import Picture, svg_source
from shard_tutorial.validation import require_count

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "AXES",
    "GB",
    "LLAMA3_8B",
    "OPTIMIZERS",
    "SMALL",
    "STRATEGIES",
    "Costs",
    "Transfer",
    "TransformerConfig",
    "abstract_mesh",
    "chart",
    "costs",
    "init_optimizer",
    "init_params",
    "largest_fitting_layers",
    "loss",
    "markdown_table",
    "mesh_shape",
    "numpy_loss",
    "param_shapes",
    "param_specs",
    "real_mesh",
    "sent_per_device",
    "train_step",
]

AXES = ("data", "fsdp", "model")
"""The mesh axes, in order: what splits the batch only, the batch and the parameters, the
parameters only."""

STRATEGIES = ("DP", "FSDP", "TP", "FSDP x TP")
"""The strategies the calculator knows."""

OPTIMIZERS = {"sgd": 0, "momentum": 1, "adam": 2}
"""Each optimizer -> how many arrays the size of the parameters it keeps (Adam also keeps
a step count, one int32)."""

GB = 10**9
"""A gigabyte, as accelerators' memory is quoted (80 GB)."""

_BYTES = 4  # float32: parameters, gradients, optimizer state and activations


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """The shapes of a Llama-style decoder-only transformer.

    Attributes:
      d_model: the width of the residual stream.
      n_layers: how many blocks.
      n_heads: query heads per block.
      n_kv_heads: key and value heads per block (grouped-query attention): it
        divides ``n_heads``.
      d_ff: the MLP's hidden width.
      vocab: the vocabulary's size.
      name: what to call it.
    """

    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    vocab: int
    name: str = "transformer"

    def __post_init__(self) -> None:
        """Check the sizes: counts, and heads that divide the width and each other."""
        for field in ("d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "vocab"):
            require_count(getattr(self, field), field)
        if self.d_model % self.n_heads:
            msg = f"n_heads ({self.n_heads}) must divide d_model ({self.d_model})"
            raise ValueError(msg)
        if self.n_heads % self.n_kv_heads:
            msg = f"n_kv_heads ({self.n_kv_heads}) must divide n_heads ({self.n_heads})"
            raise ValueError(msg)

    @property
    def head_dim(self) -> int:
        """Each head's width, ``d_model // n_heads``."""
        return self.d_model // self.n_heads


LLAMA3_8B = TransformerConfig(
    d_model=4096,
    n_layers=32,
    n_heads=32,
    n_kv_heads=8,
    d_ff=14336,
    vocab=128256,
    name="Llama 3 8B",
)
"""The shapes of Llama 3 8B (``hidden_size``, ``num_hidden_layers``,
``num_attention_heads``, ``num_key_value_heads``, ``intermediate_size`` and
``vocab_size`` of its published ``config.json``; embedding and output layer
not tied): 8,030,261,248 parameters."""

SMALL = TransformerConfig(
    d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64, vocab=64, name="small"
)
"""A small config of the same shape, checked on the fake devices: its sizes divide by 8
where a strategy splits them."""

_COLUMNS = ("wq", "wk", "wv", "w_gate", "w_up")  # split by columns in TP
_ROWS = ("wo", "w_down")  # split by rows in TP


def init_params(config: TransformerConfig, key: jax.Array) -> dict[str, Any]:
    """Random float32 parameters of ``config``'s shapes (norms at 1).

    ``params["layers"]`` is a list with one dict per block. Matrices are ``(in,
    out)``: a block computes ``x @ w``.

    Examples:
      >>> import jax
      >>> from shard_tutorial.costs import SMALL, init_params
      >>> params = init_params(SMALL, jax.random.key(0))
      >>> sorted(params), len(params["layers"]), params["layers"][0]["wk"].shape
      (['embed', 'final_norm', 'head', 'layers'], 2, (32, 16))
    """
    return _jitted_init(config)(key)


@functools.cache
def _jitted_init(config: TransformerConfig) -> Callable[[jax.Array], dict[str, Any]]:
    return jax.jit(functools.partial(_init, config))  # one program, not one per array


def _init(config: TransformerConfig, key: jax.Array) -> dict[str, Any]:
    d, hd = config.d_model, config.head_dim
    shapes = {
        "attn_norm": (d,),
        "wq": (d, config.n_heads * hd),
        "wk": (d, config.n_kv_heads * hd),
        "wv": (d, config.n_kv_heads * hd),
        "wo": (config.n_heads * hd, d),
        "mlp_norm": (d,),
        "w_gate": (d, config.d_ff),
        "w_up": (d, config.d_ff),
        "w_down": (config.d_ff, d),
    }
    keys = iter(jax.random.split(key, 2 + config.n_layers * len(shapes)))

    def weight(shape: tuple[int, ...]) -> jax.Array:
        if len(shape) == 1:
            return jnp.ones(shape, jnp.float32)
        return jax.random.normal(next(keys), shape, jnp.float32) * shape[0] ** -0.5

    return {
        "embed": jax.random.normal(next(keys), (config.vocab, d), jnp.float32),
        "layers": [
            {name: weight(shape) for name, shape in shapes.items()} for _ in range(config.n_layers)
        ],
        "final_norm": jnp.ones((d,), jnp.float32),
        "head": weight((d, config.vocab)),
    }


def param_shapes(config: TransformerConfig) -> dict[str, Any]:
    """The parameters' shapes and dtypes, by :func:`jax.eval_shape` of :func:`init_params`.

    Nothing is allocated: every leaf is a :class:`jax.ShapeDtypeStruct`.

    Examples:
      >>> import math
      >>> import jax
      >>> from shard_tutorial.costs import LLAMA3_8B, param_shapes
      >>> shapes = param_shapes(LLAMA3_8B)
      >>> shapes["embed"]
      ShapeDtypeStruct(shape=(128256, 4096), dtype=float32)
      >>> sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(shapes))
      8030261248
    """
    return _param_shapes(config)


@functools.cache
def _param_shapes(config: TransformerConfig) -> dict[str, Any]:
    return jax.eval_shape(lambda: _init(config, jax.random.key(0)))


def _check_strategy(strategy: object) -> str:
    if strategy not in STRATEGIES:
        msg = f"strategy must be one of {', '.join(map(repr, STRATEGIES))}, got {strategy!r}"
        raise ValueError(msg)
    return str(strategy)


def _uses(strategy: str) -> tuple[bool, bool]:
    """(splits parameters over "fsdp", splits them over "model")."""
    return "FSDP" in strategy, "TP" in strategy


def param_specs(config: TransformerConfig, strategy: str) -> dict[str, Any]:
    """How ``strategy`` lays each parameter on the mesh: a pytree of ``PartitionSpec``.

    Examples:
      >>> from shard_tutorial.costs import SMALL, param_specs
      >>> for strategy in ("DP", "FSDP", "TP", "FSDP x TP"):
      ...     specs = param_specs(SMALL, strategy)
      ...     print(strategy, specs["embed"], specs["layers"][0]["wq"], specs["layers"][0]["wo"])
      DP P() P() P()
      FSDP P('fsdp',) P('fsdp',) P('fsdp',)
      TP P() P(None, 'model') P('model',)
      FSDP x TP P('fsdp',) P('fsdp', 'model') P('model', 'fsdp')
    """
    strategy = _check_strategy(strategy)
    fsdp, model = _uses(strategy)
    first = P("fsdp") if fsdp else P()
    layer = dict.fromkeys(("attn_norm", "mlp_norm"), first)
    for name in _COLUMNS:
        layer[name] = P("fsdp" if fsdp else None, "model") if model else first
    for name in _ROWS:
        layer[name] = (P("model", "fsdp") if fsdp else P("model")) if model else first
    return {
        "embed": first,
        "layers": [dict(layer) for _ in range(config.n_layers)],
        "final_norm": first,
        "head": first,
    }


def _full_mesh_shape(shape: Mapping[str, int]) -> dict[str, int]:
    if not isinstance(shape, Mapping):
        msg = f"mesh_shape must be a mapping of axis names to sizes, got {shape!r}"
        raise TypeError(msg)
    unknown = set(shape) - set(AXES)
    if unknown:
        msg = f"mesh_shape's axes must be among {AXES}, got {sorted(unknown)}"
        raise ValueError(msg)
    return {axis: require_count(shape.get(axis, 1), f"mesh_shape[{axis!r}]") for axis in AXES}


def abstract_mesh(shape: Mapping[str, int]) -> AbstractMesh:
    """A mesh with these axis sizes and no devices (missing axes have size 1).

    Examples:
      >>> from shard_tutorial.costs import abstract_mesh
      >>> abstract_mesh({"fsdp": 32, "model": 8}).axis_sizes
      (1, 32, 8)
    """
    full = _full_mesh_shape(shape)
    return AbstractMesh(tuple(full.values()), AXES)


def mesh_shape(strategy: str, devices: int, *, model: int = 8) -> dict[str, int]:
    """The usual mesh for ``strategy`` on ``devices`` devices.

    DP splits the batch over every device (``"data"``), FSDP the batch and the
    parameters (``"fsdp"``); TP and FSDP x TP split the parameters ``model``
    ways (8: the GPUs of one node, and Llama 3 8B's key-value heads) and the
    rest over ``"data"`` or ``"fsdp"``.

    Examples:
      >>> from shard_tutorial.costs import mesh_shape
      >>> [mesh_shape(s, 256) for s in ("DP", "FSDP", "TP", "FSDP x TP")]
      [{'data': 256}, {'fsdp': 256}, {'data': 32, 'model': 8}, {'fsdp': 32, 'model': 8}]
    """
    strategy = _check_strategy(strategy)
    devices = require_count(devices, "devices")
    model = require_count(model, "model")
    fsdp, tp = _uses(strategy)
    if not tp:
        return {"fsdp" if fsdp else "data": devices}
    if devices % model:
        msg = f"model ({model}) must divide devices ({devices}) for {strategy}"
        raise ValueError(msg)
    return {"fsdp" if fsdp else "data": devices // model, "model": model}


@dataclasses.dataclass(frozen=True)
class Transfer:
    """Collectives of one kind that a step runs for one purpose, and what they move.

    Attributes:
      what: what moves, e.g. ``"gradients"``.
      kind: the HLO collective, e.g. ``"all-reduce"``.
      axes: the mesh axes of its groups.
      devices: how many devices each group has.
      count: how many such collectives (XLA may merge some into one: the bytes
        are the same).
      nbytes: the bytes of their results on one device, added up.
      sent: the bytes each device sends for them (as
        :func:`shard_tutorial.collective_costs.ring_bytes` counts a collective).
    """

    what: str
    kind: str
    axes: tuple[str, ...]
    devices: int
    count: int
    nbytes: int
    sent: float


def sent_per_device(kind: str, devices: int, nbytes: float) -> float:
    """Bytes one device sends for a collective whose result is ``nbytes`` on each device.

    The ring algorithm's figures, as :func:`shard_tutorial.collective_costs.ring_bytes` gives
    them for a collective read from a compiled program, for the kinds a training
    step's layouts need.

    Args:
      kind: ``"all-gather"``, ``"reduce-scatter"`` or ``"all-reduce"``.
      devices: how many devices each group has.
      nbytes: the bytes of the collective's result on one device.

    Raises:
      ValueError: for another kind.

    Examples:
      >>> from shard_tutorial.costs import sent_per_device
      >>> [sent_per_device(k, 4, 1024) for k in ("all-gather", "reduce-scatter", "all-reduce")]
      [768.0, 3072, 1536.0]
    """
    if kind not in ("all-gather", "reduce-scatter", "all-reduce"):
        msg = f"kind must be 'all-gather', 'reduce-scatter' or 'all-reduce', got {kind!r}"
        raise ValueError(msg)
    if kind == "reduce-scatter":
        return (devices - 1) * nbytes
    if kind == "all-gather":
        return (devices - 1) / devices * nbytes
    return 2 * (devices - 1) / devices * nbytes  # all-reduce


@dataclasses.dataclass(frozen=True)
class Costs:
    """What one device holds and sends for a training step (see :func:`costs`).

    Attributes:
      config: the model.
      strategy: one of :data:`STRATEGIES`.
      mesh: every axis' size, e.g. ``{"data": 1, "fsdp": 32, "model": 8}``.
      optimizer: a key of :data:`OPTIMIZERS`.
      params: bytes of parameters on each device.
      grads: bytes of gradients on each device (laid out as the parameters).
      optimizer_state: bytes of optimizer state on each device.
      transfers: the collectives of one step, grouped by purpose.
    """

    config: TransformerConfig
    strategy: str
    mesh: dict[str, int]
    optimizer: str
    params: int
    grads: int
    optimizer_state: int
    transfers: tuple[Transfer, ...]

    @property
    def devices(self) -> int:
        """How many devices the mesh has."""
        return math.prod(self.mesh.values())

    @property
    def total(self) -> int:
        """Parameters, gradients and optimizer state: the bytes of the training state."""
        return self.params + self.grads + self.optimizer_state

    @property
    def sent(self) -> float:
        """The bytes each device sends per step, over every collective."""
        return sum(t.sent for t in self.transfers)


def costs(
    config: TransformerConfig,
    mesh: Mapping[str, int],
    strategy: str,
    *,
    optimizer: str = "adam",
    batch: int = 256,
    seq_len: int = 8192,
    regather: bool = False,
) -> Costs:
    """Bytes per device of parameters, gradients and optimizer state, and bytes sent per step.

    Computed from shapes alone: :func:`param_shapes` gives every parameter's
    shape, and ``NamedSharding(abstract_mesh(mesh), spec).shard_shape(shape)``
    the block of it each device holds under :func:`param_specs`. Everything is
    float32. The collectives are those :func:`train_step` compiles to:

    - FSDP: an all-gather over ``"fsdp"`` of each parameter (twice with
      ``regather``, when the backward pass gathers again instead of keeping the
      forward pass' copy) and a reduce-scatter of its gradient;
    - a gradient whole on the devices of a batch axis (``"data"``, and
      ``"fsdp"`` when the strategy does not split parameters over it):
      all-reduced over them;
    - TP: four all-reduces per block over ``"model"`` of the activations of a
      device's sequences, ``batch / (data * fsdp) * seq_len * d_model`` floats:
      the attention's and the MLP's partial outputs in the forward pass, the
      gradients of their inputs in the backward pass (six with FSDP and
      ``regather``: the backward pass runs the forward pass' two again);
    - the loss: one all-reduce of a float32 over the batch axes.

    A collective with one device in its groups moves nothing and is left out.
    Activations and temporaries are not counted: they depend on the batch, on
    remat, and on what XLA keeps.

    Args:
      config: the model's shapes.
      mesh: axis name -> size, axes among :data:`AXES` (missing ones are 1).
      strategy: one of :data:`STRATEGIES`.
      optimizer: ``"sgd"``, ``"momentum"`` or ``"adam"``.
      batch: sequences per step, over every device; divisible by ``data * fsdp``.
      seq_len: tokens per sequence.
      regather: whether FSDP's backward pass gathers the parameters again.

    Returns:
      A :class:`Costs`.

    Raises:
      ValueError: for an unknown strategy, optimizer or axis, or a size that does
        not divide evenly (the message names the parameter).
      TypeError: for a size that is not an integer, or a mesh that is not a mapping.

    Examples:
      Llama 3 8B with Adam on 256 devices, FSDP: the 8,030,261,248 parameters'
      32,121,044,992 bytes split 256 ways, and as much again for the
      gradients, twice as much (plus the int32 step count) for Adam's moments:

      >>> from shard_tutorial.costs import LLAMA3_8B, costs
      >>> c = costs(LLAMA3_8B, {"fsdp": 256}, "FSDP")
      >>> c.params, c.grads, c.optimizer_state, c.total
      (125472832, 125472832, 250945668, 501891332)
      >>> [(t.what, t.kind, t.axes, t.sent) for t in c.transfers]  # doctest: +NORMALIZE_WHITESPACE
      [('parameters', 'all-gather', ('fsdp',), 31995572160.0),
       ('gradients', 'reduce-scatter', ('fsdp',), 31995572160),
       ('loss', 'all-reduce', ('fsdp',), 7.96875)]
      >>> costs(LLAMA3_8B, {"model": 256}, "TP")
      Traceback (most recent call last):
      ...
      ValueError: mesh_shape['model'] (256) must divide n_kv_heads (8): TP gives each device whole heads
    """
    strategy = _check_strategy(strategy)
    if optimizer not in OPTIMIZERS:
        msg = f"optimizer must be one of {', '.join(map(repr, OPTIMIZERS))}, got {optimizer!r}"
        raise ValueError(msg)
    full = _full_mesh_shape(mesh)
    batch = require_count(batch, "batch")
    seq_len = require_count(seq_len, "seq_len")
    batch_devices = full["data"] * full["fsdp"]
    if batch % batch_devices:
        msg = f"batch ({batch}) must divide into data * fsdp = {batch_devices} blocks"
        raise ValueError(msg)
    abstract = abstract_mesh(full)
    fsdp, tp = _uses(strategy)
    if tp and config.n_kv_heads % full["model"]:
        msg = (
            f"mesh_shape['model'] ({full['model']}) must divide n_kv_heads "
            f"({config.n_kv_heads}): TP gives each device whole heads"
        )
        raise ValueError(msg)
    shapes = param_shapes(config)
    specs = param_specs(config, strategy)
    held = 0
    gathered = 0
    for path, leaf in jax.tree_util.tree_leaves_with_path(shapes):
        spec = _at(specs, path)
        name = _path_text(path)
        held += _shard_bytes(name, leaf.shape, spec, abstract, full)
        if fsdp:  # the block a device holds once "fsdp" is gathered
            gathered += _shard_bytes(name, leaf.shape, _without(spec, "fsdp"), abstract, full)
    transfers = []
    if fsdp and full["fsdp"] > 1:
        n = full["fsdp"]
        count = len(jax.tree.leaves(shapes))
        for _ in range(2 if regather else 1):
            transfers.append(
                Transfer("parameters", "all-gather", ("fsdp",), n, count, gathered,
                         sent_per_device("all-gather", n, gathered))
            )  # fmt: skip
        transfers.append(
            Transfer("gradients", "reduce-scatter", ("fsdp",), n, count, held,
                     sent_per_device("reduce-scatter", n, held))
        )  # fmt: skip
    replicated = ("data",) if fsdp else ("data", "fsdp")
    axes = tuple(a for a in replicated if full[a] > 1)
    n = math.prod(full[a] for a in axes)
    if n > 1:
        transfers.append(
            Transfer("gradients", "all-reduce", axes, n, len(jax.tree.leaves(shapes)), held,
                     sent_per_device("all-reduce", n, held))
        )  # fmt: skip
    if tp and full["model"] > 1:
        n = full["model"]
        activation = batch // batch_devices * seq_len * config.d_model * _BYTES
        # Two per block forward, two backward; with regather the backward pass runs the
        # forward pass again, its two all-reduces included.
        count = (6 if regather and fsdp else 4) * config.n_layers
        transfers.append(
            Transfer("activations", "all-reduce", ("model",), n, count, count * activation,
                     sent_per_device("all-reduce", n, count * activation))
        )  # fmt: skip
    batch_axes = tuple(a for a in ("data", "fsdp") if full[a] > 1)
    if batch_axes:
        transfers.append(
            Transfer("loss", "all-reduce", batch_axes, batch_devices, 1, _BYTES,
                     sent_per_device("all-reduce", batch_devices, _BYTES))
        )  # fmt: skip
    slots = OPTIMIZERS[optimizer]
    return Costs(
        config=config,
        strategy=strategy,
        mesh=full,
        optimizer=optimizer,
        params=held,
        grads=held,
        optimizer_state=slots * held + (4 if optimizer == "adam" else 0),
        transfers=tuple(transfers),
    )


def _at(tree: Any, path: Sequence[Any]) -> Any:
    for entry in path:
        tree = tree[entry.key if hasattr(entry, "key") else entry.idx]
    return tree


def _path_text(path: Sequence[Any]) -> str:
    text = ""
    for entry in path:
        text += f".{entry.key}" if hasattr(entry, "key") else f"[{entry.idx}]"
    return text.lstrip(".")


def _without(spec: P, axis: str) -> P:
    return P(*(None if entry == axis else entry for entry in spec))


def _shard_bytes(
    name: str, shape: tuple[int, ...], spec: P, mesh: AbstractMesh, full: dict[str, int]
) -> int:
    for dim, entry in enumerate(spec):
        if entry is None:
            continue
        ways = math.prod(full[a] for a in ((entry,) if isinstance(entry, str) else entry))
        if shape[dim] % ways:
            msg = (
                f"{name} has shape {tuple(shape)}: its axis {dim} ({shape[dim]}) does not "
                f"divide into {ways} blocks (mesh {full}, spec {spec})"
            )
            raise ValueError(msg)
    block = NamedSharding(mesh, spec).shard_shape(tuple(shape))
    return math.prod(block) * _BYTES


def largest_fitting_layers(
    config: TransformerConfig,
    mesh: Mapping[str, int],
    strategy: str,
    *,
    budget: int = 80 * GB,
    optimizer: str = "adam",
) -> int:
    """The most blocks of ``config``'s width whose training state fits in ``budget`` bytes.

    :attr:`Costs.total` grows by the same bytes with each block, so it is
    ``total(1) + (n - 1) * (total(2) - total(1))``, solved for ``n``. 0 when
    not even one block fits.

    Examples:
      >>> from shard_tutorial.costs import LLAMA3_8B, largest_fitting_layers
      >>> largest_fitting_layers(LLAMA3_8B, {"data": 256}, "DP")  # 32 would be 8B: no
      18
    """
    one, two = (
        costs(dataclasses.replace(config, n_layers=n), mesh, strategy, optimizer=optimizer)
        for n in (1, 2)
    )
    per_layer = two.total - one.total
    if one.total > budget:
        return 0
    return 1 + (budget - one.total) // per_layer


# -- The real step, to check the calculator against ------------------------------------


def real_mesh(shape: Mapping[str, int]) -> Mesh:
    """A mesh of the first devices with axes :data:`AXES` of these sizes (missing ones 1).

    Examples:
      >>> from shard_tutorial.costs import real_mesh
      >>> dict(real_mesh({"fsdp": 4, "model": 2}).shape)
      {'data': 1, 'fsdp': 4, 'model': 2}
    """
    full = _full_mesh_shape(shape)
    return _real_mesh(tuple(full.values()))


@functools.cache
def _real_mesh(sizes: tuple[int, ...]) -> Mesh:
    count = math.prod(sizes)
    if count > jax.device_count():
        msg = f"the mesh needs {count} devices, there are {jax.device_count()}"
        raise ValueError(msg)
    devices = np.array(jax.devices()[:count]).reshape(sizes)
    return Mesh(devices, AXES)


def _rms_norm(x: jax.Array, weight: jax.Array) -> jax.Array:
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * weight


def _forward_loss(
    params: dict[str, Any],
    tokens: jax.Array,
    config: TransformerConfig,
    weight: Callable[[str, jax.Array], jax.Array],
    reduce: Callable[[jax.Array], jax.Array],
    split: Callable[[jax.Array], jax.Array],
) -> jax.Array:
    """The mean next-token cross-entropy.

    ``weight`` makes a parameter usable (gathers it), ``split`` marks a block's
    input as about to be used by devices holding different parts of the block
    (Megatron's *f*: nothing in the forward pass, an all-reduce of its gradient
    in the backward pass), ``reduce`` adds a block's partial outputs (Megatron's
    *g*: an all-reduce in the forward pass).
    """
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    x = weight("embed", params["embed"])[inputs]
    seq = inputs.shape[1]
    causal = jnp.tril(jnp.ones((seq, seq), bool))
    for layer in params["layers"]:
        w = {name: weight(name, value) for name, value in layer.items()}
        h = split(_rms_norm(x, w["attn_norm"]))
        hd = config.head_dim
        q = (h @ w["wq"]).reshape(*h.shape[:2], -1, hd)
        k = (h @ w["wk"]).reshape(*h.shape[:2], -1, hd)
        v = (h @ w["wv"]).reshape(*h.shape[:2], -1, hd)
        group = q.shape[2] // k.shape[2]  # query heads per key-value head
        k, v = jnp.repeat(k, group, axis=2), jnp.repeat(v, group, axis=2)
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) * hd**-0.5
        scores = jnp.where(causal, scores, -jnp.inf)
        attended = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)
        x = x + reduce(attended.reshape(*h.shape[:2], -1) @ w["wo"])
        h = split(_rms_norm(x, w["mlp_norm"]))
        x = x + reduce((jax.nn.silu(h @ w["w_gate"]) * (h @ w["w_up"])) @ w["w_down"])
    logits = _rms_norm(x, weight("final_norm", params["final_norm"])) @ weight(
        "head", params["head"]
    )
    chosen = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return jnp.mean(jax.nn.logsumexp(logits, axis=-1) - chosen)


def loss(params: dict[str, Any], tokens: jax.Array, config: TransformerConfig) -> jax.Array:
    """The model's loss on one device: mean next-token cross-entropy over ``tokens`` (B, S + 1).

    Examples:
      >>> import jax
      >>> import jax.numpy as jnp
      >>> from shard_tutorial.costs import SMALL, init_params, loss
      >>> tokens = jnp.zeros((2, 5), jnp.int32)
      >>> float(loss(init_params(SMALL, jax.random.key(0)), tokens, SMALL)) > 0
      True
    """
    return _forward_loss(params, tokens, config, lambda _name, w: w, _same, _same)


def _same(x: jax.Array) -> jax.Array:
    return x


def numpy_loss(params: dict[str, Any], tokens: np.ndarray, config: TransformerConfig) -> float:
    """:func:`loss` in NumPy, float64: the oracle the tests check the JAX model against.

    Examples:
      >>> import jax
      >>> import numpy as np
      >>> from shard_tutorial.costs import SMALL, init_params, loss, numpy_loss
      >>> params, tokens = init_params(SMALL, jax.random.key(0)), np.arange(10).reshape(2, 5)
      >>> bool(np.isclose(numpy_loss(params, tokens, SMALL), loss(params, tokens, SMALL), rtol=1e-5))
      True
    """
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
    tokens = np.asarray(tokens)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]

    def norm(x: np.ndarray, w: np.ndarray) -> np.ndarray:
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6) * w

    x = p["embed"][inputs]
    batch, seq, _ = x.shape
    hd, heads, kv = config.head_dim, config.n_heads, config.n_kv_heads
    for w in p["layers"]:
        h = norm(x, w["attn_norm"])
        q = (h @ w["wq"]).reshape(batch, seq, heads, hd)
        k = (h @ w["wk"]).reshape(batch, seq, kv, hd)
        v = (h @ w["wv"]).reshape(batch, seq, kv, hd)
        out = np.zeros_like(q)
        for head in range(heads):
            kh, vh = k[:, :, head // (heads // kv)], v[:, :, head // (heads // kv)]
            scores = np.einsum("bqd,bkd->bqk", q[:, :, head], kh) / np.sqrt(hd)
            scores = np.where(np.tril(np.ones((seq, seq), bool)), scores, -np.inf)
            weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
            weights /= weights.sum(axis=-1, keepdims=True)
            out[:, :, head] = weights @ vh
        x = x + out.reshape(batch, seq, -1) @ w["wo"]
        h = norm(x, w["mlp_norm"])
        gate = h @ w["w_gate"]
        x = x + (gate / (1 + np.exp(-gate)) * (h @ w["w_up"])) @ w["w_down"]
    logits = norm(x, p["final_norm"]) @ p["head"]
    top = logits.max(axis=-1)
    logsumexp = top + np.log(np.exp(logits - top[..., None]).sum(axis=-1))
    chosen = np.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return float(np.mean(logsumexp - chosen))


def init_optimizer(params: dict[str, Any], optimizer: str) -> dict[str, Any]:
    """The optimizer's state for ``params``: zeros shaped like them, and Adam's step count.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial.costs import init_optimizer
      >>> sorted(init_optimizer({"w": jnp.ones(3)}, "adam"))
      ['count', 'm', 'v']
    """
    if optimizer not in OPTIMIZERS:
        msg = f"optimizer must be one of {', '.join(map(repr, OPTIMIZERS))}, got {optimizer!r}"
        raise ValueError(msg)
    slots = {"sgd": (), "momentum": ("m",), "adam": ("m", "v")}[optimizer]
    state: dict[str, Any] = {slot: jax.tree.map(jnp.zeros_like, params) for slot in slots}
    if optimizer == "adam":
        state["count"] = jnp.zeros((), jnp.int32)
    return state


def _update(
    params: Any, grads: Any, state: dict[str, Any], optimizer: str, lr: float
) -> tuple[Any, dict[str, Any]]:
    """One optimizer step, elementwise (no collective): SGD, heavy-ball momentum 0.9, or Adam."""
    if optimizer == "sgd":
        return jax.tree.map(lambda p, g: p - lr * g, params, grads), state
    if optimizer == "momentum":
        m = jax.tree.map(lambda m, g: 0.9 * m + g, state["m"], grads)
        return jax.tree.map(lambda p, m: p - lr * m, params, m), {"m": m}
    count = state["count"] + 1
    m = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, state["m"], grads)
    v = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, state["v"], grads)
    t = count.astype(jnp.float32)
    scale_m, scale_v = 1 - 0.9**t, 1 - 0.999**t

    def step(p: jax.Array, m: jax.Array, v: jax.Array) -> jax.Array:
        return p - lr * (m / scale_m) / (jnp.sqrt(v / scale_v) + 1e-8)

    return jax.tree.map(step, params, m, v), {"m": m, "v": v, "count": count}


def _opt_specs(param_spec_tree: Any, optimizer: str) -> dict[str, Any]:
    slots = {"sgd": (), "momentum": ("m",), "adam": ("m", "v")}[optimizer]
    specs: dict[str, Any] = dict.fromkeys(slots, param_spec_tree)
    if optimizer == "adam":
        specs["count"] = P()
    return specs


def train_step(
    config: TransformerConfig,
    mesh: Mesh,
    strategy: str,
    *,
    optimizer: str = "adam",
    lr: float = 1e-3,
    regather: bool = False,
) -> Callable[..., tuple[Any, Any, jax.Array]]:
    """The model's training step as ``strategy`` splits it on ``mesh``, jitted.

    ``step(params, opt_state, tokens) -> (params, opt_state, loss)``, written with
    :func:`jax.shard_map`: ``params`` and ``opt_state`` laid out as
    :func:`param_specs` says, ``tokens`` (B, S + 1) split by rows over
    ``("data", "fsdp")``. Each parameter split over ``"fsdp"`` is
    all-gathered before use (under :func:`jax.checkpoint` with ``regather``, so
    the backward pass gathers it again); with TP, each block's partial outputs
    are ``psum``-ed over ``"model"``; the loss is the ``pmean`` over the batch
    axes. The gradients come back reduced by ``jax.grad`` itself: a
    reduce-scatter for a gathered parameter, an all-reduce for one used whole
    on devices holding different rows of the batch.

    Examples:
      >>> import jax
      >>> import numpy as np
      >>> from shard_tutorial.costs import SMALL, init_optimizer, init_params, loss
      >>> from shard_tutorial.costs import real_mesh, train_step
      >>> params = init_params(SMALL, jax.random.key(0))
      >>> tokens = np.arange(8 * 5).reshape(8, 5) % SMALL.vocab
      >>> step = train_step(SMALL, real_mesh({"fsdp": 2}), "FSDP")
      >>> _, _, sharded = step(params, init_optimizer(params, "adam"), tokens)
      >>> bool(np.isclose(sharded, loss(params, tokens, SMALL), rtol=1e-5))
      True
    """
    strategy = _check_strategy(strategy)
    if optimizer not in OPTIMIZERS:
        msg = f"optimizer must be one of {', '.join(map(repr, OPTIMIZERS))}, got {optimizer!r}"
        raise ValueError(msg)
    return _train_step(config, mesh, strategy, optimizer, float(lr), bool(regather))


@functools.cache
def _train_step(
    config: TransformerConfig,
    mesh: Mesh,
    strategy: str,
    optimizer: str,
    lr: float,
    regather: bool,
) -> Callable[..., tuple[Any, Any, jax.Array]]:
    fsdp, tp = _uses(strategy)
    specs = param_specs(config, strategy)
    layer_spec = specs["layers"][0]
    spec_of = {**layer_spec, **{k: v for k, v in specs.items() if k != "layers"}}

    def weight(name: str, w: jax.Array) -> jax.Array:
        spec = spec_of[name]
        for dim, entry in enumerate(spec):
            if entry == "fsdp":
                return jax.lax.all_gather(w, "fsdp", axis=dim, tiled=True)
        return w

    def reduce(x: jax.Array) -> jax.Array:
        return jax.lax.psum(x, "model") if tp else x

    def split(x: jax.Array) -> jax.Array:
        # Once, for the three projections (or two) that use x: jax.grad sums their
        # gradients of x on each device, then one all-reduce adds the devices' sums.
        # Left implicit, JAX would mark x as varying for each projection apart, and
        # all-reduce each one's gradient of x on its own.
        return jax.lax.pcast(x, "model", to="varying") if tp else x

    def local_loss(params: dict[str, Any], tokens: jax.Array) -> jax.Array:
        def forward(params: dict[str, Any]) -> jax.Array:
            return _forward_loss(params, tokens, config, weight, reduce, split)

        if fsdp and regather:
            forward = jax.checkpoint(forward)  # keep nothing: the backward pass gathers again
        return jax.lax.pmean(forward(params), ("data", "fsdp"))

    def local_step(
        params: dict[str, Any], state: dict[str, Any], tokens: jax.Array
    ) -> tuple[Any, Any, jax.Array]:
        value, grads = jax.value_and_grad(local_loss)(params, tokens)
        new_params, new_state = _update(params, grads, state, optimizer, lr)
        return new_params, new_state, value

    opt_specs = _opt_specs(specs, optimizer)
    batch = P(("data", "fsdp"), None)
    return jax.jit(
        jax.shard_map(
            local_step,
            mesh=mesh,
            in_specs=(specs, opt_specs, batch),
            out_specs=(specs, opt_specs, P()),
        )
    )


# -- Showing the figures -------------------------------------------------------------


def markdown_table(rows: Sequence[Costs]) -> str:
    """The figures as a Markdown table, in GB (10**9 bytes), one row per :class:`Costs`.

    Examples:
      >>> from shard_tutorial.costs import LLAMA3_8B, costs, markdown_table
      >>> print(markdown_table([costs(LLAMA3_8B, {"data": 64}, "DP")]))
      | strategy | mesh | parameters | gradients | optimizer state | total | fits in 80 GB | sent per step |
      |:--|:--|--:|--:|--:|--:|:--|--:|
      | DP | 64 (data) | 32.1 GB | 32.1 GB | 64.2 GB | 128.5 GB | no | 63.2 GB |
    """
    lines = [
        (
            "| strategy | mesh | parameters | gradients | optimizer state | total "
            "| fits in 80 GB | sent per step |"
        ),
        "|:--|:--|--:|--:|--:|--:|:--|--:|",
    ]
    for c in rows:
        mesh = " x ".join(f"{size} ({axis})" for axis, size in c.mesh.items() if size > 1)
        lines.append(
            f"| {c.strategy} | {mesh or '1'} | {c.params / GB:.1f} GB | {c.grads / GB:.1f} GB "
            f"| {c.optimizer_state / GB:.1f} GB | {c.total / GB:.1f} GB "
            f"| {'yes' if c.total <= 80 * GB else 'no'} | {c.sent / GB:.1f} GB |"
        )
    return "\n".join(lines)


INK = "#111111"
"""Text and outlines: dark, on the white page and on the light panel of dark mode."""

LINE_STYLES = {
    "DP": ("#E69F00", "-", "o"),  # orange, solid, circles
    "FSDP": ("#56B4E9", "--", "s"),  # sky blue, dashed, squares
    "TP": ("#009E73", ":", "^"),  # bluish green, dotted, triangles
    "FSDP x TP": ("#CC79A7", "-.", "D"),  # reddish purple, dash-dot, diamonds
}
"""Each strategy's line: an Okabe-Ito colour, a dash pattern and a marker, so colour is
never the only cue."""


def _figure(series: dict[str, list[Costs]], budget: int) -> Figure:
    from matplotlib.figure import Figure  # noqa: PLC0415 (drawing is optional)

    fig = Figure(figsize=(6.4, 6.2), layout="constrained")
    fig.patch.set_alpha(0.0)
    top, bottom = fig.subplots(2, 1, sharex=True)
    for ax, field, title in (
        (top, "total", "Training state per device (parameters, gradients, Adam)"),
        (bottom, "sent", "Bytes each device sends per step"),
    ):
        for strategy, rows in series.items():
            colour, dashes, marker = LINE_STYLES.get(strategy, ("#777777", "-", "x"))
            xs = [c.devices for c in rows]
            ys = [getattr(c, field) / GB for c in rows]
            ax.plot(xs, ys, color=colour, linestyle=dashes, marker=marker, label=strategy,
                    linewidth=2, markeredgecolor=INK, markeredgewidth=0.6)  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_ylabel("GB", color=INK)
        ax.set_title(title, loc="left", color=INK, fontsize=10.5, fontweight="bold")
        ax.patch.set_alpha(0.0)
        ax.tick_params(colors=INK, labelsize=9, which="both")
        for side in ax.spines.values():
            side.set_color(INK)
        ax.grid(True, which="major", color="#BBBBBB", linewidth=0.5)
    top.axhline(budget / GB, color=INK, linewidth=1.2)
    top.text(
        0.01, budget / GB, f" {budget / GB:.0f} GB", color=INK, fontsize=9, va="top",
        transform=top.get_yaxis_transform(),
    )  # fmt: skip
    top.legend(frameon=False, labelcolor=INK, fontsize=9, loc="lower left")
    bottom.legend(frameon=False, labelcolor=INK, fontsize=9, loc="upper right")
    bottom.set_xlabel("devices", color=INK)
    devices = [c.devices for c in series[next(iter(series))]]
    bottom.set_xticks(devices, [str(d) for d in devices])
    return fig


def chart(series: dict[str, list[Costs]], *, budget: int = 80 * GB) -> Picture:
    """Memory and traffic per device against device count, one line per strategy.

    ``series`` maps each strategy to its :class:`Costs` at growing device
    counts. Log scales on both axes; a horizontal line at ``budget`` bytes.
    Every line has its own dash pattern and marker, named in each panel's
    legend; the text alternative gives every figure.

    Examples:
      >>> from shard_tutorial.costs import LLAMA3_8B, chart, costs
      >>> rows = [costs(LLAMA3_8B, {"fsdp": n}, "FSDP") for n in (8, 16)]
      >>> picture = chart({"FSDP": rows})
      >>> print(picture.alt)  # doctest: +NORMALIZE_WHITESPACE
      Two line charts against the device count (8, 16), log scales, for Llama 3 8B, float32
      with Adam. Training state per device, in GB, with a line at 80 GB: FSDP 16.1, 8.0.
      Bytes each device sends per step, in GB: FSDP 56.2, 60.2.
    """
    first = next(iter(series.values()))
    devices = ", ".join(str(c.devices) for c in first)
    config = first[0].config.name
    state = "; ".join(
        f"{s} " + ", ".join(f"{c.total / GB:.1f}" for c in rows) for s, rows in series.items()
    )
    sent = "; ".join(
        f"{s} " + ", ".join(f"{c.sent / GB:.1f}" for c in rows) for s, rows in series.items()
    )
    alt = (
        f"Two line charts against the device count ({devices}), log scales, for {config}, "
        f"float32 with Adam. Training state per device, in GB, with a line at "
        f"{budget / GB:.0f} GB: {state}. Bytes each device sends per step, in GB: {sent}."
    )
    return Picture(
        svg_source(_figure(series, budget)),
        alt,
        css_class="costs-chart dark-light",
        max_width="36rem",
    )
