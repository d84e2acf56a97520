"""Problem "Pipeline-parallel forward pass": GPipe's schedule, the layers split into stages.

Pipeline parallelism splits a deep network by its layers: each device of a
``"stage"`` mesh axis holds a block of consecutive layers and runs only those.
An activation crosses from one stage to the next with :func:`jax.lax.ppermute`,
and the weights never move. One batch would keep only one stage busy at a time,
so the batch is cut into ``M`` microbatches that follow each other through the
stages (GPipe's schedule): at tick ``t`` stage ``s`` runs microbatch ``t - s``,
and after ``M + n - 1`` ticks the last of ``n`` stages has finished them all.
The ``n - 1`` ticks where a stage has nothing to do are the pipeline's *bubble*.
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
from shard_tutorial.meshes import axis_mesh, device_counts, place, usable_device_count
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
from shard_tutorial.validation import check_array, check_floating

__all__ = ["PROBLEM", "pipeline_forward", "pipeline_forward_schedule"]


def pipeline_forward(x: jax.Array, w: jax.Array) -> jax.Array:
    """A deep tanh network over a ``"stage"`` axis: GPipe's schedule of microbatches.

    Each microbatch ``x[m]`` goes through ``h = tanh(h @ w[l])`` for ``l = 0 ..
    L - 1``. The mesh is ``axis_mesh("stage", L)``: ``n`` stages, the most
    devices (up to all of them) that divide ``L``, each holding ``L / n``
    consecutive layers (``w`` split as ``P("stage")``). At tick ``t`` stage ``s``
    runs its layers on microbatch ``t - s`` (when there is one) and hands the
    result to stage ``s + 1``; after ``M + n - 1`` ticks the last stage holds every
    output, and one ``psum`` gives every stage a copy.

    This problem practises pipeline parallelism with ``jax.shard_map``: each
    stage keeps its own layers (``w`` is never gathered), and the activations
    travel from stage to stage with ``jax.lax.ppermute``, one microbatch per
    tick. Each device may send at most what that takes: ``M + n - 2`` activations
    of shape (B, D), then the last stage's outputs to every stage, as one
    all-reduce (``psum``) of them sends (the checker's budget, read from the
    compiled program).

    How the arguments arrive: each array as a ``jax.Array`` on the default device,
    not split.

    Args:
      x: the microbatches, shape (M, B, D): M >= 1 microbatches of B >= 1 rows of
        D >= 1 features, floating-point.
      w: the layers, shape (L, D, D), L >= 1, floating-point.

    Returns:
      The outputs, shape (M, B, D), in the dtype of ``tanh(x @ w[0])``, every
      stage holding all of them (``P()``).

    Raises:
      TypeError: for a non-array, or numbers that are not floating-point.
      ValueError: for a wrong rank, an empty size, or shapes that do not fit
        together.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial import pipeline_forward
      >>> x = jnp.array([[[0.5, -1.0]], [[2.0, 0.0]]])  # 2 microbatches of 1 row
      >>> w = jnp.array([[[1.0, 0.0], [0.0, 1.0]], [[0.0, 1.0], [1.0, 0.0]]])
      >>> pipeline_forward(x, w)  # tanh, then tanh with the features swapped
      Array([[[-0.64201504,  0.43180817]],
      <BLANKLINE>
             [[ 0.        ,  0.746068  ]]], dtype=float32)

      On 8 devices, 8 layers run on 8 stages, one each; every stage holds the outputs:

      >>> y = pipeline_forward(jnp.ones((4, 2, 3)), jnp.ones((8, 3, 3)) / 3)
      >>> dict(y.sharding.mesh.shape), y.sharding.is_fully_replicated
      ({'stage': 8}, True)
    """
    _check_inputs(x, w)
    dtype = jnp.result_type(x, w)
    traced = any(isinstance(a, jax.core.Tracer) for a in (x, w))
    mesh = axis_mesh("stage", w.shape[0], traced=traced)
    x = place(jnp.asarray(x, dtype), NamedSharding(mesh, P()))  # every stage may read x
    w = place(jnp.asarray(w, dtype), NamedSharding(mesh, P("stage")))  # L / n layers each
    return _pipeline(mesh)(x, w)


def pipeline_forward_schedule(x: jax.Array, w: jax.Array) -> tuple[jax.Array, np.ndarray]:
    """:func:`pipeline_forward`, and which microbatch each stage ran at each tick.

    The same program, with one more number travelling beside each activation:
    the index of its microbatch, set by stage 0 and passed on by every
    ``ppermute`` with the activation. Each stage records the index it holds at
    each tick, so the schedule is read from the program that ran, not worked
    out beside it.

    Args:
      x: the microbatches, shape (M, B, D), as for :func:`pipeline_forward`.
      w: the layers, shape (L, D, D).

    Returns:
      The outputs, and an integer array of shape (n, M + n - 1): row ``s`` is
      stage ``s``, column ``t`` tick ``t``; the microbatch the stage ran, or -1
      where it had none (the bubble).

    Examples:
      On 8 devices, 4 layers on 4 stages and 3 microbatches, 6 ticks:

      >>> import jax.numpy as jnp
      >>> from shard_tutorial.problems.pipeline_forward import pipeline_forward_schedule
      >>> _, ticks = pipeline_forward_schedule(jnp.ones((3, 1, 2)), jnp.ones((4, 2, 2)))
      >>> print(ticks)
      [[ 0  1  2 -1 -1 -1]
       [-1  0  1  2 -1 -1]
       [-1 -1  0  1  2 -1]
       [-1 -1 -1  0  1  2]]
    """
    _check_inputs(x, w)
    dtype = jnp.result_type(x, w)
    mesh = axis_mesh("stage", w.shape[0])
    x = place(jnp.asarray(x, dtype), NamedSharding(mesh, P()))
    w = place(jnp.asarray(w, dtype), NamedSharding(mesh, P("stage")))
    y, ticks = _pipeline(mesh, record=True)(x, w)
    return y, np.asarray(ticks).reshape(mesh.shape["stage"], -1)


def _check_inputs(x: object, w: object) -> None:
    check_array(x, "x", ndim=3, layout="of shape (M, B, D)")
    check_array(w, "w", ndim=3, layout="of shape (L, D, D)")
    check_floating(x, "x")  # type: ignore[arg-type]
    check_floating(w, "w")  # type: ignore[arg-type]
    (m, b, d), (layers, d_in, d_out) = np.shape(x), np.shape(w)
    if min(m, b, d) < 1:
        msg = f"x must have at least one microbatch, row and feature, got shape {(m, b, d)}"
        raise ValueError(msg)
    if layers < 1:
        msg = f"w must have at least one layer, got shape {(layers, d_in, d_out)}"
        raise ValueError(msg)
    if (d_in, d_out) != (d, d):
        msg = (
            f"each layer of w must be (D, D) = ({d}, {d}) to fit x's {d} features, "
            f"got w of shape {(layers, d_in, d_out)}"
        )
        raise ValueError(msg)


def _layers(h: jax.Array, w_block: jax.Array) -> jax.Array:
    """This stage's layers, in order: ``h = tanh(h @ w)`` for each of its ``L / n``."""
    for w in w_block:  # a few layers: unrolled, one straight program
        h = jnp.tanh(h @ w)
    return h


