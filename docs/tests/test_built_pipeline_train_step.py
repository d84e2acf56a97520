"""What the built "Pipeline-parallel training step" page shows: the reference's values,
the 1F1B schedule a program ran, GPipe, 1F1B and interleaved 1F1B measured, the
backward split in two, the mistakes with the checker's words, the compiled program's
collectives, and the checker's BUDGET verdict on GPipe's order.

These read the HTML that ``nox -s docs`` has just built into docs/_build/html.
"""

from __future__ import annotations

import re

import built_pages  # this folder

NAME = "scale/pipeline-train-step"


def output(source: str) -> str:
    """The output of the page's one cell whose code contains ``source``, spaces joined."""
    return " ".join(built_pages.cell_output(NAME, source).split())


def test_the_reference_gives_jax_grads_numbers_and_runs_1f1b():
    printed = output("loss, grad = pipeline_train_step(x, y, w)")
    assert "on every stage: True" in printed
    assert "grad split as P('stage', None, None) over {'stage': 4}" in printed
    ran = output('scheduled_train_step(x, y, w, "1f1b")')
    assert "same loss: True" in ran
    assert "each stage holds at most [4.0, 3.0, 2.0, 1.0] microbatches" in ran


def test_gpipe_keeps_every_microbatch_and_1f1b_n():
    printed = output("measured = {}")
    assert re.search(r"GPipe \(executed\) 78 ticks, bubble 0\.179, device 0 keeps 32", printed)
    assert re.search(r"1F1B \(executed\) 78 ticks, bubble 0\.179, device 0 keeps 8 ", printed)
    assert "142 ticks, bubble 0.099, device 0 keeps 11.5" in printed
    temps = [int(t.replace(",", "")) for t in re.findall(r"temporaries ([\d,]+) bytes", printed)]
    assert temps[0] > 2 * temps[1]  # GPipe's slots: 32; 1F1B's: 8


def test_the_backward_splits_into_b_and_w():
    printed = output("def stage_layers(")
    assert "B alone is dh: True" in printed
    assert "W alone is dw: True" in printed


def test_the_mistakes_are_run_with_the_checkers_words():
    assert "8 times too large" in output('diagnose(mean="microbatch")')
    assert 'all-reduced (psum over "stage")' in output('diagnose(grads="psum")')
    assert "did not reach the stages before" in output('diagnose(back="to_next")')


def test_the_program_sends_activations_and_gradients_between_neighbours():
    printed = output("for collective in collectives(pipeline_train_step")
    assert "collective-permute -> f32[2,4] (32 bytes) among {{0,1},{1,2},{2,3}}" in printed
    assert "collective-permute -> f32[2,4] (32 bytes) among {{1,0},{2,1},{3,2}}" in printed
    assert "all-reduce -> f32[] (4 bytes)" in printed


def test_gpipes_order_gets_budget():
    printed = output("gpipe_train_step,\n    devices=(8,)")
    assert "FAILED" in printed
    assert "BUDGET" in printed
    assert "grows by" in printed


def test_the_solution_on_8_devices_keeps_each_layers_gradient_on_its_stage():
    printed = output("loss16, grad16 = pipeline_train_step(x, y, w16)")
    assert "grad split as P('stage', None, None) over {'stage': 8}" in printed
    assert "CPU 7" in printed
    assert "collective-permute" in printed
