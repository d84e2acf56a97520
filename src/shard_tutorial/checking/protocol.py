r"""What a worker sends the checker about one answer, and the verdicts the judge gives.

The worker (:mod:`shard_tutorial.checking.worker`) runs the solution and describes what
it returned as plain data; the judge (:mod:`shard_tutorial.checking.judge`) reads that
description in the checker's process. On the pipe between them an answer is one
report: a line of JSON (the event) and raw bytes (the payload). :func:`encode_answer`
makes the report from an :class:`Answer`, on the worker's side, and
:func:`decode_answer` makes the :class:`Answer` back, on the checker's side: the only
two places that know how the payload is laid out (the output's values, then the values
of the candidate arrays that ``how`` lists, ``"how_nbytes"`` of them).

A verdict is one :class:`Verdict` and one message.

Examples:
  >>> from shard_tutorial.checking.protocol import Answer, decode_answer, encode_answer
  >>> sent = Answer({"kind": "jax.Array", "nbytes": 4}, b"\x00\x00\x80?",
  ...               {"intact": True, "programs": []}, b"\x01\x02", seconds=0.5)
  >>> event, payload = encode_answer(sent)
  >>> event["how_nbytes"], payload
  (2, b'\x00\x00\x80?\x01\x02')
  >>> decode_answer(event, payload) == sent
  True
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

__all__ = ["Answer", "Verdict", "decode_answer", "encode_answer"]


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


@dataclasses.dataclass(frozen=True)
class Answer:
    """What a solution returned for one case, and how it was made, as the worker saw it.

    Attributes:
      output: the output's description (:func:`shard_tutorial.checking.worker.describe_output`):
        its kind, dtype, shape, layout, and for a tuple its items.
      values: the output's values, as ``output`` lays them out.
      how: how it was made (:func:`shard_tutorial.checking.worker.describe_lineage`): the
        programs the call ran, the copies from the host, the candidate arrays; None if
        not known (then the technique is not judged).
      candidates: the values of the candidate arrays ``how`` lists, one after another.
      seconds: how long the call took, or None.
    """

    output: dict[str, Any]
    values: bytes
    how: dict[str, Any] | None = None
    candidates: bytes = b""
    seconds: float | None = None


def encode_answer(answer: Answer) -> tuple[dict[str, Any], bytes]:
    """The worker's report of ``answer``: its event (JSON-ready) and its payload.

    See the module's example for the round trip with :func:`decode_answer`.
    """
    event: dict[str, Any] = {
        "event": "output",
        "output": answer.output,
        "how": answer.how,
        "how_nbytes": len(answer.candidates),
    }
    if answer.seconds is not None:
        event["seconds"] = answer.seconds
    return event, answer.values + answer.candidates


def decode_answer(event: dict[str, Any], payload: bytes) -> Answer:
    """The :class:`Answer` an ``"output"`` event and its payload report.

    A report whose sizes do not add up is read as the output's values, with a ``how``
    that says the report was garbled (the technique is then not judged as right).

    Examples:
      >>> from shard_tutorial.checking.protocol import decode_answer
      >>> decode_answer({"output": {}, "how": {}, "how_nbytes": 9}, b"1234").how
      {'error': "the worker's report on it was garbled"}
    """
    how = event.get("how")
    extra = int(event.get("how_nbytes", 0)) if isinstance(how, dict) else 0
    seconds = event.get("seconds")
    seconds = float(seconds) if isinstance(seconds, int | float) else None
    output = event.get("output")
    output = output if isinstance(output, dict) else {}
    if not 0 <= extra <= len(payload):
        return Answer(
            output, payload, {"error": "the worker's report on it was garbled"}, b"", seconds
        )
    cut = len(payload) - extra
    return Answer(
        output, payload[:cut], how if isinstance(how, dict) else None, payload[cut:], seconds
    )
