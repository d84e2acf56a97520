"""The process that runs a solution, for :mod:`shard_tutorial.checking.checker`: it never judges.

One worker runs on one device count, which it fixes before anything else touches JAX.
Its parent sets its limits (memory, its own session) and then writes the request, a
pickle, on its standard input: the solution, the device count, the cases' arguments
and the pipe to report on. The worker loads the solution, calls it on each case and
sends back what it returned as plain data. The verdict is given by the parent, which
holds the problem's oracle: code in the solution's file cannot change it.

Each report is a frame on the pipe: one line of JSON, then as many raw bytes as its
``"nbytes"`` says (an output's values), so that what the solution prints (to a file
of its own) cannot be mistaken for a report:

- ``{"event": "loading"}`` before the solution's file runs; then ``{"event": "ready",
  "origin": ..., "x64": ...}`` once it is loaded, or ``{"event": "load_error", ...}``;
- ``{"event": "start", "case": i}`` before each case, so the parent knows which one a
  hang or a crash happened in;
- ``{"event": "output", "case": i, "output": {...}, "how": {...}, "nbytes": n}``
  with what the solution returned (see :func:`describe_output`) and how it was
  made, read from the very call that returned it (see :func:`answer`), or
  ``{"event": "raised", "case": i, "message": ..., "memory": bool, "types": [...]}``
  (see :func:`~shard_tutorial.checking.protocol.encode_answer` and
  :func:`~shard_tutorial.checking.protocol.encode_raised`);
- ``{"event": "done"}`` at the end.

Before the first case, the arguments are laid out as the problem's contract says they
arrive (:attr:`~shard_tutorial.problem.Problem.arrange`, named in the request as
``"module:function"`` and imported once JAX has its devices).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import pickle
import re
import runpy
import sys
import sysconfig
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from shard_tutorial.checking.protocol import (
    Answer,
    Candidate,
    Held,
    How,
    Line,
    MadeBy,
    Output,
    Program,
    Raised,
    Shard,
    Transfer,
    encode_answer,
    encode_raised,
)

MESSAGE_LIMIT = 4000  # characters of an error message kept in a report
FRAME_LIMIT = 12  # frames of the solution's own code kept in a report
# JAX's note that it hid its own frames: true here too, and not what a reader needs.
JAX_FILTER_NOTE = re.compile(
    r"-{20}\nFor simplicity, JAX has removed its internal frames.*", re.DOTALL
)
# How running out of memory shows in an exception's text (XLA's allocator, C++).
MEMORY_SIGNS = ("RESOURCE_EXHAUSTED", "Out of memory", "bad_alloc", "Cannot allocate memory")
# How JAX says a mesh does not divide an axis, across versions: (length, devices).
_NOT_DIVISIBLE = (
    re.compile(
        r"partitioned (?P<devices>\d+) times, but does not evenly divide the dimension size (?P<length>\d+)"
    ),
    re.compile(
        r"\(of size (?P<length>\d+)\) to mesh axis '[^']*' \(of size (?P<devices>\d+)\), but"
    ),
    re.compile(r"should be divisible by (?P<devices>\d+), but it is equal to (?P<length>\d+)"),
)


@functools.cache
def library_dirs() -> tuple[Path, ...]:
    """Folders of code that is not the reader's: the stdlib, installed packages, this one."""
    paths = sysconfig.get_paths()
    dirs = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    dirs.add(str(Path(__file__).parents[1]))  # shard_tutorial, not only its checking package
    return tuple(Path(d).resolve() for d in dirs)


def is_library_file(filename: str) -> bool:
    """Whether ``filename`` is library code (see :func:`library_dirs`), not the reader's."""
    path = Path(filename).resolve()
    return any(path.is_relative_to(directory) for directory in library_dirs())


