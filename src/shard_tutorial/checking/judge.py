"""Judge what a solution returned: its values, then how and where it computed them.

The judge runs in the checker's own process, where the solution's code never ran,
and holds the problem's oracle. It reads only what a worker reported
(:func:`shard_tutorial.checking.worker.answer`), decoded into the records of
:mod:`shard_tutorial.checking.protocol`: the error the solution raised (a
:class:`~shard_tutorial.checking.protocol.Raised`), or the output's values and layout
(an :class:`~shard_tutorial.checking.protocol.Output`), and
how the output was made (a :class:`~shard_tutorial.checking.protocol.How`),
recorded during the very call that returned it: the XLA
programs it depends on (their collectives, read by :mod:`shard_tutorial.compiled`,
and their device counts), copies from the host, and earlier arrays shaped like the
answer. In order:

1. values: the oracle's, within the dtype's rounding (:meth:`Problem.diagnose`);
2. whose code: an answer computed by the package's own reference is not the reader's;
3. where: the answer must be computed on the devices of the contract's mesh, not on
   the host or on fewer devices, and must lie on them;
4. how: with ``jax.shard_map``, and the collectives the problem practises
   (:class:`~shard_tutorial.problem.Technique`), from code inside ``shard_map``,
   over more than one device, and none of those it forbids;
5. cost: within the problem's budget of bytes sent and held per device
   (:class:`~shard_tutorial.problem.Budget`);
6. layout: split over the devices as the contract says
   (:class:`~shard_tutorial.problem.Placement`).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from shard_tutorial.checking.assembly import Disagree, array, combine, items, own
from shard_tutorial.checking.digest import fingerprint
from shard_tutorial.checking.protocol import (
    Answer,
    Candidate,
    Held,
    How,
    Line,
    Output,
    Program,
    Raised,
    Transfer,
    Verdict,
)
from shard_tutorial.checking.report import RAN, RAN_NO_COLLECTIVE, explained
from shard_tutorial.collective_costs import sent_by, uncounted
from shard_tutorial.compiled import Collective, Frame, host_callbacks, parse_collectives
from shard_tutorial.problem import (
    KINDS_IN_WORDS,
    Budget,
    Case,
    Problem,
    Technique,
    precise,
)

__all__ = ["judge", "judge_cluster", "judge_raised", "judge_refusal"]

# The JAX primitives that compile to each collective (jax 0.10 and 0.12).
_PRIMITIVES_OF_KIND = {
    "all-reduce": {"psum", "psum2", "psum_invariant", "pmax", "pmin"},
    "all-gather": {"all_gather", "all_gather_invariant"},
    "reduce-scatter": {"psum_scatter", "reduce_scatter"},
    "collective-permute": {"ppermute", "pshuffle"},
    "all-to-all": {"all_to_all", "ragged_all_to_all"},
}

_KIND_OF_PRIMITIVE = {p: kind for kind, names in _PRIMITIVES_OF_KIND.items() for p in names}
# The jax.lax function a reader called for each collective primitive.
_FUNCTION_OF_PRIMITIVE = {
    "all_gather_invariant": "all_gather",
    "psum2": "psum",
    "psum_invariant": "psum",
    "pshuffle": "ppermute",
    "reduce_scatter": "psum_scatter",
}


def judge_raised(raised: Raised) -> tuple[Verdict, str]:
    """The verdict on a case whose call raised (an input the statement does not refuse).

    Args:
      raised: what the worker reported
        (:func:`~shard_tutorial.checking.protocol.decode_raised`).

    Returns:
      ``("error", message)`` with the error's message; ``("memory", message)`` where it
      says the process ran out of memory (the checker adds its limit); ``("error",
      ...)`` saying so where the report was garbled.

    Examples:
      >>> from shard_tutorial.checking.judge import judge_raised
      >>> from shard_tutorial.checking.protocol import GARBLED, Raised
      >>> judge_raised(Raised("ZeroDivisionError: division by zero", False, ("ZeroDivisionError",)))
      ('error', 'ZeroDivisionError: division by zero')
      >>> judge_raised(Raised(error=GARBLED))
      ('error', "raised an error the checker could not read: the worker's report on it was garbled")
    """
    if raised.error is not None:
        return Verdict.ERROR, f"raised an error the checker could not read: {raised.error}"
    return (Verdict.MEMORY if raised.memory else Verdict.ERROR), raised.message


def judge_refusal(case: Case, made: Answer | Raised) -> tuple[Verdict, str]:
    """The verdict on an answer to an input the statement refuses (``case.raises``).

    Args:
      case: a refusal (:attr:`shard_tutorial.problem.Problem.refusals`).
      made: what the worker reported: a :class:`~shard_tutorial.checking.protocol.Raised`
        with the error's ``types`` (its class and the classes it derives from, by
        name) and ``message``, or an :class:`~shard_tutorial.checking.protocol.Answer`.

    Returns:
      ``("pass", "")`` if the answer raised the error the statement names (or
      one derived from it); else ``("fail", ...)`` saying what it did instead, or
      that the report of what it raised was garbled.

    Examples:
      >>> from shard_tutorial.checking.judge import judge_refusal
      >>> from shard_tutorial.checking.protocol import Answer, Output, Raised
      >>> from shard_tutorial.problem import Case
      >>> case = Case("a fractional seed", (3.5,), raises="ValueError")
      >>> judge_refusal(case, Answer(Output("int", repr="3"), b""))[0]
      'fail'
      >>> judge_refusal(case, Raised("ValueError: no", False, ("ValueError", "Exception")))
      ('pass', '')
    """
    wanted = case.raises
    asked = f"the statement's Raises section asks for {wanted} ({case.label})"
    if not isinstance(made, Raised):
        return Verdict.FAIL, (
            f"returned a value where {asked}: check the arguments before computing with them"
        )
    if made.error is not None:
        return Verdict.FAIL, (
            f"raised an error where {asked}, but the checker could not read which: {made.error}"
        )
    types = made.types
    if wanted in types:
        return Verdict.PASS, ""  # a plain pass: nothing of the case went unjudged
    return Verdict.FAIL, f"raised {types[0] if types else 'an error'} where {asked}: {made.message}"


def judge_cluster(
    problem: Problem, case: Case, answers: Sequence[Answer], devices: int
) -> tuple[Verdict, str]:
    """The verdict on ``case`` from what each process of a cluster returned.

    How the answer was made is read from process 0's (every process runs the same
    programs).

    Arrays are put back together from every process' shards (no collective ran to
    gather them) and judged as one, item by item for a tuple; anything else is
    judged process by process.
    """
    outputs = [answer.output for answer in answers]
    payloads = [answer.values for answer in answers]
    count = len(outputs)
    for process, output in enumerate(outputs):
        if output.error is not None:
            return Verdict.FAIL, f"process {process} of {count}: {_unread(output)}"

    def judged(output: Output, values: bytes) -> tuple[Verdict, str]:
        # How, and its candidates, are process 0's.
        made = dataclasses.replace(answers[0], output=output, values=values)
        return judge(problem, case, made, devices)

    names = problem.outputs
    tuples = [o.items for o in outputs if o.items is not None]
    lengths = {len(t) for t in tuples}
    if names and len(tuples) == count and len(lengths) == 1:
        parts = [items(o, p) for o, p in zip(outputs, payloads, strict=True)]
        combined = [
            combine([t[k] for t in tuples], [p[k] for p in parts]) for k in range(lengths.pop())
        ]
        for k, result in enumerate(combined):
            if isinstance(result, str):
                return Verdict.FAIL, f"{names[k] if k < len(names) else f'item {k}'}: {result}"
        if all(result is not None for result in combined):
            parts_ = [result for result in combined if isinstance(result, tuple)]
            whole = dataclasses.replace(outputs[0], items=tuple(item for item, _ in parts_))
            return judged(whole, b"".join(d for _, d in parts_))
    elif not names:
        result = combine(outputs, payloads)
        if isinstance(result, str):
            return Verdict.FAIL, result
        if result is not None:
            return judged(result[0], result[1])
    for process, (output, payload) in enumerate(zip(outputs, payloads, strict=True)):
        try:
            status, message = judged(*own(output, payload))
        except Disagree as error:
            status, message = Verdict.FAIL, str(error)
        if status != Verdict.PASS:
            return status, f"process {process} of {count}: {message}"
    return Verdict.PASS, ""


def judge(problem: Problem, case: Case, answer: Answer, devices: int) -> tuple[Verdict, str]:
    """The verdict on what a solution returned for ``case``: a status and a message.

    Args:
      problem: the problem.
      case: the case that was run.
      answer: what the worker reported (:func:`~shard_tutorial.checking.protocol.decode_answer`):
        the output's description and values, and how it was made (``answer.how``, a
        :class:`~shard_tutorial.checking.protocol.How`; None: not judged) with the
        values of the candidates it lists.
      devices: the run's device count, which decides the mesh the contract asks for.

    Returns:
      ``("pass", "")``; ``("pass", why)`` where the case cannot show the technique
      (one device, an empty array, a case the problem names in
      :attr:`~shard_tutorial.problem.Technique.hidden`), judged on its values,
      where and by whose code they were made, and its layout; or a status
      (``"fail"``, ``"technique"``, ``"placement"``, ``"reference"``,
      ``"budget"``) and one or more sentences. An output whose report was garbled
      (:attr:`~shard_tutorial.checking.protocol.Output.error`) is ``"fail"``.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial.checking.worker import answer
      >>> from shard_tutorial.checking.judge import judge
      >>> from shard_tutorial.checking.protocol import decode_answer
      >>> from shard_tutorial.problems import get_problem
      >>> psum = get_problem("shard_map_psum")
      >>> case = psum.cases[0]
      >>> event, data = answer(jnp.sum, psum.arranged(case))
      >>> status, message = judge(psum, case, decode_answer(event, data), 1)
      >>> status, message.split(":")[0]
      ('technique', 'right values, computed with jax.numpy or jax.jit, not with jax.shard_map')
    """
    if answer.output.error is not None:
        return Verdict.FAIL, _unread(answer.output)
    labelled = _labelled(problem, answer)
    if isinstance(labelled, str):
        return Verdict.FAIL, labelled
    arrays = _arrays(labelled)
    if isinstance(arrays, str):
        return Verdict.FAIL, arrays
    wrong = _judge_values(problem, case, labelled, arrays, answer.how, devices)
    if wrong is not None:
        return Verdict.FAIL, wrong
    note = ""
    if answer.how is not None:
        with jax.enable_x64(False):
            expected = problem.expected(case, devices)
        verdict = _judge_how(
            problem, case, [item for _, item, _ in labelled],
            list(expected) if problem.outputs else [expected], devices, answer.how,
            answer.candidates, arrays,
        )  # fmt: skip
        if verdict is not None and verdict[0] != Verdict.PASS:
            return verdict
        note = verdict[1] if verdict is not None else ""
    misplaced = _judge_placement(problem, case, labelled, devices)
    if misplaced is not None:
        return Verdict.PLACEMENT, misplaced
    return Verdict.PASS, note


_Labelled = list[tuple[str, Output, bytes]]
"""An answer's outputs: each one's name (empty for a single output), description and values."""


def _labelled(problem: Problem, answer: Answer) -> _Labelled | str:
    """The answer's outputs, named as the problem names them; or why they cannot be."""
    output, payload = answer.output, answer.values
    names = problem.outputs
    if not names:
        return [("", output, payload)]
    wanted = f"the tuple ({', '.join(names)})"
    if output.items is None:
        return _not_an_array(output).split(", not an array")[0] + f", not {wanted}"
    if len(output.items) != len(names):
        return f"returned a {output.kind} of {len(output.items)} items, not {wanted}"
    return list(zip(names, output.items, items(output, payload), strict=True))


