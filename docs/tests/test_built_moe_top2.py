"""What the built "Top-2 mixture of experts with a capacity" page shows: a worked routing
with its dropped choices, the layer's two fixed-size all-to-alls and their bytes, the
pictures drawn from its buffers and drop rates, one trace for any routing, the classic
mistakes with the checker's words, capacity 0 on the JAX that built it, and the checker.

These read the HTML that ``nox -s docs`` has just built into docs/_build/html.
"""

from __future__ import annotations

import built_pages  # this folder
import jax

NAME = "scale/moe-top2"


def output(source: str) -> str:
    """The output of the page's one cell whose code contains ``source``, spaces joined."""
    return " ".join(built_pages.cell_output(NAME, source).split())


def test_the_worked_example_keeps_first_choices_before_second_ones():
    printed = output("e1, e2, g1, g2 = route(logits[:4])")
    assert "token 2: e1= 1 gate 0.861 slot 0 (kept)" in printed
    assert "token 3: e1= 1 gate 0.890 slot 1 (dropped)" in printed
    assert "e2= 3 gate 0.418 slot 0 (kept)" in printed


def test_the_layer_sends_two_fixed_size_buffers_and_aux_sums():
    printed = output("def layer(")
    assert "right: True" in printed
    assert "all-reduce -> f32[2,16] (128 bytes)" in printed
    assert "(256 bytes)" in printed  # the dispatch: 16 experts x 1 slot x 4 features
    assert "(192 bytes)" in printed  # the return: 16 x 1 x 3 results
    assert printed.count("224 bytes sent per device") == 2  # the dispatch and the sums
    assert "168 bytes sent per device" in printed


def test_the_pictures_are_drawn_with_their_text_alternatives():
    soup = built_pages.page(NAME)
    slots = soup.select_one("img.moe-slots")
    assert slots is not None
    assert "36 of its 128 slots hold a token" in slots["alt"]
    assert soup.select_one("img.moe-drop-rate") is not None


def test_a_fixed_capacity_traces_once_and_a_data_dependent_shape_does_not_jit():
    assert "ConcretizationTypeError" in output("def tokens_of_expert_0(")
    printed = output("def counted(")
    assert "the case's router: y (32, 3), aux 2.632, traced 1 time(s)" in printed
    assert "all to experts 0 and 1: y (32, 3), aux 4.904, traced 1 time(s)" in printed


def test_the_drop_rate_falls_with_the_capacity_factor():
    printed = output("def kept_choices(")
    assert "capacity: [1, 2, 3, 4, 5, 6, 8, 12, 16]" in printed
    assert "random logits: 76% 53% 34% 20% 10% 5% 1% 0% 0%" in printed
    assert "skewed logits: 83% 69% 58% 48% 40% 32% 19% 4% 0%" in printed


def test_each_mistake_is_run_and_explained():
    for source, words in [
        ("seconds_first=True)(x8", "the second choices took the experts' slots before the first"),
        ("on_mesh(one, capacity)", "the capacity was counted over 32 tokens (all of them)"),
        ("full_softmax=True)(x8", "the gates are the softmax of all E logits"),
        ("local_aux=True)(x8", "aux is that of one device's own 4 tokens"),
    ]:
        assert words in output(source), source


def test_capacity_0_is_shown_on_the_jax_that_built_the_page():
    printed = output("empty = on_mesh(mesh, 0)")
    assert "traced all_to_all: 2" in printed
    assert "kind='all-to-all'" not in printed  # dropped from the compiled program
    assert "y all zeros: True aux as before: True" in printed
    exchanged = output("lambda b: jax.lax.all_to_all(b")
    assert f"jax {jax.__version__} shape (128, 0, 4)" in exchanged
    old = jax.__version__.startswith("0.10.")
    assert ("read fails" in exchanged) == old
    assert ("first shard (16, 0, 4)" in exchanged) == (not old)
    assert "eager: JaxRuntimeError" in output("def combine_only(")


def test_the_checker_passes_the_reference_and_fails_the_mistake():
    assert "PASSED: every case on 1 and 8 devices" in output('check("moe_top2", reference_copy(')
    failed = output("def seconds_first(")
    assert "FAILED (8 devices:" in failed
    assert "the second choices took the experts' slots before the first choices" in failed
