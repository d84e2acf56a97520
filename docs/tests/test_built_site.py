"""What the built site shows readers: the executed figures, the folded solutions.

These read the HTML that ``nox -s docs`` has just built into docs/_build/html.
"""

from __future__ import annotations

import json
import re
import tomllib

import flax
import jax
import jaxlib
import pytest
from built_pages import SITE, cell_output, explained, outputs, page  # this folder

from shard_tutorial import PROBLEMS

PROBLEM_PAGES = [problem.page for problem in PROBLEMS.values()]
NOTEBOOK_PAGES = [
    "index",
    "tutorial",
    "collectives/glance",
    "collectives/communication-costs",
    "beyond-one-process",
    "migrating",
    "training/gradients",
    "training/strategies",
    "training/costs-at-scale",
    "training/training-run",
    "parallelism/transformer-block",
    *PROBLEM_PAGES,
]


def test_the_tutorial_reproduces_the_seed_figures():
    text = outputs("tutorial")
    assert "[48. 52. 56. 60. 64. 68. 72. 76.]" in text  # column sums, partially replicated
    assert "global shape: x.shape=(32,)" in text
    assert "device local shape: x_block.shape=(4,)" in text
    assert re.search(r"Array\(\[\s*6,\s+22,\s+38,\s+54,\s+70,\s+86,\s+102,\s+118\]", text)
    assert "Array(496, dtype=int32)" in text
    # The layer, all three ways, to six decimals: [0.0213891, 0.893112, 0.59892, 0.977425].
    layer_lines = [
        line for line in text.splitlines() if "[0.021389 0.893112 0.59892  0.977425]" in line
    ]
    assert len(layer_lines) == 5  # jit on Auto and Explicit, constraint, reshard, shard_map


@pytest.mark.parametrize("name", NOTEBOOK_PAGES)
def test_every_sharding_diagram_was_drawn(name):
    source = (SITE.parent.parent / f"{name}.md").read_text()
    calls = source.count("jax.debug.visualize_array_sharding(")
    diagrams = [pre for pre in page(name).select("div.cell_output pre") if "CPU 0" in pre.text]
    assert len(diagrams) >= calls
    if name == "tutorial":
        assert "CPU 0,4" in outputs(name)  # the partially replicated column sums


@pytest.mark.parametrize("name", PROBLEM_PAGES)
def test_each_problem_page_folds_its_solution_away(name):
    soup = page(name)
    dropdowns = soup.select("details.sd-dropdown")
    assert len(dropdowns) == 1
    solution = dropdowns[0]
    assert not solution.has_attr("open")
    function = name.rsplit("/", 1)[-1].replace("-", "_")
    assert f"def {function}(" in solution.get_text()


@pytest.mark.parametrize("name", PROBLEM_PAGES)
def test_each_problem_page_runs_its_solution_on_8_devices(name):
    soup = page(name)
    section = soup.find(id="the-solution-on-8-devices")
    assert section is not None
    executed = section.get_text()
    assert "CPU 7" in executed or "cpu:7" in executed


@pytest.mark.parametrize("name", PROBLEM_PAGES)
def test_each_problem_page_states_the_problem_from_the_docstring(name):
    statement = page(name).find(id="the-problem")
    assert statement is not None
    assert statement.select("dl.py.function")
    assert "Raises" in statement.get_text()


@pytest.mark.parametrize("name", NOTEBOOK_PAGES)
def test_every_notebook_page_can_be_downloaded_executed(name):
    button = page(name).select_one("a.btn-download-notebook-button")
    assert button is not None
    assert button["href"].endswith(f"_sources/{name}.ipynb")
    notebook = json.loads((SITE / "_sources" / f"{name}.ipynb").read_text())
    # The page's own code cells, not the code its directives show (a reference solution,
    # a starter file: test_built_notebooks.py), which the page does not execute.
    code_cells = [
        cell
        for cell in notebook["cells"]
        if cell["cell_type"] == "code" and "shard_tutorial" not in cell["metadata"]
    ]
    assert code_cells
    assert all(cell["execution_count"] for cell in code_cells)
    assert any(cell["outputs"] for cell in code_cells)


def test_the_landing_page_prints_the_versions_it_was_built_with():
    table = page("index").find(id="what-this-site-was-built-with").get_text()
    assert jax.__version__ in table
    assert flax.__version__ in table
    assert "8 x CPU" in table


