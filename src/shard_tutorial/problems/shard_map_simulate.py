"""Problem "NNX shard_map simulation": data parallelism as a loop, then for real.

In data parallelism every device holds the same model parameters and runs the
forward pass on its own block of the batch; the blocks of output, put back
together along the batch axis, equal the output of one device running the whole
batch. :func:`shard_map_simulate` spells that out as a Python loop over
``num_shards`` blocks on one device, which is what ``jax.shard_map`` does across
devices. :func:`data_parallel_forward` is the real thing: the same forward pass
through ``jax.shard_map`` with the parameters replicated on every device.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial.meshes import data_mesh_for, place
from shard_tutorial.problem import Case, Problem, precise
from shard_tutorial.problems._linear import linear_start
from shard_tutorial.validation import check_array, require_whole_number

__all__ = ["PROBLEM", "data_parallel_forward", "shard_map_simulate"]


def shard_map_simulate(seed: float, x: jax.Array, num_shards: float, features: float) -> jax.Array:
    """Simulate a data-parallel ``nnx.Linear`` forward pass over ``num_shards`` shards.

    Builds ``nnx.Linear(x.shape[-1], features, rngs=nnx.Rngs(seed))`` once, cuts
    ``x`` into ``num_shards`` equal blocks of rows with
    ``jax.lax.dynamic_slice_in_dim``, runs every block through that same model,
    concatenates the outputs along axis 0 and flattens them. The result equals
    the model applied to all of ``x`` at once, flattened. This problem teaches
    the slicing by hand, on one device: no mesh, no ``jax.shard_map``.

    ``seed``, ``num_shards`` and ``features`` arrive as floats (``2.0``, not
    ``2``): the problem comes from a set whose cases give every argument as a
    float array, and its cases keep that. Convert them to ``int`` first
    (``nnx.Rngs(0.0)`` fails with "Invalid rng value", and a shape cannot be a
    float); Python ints and 0-d arrays must work too. They fix the model's
    parameters and shapes, so under ``jax.jit`` they must stay concrete
    numbers (static arguments).

    How the arguments arrive: each array as a ``jax.Array`` on the default device,
    not split; each number as a Python number.

    Args:
      seed: seed of the model's parameters; a whole number, float or int.
      x: 2-D array of shape ``(N, in_dim)`` of numbers (any integer, float or
        complex dtype, ``bfloat16`` included), ``in_dim >= 1``, ``N``
        divisible by ``num_shards`` (``N = 0`` included).
      num_shards: how many blocks to cut the batch into, a whole number >= 1,
        float or int.
      features: output features of the linear layer, a whole number >= 1,
        float or int.

    Returns:
      1-D array of length ``N * features``, with the dtype the model gives
      (``float32`` for ``float32`` or ``bfloat16`` input, as ``nnx.Linear``'s
      parameters are ``float32``). It is an ordinary ``jax.Array`` on one device
      (``jax.typeof(y)`` is ``float32[12]``), since nothing here is sharded.

    Raises:
      TypeError: if ``x`` is not an array of numbers, if a count is not a
        number, or if a count is traced (inside ``jax.jit``).
      ValueError: if ``x`` is not 2-D or has no feature column, if a count is
        fractional or below 1, or if ``num_shards`` does not divide ``N``.

    Examples:
      >>> import jax
      >>> import jax.numpy as jnp
      >>> from shard_tutorial import shard_map_simulate
      >>> x = jnp.arange(8.0).reshape(4, 2)
      >>> y = shard_map_simulate(0.0, x, 2.0, 3.0)
      >>> jax.typeof(y)
      ShapedArray(float32[12])
      >>> y.reshape(4, 3)
      Array([[-0.875..., -0.659...,  0.449...],
             [-1.113..., -3.351...,  0.210...],
             [-1.351..., -6.042..., -0.028...],
             [-1.589..., -8.733..., -0.267...]], dtype=float32)

      Any shard count that divides the batch gives the same numbers:

      >>> bool(jnp.allclose(y, shard_map_simulate(0, x, 4, 3)))
      True

      Under ``jax.jit`` the counts are static arguments; traced, they are refused:

      >>> jax.jit(shard_map_simulate, static_argnums=(0, 2, 3))(0.0, x, 2.0, 3.0).shape
      (12,)
      >>> jax.jit(shard_map_simulate)(0.0, x, 2.0, 3.0)
      Traceback (most recent call last):
      ...
      TypeError: seed must be a concrete number, but here it is traced by a JAX transformation...
    """
    seed = require_whole_number(seed, "seed")
    num_shards = require_whole_number(num_shards, "num_shards", minimum=1)
    features = require_whole_number(features, "features", minimum=1)
    check_array(x, "x", ndim=2, layout="of shape (N, in_dim)")
    n, in_dim = x.shape
    if in_dim < 1:
        msg = f"x must have at least one feature column (in_dim >= 1), got shape {x.shape}"
        raise ValueError(msg)
    if n % num_shards:
        msg = (
            f"num_shards={num_shards} must divide the batch: x has N={n} rows, which do not "
            f"split into {num_shards} equal shards"
        )
        raise ValueError(msg)
    return _simulate(jax.random.key(seed), x, num_shards=num_shards, features=features)


@functools.partial(jax.jit, static_argnames=("num_shards", "features"))
def _simulate(key: jax.Array, x: jax.Array, *, num_shards: int, features: int) -> jax.Array:
    # One model for all shards: in data parallelism every device has the same parameters.
    model = nnx.Linear(x.shape[-1], features, rngs=nnx.Rngs(key))
    chunk = x.shape[0] // num_shards
    outs = []
    for i in range(num_shards):  # on a mesh these iterations run at once, one per device
        x_shard = jax.lax.dynamic_slice_in_dim(x, i * chunk, chunk, axis=0)
        outs.append(model(x_shard))
    return jnp.concatenate(outs, axis=0).reshape(-1)  # the blocks back in batch order


def data_parallel_forward(model: nnx.Module, x: jax.Array) -> jax.Array:
    """Apply ``model`` to ``x`` data-parallel: every device runs it on its block of rows.

    The parameters are replicated on every device and the rows of ``x`` are split
    along a mesh axis named ``"data"``, in equal blocks, one per device. Every
    batch size works: when the device count does not divide it, fewer devices
    are used (see :func:`~shard_tutorial.data_mesh`). Each device applies the
    whole model to its rows inside ``jax.shard_map``.

    Args:
      model: a Flax NNX module that maps a batch of rows to a batch of outputs,
        row by row (``nnx.Linear``, an MLP); it is not modified.
      x: 2-D array of shape ``(N, in_dim)`` of numbers: the batch.

    Returns:
      ``model(x)``, a ``jax.Array`` sharded along the batch axis over the
      devices used, on an Explicit mesh: ``jax.typeof(y)`` is
      ``float32[8@data,3]``. Inside a transformation (``jax.jit``, ``jax.grad``,
      ``jax.vmap``) the axis is Auto instead, see
      :func:`~shard_tutorial.data_mesh_for`.

    Raises:
      TypeError: if ``model`` is not an ``nnx.Module`` or ``x`` not a numeric array.
      ValueError: if ``x`` is not 2-D.

    Examples:
      >>> import jax
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from shard_tutorial import data_parallel_forward
      >>> model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
      >>> x = jnp.arange(16.0).reshape(8, 2)
      >>> y = data_parallel_forward(model, x)
      >>> jax.typeof(y)
      ShapedArray(float32[8@data,3])
      >>> bool(jnp.allclose(y, model(x)))
      True
    """
    if not isinstance(model, nnx.Module):
        msg = f"model must be a flax.nnx.Module (such as nnx.Linear), got {type(model).__name__}"
        raise TypeError(msg)
    check_array(x, "x", ndim=2, layout="of shape (N, in_dim)")
    graphdef, state = nnx.split(model)  # structure (static) and parameters (arrays)
    mesh = data_mesh_for(x, state)  # data_mesh(len(x)); Auto axes when traced
    x = place(x, NamedSharding(mesh, P("data")))  # jax.device_put, fast on CPU devices
    state = place(state, NamedSharding(mesh, P()))  # a full copy on every device
    return _forward_each_block(graphdef, mesh)(state, x)


@functools.lru_cache(maxsize=64)
def _forward_each_block(
    graphdef: nnx.GraphDef, mesh: Mesh
) -> Callable[[nnx.State, jax.Array], jax.Array]:
    """Build, once per model structure and mesh, the compiled data-parallel forward pass."""

    def forward_block(state: nnx.State, x_block: jax.Array) -> jax.Array:
        return nnx.merge(graphdef, state)(x_block)

    return jax.jit(
        jax.shard_map(
            forward_block,
            mesh=mesh,
            in_specs=(P(), P("data")),  # parameters replicated, rows split
            out_specs=P("data"),  # output rows back in batch order
        )
    )


def _unsharded(seed: float, x: jax.Array, num_shards: float, features: float) -> jax.Array:
    del num_shards  # splitting the batch must not change the answer
    model = nnx.Linear(x.shape[-1], int(features), rngs=nnx.Rngs(int(seed)))
    return model(x).reshape(-1)


def _oracle(seed: float, x: np.ndarray, num_shards: float, features: float) -> np.ndarray:
    del num_shards  # splitting the batch must not change the answer
    kernel, bias = linear_start(int(seed), x.shape[-1], int(features))
    return (precise(x) @ precise(kernel) + precise(bias)).reshape(-1)


def _explain(case: Case, expected: np.ndarray, received: np.ndarray) -> str | None:
    _, x, num_shards, features = case.args
    rows, shards, features = x.shape[0], int(num_shards), int(features)
    if received.shape == (rows, features):
        return "The output is not flattened: return it with .reshape(-1)"
    if received.shape != expected.shape or rows == 0:
        return None
    chunk = rows // shards
    blocks = expected.reshape(shards, chunk, features)
    joined_on_axis_1 = np.concatenate(list(blocks), axis=1).reshape(-1)
    if shards > 1 and np.allclose(received, joined_on_axis_1, rtol=1e-5, atol=1e-5):
        return (
            "These are the right blocks, joined along axis 1: join the shards' outputs along "
            "axis 0, the batch axis, before flattening"
        )
    got = received.reshape(shards, chunk, features)
    right = [
        bool(np.allclose(g, e, rtol=1e-5, atol=1e-5)) for g, e in zip(got, blocks, strict=True)
    ]
    if shards > 1 and right[0] and not all(right[1:]):
        return (
            "Shard 0's outputs are right and the other shards' are not, as if each shard had "
            "its own parameters: build the model once, outside the loop"
        )
    return None


def _cases() -> list[Case]:
    rng = np.random.default_rng(20260104)

    def normal(*shape: int) -> np.ndarray:
        return rng.normal(size=shape).astype(np.float32)

    return [
        Case(
            "worked example: 2 shards of 4 rows",
            (0.0, np.arange(32, dtype=np.float32).reshape(8, 4) / 10, 2.0, 3.0),
        ),
        Case("one shard: the whole batch", (1.0, normal(6, 3), 1.0, 2.0)),
        Case("one row per shard", (2.0, normal(5, 4), 5.0, 3.0)),
        Case("8 shards of 2 rows", (3.0, normal(16, 8), 8.0, 4.0)),
        Case("3 shards (not a power of two)", (4.0, normal(12, 5), 3.0, 2.0)),
        Case("one output feature", (42.0, normal(8, 6), 4.0, 1.0)),
        Case("one input feature", (5.0, normal(8, 1), 2.0, 3.0)),
        Case("empty batch", (6.0, np.zeros((0, 4), np.float32), 4.0, 3.0)),
        Case("int arguments instead of floats", (7, normal(6, 3), 3, 2)),
        Case("large seed", (float(2**31 + 5), normal(4, 4), 2.0, 4.0)),
        Case("bfloat16 input gives float32", (8.0, normal(6, 4).astype(jnp.bfloat16), 2.0, 3.0)),
    ]


# Fresh random cases for the checker. The problem teaches slicing by hand on one device,
# so it asks for no shard_map (no techniques).
def _generate(rng: np.random.Generator) -> Case:
    shards, chunk = int(rng.integers(1, 9)), int(rng.integers(1, 5))
    in_dim, features = int(rng.integers(1, 9)), int(rng.integers(1, 6))
    x = rng.normal(size=(shards * chunk, in_dim)).astype(np.float32)
    seed = float(rng.integers(0, 2**31))
    label = f"random: {shards} shards of {chunk} rows, {in_dim} -> {features} features"
    return Case(label, (seed, x, float(shards), float(features)))


def _refusals() -> list[Case]:
    """One input per clause of the statement's "Raises" section, with the error it names.

    (A count traced inside ``jax.jit`` is refused with a TypeError too; the checker
    calls the function itself, with concrete counts, so no case can pass one.)
    """
    x = np.ones((4, 2), np.float32)
    return [
        Case("x a list, not an array", (0, x.tolist(), 2, 3), raises="TypeError"),
        Case("a bool x", (0, x > 0, 2, 3), raises="TypeError"),
        Case("num_shards a string ('2')", (0, x, "2", 3), raises="TypeError"),
        Case("a 1-D x", (0, x[:, 0], 2, 3), raises="ValueError"),
        Case("x with no feature column", (0, x[:, :0], 2, 3), raises="ValueError"),
        Case("a fractional num_shards (2.5)", (0, x, 2.5, 3), raises="ValueError"),
        Case("features 0", (0, x, 2, 0), raises="ValueError"),
        Case("num_shards 3 does not divide 4 rows", (0, x, 3, 3), raises="ValueError"),
    ]


PROBLEM = Problem(
    name="shard_map_simulate",
    title="NNX shard_map simulation",
    reference=shard_map_simulate,
    oracle=_oracle,
    make_cases=_cases,
    unsharded=_unsharded,
    atol=1e-5,  # float32 matmuls against a float64 oracle
    explain=_explain,
    imports=(
        "import jax",
        "import jax.numpy as jnp",
        "from flax import nnx",
        "from jax.sharding import NamedSharding",
        "from jax.sharding import PartitionSpec as P",
    ),
    generate=_generate,
    make_refusals=_refusals,
)