def _stages(x: jax.Array, w_block: jax.Array, record: bool = False) -> Any:
    """One stage: GPipe's ``M + n - 1`` ticks, then the last stage's outputs to every stage."""
    stage = jax.lax.axis_index("stage")
    n = jax.lax.axis_size("stage")
    microbatches = x.shape[0]
    to_next = [(i, i + 1) for i in range(n - 1)]  # (source, destination): stage i to i + 1
    h = jnp.zeros(x.shape[1:], x.dtype)  # the activation this stage works on
    held = jnp.int32(-1)  # which microbatch h is, -1 for none (recorded for the page)
    outputs = jnp.zeros_like(x)
    schedule = []
    for tick in range(microbatches + n - 1):
        if tick < microbatches:  # stage 0 starts microbatch `tick`
            h = jnp.where(stage == 0, x[tick], h)
        held = jnp.where(stage == 0, tick if tick < microbatches else -1, held)
        h = _layers(h, w_block)  # every stage runs its layers, bubble or not
        schedule.append(held)
        done = tick - (n - 1)  # the microbatch the last stage has just finished
        if done >= 0:
            outputs = outputs.at[done].set(jnp.where(stage == n - 1, h, outputs[done]))
        if tick < microbatches + n - 2:  # the next tick's input comes from the stage before
            h = jax.lax.ppermute(h, "stage", to_next)
            if record:
                held = jax.lax.ppermute(held, "stage", to_next)
    # Only the last stage holds the outputs: a psum of them (zeros on the other stages)
    # gives every stage a copy.
    y = jax.lax.psum(jnp.where(stage == n - 1, outputs, 0), "stage")
    return (y, jnp.stack(schedule)) if record else y