@pytest.mark.parametrize("name", PROBLEM_PAGES)
def test_each_problem_page_lets_the_reader_practise(name):
    function = name.rsplit("/", 1)[-1].replace("-", "_")
    section = page(name).find(id="try-it-yourself")
    assert section is not None
    download = section.select_one("a.starter-download")
    assert download is not None
    starter = (SITE / name).parent / download["href"]
    assert starter.resolve() == (SITE / "starters" / f"{function}.py").resolve()
    assert starter.read_text() == PROBLEMS[function].starter()
    reports = section.select("div.shard-tutorial-check")
    assert len(reports) == 2
    assert "PASSED: every case on 1 and 8 devices" in reports[0].get_text()
    assert "FAILED" in reports[1].get_text()
    # The reference's copy refuses each input the statement's "Raises" section refuses;
    # the mistake, which checks no arguments, is checked with refusals=False.
    rows = [row.get_text(" ") for row in reports[0].select("tbody tr")]
    refused = [row for row in rows if row.startswith("refused (")]
    assert len(refused) == len(PROBLEMS[function].refusals) >= 1, rows
    assert "refused (" not in reports[1].get_text()
    prose = " ".join(section.get_text().split())
    prose = prose.translate(str.maketrans("\u2018\u2019\u201c\u201d", "''\"\""))  # smartquotes
    assert 'the inputs the statement\'s "Raises" section refuses' in prose
    assert "refusals=False" in prose


# -- The general pages: every claim the tutorial and the migration page make about JAX is
# -- an executed output; these pin the outputs, so a JAX release that changes one fails here.


def test_the_tutorial_explains_tracing_before_sharding_types():
    traced = cell_output("tutorial", "def scale(v):")
    assert traced.count("trace time: v has type") == 2  # float32[3], then float32[4]
    assert "trace time: v has type float32[3]" in traced
    assert traced.count("run time: v =") == 3  # every call
    assert "run time: v = [10. 11. 12.]" in traced


def test_the_tutorial_sets_up_cpu_devices_on_the_cpu_platform():
    assert "cpu cpu 8" in cell_output("tutorial", "jax.config.jax_platforms")
    assert "cpu 8" in cell_output("migrating", "jax.config.jax_platforms")


def test_explicit_arrays_fail_to_index_outside_jit_and_each_way_out_works():
    assert "float32[16@data]" in cell_output("tutorial", "y = shard_map_double(")
    assert "ShardingTypeError" in cell_output("tutorial", "\ny[0]")
    refused = cell_output("tutorial", "attempts = {")
    for attempt in ("y[:3]", "y.reshape(4, 4)", "jnp.sort(y)"):
        assert f"{attempt}: ShardingTypeError" in refused
    no_mesh = cell_output("tutorial", "y.at[0].get(out_sharding=P())\n")
    assert "Using PartitionSpec when you are not under a mesh context" in no_mesh
    with_mesh = cell_output("tutorial", "with jax.set_mesh(y.sharding.mesh):")
    assert "0.0" in with_mesh
    assert "float32[16]" in with_mesh  # replicated: no split in the type
    assert "[ 8. 10. 12. 14.] 30.0" in with_mesh
    assert "[0. 2. 4.]" in cell_output("tutorial", "everywhere = NamedSharding(")
    inside_jit = cell_output("tutorial", '"a[0]": lambda a: a[0]')
    newer = tuple(map(int, jax.__version__.split(".")[:2])) >= (0, 12)
    assert ("jit a[0]: 0.0" in inside_jit) == newer  # what the prose says of 0.10, 0.12
    assert "jit a[:3]: ShardingTypeError" in inside_jit  # refused by both
    assert "0.0 [0. 2. 4.] [ 8. 10. 12. 14.] 30.0" in cell_output("tutorial", "np.asarray(y)")


def test_the_tutorial_shows_the_communication_in_the_compiled_programs():
    assert "[]" in cell_output("tutorial", "def collectives(")  # element-wise: none
    contract = cell_output("tutorial", "collectives(f_contract, arr_sharded)")
    assert re.search(r"all-reduce\(.*\{'x'\}", contract)  # summed along "x" only
    assert "trace time: float32[4@x,8@y] -> float32[8@y]" in cell_output(
        "tutorial", "def f_contract(x):"
    )
    # Auto: the type says nothing, the compiler chose a layout
    assert "float32[8] P('y',)" in cell_output("tutorial", "result_auto = f_contract(")
    guided = cell_output("tutorial", 'print("Auto + constraint:")')
    assert guided.count("all-reduce(") == 2
    assert guided.count("collective-permute(") == 2
    assert "all-reduce(" in cell_output("tutorial", "collectives(\n    jax.shard_map(global_sum")
    layers = [
        line
        for line in cell_output("tutorial", "variants = {").splitlines()
        if "[0.021389 0.893112 0.59892  0.977425]" in line
    ]
    assert len(layers) == 5
    assert all(line.endswith("['f32[4]{0} all-reduce']") for line in layers)


