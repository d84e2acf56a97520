"""Where does my program communicate? Every collective of one call, traced to its Python line.

:func:`explain` runs a call as it would run (jitted or eager, inside or outside
``jax.shard_map``), keeps every program XLA compiled and ran for it
(:mod:`shard_tutorial.checking.recording`), and lists each collective in them: its kind,
the devices it spans, what it moves, the bytes each device sends
(:func:`shard_tutorial.collective_costs.ring_bytes`, as often as it runs:
:func:`shard_tutorial.compiled.parse_runs`), and the line of Python it came
from. Then the memory each device holds and how each argument and output is laid
out. The result is an :class:`Explanation`: a Rich table in a terminal, an HTML
table in a notebook, plain data for a program. :func:`program_communication`
reads the same from the text of one compiled program alone, as the checker
records it.

What the compiled program says, and what it does not:

- **The line.** XLA keeps, for each operation, the Python lines JAX traced it
  from (its metadata's ``stack_frame_id``, into the stack-frame tables printed
  after the module's header; jax 0.10 and 0.12 alike). A collective the code
  asked for (a ``psum``, ``all_gather``, ``ppermute`` ... inside
  ``jax.shard_map``) carries the line that called it.
- **A collective XLA inserted** (to carry out ``jax.jit``'s automatic
  partitioning, a ``reshard`` or a sharding constraint) carries whatever
  metadata the partitioner gave it: the operation that needed it (a
  ``reshard``, a ``reduce_sum``; on jax 0.10 the ``dot_general`` too), or, on
  jax 0.12, often only the argument it moves (``op_name="w"``, no line), or
  nothing. So its line is its own when it has one, else that of the nearest
  operation that *uses* what it moved and has a line (the ``dot_general`` that
  needed ``w`` whole), else that of the nearest operation that made what it
  moves. When nothing between it and the program's output has a line, it is
  there for the output's layout, and the table says so.
- **The two shardings that met.** After partitioning, XLA's text no longer says
  how each value was meant to be laid out; what it does say is what the
  collective does: an all-gather along dimension ``d`` over ``n`` devices takes
  a value split ``n`` ways along ``d`` (its operand's type) to one whole along
  ``d`` (its result's). That is what *before* and *after* report, with the
  argument's own sharding when what it moves is an argument. The layout the
  consuming operation asked for is not printed, and a ``with_sharding_constraint``
  leaves no operation of its own (its line appears only if the operation it
  constrained is on the same line).
"""

from __future__ import annotations

import dataclasses
import html
import inspect
import io
import itertools
import linecache
import math
import re
import shutil
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from shard_tutorial import compiled
from shard_tutorial.collective_costs import ring_bytes
from shard_tutorial.compiled import Frame

__all__ = [
    "Communication",
    "Explanation",
    "Placement",
    "explain",
    "explain_file",
    "program_communication",
]

# The tool's own frames: a program run eagerly under a recording has the
# recorder's hook as its innermost "user" frame.
_OWN_FILES = ("shard_tutorial/checking/recording.py", "shard_tutorial/explain.py")
_DIMENSIONS = re.compile(r"\bdimensions=\{(\d+)\}")
# JAX's collective primitives, as the last part of an op_name: what a collective the
# code asked for is named after, inside shard_map or where a mesh of one device
# leaves no shard_map in the name (XLA names what it inserts after the operation
# that needed it: dot_general, reduce_sum, reshard, or an argument).
_ASKED = re.compile(
    r"(^|/)(psum|psum_invariant|pmean|pmax|pmin|all_gather|all_gather_invariant|"
    r"reduce_scatter|psum_scatter|ppermute|pshuffle|all_to_all|ragged_all_to_all|"
    r"pbroadcast)$"
)
_NAMED_AXES = re.compile(r"mesh\[(?P<mesh>[^\]]*)\]\s*\{(?P<axes>[^}]*)\}")


