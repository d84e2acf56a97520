"""What the built pipeline-forward page shows: the schedule its program ran, its pitfalls,
what it sends, and the three training schedules with their bubble and memory.

These read the HTML that ``nox -s docs`` has just built into docs/_build/html (the
checks every problem page gets are in test_built_site.py).
"""

from __future__ import annotations

import functools
import re

import built_pages  # this folder

NAME = "parallelism/pipeline-forward"

page = functools.partial(built_pages.page, NAME)
cell_output = functools.partial(built_pages.cell_output, NAME)


def numbers(line: str) -> list[float]:
    return [float(n) for n in re.findall(r"-?\d+\.\d*(?:e[-+]?\d+)?", line)]


def labelled(text: str, label: str) -> list[float]:
    """The numbers printed on the line that starts with ``label``."""
    lines = [line for line in text.splitlines() if line.strip().startswith(label)]
    assert len(lines) == 1, f"{len(lines)} lines start with {label!r} in {text!r}"
    return numbers(lines[0].split(label, 1)[1])


def test_eight_stages_of_one_layer_each():
    assert "Mesh('stage': 8" in cell_output('mesh = axis_mesh("stage", 8)')
    text = cell_output("w_split = jax.device_put(")
    assert "cpu:0 holds layers 0 to 0" in text
    assert "cpu:2 holds layers 2 to 2" in text


def test_stage_2_waits_two_ticks_and_the_pipeline_matches_one_device():
    text = cell_output("def stages(")
    runs = re.findall(r"tick (\d+): stage 2 runs microbatch (-?\d+)", text)
    assert [int(m) for _, m in sorted(runs, key=lambda r: int(r[0]))] == [
        -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, -1
    ]  # fmt: skip
    assert labelled(text, "largest difference:")[0] < 1e-5


def test_the_solution_gives_every_stage_every_output():
    text = cell_output("y = pipeline_forward(x, w)")
    assert "{'stage': 8} replicated: True" in text
    assert labelled(text, "largest difference:")[0] < 1e-5
    assert "cpu:7 holds outputs of shape (4, 2, 8)" in text


def test_the_recorded_schedule_is_gpipes_and_its_bubble_is_printed():
    text = cell_output("y, ticks = pipeline_forward_schedule(x, w)")
    assert "[[ 0  1  2  3 -1 -1 -1 -1 -1 -1 -1]" in text
    assert "[-1 -1 -1 -1 -1 -1 -1  0  1  2  3]]" in text
    assert "bubble: 0.636 of the stages' time; (n - 1) / (M + n - 1) = 0.636" in text
    pictures = page().select("div.cell_output img.pipeline-schedule")
    assert len(pictures) == 4  # the recorded one, then GPipe, 1F1B and interleaved
    assert pictures[0]["alt"].startswith("GPipe, forward, recorded on 8 devices, 4 microbatches")
    assert "Device 2: idle, idle, F0, F1, F2, F3, idle" in pictures[0]["alt"]
    assert "M=16: 23 ticks, bubble 0.304 = 7 / 23 = 0.304" in cell_output("x16 = ")


def test_the_pitfalls_show_what_the_answer_is():
    text = cell_output("def no_passing(")
    assert labelled(text, "received:") == labelled(text, "x through layer 7:")
    assert labelled(text, "received:") != labelled(text, "expected:")
    text = cell_output("def one_tick_short(")
    assert labelled(text, "microbatch 2: largest difference")[0] == 0.0
    assert labelled(text, "microbatch 3: largest difference")[0] > 0.01
    assert "the last output: [0. 0. 0. 0.]" in text
    text = cell_output("def every_stage_added(")
    assert "the sum of what every one of the 8 stages stored" in " ".join(text.split())
    text = cell_output("def gathered(")
    assert labelled(text, "largest difference:")[0] < 1e-5
    assert "all-gather -> f32[8,8,8] (2048 bytes)" in text


def test_the_compiled_program_sends_activations_then_the_outputs_once():
    [table] = built_pages.explained(NAME, "explain(pipeline_forward, x, w)")
    rows = [(row["collective"], row["over"], row["moves"], row["B sent"]) for row in table]
    # one activation per tick but the last, each stage to the next: 7 pairs, no 7 -> 0
    assert rows[:-1] == [("collective-permute", "7 pairs", "f32[2,8]", "64")] * 10
    assert rows[-1] == ("all-reduce", "8 devices (stage)", "f32[4,2,8]", "448")  # 2 x 7/8 x 256
    text = cell_output("explain(pipeline_forward, x, w)")
    assert "pipeline_forward: 1 program on 8 devices, 11 collectives, 1,088 B sent" in text
    text = cell_output("text = compiled_text(pipeline_forward, x, w)")
    assert "collective-permute-start: 0" in text
    assert "collective-permute: 10" in text


def test_the_three_training_schedules_bubble_and_memory():
    text = cell_output("{'schedule':<26}")
    rows = {
        line.split("  ")[0].strip(): [
            float(n) for n in re.findall(r"\d+(?:\.\d+)?", line.split("  ", 1)[1])
        ]
        for line in text.splitlines()[1:]
        if line.strip()
    }
    # bubble, formula, device 0's activations, idle time per device in full steps
    assert rows["GPipe"] == [0.273, 0.273, 8.0, 6.0]
    assert rows["1F1B"] == [0.273, 0.273, 4.0, 6.0]
    assert rows["interleaved 1F1B (v=2)"] == [0.158, 0.158, 5.5, 3.0]
    prose = " ".join(page().get_text(" ").split())
    assert "jax-ml/jax#17216" in prose
    # Issue 37, item 2: interleaving halves the bubble's time, not its share.
    assert "half as large a share" not in prose
    assert "0.273 to 0.158" in prose


def test_the_checker_passes_the_reference_and_explains_stages_that_do_not_pass():
    assert "PASSED: every case on 1 and 8 devices" in cell_output(
        'check("pipeline_forward", reference_copy('
    )
    text = " ".join(cell_output("def pipeline_without_passing(").split())
    assert "FAILED" in text
    assert "pass*" in text  # right values on 1 device: nothing to pass on, shard_map asked
    assert "did not pass their activations on" in text


def test_every_stage_holds_x_and_the_page_says_it_is_a_simplification():
    """Issue 37, item 10."""
    assert "holds x (4, 2, 8), 256 bytes, and never reads it" in cell_output(
        "x_all.addressable_shards[-1]"
    )
    prose = " ".join(page().get_text(" ").split())
    assert "That is a simplification" in prose
    assert "feeds the input batches to the first stage only" in prose


def test_the_stage_counts_the_cases_meet():
    """Issue 37, item 15: L from 1 to 16 gives every stage count from 1 to 8."""
    text = cell_output('axis_mesh("stage", L)')
    assert "stage counts: [1, 2, 3, 4, 5, 6, 7, 8]" in text
    for stages in ("9: 3", "11: 1", "16: 8"):
        assert stages in text
    assert "8, 6, 7, 3 or 1" not in page().get_text(" ")