def test_the_tutorial_shows_reshard_auto_axes_and_jit_shardings():
    assert "True" in cell_output("tutorial", "jax.reshard is jax.sharding.reshard")
    assert "float32[8@(x,y)]" in cell_output("tutorial", "jax.sharding.auto_axes(")
    placed = cell_output("tutorial", "f_placed = jax.jit(")
    assert "SingleDeviceSharding" in placed
    assert "-> float32[8@(x,y)]" in placed
    assert "does not match the sharding" in cell_output("tutorial", "f_placed(jax.device_put(")
    assert "can only refer to Auto axes" in cell_output("tutorial", "def f_contract_constrained")


def test_the_tutorial_shows_shard_map_per_device_values_and_types():
    printed = cell_output("tutorial", "def f(x_block):")
    assert printed.count("device local shape") == 1  # trace time, once
    for device in range(8):
        first = 4 * device
        assert re.search(rf"device {device} has \[ *{first} +{first + 1} ", printed)
    with_set_mesh = cell_output("tutorial", "doubled = jax.shard_map(lambda b")
    assert "int32[32@x]" in with_set_mesh  # in_specs and mesh inferred
    types = cell_output("tutorial", "def show_types(x_block):")
    assert "int32[4]{V:x}" in types
    assert "int32[]{V:x}" in types
    assert re.search(r"after psum: +int32\[\]\n", types)
    outside_jit = cell_output("tutorial", "jax.shard_map(local_sum, mesh=mesh_1d")
    assert "'_rem_singleton'" in outside_jit
    assert "'local_sum'" in cell_output("tutorial", "jax.jit(local_sum_sharded)(x)")
    two_axes = cell_output("tutorial", "def column_sums(block):")
    assert "[[48. 52. 56. 60. 64. 68. 72. 76.]]" in two_axes
    assert "-> float32[1,2]{V:y}" in two_axes
    assert re.search(r"all-reduce\(.*\{'x'\}", two_axes)


def test_the_migration_page_shows_each_deprecation_and_removal():
    assert "DeprecationWarning: `with mesh:`" in cell_output("migrating", "with mesh:")
    assert "jax.experimental.pjit.pjit has been deprecated" in cell_output(
        "migrating", "pjit_module.pjit"
    )
    assert "AttributeError" in cell_output("migrating", "jax.lax.pvary(")
    assert "float32[] -> float32[]{V:x}" in cell_output("migrating", "jax.lax.pcast(")
    assert "AttributeError" in cell_output("migrating", "jax.device_put_replicated(")
    pmap = cell_output("migrating", "jax.make_jaxpr(jax.pmap(")
    assert "jit[" in pmap
    assert "shard_map[" in pmap
    assert "(Auto,) (Explicit,)" in cell_output("migrating", "mesh_utils.create_device_mesh")
    assert "float32[32@x]" in cell_output("migrating", "with jax.set_mesh(mesh):")


def test_the_landing_page_says_how_to_run_the_notebooks():
    text = page("index").get_text()
    assert 'pip install ".[notebooks]"' in text
    assert "JAX_PLATFORMS=cpu JAX_NUM_CPU_DEVICES=8" in text
    pyproject = tomllib.loads((SITE.parents[2] / "pyproject.toml").read_text())
    notebooks = " ".join(pyproject["project"]["optional-dependencies"]["notebooks"])
    for needed in ("jupyterlab", "matplotlib", "rich"):  # the app, the diagrams
        assert needed in notebooks


# The problem pages prove their claims about JAX with executed cells; these hold the
# key figures, so a JAX upgrade that changes the behaviour fails here instead of
# silently contradicting the prose.


def test_the_psum_page_sums_up_the_gradient_recipe_and_links_to_its_page():
    # The recipes and their numbers live on training/gradients (test_built_gradients.py).
    section = page("problems/shard-map-psum").select_one("section#psum-gradients")
    assert section is not None
    assert "pmean the loss" in section.get_text()
    assert section.select_one('a[href="../training/gradients.html#gradients"]')