@dataclasses.dataclass(frozen=True)
class Communication:
    """One collective of a compiled program, where it came from, and what it sends.

    Attributes:
      kind: the HLO operation, e.g. ``"all-gather"``.
      moved: the type of what it produces on each device, e.g. ``"f32[32,8]"``.
      over: the devices it spans: how many take part together, and the mesh axes
        when XLA names them (``"8 devices (x)"``), or the pairs of a permute.
      sent_per_run: the bytes each device sends each time it runs
        (:func:`shard_tutorial.collective_costs.ring_bytes`; 0 within a group of one).
      runs: how many times one call runs it (loop trip counts); None when a loop
        around it has no trip count XLA knows (counted once in :attr:`sent`).
      asked: whether the code asked for it (inside ``jax.shard_map``), rather
        than XLA inserting it.
      line: the reader's line it is traced to (see the module's notes), None if
        no operation near it has one.
      code: the text of that line, stripped ("" when the file cannot be read).
      stack: the lines that led there, innermost first (calls into the line).
      because: for a collective XLA inserted, what needed it (the operation that
        uses what it moves, or the program's output) and what it moves (an
        argument's name and sharding, or the operation that made it).
      before: how what it moves is laid out before it, read from what it does.
      after: how it is laid out after it.
      program: the compiled program's name, e.g. ``"jit_layer"``.
      name: the collective's name in that program, e.g. ``"%all-gather.1"``.
      op_name: where in the traced program it came from, as XLA kept it
        (``"jit(f)/shard_map/transpose(jvp())/reduce_scatter"``).
    """

    kind: str
    moved: str
    over: str
    sent_per_run: float
    runs: int | None
    asked: bool
    line: Frame | None
    code: str = ""
    stack: tuple[Frame, ...] = ()
    because: str = ""
    before: str = ""
    after: str = ""
    program: str = ""
    name: str = ""
    op_name: str = ""

    @property
    def sent(self) -> float:
        """The bytes each device sends for it in one call: per run, times its runs."""
        return self.sent_per_run * (self.runs or 1)

    @property
    def where(self) -> str:
        """``file:line`` of :attr:`line`, or ``"?"``."""
        return str(self.line) if self.line else "?"


@dataclasses.dataclass(frozen=True)
class Placement:
    """How one argument or output of the call is laid out.

    Attributes:
      name: the argument's name (with its place in a pytree), or ``"output"``.
      type: its global type, e.g. ``"f32[16,32]"``.
      per_device: the type of the block each device holds (the same as
        :attr:`type` when every device holds it whole).
      sharding: its sharding, e.g. ``"P('x', None) over x=8"``; for data not on
        the devices, where it is (``"host (NumPy)"``, ``"Python number"``).
    """

    name: str
    type: str
    per_device: str
    sharding: str


