"""The checker's two halves in this process: what a worker sends, and how the judge reads it.

These run at this process' device count (1 or 8), so the layouts and traced programs
they look at are the ones the workers see.
"""

from __future__ import annotations

import dataclasses
import json
import math

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh, place, usable_device_count
from shard_tutorial.checking.assembly import Disagree as _Disagree
from shard_tutorial.checking.assembly import array as _array
from shard_tutorial.checking.assembly import assemble as _assemble
from shard_tutorial.checking.judge import (
    _not_an_array,
    judge,
    judge_cluster,
    judge_raised,
    judge_refusal,
)
from shard_tutorial.checking.protocol import (
    GARBLED,
    Answer,
    Output,
    decode_answer,
    decode_raised,
    encode_answer,
    encode_raised,
)
from shard_tutorial.checking.report import (
    RAN,
    RAN_NO_COLLECTIVE,
    CaseResult,
    CheckReport,
    DeviceRun,
)
from shard_tutorial.checking.worker import answer, describe_exception, describe_output
from shard_tutorial.problem import Placement
from shard_tutorial.problems import PROBLEMS


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_each_reference_runs_the_collectives_its_problem_asks_for(name, device_count):
    """The references are what the statements describe, read from their compiled programs."""
    from shard_tutorial.checking.judge import _judge_technique  # noqa: PLC0415

    problem = PROBLEMS[name]
    if problem.technique is None:
        pytest.skip("a problem that simulates devices on one asks for no technique")
    # On one device a technique asks for no collective (a mesh of one has nothing to
    # combine): one case shows the references accept that; 8 devices take two (every
    # reference is judged on every case by its page's check and test_pasted_solutions.py).
    judged = 0
    for case in problem.cases:
        if judged == (2 if device_count > 1 else 1):
            break
        if any(np.size(a) == 0 for a in case.args if isinstance(a, np.ndarray)):
            continue  # nothing to split: nothing is asked for
        programs = decode_answer(*answer(problem.reference, problem.arranged(case))).how.programs
        wanted = math.prod(problem.mesh_shape(case, device_count))
        verdict = _judge_technique(
            problem.technique, case, device_count, wanted, programs, "practises"
        )
        assert verdict is None, (case.label, verdict)
        judged += 1
    assert judged


def test_unsharded_code_is_told_where_and_how_it_computed(device_count):
    import jax.numpy as jnp  # noqa: PLC0415

    problem = PROBLEMS["shard_map_psum"]
    case = problem.cases[4]  # 32 elements: 8 devices on 8
    event, data = answer(jnp.sum, problem.arranged(case))
    verdict = judge(problem, case, decode_answer(event, data), device_count)
    if device_count == 1:
        assert verdict[0] == "technique"
        assert "computed with jax.numpy or jax.jit, not with jax.shard_map" in verdict[1]
    else:
        assert verdict[0] == "placement"
        assert "lies on 1 device, where the contract's mesh for x=float32[32] has 8" in verdict[1]


GARBLINGS = {
    "no how": lambda event: event.pop("how"),
    "a how that is null": lambda event: event.update(how=None),
    "a how that is a list": lambda event: event.update(how=[]),
    "no intact": lambda event: event["how"].pop("intact"),
    "devices as a str": lambda event: event["how"]["programs"][0].update(devices="8"),
    "a program with no order": lambda event: event["how"]["programs"][0].pop("order"),
    "a line with no number": lambda event: event["how"]["programs"][0].update(lines=[["a.py"]]),
    "made by something else": lambda event: event["how"]["made_by"].__setitem__(0, {"kind": 1}),
    "a candidate of two unknown sizes": lambda event: event["how"]["candidates"][0].update(
        shape=[-1, -1]
    ),
    "a candidate's nbytes as a str": lambda event: event["how"]["candidates"][0].update(nbytes="8"),
    "a limit that is not a number": lambda event: event["how"].update(limits={"sent": "many"}),
    "fewer than no unknown arrays": lambda event: event["how"].update(unknown=-1),
}
"""Ways a report of how an answer was made can differ from what the worker writes."""


def _nested(event):
    """An output whose one item is a tuple described item by item in its turn."""
    item = {"kind": "tuple", "length": 1, "items": [{**event["output"], "nbytes": 4}], "nbytes": 4}
    event.update(output={"kind": "tuple", "length": 1, "items": [item]})


