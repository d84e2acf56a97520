"""Problem "Tensor-parallel MLP": a two-layer network split over a 2-D mesh.

Tensor parallelism splits the model itself. In ``relu(x @ w1) @ w2`` each hidden
unit is one column of ``w1`` and one row of ``w2``, and ``relu`` acts on each
unit alone, so the hidden units can be split over a ``"model"`` mesh axis with
no communication until the end: a device computes its own units' activations
and their share of the output, ``relu(x @ w1[:, its units]) @ w2[its units, :]``,
and the shares are added up with one ``psum`` over ``"model"`` (the Megatron
layout: column-split first layer, row-split second). A second mesh axis,
``"data"``, splits the batch rows at the same time, so a 2 x 4 mesh on 8 devices
does data and tensor parallelism together.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial.communication import bytes_per_number
from shard_tutorial.meshes import (
    MAX_DEVICES,
    data_model_mesh,
    data_model_shape,
    device_counts,
    place,
)
from shard_tutorial.problem import (
    Budget,
    Case,
    Forbidden,
    Placement,
    Problem,
    Stays,
    Technique,
    precise,
)
from shard_tutorial.validation import check_array

__all__ = ["PROBLEM", "tensor_parallel_mlp"]


def tensor_parallel_mlp(x: jax.Array, w1: jax.Array, w2: jax.Array) -> jax.Array:
    """``relu(x @ w1) @ w2``, with the rows of ``x`` over ``"data"`` and the hidden units over ``"model"``.

    The mesh is 2-D, axes ``("data", "model")``: ``data_model_mesh(B, h)``, 2 x 4
    on 8 devices whenever ``B`` is even and 4 divides ``h``, and a shape that
    divides both for any other sizes. ``x``'s rows are split over ``"data"``,
    ``w1``'s columns and ``w2``'s rows over ``"model"``; each device adds its
    hidden units' share of the output, and one ``psum`` over ``"model"`` adds
    the shares up. Every size may be 0: an empty batch gives an empty output,
    no hidden units (``h = 0``) an output of zeros. The numbers must be real
    (integer or floating; ``relu`` has no meaning for complex ones).

    This problem practises tensor parallelism with ``jax.shard_map``: the
    weights stay split over ``"model"`` (never gathered whole), and one ``psum``
    over ``"model"`` adds the devices' shares of the output. Each device sends what
    that ``psum`` of its rows of the output sends, twice at most, and a few numbers
    besides (the checker's budget, read from the compiled programs).

    How the arguments arrive: each array as a ``jax.Array`` on the default device,
    not split.

    Args:
      x: inputs, shape (B, d).
      w1: first layer, shape (d, h).
      w2: second layer, shape (h, d_out).

    Returns:
      ``relu(x @ w1) @ w2``, shape (B, d_out), its rows split over ``"data"``
      (``P("data", None)``) and replicated over ``"model"``.

    Raises:
      TypeError: for a non-array, or a dtype that is not a real number (bool,
        complex).
      ValueError: for a wrong rank or shapes that do not fit together.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial import tensor_parallel_mlp
      >>> x = jnp.array([[1.0, -1.0]])
      >>> w1 = jnp.array([[1.0, 2.0], [3.0, -4.0]])
      >>> tensor_parallel_mlp(x, w1, jnp.array([[1.0], [10.0]]))  # relu([-2, 6]) @ w2
      Array([[60.]], dtype=float32)

      On 8 devices, 16 rows and 32 hidden units run on a 2 x 4 mesh:

      >>> out = tensor_parallel_mlp(jnp.ones((16, 4)), jnp.ones((4, 32)), jnp.ones((32, 3)))
      >>> dict(out.sharding.mesh.shape), tuple(out.sharding.spec)
      ({'data': 2, 'model': 4}, ('data', None))
    """
    _check_inputs(x, w1, w2)
    traced = any(isinstance(a, jax.core.Tracer) for a in (x, w1, w2))
    mesh = data_model_mesh(x.shape[0], w1.shape[1], traced=traced)
    x = place(x, NamedSharding(mesh, P("data", None)))  # rows over "data"
    w1 = place(w1, NamedSharding(mesh, P(None, "model")))  # hidden columns over "model"
    w2 = place(w2, NamedSharding(mesh, P("model", None)))  # hidden rows over "model"
    return _mlp(mesh)(x, w1, w2)


def _check_inputs(x: object, w1: object, w2: object) -> None:
    check_array(x, "x", ndim=2, layout="of shape (B, d)")
    check_array(w1, "w1", ndim=2, layout="of shape (d, h)")
    check_array(w2, "w2", ndim=2, layout="of shape (h, d_out)")
    for name, array in (("x", x), ("w1", w1), ("w2", w2)):
        dtype = array.dtype  # type: ignore[attr-defined]
        if jnp.issubdtype(dtype, jnp.complexfloating):
            msg = f"{name} must hold real numbers (relu compares with 0), got dtype {dtype}"
            raise TypeError(msg)
    (_, d), (d1, h), (h2, _) = np.shape(x), np.shape(w1), np.shape(w2)
    if d1 != d:
        msg = f"w1 has {d1} rows but x has {d} columns: x must be (B, d) and w1 (d, h)"
        raise ValueError(msg)
    if h2 != h:
        msg = f"w2 has {h2} rows but w1 has {h} columns: w1 must be (d, h) and w2 (h, d_out)"
        raise ValueError(msg)


def _local_mlp(x: jax.Array, w1: jax.Array, w2: jax.Array) -> jax.Array:
    """One device: its rows of x, its hidden units; the shares added over "model"."""
    hidden = jax.nn.relu(x @ w1)  # this device's hidden units, for its rows
    share = hidden @ w2  # their contribution to every output column
    return jax.lax.psum(share, "model")  # the sum over every hidden unit


@functools.cache
def _mlp(mesh: Mesh) -> Callable[[jax.Array, jax.Array, jax.Array], jax.Array]:
    """Build, once per mesh, the compiled tensor-parallel forward pass."""
    return jax.jit(
        jax.shard_map(
            _local_mlp,
            mesh=mesh,
            in_specs=(P("data", None), P(None, "model"), P("model", None)),
            out_specs=P("data", None),  # rows over "data", the same on every "model" device
        )
    )


def _unsharded(x: jax.Array, w1: jax.Array, w2: jax.Array) -> jax.Array:
    return jax.nn.relu(x @ w1) @ w2


def _oracle(x: np.ndarray, w1: np.ndarray, w2: np.ndarray) -> np.ndarray:
    return np.maximum(precise(x) @ precise(w1), 0) @ precise(w2)


def _data_blocks(args: tuple[Any, ...], devices: int) -> int:
    """How many blocks of rows the output is asked to be cut into on ``devices`` devices."""
    x, w1, _ = args
    return data_model_shape(np.shape(x)[0], np.shape(w1)[1], devices)[0]


def _explain(case: Case, _expected: np.ndarray, received: np.ndarray) -> str | None:
    """Recognise the classic tensor-parallel mistakes in a wrong output.

    - ``relu`` after the ``psum``: ``relu(x @ w1 @ w2)``, on any mesh;
    - no ``psum``: one ``"model"`` device's share, ``relu(x @ w1[:, :k]) @ w2[:k]``
      with ``k = h / m`` for a ``"model"`` axis of ``m`` devices (what
      ``check_vma=False`` lets through, read from the first device);
    - ``psum`` over ``"data"``: every block of rows is the sum of the ``D``
      blocks' outputs (with only one ``"model"`` device's share in each when
      the ``"model"`` axis has more than one device).

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.problem import Case
      >>> from shard_tutorial.problems.tensor_parallel_mlp import _explain
      >>> x, w1, w2 = np.array([[1.0, -1.0]]), np.array([[1.0, 2.0], [3.0, -4.0]]), np.ones((2, 1))
      >>> case = Case("c", (x, w1, w2))  # hidden units relu([-2, 6]): the answer is 6
      >>> print(_explain(case, np.array([[6.0]]), np.array([[4.0]])))
      This is relu(x @ w1 @ w2): relu was applied after the psum...
      >>> print(_explain(case, np.array([[6.0]]), np.array([[0.0]])))
      This is one device's share only: the output of the first 1 of the 2 hidden units...
    """
    x, w1, w2 = (precise(np.asarray(a)) for a in case.args)
    got = precise(np.asarray(received))
    batch, hidden_units = x.shape[0], w1.shape[1]
    if got.shape != (batch, w2.shape[1]) or got.size == 0:
        return None
    pre_activation = x @ w1

    def close(answer: np.ndarray) -> bool:
        scale = 1 + np.abs(answer).max(initial=0)
        return bool(np.allclose(got, answer, rtol=1e-3, atol=1e-4 * scale))

    def share(model: int) -> np.ndarray:
        units = hidden_units // model  # the first "model" device's hidden units
        return np.maximum(pre_activation[:, :units], 0) @ w2[:units]

    if close(np.maximum(pre_activation @ w2, 0)):
        return (
            "This is relu(x @ w1 @ w2): relu was applied after the psum, to the sum of the "
            "devices' shares, so it clips the output instead of the hidden units. Apply "
            "relu to each device's own hidden units (relu(x @ w1) on its columns of w1), "
            "then multiply by w2 and psum"
        )
    for model in device_counts(hidden_units):
        if close(share(model)):
            units = hidden_units // model
            return (
                f"This is one device's share only: the output of the first {units} of the "
                f'{hidden_units} hidden units, as a "model" axis of {model} devices leaves '
                "it on each device when nothing adds the shares up (check_vma=False lets "
                'it through). The shares must be added with jax.lax.psum over "model"'
            )
    for data in device_counts(batch):
        for model in (1, *device_counts(hidden_units)):
            if data * model > MAX_DEVICES:
                break
            blocks = np.split(share(model), data)
            if close(np.tile(sum(blocks), (data, 1))):
                rows = batch // data
                alone = (
                    ""
                    if model == 1
                    else f", and only the first {hidden_units // model} of the "
                    f'{hidden_units} hidden units\' share in each (nothing added over "model")'
                )
                return (
                    f"Each block of {rows} row{'s' if rows > 1 else ''} is the sum of the "
                    f"{data} blocks' outputs: rows of different inputs were added, as a psum "
                    f'over "data" (a "data" axis of {data} devices) does{alone}. The rows of '
                    "x are independent examples; the psum adds the hidden units' shares, "
                    'over "model"'
                )
    return None


def _generate(rng: np.random.Generator) -> Case:
    """One random case: a mesh shape up to 8 devices, B and h multiples of its axes."""
    data = int(rng.integers(1, MAX_DEVICES + 1))
    model = int(rng.integers(1, MAX_DEVICES // data + 1))
    batch, hidden = data * int(rng.integers(1, 5)), model * int(rng.integers(1, 5))
    d, d_out = int(rng.integers(1, 7)), int(rng.integers(1, 5))
    return _case(
        rng, f"random: B={batch}, d={d}, h={hidden}, d_out={d_out}", batch, d, hidden, d_out
    )


def _case(
    rng: np.random.Generator, label: str, batch: int, d: int, hidden: int, d_out: int
) -> Case:
    shapes = ((batch, d), (d, hidden), (hidden, d_out))
    return Case(label, tuple(rng.normal(size=shape).astype(np.float32) for shape in shapes))


def _cases() -> list[Case]:
    rng = np.random.default_rng(20261125)

    def case(label: str, batch: int, d: int, h: int, d_out: int) -> Case:
        return _case(rng, label, batch, d, h, d_out)

    example = Case(
        "example from the problem statement",
        (
            np.array([[1.0, -1.0]], np.float32),
            np.array([[1.0, 2.0], [3.0, -4.0]], np.float32),
            np.array([[1.0], [10.0]], np.float32),
        ),
    )
    # No h=0 case, although the reference handles it (the tests check it): un-jitted,
    # jax.shard_map of a matmul whose contracted axis is empty fails to compile on a
    # 2 x 4 mesh (jax 0.12, "'func.call' op expected at least one operand ... to be
    # produced by a xla.sdy.GlobalToLocalShape"), which a reader's solution need not avoid.
    return [
        example,
        case("B=16, h=32: a 2 x 4 mesh on 8 devices", 16, 4, 32, 3),
        case("B=8, h=8", 8, 5, 8, 2),
        case("B=6, h=4: 2 x 4", 6, 3, 4, 2),
        case("B=5, h=8: 1 x 8, tensor parallel only", 5, 3, 8, 2),
        case("B=8, h=3: 8 x 1, data parallel only", 8, 3, 3, 2),
        case("B=7, h=5: 7 x 1", 7, 2, 5, 1),
        case("B=0: an empty batch", 0, 3, 8, 2),
        case("B=64, d=16, h=64, d_out=8", 64, 16, 64, 8),
        # The statement allows integers: the output keeps their dtype (no float cast).
        Case(
            "int32 inputs: the output stays int32",
            (
                rng.integers(-3, 4, size=(8, 4)).astype(np.int32),
                rng.integers(-3, 4, size=(4, 8)).astype(np.int32),
                rng.integers(-3, 4, size=(8, 2)).astype(np.int32),
            ),
        ),
    ]


def _mesh(args: tuple[Any, ...], devices: int) -> tuple[int, ...]:
    """The contract's mesh: ``data_model_mesh(B, h)``'s shape, ``(data, model)``."""
    return data_model_shape(np.shape(args[0])[0], np.shape(args[1])[1], devices)


TECHNIQUE = Technique(
    collectives=(("all-reduce",),),
    forbidden=(
        Forbidden(
            "all-gather",
            "the weights must stay split over 'model': gathering them whole is what "
            "tensor parallelism avoids",
        ),
    ),
    group=lambda args, devices: _mesh(args, devices)[1],
    axis="model",
    stays=Stays(
        (1, 2),
        "w1 or w2 (the weights)",
        (
            "the weights stay split over 'model': each device multiplies by its own columns "
            "of w1 and rows of w2, and one all-reduce adds the partial outputs"
        ),
    ),
)
"""What a solution must do besides computing the right values (the statement's
"This problem practises" paragraph says it in words)."""


def _limits(args: tuple[Any, ...]) -> dict[str, float]:
    """What a device may send: the output's psum over ``"model"``, twice at most, and a few numbers.

    A device's share of its ``B / n_data`` rows of the ``(B, d_out)`` output, all-reduced
    over the ``n_model`` devices of its row of the mesh, sends ``2 (n_model - 1) /
    n_model`` of those rows' bytes (the ring's figure,
    :func:`shard_tutorial.collective_costs.ring_bytes`); with room for :data:`SCALARS`
    numbers besides, and twice that in all. Gathering the weights, whole or summed in
    zero-padded or masked blocks, sends more wherever they outweigh twice the output.

    Examples:
      >>> import jax, numpy as np
      >>> from shard_tutorial.problems.tensor_parallel_mlp import _limits, _mesh
      >>> x, w1, w2 = np.ones((16, 4), np.float32), np.ones((4, 32), np.float32), np.ones((32, 3), np.float32)
      >>> rows, model = _mesh((x, w1, w2), jax.device_count())
      >>> _limits((x, w1, w2)) == {"sent": 2 * 2 * (model - 1) / model * (16 // rows * 3 + 4) * 4}
      True
    """
    x, w1, w2 = (np.asarray(a) for a in args)
    rows, model = _mesh(args, jax.device_count())
    length = int(x.shape[0]) // rows if rows else 0
    per = bytes_per_number(np.result_type(x.dtype, w1.dtype, w2.dtype))
    numbers = length * int(w2.shape[1]) + SCALARS
    return {"sent": 2 * 2 * (model - 1) / model * numbers * per}


SCALARS = 4
"""How many numbers besides the output a step may all-reduce."""


BUDGET = Budget(
    _limits,
    "tensor parallelism sends one psum of the output's rows over 'model' (twice at most); "
    "gathering the weights, or summing zero-padded or masked blocks of them, sends more",
)
"""What a solution may send per device."""


def _refusals() -> list[Case]:
    """One input per clause of the statement's "Raises" section, with the error it names."""
    x = np.ones((4, 3), np.float32)
    w1, w2 = np.ones((3, 2), np.float32), np.ones((2, 1), np.float32)
    return [
        Case("x a list, not an array", (x.tolist(), w1, w2), raises="TypeError"),
        Case("a bool w1", (x, w1 > 0, w2), raises="TypeError"),
        Case("a complex x", (x.astype(np.complex64), w1, w2), raises="TypeError"),
        Case("a 1-D x", (x[0], w1, w2), raises="ValueError"),
        Case("x of 3 columns, w1 of 2 rows", (x, w1[:2], w2), raises="ValueError"),
    ]


PROBLEM = Problem(
    name="tensor_parallel_mlp",
    title="Tensor-parallel MLP",
    reference=tensor_parallel_mlp,
    oracle=_oracle,
    make_cases=_cases,
    unsharded=_unsharded,
    rtol=1e-5,
    atol=1e-4,  # float32 sums of up to 64 hidden units, in another order than NumPy's
    explain=_explain,
    generate=_generate,
    imports=(
        "import jax",
        "import jax.numpy as jnp",
        "from jax.sharding import NamedSharding",
        "from jax.sharding import PartitionSpec as P",
        "",
        "from shard_tutorial import data_model_mesh  # a (data, model) mesh for any shapes",
    ),
    technique=TECHNIQUE,
    budget=BUDGET,
    mesh=_mesh,
    placement=Placement(axis=0, blocks=_data_blocks),
    make_refusals=_refusals,
    folder="training",
)