@dataclasses.dataclass(frozen=True)
class Explanation:
    """What one call communicated, held and laid out (see :func:`explain`).

    Attributes:
      function: the function's name.
      devices: the most devices any of its programs ran on.
      programs: how many XLA programs the call ran.
      communications: every collective of those programs, in the order they ran.
      memory: what XLA's memory analysis says one device holds for the largest
        program, in bytes: ``argument``, ``output``, ``temp``, ``alias``, ``peak``.
      arguments: how each argument is laid out.
      outputs: how each output is laid out.
    """

    function: str
    devices: int
    programs: int
    communications: tuple[Communication, ...]
    memory: dict[str, int]
    arguments: tuple[Placement, ...] = ()
    outputs: tuple[Placement, ...] = ()

    @property
    def sent(self) -> float:
        """The bytes each device sends in the whole call (the sum of :attr:`Communication.sent`)."""
        return sum(c.sent for c in self.communications)

    def render(self, width: int = 100) -> str:
        """The tables as plain text, ``width`` columns wide (what ``str()`` gives at 100)."""
        from rich.console import Console  # noqa: PLC0415 (only to draw)

        console = Console(file=io.StringIO(), width=width, color_system=None, force_terminal=False)
        console.print(self)
        return "\n".join(line.rstrip() for line in console.file.getvalue().splitlines())  # type: ignore[attr-defined]

    def __str__(self) -> str:
        """The tables as plain text, 100 columns wide."""
        return self.render()

    def __rich_console__(self, console: Any, options: Any) -> Iterator[Any]:
        """The Rich rendering: a header, the collectives, where each came from, memory, layouts."""
        from rich.padding import Padding  # noqa: PLC0415
        from rich.table import Table  # noqa: PLC0415
        from rich.text import Text  # noqa: PLC0415

        yield Text(self._headline(), style="bold")
        if self.communications:
            table = Table(box=None, header_style="bold", pad_edge=False)
            for column, justify in _COLUMNS:
                table.add_column(column, justify=justify)  # type: ignore[arg-type]
            for row in self._rows():
                table.add_row(*row)
            yield table
            for number, c in enumerate(self.communications, 1):
                yield Text(f"[{number}] {_place(c)}: {c.code or '(source not available)'}")
                yield Padding(Text(_origin(c), style="dim"), (0, 0, 0, 4))
        yield Text(f"memory per device: {_memory(self.memory)}")
        layouts = Table(box=None, header_style="bold", pad_edge=False)
        for column in ("", "name", "type", "per device", "sharding"):
            layouts.add_column(column)
        for role, placements in (("argument", self.arguments), ("output", self.outputs)):
            for p in placements:
                layouts.add_row(role, p.name, p.type, p.per_device, p.sharding)
        yield layouts

    def _repr_html_(self) -> str:
        """The tables as HTML, for a notebook."""
        e = html.escape
        parts = [f"<p><strong>{e(self._headline())}</strong></p>"]
        if self.communications:
            head = "".join(f"<th>{e(c)}</th>" for c, _ in _COLUMNS)
            rows = []
            for c, row in zip(self.communications, self._rows(), strict=True):
                cells = "".join(f"<td>{e(cell)}</td>" for cell in row)
                rows.append(f"<tr>{cells}</tr>")
                rows.append(
                    f'<tr><td></td><td colspan="{len(_COLUMNS) - 1}">{e(_place(c))}: '
                    f"<code>{e(c.code)}</code><br><small>{e(_origin(c))}</small></td></tr>"
                )
            parts.append(
                f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
            )
        parts.append(f"<p>memory per device: {e(_memory(self.memory))}</p>")
        layout = [
            f"<tr><td>{e(role)}</td><td>{e(p.name)}</td><td>{e(p.type)}</td>"
            f"<td>{e(p.per_device)}</td><td>{e(p.sharding)}</td></tr>"
            for role, placements in (("argument", self.arguments), ("output", self.outputs))
            for p in placements
        ]
        parts.append(
            "<table><thead><tr><th></th><th>name</th><th>type</th><th>per device</th>"
            f"<th>sharding</th></tr></thead><tbody>{''.join(layout)}</tbody></table>"
        )
        return "\n".join(parts)

    def _headline(self) -> str:
        programs = "1 program" if self.programs == 1 else f"{self.programs} programs"
        count = len(self.communications)
        collectives = "1 collective" if count == 1 else f"{count} collectives"
        return (
            f"{self.function}: {programs} on {self.devices} device"
            f"{'' if self.devices == 1 else 's'}, {collectives}, "
            f"{_bytes(self.sent)} B sent per device"
        )

    def _rows(self) -> list[tuple[str, ...]]:
        return [
            (
                str(number),
                c.kind,
                "asked" if c.asked else "XLA",
                c.over,
                c.moved,
                _bytes(c.sent_per_run),
                "?" if c.runs is None else str(c.runs),
                _bytes(c.sent),
                _place(c),
            )
            for number, c in enumerate(self.communications, 1)
        ]


_COLUMNS = (
    ("#", "right"),
    ("collective", "left"),
    ("by", "left"),
    ("over", "left"),
    ("moves", "left"),
    ("B/run", "right"),
    ("runs", "right"),
    ("B sent", "right"),
    ("line", "left"),
)