OUTPUT_GARBLINGS = {
    "no output": lambda event: event.pop("output"),
    "an output that is a list": lambda event: event.update(output=[]),
    "no kind": lambda event: event["output"].pop("kind"),
    "a kind that is not a str": lambda event: event["output"].update(kind=["jax.Array"]),
    "a shape as a str": lambda event: event["output"].update(shape="()"),
    "a jax.Array with no split": lambda event: event["output"].pop("split"),
    "a split along an axis it does not have": lambda event: event["output"].update(split=[8]),
    "devices as a float": lambda event: event["output"].update(devices=8.0),
    "replicas_differ as a str": lambda event: event["output"].update(replicas_differ="no"),
    "a tuple of more bytes than sent": lambda event: event.update(
        output={"kind": "tuple", "length": 1, "items": [{**event["output"], "nbytes": 8}]}
    ),
    "an item with no nbytes": lambda event: event.update(
        output={"kind": "tuple", "length": 1, "items": [event["output"]]}
    ),
    "an item with items of its own": _nested,
    "blocks with no device ids": lambda event: event["output"].update(
        shards=[{"index": [], "nbytes": 4}]
    ),
    "a block outside its array": lambda event: event["output"].update(
        shards=[{"index": [[0, 2]], "nbytes": 4}], device_ids=[0]
    ),
    "blocks of more bytes than sent": lambda event: event["output"].update(
        shards=[{"index": [], "nbytes": 8}], device_ids=[0]
    ),
}
"""Ways a report of what an answer is (its output) can differ from what the worker writes."""

RAISED_GARBLINGS = {
    "no message": lambda event: event.pop("message"),
    "a message that is not a str": lambda event: event.update(message=["ValueError"]),
    "memory as a str": lambda event: event.update(memory="false"),
    "no types": lambda event: event.pop("types"),
    "types as a str": lambda event: event.update(types="ValueError"),
    "a type that is not a str": lambda event: event.update(types=["ValueError", 1]),
}
"""Ways a report of the error a call raised can differ from what the worker writes."""

PARTS = {"how": GARBLINGS, "output": OUTPUT_GARBLINGS, "raised": RAISED_GARBLINGS}

GARBLED_VERDICTS = {
    "how": ("technique", f"could not read how they were computed: {GARBLED}"),
    "output": ("fail", f"the checker could not read what the solution returned: {GARBLED}"),
    "raised": ("error", f"raised an error the checker could not read: {GARBLED}"),
}
"""The verdict on each part of a report garbled: never a pass, and never a crash."""


def _refuses(x):
    msg = f"x must be 1-D, not {x.ndim}-D"
    raise ValueError(msg)


@pytest.mark.parametrize(
    ("part", "garble"), [(part, name) for part, ways in PARTS.items() for name in ways]
)
def test_a_garbled_report_of_how_is_judged_not_read_never_a_crash(part, garble, device_count):
    import jax.numpy as jnp  # noqa: PLC0415

    problem = PROBLEMS["shard_map_psum"]
    case = problem.cases[4]
    (refusal,) = [c for c in problem.refusals if c.raises == "ValueError"]
    if part == "raised":
        event, _ = answer(_refuses, problem.arranged(case))
        event = json.loads(json.dumps(event))  # as the pipe carries it
        sent = decode_raised(event)
        assert sent.error is None
        assert encode_raised(sent) == event
        assert judge_refusal(refusal, sent) == ("pass", "")
        PARTS[part][garble](event)
        received = decode_raised(event)
        assert received.error == GARBLED
        assert judge_raised(received) == GARBLED_VERDICTS[part]
        status, message = judge_refusal(refusal, received)  # not known to be the one asked for
        assert status == "fail"
        assert message.endswith(f"but the checker could not read which: {GARBLED}")
        return
    event, data = answer(lambda x: jnp.sum(x) + 0, problem.arranged(case))  # two programs
    event = json.loads(json.dumps(event))  # as the pipe carries it
    answered = decode_answer(event, data)
    assert answered.output.error is None
    assert answered.how.error is None
    assert answered.how.programs
    assert answered.how.made_by
    assert answered.how.candidates
    assert decode_answer(*encode_answer(answered)) == answered
    assert encode_answer(answered)[0] == event  # the same keys and values on the pipe
    PARTS[part][garble](event)
    received = decode_answer(event, data)
    if part == "how":
        assert received.how.error == GARBLED
        assert received.output == answered.output  # the output is still read
    else:
        assert received.output.error == GARBLED
        assert received.how == answered.how  # how it was made is still read
        cluster = judge_cluster(problem, case, [answered, received], device_count)
        assert cluster == ("fail", "process 1 of 2: " + GARBLED_VERDICTS[part][1])
    assert received.values == answered.values
    status, message = judge(problem, case, received, device_count)
    assert status == GARBLED_VERDICTS[part][0]
    assert GARBLED_VERDICTS[part][1] in message