@functools.cache
def _pipeline(mesh: Mesh, record: bool = False) -> Callable[..., Any]:
    """Build, once per mesh, the compiled pipeline (with its schedule when ``record``)."""
    return jax.jit(
        jax.shard_map(
            functools.partial(_stages, record=record),
            mesh=mesh,
            in_specs=(P(), P("stage")),  # x on every stage; w's layers split over "stage"
            out_specs=(P(), P("stage")) if record else P(),  # the outputs on every stage
        )
    )


def _unsharded(x: jax.Array, w: jax.Array) -> jax.Array:
    dtype = jnp.result_type(x, w)
    return _layers(jnp.asarray(x, dtype), jnp.asarray(w, dtype))


def _oracle(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    h = precise(x)
    for layer in precise(w):
        h = np.tanh(h @ layer)
    return h


def _through(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``x`` through the layers ``w``, in NumPy, at 64 bits."""
    return _oracle(x, w) if len(w) else precise(x)


def every_stage_summed(
    x: np.ndarray, w: np.ndarray, stages: int, *, ring: bool = False
) -> np.ndarray:
    """Every stage's outputs summed: the mistake of a ``psum`` with no mask.

    The reference's schedule, in NumPy, with one change: at each tick every stage
    (not only the last) stores the activation it holds at the index of the
    microbatch the last stage finishes, and the outputs of all stages are summed.
    Stage ``s`` then adds, at index ``m``, its own activation of microbatch
    ``m + n - 1 - s`` (through its layers and those before it), or what its bubble
    holds.

    Args:
      x: the microbatches, (M, B, D).
      w: the layers, (L, D, D).
      stages: the number of stages ``n`` (dividing L).
      ring: whether the activations travel in a ring (the last stage sends to the
        first, whose bubble ticks then run on it) rather than along a line.

    Returns:
      The sum over the stages of what each one stored, (M, B, D), at 64 bits.

    Examples:
      One stage: the right outputs. Two stages of one layer, two microbatches of
      one number, weights 1: stage 0 stores microbatch 1 then nothing at index 0
      and 1, stage 1 stores microbatches 0 and 1:

      >>> import numpy as np
      >>> from shard_tutorial.problems.pipeline_forward import every_stage_summed
      >>> x, w = np.array([[[0.5]], [[1.0]]]), np.ones((2, 1, 1))
      >>> np.allclose(every_stage_summed(x, w, 1), np.tanh(np.tanh(x)))
      True
      >>> got = every_stage_summed(x, w, 2)[:, 0, 0]
      >>> np.allclose(got, [np.tanh(1.0) + np.tanh(np.tanh(0.5)), np.tanh(np.tanh(1.0))])
      True
    """
    x, w = precise(x), precise(w)
    microbatches, per_stage = x.shape[0], w.shape[0] // stages
    h = np.zeros((stages, *x.shape[1:]))
    outputs = np.zeros((stages, *x.shape))
    for tick in range(microbatches + stages - 1):
        if tick < microbatches:
            h[0] = x[tick]
        h = np.stack(
            [_through(h[s], w[s * per_stage : (s + 1) * per_stage]) for s in range(stages)]
        )
        if tick >= stages - 1:
            outputs[:, tick - (stages - 1)] = h
        h = np.concatenate([h[-1:] if ring else np.zeros_like(h[:1]), h[:-1]])
    return outputs.sum(axis=0)


def _explain(case: Case, expected: np.ndarray, received: np.ndarray) -> str | None:
    """Recognise the classic pipeline mistakes in a wrong output.

    - every output 0: the last stage never received an activation (no
      ``ppermute``, or one that sends the wrong way), or its outputs were not
      sent to the other stages (no ``psum``), read on the first device;
    - ``x`` through the last stage's layers only: each stage read ``x`` itself
      instead of the activation of the stage before;
    - the last microbatches 0: the pipeline stopped short of ``M + n - 1`` ticks;
    - every stage's outputs summed: the psum given every stage's outputs, not the
      last stage's and zeros elsewhere (:func:`every_stage_summed`);
    - the outputs shifted by one microbatch: stored one tick off.

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.problem import Case
      >>> from shard_tutorial.problems.pipeline_forward import _explain, _oracle
      >>> x, w = np.ones((3, 1, 2)), np.full((4, 2, 2), 0.5)
      >>> expected = _oracle(x, w)
      >>> late = expected.copy()
      >>> late[-1] = 0
      >>> print(_explain(Case("c", (x, w)), expected, late))
      The last 1 of the 3 microbatches came out as 0...
    """
    x, w = precise(case.args[0]), precise(case.args[1])
    got = precise(received)
    if got.shape != expected.shape or not np.abs(expected).max(initial=0) > 0:
        return None

    def close(a: np.ndarray, b: np.ndarray | float) -> bool:
        return bool(np.allclose(a, b, rtol=1e-3, atol=1e-4))

    microbatches, layers = x.shape[0], w.shape[0]
    if close(got, 0):
        return (
            "Every output is 0, what the last stage computes from an activation that never "
            "came (tanh(0 @ w) is 0), and what every other stage holds when nothing sends "
            "it the last stage's outputs: each tick's activation must go to the next stage "
            "(jax.lax.ppermute, perm=[(i, i + 1), ...]) and the outputs from the last stage "
            'to every stage at the end (a psum over "stage" of the last stage\'s outputs, '
            "zeros elsewhere)"
        )
    for stages in device_counts(layers):
        per_stage = layers // stages
        if close(got, _through(x, w[layers - per_stage :])):
            return (
                f"This is x through the last {per_stage} of the {layers} layers only, what the "
                f"last of {stages} stages computes when it reads x itself: the stages did not "
                "pass their activations on. Each stage must run its layers on what the "
                "stage before sent it (jax.lax.ppermute from stage i to stage i + 1)"
            )
    for missing in range(1, microbatches):
        kept = microbatches - missing
        if close(got[:kept], expected[:kept]) and close(got[kept:], 0):
            return (
                f"The last {missing} of the {microbatches} microbatches came out as 0: the "
                f"pipeline stopped {missing} tick{'s' if missing > 1 else ''} early. With n "
                "stages it takes M + n - 1 ticks for the last microbatch, started by stage 0 "
                "at tick M - 1, to leave the last stage"
            )
    for stages in device_counts(layers):  # 2 or more: on one stage its outputs are the answer
        if any(close(got, every_stage_summed(x, w, stages, ring=r)) for r in (False, True)):
            return (
                f"The outputs are the sum of what every one of the {stages} stages stored: "
                "each stage wrote the activation it held into its outputs, and the psum "
                "added them all. Only the last stage's are finished outputs (the others hold "
                "microbatches part-way through the layers, or bubbles): keep the last "
                "stage's and zeros elsewhere (jnp.where(stage == n - 1, outputs, 0)) before "
                'the psum over "stage"'
            )
    if microbatches > 1 and (close(got[1:], expected[:-1]) or close(got[:-1], expected[1:])):
        late = close(got[1:], expected[:-1])
        return (
            f"The outputs are shifted by one microbatch: microbatch m's result is at index "
            f"{'m + 1' if late else 'm - 1'}. The last of n stages finishes microbatch "
            "t - (n - 1) at tick t: that is the index to store it at"
        )
    return None


def _case(
    rng: np.random.Generator, label: str, microbatches: int, rows: int, d: int, layers: int
) -> Case:
    x = rng.normal(size=(microbatches, rows, d)).astype(np.float32)
    # Scaled so that tanh stays away from saturation (-1, 1) through every layer.
    w = (rng.normal(size=(layers, d, d)) * 1.5 / np.sqrt(d)).astype(np.float32)
    return Case(label, (x, w))


def _generate(rng: np.random.Generator) -> Case:
    """One random case: 1 to 8 microbatches, up to 16 layers, small B and D."""
    microbatches, rows = int(rng.integers(1, 9)), int(rng.integers(1, 4))
    d, layers = int(rng.integers(1, 7)), int(rng.integers(1, 17))
    label = f"random: M={microbatches}, B={rows}, D={d}, L={layers}"
    return _case(rng, label, microbatches, rows, d, layers)


def _cases() -> list[Case]:
    rng = np.random.default_rng(20261126)

    def case(label: str, microbatches: int, rows: int, d: int, layers: int) -> Case:
        return _case(rng, label, microbatches, rows, d, layers)

    example = Case(
        "example from the problem statement",
        (
            np.array([[[0.5, -1.0]], [[2.0, 0.0]]], np.float32),
            np.array([[[1.0, 0.0], [0.0, 1.0]], [[0.0, 1.0], [1.0, 0.0]]], np.float32),
        ),
    )
    # M=1 is allowed: one microbatch still crosses every stage (n - 1 ppermutes), and on
    # one stage it crosses none, where the checker asks for shard_map alone.
    return [
        example,
        case("M=4, L=8: 8 stages of 1 layer", 4, 2, 8, 8),
        case("M=8, L=16: 8 stages of 2 layers", 8, 2, 6, 16),
        case("M=2, L=8: the bubble is most of the schedule", 2, 1, 4, 8),
        case("L=6: 6 stages of 8 devices", 5, 3, 4, 6),
        case("L=9: 3 stages of 3 layers", 3, 2, 5, 9),
        case("L=7: 7 stages, a prime", 6, 1, 3, 7),
        case("L=1: one stage, no pipeline", 3, 2, 3, 1),
        case("M=1, L=8: one microbatch through 8 stages", 1, 2, 3, 8),
        case("M=1, L=1: one microbatch, one stage", 1, 2, 3, 1),
        case("M=8, B=4, D=16, L=8", 8, 4, 16, 8),
        # The outputs in the dtype of tanh(x @ w[0]): bfloat16 throughout (few, narrow
        # layers: each one's rounding adds up), and float16 x with float32 w, float32.
        _cast(case("bfloat16 x and w, L=4", 3, 2, 4, 4), jnp.bfloat16, jnp.bfloat16),
        _cast(case("float16 x, float32 w: float32 outputs", 3, 2, 3, 4), np.float16, np.float32),
    ]


def _cast(case: Case, x_dtype: Any, w_dtype: Any) -> Case:
    """``case`` with ``x`` and ``w`` in the given dtypes."""
    x, w = case.args
    return Case(case.label, (x.astype(x_dtype), w.astype(w_dtype)))


def _mesh(args: tuple[Any, ...], devices: int) -> tuple[int, ...]:
    """The contract's mesh: ``axis_mesh("stage", L)``, the most devices that divide ``L``."""
    return (usable_device_count(int(np.shape(args[1])[0]), devices),)


def _w_block_or_output_gather(args: tuple[Any, ...]) -> int:
    """The smallest all-gather forbidden: one stage's block of w, and more than the outputs'.

    An all-gather as large as a stage's block of ``w`` moves layers off their
    stage, unless it is no larger than gathering every stage's copy of the
    outputs, ``n`` times (M, B, D), which a solution may do to give every stage
    the last stage's (the budget then says what that costs).

    Examples:
      >>> import jax, numpy as np
      >>> from shard_tutorial.problems.pipeline_forward import _w_block_or_output_gather
      >>> x, w = np.ones((2, 1, 4), np.float32), np.ones((8, 4, 4), np.float32)
      >>> n = min(8, jax.device_count())  # 8 stages on 8 devices: a block is 1 layer
      >>> _w_block_or_output_gather((x, w)) == max(8 // n * 64, n * 32 + 1)
      True
    """
    x, w = args
    n = usable_device_count(int(np.shape(w)[0]), jax.device_count())
    itemsize = np.dtype(jnp.result_type(x.dtype, w.dtype)).itemsize
    block = int(np.size(w)) // n * itemsize
    return max(block, n * int(np.size(x)) * itemsize + 1)


TECHNIQUE = Technique(
    collectives=(("collective-permute",),),
    forbidden=(
        Forbidden(
            "all-gather",
            "a stage's layers never leave it: the activations travel from stage to stage "
            "(ppermute), not the weights (to give every stage the outputs, psum the last "
            "stage's)",
            at_least=_w_block_or_output_gather,
        ),
    ),
    axis="stage",
    stays=Stays(
        (1,),
        "w (each stage's layers)",
        (
            "a stage's layers never leave it: the activations travel from stage to stage "
            "(ppermute), computed by the layers where they live"
        ),
    ),
)
"""What a solution must do besides computing the right values (the statement's
"This problem practises" paragraph says it in words)."""


def _limits(args: tuple[Any, ...]) -> dict[str, float]:
    """``M + n - 2`` activations of (B, D), then one all-reduce of the (M, B, D) outputs.

    Examples:
      >>> import jax, numpy as np
      >>> from shard_tutorial.problems.pipeline_forward import _limits
      >>> x, w = np.ones((4, 2, 3), np.float32), np.ones((8, 3, 3), np.float32)
      >>> jax.device_count() == 1 or _limits((x, w))["sent"] == 10 * 24 + 2 * 7 / 8 * 96
      True
    """
    x, w = args
    n = usable_device_count(int(np.shape(w)[0]), jax.device_count())
    if n == 1:
        return {"sent": 0.0}
    microbatches, rows, d = np.shape(x)
    activation = rows * d * bytes_per_number(jnp.result_type(x.dtype, w.dtype))
    return {
        "sent": (microbatches + n - 2) * activation + 2 * (n - 1) / n * microbatches * activation
    }


BUDGET = Budget(
    _limits,
    "GPipe sends one (B, D) activation from each stage to the next at each of the "
    "M + n - 1 ticks but the last, then gives every stage the last stage's outputs, as "
    "one psum of them sends; sending more (the weights, an activation too many, every "
    "stage's copy of the outputs) costs more",
)
"""What a solution may send per device: GPipe's activations, and the outputs once."""


def _refusals() -> list[Case]:
    """One input per clause of the statement's "Raises" section, with the error it names."""
    x, w = np.ones((2, 2, 3), np.float32), np.ones((2, 3, 3), np.float32)
    return [
        Case("x a list, not an array", (x.tolist(), w), raises="TypeError"),
        Case("int32 x: not floating-point", (x.astype(np.int32), w), raises="TypeError"),
        Case("a 2-D x", (x[0], w), raises="ValueError"),
        Case("no microbatches (M = 0)", (x[:0], w), raises="ValueError"),
        Case("layers of 2 x 2, x of 3 features", (x, w[:, :2, :2]), raises="ValueError"),
    ]


PROBLEM = Problem(
    name="pipeline_forward",
    title="Pipeline-parallel forward pass",
    reference=pipeline_forward,
    oracle=_oracle,
    make_cases=_cases,
    unsharded=_unsharded,
    rtol=1e-4,
    atol=1e-5,  # float32 through up to 16 layers, each a sum of D products
    explain=_explain,
    generate=_generate,
    imports=(
        "import jax",
        "import jax.numpy as jnp",
        "from jax.sharding import NamedSharding",
        "from jax.sharding import PartitionSpec as P",
        "",
        'from shard_tutorial import axis_mesh  # axis_mesh("stage", L): the stages',
    ),
    technique=TECHNIQUE,
    mesh=_mesh,
    placement=Placement(axis=None, spec="P()"),
    make_refusals=_refusals,
    folder="parallelism",
    budget=BUDGET,
)