def describe_exception(error: BaseException) -> str:
    """The error's type and message, a hint where one helps, then the reader's own frames.

    Args:
      error: what the solution raised.

    Returns:
      Text for a report: JAX's and the library's frames left out, repeated frames
      (endless recursion) collapsed.

    Examples:
      >>> from shard_tutorial.checking.worker import describe_exception
      >>> print(describe_exception(SystemExit(3)))
      SystemExit: 3
      (The solution called sys.exit(): a solution returns its answer instead.)
    """
    frames = [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if not frame.filename.startswith("<frozen") and not is_library_file(frame.filename)
    ]
    if isinstance(error, SystemExit | KeyboardInterrupt):
        message = f"{type(error).__name__}: {safe_str(error)}".rstrip(": ")
    else:
        message = "".join(traceback.format_exception_only(type(error), error)).strip()
    message = JAX_FILTER_NOTE.sub("", message).strip()
    if len(message) > MESSAGE_LIMIT:
        message = message[:MESSAGE_LIMIT] + " [...]"
    hint = _hint(error, message)
    if hint:
        message += f"\n({hint})"
    if not frames:
        return message
    summary = traceback.StackSummary.from_list(frames[-FRAME_LIMIT:])
    return message + "\nin your code:\n" + "".join(summary.format()).rstrip()


def _hint(error: BaseException, message: str) -> str | None:
    """One sentence on what an error usually means, for the errors readers meet most."""
    if isinstance(error, SystemExit):
        return "The solution called sys.exit(): a solution returns its answer instead."
    if isinstance(error, KeyboardInterrupt):
        return "The solution raised KeyboardInterrupt itself; nobody pressed Ctrl-C."
    if isinstance(error, RecursionError):
        return "Endless recursion: does the function call itself with the same input?"
    if isinstance(error, NameError) and not isinstance(error, UnboundLocalError):
        return "Is an import missing at the top of your file?"
    if isinstance(error, UnicodeDecodeError) or "codec can't decode" in message:
        return (
            "The file is not UTF-8 text: save it as UTF-8, or declare its encoding on its "
            "first line, e.g. # -*- coding: latin-1 -*-"
        )
    if "non-addressable" in message:
        return (
            "On a cluster each process holds only its own devices' blocks of a sharded "
            "array: np.asarray, jax.device_get or .tolist() of it fail there. Return the "
            "jax.Array as JAX computed it."
        )
    if "use_cpu_devices" in message or "jax_num_cpu_devices" in message:
        return "The checker sets the device count itself: leave it out of the code you check."
    for pattern in _NOT_DIVISIBLE:
        found = pattern.search(message)
        if found:
            length, devices = found["length"], found["devices"]
            return (
                f"A mesh of {devices} devices does not divide the length {length} into equal "
                "blocks: use as many devices as divide it (shard_tutorial.data_mesh(n) "
                "builds that mesh)."
            )
    return None


def is_memory_error(error: BaseException) -> bool:
    """Whether ``error`` says the process ran out of memory (its limit, set by the parent)."""
    return isinstance(error, MemoryError) or any(sign in safe_str(error) for sign in MEMORY_SIGNS)


def safe_str(value: object) -> str:
    """``str(value)``, or a stand-in where its ``__str__`` raises (the solution's own class).

    Examples:
      >>> from shard_tutorial.checking.worker import safe_str
      >>> class Broken(Exception):
      ...     def __str__(self):
      ...         raise RuntimeError
      >>> safe_str(Broken())
      '<Broken whose str() raised RuntimeError>'
    """
    try:
        return str(value)
    except BaseException as error:  # noqa: BLE001 (any class of the solution's)
        return f"<{type(value).__name__} whose str() raised {type(error).__name__}>"


def load_solution(spec: dict[str, Any]) -> Callable[..., Any]:
    """The solution function: from a file (run as a module) or from a pickled function."""
    if spec["kind"] == "file":
        namespace = runpy.run_path(spec["path"], run_name="solution")
        name = spec["function"]
        if name not in namespace:
            msg = f"the file defines no function named {name!r}"
            if not any(not key.startswith("__") for key in namespace):
                msg += " (it defines nothing: is it empty?)"
            raise LookupError(msg)
        function = namespace[name]
    else:
        import cloudpickle  # noqa: PLC0415 (only needed for functions passed from Python)

        function = cloudpickle.loads(spec["pickle"])
        name = getattr(function, "__name__", "the solution")
    if isinstance(function, type):
        msg = f"{name} is a class, not a function: define it with def {name}(...):"
        raise TypeError(msg)
    if not callable(function):
        shown = repr(function)
        shown = shown if len(shown) < 60 else shown[:57] + "..."
        msg = f"{name} is a {type(function).__name__} ({shown}), not a function"
        raise TypeError(msg)
    return function


