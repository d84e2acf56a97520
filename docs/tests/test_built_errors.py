"""What the built appendix "The errors readers meet" shows: each error raised for real,
each fix run beside it, and the subprocesses that hang until XLA or JAX aborts them.

These read the HTML that ``nox -s docs`` has just built into docs/_build/html.
"""

from __future__ import annotations

import functools

import built_pages  # this folder

NAME = "errors"

page = functools.partial(built_pages.page, NAME)
cell_output = functools.partial(built_pages.cell_output, NAME)


def error_cells() -> list[str]:
    """The output of every cell tagged raises-exception, in page order."""
    return [
        cell.select_one("div.cell_output").get_text()
        for cell in page().select("div.cell.tag_raises-exception")
    ]


def test_the_page_is_in_the_toctree_and_linked_from_the_pages_that_teach_each_idea():
    assert page().select_one("[id='errors']") is not None
    index = built_pages.page("index")
    assert index.select_one("a[href='errors.html']") is not None
    for teacher, anchor in [
        ("training/gradients", "errors-vma"),
        ("migrating", "errors-explicit"),
        ("migrating", "errors-make-mesh"),
        ("collectives/shard-map-ppermute", "errors-ppermute-order"),
        ("problems/shard-map-double", "errors-indivisible"),
        ("beyond-one-process", "errors-hang"),
        ("beyond-one-process", "errors-rendezvous"),
        ("parallelism/expert-parallel-moe", "errors-explicit"),
    ]:
        found = built_pages.page(teacher).select(f"a[href$='errors.html#{anchor}']")
        assert found, (teacher, anchor)
        assert page().select_one(f"[id='{anchor}']") is not None


def test_each_error_is_raised_for_real():
    errors = error_cells()
    expected = [
        "cond branches must have equal output types",
        "scan body function carry input and carry output must have equal types",
        "out_specs which require replication which can't be statically inferred",
        "Contracting dimensions are sharded and it is ambiguous",
        "produces an illegally sharded result: f32[8@x,8@x]",
        "Use `.at[...].get(out_sharding=)`",
        "Closing over inputs to shard_map where the input is sharded on `Explicit` axes",
        "Please set a mesh via `jax.set_mesh` if a PartitionSpec is passed to device_put",
        "does not evenly divide the dimension size 6",
        "8 does not evenly divide 6",
        "Make sure that the axis_name passed to jax.lax.ppermute is in the same order",
        "unexpected keyword argument 'axis_shapes'",
    ]
    assert len(errors) == len(expected)
    for text, message in zip(errors, expected, strict=True):
        assert message in " ".join(text.split()), (message, text[:300])


def test_each_fix_runs():
    assert "[ 0.  1.  2.  3." in cell_output('jax.lax.pcast(jax.lax.psum(b, "x"), "x"')
    assert "[3 3 3 3 3 3 3 3]" in cell_output("r.argmax(axis=-1, keepdims=True)")
    assert "[ 1.  5.  9. 13. 17. 21. 25. 29.]" in cell_output("start = jax.lax.pcast(0.0")
    assert cell_output("check_vma=False\n)(x)").strip() == "[0. 2.]"  # device 0's block
    assert "float32[8,4] [16. 16. 16. 16.]" in cell_output("product = jnp.matmul(")
    assert "float32[8@x,8]" in cell_output("jnp.matmul(c, d, out_sharding")
    assert cell_output("x.at[:1].get(").strip() == "[0.]"
    assert "float32[16@x]" in cell_output("lambda b, w: b * w")
    assert cell_output("with jax.set_mesh(mesh):").split() == ["float32[8@x]"] * 2


def test_auto_axes_keep_an_indivisible_result_whole_on_every_device():
    text = cell_output("first6 = jax.jit(")
    assert "in: P('x',) (2,) per device" in text
    assert "out: P() (6,) per device" in text


def test_ppermute_in_the_meshs_order_rotates_and_0_10_is_described():
    assert cell_output('hasattr(jax, "raise_on_ppermute_sort_diff")').strip() == "False"
    text = cell_output('rotate(("a", "b"))(ordered)')
    assert text.strip() == "[7. 0. 1. 2. 3. 4. 5. 6.] [7. 0. 1. 2. 3. 4. 5. 6.]"
    prose = " ".join(page().get_text(" ").split())
    assert "printed [7. 6. 0. 1. 2. 3. 4. 5.] , not a rotation" in prose or (
        "printed [7. 6. 0. 1. 2. 3. 4. 5.], not a rotation" in prose
    )
    assert "0c17ff9c866088155e969799766e54925c1ad0dd" in str(page())


def test_the_hang_aborts_after_the_short_timeout_in_its_own_process():
    text = cell_output("NEVER_REACHED, ")
    assert "exit code: -6" in text
    assert "of 2 seconds exceeded" in text
    assert "Expected 8 threads to join the rendezvous, but only 4 of them arrived on time" in text


def test_the_lonely_process_aborts_after_its_initialization_timeout():
    assert cell_output('initialization_timeout"\n]').strip() == "300 seconds"
    text = cell_output("code, stderr = run_alone(ALONE)")
    assert "exit code: -6" in text
    assert "DEADLINE_EXCEEDED" in text


def test_the_index_lists_part_v_the_costs_pages_and_this_appendix():
    """Issue 37, item 13: "What you will learn, in this order" omitted Part V and the costs."""
    index = built_pages.page("index")
    (heading,) = [h for h in index.select("h2") if "What you will learn" in h.get_text()]
    listing = heading.find_next("ol")
    assert listing is not None
    hrefs = [str(a["href"]) for a in listing.select("a[href]")]
    for target in (
        "parallelism/index.html",
        "collectives/communication-costs.html",
        "training/strategies.html",
        "training/costs-at-scale.html",
        "parallelism/pipeline-forward.html",
        "parallelism/transformer-block.html",
        "errors.html",
    ):
        assert any(href.startswith(target) for href in hrefs), target


def test_every_device_reaching_the_psum_is_the_cure():
    text = cell_output('total = jax.lax.psum(v, "x")  # every device takes part')
    assert text.strip() == "[28. 28. 28. 28.  4.  5.  6.  7.]"
