"""What the built page "Training a transformer block on a 2 x 4 mesh" shows readers.

These read the HTML that ``nox -s docs`` has just built into docs/_build/html.
"""

from __future__ import annotations

import re

from built_pages import cell_output, outputs, page

PAGE = "parallelism/transformer-block"


def test_every_matrix_lies_in_eighths_and_the_norms_whole():
    text = cell_output(PAGE, "for name, value in params.items():")
    assert "qkv    (32, 3, 4, 8)" in text
    assert "block (16, 3, 1, 8)" in text  # half the rows, one of the 4 heads
    assert "block (16, 16)" in text  # up and down: half by 16 of 64 hidden units
    assert "norm1  (32,)" in text
    assert "block (32,)" in text


def test_the_sharded_gradients_are_one_devices():
    text = cell_output(PAGE, "sharded_gradients(mesh)")
    value = re.search(r"loss: (\S+) on 2 x 4, (\S+) on one device", text)
    assert value, text
    # The same to float32 rounding, as the page says (the last printed digit may differ:
    # the sum runs in another order, and LLVM's code generation changes it too).
    assert abs(float(value[1]) - float(value[2])) <= 1e-5 * abs(float(value[2]))
    gaps = [float(g) for g in re.findall(r"largest difference (\S+)", text)]
    sizes = [float(s) for s in re.findall(r"largest gradient (\S+),", text)]
    assert len(gaps) == len(sizes) == 6, text
    assert all(gap <= 1e-5 * size for gap, size in zip(gaps, sizes, strict=True))


def test_the_step_sends_what_its_collectives_add_up_to():
    text = cell_output(PAGE, "parse_collectives(compiled.as_text())")
    lines = [line for line in text.splitlines() if " over " in line]
    assert len(lines) == 17, text
    sent = sum(float(re.search(r"sends\s+([\d,]+) B", line)[1].replace(",", "")) for line in lines)
    total = re.search(r"17 collectives; each device sends ([\d,]+) bytes per step", text)
    assert total, text
    assert int(total[1].replace(",", "")) == round(sent) == 57_799
    assert sum("all-gather      f32[4,16,32]" in line for line in lines) == 4  # SP -> TP
    assert sum("reduce-scatter  f32[4,4,32]" in line for line in lines) == 4  # TP -> SP


def test_each_device_holds_about_an_eighth_of_the_arguments():
    text = cell_output(PAGE, "memory_analysis()")
    sizes = [
        int(re.search(rf"{label}\s+arguments\s+([\d,]+) B", text)[1].replace(",", ""))
        for label in ("2 x 4 mesh, per device", "one device")
    ]
    assert 7 < sizes[1] / sizes[0] <= 8


def test_the_two_loss_curves_lie_on_top_of_each_other():
    text = outputs(PAGE)
    gap = re.search(r"largest relative difference at any step: (\S+)", text)
    assert gap, text
    assert float(gap[1]) < 1e-5
    ends = re.search(r"loss from (\S+) to (\S+) on 2 x 4; from (\S+) to (\S+) on one", text)
    assert ends, text
    assert float(ends[1]) / float(ends[2]) > 5  # it learns
    assert page(PAGE).select("figure img, div.cell_output img, svg")  # the curves are drawn


def test_the_calculator_predicts_the_compiled_steps_traffic_and_arguments():
    text = cell_output(PAGE, "predicted = predicted_costs(config)")
    predicted = re.search(r"predicted: (\d+) collectives, ([\d,]+) bytes", text)
    compiled = re.search(r"compiled:  (\d+) collectives, ([\d,]+) bytes", text)
    assert predicted, text
    assert compiled, text
    assert predicted.groups() == compiled.groups() == ("17", "57,799")
    memory = cell_output(PAGE, "memory_analysis()")
    measured = re.search(r"2 x 4 mesh, per device\s+arguments\s+([\d,]+) B", memory)
    foreseen = re.search(r"predicted per device: .* arguments ([\d,]+) B", memory)
    assert measured, memory
    assert foreseen, memory
    assert measured[1] == foreseen[1]


def test_at_llama_width_the_activations_move_most():
    text = cell_output(PAGE, "for data, model in ((2, 4), (8, 8)):")
    for mesh in ("2 x 4", "8 x 8"):
        block = text.split(f"{mesh}: holds", 1)[1].split(" x ", 1)[0]
        sent = {
            what.strip(): float(mb.replace(",", ""))
            for what, mb in re.findall(r"sends (.+?)\s+([\d,.]+) MB", block)
        }
        # Several times what the weights send: 17 times on 2 x 4, 6 times on 8 x 8.
        assert sent["activations"] > 5 * (sent["weights"] + sent["weights' gradients"]), sent


def test_the_llama_width_block_is_not_llama_3_8bs_block():
    """Issue 37, item 8: full multi-head attention and two matrices, not GQA and SwiGLU."""
    text = cell_output(PAGE, "big = BlockConfig(")
    assert "this block: 184.6 M parameters" in text
    assert "Llama 3 8B's block (8 key-value heads, SwiGLU): 218.1 M" in text
    prose = " ".join(page(PAGE).get_text(" ").split())
    assert "It is not Llama 3 8B\N{RIGHT SINGLE QUOTATION MARK}s block" in prose


def test_the_page_says_what_the_teacher_is_and_what_the_end_point_is_worth():
    """Issue 37, item 9."""
    text = cell_output(PAGE, "synthetic_data(config, seed=0, batches=16)")
    zeros = re.search(r"answering zeros:\s+(\S+)", text)
    residual = re.search(r"answering x \(the residual path\):\s+(\S+)", text)
    student = re.search(r"the student after 300 steps:\s+(\S+)", text)
    assert zeros, text
    assert residual, text
    assert student, text
    assert (zeros[1], residual[1]) == ("1.702", "0.755")
    assert float(student[1]) < float(residual[1]) / 4
    prose = " ".join(page(PAGE).get_text(" ").split())
    assert "The teacher is the data" in prose


def test_the_gradients_specs_are_compared_as_layouts():
    """Issue 37, item 18: P('data', None, 'model') lays out qkv as SPECS' entry does."""
    text = cell_output(PAGE, "sharded_gradients(mesh)")
    assert text.count(": True") == 6, text
    assert "P('data', None, 'model') == P('data', None, 'model', None): False" in text
