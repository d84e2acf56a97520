r"""What a worker sends the checker about one answer, and the verdicts the judge gives.

The worker (:mod:`shard_tutorial.checking.worker`) runs the solution and describes what
it returned; the judge (:mod:`shard_tutorial.checking.judge`) reads that description in
the checker's process. An answer is an :class:`Answer`: the :class:`Output`'s
description (for a tuple or a list, its items; on a cluster, the :class:`Shard` blocks
this process holds) and values, and :class:`How` it was made (the :class:`Program`
runs, :class:`Transfer` copies and :class:`Candidate` arrays it depends on, what each
output array was :class:`MadeBy`, and for a budget's growth what each program
:class:`Held`); a call that raised is a :class:`Raised` instead. All are frozen
dataclasses. On the pipe between them an answer is one report: a line of JSON (the
event) and raw bytes (the payload); an error raised is a line of JSON alone.
:func:`encode_answer` and :func:`encode_raised` make the report, on the worker's side,
and :func:`decode_answer` and :func:`decode_raised` make the record back, on the
checker's side: the only places that turn these records into JSON-ready data and back
(each record's ``to_json`` and ``from_json``), and that know how the payload is laid
out (the output's values, then the values of the candidate arrays that ``how`` lists,
``"how_nbytes"`` of them). The worker runs the solution's code, which can write
anything on the pipe: a report that is not as the encoders make it decodes as a record
that says it was garbled (:data:`GARBLED`: an :class:`Output`, a :class:`How` or a
:class:`Raised` whose ``error`` it is), which the judge turns into a verdict, never as
an error of the checker's.

A verdict is one :class:`Verdict` and one message.

Examples:
  >>> from shard_tutorial.checking.protocol import (
  ...     Answer, How, MadeBy, Output, Program, decode_answer, encode_answer)
  >>> how = How(True, (Program(0, 8, True, ("psum", "shard_map")),), made_by=(MadeBy(0, "program"),))
  >>> output = Output("jax.Array", "float32", (), (), 8)
  >>> sent = Answer(output, b"\x00\x00\x80?", how, b"\x01\x02", seconds=0.5)
  >>> event, payload = encode_answer(sent)
  >>> event["how_nbytes"], payload, event["how"]["programs"][0]["devices"]
  (2, b'\x00\x00\x80?\x01\x02', 8)
  >>> event["output"]
  {'kind': 'jax.Array', 'dtype': 'float32', 'shape': [], 'split': [], 'devices': 8}
  >>> decode_answer(event, payload) == sent
  True
  >>> event["how"]["programs"][0]["devices"] = "8"  # not as the worker writes it
  >>> decode_answer(event, payload).how.error
  "the worker's report on it was garbled"
  >>> event["output"]["split"] = [8]  # split along an axis it does not have
  >>> decode_answer(event, payload).output.error
  "the worker's report on it was garbled"
"""

from __future__ import annotations

import dataclasses
import enum
import numbers
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar, cast

__all__ = [
    "GARBLED",
    "Answer",
    "Candidate",
    "Held",
    "How",
    "Line",
    "MadeBy",
    "Output",
    "Program",
    "Raised",
    "Shard",
    "Transfer",
    "Verdict",
    "decode_answer",
    "decode_raised",
    "encode_answer",
    "encode_raised",
]

_T = TypeVar("_T")


class Verdict(enum.StrEnum):
    """What the checker says of one case: a word, as the report's rows and tests read it.

    A member is its string (``Verdict.FAIL == "fail"``), and shows as it
    (``repr(Verdict.FAIL) == "'fail'"``), so reports, the tests that compare statuses
    with strings and the pages that print them read it as before.

    Examples:
      >>> from shard_tutorial.checking.protocol import Verdict
      >>> Verdict.FAIL == "fail", f"{Verdict.NOT_RUN}", Verdict("budget") is Verdict.BUDGET
      (True, 'not run', True)
      >>> (Verdict.PASS, "")
      ('pass', '')
    """

    PASS = "pass"
    FAIL = "fail"  # wrong values, or not an array of numbers, or a refusal not raised
    ERROR = "error"  # the solution raised
    TIMEOUT = "timeout"  # a hang: the case was stopped
    CRASH = "crash"  # the process running the solution ended
    MEMORY = "memory"  # beyond the checker's memory limit
    TECHNIQUE = "technique"  # right values, computed otherwise than the problem asks
    PLACEMENT = "placement"  # right values, laid out otherwise than the contract says
    REFERENCE = "reference"  # right values, computed by the package's own solution
    BUDGET = "budget"  # right values, beyond the problem's budget of bytes or memory
    NOT_RUN = "not run"  # the check ended (a deadline, hangs) before the case ran

    def __repr__(self) -> str:
        """The string's repr, as a status read before there was an enum."""
        return repr(self.value)


GARBLED = "the worker's report on it was garbled"
"""The ``error`` of a record (:attr:`Output.error`, :attr:`How.error`, :attr:`Raised.error`)
whose report :func:`decode_answer` or :func:`decode_raised` cannot read."""

Line = tuple[str, int]
"""A line of the reader's code: its file and its number."""


