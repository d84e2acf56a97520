"""The checker on pipeline_train_step: a right 1F1B step of the corpus (which passes there,
in test_solutions.py), with a slot for every microbatch (``M`` slots, not ``n``: what GPipe's
order keeps) gets BUDGET on 8 devices, from how what a device holds grows with the
microbatches, and passes on 1, where nothing is split.

Judged in this process (judging.check_here), at the suite's device count, 1 or 8.
"""

from __future__ import annotations

from pathlib import Path

from judging import check_here

NAME = "pipeline_train_step"
RIGHT = Path(__file__).parent / "solutions" / NAME / "right_fori_vjp_no_vma.py"


def _run(tmp_path, slots: str):
    source = RIGHT.read_text()
    # The reader's n slots (microbatch m in slot m % n), or one per microbatch.
    source = source.replace(
        "zeros = jnp.zeros((n, B, D), dtype)", f"zeros = jnp.zeros(({slots}, B, D), dtype)"
    )
    source = source.replace("% n", f"% {slots}")
    assert source.count(f"% {slots}") >= 4
    path = tmp_path / f"{NAME}.py"
    path.write_text(source)
    return check_here(NAME, path, lean=True)


def test_a_slot_for_every_microbatch_gets_budget_on_8_devices(tmp_path, device_count):
    report = _run(tmp_path, "M")
    (run,) = report.runs
    text = " ".join(str(report).split())  # the report wraps lines
    if device_count == 1:
        assert run.passed, text  # one stage: nothing split, no budget
        return
    assert {r.status for r in run.results} == {"pass", "budget"}, text
    assert "what one device holds grows by" in text, text
    assert "on a larger copy of this case" in text, text