def program_communication(
    program: str, devices: int | None = None, *, arguments: dict[str, str] | None = None
) -> list[Communication]:
    r"""Each collective of one compiled program, with its Python line and the bytes it sends.

    Reads only the program's text: the whole of ``compiled.as_text()``, or what
    the checker records of each program it ran
    (:func:`shard_tutorial.compiled.communication_lines`). The bytes are those of
    :func:`shard_tutorial.collective_costs.sent_by`, collective by collective: their sum
    is what it returns.

    Args:
      program: the program's text.
      devices: how many devices it runs on, for collectives whose groups the
        text does not print; None reads it from the text's header.
      arguments: the sharding of each argument by name (as the program names
        its parameters), to say how an argument a collective moves was laid out.

    Returns:
      One :class:`Communication` per collective, in program order.

    Examples:
      >>> from shard_tutorial.explain import program_communication
      >>> program = "\n".join([
      ...     "HloModule jit_f, num_partitions=8",
      ...     "FileNames", '1 "f.py"', "FunctionNames", '1 "f"',
      ...     "FileLocations", "1 {file_name_id=1 function_name_id=1 line=7 end_line=7}",
      ...     "StackFrames", "1 {file_location_id=1 parent_frame_id=1}",
      ...     "ENTRY %main (p: f32[4,8]) -> f32[32,8] {",
      ...     '  %p = f32[4,8]{1,0} parameter(0), metadata={op_name="w"}',
      ...     "  %ag = f32[32,8]{1,0} all-gather(%p), replica_groups=[1,8]<=[8], dimensions={0}",
      ...     '  ROOT %d = f32[32,8]{1,0} tanh(%ag), metadata={op_name="jit(f)/tanh" stack_frame_id=1}',
      ...     "}",
      ... ])
      >>> [c] = program_communication(program)
      >>> c.kind, c.where, c.asked, c.sent_per_run, c.runs
      ('all-gather', 'f.py:7', False, 896.0, 1)
      >>> c.because, c.before, c.after
      ('tanh at this line uses it; it moves argument w', 'f32[4,8], dim 0 split 8 ways', 'f32[32,8], dim 0 whole')
    """
    devices = devices or compiled.num_devices(program)
    operations = compiled.parse_operations(program)
    name = re.match(r"HloModule (\S+?),", program)
    found = []
    for collective, runs in compiled.parse_runs(program):
        producers, consumers, _ = compiled.neighbours(operations, collective.name)
        own = _reader(collective.stack)
        used = [o for o in consumers if _reader(o.stack)]
        asked = collective.explicit or bool(_ASKED.search(collective.op_name))
        if own or asked:
            line_stack = collective.stack
        elif used:
            line_stack = used[0].stack
        else:
            line_stack = next((o.stack for o in producers if _reader(o.stack)), ())
        line = _reader(line_stack)
        size = collective.group_size or devices
        operand = _operand_type(collective, operations)
        found.append(
            Communication(
                kind=collective.kind,
                moved=_compact(collective.result),
                over=_over(collective, devices),
                sent_per_run=ring_bytes(collective, devices) if size > 1 else 0.0,
                runs=runs,
                asked=asked,
                line=line,
                code=_code(line),
                stack=_from(line_stack, line),
                because=""
                if asked
                else _because(used, consumers, producers, line, arguments or {}),
                before=_before(collective, operand, size),
                after=_after(collective, size),
                program=name[1] if name else "",
                name=collective.name,
                op_name=collective.op_name,
            )
        )
    return found