@dataclasses.dataclass(frozen=True)
class Held:
    """What one device held while one program ran: for a budget of bytes held, and its growth.

    Attributes:
      memory: what XLA's memory analysis of the compiled program says one device
        holds, in bytes: ``argument``, ``output``, ``temp``, ``alias`` (outputs that
        reuse an argument's buffer) and ``peak``; empty when the backend does not say.
      held_before: the bytes one device held, when the program started, in arrays the
        call had made earlier and still kept (besides the program's own inputs).
      lines: the reader's lines the program's operations came from, for the verdict:
        where the most is held.

    Examples:
      >>> from shard_tutorial.checking.protocol import Held
      >>> held = Held({"temp": 64}, 16, (("answer.py", 3),))
      >>> Held.from_json(held.to_json()) == held, held.to_json()["lines"]
      (True, [['answer.py', 3]])
    """

    memory: Mapping[str, int] = dataclasses.field(default_factory=dict)
    held_before: int = 0
    lines: tuple[Line, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """This record as JSON-ready data (for :func:`encode_answer`).

        Examples:
          >>> from shard_tutorial.checking.protocol import Held
          >>> Held({"peak": 8}, 4).to_json()
          {'memory': {'peak': 8}, 'held_before': 4, 'lines': []}
        """
        return {
            "memory": dict(self.memory),
            "held_before": self.held_before,
            "lines": [list(line) for line in self.lines],
        }

    @classmethod
    def from_json(cls, data: object) -> Held:
        """The record :meth:`to_json` made; ValueError if ``data`` is not one.

        Examples:
          >>> from shard_tutorial.checking.protocol import Held
          >>> Held.from_json({"memory": {"peak": 8}, "held_before": 4, "lines": [["a.py", 2]]})
          Held(memory={'peak': 8}, held_before=4, lines=(('a.py', 2),))
          >>> Held.from_json({"memory": {"peak": "8"}, "held_before": 4, "lines": []})
          Traceback (most recent call last):
          ValueError: a number of bytes that is not an int
        """
        found = _object(data)
        return cls(_memory(found), _int(found, "held_before"), _lines(found))


@dataclasses.dataclass(frozen=True)
class Program:
    """One XLA program the answer depends on, as the worker read it during the call.

    Attributes:
      order: its place among the call's recorded events (programs and copies), from 0.
      devices: how many devices it ran on.
      shard_map: whether it ran ``jax.shard_map``.
      primitives: the JAX primitives of the program JAX traced for it, sorted.
      live: those of them whose results reach its outputs
        (:func:`shard_tutorial.checking.dataflow.flow`), sorted; None: not known, and
        every primitive counts (the worker sends all of them where the program could not
        be read so).
      files: the Python files its operations came from, sorted.
      lines: the reader's lines its operations came from, the first few, in the
        order its traced program holds them.
      memory: what XLA's memory analysis says one device holds for it (see :class:`Held`).
      held_before: the bytes one device held, when it started, in arrays the call had
        made earlier and still kept (see :class:`Held`).
      text: the lines of its compiled text that say what it sends and how often
        (:func:`shard_tutorial.compiled.communication_lines`).
      carries: the collectives (JAX's primitive names) that pass on, unchanged, data
        the problem keeps on its devices (:func:`shard_tutorial.checking.movement.moved`),
        sorted.

    Examples:
      >>> from shard_tutorial.checking.protocol import Program
      >>> program = Program(0, 8, True, ("psum", "shard_map"), ("psum", "shard_map"))
      >>> Program.from_json(program.to_json()) == program, program.held().held_before
      (True, 0)
    """

    order: int
    devices: int
    shard_map: bool = False
    primitives: tuple[str, ...] = ()
    live: tuple[str, ...] | None = None
    files: tuple[str, ...] = ()
    lines: tuple[Line, ...] = ()
    memory: Mapping[str, int] = dataclasses.field(default_factory=dict)
    held_before: int = 0
    text: str = ""
    carries: tuple[str, ...] = ()

    def held(self) -> Held:
        """What one device held while this program ran.

        Examples:
          >>> from shard_tutorial.checking.protocol import Program
          >>> Program(0, 8, memory={"temp": 64}, held_before=16).held()
          Held(memory={'temp': 64}, held_before=16, lines=())
        """
        return Held(self.memory, self.held_before, self.lines)

    def to_json(self) -> dict[str, Any]:
        """This program as JSON-ready data (for :func:`encode_answer`).

        Examples:
          >>> from shard_tutorial.checking.protocol import Program
          >>> data = Program(2, 8, True, ("psum", "shard_map"), lines=(("a.py", 5),)).to_json()
          >>> data["order"], data["primitives"], data["live"], data["lines"]
          (2, ['psum', 'shard_map'], None, [['a.py', 5]])
        """
        return {
            "order": self.order,
            "devices": self.devices,
            "shard_map": self.shard_map,
            "primitives": list(self.primitives),
            "live": None if self.live is None else list(self.live),
            "files": list(self.files),
            "lines": [list(line) for line in self.lines],
            "memory": dict(self.memory),
            "held_before": self.held_before,
            "text": self.text,
            "carries": list(self.carries),
        }

    @classmethod
    def from_json(cls, data: object) -> Program:
        """The program :meth:`to_json` described; ValueError if ``data`` is not one.

        Examples:
          >>> from shard_tutorial.checking.protocol import Program
          >>> data = Program(2, 8).to_json()
          >>> Program.from_json(data).devices
          8
          >>> Program.from_json({**data, "devices": 8.0})
          Traceback (most recent call last):
          ValueError: 'devices' is not an int of at least 0
        """
        found = _object(data)
        return cls(
            order=_int(found, "order"),
            devices=_int(found, "devices"),
            shard_map=_bool(found, "shard_map"),
            primitives=_strings(found, "primitives"),
            live=None if _get(found, "live") is None else _strings(found, "live"),
            files=_strings(found, "files"),
            lines=_lines(found),
            memory=_memory(found),
            held_before=_int(found, "held_before"),
            text=_str(found, "text"),
            carries=_strings(found, "carries"),
        )


@dataclasses.dataclass(frozen=True)
class Transfer:
    """One copy to the devices (a ``jax.device_put``) the answer depends on.

    Attributes:
      order: its place among the call's recorded events, from 0.
      host: whether it sent host data (a NumPy array, a Python number), not an array
        already on devices.
      line: the reader's line that asked for it, or None.
      received: the most bytes one device received from other devices
        (:func:`shard_tutorial.checking.recording.received_bytes`): what a copy from
        one layout to another sends, outside any program.
      carries: whether what it moved between devices is data the problem keeps on
        its devices.

    Examples:
      >>> from shard_tutorial.checking.protocol import Transfer
      >>> Transfer.from_json({"order": 2, "host": True, "line": ["answer.py", 7], "received": 0, "carries": False})
      Transfer(order=2, host=True, line=('answer.py', 7), received=0, carries=False)
    """

    order: int
    host: bool
    line: Line | None = None
    received: int = 0
    carries: bool = False

    def to_json(self) -> dict[str, Any]:
        """This copy as JSON-ready data (for :func:`encode_answer`).

        Examples:
          >>> from shard_tutorial.checking.protocol import Transfer
          >>> Transfer(1, False).to_json()
          {'order': 1, 'host': False, 'line': None, 'received': 0, 'carries': False}
        """
        return {
            "order": self.order,
            "host": self.host,
            "line": _line_json(self.line),
            "received": self.received,
            "carries": self.carries,
        }

    @classmethod
    def from_json(cls, data: object) -> Transfer:
        """The copy :meth:`to_json` described; ValueError if ``data`` is not one.

        Examples:
          >>> from shard_tutorial.checking.protocol import Transfer
          >>> Transfer.from_json({"order": 1, "host": False, "line": None, "received": 96, "carries": True})
          Transfer(order=1, host=False, line=None, received=96, carries=True)
          >>> Transfer.from_json({"order": 1, "host": False, "received": 0, "carries": False})
          Traceback (most recent call last):
          ValueError: no 'line'
        """
        found = _object(data)
        return cls(
            _int(found, "order"),
            _bool(found, "host"),
            _line(_get(found, "line")),
            _int(found, "received"),
            _bool(found, "carries"),
        )


@dataclasses.dataclass(frozen=True)
class MadeBy:
    """The recorded event that made one output array: a program or a copy.

    Attributes:
      order: the event's place among the call's recorded events, from 0.
      kind: ``"program"`` (see :attr:`How.programs`) or ``"copy"`` (see :attr:`How.copies`).

    Examples:
      >>> from shard_tutorial.checking.protocol import MadeBy
      >>> MadeBy.from_json({"order": 0, "kind": "copy"})
      MadeBy(order=0, kind='copy')
    """

    order: int
    kind: Literal["program", "copy"]

    def to_json(self) -> dict[str, Any]:
        """This record as JSON-ready data (for :func:`encode_answer`).

        Examples:
          >>> from shard_tutorial.checking.protocol import MadeBy
          >>> MadeBy(3, "program").to_json()
          {'order': 3, 'kind': 'program'}
        """
        return {"order": self.order, "kind": self.kind}

    @classmethod
    def from_json(cls, data: object) -> MadeBy:
        """The record :meth:`to_json` made; ValueError if ``data`` is not one.

        Examples:
          >>> from shard_tutorial.checking.protocol import MadeBy
          >>> MadeBy.from_json({"order": 3, "kind": "program"})
          MadeBy(order=3, kind='program')
          >>> MadeBy.from_json({"order": 3, "kind": "thread"})
          Traceback (most recent call last):
          ValueError: not a kind of event: 'thread'
        """
        found = _object(data)
        kind = _get(found, "kind")
        _check(kind in {"program", "copy"}, f"not a kind of event: {kind!r}")
        return cls(_int(found, "order"), "copy" if kind == "copy" else "program")


@dataclasses.dataclass(frozen=True)
class Candidate:
    """An array of the answer's lineage shaped like an output: where it may have been computed.

    Its values are in :attr:`Answer.candidates` (``nbytes`` of them, as float64), or,
    past the first few, only their :attr:`fingerprint`.

    Attributes:
      item: the output item it is shaped like (0 for a lone output).
      order: the place among the call's recorded events of the event that made or
        took it in.
      made: ``"host"`` (host data sent to the devices) or ``"program"`` (a program's result).
      devices: how many devices the program ran on (0 for host data).
      shape: its shape.
      nbytes: how many bytes of values it has in the payload (0: a fingerprint only).
      from_arguments: whether it was made from the call's arguments.
      line: the reader's line of the program or copy, or None.
      fingerprint: :func:`shard_tutorial.checking.digest.fingerprint` of its values,
        when they are not sent; else None.

    Examples:
      >>> from shard_tutorial.checking.protocol import Candidate
      >>> candidate = Candidate(0, 3, "program", 8, (4,), 32, True)
      >>> Candidate.from_json(candidate.to_json()) == candidate
      True
    """

    item: int
    order: int
    made: Literal["host", "program"]
    devices: int
    shape: tuple[int, ...]
    nbytes: int
    from_arguments: bool
    line: Line | None = None
    fingerprint: str | None = None

    def to_json(self) -> dict[str, Any]:
        """This candidate as JSON-ready data (for :func:`encode_answer`).

        Examples:
          >>> from shard_tutorial.checking.protocol import Candidate
          >>> data = Candidate(0, 1, "host", 0, (2, 3), 0, True, fingerprint="ab12").to_json()
          >>> data["shape"], data["nbytes"], data["fingerprint"]
          ([2, 3], 0, 'ab12')
        """
        data: dict[str, Any] = {
            "item": self.item, "order": self.order, "made": self.made, "devices": self.devices,
            "shape": list(self.shape), "nbytes": self.nbytes,
            "from_arguments": self.from_arguments, "line": _line_json(self.line),
        }  # fmt: skip
        if self.fingerprint is not None:
            data["fingerprint"] = self.fingerprint
        return data

    @classmethod
    def from_json(cls, data: object) -> Candidate:
        """The candidate :meth:`to_json` described; ValueError if ``data`` is not one.

        Examples:
          >>> from shard_tutorial.checking.protocol import Candidate
          >>> data = Candidate(0, 1, "program", 8, (4,), 32, True).to_json()
          >>> Candidate.from_json(data).shape
          (4,)
          >>> Candidate.from_json({**data, "shape": [-1]})
          Traceback (most recent call last):
          ValueError: not a count: -1
        """
        found = _object(data)
        made = _get(found, "made")
        _check(made in {"host", "program"}, f"not a maker: {made!r}")
        shape = tuple(_whole(n) for n in _list(found, "shape"))
        digest = found.get("fingerprint")
        _check(digest is None or isinstance(digest, str), "a fingerprint that is not a str")
        return cls(
            item=_int(found, "item"),
            order=_int(found, "order"),
            made="host" if made == "host" else "program",
            devices=_int(found, "devices"),
            shape=shape,
            nbytes=_whole(_get(found, "nbytes")),
            from_arguments=_bool(found, "from_arguments"),
            line=_line(_get(found, "line")),
            fingerprint=digest,
        )


@dataclasses.dataclass(frozen=True)
class How:
    """How an answer was made, as the worker recorded it during the call that returned it.

    Attributes:
      intact: whether the recorder's hooks in JAX stayed in place through the call
        (False: what it saw cannot be trusted, and the technique is not judged right).
      programs: the programs the answer depends on, in the order they ran.
      copies: the copies to the devices it depends on.
      unknown: how many arrays it depends on were made during the call where the
        recording could not see (another thread, a program compiled ahead of time).
      unknown_line: the reader's line of the first program or copy that took in such
        an array, or None.
      made_by: for each output array, the event that made it (None: neither a program
        nor a copy: an argument, or of unknown origin).
      candidates: arrays of the lineage shaped like an output, whose values the judge
        compares with the answer to find where it was first computed.
      limits: the problem's budget for the case (``"sent"``, ``"peak"``, ``"held"``,
        ``"growth"``: bytes per device), or None if it has none.
      grown: what one device held in each program of the answer to the budget's larger
        copy of the case (:func:`shard_tutorial.checking.worker.held_on`), for
        ``"growth"``; None if not asked.
      error: why how the answer was made is not known (the worker could not read it,
        or its report was garbled: :data:`GARBLED`); None if it is. Then the technique
        is not judged right.
      traced: the JAX primitives of every program the call ran, those the answer does
        not depend on included, sorted: where a case's compiled programs cannot show a
        collective (empty blocks, which XLA drops), an eager answer's collective ran
        as a program of its own whose empty result need not reach the answer.

    Examples:
      >>> from shard_tutorial.checking.protocol import How, MadeBy, Program
      >>> how = How(True, (Program(0, 8, True),), made_by=(MadeBy(0, "program"), None))
      >>> How.from_json(how.to_json()) == how, how.to_json()["made_by"]
      (True, [{'order': 0, 'kind': 'program'}, None])
      >>> How.from_json({"intact": True}).error
      "the worker's report on it was garbled"
    """

    intact: bool = False
    programs: tuple[Program, ...] = ()
    copies: tuple[Transfer, ...] = ()
    unknown: int = 0
    unknown_line: Line | None = None
    made_by: tuple[MadeBy | None, ...] = ()
    candidates: tuple[Candidate, ...] = ()
    limits: Mapping[str, float] | None = None
    grown: tuple[Held, ...] | None = None
    error: str | None = None
    traced: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """How as JSON-ready data (for :func:`encode_answer`): a dict of lists and numbers.

        ``"limits"``, ``"grown"`` and ``"error"`` are there only when set.

        Examples:
          >>> from shard_tutorial.checking.protocol import How
          >>> sorted(How(True).to_json())
          ['candidates', 'copies', 'intact', 'made_by', 'programs', 'traced', 'unknown', 'unknown_line']
          >>> How(error="no lineage", limits={"sent": 64.0}).to_json()["limits"]
          {'sent': 64.0}
        """
        data: dict[str, Any] = {
            "intact": self.intact,
            "programs": [program.to_json() for program in self.programs],
            "copies": [copy.to_json() for copy in self.copies],
            "unknown": self.unknown,
            "unknown_line": _line_json(self.unknown_line),
            "made_by": [None if m is None else m.to_json() for m in self.made_by],
            "candidates": [candidate.to_json() for candidate in self.candidates],
            "traced": list(self.traced),
        }
        if self.limits is not None:
            data["limits"] = dict(self.limits)
        if self.grown is not None:
            data["grown"] = [held.to_json() for held in self.grown]
        if self.error is not None:
            data["error"] = self.error
        return data

    @classmethod
    def from_json(cls, data: object) -> How:
        """The :class:`How` :meth:`to_json` described.

        Anything else (a field missing, or of the wrong type: the worker runs the
        solution's code, which may write what it likes) reads as a :class:`How` whose
        :attr:`error` is :data:`GARBLED`.

        Examples:
          >>> from shard_tutorial.checking.protocol import How
          >>> How.from_json(How(True, unknown=2).to_json()).unknown
          2
          >>> How.from_json({**How(True).to_json(), "unknown": "2"}).error
          "the worker's report on it was garbled"
        """
        try:
            found = _object(data)
            limits = found.get("limits")
            grown = found.get("grown")
            error = found.get("error")
            _check(error is None or isinstance(error, str), "an error that is not a str")
            return cls(
                intact=_bool(found, "intact"),
                programs=tuple(Program.from_json(p) for p in _list(found, "programs")),
                copies=tuple(Transfer.from_json(c) for c in _list(found, "copies")),
                unknown=_int(found, "unknown"),
                unknown_line=_line(_get(found, "unknown_line")),
                made_by=tuple(
                    None if m is None else MadeBy.from_json(m) for m in _list(found, "made_by")
                ),
                candidates=tuple(Candidate.from_json(c) for c in _list(found, "candidates")),
                limits=None if limits is None else _limits(limits),
                grown=None if grown is None else tuple(Held.from_json(h) for h in _sequence(grown)),
                error=error,
                traced=_strings(found, "traced"),
            )
        except (ValueError, TypeError):
            return cls(error=GARBLED)


@dataclasses.dataclass(frozen=True)
class Shard:
    """One block of a ``jax.Array`` that a process of a cluster holds, as it sends it.

    Attributes:
      index: where the block lies in the array: ``(start, stop)`` per axis.
      nbytes: how many bytes of values it has in the payload, after the blocks before it.

    Examples:
      >>> from shard_tutorial.checking.protocol import Shard
      >>> shard = Shard(((0, 4), (0, 2)), 32)
      >>> Shard.from_json(shard.to_json()) == shard, shard.to_json()["index"]
      (True, [[0, 4], [0, 2]])
    """

    index: tuple[tuple[int, int], ...]
    nbytes: int

    def to_json(self) -> dict[str, Any]:
        """This block as JSON-ready data (for :func:`encode_answer`).

        Examples:
          >>> from shard_tutorial.checking.protocol import Shard
          >>> Shard(((4, 8),), 16).to_json()
          {'index': [[4, 8]], 'nbytes': 16}
        """
        return {"index": [list(pair) for pair in self.index], "nbytes": self.nbytes}

    @classmethod
    def from_json(cls, data: object) -> Shard:
        """The block :meth:`to_json` described; ValueError if ``data`` is not one.

        Examples:
          >>> from shard_tutorial.checking.protocol import Shard
          >>> Shard.from_json({"index": [[4, 8]], "nbytes": 16})
          Shard(index=((4, 8),), nbytes=16)
          >>> Shard.from_json({"index": [[8, 4]], "nbytes": 16})
          Traceback (most recent call last):
          ValueError: a block from 8 to 4
        """
        found = _object(data)
        index = []
        for value in _list(found, "index"):
            pair = _sequence(value)
            _check(len(pair) == 2, "not a (start, stop) pair")
            start, stop = _whole(pair[0]), _whole(pair[1])
            _check(start <= stop, f"a block from {start} to {stop}")
            index.append((start, stop))
        return cls(tuple(index), _int(found, "nbytes"))


@dataclasses.dataclass(frozen=True)
class Output:
    """What a solution returned, as the worker describes it; its values are sent apart.

    Made by :func:`shard_tutorial.checking.worker.describe_output`. Only ``kind`` is
    always there; the other fields are None (False) where they do not apply.

    Attributes:
      kind: what it is: ``"jax.Array"``, ``"numpy"`` (a NumPy array or scalar),
        ``"array of <dtype>"`` (an array of objects, text or dates, whose values are
        not sent), else its Python type's name (``"tuple"``, ``"NoneType"``, ``"int"``).
      dtype: an array's dtype, by name.
      shape: an array's shape.
      split: a ``jax.Array``'s layout: for each axis, how many blocks the devices hold.
      devices: how many devices hold a part of a ``jax.Array``.
      replicas_differ: whether two devices hold different values for the same block (an
        output that ``out_specs`` calls replicated but that the devices computed
        differently, which ``check_vma=False`` lets through).
      length: a tuple's or a list's length.
      items: a tuple's or a list's items (of at most
        :data:`~shard_tutorial.checking.worker.MAX_ITEMS`), each with its ``nbytes``:
        their values follow one another. None: not described item by item.
      nbytes: an item's number of bytes of values.
      repr: a Python number's or str's ``repr``, cut to 40 characters.
      problem: what describing it raised (an object whose methods raise), if it did.
      shards: on a cluster, the blocks of a ``jax.Array`` this process holds, each
        once, in the order of their values.
      device_ids: on a cluster, the devices (of every process) a ``jax.Array`` lies on.
      error: why the description is not known (its report was garbled:
        :data:`GARBLED`); None if it is. Then the output is not judged right.

    Examples:
      >>> from shard_tutorial.checking.protocol import Output
      >>> array = Output("jax.Array", "float32", (4,), (2,), 2, nbytes=16)
      >>> pair = Output("tuple", length=2, items=(array, Output("int", repr="1", nbytes=0)))
      >>> Output.from_json(pair.to_json()) == pair, pair.to_json()["items"][1]
      (True, {'kind': 'int', 'repr': '1', 'nbytes': 0})
      >>> Output.from_json({"kind": "jax.Array", "dtype": "float32", "shape": [4]})
      Traceback (most recent call last):
      ValueError: a jax.Array with no split or no devices
    """

    kind: str
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    split: tuple[int, ...] | None = None
    devices: int | None = None
    replicas_differ: bool = False
    length: int | None = None
    items: tuple[Output, ...] | None = None
    nbytes: int | None = None
    repr: str | None = None
    problem: str | None = None
    shards: tuple[Shard, ...] | None = None
    device_ids: tuple[int, ...] | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The description as JSON-ready data (for :func:`encode_answer`): only what is there.

        Examples:
          >>> from shard_tutorial.checking.protocol import Output
          >>> Output("jax.Array", "float32", (3,), (1,), 1).to_json()
          {'kind': 'jax.Array', 'dtype': 'float32', 'shape': [3], 'split': [1], 'devices': 1}
          >>> Output("NoneType").to_json()
          {'kind': 'NoneType'}
        """
        data: dict[str, Any] = {"kind": self.kind}
        for key in ("length", "repr", "problem", "dtype"):
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        for key in ("shape", "split"):
            if getattr(self, key) is not None:
                data[key] = list(getattr(self, key))
        if self.devices is not None:
            data["devices"] = self.devices
        if self.device_ids is not None:
            data["device_ids"] = list(self.device_ids)
        if self.replicas_differ:
            data["replicas_differ"] = True
        if self.shards is not None:
            data["shards"] = [shard.to_json() for shard in self.shards]
        if self.items is not None:
            data["items"] = [item.to_json() for item in self.items]
        if self.nbytes is not None:
            data["nbytes"] = self.nbytes
        if self.error is not None:
            data["error"] = self.error
        return data

    @classmethod
    def from_json(cls, data: object) -> Output:
        """The description :meth:`to_json` made; ValueError if ``data`` is not one.

        Besides each field's type, what the judge relies on is checked: an array has
        a dtype and a shape, a ``jax.Array`` its split (one per axis) and devices; an
        item has its ``nbytes`` and no items of its own; a block lies inside its array.

        Examples:
          >>> from shard_tutorial.checking.protocol import Output
          >>> listed = Output.from_json({"kind": "list", "length": 40})
          >>> listed.kind, listed.length, listed.items, listed.shape
          ('list', 40, None, None)
          >>> Output.from_json({"kind": "numpy", "dtype": "int32", "shape": ["2"]})
          Traceback (most recent call last):
          ValueError: not a count: '2'
        """
        found = _object(data)
        items = _optional(found, "items", _sequence)
        shards = _optional(found, "shards", _sequence)
        output = cls(
            kind=_str(found, "kind"),
            dtype=_optional(found, "dtype", _text),
            shape=_optional(found, "shape", _counts),
            split=_optional(found, "split", _counts),
            devices=_optional(found, "devices", _whole),
            replicas_differ=_optional(found, "replicas_differ", _truth) or False,
            length=_optional(found, "length", _whole),
            items=None if items is None else tuple(map(_item, items)),
            nbytes=_optional(found, "nbytes", _whole),
            repr=_optional(found, "repr", _text),
            problem=_optional(found, "problem", _text),
            shards=None if shards is None else tuple(map(Shard.from_json, shards)),
            device_ids=_optional(found, "device_ids", _counts),
            error=_optional(found, "error", _text),
        )
        _check_output(output)
        return output


@dataclasses.dataclass(frozen=True)
class Answer:
    """What a solution returned for one case, and how it was made, as the worker saw it.

    Attributes:
      output: the output's :class:`Output` description
        (:func:`shard_tutorial.checking.worker.describe_output`): its kind, dtype, shape,
        layout, and for a tuple its items.
      values: the output's values, as ``output`` lays them out.
      how: how it was made (:func:`shard_tutorial.checking.worker.describe_lineage`): the
        programs the call ran, the copies from the host, the candidate arrays; None if
        not known (then the technique is not judged: an answer made in the checker's
        own process; a worker's report always says how, or is garbled).
      candidates: the values of the candidate arrays ``how`` lists, one after another.
      seconds: how long the call took, or None.
    """

    output: Output
    values: bytes
    how: How | None = None
    candidates: bytes = b""
    seconds: float | None = None


@dataclasses.dataclass(frozen=True)
class Raised:
    """What a solution raised for one case, as the worker saw it, in place of an :class:`Answer`.

    Attributes:
      message: the error's type and message, a hint where one helps, and the reader's
        own frames (:func:`shard_tutorial.checking.worker.describe_exception`).
      memory: whether it says the process ran out of memory (the checker's limit).
      types: the names of its class and of the classes it derives from, nearest
        first: for an input the statement refuses, whether it is the error asked for.
      error: why what was raised is not known (its report was garbled:
        :data:`GARBLED`); None if it is. Then it is not judged the error asked for.

    Examples:
      >>> from shard_tutorial.checking.protocol import Raised
      >>> raised = Raised("ValueError: no", False, ("ValueError", "Exception"))
      >>> Raised.from_json(raised.to_json()) == raised, raised.to_json()["types"]
      (True, ['ValueError', 'Exception'])
      >>> Raised.from_json({"message": "ValueError: no", "memory": "no", "types": []}).error
      "the worker's report on it was garbled"
    """

    message: str = ""
    memory: bool = False
    types: tuple[str, ...] = ()
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """This error as JSON-ready data (for :func:`encode_raised`); ``"error"`` only when set.

        Examples:
          >>> from shard_tutorial.checking.protocol import Raised
          >>> Raised("MemoryError", True, ("MemoryError",)).to_json()
          {'message': 'MemoryError', 'memory': True, 'types': ['MemoryError']}
        """
        data: dict[str, Any] = {
            "message": self.message,
            "memory": self.memory,
            "types": list(self.types),
        }
        if self.error is not None:
            data["error"] = self.error
        return data

    @classmethod
    def from_json(cls, data: object) -> Raised:
        """The :class:`Raised` :meth:`to_json` described.

        Anything else (a field missing, or of the wrong type) reads as a
        :class:`Raised` whose :attr:`error` is :data:`GARBLED`.

        Examples:
          >>> from shard_tutorial.checking.protocol import Raised
          >>> Raised.from_json({"message": "ZeroDivisionError", "memory": False, "types": []})
          Raised(message='ZeroDivisionError', memory=False, types=(), error=None)
          >>> Raised.from_json({"memory": False, "types": []}).error
          "the worker's report on it was garbled"
        """
        try:
            found = _object(data)
            return cls(
                message=_str(found, "message"),
                memory=_bool(found, "memory"),
                types=_strings(found, "types"),
                error=_optional(found, "error", _text),
            )
        except (ValueError, TypeError):
            return cls(error=GARBLED)


def encode_answer(answer: Answer) -> tuple[dict[str, Any], bytes]:
    """The worker's report of ``answer``: its event (JSON-ready) and its payload.

    See the module's example for the round trip with :func:`decode_answer`.
    """
    event: dict[str, Any] = {
        "event": "output",
        "output": answer.output.to_json(),
        "how": None if answer.how is None else answer.how.to_json(),
        "how_nbytes": len(answer.candidates),
    }
    if answer.seconds is not None:
        event["seconds"] = answer.seconds
    return event, answer.values + answer.candidates


def decode_answer(event: dict[str, Any], payload: bytes) -> Answer:
    """The :class:`Answer` an ``"output"`` event and its payload report.

    A report whose sizes do not add up is read as the output's values, with a ``how``
    that says the report was garbled (the technique is then not judged as right); so
    is one whose ``how`` is missing, or not as :meth:`How.to_json` makes it. An
    ``output`` that is missing, not as :meth:`Output.to_json` makes it, or whose
    items' or blocks' sizes do not add up to its values', is read as an
    :class:`Output` that says it was garbled (the output is then not judged as right).

    Examples:
      >>> from shard_tutorial.checking.protocol import decode_answer
      >>> decode_answer({"output": {"kind": "int"}, "how": {}, "how_nbytes": 9}, b"").how.error
      "the worker's report on it was garbled"
      >>> decode_answer({"output": {"kind": "int"}, "how": None, "how_nbytes": 0}, b"").how.error
      "the worker's report on it was garbled"
      >>> decode_answer({"output": {}, "how": None, "how_nbytes": 0}, b"").output.error
      "the worker's report on it was garbled"
      >>> items = [{"kind": "numpy", "dtype": "int8", "shape": [2], "nbytes": 3}]
      >>> event = {"output": {"kind": "tuple", "length": 1, "items": items}, "how_nbytes": 0}
      >>> decode_answer(event, b"12").output.error  # 3 bytes said, 2 sent
      "the worker's report on it was garbled"
    """
    seconds = event.get("seconds")
    seconds = float(seconds) if isinstance(seconds, int | float) else None
    extra = event.get("how_nbytes", 0)
    if isinstance(extra, bool) or not isinstance(extra, int) or not 0 <= extra <= len(payload):
        output = _output(event.get("output"), len(payload))
        return Answer(output, payload, How(error=GARBLED), b"", seconds)
    cut = len(payload) - extra
    output = _output(event.get("output"), cut)
    return Answer(output, payload[:cut], How.from_json(event.get("how")), payload[cut:], seconds)


def encode_raised(raised: Raised) -> dict[str, Any]:
    """The worker's report of an error the solution raised: its event (JSON-ready), no payload.

    Examples:
      >>> from shard_tutorial.checking.protocol import Raised, decode_raised, encode_raised
      >>> raised = Raised("ZeroDivisionError: division by zero", False, ("ZeroDivisionError",))
      >>> event = encode_raised(raised)
      >>> event["event"], event["memory"], decode_raised(event).types
      ('raised', False, ('ZeroDivisionError',))
    """
    return {"event": "raised", **raised.to_json()}


def decode_raised(event: dict[str, Any]) -> Raised:
    """The :class:`Raised` a ``"raised"`` event reports; a garbled one if it is not as sent.

    Examples:
      >>> from shard_tutorial.checking.protocol import decode_raised
      >>> decode_raised({"event": "raised", "message": "boom", "memory": False, "types": ["E"]})
      Raised(message='boom', memory=False, types=('E',), error=None)
      >>> decode_raised({"event": "raised", "message": "boom", "memory": 0, "types": ["E"]}).error
      "the worker's report on it was garbled"
    """
    return Raised.from_json(event)


def _output(data: object, size: int) -> Output:
    """The :class:`Output` ``data`` describes, of ``size`` bytes of values; a garbled one if not."""
    try:
        output = Output.from_json(data)
        _check(_fits(output, size), "values of other sizes than the description's")
    except (ValueError, TypeError):
        return Output("", error=GARBLED)
    return output


def _fits(output: Output, size: int) -> bool:
    """Whether ``output``'s items, or its blocks, account for its ``size`` bytes of values."""
    if output.items is not None:
        sizes = [cast("int", item.nbytes) for item in output.items]  # an item has its nbytes
        fits = all(_fits(item, n) for item, n in zip(output.items, sizes, strict=True))
        return fits and sum(sizes) == size
    if output.shards is not None:
        return sum(shard.nbytes for shard in output.shards) == size
    return True


# Reading the worker's JSON: each raises ValueError on what a genuine worker never sends.


def _check(ok: bool, why: str) -> None:
    """Raise ValueError(why) unless ``ok``: the report is not as the worker writes it."""
    if not ok:
        raise ValueError(why)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _object(data: object) -> dict[str, Any]:
    """``data`` if it is a JSON object."""
    _check(isinstance(data, dict), "not an object")
    return cast("dict[str, Any]", data)


def _get(data: dict[str, Any], key: str) -> Any:
    """``data[key]``, which must be there (it may be null)."""
    _check(key in data, f"no {key!r}")
    return data[key]


def _sequence(value: object) -> list[Any] | tuple[Any, ...]:
    """``value`` if it is a JSON array."""
    _check(isinstance(value, list | tuple), "not an array")
    return cast("list[Any]", value)


def _list(data: dict[str, Any], key: str) -> list[Any] | tuple[Any, ...]:
    return _sequence(_get(data, key))


def _whole(value: object) -> int:
    """``value`` if it is an int (not a bool) of at least 0."""
    _check(_is_int(value) and cast("int", value) >= 0, f"not a count: {value!r}")
    return cast("int", value)


def _int(data: dict[str, Any], key: str) -> int:
    """``data[key]``, a count or an index: an int (not a bool) of at least 0."""
    value = _get(data, key)
    _check(_is_int(value) and cast("int", value) >= 0, f"{key!r} is not an int of at least 0")
    return cast("int", value)


def _bool(data: dict[str, Any], key: str) -> bool:
    value = _get(data, key)
    _check(isinstance(value, bool), f"{key!r} is not a bool")
    return cast("bool", value)


def _str(data: dict[str, Any], key: str) -> str:
    value = _get(data, key)
    _check(isinstance(value, str), f"{key!r} is not a str")
    return cast("str", value)


def _strings(data: dict[str, Any], key: str) -> tuple[str, ...]:
    values = tuple(_list(data, key))
    _check(all(isinstance(value, str) for value in values), f"{key!r} holds a non-str")
    return values


def _line(value: object) -> Line | None:
    """A reader's line, ``[file, line]`` on the wire, or None (null)."""
    if value is None:
        return None
    found = _sequence(value)
    _check(len(found) == 2 and isinstance(found[0], str) and _is_int(found[1]), "not a line")
    return found[0], found[1]


def _line_json(line: Line | None) -> list[Any] | None:
    return None if line is None else list(line)


def _lines(data: dict[str, Any]) -> tuple[Line, ...]:
    lines = []
    for value in _list(data, "lines"):
        line = _line(value)
        _check(line is not None, "a null line")
        lines.append(cast("Line", line))
    return tuple(lines)


def _memory(data: dict[str, Any]) -> dict[str, int]:
    memory = _object(_get(data, "memory"))
    _check(all(map(_is_int, memory.values())), "a number of bytes that is not an int")
    return dict(memory)


def _limits(value: object) -> dict[str, float]:
    limits = _object(value)
    real = [isinstance(v, numbers.Real) and not isinstance(v, bool) for v in limits.values()]
    _check(all(real), "a limit that is not a number")
    return {str(key): float(limit) for key, limit in limits.items()}


def _optional(data: dict[str, Any], key: str, read: Callable[[Any], _T]) -> _T | None:
    """``read(data[key])``, or None where the key is not there (or null)."""
    value = data.get(key)
    return None if value is None else read(value)


def _text(value: object) -> str:
    _check(isinstance(value, str), f"not a str: {value!r}")
    return cast("str", value)


def _truth(value: object) -> bool:
    _check(isinstance(value, bool), f"not a bool: {value!r}")
    return cast("bool", value)


def _counts(value: object) -> tuple[int, ...]:
    """``value`` if it is a JSON array of counts (a shape, a split, device ids)."""
    return tuple(_whole(n) for n in _sequence(value))


def _item(value: object) -> Output:
    """An item of a tuple or list: an :class:`Output` with its ``nbytes``, no items of its own."""
    _check("items" not in _object(value), "an item with items of its own")
    item = Output.from_json(value)
    _check(item.nbytes is not None, "an item with no nbytes")
    return item


def _check_output(output: Output) -> None:
    """Raise ValueError where ``output`` lacks what the judge reads of its kind."""
    if output.kind in {"jax.Array", "numpy"}:
        _check(output.dtype is not None and output.shape is not None, "an array with no shape")
    shape = output.shape or ()
    if output.kind == "jax.Array":
        split, devices = output.split, output.devices
        _check(split is not None and devices is not None, "a jax.Array with no split or no devices")
        _check(len(cast("tuple[int, ...]", split)) == len(shape), "a split of another length")
    if output.shards is not None:
        _check(output.kind == "jax.Array", "blocks of something other than a jax.Array")
        _check(output.device_ids is not None, "blocks with no device ids")
        for shard in output.shards:
            inside = len(shard.index) == len(shape) and all(
                stop <= n for (_, stop), n in zip(shard.index, shape, strict=True)
            )
            _check(inside, "a block outside its array")