def _arrays(labelled: _Labelled) -> list[np.ndarray] | str:
    """Each output's values as a NumPy array; or why one is not an array of numbers."""
    arrays = []
    for name, item, data in labelled:
        if item.kind not in {"jax.Array", "numpy"}:
            return _named(name, _not_an_array(item))
        try:
            arrays.append(array(item, data))
        except ValueError:
            return _named(name, (
                f"returned an array of {item.dtype}, which is not a dtype of numbers "
                "(nor of the size its shape says)"
            ))  # fmt: skip
    return arrays


def _judge_values(
    problem: Problem,
    case: Case,
    labelled: _Labelled,
    arrays: list[np.ndarray],
    how: How | None,
    devices: int,
) -> str | None:
    """Why the values are wrong (against the oracle, across replicas, on the host); None if right."""
    received: Any = tuple(arrays) if problem.outputs else arrays[0]
    with jax.enable_x64(False):  # the expected dtypes are JAX's defaults, whatever the caller's
        diagnosis = problem.diagnose(case, received, devices)
    differ = [name or "the output" for name, item, _ in labelled if item.replicas_differ]
    if differ:
        return (
            f"the devices hold different values for {' and '.join(differ)}, which the output's "
            "sharding says every device holds a copy of: each device computed its own (with "
            "check_vma=False, out_specs=P() is not checked). The values on the first device: "
            + (diagnosis or "right")
        )
    if diagnosis is not None:
        return diagnosis + _what_ran(how, devices, diagnosis)
    for name, item, _ in labelled:
        if item.kind == "numpy":
            return _named(name, (
                "right values, but a NumPy array, not a jax.Array: the answer was brought to "
                "the host; return the array JAX computed, still on its devices"
            ))  # fmt: skip
    return None