def explain(
    f: Callable[..., Any], *args: Any, show: bool | None = None, **kwargs: Any
) -> Explanation:
    """Run ``f(*args, **kwargs)`` and say where it communicated, what it held, how it laid out.

    The call runs as it would (jitted or eager: an eager call runs a program per
    operation, and every one is read), recorded by
    :func:`shard_tutorial.checking.recording.record`; each collective of every program it
    ran is traced to its Python line (see the module's notes for what can and
    cannot be traced) and counted in bytes per device as
    :func:`shard_tutorial.collective_costs.sent_by` counts it. A program run several
    times is listed once, its collectives' runs added up.

    Args:
      f: the function.
      *args: its arguments.
      show: print the tables (Rich, in a terminal); None prints them except in a
        notebook, where the returned value shows itself as HTML.
      **kwargs: its keyword arguments.

    Returns:
      An :class:`Explanation`.

    Examples:
      A sum over 8 devices, then the same sum's total asked for by a ``psum``:

      >>> import jax
      >>> import jax.numpy as jnp
      >>> from jax.sharding import NamedSharding, PartitionSpec as P
      >>> from shard_tutorial import data_mesh, place
      >>> from shard_tutorial.explain import explain
      >>> mesh = data_mesh(8)
      >>> x = place(jnp.arange(16.0), NamedSharding(mesh, P("data")))
      >>> found = explain(jax.jit(jnp.sum), x, show=False)
      >>> [(c.kind, c.asked, c.moved, c.runs) for c in found.communications]
      [('all-reduce', False, 'f32[]', 1)]
      >>> def total(block):
      ...     return jax.lax.psum(block.sum(), "data")
      >>> step = jax.jit(jax.shard_map(total, mesh=mesh, in_specs=P("data"), out_specs=P()))
      >>> found = explain(step, x, show=False)
      >>> [(c.kind, c.asked, c.code) for c in found.communications]
      [('all-reduce', True, 'return jax.lax.psum(block.sum(), "data")')]
      >>> found.arguments[0].sharding
      "P('data') over data=8"
    """
    from shard_tutorial.checking.recording import record  # noqa: PLC0415 (its hooks load on use)

    with record() as recording:
        result = f(*args, **kwargs)
        jax.block_until_ready(result)
    names = _argument_names(f, args, kwargs)
    arguments = tuple(_placements(names))
    shardings = {p.name: p.sharding for p in arguments}
    merged: dict[tuple[int, str], Communication] = {}
    texts: dict[str, int] = {}
    for run in recording.runs:
        key = texts.setdefault(run.text, len(texts))
        for found in program_communication(run.text, run.devices, arguments=shardings):
            before = merged.get((key, found.name))
            if before is not None:
                runs = None if None in (before.runs, found.runs) else before.runs + found.runs  # type: ignore[operator]
                found = dataclasses.replace(before, runs=runs)  # noqa: PLW2901 (the sum of both)
            merged[(key, found.name)] = found
    largest = max(
        (run.memory for run in recording.runs),
        key=lambda m: m.get("argument", 0) + m.get("output", 0) + m.get("temp", 0),
        default={},
    )
    meshes = [
        dict(leaf.sharding.mesh.shape)
        for _, leaf in [*names, *_leaves("output", result)]
        if isinstance(leaf, jax.Array) and hasattr(leaf.sharding, "mesh")
    ]
    for place, each in merged.items():
        merged[place] = dataclasses.replace(each, over=_axes_named(each.over, meshes))
    explanation = Explanation(
        function=getattr(f, "__name__", type(f).__name__),
        devices=max((run.devices for run in recording.runs), default=1),
        programs=len(recording.runs),
        communications=tuple(merged.values()),
        memory=dict(largest),
        arguments=arguments,
        outputs=tuple(_placements(_leaves("output", result))),
    )
    if show or (show is None and not _in_notebook()):
        from rich.console import Console  # noqa: PLC0415

        Console().print(explanation)
    return explanation