def test_the_psum_page_shows_its_collectives_errors_and_lengths():
    text = outputs("problems/shard-map-psum")
    # explain: the psum is one all-reduce of one number, traced to the psum's line.
    [[reduce]] = explained("problems/shard-map-psum", "explain(sum_blocks, x)")
    assert (reduce["collective"], reduce["by"], reduce["moves"], reduce["B sent"]) == (
        "all-reduce",
        "asked",
        "f32[]",
        "7",
    )
    assert "return jax.lax.psum(partial_sum" in cell_output(
        "problems/shard-map-psum", "explain(sum_blocks, x)"
    )
    # XLA's own text, read without running: the same all-reduce, and inside a cond
    # branch when the check is silenced with pcast.
    assert re.search(r"all-reduce\(.*\n +from: jit\(block_sum_then_psum\)/shard_map/", text)
    assert re.search(r"from: jit\(cond_sum_silenced\)/shard_map/cond/branch", text)
    assert "partial sum: float32[]{V:data}" in text
    # The error names _rem_singleton outside jit, the body under jit.
    assert "the function '_rem_singleton'" in text
    assert "the function '<lambda>'" in text
    # 5 elements do not split 8 ways; data_mesh uses 5 devices.
    assert "does not evenly divide the dimension size 5" in text
    assert re.search(r"devices used: 5\s+15\.0", text)


def test_the_double_page_shows_the_check_works_on_one_device():
    text = outputs("problems/shard-map-double")
    assert "The mesh given has shape (1,)" in text
    assert "1 device, check off:  496.0" in text
    assert "8 devices, check off: 6.0" in text
    # The solution doubles each block where it is: no collective.
    assert explained("problems/shard-map-double", "explain(shard_map_double,") == []
    assert "shard_map_double: 1 program on 8 devices, 0 collectives, 0 B sent per device" in text


def test_the_vmap_page_shows_lengths_and_the_axis_to_split():
    text = outputs("problems/shard-map-vs-vmap")
    assert "does not evenly divide the dimension size 5" in text
    assert "devices used: 5" in text
    assert "(32,) instead of (8,)" in text
    assert "equal to by rows: True" in text
    # The whole solution: one program, no collective.
    assert explained("problems/shard-map-vs-vmap", "explain(shard_map_vs_vmap, x)") == []
    assert "shard_map_vs_vmap: 1 program on 8 devices, 0 collectives, 0 B sent per device" in text


def test_the_simulate_page_passes_modules_as_pytrees_and_says_what_runs_where():
    text = outputs("problems/shard-map-simulate")
    assert "kernel: P() on 4 devices" in text
    assert "equals the simulation: True" in text
    assert "equals the pytree way: True" in text
    assert explained("problems/shard-map-simulate", "explain(forward, replicated") == []
    assert "0 collectives, 0 B sent per device" in text
    assert "Invalid rng value: 0.0" in text
    assert "simulation runs on 1 device" in text
    assert "real pass runs on 8 devices" in text


@pytest.mark.parametrize("name", PROBLEM_PAGES)
def test_each_problem_page_shows_imports_and_cites_its_sources(name):
    soup = page(name)
    solution = soup.select_one("details.sd-dropdown").get_text()
    assert "import jax\n" in solution
    assert "shard_tutorial._" not in solution  # public names only
    sources = soup.find(id="sources")
    assert sources is not None
    assert any("docs.jax.dev" in a["href"] for a in sources.select("a[href]"))


def test_beyond_one_process_shows_each_process_of_a_real_cluster():
    text = outputs("beyond-one-process")
    for index in (0, 1):
        assert f"[{index}] process {index} of 2" in text
        assert f"[{index}] global shape (32,) fully addressable: False" in text
        assert f"[{index}] shard_map_psum(x): 496.0" in text
        assert f"[{index}] np.asarray(y) failed: Fetching value for `jax.Array` that spans" in text
        assert f"[{index}] process_allgather(y): [ 0.  2.  4." in text
    assert "[0] jax.local_devices(): [CpuDevice(id=0), CpuDevice(id=1)," in text
    assert "[1] jax.local_devices(): [CpuDevice(id=0)" not in text
    assert "[0]   cpu:0 slice(0, 4, None) [0. 1. 2. 3.]" in text  # process 0's own rows
    assert "[1]   cpu:0" not in text  # process 1 holds none of them
    assert text.count("only process 0 says: 8 devices in all") == 1