def test_an_outputs_layout_is_sent_as_which_axis_is_split_over_how_many_devices(device_count):
    x = np.arange(48, dtype=np.float32).reshape(12, 4)
    mesh = data_mesh(12)
    output, payload = describe_output(place(x, NamedSharding(mesh, P("data"))))
    assert output.split == (usable_device_count(12, device_count), 1)
    assert output.devices == usable_device_count(12, device_count)
    assert np.array_equal(_array(output, payload), x)
    output, _ = describe_output(place(x, NamedSharding(mesh, P())))
    assert output.split == (1, 1)
    assert output.devices == usable_device_count(12, device_count)


@pytest.mark.parametrize(
    ("placement", "shape", "split", "devices", "message"),
    [
        (Placement(0), (16,), (8,), 8, None),
        (Placement(0), (16,), (1,), 8, "every device holds the whole result: out_specs=P()"),
        (Placement(0), (16,), (1,), 1, None),  # one device: no layout to judge
        (Placement(0), (0,), (1,), 8, None),  # empty: no layout either
        (Placement(0), (1,), (1,), 8, None),  # one element cannot be split
        (Placement(0), (4, 8), (1, 4), 4, "split along axis 1 where axis 0 should be"),
        (Placement(None), (), (), 8, None),
        (Placement(None), (8, 2), (8, 1), 8, "where every device should hold all of it"),
    ],
)
def test_the_layout_is_judged_from_the_outputs_own_split(placement, shape, split, devices, message):
    verdict = placement.diagnose(shape, split, devices)
    if message is None:
        assert verdict is None
    else:
        assert message in verdict


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "returned None, not an array: is a return statement missing?"),
        ([1, 2], "returned a list of 2 items, not an array"),
        ((1,), "returned a tuple of 1 item, not an array"),
        ("abc", "returned a str ('abc'), not an array of numbers"),
        (2.5, "returned a Python float (2.5), not an array"),
        ((i for i in ()), "returned a generator, not an array"),
        (np.array(["a"]), "returned an array of <U1, not an array of numbers"),
        (object(), "returned an object, not an array"),
    ],
)
def test_what_is_not_an_array_is_named(value, message):
    output, payload = describe_output(value)
    assert payload == b""
    assert _not_an_array(output) == message or message in _not_an_array(output)


def test_values_are_read_as_numbers_only_never_unpickled():
    with pytest.raises(ValueError, match="O"):
        _array(Output("numpy", "O", (1,)), b"\0" * 8)
    with pytest.raises(ValueError, match=r"\(3,\)"):
        _array(Output("numpy", "float32", (3,)), b"\0" * 8)  # 2 values, not 3
    values = _array(Output("numpy", "bfloat16", (2,)), b"\x80\x3f\x00\x40")
    assert values.tolist() == [1.0, 2.0]


def test_endless_recursion_is_reported_in_a_few_lines():
    def again(n):
        return again(n + 1)

    with pytest.raises(RecursionError) as error:
        again(0)
    message = describe_exception(error.value)
    assert "Endless recursion" in message
    assert len(message.splitlines()) < 40


@pytest.mark.parametrize("x64", [False, True])
def test_the_judge_expects_jaxs_default_dtypes_whatever_its_callers_mode(x64):
    problem = PROBLEMS["shard_map_psum"]
    case = problem.cases[4]
    output, payload = describe_output(problem.reference(*case.jax_args()))
    with jax.enable_x64(x64):  # a notebook that turned 64-bit mode on
        assert judge(problem, case, Answer(output, payload), 8)[0] == "pass"
        wide = np.float64(496.0)
        output64 = dataclasses.replace(output, dtype="float64")
        status, message = judge(problem, case, Answer(output64, wide.tobytes()), 8)
    assert (status, message) == ("fail", "dtype: expected float32, received float64")