def _judge_placement(problem: Problem, case: Case, labelled: _Labelled, devices: int) -> str | None:
    """Why an output is laid out over the devices otherwise than the contract says; None if not."""
    for (name, item, _), placement in zip(labelled, problem.placements(), strict=True):
        # A jax.Array has all three (decode_answer checks); a NumPy array got FAIL before.
        if placement is None or item.shape is None or item.split is None or item.devices is None:
            continue
        blocks = None if placement.blocks is None else placement.blocks(case.args, devices)
        wrong = placement.diagnose(item.shape, item.split, item.devices, blocks)
        if wrong is not None:
            return _named(name, wrong)
    return None


def _what_ran(how: How | None, devices: int, message: str) -> str:
    """For a bare wrong value on several devices: the collectives its program ran.

    ``" (the program that computed it runs 1 all-reduce of 4 bytes over 8 devices)"``,
    or that it ran none: what the reader needs to tell a collective left out from
    one that combines the wrong thing. Empty on one device (or where every program
    ran on one: a mesh of one), where the message says more than the difference, or
    where the programs are not known.
    """
    if devices < 2 or how is None or how.error is not None or explained(message):
        return ""
    if "value: " not in message and "values: " not in message:
        return ""  # a shape or a dtype: not what a collective would change
    programs = how.programs
    if all(p.devices < 2 for p in programs):
        return ""  # none, or on one device (a mesh of one): nothing to combine across
    found = [
        c
        for p in programs
        for c in parse_collectives(p.text)
        if c.explicit and (c.group_size or p.devices) > 1
    ]
    if not found:
        return f" ({RAN_NO_COLLECTIVE})"
    return f" ({RAN}{_listed(found)})"