# -- Part II: "Collectives at a glance" ----------------------------------------------------
GLANCE = "collectives/glance"
COLLECTIVES = [
    "psum",
    "pmean",
    "all_gather",
    "psum_scatter",
    "ppermute",
    "all_to_all",
    "axis_index",
]


def test_the_glance_page_prints_what_each_device_holds():
    text = outputs(GLANCE)
    assert "device 7: [28]" in text  # psum of 0..7, on every device
    assert "device 0: [3.5]" in text  # pmean
    assert "device 5: [0 1 2 3 4 5 6 7]" in text  # all_gather, tiled
    assert "device 0: [7]" in text  # ppermute round the ring: device 7's value
    assert "device 1: [ 1 11 21 31 41 51 61 71]" in text  # all_to_all: column 1
    assert "device 6: [6]" in text  # axis_index


def test_the_glance_page_draws_every_collective_with_a_text_alternative():
    pictures = page(GLANCE).select("div.cell_output img.collective-diagram")
    assert [img["alt"].split(".")[0] for img in pictures] == COLLECTIVES
    for img in pictures:
        assert img["src"].startswith("data:image/svg+xml;base64,")
        assert "Before, " in img["alt"]
        assert "After, " in img["alt"]
    assert "every one of the 8 devices holds 28" in pictures[0]["alt"]


def test_the_glance_page_names_each_collectives_call_and_its_source():
    soup = page(GLANCE)
    # Each call is in an executed cell, so it runs as written.
    code = " ".join(div.get_text() for div in soup.select("div.cell div.cell_input"))
    for name in COLLECTIVES:
        assert f"jax.lax.{name}(" in code
        assert soup.select_one(f'a[href$="jax.lax.{name}.html"]') is not None


NEW_ALL_TO_ALL = tuple(map(int, jaxlib.__version__.split(".")[:3])) >= (0, 12, 1)
# What explain's table shows for each collective page's reference, on the page's own
# example: the collective, what it moves, and the bytes each device sends for it.
COLLECTIVE_PAGE_TABLES = {
    "collectives/shard-map-all-gather": [("all-gather", "s32[16]", "56")],
    # jaxlib 0.12.1 keeps a dimension of size 1 where the all-to-all cuts (the page says so).
    "collectives/shard-map-all-to-all": [
        ("all-to-all", "8 x s32[1,1,2]" if NEW_ALL_TO_ALL else "8 x s32[1,2]", "56")
    ],
    "collectives/shard-map-axis-index": [("all-gather", "s32[8]", "28")],
    "collectives/shard-map-pmean": [("all-reduce", "f32[]", "7")],
    "collectives/shard-map-ppermute": [("collective-permute", "f32[1]", "4")] * 2,
    "collectives/shard-map-psum-scatter": [("reduce-scatter", "f32[2]", "56")],
}


def _rows(table: list[dict[str, str]]) -> list[tuple[str, str, str]]:
    return [(row["collective"], row["moves"], row["B/run"]) for row in table]


@pytest.mark.parametrize("name", [p.page for p in PROBLEMS.values() if p.folder == "collectives"])
def test_each_collective_page_explains_its_communication_and_cites_its_sources(name):
    soup = page(name)
    section = soup.find(id="the-solution-on-8-devices").get_text()
    assert "explain(" in section
    [table] = explained(name, "explain(shard_map_")
    if name in COLLECTIVE_PAGE_TABLES:  # a page added later shows its table, at least
        assert _rows(table) == COLLECTIVE_PAGE_TABLES[name]
    assert {row["by"] for row in table} == {"asked"}  # the reference's own collectives
    assert soup.find(id="sources").select('a[href^="https://docs.jax.dev/"]')


def test_the_psum_scatter_page_explains_the_psum_that_sends_twice_as_much():
    [table] = explained("collectives/shard-map-psum-scatter", "explain(psum_version, x)")
    assert _rows(table) == [("all-reduce", "f32[16]", "112")]


def test_pages_keep_xlas_own_line_where_it_says_what_the_table_does_not():
    groups = cell_output("collectives/shard-map-ppermute", "program_lines(")
    assert "source_target_pairs={{0,7},{1,0}" in groups  # which device sends to which
    assert "partition-id()" in cell_output("collectives/shard-map-axis-index", "program_lines(")