def explain_file(
    path: str | Path | None, function: str | None = None, *, problem: str | None = None
) -> Explanation:
    """:func:`explain` a function of a Python file on the arguments its ``make_args()`` gives.

    What ``python -m shard_tutorial explain FILE FUNCTION`` runs (in every process
    of a cluster with ``--processes``). With ``problem``, the arguments are that
    problem's example from its statement instead, and without ``path`` the
    function is the problem's own reference.

    Args:
      path: the Python file (run as a script would be, under another module name);
        None with ``problem``: the problem's reference.
      function: the name of the function in it.
      problem: a problem's name (``python -m shard_tutorial list``).

    Returns:
      The :class:`Explanation`, not printed.

    Raises:
      ValueError: if the file defines no such function, or no ``make_args`` when
        no problem gives the arguments.
    """
    import runpy  # noqa: PLC0415

    namespace: dict[str, Any] = {}
    if path is not None:
        namespace = runpy.run_path(str(path), run_name="__shard_tutorial_explain__")
    if problem is not None:
        from shard_tutorial.problems import get_problem  # noqa: PLC0415

        chosen = get_problem(problem)
        case = next((c for c in chosen.cases if "example" in c.label), chosen.cases[0])
        made: Any = chosen.arranged(case)
        target = namespace.get(function or chosen.name) if path is not None else chosen.reference
    else:
        if "make_args" not in namespace:
            msg = f"{path} defines no make_args(): write one that returns the arguments"
            raise ValueError(msg)
        made = namespace["make_args"]()
        target = namespace.get(function or "")
    if not callable(target):
        msg = f"{path} defines no function named {function!r}"
        raise ValueError(msg)  # noqa: TRY004 (a name the file lacks, not a wrong type)
    if isinstance(made, dict):
        return explain(target, show=False, **made)
    return explain(target, *(made if isinstance(made, tuple | list) else (made,)), show=False)


def _reader(stack: Sequence[Frame]) -> Frame | None:
    """The reader's line among a stack's: the innermost not the tool's own, nor a library's.

    A library's line (a file under ``site-packages``) counts only when every line is one.
    """
    mine = [f for f in stack if not f.file.replace("\\", "/").endswith(_OWN_FILES)]
    theirs = [f for f in mine if "site-packages" not in f.file]
    chosen = theirs or mine
    return chosen[0] if chosen else None


def _from(stack: Sequence[Frame], line: Frame | None) -> tuple[Frame, ...]:
    """The stack from ``line`` outwards."""
    frames = list(stack)
    return (
        tuple(frames[frames.index(line) :])
        if line is not None and line in frames
        else tuple(frames)
    )


def _code(line: Frame | None) -> str:
    return linecache.getline(line.file, line.line).strip() if line else ""


def _short(op_name: str) -> str:
    """``"jit(f)/shard_map/dot_general"`` -> ``"dot_general"``."""
    return op_name.rsplit("/", 1)[-1] or op_name


def _because(
    used: list[compiled.Operation],
    consumers: list[compiled.Operation],
    producers: list[compiled.Operation],
    line: Frame | None,
    arguments: dict[str, str],
) -> str:
    """Why XLA inserted a collective: what uses what it moves, and what that is."""
    if used:
        user = used[0]
        where = "this line" if _reader(user.stack) == line else str(_reader(user.stack))
        need = f"{_short(user.op_name) or user.opcode} at {where} uses it"
    elif any(o.root for o in consumers):
        need = "the program's output is laid out so"
    else:
        need = "what uses it has no line"
    moves = []
    for producer in producers:
        if producer.opcode == "parameter" and producer.op_name:
            sharding = arguments.get(producer.op_name)
            moves.append(f"argument {producer.op_name}" + (f" ({sharding})" if sharding else ""))
        elif _reader(producer.stack):
            frame = _reader(producer.stack)
            where = "this line" if frame == line else str(frame)
            moves.append(f"the result of {_short(producer.op_name) or producer.opcode} at {where}")
    return need + (f"; it moves {', '.join(dict.fromkeys(moves))}" if moves else "")


def _operand_type(
    collective: compiled.Collective, operations: dict[str, compiled.Operation]
) -> str:
    operation = operations.get(collective.name)
    if operation is None:
        return ""
    types = [operations[o].result for o in operation.operands if o in operations]
    return _compact(", ".join(types))