def _judge_how(
    problem: Problem,
    case: Case,
    outputs: Sequence[Output],
    expected: Sequence[np.ndarray],
    devices: int,
    how: How,
    how_payload: bytes,
    received: Sequence[np.ndarray] = (),
) -> tuple[Verdict, str] | None:
    """The verdict on how and where right values were computed; None if as asked."""
    technique = problem.technique
    practises = (
        f"this problem practises {problem.practises}"
        if problem.practises
        else f"see the problem's page, {problem.page}"
    )
    if how.error is not None:
        return Verdict.TECHNIQUE, (
            f"right values, but the checker could not read how they were computed: {how.error}"
        )
    if how.intact is not True:
        return Verdict.TECHNIQUE, (
            "right values, but the solution replaced the hooks in JAX through which the checker "
            "sees the programs a call runs, so how it computed them cannot be judged"
        )
    programs = list(how.programs)
    own_file = Path(inspect.getfile(problem.reference)).resolve()
    for program in programs:
        if any(_same_file(name, own_file) for name in program.files):
            return Verdict.REFERENCE, (
                "right values, but computed by the package's own solution "
                f"({own_file.parent.name}/{own_file.name}): the checker judges code of yours; "
                "write the function yourself (the page's hidden solution is there to compare "
                "with afterwards)"
            )
    size = sum(math.prod(e.shape) for e in expected)
    empty = any(isinstance(a, np.ndarray) and a.size == 0 for a in case.args)
    if size == 0 or empty:
        # Nothing to split over the devices: an answer may skip them (a sum of nothing
        # is 0), and XLA drops collectives of empty blocks. No device, technique or
        # collective is asked for.
        return Verdict.PASS, NOT_JUDGED["empty"]
    # A problem with no technique (one that simulates devices on one) asks for no mesh.
    mesh = problem.mesh_shape(case, devices) if technique is not None else (1,)
    wanted = math.prod(mesh)
    mesh_text = " x ".join(map(str, mesh))
    inputs = problem.describe(case)
    candidates = _candidates(how, how_payload)
    made_at: list[int | None] = []
    for k, want in enumerate(expected):
        got = received[k] if k < len(received) else None
        origin = _first_made(candidates.get(k, []), want, case, problem, got, devices)
        if origin is not None and origin.made == "host":
            return Verdict.TECHNIQUE, (
                "right values, but computed on the host (with NumPy or Python) and then copied "
                f"to the devices: {practises}" + _copied_at(origin.line)
            )
        if origin is not None and origin.devices < wanted:
            return Verdict.PLACEMENT, (
                f"right values, but computed on {_devices(origin.devices)}, where the "
                f"contract's mesh for {inputs} has {mesh_text} devices: split the work over "
                "all of them"
            )
        made_at.append(None if origin is None else origin.order)
    for k, item in enumerate(outputs):
        held = 1 if item.devices is None else item.devices
        if item.kind == "jax.Array" and held < wanted:
            name = problem.outputs[k] if problem.outputs else "the result"
            return Verdict.PLACEMENT, (
                f"right values, but {name} lies on {_devices(held)}, where the contract's mesh "
                f"for {inputs} has {mesh_text} devices"
            )
    made_by = how.made_by
    copies = {c.order: c for c in how.copies}
    for k, maker in enumerate(made_by):
        if k < len(made_at) and made_at[k] is None and maker and maker.kind == "copy":
            copy = copies.get(maker.order)
            if copy is not None and copy.host:
                return Verdict.TECHNIQUE, (
                    "right values, but copied to the devices from the host, where they were "
                    f"computed (with NumPy or Python): {practises}" + _copied_at(copy.line)
                )
    if not made_by or all(m is None for m in made_by):
        return Verdict.TECHNIQUE, (
            "right values, but no program the checker could see computed them (returned "
            f"as given, or made outside jax.jit's and jax.shard_map's programs): {practises}"
        )
    unseen = how.unknown
    if unseen:
        # What the checker did not see computed is not credited: the programs it saw may
        # only relay values made elsewhere (a thread of the solution's own, a program
        # compiled ahead of time and called as such, which JAX runs without a trace).
        where = _copied_at(how.unknown_line) or _code_lines(programs)
        arrays = "an array" if unseen == 1 else f"{unseen} arrays"
        return Verdict.TECHNIQUE, (
            f"right values, but they were computed from {arrays} made where the checker "
            "cannot see how (in another thread, or by a program compiled ahead of time with "
            ".lower(...).compile() and called directly), and it credits only what it sees "
            "the call compute: call the jitted or shard_mapped functions themselves, in the "
            f"calling thread; {practises}" + where
        )
    latest = max((m for m in made_at if m is not None), default=None)
    considered = [p for p in programs if latest is None or p.order <= latest]
    called_back = [t for p in considered for t in host_callbacks(p.text)]
    if called_back:
        return Verdict.TECHNIQUE, (
            "right values, but the program calls back into Python on the host for part of "
            f"them (jax.pure_callback or io_callback, returning {', '.join(called_back)}): the "
            f"devices must compute them; {practises}" + _code_lines(considered)
        )
    if technique is None:
        return _judge_one_device(considered, practises)
    hidden = technique.hidden(case.args) if technique.hidden is not None else None
    if hidden is not None:
        # What computes the technique's part cannot reach a right answer here, and a
        # compiler may drop it (0 * grad): its absence is no mistake.
        return Verdict.PASS, f"{NOT_JUDGED['hidden']}: {hidden}"
    moved = [t for t in how.copies if latest is None or t.order <= latest]
    verdict = _judge_technique(
        technique, case, devices, wanted, considered, practises, moved, how.traced
    )
    if verdict is None and _one_device(technique, case, devices, wanted):
        return Verdict.PASS, NOT_JUDGED["one device"]  # nothing is sent, nor split, to budget
    if verdict is None and problem.budget is not None and how.limits:
        verdict = _judge_budget(problem.budget, how.limits, considered, how.grown, moved)
    return verdict


NOT_JUDGED = {
    "empty": (
        "technique not judged: an empty array has nothing to split or send, so any "
        "program that gives the right (empty) answer is right"
    ),
    "one device": (
        "collectives not judged: on a mesh of one device a ring of n - 1 hops makes none "
        "and a collective has nothing to combine, so only jax.shard_map is asked for"
    ),
    "hidden": "technique not judged",
}
"""Why a passing case's technique was judged in part or not at all, as the report says."""


def _judge_one_device(programs: list[Program], practises: str) -> tuple[Verdict, str] | None:
    """The verdict on an answer to a problem that simulates the devices on one device.

    Its statement asks for no mesh and no ``jax.shard_map``: the devices are the
    blocks a loop slices by hand.
    """
    with_shard_map = [p for p in programs if p.shard_map]
    if with_shard_map:
        return Verdict.TECHNIQUE, (
            "right values, but computed with jax.shard_map, where the statement asks for "
            f"the blocks sliced by hand on one device (no mesh, no jax.shard_map): {practises}"
            + _code_lines(with_shard_map)
        )
    spread = max((p.devices for p in programs), default=1)
    if spread > 1:
        return Verdict.TECHNIQUE, (
            f"right values, but computed by a program over {_devices(spread)}, where the "
            "statement asks for one device (no mesh): the blocks are sliced by hand; "
            f"{practises}" + _code_lines([p for p in programs if p.devices > 1])
        )
    return None