MAX_ITEMS = 16  # items of a returned tuple or list described one by one


def describe_output(value: object, shards: bool = False) -> tuple[Output, bytes]:
    """What the solution returned, described as plain data, and its values' bytes.

    The description, an :class:`~shard_tutorial.checking.protocol.Output`, says what
    ``value`` is (``kind``: ``"jax.Array"``, ``"numpy"``, a Python type's name), and for
    arrays their ``dtype``, ``shape`` and, for a ``jax.Array``, its layout: ``split``
    (for each axis, how many blocks the devices hold) and ``devices`` (how many hold a
    part). ``replicas_differ`` is True when two devices hold different values for the
    same block (an output that ``out_specs`` calls replicated but that the devices
    computed differently, which ``check_vma=False`` lets through).

    A tuple or a list (of at most :data:`MAX_ITEMS` items) has ``items``: each
    item's description, with its ``nbytes``; their bytes follow one another.

    With ``shards`` (a process of a cluster, which may not see a ``jax.Array``
    whole), the values of a ``jax.Array`` are those of the shards this process
    holds, each once: ``shards`` lists each one's ``index`` (``(start, stop)``
    per axis) and ``nbytes``, in the order of the bytes, and ``device_ids`` says
    which devices, of every process, the array lives on. Nothing is fetched from
    another process (no collective), so this never waits for one.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial.checking.worker import describe_output
      >>> output, values = describe_output(jnp.arange(3.0))
      >>> output.kind, output.dtype, output.shape, output.split, output.devices
      ('jax.Array', 'float32', (3,), (1,), 1)
      >>> len(values)
      12
      >>> [(item.kind, item.repr, item.nbytes) for item in describe_output([1, 2])[0].items]
      [('int', '1', 0), ('int', '2', 0)]
      >>> output, values = describe_output((jnp.ones(2), jnp.zeros(())))
      >>> [item.shape for item in output.items], len(values)
      ([(2,), ()], 12)
      >>> output, values = describe_output(jnp.arange(3.0), shards=True)
      >>> output.shards, output.device_ids, len(values)
      ((Shard(index=((0, 3),), nbytes=12),), (0,), 12)
    """
    if isinstance(value, list | tuple) and len(value) <= MAX_ITEMS:
        items, chunks = [], []
        for item in value:
            described, data = _describe_one(item, shards)
            items.append(dataclasses.replace(described, nbytes=len(data)))
            chunks.append(data)
        output = Output(type(value).__name__, length=len(value), items=tuple(items))
        return output, b"".join(chunks)
    return _describe_one(value, shards)