def _compact(types: str) -> str:
    """``"f32[2], f32[2], f32[2]"`` -> ``"3 x f32[2]"`` (a tuple of one type, as XLA splits blocks)."""
    parts = [t.strip() for t in types.strip("()").split(", ")]
    if len(parts) > 1 and len(set(parts)) == 1:
        return f"{len(parts)} x {parts[0]}"
    return types


def _before(collective: compiled.Collective, operand: str, size: int) -> str:
    dimension = _DIMENSIONS.search(collective.attributes)
    what = operand or "its operand"
    if size == 1:
        return f"{what} on one device"
    if collective.kind == "all-gather" and dimension:
        return f"{what}, dim {dimension[1]} split {size} ways"
    if collective.kind in ("all-reduce", "reduce-scatter"):
        return f"{what}, a partial result on each of {size} devices"
    if collective.kind == "all-to-all" and dimension:
        return f"{what}, split {size} ways along one dim"
    if collective.kind == "collective-permute":
        return f"{what} on each device"
    return what


def _after(collective: compiled.Collective, size: int) -> str:
    dimension = _DIMENSIONS.search(collective.attributes)
    if size == 1:
        return f"{_compact(collective.result)}, the same: nothing moves"
    if collective.kind == "all-gather" and dimension:
        return f"{_compact(collective.result)}, dim {dimension[1]} whole"
    if collective.kind == "all-reduce":
        return f"{_compact(collective.result)}, the total, on each of {size} devices"
    if collective.kind == "reduce-scatter" and dimension:
        return f"{_compact(collective.result)}, the total, dim {dimension[1]} split {size} ways"
    if collective.kind == "all-to-all" and dimension:
        return f"{_compact(collective.result)}, split along dim {dimension[1]} instead"
    if collective.kind == "all-to-all":
        return f"{_compact(collective.result)}: block i to device i"
    if collective.kind == "collective-permute":
        return f"{_compact(collective.result)} on the device it is sent to"
    return _compact(collective.result)


def _over(collective: compiled.Collective, devices: int) -> str:
    """The devices a collective spans, e.g. ``"8 devices (x)"`` or ``"7 pairs"``."""
    if collective.kind == "collective-permute":
        pairs = len(re.findall(r"\{\d+,\d+\}", collective.groups))
        return f"{pairs} pair{'' if pairs == 1 else 's'}"
    size = collective.group_size or devices
    named = _NAMED_AXES.match(collective.groups.strip())
    axes = re.findall(r"'([^']*)'", named["axes"]) if named else []
    label = "" if not axes or all(re.fullmatch(r"axis_\d+", a) for a in axes) else ", ".join(axes)
    groups = devices // size if size else 1
    text = f"{size} device{'' if size == 1 else 's'}" + (f" ({label})" if label else "")
    return text + (f" x {groups} groups" if groups > 1 else "")


def _axes_named(over: str, meshes: list[dict[str, int]]) -> str:
    """``"8 devices"`` -> ``"8 devices (x)"`` when one axis of the call's meshes has that size.

    Newer XLA names the axes a collective spans, older XLA and some collectives
    do not; the call's own meshes (its arguments' and outputs') name them when
    only one axis, or one set of axes of a mesh, has the group's size.
    """
    match = re.fullmatch(r"(\d+) devices(?P<rest> x \d+ groups)?", over)
    if match is None:
        return over
    size = int(match[1])
    fits = {
        axes
        for mesh in meshes
        for count in range(1, len(mesh) + 1)
        for axes in itertools.combinations(mesh, count)
        if math.prod(mesh[a] for a in axes) == size and size > 1
    }
    if len(fits) != 1:
        return over
    return f"{size} devices ({', '.join(fits.pop())}){match['rest'] or ''}"


def _place(c: Communication) -> str:
    """``file.py:7`` (the file's name only; ``cell:7`` for a notebook's cell)."""
    if c.line is None:
        return "?"
    name = Path(c.line.file).name
    if "ipykernel_" in c.line.file or c.line.file.startswith("<ipython-input"):
        name = "cell"
    return f"{name}:{c.line.line}"