def _one_device(technique: Technique, case: Case, devices: int, wanted: int) -> bool:
    """Whether the case's collectives span one device, where none is asked for."""
    group = technique.group(case.args, devices) if technique.group is not None else None
    return wanted <= 1 or group == 1


def _judge_budget(
    budget: Budget,
    limits: Mapping[str, float],
    programs: Sequence[Program],
    grown: Sequence[Held] | None = None,
    copies: Sequence[Transfer] = (),
) -> tuple[Verdict, str] | None:
    """The verdict on what the programs an answer came from send and hold, per device.

    ``grown``: what each program of the answer to the budget's larger copy of the
    case held (:func:`shard_tutorial.checking.worker.held_on`), for ``"growth"``.
    ``copies``: the copies the answer came from; what a ``jax.device_put`` from one
    layout to another moved between devices counts as sent, as a collective's would.

    Examples:
      >>> from shard_tutorial.checking.judge import _judge_budget
      >>> from shard_tutorial.checking.protocol import Held, Program
      >>> from shard_tutorial.problem import Budget
      >>> budget = Budget(lambda args: {}, "keep n slots, not M")
      >>> ran = [Program(0, 8, True, memory={"temp": 5000})]
      >>> held = lambda size: [Held({"temp": size}, 0)]
      >>> _judge_budget(budget, {"growth": 1000}, ran, held(5800)) is None
      True
      >>> print(_judge_budget(budget, {"growth": 1000}, ran, held(9000))[1])
      right values, but what one device holds grows by 4,000 bytes (from 5,000 to 9,000) on a larger copy of this case, where this problem allows 1,000: keep n slots, not M
    """
    if "sent" in limits:
        loose = [c for p in programs for c in uncounted(p.text, p.devices)]
        if loose:
            # Counted once, a collective in such a loop could send any number of times
            # the budget: what cannot be counted is not credited.
            return Verdict.BUDGET, (
                f"right values, but {_listed(loose)} "
                f"{'runs' if len(loose) == 1 else 'run'} inside a loop whose number of "
                "iterations XLA cannot know (a while_loop whose condition reads values the "
                "program computes), so the checker cannot count the bytes each device sends, "
                f"where this problem allows {float(limits['sent']):,.0f}: loop a number of "
                "times known when the program is traced (jax.lax.fori_loop or jax.lax.scan "
                f"with Python int bounds, or a Python loop); {budget.why}" + _where(programs)
            )
        found, sent = [], 0.0
        for program in programs:
            # A collective in a loop counts once per iteration (collective_costs.sent_by).
            bytes_sent, collectives = sent_by(program.text, program.devices)
            sent += bytes_sent
            found += collectives
        put = [c for c in copies if c.received > 0]
        sent += sum(c.received for c in put)
        if sent > float(limits["sent"]) * (1 + 1e-9):
            what = [f"{_listed(found)}, counted as ring algorithms send them"] if found else []
            if put:
                what.append(
                    f"{len(put)} jax.device_put{'s' if len(put) > 1 else ''} from one layout to "
                    f"another, {sum(c.received for c in put):,} bytes to a device"
                )
            return Verdict.BUDGET, (
                f"right values, but each device sends {sent:,.0f} bytes ({'; '.join(what)}), "
                f"where this problem allows "
                f"{float(limits['sent']):,.0f}: {budget.why}" + _where(programs) + _put_at(put)
            )
    if "peak" in limits:
        peaks = [p.memory.get("peak", 0) for p in programs]
        peak = max(peaks, default=0)
        if peak > float(limits["peak"]):
            return Verdict.BUDGET, (
                f"right values, but one device holds {peak:,} bytes at its peak (XLA's memory "
                f"analysis of the compiled program), where this problem allows "
                f"{float(limits['peak']):,.0f}: {budget.why}" + _where(programs)
            )
    if "held" in limits:
        # What a device held while each program ran: the program's own buffers, and what
        # the call's earlier programs made and the code still kept (eager code fetching
        # every block in programs of their own holds them all, each program small).
        held, kept = max(
            ((_buffers(p.memory) + p.held_before, p.held_before) for p in programs),
            default=(0, 0),
        )
        if held > float(limits["held"]):
            besides = (
                f", {kept:,} of them in arrays the call made earlier and still kept" if kept else ""
            )
            return Verdict.BUDGET, (
                f"right values, but one device holds {held:,} bytes while a program runs "
                f"(its arguments, outputs and temporaries, from XLA's memory analysis{besides}), "
                f"where this problem allows {float(limits['held']):,.0f}: {budget.why}"
                + _where(programs, {"all-gather", "all-to-all", "collective-permute"})
            )
    if "growth" in limits and grown:
        before, after = _most_held([p.held() for p in programs]), _most_held(grown)
        if after - before > float(limits["growth"]):
            return Verdict.BUDGET, (
                f"right values, but what one device holds grows by {after - before:,} bytes "
                f"(from {before:,} to {after:,}) on a larger copy of this case, where this "
                f"problem allows {float(limits['growth']):,.0f}: {budget.why}"
                + _code_lines([max(grown, key=lambda p: _most_held([p]))])
            )
    return None


def _most_held(programs: Sequence[Held]) -> int:
    """The most one device held while any of ``programs`` ran, with what the call kept."""
    return max((_buffers(p.memory) + p.held_before for p in programs), default=0)


