"""What a practice problem is: a reference solution, an independent oracle and cases.

Each module in :mod:`shard_tutorial.problems` defines one :class:`Problem`. That
one definition is what the problem's page renders, what the tests check the
reference solution against, and what a checker runs a reader's solution on, so
the statement, the cases and the solution cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import re
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from shard_tutorial.meshes import usable_device_count

__all__ = [
    "ONE_DEVICE_RULE",
    "Budget",
    "Case",
    "Forbidden",
    "Placement",
    "Problem",
    "Stays",
    "Technique",
    "first_block_only",
    "no_communication",
    "precise",
]


@dataclasses.dataclass(frozen=True)
class Case:
    """One input of a problem, with the label a report shows for it.

    Attributes:
      label: what the case exercises, e.g. ``"length 5: 8 devices do not divide it"``.
      args: the positional arguments, NumPy arrays and Python numbers, so a case
        can be built in any process before JAX picks its devices.
      raises: for an input the statement refuses (:attr:`Problem.refusals`), the
        name of the error its "Raises" section names, e.g. ``"ValueError"``: the
        answer must raise it (or an error derived from it). None: an ordinary case.
    """

    label: str
    args: tuple[Any, ...]
    raises: str | None = None

    def jax_args(self) -> tuple[Any, ...]:
        """The arguments as a caller passes them: arrays become ``jax.Array``.

        Returns:
          ``args`` with every NumPy array converted by ``jnp.asarray``.

        Examples:
          >>> import numpy as np
          >>> from shard_tutorial.problem import Case
          >>> Case("two", (np.array([1.0, 2.0]), 3.0)).jax_args()
          (Array([1., 2.], dtype=float32), 3.0)
        """
        return tuple(jnp.asarray(a) if isinstance(a, np.ndarray) else a for a in self.args)


ONE_DEVICE_RULE = (
    "On a mesh of one device the checker asks for jax.shard_map alone: a ring of n - 1 "
    "hops makes none there, and a collective over one device has nothing to combine, so "
    "a right answer may run none."
)
"""What the judge asks of a case whose mesh has one device, as every starter says it."""

KINDS_IN_WORDS = {
    "all-reduce": "all-reduce (psum, pmean)",
    "all-gather": "all-gather (all_gather)",
    "reduce-scatter": "reduce-scatter (psum_scatter)",
    "collective-permute": "collective-permute (ppermute)",
    "all-to-all": "all-to-all (all_to_all)",
}
"""How a report names each collective of a compiled program: XLA's name, then JAX's."""


@dataclasses.dataclass(frozen=True)
class Forbidden:
    """A collective a problem's solution must not run: what the problem teaches avoids it.

    Attributes:
      kind: the HLO operation, e.g. ``"all-gather"``.
      why: the end of the verdict's sentence, e.g. ``"x must never be gathered whole"``.
      at_least: given a case's arguments, the fewest bytes (per device) at which
        a collective of this kind is forbidden; None: at any size. FSDP's step
        may all-reduce ``b``'s gradient, but not one the size of ``w``.
      pieces: given a case's arguments, a size in bytes: then ``at_least`` limits
        the bytes of all of an answer's collectives of this kind that move more
        than that, together, not each one's: FSDP's gradient of ``w`` all-reduced
        in two halves moves as much as one all-reduce would, while the smaller
        ones a right answer runs (``b``'s gradient, a loss, however many times)
        are left out. None: each collective on its own.
    """

    kind: str
    why: str
    at_least: Callable[[tuple[Any, ...]], int] | None = dataclasses.field(default=None, repr=False)
    pieces: Callable[[tuple[Any, ...]], int] | None = dataclasses.field(default=None, repr=False)


def no_communication(why: str) -> tuple[Forbidden, ...]:
    """Every collective forbidden, each for ``why``: a problem whose devices work alone.

    Examples:
      >>> [rule.kind for rule in no_communication("each device doubles its own block")]
      ['all-reduce', 'all-gather', 'reduce-scatter', 'collective-permute', 'all-to-all']
    """
    return tuple(Forbidden(kind, why) for kind in KINDS_IN_WORDS)


@dataclasses.dataclass(frozen=True)
class Technique:
    """What a problem practises, as the judge reads it from the compiled programs of a call.

    The checker records the very call that produced a solution's answer
    (:mod:`shard_tutorial.checking.recording`) and reads the programs XLA compiled for it
    (:mod:`shard_tutorial.compiled`): which collectives ran, whether the code inside
    ``jax.shard_map`` asked for them or XLA's partitioner added them for
    ``jax.jit``, over how many devices, on how many bytes. Collectives are asked
    for only where the case's mesh has more than one device.

    What it practises in words is the statement's own: the paragraph of the
    reference's docstring that starts "This problem practises" (see
    :attr:`Problem.practises`).

    Attributes:
      collectives: the collectives the answer must come from, each a tuple of
        HLO operations any one of which will do: ``(("reduce-scatter",),)``.
      forbidden: collectives that must not run (see :class:`Forbidden`).
      primitives: JAX primitives, any one of which the traced program must use
        (``("axis_index",)``); empty: none asked for.
      group: given a case's arguments and the device count, how many devices each
        asked-for collective spans (tensor parallelism's ``"model"`` axis); None:
        any number above 1.
      axis: the mesh axis :attr:`group` counts, for the verdict's sentence.
      hidden: given a case's arguments, why that case cannot show the technique
        in a right answer's program, or None where it can: with ``lr=0`` a
        training step's update does not use the gradient, so what computes the
        gradient (its collectives included) may be left out of the program XLA
        compiles (``0 * grad`` folded away). Such a case is judged on its values,
        where and by whose code they were computed, and its layout; the report
        says which cases judged the technique.
      traced: given a case's arguments, why its compiled program cannot show the
        asked-for collectives though a right answer runs them, or None where it
        can: XLA drops a collective of empty blocks (an all-to-all of buffers of
        0 slots). Such a case asks for them in the program JAX traced (its
        primitives; their empty results need not reach the answer) instead; the
        forbidden collectives and the budget are still read from the compiled
        program.
      stays: arguments whose data never leaves its devices (see :class:`Stays`);
        None: no such rule.

    What is asked depends on the case, as the statement says: on a mesh of one
    device (or where the collective's axis has one device) a ring of ``n - 1``
    hops makes none, an all-reduce has nothing to add, and an index is always 0,
    so only ``jax.shard_map`` itself is asked for there (see
    :func:`shard_tutorial.checking.judge.judge`).

    Examples:
      >>> from shard_tutorial.problems import get_problem
      >>> get_problem("shard_map_psum_scatter").technique.collectives
      (('reduce-scatter',),)
    """

    collectives: tuple[tuple[str, ...], ...] = ()
    forbidden: tuple[Forbidden, ...] = ()
    primitives: tuple[str, ...] = ()
    group: Callable[[tuple[Any, ...], int], int] | None = dataclasses.field(
        default=None, repr=False
    )
    axis: str = "data"
    hidden: Callable[[tuple[Any, ...]], str | None] | None = dataclasses.field(
        default=None, repr=False
    )
    traced: Callable[[tuple[Any, ...]], str | None] | None = dataclasses.field(
        default=None, repr=False
    )
    stays: Stays | None = None


@dataclasses.dataclass(frozen=True)
class Stays:
    """Arguments whose data never leaves its devices, as the statement says.

    No collective of the answer's programs may pass their data on unchanged:
    sliced, padded, reshaped, copied or passed on by another collective
    (:func:`shard_tutorial.checking.movement.moved`), nor may a ``jax.device_put``
    move it between devices. What a right answer sends is computed from it (an
    activation, a gradient's partial sum), which this rule does not follow.

    Attributes:
      arguments: the positions of those arguments (every array of each one).
      names: what the verdict calls them, e.g. ``"w (the stages' layers)"``.
      why: the end of the verdict's sentence: what the technique sends instead.

    Examples:
      >>> from shard_tutorial.problems import get_problem
      >>> get_problem("pipeline_train_step").technique.stays.arguments
      (2,)
    """

    arguments: tuple[int, ...]
    names: str
    why: str


@dataclasses.dataclass(frozen=True)
class Budget:
    """What one device may spend on a case, judged once the values and the technique are right.

    Both figures are read from the programs XLA compiled for the very call that made
    the answer (those the answer depends on), as the technique is:

    - ``sent``: the bytes each device sends, summed over the collectives of those
      programs (over more than one device), each counted as its ring algorithm sends
      it (:func:`shard_tutorial.collective_costs.ring_bytes`);
    - ``peak``: the most bytes one device holds at once within any one of those
      programs, from XLA's memory analysis (``peak_memory_in_bytes``; on the CPU
      backend of jax 0.10 and 0.12 it counts the arguments and outputs only, not
      the temporaries);
    - ``held``: the most bytes XLA assigns one device for any one of those
      programs: arguments, outputs and temporaries added up (an output that
      reuses an argument's buffer counted once). This is the figure that sees
      what a program gathers into its temporaries;
    - ``growth``: how much more ``held`` may be when the answer is called again
      on :attr:`grown`'s larger copy of the case: a limit on how what a device
      holds grows with a size (a pipeline's microbatches), whatever it holds
      besides (which differs between right answers: eager, jitted, Python-driven).

    Attributes:
      limits: given a case's arguments as the contract lays them out (on the
        worker's devices), the most allowed: ``{"sent": bytes, "peak": bytes,
        "held": bytes}``,
        a key left out for no limit. It runs in the checker's worker before the
        solution's file loads, and may compile the package's programs (another
        strategy's step, to compare with).
      why: what the budget teaches; it ends the verdict's message.
      grown: given a case's arguments as the case holds them (before
        :attr:`Problem.arrange` lays them out), a larger copy of them, which the
        checker lays out as the case's and calls the answer on again where the
        limits name ``"growth"``; None: never.

    Examples:
      >>> from shard_tutorial.problems import get_problem
      >>> print(get_problem("shard_map_psum_scatter").budget.why)
      a reduce-scatter of the column sums sends d - 1 blocks of n / d sums from each of the d devices; reducing anything bigger (every row, or every sum onto every device) sends more
    """

    limits: Callable[[tuple[Any, ...]], dict[str, float]] = dataclasses.field(repr=False)
    why: str = ""
    grown: Callable[[tuple[Any, ...]], tuple[Any, ...]] | None = dataclasses.field(
        default=None, repr=False
    )


@dataclasses.dataclass(frozen=True)
class Placement:
    """How a problem's output must be laid out over the devices.

    Judged from the output's own sharding (which axis is split, over how many
    devices), only once its values are right, and never for an empty output or
    on one device.

    Attributes:
      axis: the output axis split over the devices, or None: every device
        holds the whole output (replicated, ``out_specs=P()``).
      blocks: how many blocks ``axis`` is asked to be cut into, given a case's
        arguments and the device count; when it says 1, any layout is right.
        None: as many as the devices holding the output (a 1-D mesh).
      spec: the ``PartitionSpec`` the verdict names when every device holds the
        whole output, as the contract writes it, e.g. ``'P("data", None)'`` for
        a weight split by rows.

    Examples:
      >>> from shard_tutorial.problem import Placement
      >>> print(Placement(axis=0).diagnose(shape=(16,), split=(1,), devices=8))
      right values, but every device holds the whole result: out_specs=P() where P("data") was asked for (axis 0 split over the devices)
      >>> Placement(axis=0).diagnose(shape=(16,), split=(8,), devices=8) is None
      True
      >>> rows = Placement(axis=0, spec='P("data", None)')
      >>> print(rows.diagnose(shape=(16, 2), split=(1, 1), devices=8))
      right values, but every device holds the whole result: out_specs=P() where P("data", None) was asked for (axis 0 split over the devices)
      >>> print(rows.diagnose(shape=(16, 4), split=(2, 4), devices=8))
      right values, but the result is split along axis 1 as well as axis 0: only axis 0 should be split over the devices (P("data", None))
    """

    axis: int | None
    blocks: Callable[[tuple[Any, ...], int], int] | None = dataclasses.field(
        default=None, repr=False
    )
    spec: str = dataclasses.field(default='P("data")', repr=False)

    def diagnose(
        self,
        shape: Sequence[int],
        split: Sequence[int],
        devices: int,
        expected_blocks: int | None = None,
    ) -> str | None:
        """What is wrong with an output's layout; None if it is as asked.

        Args:
          shape: the output's shape.
          split: for each axis of the output, how many blocks it is cut into.
          devices: how many devices hold a part of the output.
          expected_blocks: what :attr:`blocks` says for the case, if known; at 1
            nothing is judged, as the contract then allows every device the whole.

        Returns:
          None if the layout is right (or cannot be judged), else one sentence.
        """
        if devices <= 1 or math.prod(shape) == 0 or expected_blocks == 1:
            return None
        split_axes = [i for i, n in enumerate(split) if n > 1]
        if self.axis is None:
            if not split_axes:
                return None
            return (
                f"right values, but the result is split over the devices along axis "
                f"{split_axes[0]} where every device should hold all of it (out_specs=P())"
            )
        if self.axis >= len(shape) or shape[self.axis] <= 1:
            return None
        if split_axes == [self.axis]:
            return None
        if not split_axes:
            return (
                "right values, but every device holds the whole result: out_specs=P() where "
                f"{self.spec} was asked for (axis {self.axis} split over the devices)"
            )
        if self.axis in split_axes:
            others = " and ".join(str(a) for a in split_axes if a != self.axis)
            return (
                f"right values, but the result is split along axis {others} as well as axis "
                f"{self.axis}: only axis {self.axis} should be split over the devices "
                f"({self.spec})"
            )
        return (
            f"right values, but the result is split along axis {split_axes[0]} where axis "
            f"{self.axis} should be split over the devices ({self.spec})"
        )


@dataclasses.dataclass(frozen=True)
class Problem:
    """A practice problem: the function to write, how to check it, and on what.

    Attributes:
      name: the function a solution defines, e.g. ``"shard_map_double"``. Its
        page is ``<folder>/<name with dashes>``.
      title: the page title, e.g. ``"shard_map basics"``.
      reference: the reference solution. Its signature and docstring are the
        problem statement.
      oracle: an independent NumPy computation of the expected output, written
        without JAX's sharding so it can catch sharding mistakes.
      make_cases: builds the cases, deterministically (called once, lazily).
      make_refusals: builds one input per entry of the statement's "Raises"
        section, each :class:`Case` naming the error in ``raises`` (see
        :attr:`refusals`); None: none.
      unsharded: the same function in plain ``jax.numpy`` on one device. The
        result's dtype is what it gives under JAX's promotion rules (in the
        active 64-bit mode), and the tests compare the reference's gradients
        and ``jax.vmap`` with its own.
      rtol: relative tolerance when comparing float32 results with the oracle
        (see :meth:`tolerance` for the other dtypes).
      atol: absolute tolerance when comparing float32 results with the oracle.
      explain: recognises a problem's classic mistakes in a wrong answer:
        ``explain(case, expected, received)`` returns a sentence saying what the
        answer looks like, or None (for a problem with :attr:`outputs`,
        ``expected`` and ``received`` are tuples of arrays). Called when the shape or the values differ,
        never for a dtype difference (that diagnosis stands alone).
      imports: the import lines a solution's file starts with (see :meth:`starter`).
      generate: makes one fresh random case within the problem's contract from a
        NumPy generator; the checker adds a few to every check (see its ``seed``).
      technique: what the problem practises, read from the compiled programs of
        the solution's call (see :class:`Technique`), judged once its values are
        right. None: the problem simulates the devices on one (the statement's "no
        mesh, no ``jax.shard_map``"): a program over several devices, or one with
        ``jax.shard_map`` in it, is refused.
      mesh: the shape of the mesh the contract puts a case on, given its
        arguments and the device count (e.g. ``(2, 4)``); None: one axis, the
        most devices that divide the first argument's length
        (:func:`~shard_tutorial.usable_device_count`). The judge checks that the
        answer was computed, and lies, on that many devices.
      placement: how the output must be laid out over the devices, judged once
        its values are right; None: any layout. For a problem with
        :attr:`outputs`, one entry (or None) per output.
      folder: the folder of the documentation its page is in: ``"problems"``
        (Part I), ``"collectives"`` (Part II, communication between devices) or
        ``"training"`` (Part III, training across devices), ``"parallelism"``
        (Part V, the parallelisms of large models) or ``"scale"`` (Part VI,
        training at scale).
      outputs: the names of the outputs when the function returns a tuple of
        arrays, e.g. ``("w", "b")``; empty when it returns one array. The oracle
        and :attr:`unsharded` then return tuples too, and every output is judged
        on its own, by name.
      arrange: lays a case's arguments out as the contract says they arrive
        (e.g. a weight already split over the devices), before the solution is
        called, in the checker's workers and the tests; None: as they are
        (``jax.Array`` on the default device).
      budget: the bytes a device may send and hold for a case (see
        :class:`Budget`); None: no budget.
      sum_rounding: for a problem whose answer adds up many of its inputs: a
        float32 (or more precise) answer may also be off by this many ``eps``
        times the size of the terms added (the oracle run on ``abs`` of the
        inputs), since a right answer adds them in an order of its own and the
        rounding grows with the terms, not with the result (see
        :meth:`tolerance`); 0: :attr:`atol` alone.
      oracle_devices: whether the answer depends on how many devices the
        contract's mesh has (a capacity per device): the oracle is then called
        with that count as the keyword ``devices`` (see :meth:`expected`).
    """

    name: str
    title: str
    reference: Callable[..., Any]  # an array, or a tuple of them (see outputs)
    oracle: Callable[..., Any]
    make_cases: Callable[[], Sequence[Case]] = dataclasses.field(repr=False)
    unsharded: Callable[..., Any] = dataclasses.field(repr=False)
    rtol: float = 1e-5
    atol: float = 1e-6
    explain: Callable[[Case, Any, Any], str | None] | None = dataclasses.field(
        default=None, repr=False
    )
    imports: tuple[str, ...] = (
        "import jax",
        "import jax.numpy as jnp",
        "from jax.sharding import NamedSharding",
        "from jax.sharding import PartitionSpec as P",
        "",
        "from shard_tutorial import data_mesh  # a mesh that divides any length",
    )
    generate: Callable[[np.random.Generator], Case] | None = dataclasses.field(
        default=None, repr=False
    )
    technique: Technique | None = None
    mesh: Callable[[tuple[Any, ...], int], tuple[int, ...]] | None = dataclasses.field(
        default=None, repr=False
    )
    placement: Placement | tuple[Placement | None, ...] | None = None
    folder: str = "problems"
    outputs: tuple[str, ...] = ()
    arrange: Callable[[tuple[Any, ...]], tuple[Any, ...]] | None = dataclasses.field(
        default=None, repr=False
    )
    budget: Budget | None = dataclasses.field(default=None, repr=False)
    sum_rounding: float = 0.0
    make_refusals: Callable[[], Sequence[Case]] | None = dataclasses.field(default=None, repr=False)
    oracle_devices: bool = False

    @functools.cached_property
    def cases(self) -> tuple[Case, ...]:
        """The problem's cases: the statement's examples first, then generated ones."""
        return tuple(self.make_cases())

    @functools.cached_property
    def refusals(self) -> tuple[Case, ...]:
        """Inputs the statement refuses: one per entry of its "Raises" section.

        Each names, in :attr:`Case.raises`, the error an answer must raise for it.
        The checker runs them after the other cases, with the arguments as they
        arrive (not laid out by :attr:`arrange`), unless told not to
        (``refusals=False``, ``--no-refusals``): a contract is the errors it
        promises too.

        Examples:
          >>> from shard_tutorial.problems import get_problem
          >>> refused = get_problem("nnx_data_parallel_step").refusals
          >>> next((c.args[0], c.raises) for c in refused if c.label.startswith("a fractional"))
          (3.5, 'ValueError')
        """
        found = tuple(self.make_refusals()) if self.make_refusals is not None else ()
        for case in found:
            if case.raises is None:
                msg = f"{self.name}: refusal {case.label!r} names no error (Case.raises)"
                raise ValueError(msg)
        return found

    @property
    def summary(self) -> str:
        """The first line of the reference solution's docstring, as plain text."""
        first_line = (inspect.getdoc(self.reference) or self.name).splitlines()[0]
        return re.sub(r"``([^`]+)``", r"\1", first_line)

    @property
    def practises(self) -> str | None:
        """What the problem practises, in the statement's words; None if it does not say.

        The end of the sentence of the reference's docstring that starts "This
        problem practises", as plain text: every verdict on an answer made another
        way repeats it.

        Examples:
          >>> from shard_tutorial.problems import get_problem
          >>> print(get_problem("shard_map_psum").practises)
          jax.shard_map with jax.lax.psum: each device sums its own block, and one all-reduce adds the partial sums up
        """
        text = " ".join((inspect.getdoc(self.reference) or "").split())
        found = re.search(r"This problem practises (.+?)\.(?:\s|$)", text)
        return re.sub(r"``([^`]+)``", r"\1", found[1]) if found else None

    @property
    def page(self) -> str:
        """The problem's page in the documentation, relative to the docs root."""
        return f"{self.folder}/" + self.name.replace("_", "-")

    def expected(self, case: Case, devices: int | None = None) -> Any:
        """The oracle's answer for ``case``, in the dtype JAX gives.

        The oracle computes in NumPy, at 64-bit precision; the expected dtype is
        the dtype of :attr:`unsharded` on the same arguments, found by
        ``jax.eval_shape`` (no computation), so it follows JAX's promotion rules
        in the active mode: with ``jax_enable_x64`` off, ``int64`` input is
        ``int32`` and ``float64`` is ``float32``; ``bfloat16`` stays ``bfloat16``.

        Args:
          case: one of :attr:`cases`, or any case with this problem's arguments.
          devices: the run's device count, for a problem whose answer depends on
            its mesh (:attr:`oracle_devices`); None: ``jax.device_count()``.

        Returns:
          A NumPy array: the expected output; for a problem with :attr:`outputs`,
          a tuple of them, in that order.

        Examples:
          >>> import numpy as np
          >>> import jax.numpy as jnp
          >>> from shard_tutorial.problem import Case
          >>> from shard_tutorial.problems import get_problem
          >>> double = get_problem("shard_map_double")
          >>> double.expected(Case("ints", (np.arange(3, dtype=np.int32),)))
          array([0., 2., 4.], dtype=float32)
          >>> double.expected(Case("bf16", (np.ones(2, jnp.bfloat16),))).dtype
          dtype(bfloat16)
        """
        dtypes = self.result_dtype(case)
        with np.errstate(invalid="ignore", over="ignore"):  # inf - inf is nan, as in JAX
            out = self._oracle_on(case.args, devices)
        if self.outputs:
            return tuple(np.asarray(o).astype(d) for o, d in zip(out, dtypes, strict=True))
        return np.asarray(out).astype(dtypes)

    def _oracle_on(self, args: tuple[Any, ...], devices: int | None) -> Any:
        """The oracle on ``args``, told the mesh's device count if it asks for it."""
        if not self.oracle_devices:
            return self.oracle(*args)
        count = jax.device_count() if devices is None else devices
        return self.oracle(*args, devices=math.prod(self.mesh_shape(Case("", args), count)))

    def result_dtype(self, case: Case) -> Any:
        """The dtype of the answer to ``case``: that of :attr:`unsharded`, in the active mode.

        Args:
          case: a case of this problem.

        Returns:
          A NumPy dtype (``bfloat16`` and the other ML dtypes included); for a
          problem with :attr:`outputs`, a tuple of them.
        """
        arrays = [i for i, a in enumerate(case.args) if isinstance(a, np.ndarray | jax.Array)]
        # Tracing the unsharded function costs up to 40 ms (a Flax model's step), and a
        # check asks for each case's dtype several times: the answer depends only on the
        # arrays' shapes and dtypes, the other arguments and the 64-bit mode.
        key = _abstract_key(self.unsharded, self.outputs, case.args)
        if key is not None and key in _RESULT_DTYPES:
            return _RESULT_DTYPES[key]

        def on_arrays(*values: jax.Array) -> Any:
            args = list(case.args)
            for i, value in zip(arrays, values, strict=True):
                args[i] = value
            return self.unsharded(*args)

        shape = jax.eval_shape(on_arrays, *(case.args[i] for i in arrays))
        if self.outputs:
            dtype: Any = tuple(np.dtype(leaf.dtype) for leaf in shape)
        else:
            dtype = np.dtype(shape.dtype)
        if key is not None:
            if len(_RESULT_DTYPES) >= 4096:  # a bound, for a long session of random cases
                _RESULT_DTYPES.clear()
            _RESULT_DTYPES[key] = dtype
        return dtype

    def mesh_shape(self, case: Case, devices: int) -> tuple[int, ...]:
        """The shape of the mesh the contract puts ``case`` on, with ``devices`` devices.

        Examples:
          >>> from shard_tutorial.problems import get_problem
          >>> psum = get_problem("shard_map_psum")
          >>> [(psum.describe(case), psum.mesh_shape(case, 8)) for case in psum.cases[:3]]
          [('x=float32[3]', (3,)), ('x=float32[1]', (1,)), ('x=float32[0]', (8,))]
        """
        if self.mesh is not None:
            return tuple(self.mesh(case.args, devices))
        first = next(a for a in case.args if isinstance(a, np.ndarray | jax.Array))
        return (usable_device_count(int(np.shape(first)[0]) if np.ndim(first) else 1, devices),)

    def placements(self) -> tuple[Placement | None, ...]:
        """One :class:`Placement` (or None) per output: :attr:`placement`, spread out.

        Examples:
          >>> from shard_tutorial.problems import get_problem
          >>> get_problem("shard_map_pmean").placements()
          (Placement(axis=0),)
        """
        count = max(len(self.outputs), 1)
        if isinstance(self.placement, tuple):
            if len(self.placement) != count:
                msg = f"{self.name}: {len(self.placement)} placements for {count} outputs"
                raise ValueError(msg)
            return self.placement
        return (self.placement,) * count

    def arranged(self, case: Case) -> tuple[Any, ...]:
        """``case``'s arguments as a caller passes them, laid out as :attr:`arrange` says.

        Returns:
          The arguments, arrays as ``jax.Array``.

        Examples:
          >>> from shard_tutorial.problems import get_problem
          >>> problem = get_problem("shard_map_double")
          >>> problem.arranged(problem.cases[0])
          (Array([1., 2.], dtype=float32),)
        """
        args = case.jax_args()
        return args if self.arrange is None else self.arrange(args)

    def tolerance(
        self, case: Case, dtype: np.dtype, devices: int | None = None
    ) -> tuple[float, np.ndarray | float]:
        """``(rtol, atol)`` for comparing an answer of ``dtype`` to ``case`` with the oracle.

        Integers must be exact. float32 (and more precise) answers get
        :attr:`rtol` and :attr:`atol`, and where the problem sets
        :attr:`sum_rounding`, an ``atol`` of that many ``eps`` times the size of
        the terms added when that is more. For a problem with :attr:`outputs` (a
        training step), a coarser float gets 4 units of its ``eps``, relative and
        absolute. Otherwise a coarser float (``bfloat16``, ``float16``,
        the ``float8`` types) gets its own rounding: ``rtol`` of 2 units of its
        ``eps``, and per element an ``atol`` of 2 ``eps`` times the size of the
        terms that were added up (the oracle run on ``abs`` of the inputs: for a
        sum, the sum of the absolute values), since rounding errors grow with
        them, not with the result. Measured on 1 and 8 devices, the references
        stay within 0.7 of that; an answer wrong by more than the rounding fails.

        Args:
          case: the case that was run.
          dtype: the answer's dtype.
          devices: the run's device count (see :meth:`expected`).

        Returns:
          The relative tolerance and the absolute one (a number, or an array
          shaped like the answer).

        Examples:
          >>> import numpy as np
          >>> import jax.numpy as jnp
          >>> from shard_tutorial.problem import Case
          >>> from shard_tutorial.problems import get_problem
          >>> psum = get_problem("shard_map_psum")
          >>> case = Case("three", (np.array([1.0, -2.0, 3.0], jnp.bfloat16),))
          >>> psum.tolerance(case, np.dtype(np.int32)), psum.tolerance(case, np.dtype(np.float32))
          ((0.0, 0.0), (1e-05, 0.0001))
          >>> psum.tolerance(case, np.dtype(jnp.bfloat16))  # 2 eps, and 2 eps times 1+2+3
          (0.015625, 0.09375)

          A float32 sum of 200 terms of about 100 each: 4 eps (``sum_rounding``)
          times their total size, 20,000, is more than ``atol``:

          >>> big = Case("big", (np.full(200, 100.0, np.float32),))
          >>> rtol, atol = psum.tolerance(big, np.dtype(np.float32))
          >>> rtol, round(atol, 6), 4 * float(np.finfo(np.float32).eps) * 20_000
          (1e-05, 0.009537, 0.0095367431640625)
        """
        if not jnp.issubdtype(dtype, jnp.inexact):
            return 0.0, 0.0
        eps = float(jnp.finfo(dtype).eps)
        if eps <= float(jnp.finfo(jnp.float32).eps):
            if not self.sum_rounding:
                return self.rtol, self.atol
            return self.rtol, self._atol_of_terms(case, self.sum_rounding * eps, devices)
        if self.outputs:  # a training step: no sum of terms to scale by; 4 of its eps
            return max(self.rtol, 4 * eps), max(self.atol, 4 * eps)
        return max(self.rtol, 2 * eps), self._atol_of_terms(case, 2 * eps, devices)

    def _atol_of_terms(
        self, case: Case, per_size: float, devices: int | None = None
    ) -> np.ndarray | float:
        """:attr:`atol`, or ``per_size`` times the size of ``case``'s terms where that is more."""
        with np.errstate(invalid="ignore", over="ignore"):  # inf and nan compare as equal
            sizes = self._oracle_on(
                tuple(np.abs(a) if isinstance(a, np.ndarray) else a for a in case.args), devices
            )
            atol = np.maximum(self.atol, per_size * np.abs(precise(sizes)))
        atol = np.where(np.isfinite(atol), atol, 0.0)  # where the terms are not, equality decides
        return float(atol) if atol.ndim == 0 else atol

    def diagnose(self, case: Case, received: object, devices: int | None = None) -> str | None:
        """What is wrong with ``received`` as the answer to ``case``; None if it is right.

        The answer must have the expected shape and dtype, and values within
        :attr:`rtol` and :attr:`atol` of the oracle's. The message names the first
        difference: the shape, the dtype, or the first element that differs, with
        both values, then what the mistake looks like when :attr:`explain`
        recognises it.

        Args:
          case: the case that was run.
          received: what the solution returned.
          devices: the run's device count (see :meth:`expected`).

        Returns:
          None if ``received`` is right, else one or more sentences.

        Examples:
          >>> import numpy as np
          >>> from shard_tutorial.problems import get_problem
          >>> psum = get_problem("shard_map_psum")
          >>> case = psum.cases[4]
          >>> case.label
          'length 32, one block per device on 8'
          >>> psum.diagnose(case, np.float32(496.0)) is None
          True
          >>> print(psum.diagnose(case, np.float32(6.0)))
          value: expected 496.0, received 6.0. That is the sum of the first 4 of the 32
          elements only: one device's partial sum. The partial sums of the blocks must be
          added up across the devices, with jax.lax.psum over "data".
          >>> print(psum.diagnose(case, np.float32(496.0).astype(np.float64)))
          dtype: expected float32, received float64
        """
        expected = self.expected(case, devices)
        if not self.outputs:
            got = _as_numbers(received)
            if isinstance(got, str):
                return got
            tolerance = self.tolerance(case, expected.dtype, devices)
            message, alone = _difference(expected, got, tolerance)
            if message is None or alone:
                return message
            return self._with_hint(case, expected, got, message)
        names = self.outputs
        wanted = f"the tuple ({', '.join(names)})"
        if not isinstance(received, tuple | list):
            return f"returned {type(received).__name__}, not {wanted}"
        if len(received) != len(names):
            return f"returned a {type(received).__name__} of {len(received)} items, not {wanted}"
        gots, messages = [], []
        for name, want, item in zip(names, expected, received, strict=True):
            got = _as_numbers(item)
            if isinstance(got, str):
                return f"{name}: {got}"
            message, alone = _difference(want, got, self.tolerance(case, want.dtype, devices))
            if message is not None and alone:
                return f"{name}: {message}"
            if message is not None:
                messages.append(f"{name}: {message}")
            gots.append(got)
        if not messages:
            return None
        return self._with_hint(case, expected, tuple(gots), "; ".join(messages))

    def _with_hint(self, case: Case, expected: Any, got: Any, message: str) -> str:
        """``message``, then what the mistake looks like if :attr:`explain` recognises it."""
        try:
            hint = self.explain(case, expected, got) if self.explain else None
        except Exception:  # noqa: BLE001 (a hint is a bonus; never fail the diagnosis)
            hint = None
        return f"{message}. {hint}." if hint else message

    def starter(self) -> str:
        """A file to start a solution from: the imports, the signature and the statement.

        Returns:
          Python source whose function has the reference's signature and docstring
          and no body.

        Examples:
          >>> from shard_tutorial.problems import get_problem
          >>> starter = get_problem("shard_map_double").starter()
          >>> print(starter.split("def ")[1].splitlines()[0])
          shard_map_double(x: jax.Array) -> jax.Array:
          >>> starter.rstrip().endswith('raise NotImplementedError("write your solution here")')
          True
        """
        signature = _signature_text(self.reference)
        docstring = (inspect.getdoc(self.reference) or "").replace('"""', '\\"\\"\\"')
        body = "\n".join("    " + line if line else "" for line in docstring.splitlines())
        return (
            f'"""Starter for the shard_tutorial problem "{self.title}" ({self.page}).\n\n'
            "Write the function below, then check it on 1 and on 8 devices:\n\n"
            f"    python -m shard_tutorial check {self.name} {self.name}.py\n"
            + ("\n" + textwrap.fill(ONE_DEVICE_RULE, 88) + "\n" if self.technique else "")
            + '"""\n\n'
            + "\n".join(self.imports)
            + f'\n\n\ndef {self.name}{signature}:\n    """{body.lstrip()}\n    """\n'
            + '    raise NotImplementedError("write your solution here")\n'
        )

    def describe(self, case: Case) -> str:
        """A one-line account of a case's arguments: shapes and dtypes of arrays, values of numbers.

        Args:
          case: a case of this problem.

        Returns:
          The arguments by parameter name, e.g. ``"x=float32[5]"``.

        Examples:
          >>> from shard_tutorial.problems import get_problem
          >>> problem = get_problem("shard_map_simulate")
          >>> problem.describe(problem.cases[0])
          'seed=0.0, x=float32[8,4], num_shards=2.0, features=3.0'
        """
        names = inspect.signature(self.reference).parameters
        return ", ".join(f"{n}={_describe_value(a)}" for n, a in zip(names, case.args, strict=True))


def precise(array: np.ndarray) -> np.ndarray:
    """``array`` widened to 64 bits of the same kind, for an oracle to compute in.

    Integers become ``int64``, floats ``float64`` and complex numbers ``complex128``,
    so an oracle's arithmetic is more precise than JAX's 32-bit arithmetic while
    its result dtype still says what JAX produces (see :meth:`Problem.expected`).

    Args:
      array: a NumPy array of numbers.

    Returns:
      A NumPy array with the same values and a 64-bit (or complex128) dtype.

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.problem import precise
      >>> precise(np.array([1, 2], np.int32)).dtype, precise(np.ones(2, np.float32)).dtype
      (dtype('int64'), dtype('float64'))
      >>> import jax.numpy as jnp
      >>> precise(np.ones(2, jnp.bfloat16)).dtype
      dtype('float64')
    """
    array = np.asarray(array)
    for kind, wide in _WIDE:
        if jnp.issubdtype(array.dtype, kind):
            return array.astype(wide)
    return array.astype(np.int64)  # bool


_RESULT_DTYPES: dict[tuple[Any, ...], Any] = {}
""":meth:`Problem.result_dtype`'s answers, by :func:`_abstract_key`."""


def _abstract_key(
    unsharded: Callable[..., Any], outputs: tuple[str, ...], args: tuple[Any, ...]
) -> tuple[Any, ...] | None:
    """What the dtype of ``unsharded(*args)`` depends on; None if an argument is unhashable.

    Arrays count by shape, dtype and weak type; other arguments by type and value.
    """
    parts: list[Any] = [unsharded, outputs, bool(jax.config.jax_enable_x64)]
    for arg in args:
        if isinstance(arg, np.ndarray | jax.Array):
            weak = isinstance(arg, jax.Array) and arg.weak_type
            parts.append(("array", arg.shape, np.dtype(arg.dtype), weak))
            continue
        try:
            hash(arg)
        except TypeError:
            return None
        parts.append((type(arg), arg))
    return tuple(parts)


# Checked in this order: jnp.issubdtype knows the ML dtypes (bfloat16 is floating).
_WIDE = (
    (jnp.complexfloating, np.complex128),
    (jnp.floating, np.float64),
    (jnp.unsignedinteger, np.uint64),
    (jnp.signedinteger, np.int64),
)


def first_block_only(expected: np.ndarray, received: np.ndarray, axis: int = 0) -> str | None:
    """A hint if ``received`` is one device's block of ``expected`` along ``axis``.

    That is what comes back when ``out_specs`` says the output is replicated
    (``P()``) but each device returned only its own block.

    Args:
      expected: the right answer.
      received: the answer given, with the same rank.
      axis: the axis the blocks are cut along.

    Returns:
      The hint, or None if ``received`` is not a leading block of ``expected``.
    """
    length = expected.shape[axis] if expected.ndim > axis else 0
    if received.ndim != expected.ndim or not 0 < received.shape[axis] < length:
        return None
    block = received.shape[axis]
    if length % block or not np.allclose(received, np.take(expected, range(block), axis=axis)):
        return None
    return (
        f"The result is the first block only ({block} of {length}), as one device returns it: "
        'out_specs must put the blocks of all devices back together (P("data")), not P()'
    )


def _as_numbers(value: object) -> np.ndarray | str:
    """``value`` as a NumPy array of numbers, or a sentence saying why it is not one."""
    try:
        got = np.asarray(value)
    except Exception as error:  # noqa: BLE001 (anything a solution returns is reported)
        return f"returned {type(value).__name__}, which is not an array: {error}"
    if got.dtype == object:
        return f"returned {type(value).__name__}, not an array of numbers"
    return got


def _difference(
    expected: np.ndarray, got: np.ndarray, tolerance: tuple[float, np.ndarray | float]
) -> tuple[str | None, bool]:
    """The first difference between two arrays, and whether it stands alone (a dtype).

    Returns:
      ``(None, False)`` if ``got`` is ``expected`` within ``tolerance``; else the
      message, and True for a dtype difference, which no hint explains.
    """
    if got.shape != expected.shape:
        return f"shape: expected {expected.shape}, received {got.shape}", False
    if got.dtype != expected.dtype:
        return f"dtype: expected {expected.dtype}, received {got.dtype}", True
    rtol, atol = tolerance
    close = np.isclose(precise(got), precise(expected), rtol=rtol, atol=atol, equal_nan=True)
    if close.all():
        return None, False
    if expected.shape == ():
        return f"value: expected {_number(expected)}, received {_number(got)}", False
    wrong = np.argwhere(~close)
    first = tuple(int(i) for i in wrong[0])
    return (
        f"values: {len(wrong)} of {expected.size} differ; the first at index "
        f"{first[0] if len(first) == 1 else first}: expected "
        f"{_number(expected[first])}, received {_number(got[first])}"
    ), False


def _number(value: np.ndarray | np.generic) -> str:
    """A number with the digits its dtype has: a float32 as ``-4.748629``, not 17 digits."""
    value = np.asarray(value)
    return str(value[()]) if jnp.issubdtype(value.dtype, jnp.inexact) else repr(value.item())


def _signature_text(function: Callable[..., object]) -> str:
    """``function``'s signature as written in its source, annotations unquoted."""

    def annotation(value: object) -> str:
        return value if isinstance(value, str) else inspect.formatannotation(value)

    signature = inspect.signature(function)
    parameters = [
        parameter.name
        + (
            f": {annotation(parameter.annotation)}"
            if parameter.annotation is not parameter.empty
            else ""
        )
        + (f" = {parameter.default!r}" if parameter.default is not parameter.empty else "")
        for parameter in signature.parameters.values()
    ]
    returns = signature.return_annotation
    arrow = f" -> {annotation(returns)}" if returns is not signature.empty else ""
    return f"({', '.join(parameters)}){arrow}"


def _describe_value(value: object) -> str:
    if isinstance(value, np.ndarray | jax.Array):
        return f"{value.dtype}[{','.join(map(str, value.shape))}]"
    return repr(value)
