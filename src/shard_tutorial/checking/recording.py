"""Record what one call of a function ran: the XLA programs, and which of them its result came from.

A value a function returns was made somewhere: by an XLA program that JAX compiled
and ran (on some devices, with some collectives), or on the host (NumPy) and copied
to the devices. :func:`record` watches one call and keeps, in order, every program
it ran (its compiled text, its device count, the primitives of the program JAX
traced for it) and every copy to the devices, with which arrays went in and came
out. :meth:`Recording.lineage` then walks back from the result to what it was made
from: the programs it depends on, and the copies from the host that fed them.
Programs whose results were thrown away are not in it.

This is how the checker (:mod:`shard_tutorial.checking.judge`) sees how a solution computed
its answer, from the very call that produced the values it judges, and how a page
can show what an eager, op-by-op computation ran.

JAX runs an already-compiled ``jit`` program from C++ without returning to
Python; when a recording starts, every program is taken off that fast path, and
none is put back on it while the recording lasts, so every program JAX runs passes
through the recorder, at a small cost per call. Outside recordings JAX behaves as
it always does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import math
import os
import re
import sys
import threading
import types
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from shard_tutorial.checking import jax_internals as internals
from shard_tutorial.checking.dataflow import Flow, flow
from shard_tutorial.checking.movement import Moved, moved
from shard_tutorial.compiled import memory_of

__all__ = ["Copy", "Lineage", "Recording", "Run", "received_bytes", "record"]

_PARTITIONS = re.compile(r"num_partitions=(\d+)")
_REPLICAS = re.compile(r"replica_count=(\d+)")


@dataclasses.dataclass
class Run:
    """One XLA program that ran.

    Attributes:
      order: its place among the recorded events (programs and copies), from 0.
      text: the compiled program, as ``compiled.as_text()`` prints it.
      devices: how many devices it ran on (XLA's partitions times replicas).
      primitives: the names of the primitives of the program JAX traced for it,
        nested programs included (``shard_map`` among them, if it was used).
      inputs: the ``id`` of each ``jax.Array`` passed in (None for host data).
      host: each input that is host data (a NumPy array, a number), else None.
      outputs: the arrays it returned.
      files: the Python files whose lines made its operations (each operation's
        innermost frame outside JAX).
      memory: what XLA's memory analysis of the compiled program says one device
        holds, in bytes: ``argument``, ``output``, ``temp`` (temporaries),
        ``alias`` (outputs that reuse an argument's buffer) and ``peak`` (the
        most held at once); empty when the backend does not say.
      live: the primitives whose results reach the program's outputs (not those
        only multiplied by zero, say: :func:`shard_tutorial.checking.dataflow.flow`); None
        when the program could not be read so, and every primitive counts.
      live_inputs: for each input, whether an output depends on it; None when the
        program could not be read so, and every input counts.
      held_before: the bytes one device held, when the program started, in arrays
        the recorded call had made earlier and still kept, other than the
        program's own inputs (see :meth:`Recording.held_besides`): with
        :attr:`memory`, what the device held while it ran.
      lines: the reader's lines its operations were traced from, ``(file, line)``,
        in the order its traced program holds them (JAX's user frame of each).
      unseen: for each input, whether it is an array the recording did not see
        made (see :meth:`Recording.unseen`), judged as the program started;
        empty: not judged then.
      carries: the collectives that pass on, unchanged, data the problem keeps in
        place (:attr:`Recording.stays`; :func:`shard_tutorial.checking.movement.moved`).
    """

    order: int
    text: str
    devices: int
    primitives: frozenset[str]
    inputs: tuple[int | None, ...]
    host: tuple[Any, ...]
    outputs: tuple[Any, ...]
    files: frozenset[str] = frozenset()
    memory: dict[str, int] = dataclasses.field(default_factory=dict)
    live: frozenset[str] | None = None
    live_inputs: tuple[bool, ...] | None = None
    held_before: int = 0
    lines: tuple[tuple[str, int], ...] = ()
    unseen: tuple[bool, ...] = ()
    carries: frozenset[str] = frozenset()


@dataclasses.dataclass
class Copy:
    """One ``jax.device_put``: arrays moved to other devices, or host data sent to them.

    Attributes:
      order: its place among the recorded events, from 0.
      inputs: for each value put, the ``id`` of the ``jax.Array`` it came from, or
        None for host data (a NumPy array, a Python number).
      host: for each value put, the host data itself (None for a ``jax.Array``).
      outputs: the arrays it made.
      where: the reader's line that asked for it, ``(file, line)``: the innermost
        frame of the call's stack outside JAX, the libraries and this package
        (None if there is none).
      unseen: for each value put, whether it is an array the recording did not
        see made (see :meth:`Recording.unseen`); empty: not judged.
      received: the most bytes one device received from other devices, over the
        values put that were arrays on devices (:func:`received_bytes`): what a
        copy from one layout to another sent, outside any program.
      carries: whether it moved, between devices, data the problem keeps in place
        (:attr:`Recording.stays`).
    """

    order: int
    inputs: tuple[int | None, ...]
    host: tuple[Any, ...]
    outputs: tuple[Any, ...]
    where: tuple[str, int] | None = None
    unseen: tuple[bool, ...] = ()
    received: int = 0
    carries: bool = False


def received_bytes(source: jax.Array, result: jax.Array) -> int:
    """The most bytes one device of ``result`` holds that it did not hold of ``source``.

    What a copy of ``source`` to ``result``'s layout (a ``jax.device_put``) moved
    between devices, for the device that received most: nothing when each device
    already held its new block (a replicated array split, the same layout
    again), a whole array less the block it kept when a split array is made
    whole on every device. An array on one device counts as host data: laying
    out inputs that arrive on the default device is what a problem asks for, so
    nothing is counted as received then (gathering onto one device is).

    Examples:
      >>> import jax, numpy as np
      >>> from jax.sharding import NamedSharding, PartitionSpec as P
      >>> from shard_tutorial.checking.recording import received_bytes
      >>> mesh = jax.make_mesh((jax.device_count(),), ("x",))
      >>> split = jax.device_put(np.zeros(8 * 4, np.float32), NamedSharding(mesh, P("x")))
      >>> whole = jax.device_put(split, NamedSharding(mesh, P()))
      >>> received_bytes(split, whole) == 8 * 4 * 4 * (1 - 1 / jax.device_count())
      True
      >>> received_bytes(whole, jax.device_put(whole, NamedSharding(mesh, P("x"))))
      0
      >>> loose = jax.numpy.zeros(8 * 4)  # on the default device
      >>> received_bytes(loose, jax.device_put(loose, NamedSharding(mesh, P("x"))))
      0
      >>> one = jax.device_put(split, jax.devices()[0])  # gathered onto device 0
      >>> received_bytes(split, one) == 8 * 4 * 4 * (1 - 1 / jax.device_count())
      True
    """
    shape = tuple(result.shape)
    if tuple(source.shape) != shape or len(source.sharding.device_set) == 1:
        # From one device: how a problem's inputs that arrive on the default device
        # are laid out, which its statement asks for. (Gathering onto one device is
        # counted: that copy's source is split.)
        return 0
    try:
        held = source.sharding.devices_indices_map(shape)
        wanted = result.sharding.devices_indices_map(shape)
    except Exception:  # noqa: BLE001 (a layout that cannot say where its blocks lie: not counted)
        return 0
    most = 0
    for device, index in wanted.items():
        box = _box(index, shape)
        own = held.get(device)
        kept = _volume(_overlap(box, _box(own, shape))) if own is not None else 0
        most = max(most, _volume(box) - kept)
    return most * np.dtype(result.dtype).itemsize


def _box(index: tuple[Any, ...], shape: tuple[int, ...]) -> list[tuple[int, int]]:
    """A block's ``(start, stop)`` on each axis, from the slices ``devices_indices_map`` gives."""
    box = []
    for axis, length in enumerate(shape):
        part = index[axis] if axis < len(index) else slice(None)
        start, stop, _ = part.indices(length) if isinstance(part, slice) else (part, part + 1, 1)
        box.append((start, max(start, stop)))
    return box


def _overlap(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    return [(max(s, t), max(s, t, min(e, f))) for (s, e), (t, f) in zip(a, b, strict=True)]


def _volume(box: list[tuple[int, int]]) -> int:
    return math.prod(stop - start for start, stop in box)


@functools.cache
def _not_the_readers() -> tuple[str, ...]:
    """Where JAX, jaxlib, this package and the installed libraries live."""
    import jaxlib  # noqa: PLC0415

    folders = [jax.__file__, jaxlib.__file__, str(Path(__file__).parent)]  # shard_tutorial/*
    return (
        *(str(Path(f).resolve().parent) + os.sep for f in folders),
        "site-packages",
        "dist-packages",
        "<frozen ",
    )


def _readers_line() -> tuple[str, int] | None:
    """The innermost line of the current stack in the reader's code, ``(file, line)``.

    The reader's code is any file outside JAX, the installed libraries and this
    package (a solution file, a notebook cell, a script); None if the stack has none.

    Examples:
      >>> from shard_tutorial.checking.recording import _readers_line
      >>> _readers_line()[1] > 0  # this doctest's own line
      True
    """
    theirs = _not_the_readers()
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not any(part in name for part in theirs):
            return name, frame.f_lineno
        frame = frame.f_back
    return None


@dataclasses.dataclass(frozen=True)
class Lineage:
    """What a result was made from: the events it depends on, in the order they ran.

    Attributes:
      runs: the programs the result depends on.
      copies: the copies to the devices it depends on.
      unknown: how many of the arrays it depends on came neither from the
        function's arguments (or arrays that existed before the call, where the
        caller says which) nor from a recorded event: made some other way
        (``jax.make_array_from_callback``, a program run in another thread, an
        ahead-of-time compiled program called directly).
      made_by: for each output array, the event that made it (None: neither a
        program nor a copy made it: it is an argument, or of unknown origin).
      arguments: how many of the call's argument arrays it depends on.
      unknown_users: the recorded events that took in an array of unknown origin,
        in the order they ran (where such an array entered what was recorded).
    """

    runs: tuple[Run, ...]
    copies: tuple[Copy, ...]
    unknown: int
    made_by: tuple[Run | Copy | None, ...]
    arguments: int = 0
    unknown_users: tuple[Run | Copy, ...] = ()

    def events(self) -> list[Run | Copy]:
        """The programs and copies together, in the order they ran."""
        return sorted([*self.runs, *self.copies], key=lambda event: event.order)


@dataclasses.dataclass
class Recording:
    """What one recorded call ran (see :func:`record`).

    Attributes:
      runs: every program, in the order it ran.
      copies: every ``jax.device_put``, in order.
      intact: False if something replaced the recorder's hooks in JAX during the call.
      earlier: the ``id`` of each array alive when the recording started (see
        :meth:`held_besides`); None: not known, and nothing is counted.
      existed: the ``id`` of each array alive when the recording started, whether or
        not :attr:`earlier` counts them: where a copy read through the host (see
        :func:`_same_values`) looks for its source first.
      stays: the key (:func:`_key`) of each array whose data must stay on its
        devices (a pipeline's layers, say), and of each array recorded events made
        of that data rearranged (a slice, a copy, a padded block: see
        :func:`shard_tutorial.checking.movement.moved`); empty: nothing is followed.
    """

    runs: list[Run] = dataclasses.field(default_factory=list)
    copies: list[Copy] = dataclasses.field(default_factory=list)
    intact: bool = True
    earlier: frozenset[int] | None = None
    existed: frozenset[int] = frozenset()
    _counter: Iterator[int] = dataclasses.field(default_factory=itertools.count, repr=False)
    # held_besides' count of the references the recording holds to each output, by id, and
    # how many runs and copies it has counted so far.
    _recorded: dict[int, int] = dataclasses.field(default_factory=dict, repr=False)
    _seen: tuple[int, int] = dataclasses.field(default=(0, 0), repr=False)
    # The array each placement copy was made from, by id (see _placement_copy).
    _copy_of: dict[int, int] = dataclasses.field(default_factory=dict, repr=False)
    # The key (_key) of every array a recorded event made: see unseen.
    _made: set[int] = dataclasses.field(default_factory=set, repr=False)
    stays: set[int] = dataclasses.field(default_factory=set)

    def keep_in_place(self, values: Sequence[Any]) -> None:
        """Follow the data of every array in ``values`` (pytrees): see :attr:`stays`.

        Examples:
          >>> import jax, jax.numpy as jnp
          >>> from shard_tutorial.checking.recording import record
          >>> w = jnp.ones((8, 2))
          >>> with record() as recording:
          ...     recording.keep_in_place([w])
          ...     block = jax.jit(lambda w: w[:2].T)(w)  # a rearrangement: followed
          ...     total = jax.jit(lambda w: w.sum())(w)  # arithmetic: not
          >>> [_key(block) in recording.stays, _key(total) in recording.stays]
          [True, False]
        """
        self.stays.update(
            _key(leaf) for leaf in jax.tree.leaves(list(values)) if isinstance(leaf, jax.Array)
        )

    def unseen(self, inputs: Sequence[int | None]) -> tuple[bool, ...]:
        """For each input of an event about to be recorded, whether the recording did not see it made.

        An input (known by :func:`_key`) is unseen when no recorded event made it
        and it did not exist when the recording started (:attr:`existed`): another
        thread made it, or a program compiled ahead of time, which JAX runs without
        coming back to Python. Judged while the event runs, when every input is
        alive: later, an input that died may have left its ``id`` to an array a
        recorded event made, which would make it look seen (Python reuses the ``id``
        of an object that died).

        Examples:
          >>> import jax.numpy as jnp
          >>> from shard_tutorial.checking.recording import record, _key
          >>> outside = jnp.ones(3)  # made before the recording: not in existed here
          >>> with record() as recording:
          ...     inside = outside + 1
          ...     recording.unseen([_key(outside), _key(inside), None])
          (True, False, False)
        """
        return tuple(
            key is not None and key not in self._made and key not in self.existed for key in inputs
        )

    def _add(self, event: Run | Copy) -> None:
        """Record ``event`` (with the recording's lock held): its outputs are now seen."""
        if isinstance(event, Run):
            self.runs.append(event)
        else:
            self.copies.append(event)
        self._made.update(_key(output) for output in event.outputs)

    def held_besides(self, inputs: Sequence[Any]) -> int:
        """The most bytes one device holds in arrays made during the recording, but ``inputs``.

        An array counts on each device that holds a block of it (its shard's bytes).
        This is what code between programs keeps alive: eager code that fetches
        every block of an array in programs of its own, each small, holds them all
        here. A placement copy (a program that only lays one array out anew, as an
        eager ``jax.shard_map`` does with each of its arguments, see
        :func:`_placement_copy`) counts with the array it copies: once while both
        live, and not at all when that array is one of ``inputs`` or lived before.
        Nothing is counted when :attr:`earlier` is None (not known). It holds
        the ``id`` of each array that lived before: those arrays must outlive the
        recording (the checker's worker keeps them), or a new array may take the
        ``id`` of one that died and be left out.

        Examples:
          >>> import jax, jax.numpy as jnp
          >>> from shard_tutorial.checking.recording import record
          >>> before = jax.live_arrays()  # kept alive: no later array can reuse an id
          >>> with record() as recording:
          ...     recording.earlier = frozenset(id(a) for a in before)
          ...     kept = jnp.ones(256)  # 1,024 bytes the call keeps
          ...     held = recording.held_besides(())
          ...     del kept  # now held by the recording alone: not counted
          ...     held - recording.held_besides(())
          1024
        """
        if self.earlier is None:
            return 0
        skip = self.earlier | {id(a) for a in inputs}
        # A copy and what it copies are one array: skipped together, else counted once.
        root = functools.partial(_root, self._copy_of)
        skipped_roots = {root(key) for key in skip}
        counted_roots: set[int] = set()
        # The recording holds every event's outputs (to compare their values with the
        # answer later): an array only it holds is not one the code kept.
        # Counted once per event, as events arrive (an eager call runs hundreds).
        recorded = self._recorded
        new_runs, new_copies = self.runs[self._seen[0] :], self.copies[self._seen[1] :]
        self._seen = (len(self.runs), len(self.copies))
        events: list[Run | Copy] = [*new_runs, *new_copies]
        for event in events:
            for output in event.outputs:
                recorded[id(output)] = recorded.get(id(output), 0) + 1
        # What counts an object held by nobody else in a loop like the one below (the
        # list, the loop's name, getrefcount's own argument: a count that differs
        # between Python versions), measured on an object nobody else holds.
        base = next(sys.getrefcount(probe) for probe in [object()])
        per_device: dict[Any, int] = {}
        live = jax.live_arrays()
        # Counted with the array they are blocks of (ids only: a reference held here
        # would count as one the code holds).
        blocks = set(_blocks(live))
        for array in live:
            if id(array) in skip or id(array) in blocks or array.is_deleted():
                continue
            family = root(id(array))
            if family in skipped_roots or family in counted_roots:
                continue
            if sys.getrefcount(array) <= base + recorded.get(id(array), 0):
                continue
            try:
                sharding = array.sharding
                block = math.prod(sharding.shard_shape(array.shape)) * array.dtype.itemsize
                devices = sharding.device_set
            except Exception:  # noqa: BLE001, S112 (an array JAX cannot describe: not counted)
                continue
            counted_roots.add(family)
            for device in devices:
                per_device[device] = per_device.get(device, 0) + block
        return max(per_device.values(), default=0)

    def lineage(
        self, result: Any, arguments: Sequence[Any] = (), *, earlier: Sequence[Any] = ()
    ) -> Lineage:
        """The programs and copies ``result`` depends on.

        Args:
          result: what the call returned: an array, or a pytree of them.
          arguments: the call's arguments; arrays among them are where a lineage starts.
          earlier: arrays that existed before the call (``jax.live_arrays()``): a
            lineage may start there too (a constant of the solution's file), and
            they count neither as arguments nor as :attr:`Lineage.unknown`.

        Returns:
          A :class:`Lineage`.

        Examples:
          >>> import jax.numpy as jnp
          >>> from shard_tutorial.checking.recording import record
          >>> x = jnp.arange(4.0)
          >>> with record() as recording:
          ...     thrown_away = jnp.cos(x)
          ...     y = jnp.sin(x) * 2
          >>> lineage = recording.lineage(y, (x,))
          >>> len(recording.runs), len(lineage.runs)
          (3, 2)
        """
        makers: dict[int, Run | Copy] = {}
        events: list[Run | Copy] = [*self.runs, *self.copies]
        for event in events:
            for output in event.outputs:
                makers[_key(output)] = event
        given = {_key(leaf) for leaf in jax.tree.leaves(arguments)}
        existed = {_key(array) for array in earlier} - given
        leaves = [leaf for leaf in jax.tree.leaves(result) if isinstance(leaf, jax.Array)]
        made_by = tuple(makers.get(_key(leaf)) for leaf in leaves)
        # Each array to walk back from, with the event that took it in (None: the result)
        # and whether that event saw it unmade (Recording.unseen): then no later event's
        # output that took its id after it died is its maker.
        pending: list[tuple[int, Run | Copy | None, bool]] = [
            (_key(leaf), None, False) for leaf in leaves
        ]
        seen: set[tuple[int, bool]] = set()  # an unmade array may share a made one's id
        found: dict[int, Run | Copy] = {}
        users: dict[int, Run | Copy] = {}
        unknown = reached = 0
        while pending:
            key, user, unmade = pending.pop()
            if (key, unmade) in seen:
                continue
            seen.add((key, unmade))
            maker = None if unmade else makers.get(key)
            if maker is None:
                if key not in given and key not in existed:
                    unknown += 1
                    if user is not None:
                        users[user.order] = user
                reached += key in given
                continue
            found[maker.order] = maker
            # Only the inputs the program's outputs depend on: an array a later program
            # multiplies by zero is not where the answer came from.
            live = getattr(maker, "live_inputs", None)  # a Copy's inputs all count
            if live is None:
                live = (True,) * len(maker.inputs)
            flags = maker.unseen or (False,) * len(maker.inputs)
            pending.extend(
                (k, maker, unmade)
                for k, used, unmade in zip(maker.inputs, live, flags, strict=True)
                if used and k is not None
            )
        runs = tuple(e for _, e in sorted(found.items()) if isinstance(e, Run))
        copies = tuple(e for _, e in sorted(found.items()) if isinstance(e, Copy))
        unseen = tuple(e for _, e in sorted(users.items()))
        return Lineage(runs, copies, unknown, made_by, reached, unseen)


_ACTIVE = threading.local()
_LOCK = threading.Lock()


@contextlib.contextmanager
def record() -> Iterator[Recording]:
    """Record every XLA program and every copy to the devices run inside the block.

    Yields:
      The :class:`Recording`, filled in as the block runs. It holds on to every
      array the recorded events made, until it is dropped.

    Examples:
      >>> import jax
      >>> import jax.numpy as jnp
      >>> from shard_tutorial.checking.recording import record
      >>> x = jnp.ones(3)
      >>> with record() as recording:
      ...     y = jax.jit(lambda v: v.sum())(x)
      >>> [run.devices for run in recording.runs], "reduce_sum" in recording.runs[0].primitives
      ([1], True)
    """
    hooks = _Hooks.install()
    hooks.leave_fast_path()
    recording = Recording()
    previous = getattr(_ACTIVE, "recording", None)
    _ACTIVE.recording = recording
    # JAX's persistent compilation cache keys a program without its source locations
    # unless asked: a program read back from it names the lines of whoever compiled it
    # first (a copy of the same function in another file), and the recording reports
    # lines. With the locations in the key, each file's program is its own entry.
    keyed = jax.config.jax_compilation_cache_include_metadata_in_key
    jax.config.update("jax_compilation_cache_include_metadata_in_key", True)
    try:
        yield recording
    finally:
        jax.config.update("jax_compilation_cache_include_metadata_in_key", keyed)
        _ACTIVE.recording = previous
        recording.intact = hooks.intact()


_LAYOUT = frozenset(
    {"shard_map", "broadcast_in_dim", "squeeze", "reshape", "pvary", "pcast", "copy", "copy_p"}
)
"""The primitives of a program that only lays its argument out anew (see :func:`_placement_copy`)."""


def _placement_copy(
    primitives: frozenset[str], args: Sequence[Any], outputs: Sequence[Any]
) -> bool:
    """Whether a program only lays one array out anew: JAX's own copy, not a computation.

    An eager ``jax.shard_map`` runs one such program per argument (a ``shard_map``
    of a ``broadcast_in_dim``, measured on jax 0.12.0.1: each device's block with an
    axis of 1 added) and one per result, so that its body reads copies of its
    arguments. One array in, one out, as many numbers of the same dtype, and only
    layout primitives (:data:`_LAYOUT`).

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial.checking.recording import _placement_copy
      >>> x = jnp.ones(4)
      >>> _placement_copy(frozenset({"broadcast_in_dim", "shard_map"}), [x], [x[None]])
      True
      >>> _placement_copy(frozenset({"add"}), [x], [x + 1])
      False
    """
    if not primitives <= _LAYOUT or len(args) != 1 or len(outputs) != 1:
        return False
    arg, out = args[0], outputs[0]
    if not isinstance(arg, jax.Array) or not isinstance(out, jax.Array):
        return False
    return arg.size == out.size and arg.dtype == out.dtype


def _root(copy_of: dict[int, int], key: int) -> int:
    """The array a chain of placement copies started from, by id."""
    seen = set()
    while key in copy_of and key not in seen:
        seen.add(key)
        key = copy_of[key]
    return key


def _same_values(values: np.ndarray, before: set[int], known: frozenset[int] = frozenset()) -> Any:
    """An array that lived before (its ``id`` in ``before``) whose values are ``values``.

    Where the match is one block of a larger array that lived before (see
    :func:`_blocks`), the larger array is the source. Arrays in ``known`` (the call's
    arguments and what the recording saw made) are tried first: jax 0.10 keeps a
    twin of a one-device array it has read, the same buffer under another ``id``,
    which no recorded event made. None if there is none.
    """
    if values.size == 0:
        return None
    live = sorted(
        (a for a in jax.live_arrays() if id(a) in before), key=lambda a: _key(a) not in known
    )
    blocks = _blocks(live)
    for array in live:
        if array.shape != values.shape or array.dtype != values.dtype:
            continue
        try:
            if array.is_fully_addressable and np.array_equal(np.asarray(array), values):
                return blocks.get(id(array), array)
        except Exception:  # noqa: BLE001, S112 (an array that cannot be read here)
            continue
    return None


def _buffers(array: Any) -> set[int]:
    """The addresses of the device buffers behind ``array``'s blocks on this process."""
    found = set()
    for shard in getattr(array, "addressable_shards", ()):
        try:
            found.add(shard.data.unsafe_buffer_pointer())
        except Exception:  # noqa: BLE001, S112 (a deleted or donated block: no buffer)
            continue
    return found


# jax 0.10 lists each block of an array it has read as a live array of its own (after
# ``np.asarray`` of an 8-device array, ``jax.live_arrays()`` grew by 8 on jax 0.10.2 and
# by 0 on 0.12.0.1, measured); tests/test_recording.py reads both stacks.
_READ_BLOCKS_STAY_LIVE = tuple(int(p) for p in jax.__version__.split(".")[:2]) < (0, 11)


def _blocks(live: Sequence[Any]) -> dict[int, Any]:
    """Each live array that is one block of another live array: its ``id``, and that array.

    jax 0.10 keeps each block of an array it has read (``np.asarray``) as a live
    array of its own, on one device, holding the very buffer of that block; jax 0.12
    lists only the arrays a program made. A block is its array's bytes, not more.
    On jax 0.11 and later there are none to find, and nothing is read: reading
    every array's buffers at every program took a fifth of an eager check's time.
    """
    if not _READ_BLOCKS_STAY_LIVE:
        return {}
    singles: dict[int, list[Any]] = {}  # a buffer may have several such arrays
    for array in live:
        try:
            if len(array.sharding.device_set) == 1 and not array.is_deleted():
                singles.setdefault(array.unsafe_buffer_pointer(), []).append(array)
        except Exception:  # noqa: BLE001, S112 (no single buffer to read: not a block)
            continue
    found: dict[int, Any] = {}
    if not singles:
        return found
    for whole in live:
        try:
            if len(whole.sharding.device_set) == 1 or whole.is_deleted():
                continue
        except Exception:  # noqa: BLE001, S112 (an array JAX cannot describe)
            continue
        for pointer in _buffers(whole):
            for block in singles.get(pointer, ()):
                found[id(block)] = whole
    return found


def _key(array: Any) -> int:
    """The ``id`` a recording knows ``array`` by: its own, or for a PRNG key its data's.

    A typed PRNG key (``jax.random.key``) is a wrapper JAX makes and unmakes in
    Python, without a program (``random_wrap``, ``random_unwrap``): a program
    returns a key's data, and the key passed to the next program may be a new
    wrapper of it. Both are known by the data's ``id``.

    Examples:
      >>> import jax
      >>> from shard_tutorial.checking.recording import _key
      >>> key = jax.random.key(0)
      >>> _key(key) == id(jax.random.key_data(key)) != id(key)
      True
    """
    return id(getattr(array, "_base_array", array))


def _current() -> Recording | None:
    return getattr(_ACTIVE, "recording", None)


def _primitives(
    jaxpr: Any,
) -> tuple[frozenset[str], frozenset[str], tuple[tuple[str, int], ...]]:
    """A traced program's primitive names (nested programs included), files and lines."""
    user_frame, user_frames = internals.USER_FRAME.get(), internals.USER_FRAMES.get()
    found: set[str] = set()
    files: set[str] = set()
    lines: dict[tuple[str, int], None] = {}  # in order, once each
    pending: list[Any] = [getattr(jaxpr, "jaxpr", jaxpr)]
    while pending:
        inner = pending.pop()
        for equation in getattr(inner, "eqns", ()):
            found.add(equation.primitive.name)
            frame = user_frame(equation.source_info.traceback)
            if frame is not None:
                files.add(frame.file_name)
                # The reader's own line: past a library's (flax's layer) to the code
                # that called it.
                theirs = _not_the_readers()
                for outer in user_frames(equation.source_info.traceback):
                    if not any(part in outer.file_name for part in theirs):
                        lines[(outer.file_name, int(outer.start_line))] = None
                        break
            for value in equation.params.values():
                for item in value if isinstance(value, list | tuple) else (value,):
                    nested = getattr(item, "jaxpr", item)  # a ClosedJaxpr holds a Jaxpr
                    if hasattr(nested, "eqns"):
                        pending.append(nested)
    return frozenset(found), frozenset(files), tuple(lines)


def _flow(jaxpr: Any, args: Sequence[Any]) -> Flow | None:
    """What the program's outputs depend on, or None if it cannot be read for these args."""
    try:
        found = flow(jaxpr)
    except Exception:  # noqa: BLE001 (a program this reading does not know: all of it counts)
        return None
    return found if len(found.inputs) == len(args) else None


def _memory(compiled: Any) -> dict[str, int]:
    """XLA's memory analysis of a compiled program, per device (what ``memory_analysis()`` reads)."""
    try:
        stats = compiled.xla_extension_executable().get_compiled_memory_stats()
    except Exception:  # noqa: BLE001 (a backend without the analysis: nothing to read)
        return {}
    return memory_of(stats)


def _device_count(text: str) -> int:
    partitions = _PARTITIONS.search(text)
    replicas = _REPLICAS.search(text)
    return (int(partitions[1]) if partitions else 1) * (int(replicas[1]) if replicas else 1)


class _Hooks:
    """The recorder's hooks in JAX, installed once per process and left in place.

    Outside :func:`record` they only pass calls on (and keep JAX's C++ fast path
    off, which costs microseconds per call). What they replace, and why no public
    API would do, is :mod:`shard_tutorial.checking.jax_internals`' table.
    """

    _installed: _Hooks | None = None

    def __init__(self) -> None:
        # Every jit program JAX runs (eager operations included, each a small jit
        # program) passes through internals.PJIT_CALL once the C++ fast path is off
        # (internals.FAST_PATH_DATA returning None keeps it off); every
        # jax.device_put, and every transfer from the host, through
        # internals.DEVICE_PUT. See that module for each one.
        self.call_impl: Callable[..., Any] = internals.PJIT_CALL.get()
        self.put_impl: Callable[..., Any] = internals.DEVICE_PUT.get()
        hooks = self
        # What movement.moved found in each compiled program, for each choice of inputs
        # that hold data to stay put: (program, found).
        self.movements: dict[tuple[int, tuple[bool, ...]], tuple[Any, Moved]] = {}
        # What was read of each compiled program once:
        # (program, text, memory, primitives, files, lines, flow).
        self.programs: dict[
            int,
            tuple[
                Any,
                str,
                dict[str, int],
                frozenset[str],
                frozenset[str],
                tuple[tuple[str, int], ...],
                Flow | None,
            ],
        ] = {}

        def run_and_record(*args: Any, jaxpr: Any, **params: Any) -> Any:
            recording = _current()
            # What the call's earlier programs left alive, besides this one's inputs.
            others = 0 if recording is None else recording.held_besides(args)
            result = hooks.call_impl(*args, jaxpr=jaxpr, **params)
            if recording is not None:
                out_flat, compiled = result[0], result[1]
                known = hooks.programs.get(id(compiled))
                if known is None or known[0] is not compiled:
                    try:
                        text = str(compiled.as_text())
                    except Exception:  # noqa: BLE001 (a backend without text: nothing to read)
                        text = ""
                    known = (
                        compiled, text, _memory(compiled), *_primitives(jaxpr), _flow(jaxpr, args)
                    )  # fmt: skip
                    hooks.programs[id(compiled)] = known
                _, text, memory, primitives, files, lines, flowing = known
                arrays = [isinstance(a, jax.Array) for a in args]
                if _placement_copy(primitives, args, out_flat):
                    recording._copy_of[id(out_flat[0])] = id(args[0])
                inputs = tuple(_key(a) if k else None for a, k in zip(args, arrays, strict=True))
                carries: frozenset[str] = frozenset()
                if recording.stays:
                    carries = hooks.follow(recording, compiled, jaxpr, inputs, out_flat)
                with _LOCK:
                    recording._add(
                        Run(
                            next(recording._counter),
                            text,
                            _device_count(text),
                            primitives,
                            inputs,
                            tuple(None if k else a for a, k in zip(args, arrays, strict=True)),
                            tuple(out_flat),
                            files,
                            memory,
                            None if flowing is None else flowing.primitives,
                            None if flowing is None else flowing.inputs,
                            others,
                            # Eager operations trace no line of the reader's: where they ran.
                            lines or tuple(filter(None, [_readers_line()])),
                            recording.unseen(inputs),
                            carries,
                        )
                    )
            return result

        def put_and_record(*xs: Any, **params: Any) -> Any:
            outputs = hooks.put_impl(*xs, **params)
            recording = _current()
            if recording is not None:
                arrays = [isinstance(x, jax.Array) for x in xs]
                inputs = tuple(_key(x) if a else None for x, a in zip(xs, arrays, strict=True))
                received = [
                    received_bytes(x, out) if a and isinstance(out, jax.Array) else 0
                    for x, out, a in zip(xs, outputs, arrays, strict=False)
                ]
                kept = [key is not None and key in recording.stays for key in inputs]
                recording.stays.update(
                    _key(out) for out, k in zip(outputs, kept, strict=False) if k
                )
                with _LOCK:
                    recording._add(
                        Copy(
                            next(recording._counter),
                            inputs,
                            tuple(
                                None if a else np.asarray(x)
                                for x, a in zip(xs, arrays, strict=True)
                            ),
                            tuple(outputs),
                            _readers_line(),
                            recording.unseen(inputs),
                            max(received, default=0),
                            any(k and r > 0 for k, r in zip(kept, received, strict=False)),
                        )
                    )
            return outputs

        fast_path_data = internals.FAST_PATH_DATA.get()

        def no_fast_path(*args: Any, **kwargs: Any) -> Any:
            # While recording, no call is put on the C++ fast path, so every call comes
            # back to Python, where it is recorded; outside, JAX's own behaviour.
            if _current() is not None:
                return None
            return fast_path_data(*args, **kwargs)

        # An array put together from host data (make_array_from_callback: each device's
        # block read from the host) or from arrays on single devices is a copy too,
        # made in jax._src.array and exported as jax's own attributes: both are hooked.
        self.from_callback = internals.FROM_CALLBACK.get()
        self.from_blocks = internals.FROM_BLOCKS.get()

        def from_callback_and_record(*args: Any, **kwargs: Any) -> Any:
            recording = _current()
            # What lived before: a source is among these, not the blocks made comes with.
            before = {id(a) for a in jax.live_arrays()} if recording is not None else set()
            made = hooks.from_callback(*args, **kwargs)
            if recording is not None:
                # Its values as the host gave them: where it has every block, all of them.
                host = np.asarray(made) if made.is_fully_addressable else np.empty(0)
                # The same values as an array that is still alive: a new layout of that
                # array, read through the host (as shard_tutorial.place does), not host data.
                events: list[Run | Copy] = [*recording.runs, *recording.copies]
                known = recording.existed | {_key(o) for event in events for o in event.outputs}
                source = _same_values(host, before, known)
                inputs = (None,) if source is None else (_key(source),)
                with _LOCK:
                    recording._add(
                        Copy(
                            next(recording._counter),
                            inputs,
                            (host,) if source is None else (None,),
                            (made,),
                            _readers_line(),
                            recording.unseen(inputs),
                        )
                    )
            return made

        def from_blocks_and_record(shape: Any, sharding: Any, arrays: Any, **kwargs: Any) -> Any:
            arrays = list(arrays)
            made = hooks.from_blocks(shape, sharding, arrays, **kwargs)
            recording = _current()
            if recording is not None:
                inputs = tuple(_key(a) for a in arrays)
                with _LOCK:
                    recording._add(
                        Copy(
                            next(recording._counter),
                            inputs,
                            (None,) * len(arrays),
                            (made,),
                            _readers_line(),
                            recording.unseen(inputs),
                        )
                    )
            return made

        self.run_and_record, self.put_and_record = run_and_record, put_and_record
        self.from_callback_and_record = from_callback_and_record
        self.from_blocks_and_record = from_blocks_and_record
        self.no_fast_path = no_fast_path
        # Each patched internal and what replaces it (intact() compares the two).
        self.replacements: dict[internals.Internal, Callable[..., Any]] = {
            internals.PJIT_CALL: run_and_record,
            internals.FAST_PATH_DATA: no_fast_path,
            internals.DEVICE_PUT: put_and_record,
            internals.FROM_CALLBACK: from_callback_and_record,
            internals.FROM_CALLBACK_EXPORTED: from_callback_and_record,
            internals.FROM_BLOCKS: from_blocks_and_record,
            internals.FROM_BLOCKS_EXPORTED: from_blocks_and_record,
        }
        assert set(self.replacements) == set(internals.PATCHED)
        for internal, replacement in self.replacements.items():
            internal.set(replacement)

    def follow(
        self,
        recording: Recording,
        compiled: Any,
        jaxpr: Any,
        inputs: tuple[int | None, ...],
        outputs: Sequence[Any],
    ) -> frozenset[str]:
        """The collectives of a program that pass on data of :attr:`Recording.stays`.

        Its outputs that are such data rearranged join :attr:`Recording.stays`, so a
        later program (eager code runs each operation as one) is followed from them.
        """
        sources = tuple(key is not None and key in recording.stays for key in inputs)
        if not any(sources):
            return frozenset()
        remembered = self.movements.get((id(compiled), sources))
        if remembered is None or remembered[0] is not compiled:
            try:
                found = moved(jaxpr, sources)
            except Exception:  # noqa: BLE001 (a program this reading does not know: nothing followed)
                found = Moved(frozenset(), ())
            remembered = (compiled, found)
            self.movements[(id(compiled), sources)] = remembered
        found = remembered[1]
        recording.stays.update(
            _key(out) for out, is_moved in zip(outputs, found.outputs, strict=False) if is_moved
        )
        return found.collectives

    def leave_fast_path(self) -> None:
        """Take every program off JAX's C++ fast path, so its next call comes back here.

        A program called outside a recording may be on the fast path, where C++ runs
        it without returning to Python: unseen. Only the fast path's entries are
        dropped, not what JAX compiled, so the next call costs a lookup, not a compile.
        """
        internals.PJIT_CACHE_FUN_ONLY.get().clear()
        internals.PJIT_CACHE_EXPLICIT.get().clear()
        internals.PJIT_FUNCTION_CACHE.get().clear_all()

    @classmethod
    def install(cls) -> _Hooks:
        with _LOCK:
            if cls._installed is None:
                cls._installed = cls()
            return cls._installed

    def intact(self) -> bool:
        """Whether the hooks are still the ones installed (nothing replaced them)."""
        return all(
            internal.get(None) is replacement for internal, replacement in self.replacements.items()
        )