def _buffers(memory: Mapping[str, int]) -> int:
    """All the bytes XLA assigns one device for a program: arguments, outputs, temporaries.

    Outputs that reuse an argument's buffer (``alias``) are counted once.
    """
    parts = ("argument", "output", "temp")
    return sum(memory.get(key, 0) for key in parts) - memory.get("alias", 0)


def _judge_technique(
    technique: Technique,
    case: Case,
    devices: int,
    wanted: int,
    programs: Sequence[Program],
    practises: str,
    copies: Sequence[Transfer] = (),
    traced_in_call: Sequence[str] = (),
) -> tuple[Verdict, str] | None:
    """The verdict on the collectives (and shard_map) of the programs an answer came from.

    ``copies``: the copies to the devices the answer came from (a ``jax.device_put``
    may move what :attr:`shard_tutorial.problem.Technique.stays` keeps in place).
    ``traced_in_call``: the primitives every program of the call traced
    (:attr:`~shard_tutorial.checking.protocol.How.traced`).
    """
    found: list[Collective] = []
    for program in programs:
        for collective in parse_collectives(program.text):
            size = collective.group_size
            if size is None:
                size = program.devices
            if size > 1:
                found.append(collective)
    explicit = [c for c in found if c.explicit]
    added = [c for c in found if not c.explicit]
    used_shard_map = bool(explicit) or any(p.shard_map for p in programs)
    if not used_shard_map:
        if added:
            way = f"by jax.jit's automatic partitioning (XLA added {_listed(added)})"
        elif any(p.devices > 1 for p in programs):
            way = "by jax.jit's automatic partitioning"
        else:
            way = "with jax.numpy or jax.jit"
        return Verdict.TECHNIQUE, (
            f"right values, computed {way}, not with jax.shard_map: {practises}" + _where(programs)
        )
    one_device = _one_device(technique, case, devices, wanted)
    traced = technique.traced(case.args) if technique.traced is not None else None
    # Where the asked collectives move nothing (empty blocks), whether their empty
    # results reach the answer says nothing: only shard_map's is asked to.
    asked_live = not (one_device or traced is not None)
    if (unused := _unused(technique, programs, shard_map_only=not asked_live)) is not None:
        asked_kinds = {kind for alternatives in technique.collectives for kind in alternatives}
        return Verdict.TECHNIQUE, (
            f"right values, but what {unused} computes never reaches the answer (its result "
            f"is multiplied by zero, or not used): {practises}" + _where(programs, asked_kinds)
        )
    if one_device:
        # One device (on the mesh, or on the axis the collectives span): the statement's
        # n - 1 hops are none, a sum over one device is its own block, an index is 0.
        # A right answer may run no collective at all (a loop of n - 1 steps, a branch on
        # the axis size), and XLA drops any over one device: only shard_map is asked.
        return None
    if technique.primitives and not any(
        set(technique.primitives) & set(p.primitives) for p in programs
    ):
        wanted_names = " or ".join(f"jax.lax.{name}" for name in technique.primitives)
        return Verdict.TECHNIQUE, f"right values, but no {wanted_names}: {practises}"
    group = technique.group(case.args, devices) if technique.group is not None else None
    for alternatives in technique.collectives:
        matching = [c for c in explicit if c.kind in alternatives]
        asked = " or ".join(KINDS_IN_WORDS.get(kind, kind) for kind in alternatives)
        if not matching and traced is not None:
            # Dropped from the compiled program (empty blocks): asked of the traced one.
            kinds = set().union(*(_PRIMITIVES_OF_KIND.get(kind, set()) for kind in alternatives))
            # Eager code runs each collective as a program of its own, whose empty
            # result the answer need not use: any program of the call will do.
            if kinds & set(traced_in_call) or any(kinds & set(p.primitives) for p in programs):
                continue
            return Verdict.TECHNIQUE, (
                f"right values, but no {asked} in the program JAX traced ({traced}): {practises}"
                + _where(programs)
            )
        if not matching:
            ran = _listed(found) if found else "no collective over more than one device"
            return Verdict.TECHNIQUE, (
                f"right values, but no {asked} from the code inside jax.shard_map; the compiled "
                f"program runs {ran}: {practises}" + _where(programs)
            )
        if group is not None and not any(c.group_size in {group, None} for c in matching):
            sizes = sorted({c.group_size or 0 for c in matching})
            return Verdict.TECHNIQUE, (
                f"right values, but the {asked} runs over {_devices(sizes[0])}, where the "
                f"mesh's {technique.axis!r} axis has {group}: {practises}"
            )
    for rule in technique.forbidden:
        limit = rule.at_least(case.args) if rule.at_least is not None else 0
        of_kind = [c for c in found if c.kind == rule.kind]
        if rule.pieces is not None:
            # Split in pieces (two halves of w's gradient all-reduced, kept apart by
            # an optimization barrier), they move as much as one would.
            smallest = rule.pieces(case.args)
            large = [c for c in of_kind if _moved(c) > smallest]
            over = large if large and sum(_moved(c) for c in large) >= limit else []
        else:
            over = [c for c in of_kind if _moved(c) >= limit]
        if over:
            asked = " and ".join(
                " or ".join(KINDS_IN_WORDS.get(kind, kind) for kind in alternatives)
                for alternatives in technique.collectives
            )
            return Verdict.TECHNIQUE, (
                f"right values, but the compiled program runs {_listed(over)}"
                + (f" where {asked} was asked" if asked else "")
                + f": {rule.why}"
                + _lines(programs, {rule.kind})
            )
    # Past the collectives asked for and forbidden: what stays in place, moved anyway.
    if technique.stays is not None:
        carried = sorted({name for p in programs for name in p.carries})
        put = [c for c in copies if c.carries]
        if carried or put:
            functions = sorted({_FUNCTION_OF_PRIMITIVE.get(name, name) for name in carried})
            named = [f"jax.lax.{name}" for name in functions] + ["jax.device_put"] * bool(put)
            return Verdict.TECHNIQUE, (
                f"right values, but {technique.stays.names} travels between devices, passed on "
                f"unchanged ({', '.join(named)} of it, or of slices, copies or zero-padded "
                f"blocks of it): {technique.stays.why}"
                + _lines(programs, {_KIND_OF_PRIMITIVE.get(name, "") for name in carried})
                + _put_at(put)
            )
    return None


