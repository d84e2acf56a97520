"""The notebooks a reader downloads: the pages as rendered, and they run.

These read the notebooks that ``nox -s docs`` wrote into docs/_build/html/_sources.
"""

from __future__ import annotations

import copy
import functools
import itertools
import re

import nbformat
import pytest
from built_pages import SITE  # this folder
from nbclient import NotebookClient
from traitlets.config import Config

from shard_tutorial import PROBLEMS

DOCS = SITE.parents[1]
# Every page that is a notebook (a jupytext header) is offered as one.
NOTEBOOK_PAGES = sorted(
    path.relative_to(DOCS).with_suffix("").as_posix()
    for path in DOCS.rglob("*.md")
    if "_build" not in path.parts and "kernelspec:" in path.read_text()
)
# What MyST markup would look like if it were left in a Markdown cell: a directive
# (```{name} or :::{name}), a role ({name}`text`), a target ((label)=), a substitution.
# Roles are looked for outside code (where `float32[]{V:x}` is JAX's notation).
LEFT_OVER = {
    "a directive": re.compile(r"`{3,}\s*\{[\w:-]+\}|:{3,}\s*\{[\w:-]+\}|\{eval-rst\}"),
    "a role": re.compile(r"\{[a-z][\w:-]*\}`"),
    "a target": re.compile(r"^\([\w-]+\)=\s*$", re.MULTILINE),
    "a substitution": re.compile(r"\{\{.*\}\}"),
}


def _without_code(markdown: str) -> str:
    """Markdown without its fenced code blocks, and each code span's text as `...`."""
    markdown = re.sub(r"^(`{3,}).*?^\1\s*$", "", markdown, flags=re.MULTILINE | re.DOTALL)
    return re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "`...`", markdown, flags=re.DOTALL)


def notebook(name: str) -> nbformat.NotebookNode:
    """The notebook of page ``name``, as the site offers it (a copy of its own)."""
    return copy.deepcopy(_read(name))


@functools.cache
def _read(name: str) -> nbformat.NotebookNode:
    path = SITE / "_sources" / f"{name}.ipynb"
    if not path.is_file():
        pytest.fail(f"{path} is missing: build the site first (nox -s docs)")
    return nbformat.read(path, as_version=4)


def markdown(name: str) -> str:
    return "\n\n".join(c.source for c in notebook(name).cells if c.cell_type == "markdown")


def shown_code(name: str, directive: str) -> list[str]:
    """The code cells that a directive rendered on page ``name``."""
    return [
        cell.source
        for cell in notebook(name).cells
        if cell.cell_type == "code"
        and cell.metadata.get("shard_tutorial", {}).get("directive") == directive
    ]


def test_every_notebook_page_is_offered():
    assert len(NOTEBOOK_PAGES) >= 20
    offered = {p.relative_to(SITE / "_sources").with_suffix("").as_posix()
               for p in (SITE / "_sources").rglob("*.ipynb")}  # fmt: skip
    assert offered == set(NOTEBOOK_PAGES)


@pytest.mark.parametrize("name", NOTEBOOK_PAGES)
def test_no_myst_markup_is_left_in_the_markdown(name):
    nbformat.validate(notebook(name))
    for cell in notebook(name).cells:
        if cell.cell_type != "markdown":
            continue
        for what, pattern in LEFT_OVER.items():
            text = cell.source if what == "a directive" else _without_code(cell.source)
            found = pattern.search(text)
            assert found is None, f"{name}: {what} left in a Markdown cell: {found[0]!r}"


@pytest.mark.parametrize("name", NOTEBOOK_PAGES)
def test_links_point_at_the_published_site(name):
    links = re.findall(r"\]\(([^)\s]+)\)", markdown(name))
    for link in links:
        assert re.match(r"https?://", link), f"{name}: a link a notebook cannot follow: {link}"


