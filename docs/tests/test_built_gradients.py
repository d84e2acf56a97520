"""What the built page "Gradients across devices" (training/gradients) shows readers.

These read the HTML that ``nox -s docs`` has just built into docs/_build/html. The page
proves its claims about JAX with executed cells; these tests hold the key figures, so a
JAX upgrade that changes the behaviour fails here instead of silently contradicting the
prose.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

SITE = Path(__file__).parents[1] / "_build" / "html"
PAGE = "training/gradients"
WHOLE_BATCH = "[-310. -325.]"


@pytest.fixture(scope="module")
def text() -> str:
    """The text of every executed cell output on the page, blank lines dropped.

    (A cell's output can come in several blocks, e.g. what it prints while JAX traces
    and what it prints after; joined, they read as the page shows them.)
    """
    path = SITE / f"{PAGE}.html"
    if not path.is_file():
        pytest.fail(f"{path} is missing: build the site first (nox -s docs)")
    soup = BeautifulSoup(path.read_text(), "html.parser")
    outputs = "".join(pre.get_text() for pre in soup.select("div.cell_output pre"))
    return re.sub(r"\n{2,}", "\n", outputs)


def rows(text: str, suffix: str) -> dict[str, str]:
    """The recipe table lines ``name  [value]  suffix``, as {name: "[value]"}."""
    pattern = rf"^(\w+) +(\[.*?) +{re.escape(suffix)}$"
    return dict(re.findall(pattern, text, re.MULTILINE))


def test_the_types_say_which_values_vary(text):
    assert "gradient of the whole batch: [-310. -325.]" in text
    assert re.search(r"^w +float32\[2\]$", text, re.MULTILINE)  # invariant: no {V:...}
    assert re.search(r"^x \(a block\) +float32\[2,2\]\{V:data\}$", text, re.MULTILINE)
    assert re.search(r"^local loss +float32\[\]\{V:data\}$", text, re.MULTILINE)
    assert re.search(r"^pmean of it +float32\[\]$", text, re.MULTILINE)


def test_pcast_is_free_and_transposes_to_a_psum(text):
    # The implicit cast shows up as pvary in the traced forward pass...
    assert "{V:data} = pvary[axes=('data',)]" in text
    # ...costs no communication, written by hand...
    assert "before: float32[2]  after: float32[2]{V:data}\ncollectives: []" in text
    # ...and its transpose adds what the 8 devices send back (1 + ... + 8).
    assert "sent back: float32[2]{V:data}  received: float32[2]\n[36. 36.]" in text
    # The gradient of the block sums is the whole batch's column sums, via psum_invariant.
    assert "[240. 256.]\ncolumn sums of the whole batch: [240. 256.]" in text
    assert "f32[2] = psum_invariant[axes=('data',)]" in text


def test_grad_of_a_local_loss_is_the_sum_of_the_devices_gradients(text):
    assert "their sum:              [-2480. -2600.]" in text
    assert "jax.grad, replicated w: [-2480. -2600.]" in text
    assert "8 x the whole batch's:  [-2480. -2600.]" in text


def test_the_backward_pass_compiles_to_one_all_reduce(text):
    assert "forward (local loss): 0 collective(s)" in text
    assert re.search(
        r"jax\.grad: 1 collective\(s\)\n +all-reduce -> f32\[2\] \(8 bytes\) among ", text
    )
    assert re.search(
        r"jax\.value_and_grad: 1 collective\(s\)\n"
        r" +all-reduce -> \(f32\[\], f32\[2\]\) \(12 bytes\) among ",
        text,
    )


def test_the_pmap_recipe_is_right_under_pmap_and_8_or_64_times_under_shard_map(text):
    assert f"pmap recipe under pmap: {WHOLE_BATCH}" in text
    assert "w: float32[2]  x: float32[2,2]" in text  # no {V:...} under pmap
    assert re.search(r"^plain jax\.grad, 1 device +\[-310\. -325\.\] +1 x", text, re.MULTILINE)
    assert rows(text, "x the whole batch's") == {
        "pmean_of_the_loss": "[-310. -325.]  1",
        "local_loss_only": "[-2480. -2600.]  8",
        "local_loss_then_pmean_grads": "[-2480. -2600.]  8",
        "local_loss_then_psum_grads": "[-19840. -20800.]  64",
    }


def test_check_vma_false_makes_gradients_per_device(text):
    # Each device's gradient of its own 2 rows, as the page showed them earlier.
    per_device = "devices 0..7: [-2. -3.] ... [-842. -871.]"
    assert "[-842. -871.]]\ntheir sum:" in text
    assert rows(text, "x, on every device") == {
        "local_loss_then_pmean_grads": "[-310. -325.]  1",
        "local_loss_then_psum_grads": "[-2480. -2600.]  8",
    }
    for name in ("pmean_of_the_loss", "local_loss_only"):
        assert re.search(rf"^{name} +{re.escape(per_device)}$", text, re.MULTILINE)
    # With out_specs=P() one device's gradient comes back, without an error.
    assert "\n[-2. -3.]\n" in text


def test_grad_on_explicit_arrays_wants_jit_or_set_mesh(text):
    assert "w: float32[2]  x: float32[16@data,2]" in text
    assert "[-310. -325.] float32[2]\nall-reduce -> f32[2] (8 bytes)" in text
    assert "loss: 77.5" in text
    assert "Length of device assignment 1 is not equal to the size of the mesh 8" in text
    assert "Please enter your `jit` into a mesh context via `jax.set_mesh`" in text
    assert text.count("[-310. -325.] float32[2]") == 2  # under jit, under set_mesh
    assert "float32[16,2] [-310. -325.]" in text  # an Auto mesh needs neither


def test_a_reduced_cast_defers_the_sum_with_no_collective(text):
    assert "gradient of the whole batch:\n[-1240. -1255. -1270." in text
    assert (
        "w float32[8], cast float32[8]{R:data}\ngradient float32[8]{U:data}\ncollectives: []"
    ) in text
    assert "returned: float32[8]{U:data}, P(None, unreduced={'data'}, unreduced_kind=sum)" in text
    # Device 0's piece: the gradient of its own 2 rows, divided by 8; the 8 add up.
    assert "device 0's piece: [-1.    -1.125 -1.25  -1.375" in text
    assert "sum of the 8:     [-1240. -1255. -1270." in text


def test_only_linear_operations_accept_the_unreduced_gradient(text):
    assert "g + g: float32[8]{U:data}" in text
    assert (
        "jnp.cos(g): ShardingTypeError: cos is a non-linear operation and cannot accept"
        " input that is unreduced. Got float32[8]{U:data}"
    ) in text
    assert (
        "w - 0.1 * g: ShardingTypeError: LHS should be reduced along the same axes RHS is"
        " unreduced on."
    ) in text


def test_the_deferred_sum_becomes_a_reduce_scatter_of_half_the_bytes(text):
    pattern = r"^(\w+) +(all-reduce|reduce-scatter) -> (f32\[\d\]), (\d+) bytes sent, right: (\w+)$"
    found = {name: rest for name, *rest in re.findall(pattern, text, re.MULTILINE)}
    assert found == {
        "pmean_of_the_loss": ["all-reduce", "f32[8]", "56", "True"],
        "reduced_then_psum": ["all-reduce", "f32[8]", "56", "True"],
        "replicated_then_my_slice": ["all-reduce", "f32[8]", "56", "True"],
        "reduced_then_psum_scatter": ["reduce-scatter", "f32[1]", "28", "True"],
        "own_copy_cast_to_unreduced": ["reduce-scatter", "f32[1]", "28", "True"],
    }


def test_reshard_takes_the_pending_sum_outside_shard_map(text):
    # On CPU, XLA all-reduces for a split result too (the page says so).
    assert (
        "reshard to P(): float32[8], right: True\n    all-reduce -> f32[8] (32 bytes)\n"
        "reshard to P('data',): float32[8@data], right: True\n"
        "    all-reduce -> f32[8] (32 bytes)"
    ) in text