def _unused(
    technique: Technique, programs: Sequence[Program], *, shard_map_only: bool = False
) -> str | None:
    """What the problem asks for that the programs run but their outputs do not use.

    ``primitives`` lists every operation a program traced; ``live`` those whose results
    reach its outputs (:func:`shard_tutorial.checking.dataflow.flow`: a product with a constant
    zero uses neither factor). Asked for: shard_map, and unless ``shard_map_only`` (a
    mesh of one device), the technique's primitives and a primitive of each kind of
    collective it names.
    """
    traced: set[str] = set()
    live: set[str] = set()
    for program in programs:
        traced.update(program.primitives)
        live.update(program.primitives if program.live is None else program.live)
    asked: list[tuple[str, set[str]]] = [("jax.shard_map", {"shard_map"})]
    if technique.primitives and not shard_map_only:
        names = " or ".join(f"jax.lax.{name}" for name in technique.primitives)
        asked.append((names, set(technique.primitives)))
    for alternatives in () if shard_map_only else technique.collectives:
        primitives: set[str] = set()
        for kind in alternatives:
            primitives.update(_PRIMITIVES_OF_KIND.get(kind, set()))
        asked.append((" or ".join(KINDS_IN_WORDS.get(k, k) for k in alternatives), primitives))
    for words, primitives in asked:
        if primitives & traced and not primitives & live:
            return words
    return None


def _where(programs: Sequence[Program], kinds: set[str] | None = None) -> str:
    """:func:`_lines` of the collectives, or where the programs' work came from if none."""
    return _lines(programs, kinds) or _code_lines(programs)


def _code_lines(programs: Sequence[Program | Held], *, most: int = 3) -> str:
    """The reader's lines the programs' operations came from, in the order they ran.

    For a verdict on programs with no collective to point at: the lines of the
    reader's code (not JAX's, a library's or this package's) that each program's
    operations were traced from, as the recording read them from JAX's traced
    programs. Empty when there are none.
    """
    from shard_tutorial.explain import _code  # noqa: PLC0415 (Rich, lazily)

    seen: list[Frame] = []
    for program in programs:
        for file, line in program.lines:
            frame = Frame(file, line)
            if "site-packages" not in frame.file and frame not in seen:
                seen.append(frame)
    if not seen:
        return ""
    rows = [f"  line {f.line} of {Path(f.file).name}: {_code(f)}" for f in seen[:most]]
    more = f"\n  and {len(seen) - most} more" if len(seen) > most else ""
    return "\nWhere (the lines the programs computed):\n" + "\n".join(rows) + more


def _copied_at(line: Line | None) -> str:
    """``"Where: line 12 of answer.py: ..."``: the reader's line that copied host data in."""
    if not line:
        return ""
    from shard_tutorial.explain import _code  # noqa: PLC0415 (Rich, lazily)

    frame = Frame(*line)
    where = f"line {frame.line} of {Path(frame.file).name}: {_code(frame)}"
    return f"\nWhere:\n  {where}"


def _put_at(copies: Sequence[Transfer]) -> str:
    """``"Moved by jax.device_put: line 9 of answer.py: ..."``: the reader's lines that moved data."""
    from shard_tutorial.explain import _code  # noqa: PLC0415 (Rich, lazily)

    lines = [
        f"  line {frame.line} of {Path(frame.file).name}: {_code(frame)}  <- "
        f"{c.received:,} B to a device"
        for c in copies
        if c.line
        for frame in [Frame(*c.line)]
    ]
    return "\nMoved by jax.device_put:\n" + "\n".join(lines) if lines else ""


def _lines(programs: Sequence[Program], kinds: set[str] | None = None, *, most: int = 4) -> str:
    """Where the programs' collectives (of ``kinds``; all if None) came from, largest first.

    One line each, as :func:`shard_tutorial.explain.program_communication` traces a
    collective to the reader's line (its own, or for one XLA inserted, the line
    whose sharding needed it): ``"line 14 of ring.py: k = all_gather(...)  <-
    all-gather f32[512,64] over 8 devices, 114,688 B per device"``. Empty when none
    is found, or the programs cannot be read so.
    """
    from shard_tutorial.explain import program_communication  # noqa: PLC0415 (Rich, lazily)

    found = []
    for program in programs:
        try:
            communications = program_communication(program.text, program.devices)
        except Exception:  # noqa: BLE001, S112 (a line is a bonus; never fail the verdict)
            continue
        for c in communications:
            if c.sent_per_run > 0 and (kinds is None or c.kind in kinds):
                found.append(c)
    if not found:
        return ""
    found.sort(key=lambda c: -c.sent)
    rows = []
    for c in found[:most]:
        where = f"line {c.line.line} of {Path(c.line.file).name}" if c.line else "no line"
        code = f": {c.code}" if c.code else ""
        runs = f", {c.runs} times" if c.runs and c.runs > 1 else ""
        rows.append(
            f"  {where}{code}  <- {c.kind} {c.moved} over {c.over}, "
            f"{c.sent_per_run:,.0f} B per device{runs}" + ("" if c.asked else " (inserted by XLA)")
        )
    more = f"\n  and {len(found) - most} more" if len(found) > most else ""
    return "\nWhere:\n" + "\n".join(rows) + more