def _split_between_two_processes(output, payload):
    """The shards of ``output`` as two processes would send them: first half, second half."""
    shards, halves, offset = output.shards, [], 0
    cut = (len(shards) + 1) // 2
    for part in (shards[:cut], shards[cut:]):
        size = sum(s.nbytes for s in part)
        halves.append((dataclasses.replace(output, shards=part), payload[offset : offset + size]))
        offset += size
    return halves


def test_the_shards_each_process_holds_are_put_back_together_with_no_collective():
    x = np.arange(48, dtype=np.float32).reshape(12, 4)
    mesh = data_mesh(12)
    y = place(x, NamedSharding(mesh, P("data")))
    output, payload = describe_output(y, shards=True)
    assert len(output.shards) == usable_device_count(12)
    assert output.device_ids == tuple(sorted(d.id for d in mesh.devices.flat))
    halves = _split_between_two_processes(output, payload)
    whole = _assemble(output, [h for h, _ in halves], [p for _, p in halves])
    assert whole == x.tobytes()


def test_processes_that_hold_other_values_for_the_same_block_are_told_apart():
    y = place(np.arange(8, dtype=np.int32), NamedSharding(data_mesh(8), P()))  # replicated
    output, payload = describe_output(y, shards=True)
    assert len(output.shards) == 1  # each block is sent once per process
    other = (np.arange(8, dtype=np.int32) + 1).tobytes()
    with pytest.raises(_Disagree, match="process 1 holds other values"):
        _assemble(output, [output, output], [payload, other])


def test_a_block_of_another_size_than_its_place_is_told_not_read():
    # Its sizes add up (decode_answer checks that much), but not to its place in the array.
    y = place(np.arange(8, dtype=np.int32), NamedSharding(data_mesh(8), P()))
    output, payload = describe_output(y, shards=True)
    (shard,) = output.shards
    wider = dataclasses.replace(output, shards=(dataclasses.replace(shard, nbytes=36),))
    with pytest.raises(_Disagree, match="process 1 sent a block of the output of another size"):
        _assemble(output, [output, wider], [payload, payload + bytes(4)])


def _sum_of_blocks(collective):
    """A shard_map_psum answer whose blocks' sums go through ``collective`` (or nothing)."""

    def shard_map_psum(x):
        mesh = data_mesh(x.shape[0])
        blocks = jax.device_put(x, NamedSharding(mesh, P("data")))

        def body(block):
            return collective(jax.numpy.sum(block))

        return jax.jit(
            jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=P(), check_vma=False)
        )(blocks)

    return shard_map_psum


def test_a_bare_wrong_value_says_which_collectives_its_program_ran(device_count):
    # Twice the total: a psum ran, so the generic hint does not blame a missing one.
    from judging import check_here  # noqa: PLC0415 (the tests' own helper)

    twice = _sum_of_blocks(lambda s: jax.lax.psum(s * 2, "data"))
    report = check_here("shard_map_psum", twice, few=True)
    (run,) = report.runs
    if device_count == 1:
        return  # one device: no collective over more than one; nothing to compare with
    # Each case whose mesh has several devices (one of one device runs no collective).
    noted = [r.message for r in run.results if r.status == "fail" and RAN in r.message]
    assert noted
    assert all("(the program that computed it runs 1 all-reduce" in m for m in noted), noted
    assert report.hints() == []  # no run of 1 device here to compare with
    one = DeviceRun(1, tuple(CaseResult(r.label, r.arguments, "pass") for r in run.results))
    hint = CheckReport("shard_map_psum", "twice.py", (one, run), 1.0).hints()[0]
    assert "a collective over the wrong values or axis" in hint
    assert "missing collective" not in hint


def test_a_bare_wrong_value_from_no_collective_gets_the_missing_collective_hint(device_count):
    from judging import check_here  # noqa: PLC0415 (the tests' own helper)

    ones = _sum_of_blocks(lambda s: s * 0 + 1.0)  # no collective; 1.0 on every device
    report = check_here("shard_map_psum", ones, few=True)
    (run,) = report.runs
    if device_count == 1:
        return
    wrong = [r.message for r in run.results if r.status == "fail"]
    assert any(RAN_NO_COLLECTIVE in m for m in wrong), wrong
    one = DeviceRun(1, tuple(CaseResult(r.label, r.arguments, "pass") for r in run.results))
    hint = CheckReport("shard_map_psum", "ones.py", (one, run), 1.0).hints()[0]
    assert "a missing collective (psum)" in hint