def _origin(c: Communication) -> str:
    if c.asked:
        how = "jax.grad's transpose of the collective" if "transpose(" in c.op_name else "asked"
        where = f" in {c.line.function}" if c.line and c.line.function else ""
        return f"{how}{where}: {c.before} -> {c.after}"
    return f"inserted by XLA: {c.because}: {c.before} -> {c.after}"


def _bytes(count: float) -> str:
    return f"{count:,.0f}" if count == int(count) else f"{count:,.1f}"


def _memory(memory: dict[str, int]) -> str:
    if not memory:
        return "not reported by this backend"
    return (
        f"arguments {_bytes(memory.get('argument', 0))} B, outputs {_bytes(memory.get('output', 0))} B, "
        f"temporaries {_bytes(memory.get('temp', 0))} B (peak {_bytes(memory.get('peak', 0))} B)"
    )


def _argument_names(
    f: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> list[tuple[str, Any]]:
    """Each argument leaf with a name: the parameter's, and its place in a pytree."""
    try:
        bound = inspect.signature(f).bind(*args, **kwargs)
        items = list(bound.arguments.items())
    except (TypeError, ValueError):  # no signature, or one these arguments do not fit
        items = [*((f"args[{i}]", a) for i, a in enumerate(args)), *kwargs.items()]
    return [leaf for name, value in items for leaf in _leaves(name, value)]


def _leaves(name: str, value: Any) -> list[tuple[str, Any]]:
    flat, _ = jax.tree_util.tree_flatten_with_path(value)
    return [(name + jax.tree_util.keystr(path), leaf) for path, leaf in flat]


def _placements(leaves: list[tuple[str, Any]]) -> Iterator[Placement]:
    for name, leaf in leaves:
        if not hasattr(leaf, "dtype"):  # a Python number, or other host data
            yield Placement(name, type(leaf).__name__, "", f"Python {type(leaf).__name__}")
            continue
        shape = tuple(np.shape(leaf))
        whole = _type(leaf.dtype, shape)
        if isinstance(leaf, jax.Array):
            sharding = leaf.sharding
            block = _type(leaf.dtype, tuple(sharding.shard_shape(shape)))
            yield Placement(name, whole, block, _sharding(sharding))
        else:
            yield Placement(name, whole, whole, "host (NumPy): sent to the devices by the call")


def _type(dtype: Any, shape: tuple[int, ...]) -> str:
    """``f32[16,32]``: the dtype as XLA names it, and the shape."""
    dtype = np.dtype(dtype)
    short = {"f": "f", "i": "s", "u": "u", "c": "c", "b": "pred"}.get(dtype.kind, dtype.name)
    name = (
        "bf16"
        if dtype.name == "bfloat16"
        else "pred"
        if short == "pred"
        else f"{short}{dtype.itemsize * 8}"
    )
    return f"{name}[{','.join(map(str, shape))}]"


def _sharding(sharding: Any) -> str:
    spec = getattr(sharding, "spec", None)
    mesh = getattr(sharding, "mesh", None)
    if spec is not None and mesh is not None:
        entries = ", ".join(repr(s) for s in spec)
        shape = " ".join(f"{axis}={size}" for axis, size in dict(mesh.shape).items())
        return f"P({entries}) over {shape}"
    devices = len(getattr(sharding, "device_set", ()))
    if devices == 1:
        return "one device"
    return f"{type(sharding).__name__} over {devices} devices"


def _in_notebook() -> bool:
    shell = sys.modules.get("IPython")
    get = getattr(shell, "get_ipython", None)
    return bool(get and get() is not None and "IPKernelApp" in getattr(get(), "config", {}))


def _terminal_width() -> int:
    """The terminal's width in columns (100 when the output is not a terminal)."""
    return shutil.get_terminal_size((100, 24)).columns