def _moved(collective: Collective) -> int:
    """The larger of what a collective takes in and gives out, per device, in bytes."""
    return max(collective.nbytes, collective.operand_bytes or 0)


def _listed(collectives: Sequence[Collective]) -> str:
    """``"1 all-reduce of 64 bytes over 8 devices"``, one phrase per kind and size."""
    counted: dict[tuple[str, int, int | None], int] = {}
    for c in collectives:
        key = (c.kind, c.nbytes, c.group_size)
        counted[key] = counted.get(key, 0) + 1
    phrases = [
        f"{n} {kind}{'s' if n > 1 else ''} of {nbytes} bytes"
        + (f" over {size} devices" if size else "")
        for (kind, nbytes, size), n in counted.items()
    ]
    return ", ".join(phrases)


def _devices(count: int) -> str:
    return f"{count} device{'s' if count != 1 else ''}"


def _same_file(name: str, target: Path) -> bool:
    try:
        return Path(name).resolve() == target
    except (OSError, ValueError):
        return False


_Candidates = list[tuple[Candidate, np.ndarray | None]]
"""Candidates of one output item, each with its values (float64; None: a fingerprint only)."""


def _candidates(how: How, payload: bytes) -> dict[int, _Candidates]:
    """The candidates ``how`` lists, each with its values (float64), by output item.

    Past the first few, a candidate comes as its values' ``fingerprint`` alone
    (values None): it matches an answer that is an exact copy of it.
    """
    found: dict[int, _Candidates] = {}
    offset = 0
    for candidate in how.candidates:
        size = candidate.nbytes
        shape = candidate.shape
        if size == 0 and candidate.fingerprint is not None:  # a digest, no values
            found.setdefault(candidate.item, []).append((candidate, None))
            continue
        data = payload[offset : offset + size]
        offset += size
        if len(data) != size or size != math.prod(shape) * 8:
            break  # garbled: judge without them
        values = np.frombuffer(data, np.float64).reshape(shape)
        found.setdefault(candidate.item, []).append((candidate, values))
    for listed in found.values():
        listed.sort(key=lambda pair: pair[0].order)
    return found


def _first_made(
    candidates: _Candidates,
    expected: np.ndarray,
    case: Case,
    problem: Problem,
    received: np.ndarray | None = None,
    devices: int | None = None,
) -> Candidate | None:
    """The earliest candidate with the answer's values: where the answer was computed.

    A candidate sent as a digest matches when ``received`` (the answer itself) has
    the same values exactly. None when none has them, and when the answer could be
    such an array by chance: an answer of only 0s, 1s and -1s (a host constant may
    hold those), or one equal to one of the case's arguments (a copy of an input is
    not a computation).
    """
    want = precise(expected)
    if want.size == 0 or np.isin(want, (-1, 0, 1)).all():
        return None
    for argument in case.args:
        same_shape = isinstance(argument, np.ndarray) and argument.shape == want.shape
        if same_shape and np.allclose(precise(argument), want, equal_nan=True):
            return None
    rtol, atol = problem.tolerance(case, expected.dtype, devices)
    digest = None if received is None else fingerprint(received)
    for candidate, values in candidates:
        if not candidate.from_arguments:
            continue  # made from no argument (initial parameters): no computation of the answer
        if values is None:
            if digest is not None and candidate.fingerprint == digest:
                return candidate
            continue
        if values.shape == want.shape and np.allclose(
            values, want, rtol=max(rtol, 1e-6), atol=atol, equal_nan=True
        ):
            return candidate
    return None


def _named(name: str, message: str) -> str:
    """``message`` about the output called ``name`` (nothing added for a lone output)."""
    return f"{name}: {message}" if name else message


def _unread(output: Output) -> str:
    """What to say when the report of what a solution returned cannot be read."""
    return f"the checker could not read what the solution returned: {output.error}"


def _not_an_array(output: Output) -> str:
    """What to say when a solution returned something other than an array."""
    kind, shown = output.kind, output.repr or ""
    if kind == "NoneType":
        return "returned None, not an array: is a return statement missing?"
    if kind in {"list", "tuple"}:
        length = output.length
        return (
            f"returned a {kind} of {length} item{'' if length == 1 else 's'}, not an array: "
            "put them in one "
            "array (jnp.stack or jnp.asarray) and return that"
        )
    if kind == "str":
        return f"returned a str ({shown}), not an array of numbers"
    if kind in {"int", "float", "complex", "bool"}:
        return (
            f"returned a Python {kind} ({shown}), not an array: return the jax.Array the "
            "computation gives (a 0-d array for a single number)"
        )
    if kind == "generator":
        return "returned a generator, not an array: is there a yield where a return should be?"
    if kind.startswith("array of"):
        return f"returned an {kind}, not an array of numbers"
    if kind in {"ArrayImpl", "jax.Array"} and output.problem is not None:
        return (
            "returned a jax.Array that cannot be read: its shards do not fit together into "
            f"an array of its shape ({output.problem}). jax 0.10 makes such an array "
            "from an all_to_all of empty blocks: handle the empty case before the "
            "collective, as the statement says"
        )
    article = "an" if kind[:1].lower() in "aeiou" else "a"
    return f"returned {article} {kind}, not an array" + (
        f" (reading it raised: {output.problem})" if output.problem is not None else ""
    )