def _describe_one(value: object, shards: bool) -> tuple[Output, bytes]:
    """:func:`describe_output` of a value that is not described item by item."""
    import jax  # noqa: PLC0415
    import numpy as np  # noqa: PLC0415

    if isinstance(value, jax.Array):
        shape = tuple(value.shape)
        blocks = value.sharding.shard_shape(shape)
        split = tuple(n // b if b else 1 for n, b in zip(shape, blocks, strict=True))
        devices = len(value.sharding.device_set)
        output = Output("jax.Array", str(value.dtype), shape, split, devices)
        if shards:
            return _describe_shards(value, output)
        if _replicas_differ(value):
            output = dataclasses.replace(output, replicas_differ=True)
        array = np.asarray(value)
    elif isinstance(value, np.ndarray | np.generic) and value.dtype != object:
        array = np.asarray(value)
        output = Output("numpy", str(array.dtype), tuple(array.shape))
    else:
        kind = type(value).__name__
        if isinstance(value, list | tuple):
            return Output(kind, length=len(value)), b""
        if isinstance(value, int | float | complex | str | bool):
            text = repr(value)
            return Output(kind, repr=text if len(text) <= 40 else text[:37] + "..."), b""
        return Output(kind), b""
    if array.dtype.kind in "OSUMm":  # objects, text, dates: not numbers
        return dataclasses.replace(output, kind=f"array of {array.dtype}"), b""
    return output, np.ascontiguousarray(array).tobytes()


def _block_index(shard: Any, shape: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """Where a shard's block lies in its array: ``(start, stop)`` per axis."""
    return tuple(tuple(part.indices(n)[:2]) for part, n in zip(shard.index, shape, strict=True))


def _replicas_differ(value: Any) -> bool:
    """Whether two of the shards this process holds are copies of one block with other values."""
    import numpy as np  # noqa: PLC0415

    if len(value.sharding.device_set) <= 1:
        return False
    seen: dict[tuple[tuple[int, int], ...], bytes] = {}
    for shard in value.addressable_shards:
        index = _block_index(shard, tuple(value.shape))
        data = np.ascontiguousarray(np.asarray(shard.data)).tobytes()
        if seen.setdefault(index, data) != data:
            return True
    return False


def _describe_shards(value: Any, output: Output) -> tuple[Output, bytes]:
    """``output`` completed with the shards this process holds, and their bytes."""
    import numpy as np  # noqa: PLC0415

    device_ids = tuple(sorted(device.id for device in value.sharding.device_set))
    seen: dict[tuple[tuple[int, int], ...], bytes] = {}
    differ = False
    described, chunks = [], []
    for shard in value.addressable_shards:
        index = _block_index(shard, tuple(value.shape))
        data = np.ascontiguousarray(np.asarray(shard.data)).tobytes()
        if index in seen:  # a replica of a block already sent
            differ = differ or seen[index] != data
            continue
        seen[index] = data
        described.append(Shard(index, len(data)))
        chunks.append(data)
    output = dataclasses.replace(
        output, replicas_differ=differ, shards=tuple(described), device_ids=device_ids
    )
    return output, b"".join(chunks)


def _class_names(error: BaseException) -> tuple[str, ...]:
    """The names of ``error``'s class and of the classes it derives from, nearest first."""
    names = []
    for klass in type(error).__mro__:
        name = type.__dict__["__name__"].__get__(klass)  # not a property the class redefines
        names.append(name if isinstance(name, str) else "?")
    return tuple(names)


def answer(
    solution: Callable[..., Any],
    args: tuple[Any, ...],
    *,
    shards: bool = False,
    record: Callable[[], Any] | None = None,
    intact: Callable[[], bool] | None = None,
    helpers: tuple[Callable[..., Any], ...] | None = None,
) -> tuple[dict[str, Any], bytes]:
    """:func:`answer_of`, as the worker reports it: the event (JSON-ready) and its bytes.

    Returns:
      An :class:`~shard_tutorial.checking.protocol.Answer` as
      :func:`~shard_tutorial.checking.protocol.encode_answer` sends it (the output's
      description and, under ``"how"``, how it was made), or a
      :class:`~shard_tutorial.checking.protocol.Raised` as
      :func:`~shard_tutorial.checking.protocol.encode_raised` sends it, with no bytes.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial.checking.protocol import decode_answer
      >>> from shard_tutorial.checking.worker import answer
      >>> event, payload = answer(lambda x: x * 2, (jnp.arange(3.0),))
      >>> event["event"], event["output"]["shape"], event["how"]["programs"][0]["devices"]
      ('output', [3], 1)
      >>> [p.devices for p in decode_answer(event, payload).how.programs]
      [1]
      >>> print(answer(lambda x: 1 / 0, (jnp.ones(1),))[0]["message"].splitlines()[0])
      ZeroDivisionError: division by zero
    """
    made = answer_of(solution, args, shards=shards, record=record, intact=intact, helpers=helpers)
    return encode_answer(made) if isinstance(made, Answer) else (encode_raised(made), b"")


def answer_of(
    solution: Callable[..., Any],
    args: tuple[Any, ...],
    *,
    shards: bool = False,
    record: Callable[[], Any] | None = None,
    intact: Callable[[], bool] | None = None,
    helpers: tuple[Callable[..., Any], ...] | None = None,
    stays: Sequence[int] = (),
) -> Answer | Raised:
    """Call ``solution(*args)`` once and describe what it returned and how it was made.

    The call is recorded (:func:`shard_tutorial.checking.recording.record`): the values and
    the programs that made them come from this one call, so code that behaves one
    way for the values and another for an inspection cannot tell them apart.

    Args:
      solution: the function to call.
      args: its arguments, laid out as the problem's contract says they arrive.
      shards: describe a ``jax.Array`` by the shards this process holds (a
        process of a cluster).
      record: :func:`shard_tutorial.checking.recording.record`, as the worker bound it
        before the solution's file ran (so the file cannot swap it); None: that
        function.
      intact: says whether the recorder's hooks in JAX are still in place, bound
        as ``record`` is; None: not asked beyond what the recording says.
      helpers: :func:`describe_output`, :func:`describe_lineage` and
        :func:`describe_exception`, bound as ``record`` is; None: this module's.
      stays: the positions of the arguments whose data must stay on its devices
        (:class:`shard_tutorial.problem.Stays`): the recording follows it.

    Returns:
      An :class:`~shard_tutorial.checking.protocol.Answer`: the output's description
      and values, and :class:`~shard_tutorial.checking.protocol.How` it was made (see
      :func:`describe_lineage`); or, if the call raised, a
      :class:`~shard_tutorial.checking.protocol.Raised` (its ``message``, whether it
      ran out of ``memory``, and its class' ``types``).

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial.checking.worker import answer_of
      >>> made = answer_of(lambda x: x * 2, (jnp.arange(3.0),))
      >>> made.output.shape, [p.devices for p in made.how.programs], made.how.intact
      ((3,), [1], True)
      >>> answer_of(lambda x: 1 / 0, (jnp.ones(1),)).types[:2]
      ('ZeroDivisionError', 'ArithmeticError')
    """
    import jax  # noqa: PLC0415

    describe, lineage, explain = helpers or (describe_output, describe_lineage, describe_exception)
    if record is None:
        from shard_tutorial.checking.recording import record as recorder  # noqa: PLC0415 (after JAX)
    else:
        recorder = record
    # The arrays that exist before the call (the arguments, the file's own constants): an
    # answer may be made from them. Held until the lineage is read, so no id is reused.
    earlier = jax.live_arrays()
    with recorder() as recording:
        # What the call keeps between programs is counted in one process only: a cluster's
        # transfers from the host keep copies of their own (measured: 139,296 bytes kept
        # for fsdp_sgd_step's B=256 case, two whole copies of x, where one process keeps none).
        recording.existed = frozenset(id(array) for array in earlier)
        recording.earlier = None if shards else recording.existed
        if stays:
            recording.keep_in_place([args[i] for i in stays if i < len(args)])
        began = time.perf_counter()
        try:
            received = jax.block_until_ready(solution(*args))
        except BaseException as error:  # noqa: BLE001 (the solution's code may raise anything)
            return Raised(explain(error), is_memory_error(error), _class_names(error))
        seconds = time.perf_counter() - began
    try:
        output, payload = describe(received, shards=shards)
    except BaseException as error:  # noqa: BLE001 (an object whose methods raise)
        output, payload = Output(type(received).__name__, problem=safe_str(error)), b""
    try:
        how, extra = lineage(recording, received, args, shards=shards, earlier=earlier)
    except BaseException as error:  # noqa: BLE001
        # Its first line; an error whose text is empty still says that it was one.
        first = next(iter(explain(error).splitlines()), "") or type(error).__name__
        how, extra = How(error=first), b""
    if intact is not None and not intact():
        how = dataclasses.replace(how, intact=False)
    return Answer(output, payload, how, extra, round(seconds, 3))


LINES = 8  # the reader's lines a program's operations came from, sent for the verdicts
CANDIDATES = 8  # arrays shaped like an output sent per output, to find where the answer was made
CANDIDATE_BYTES = 8 * 2**20  # at most this many bytes each
# Past those, a digest of each array's values (digest.fingerprint): no flood of arrays
# shaped like the output, before or after it, hides the one the answer is a copy of.
FINGERPRINTS = 512
TEXT_LIMIT = 200_000  # characters of a program's communication lines sent


def _line_of(event: Any) -> Line | None:
    """The reader's line a recorded copy or program came from, ``(file, line)``, or None."""
    where = getattr(event, "where", None)  # a copy's
    lines = getattr(event, "lines", ())  # a program's, the first of them
    found = where or (lines[0] if lines else None)
    return (found[0], found[1]) if found else None


def describe_lineage(
    recording: Any,
    received: object,
    args: tuple[Any, ...],
    *,
    shards: bool = False,
    earlier: Sequence[Any] = (),
) -> tuple[How, bytes]:
    """How ``received`` was made, for the judge, and the candidates' bytes.

    Returns:
      A :class:`~shard_tutorial.checking.protocol.How`: how many arrays the output
      depends on were made during the call where the recording could not see
      (``earlier``: the arrays that existed before it, which count as arguments) and
      the reader's line that first used one, the programs it depends on (each a
      :class:`~shard_tutorial.checking.protocol.Program`: its ``order``, ``devices``,
      whether it ran ``shard_map``, the Python ``files`` its operations came from and
      the lines of its compiled text that say what it sends and how often, see
      :func:`~shard_tutorial.compiled.communication_lines`), the copies to the devices
      it depends on, what made each output array, and arrays of the lineage shaped
      like an output (host data, other programs' results) whose values the judge
      compares with the answer, to find where it was first computed; and the values
      of the first few of those, as float64, one after another.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial.checking.recording import record
      >>> from shard_tutorial.checking.worker import describe_lineage
      >>> x = jnp.arange(4.0)
      >>> with record() as recording:
      ...     y = jnp.sin(x)
      >>> how, values = describe_lineage(recording, y, (x,), earlier=[x])
      >>> [p.primitives for p in how.programs], how.made_by[0].kind, how.unknown
      ([('sin',)], 'program', 0)
    """
    import jax  # noqa: PLC0415
    import numpy as np  # noqa: PLC0415

    from shard_tutorial.checking.digest import fingerprint  # noqa: PLC0415
    from shard_tutorial.checking.recording import Copy  # noqa: PLC0415
    from shard_tutorial.compiled import communication_lines  # noqa: PLC0415

    lineage = recording.lineage(received, args, earlier=earlier)
    programs = tuple(
        Program(
            order=run.order,
            devices=run.devices,
            shard_map="shard_map" in run.primitives,
            primitives=tuple(sorted(run.primitives)),
            # Empty (nothing reaches the answer) is not None (the program not read).
            live=tuple(sorted(run.primitives if run.live is None else run.live)),
            files=tuple(sorted(run.files)),
            lines=tuple((file, line) for file, line in run.lines[:LINES]),
            memory=dict(run.memory),
            held_before=run.held_before,
            text=communication_lines(run.text)[:TEXT_LIMIT],
            carries=tuple(sorted(run.carries)),
        )
        for run in lineage.runs
    )
    copies = tuple(
        Transfer(c.order, any(h is not None for h in c.host), _line_of(c), c.received, c.carries)
        for c in lineage.copies
    )
    made_by = tuple(
        None if m is None else MadeBy(m.order, "copy" if isinstance(m, Copy) else "program")
        for m in lineage.made_by
    )
    leaves = [leaf for leaf in jax.tree.leaves(received) if isinstance(leaf, jax.Array)]
    candidates: list[Candidate] = []
    chunks: list[bytes] = []
    for item, leaf in enumerate(leaves):
        shape = tuple(leaf.shape)
        found = 0
        for event in lineage.events():
            if found >= CANDIDATES + FINGERPRINTS:
                break
            values: list[tuple[Literal["host", "program"], int, Any]] = []
            host = event.host
            values += [("host", 0, h) for h in host if h is not None and np.shape(h) == shape]
            if not isinstance(event, Copy):
                values += [
                    ("program", event.devices, o)
                    for o in event.outputs
                    if o is not leaf and isinstance(o, jax.Array) and tuple(o.shape) == shape
                ]
            for made, devices, value in values:
                if found >= CANDIDATES + FINGERPRINTS:
                    break
                if shards and isinstance(value, jax.Array) and not value.is_fully_addressable:
                    continue  # a cluster's array, partly on other processes: not read here
                if isinstance(value, jax.Array) and value.is_deleted():
                    continue  # donated to a later program (donate_argnums): its values are gone
                array = np.asarray(value)
                if array.dtype.kind not in "biufc" and array.dtype.name != "bfloat16":
                    continue
                data = np.ascontiguousarray(array.astype(np.float64)).tobytes()
                if len(data) > CANDIDATE_BYTES:
                    continue
                # Made from the call's arguments? (Initial parameters made from a seed
                # are not: that a step which does not move returns them is no shortcut.)
                from_arguments = made == "host" or recording.lineage(value, args).arguments > 0
                # Past the first few, its digest only: the judge can tell an exact copy
                # of the answer.
                digest = None if found < CANDIDATES else fingerprint(array)
                if digest is None:
                    chunks.append(data)
                candidates.append(
                    Candidate(
                        item=item, order=event.order, made=made, devices=devices,
                        shape=shape, nbytes=0 if digest is not None else len(data),
                        from_arguments=from_arguments,
                        # The reader's line that made it (a copy, or a program), for the verdict.
                        line=_line_of(event), fingerprint=digest,
                    )
                )  # fmt: skip
                found += 1
    how = How(
        intact=recording.intact,
        programs=programs,
        copies=copies,
        unknown=lineage.unknown,
        # The reader's line of the first program (or copy) that took in such an array.
        unknown_line=next((line for line in map(_line_of, lineage.unknown_users) if line), None),
        made_by=made_by,
        candidates=tuple(candidates),
        traced=tuple(sorted(set().union(*(run.primitives for run in recording.runs)))),
    )
    return how, b"".join(chunks)


def held_on(
    run_case: Callable[..., Answer | Raised],
    solution: Callable[..., Any],
    args: tuple[Any, ...],
    cluster: object = None,
) -> tuple[Held, ...]:
    """What one device held in each program of ``solution(*args)``'s answer: for a budget's growth.

    Args:
      run_case: :func:`answer_of`, as the worker bound it.
      solution: the function to call.
      args: its arguments (the budget's larger copy of a case), laid out as a case's.
      cluster: the cluster the worker is a process of, or None.

    Returns:
      One :class:`~shard_tutorial.checking.protocol.Held` per program the answer
      depends on (see :func:`describe_lineage`); empty if the call raised.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial.checking.worker import answer_of, held_on
      >>> [sorted(held.memory) for held in held_on(answer_of, jnp.sin, (jnp.ones(4),))]
      [['alias', 'argument', 'output', 'peak', 'temp']]
    """
    made = run_case(solution, args, shards=cluster is not None)
    if not isinstance(made, Answer) or made.how is None:
        return ()
    return tuple(program.held() for program in made.how.programs)


def _resolve(name: str) -> Any:
    """The function ``"module:qualname"`` names, imported now (after JAX has its devices)."""
    import importlib  # noqa: PLC0415

    module, _, qualname = name.partition(":")
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


def _join_cluster(cluster: dict[str, Any]) -> None:
    """Join the cluster the checker started this process in (JAX's runtime, gloo)."""
    from shard_tutorial.devices import join_cpu_cluster  # noqa: PLC0415
    from shard_tutorial.processes import die_with  # noqa: PLC0415

    die_with(cluster["parent"])
    join_cpu_cluster(cluster["coordinator"], cluster["processes"], cluster["process"])


def main() -> int:
    """Run the request on standard input; report on its pipe."""
    request = pickle.loads(sys.stdin.buffer.read())  # written by our parent
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # the solution reads nothing from the checker
    os.close(null)
    channel: int = request["fd"]
    os.set_inheritable(channel, False)  # programs the solution starts do not get it
    me = os.getpid()
    write, getpid, dumps, exit_now = os.write, os.getpid, json.dumps, os._exit

    def emit(payload: bytes = b"", **event: Any) -> None:
        if getpid() != me:  # a fork of the solution's: it never reports
            exit_now(0)
        if payload:
            event["nbytes"] = len(payload)
        data = memoryview(dumps(event).encode() + b"\n" + payload)
        while data:
            data = data[write(channel, data) :]

    if request.get("parent"):  # killed with the checker, even if it is killed with SIGKILL
        from shard_tutorial.processes import die_with  # noqa: PLC0415

        die_with(int(request["parent"]))
    from shard_tutorial.devices import use_cpu_devices  # noqa: PLC0415 (before JAX starts)

    use_cpu_devices(request["devices"])
    cluster = request.get("cluster")
    if cluster is not None:
        _join_cluster(cluster)
    import jax  # noqa: PLC0415
    import jax.numpy as jnp  # noqa: PLC0415
    import numpy as np  # noqa: PLC0415

    jax.devices()  # start the backend now, so the solution cannot change the device count
    cases = [
        tuple(jnp.asarray(a) if isinstance(a, np.ndarray) else a for a in args)
        for args in request["cases"]
    ]
    # The last cases are inputs the statement refuses: passed as they arrive, with no
    # layout and no budget (either may not make sense of them).
    ordinary = len(cases) - int(request.get("refusals", 0))
    # Where a budget limits how what a device holds grows, a larger copy of a case
    # (Budget.grown) the answer is called on again, made from the case as it came.
    grow = _resolve(request["grown"]) if request.get("grown") else None
    larger = [grow(args) if grow is not None else None for args in cases[:ordinary]]
    arrange = _resolve(request["arrange"]) if request.get("arrange") else None
    if arrange is not None:  # the problem lays its inputs out, e.g. a weight split
        cases[:ordinary] = [arrange(args) for args in cases[:ordinary]]
    # A problem's budgets for each case, worked out before the solution's file runs (they
    # may compile programs of the package's, e.g. another strategy's step to compare with).
    limits: list[dict[str, float]] = [{} for _ in cases]
    if request.get("limits"):
        budget = _resolve(request["limits"])
        limits[:ordinary] = [dict(budget(args)) for args in cases[:ordinary]]
    grown: list[tuple[Any, ...] | None] = [None for _ in cases]
    for index, (args, found) in enumerate(zip(larger, limits[:ordinary], strict=True)):
        if args is not None and "growth" in found:
            grown[index] = arrange(args) if arrange is not None else args
    # Bound now, before the solution's file runs: what the loop calls, the recorder and
    # its hooks in JAX (installed now), so that the file cannot swap them (and if it
    # replaces the hooks in JAX, the recording says so).
    from shard_tutorial.checking import recording  # noqa: PLC0415

    run_case = functools.partial(
        answer_of,
        record=recording.record,
        intact=recording._Hooks.install().intact,
        helpers=(describe_output, describe_lineage, describe_exception),
    )
    encode, encode_error, held, replace = encode_answer, encode_raised, held_on, dataclasses.replace
    sys.path.insert(0, str(Path.cwd()))
    emit(event="loading")
    # The solution's code may raise anything, SystemExit and KeyboardInterrupt
    # included: its parent ends this process, never a signal of the reader's.
    try:
        solution = load_solution(request["solution"])
    except BaseException as error:  # noqa: BLE001
        emit(event="load_error", message=describe_exception(error))
        return 0
    origin = f"{getattr(solution, '__module__', '')}.{getattr(solution, '__qualname__', '')}"
    emit(event="ready", origin=origin, x64=bool(jax.config.jax_enable_x64))
    stays = tuple(request.get("stays") or ())
    for index in range(request["start"], len(cases)):
        emit(event="start", case=index)
        made = run_case(
            solution,
            cases[index],
            shards=cluster is not None,
            stays=stays if index < ordinary else (),
        )
        if not isinstance(made, Answer):  # it raised
            emit(case=index, **encode_error(made))
            continue
        if limits[index] and made.how is not None:
            grown_held = None
            if (grown_args := grown[index]) is not None:
                grown_held = held(run_case, solution, grown_args, cluster)
            budgeted = replace(made.how, limits=limits[index], grown=grown_held)
            made = replace(made, how=budgeted)
        event, payload = encode(made)
        emit(payload, case=index, **event)
    emit(event="done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