@pytest.mark.parametrize("problem", PROBLEMS.values(), ids=lambda problem: problem.name)
def test_each_problem_notebook_states_shows_and_starts_the_problem(problem, tmp_path, monkeypatch):
    text = markdown(problem.page)
    # The statement: autodoc's rendering of the docstring, as Markdown.
    assert f"`shard_tutorial.{problem.name}(" in text
    assert "**Raises:**" in text
    # The reference solution, collapsed, as code that can be pasted or run.
    references = [
        cell
        for cell in notebook(problem.page).cells
        if cell.metadata.get("shard_tutorial", {}).get("directive") == "reference-source"
    ]
    solution = [cell for cell in references if f"def {problem.name}(" in cell.source]
    assert len(solution) == 1
    assert "import jax\n" in solution[0].source
    assert all(cell.metadata["jupyter"]["source_hidden"] is True for cell in references)
    # The starter, as the file the page tells the reader to start from.
    (starter,) = shown_code(problem.page, "starter-code")
    assert "%%writefile" not in starter  # it would replace the reader's own file
    monkeypatch.chdir(tmp_path)  # the cell writes the starter file where it runs
    namespace: dict[str, object] = {}
    exec(compile(starter, "starter cell", "exec"), namespace)  # noqa: S102 (our own cell)
    assert namespace["STARTER"] == problem.starter()
    assert str(namespace["starter_file"]) == f"{problem.name}.py"


def test_the_starter_cell_writes_the_starter_only_where_there_is_no_file(
    tmp_path, monkeypatch, capsys
):
    """Issue 37, item 12: "Run All" must never overwrite the reader's solution."""
    problem = PROBLEMS["pipeline_forward"]
    (starter,) = shown_code(problem.page, "starter-code")
    monkeypatch.chdir(tmp_path)
    mine = tmp_path / "pipeline_forward.py"
    exec(compile(starter, "starter cell", "exec"), {})  # noqa: S102 (our own cell)
    assert mine.read_text() == problem.starter()
    assert "wrote the blank starter to pipeline_forward.py" in capsys.readouterr().out
    mine.write_text("def pipeline_forward(x, w):\n    return 'my own work'\n")
    exec(compile(starter, "starter cell", "exec"), {})  # noqa: S102 (our own cell)
    assert mine.read_text() == "def pipeline_forward(x, w):\n    return 'my own work'\n"
    assert "pipeline_forward.py exists: kept as it is" in capsys.readouterr().out


def test_the_training_run_notebook_shows_the_model():
    included = shown_code("training/training-run", "literalinclude")
    assert len(included) == 3
    assert "class MLP(nnx.Module):" in included[0]
    assert "def _update(" in included[1]
    assert "def _data_parallel_step(" in included[2]


@pytest.mark.parametrize("name", NOTEBOOK_PAGES)
def test_each_notebook_prints_each_output_in_one_block(name):
    for cell in notebook(name).cells:
        outputs = cell.get("outputs", [])
        for first, second in itertools.pairwise(outputs):
            assert not (
                first.output_type == second.output_type == "stream" and first.name == second.name
            ), f"{name}: two consecutive {first.name} outputs in a cell"


def test_a_problem_notebook_runs_top_to_bottom_in_a_fresh_kernel(tmp_path):
    """As a reader runs it: its own first cell sets up the 8 fake CPU devices."""
    problem = PROBLEMS["shard_map_psum"]
    executed = notebook(problem.page)
    for cell in executed.cells:
        if cell.cell_type == "code":
            cell.outputs = []
    client = NotebookClient(
        executed,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
        # Local sockets, not TCP (which the kernel warns about on stderr).
        config=Config({"KernelManager": {"transport": "ipc", "ip": str(tmp_path / "kernel")}}),
    )
    client.execute()  # raises at the first cell that fails (except raises-exception ones)
    printed = "\n".join(
        output.get("text", "")
        for cell in executed.cells
        for output in cell.get("outputs", [])
        if output.output_type == "stream"
    )
    assert "CPU_7" in printed.upper().replace(" ", "_") or "cpu:7" in printed.lower()
    assert (tmp_path / f"{problem.name}.py").read_text() == problem.starter()
    shown = [  # the checker's reports, as a notebook shows them
        str(output.get("data", {}).get("text/html", ""))
        for cell in executed.cells
        if "check(" in cell.source
        for output in cell.get("outputs", [])
    ]
    assert "PASSED" in shown[0]
    assert "FAILED" in shown[-1]
