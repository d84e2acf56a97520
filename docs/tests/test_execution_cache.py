"""The documentation build's execution cache (docs/_ext/execution_cache.py).

Each test builds a small Sphinx project with real kernels: a package ``demo`` and three
notebook pages that use different parts of it (one through a subprocess). What a build
executed is read from the build's own record (``executions.jsonl``), and what readers
see from the HTML it wrote.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

EXTENSIONS = Path(__file__).parents[1] / "_ext"
sys.path.insert(0, str(EXTENSIONS))
from execution_cache import FileUnits  # from the docs' extension folder

PAGE = """\
---
jupytext:
  text_representation:
    format_name: myst
kernelspec:
  display_name: Python 3
  name: python3
---
# {title}

Some prose.

```{{code-cell}}
{code}
```
"""

SUBPROCESS_CALL = (
    "import subprocess, sys\n"
    "run = subprocess.run([sys.executable, '-c', 'from demo.child import from_child; "
    "print(from_child())'], capture_output=True, text=True, check=True)\n"
    "print('child says', run.stdout.strip())"
)


class Executed(set):
    """The pages a build executed; shows the build's reasons when an assertion fails."""

    def __init__(self, record: dict) -> None:
        super().__init__(record["executed"])
        self.reasons = {page: entry["reason"] for page, entry in record["executed"].items()}

    def __repr__(self) -> str:
        return f"{set(self)!r} (reasons: {self.reasons})"


class Project:
    """A docs folder and a package, built with the execution cache."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.package = root / "pkg" / "demo"
        self.docs = root / "docs"

    @classmethod
    def create(cls, root: Path) -> Project:
        """Write the package and the pages under ``root``."""
        self = cls(root)
        self.package.mkdir(parents=True)
        self.docs.mkdir()
        self.write("pkg/demo/__init__.py", "")
        self.write(
            "pkg/demo/greet.py",
            '''
            """Greetings."""

            PUNCTUATION = "!"


            def greeting():
                return "hello" + PUNCTUATION


            def unused():
                return "never called by any page"
            ''',
        )
        self.write("pkg/demo/count.py", "def count():\n    return 3\n")
        self.write("pkg/demo/child.py", "def from_child():\n    return 'child v1'\n")
        self.write(
            "docs/conf.py",
            f"""
            import os, sys
            from pathlib import Path
            HERE = Path(__file__).parent  # relative, so a copy of the project works as well
            sys.path.insert(0, {str(EXTENSIONS)!r})
            extensions = ["myst_nb", "execution_cache"]
            exclude_patterns = ["_build"]
            nb_execution_mode = "cache"
            nb_execution_cache_path = str(HERE / "_build" / "cache")
            nb_execution_raise_on_error = True
            execution_cache_track = [str(HERE.parent / "pkg" / "demo")]
            execution_cache_settings = {{"devices": os.environ.get("DEMO_DEVICES", "8")}}
            execution_cache_distributions = ["ipykernel"]
            execution_cache_workers = 2


            def setup(app):
                if os.environ.get("DEMO_INTERRUPT"):  # Ctrl-C after reading, before saving

                    def interrupt(app, env):
                        raise KeyboardInterrupt

                    app.connect("env-updated", interrupt)
                if os.environ.get("DEMO_READ_LOG"):  # each page Sphinx reads, in order

                    def log(app, docname, source):
                        import execution_cache

                        executions = execution_cache._BUILDS[app].executions
                        running = executions is not None and executions.ended is None
                        with open(os.environ["DEMO_READ_LOG"], "a") as file:
                            print(docname, "running" if running else "done", file=file)

                    app.connect("source-read", log)
            """,
        )
        self.write("docs/index.md", "# Demo\n\n```{toctree}\na\nb\nc\nplain\n```\n")
        self.page("a", "from demo.greet import greeting\nprint('a says', greeting())")
        self.page("b", "from demo.count import count\nprint('b says', count())")
        self.page("c", SUBPROCESS_CALL)
        self.write("docs/plain.md", "# Plain\n\nNo code here.\n")
        return self

    def write(self, relative: str, text: str) -> None:
        path = self.root / relative
        path.write_text(textwrap.dedent(text).lstrip("\n"))

    def page(self, name: str, code: str, title: str | None = None) -> None:
        self.write(f"docs/{name}.md", PAGE.format(title=title or f"Page {name}", code=code))

    def edit(self, relative: str, old: str, new: str) -> None:
        path = self.root / relative
        text = path.read_text()
        assert old in text
        path.write_text(text.replace(old, new))

    def build(self, *options: str, **env: str) -> Executed:
        """Build the site; return the pages this build executed, from its record."""
        result = subprocess.run(
            [sys.executable, "-m", "sphinx", "-W", "-q", *options, "-b", "html", "docs", "out"],
            cwd=self.root,
            env={**os.environ, "PYTHONPATH": str(self.package.parent), **env},
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr
        # A kernel stopped while it still handles a message logs this as an error.
        assert "KeyboardInterrupt" not in result.stderr, result.stderr
        return Executed(self.last_record())

    def last_record(self) -> dict:
        lines = (self.docs / "_build" / "cache" / "executions.jsonl").read_text().splitlines()
        return json.loads(lines[-1])

    def html(self, page: str) -> str:
        return (self.root / "out" / f"{page}.html").read_text()


@pytest.fixture(scope="module")
def cold_project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    site = Project.create(tmp_path_factory.mktemp("cold"))
    assert site.build() == {"a", "b", "c"}  # cold: every notebook page, never the plain one
    return site


@pytest.fixture
def project(cold_project: Project, tmp_path: Path) -> Project:
    """A copy of the cold-built project, cache and all, for one test to edit.

    Not built again here: the first build of each test is its own, and
    test_a_rebuild_with_no_change_executes_nothing builds a copy unchanged.
    """
    shutil.copytree(cold_project.root, tmp_path / "site")
    return Project(tmp_path / "site")


def test_a_rebuild_with_no_change_executes_nothing(project):
    assert project.build() == set()
    assert project.build() == set()


def test_editing_a_pages_prose_or_code_executes_exactly_that_page(project):
    project.edit("docs/b.md", "Some prose.", "Some better prose.")
    assert project.build() == {"b"}
    project.edit("docs/b.md", "print('b says', count())", "print('b now says', count())")
    assert project.build() == {"b"}
    assert "b now says 3" in project.html("b")
    assert project.last_record()["executed"]["b"]["reason"] == "page changed"


def test_editing_a_function_reexecutes_the_pages_that_ran_it_and_shows_the_new_output(project):
    project.edit(
        "pkg/demo/greet.py", 'return "hello" + PUNCTUATION', 'return "bonjour" + PUNCTUATION'
    )
    assert project.build() == {"a"}
    assert "a says bonjour!" in project.html("a")
    assert "b says 3" in project.html("b")  # b kept its outputs
    reason = project.last_record()["executed"]["a"]["reason"]
    assert reason == "code changed: demo/greet.py::greeting"


def test_module_level_code_counts_for_every_page_that_imported_the_module(project):
    project.edit("pkg/demo/greet.py", 'PUNCTUATION = "!"', 'PUNCTUATION = "?"')
    assert project.build() == {"a"}
    assert "a says hello?" in project.html("a")


def test_editing_code_no_page_ran_executes_nothing(project):
    project.edit("pkg/demo/greet.py", "never called by any page", "still never called")
    assert project.build() == set()


def test_comments_and_formatting_do_not_count(project):
    project.edit("pkg/demo/count.py", "    return 3\n", "    # three, as always\n    return (3)\n")
    assert project.build() == set()


def test_code_run_in_a_subprocess_of_the_kernel_is_tracked(project):
    project.edit("pkg/demo/child.py", "child v1", "child v2")
    assert project.build() == {"c"}
    assert "child says child v2" in project.html("c")


def test_a_changed_environment_reexecutes_everything(project):
    assert project.build(DEMO_DEVICES="4") == {"a", "b", "c"}
    reason = project.last_record()["executed"]["a"]["reason"]
    assert reason == "environment changed: devices 8 -> 4"
    assert project.build(DEMO_DEVICES="4") == set()


def test_a_jax_or_xla_variable_counts_as_environment(project):
    assert project.build(JAX_DEMO_SETTING="1") == {"a", "b", "c"}
    reason = project.last_record()["executed"]["a"]["reason"]
    assert reason == "environment changed: JAX_DEMO_SETTING (none) -> 1"
    assert project.build(JAX_DEMO_SETTING="1", OTHER_SETTING="x") == set()


def test_a_build_stopped_after_executing_shows_the_new_outputs_next_time(project):
    project.edit(
        "pkg/demo/greet.py", 'return "hello" + PUNCTUATION', 'return "bonjour" + PUNCTUATION'
    )
    stopped = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", "docs", "out"],
        cwd=project.root,
        env={**os.environ, "PYTHONPATH": str(project.package.parent), "DEMO_INTERRUPT": "1"},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert stopped.returncode != 0
    assert set(project.last_record()["executed"]) == {"a"}
    assert project.build() == set()  # executed already: read from the cache, not run again
    assert "a says bonjour!" in project.html("a")


def test_a_notebook_page_without_code_cells_builds(project):
    project.write(
        "docs/d.md",
        PAGE.split("```{{code-cell}}", maxsplit=1)[0].format(title="Page d") + "Only prose.\n",
    )
    project.edit("docs/index.md", "plain\n", "plain\nd\n")
    assert project.build() == {"d"}
    assert "Only prose." in project.html("d")


def test_a_new_page_executes_alone_and_a_removed_page_is_forgotten(project):
    project.page("d", "print('d is new')")
    project.edit("docs/index.md", "plain\n", "plain\nd\n")
    assert project.build() == {"d"}
    assert "d is new" in project.html("d")
    (project.docs / "c.md").unlink()
    project.edit("docs/index.md", "c\n", "")
    assert project.build() == set()
    manifest = json.loads((project.docs / "_build" / "cache" / "manifest.json").read_text())
    assert sorted(manifest["pages"]) == ["a", "b", "d"]


def test_a_failing_cell_fails_the_build_and_names_the_page(project):
    project.page("b", "raise ValueError('broken on purpose')")
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", "docs", "out"],
        cwd=project.root,
        env={**os.environ, "PYTHONPATH": str(project.package.parent)},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode != 0
    assert "executing b failed" in result.stderr
    assert "broken on purpose" in result.stderr
    # Put back as it was, the page's cached outputs are still the right ones...
    project.page("b", "from demo.count import count\nprint('b says', count())")
    assert project.build() == set()
    assert "b says 3" in project.html("b")
    # ...and fixed differently, it executes, and only it.
    project.page("b", "from demo.count import count\nprint('b says', count() + 1)")
    assert project.build() == {"b"}
    assert "b says 4" in project.html("b")


def test_stale_pages_run_in_parallel_kernels(project):
    record = project.last_record()
    assert record["workers"] == 2
    project.edit("docs/a.md", "Some prose.", "Other prose.")
    project.edit("docs/b.md", "Some prose.", "Other prose.")
    assert project.build() == {"a", "b"}


def test_pages_needing_no_execution_are_read_while_the_stale_ones_execute(project, tmp_path):
    project.page("b", "import time\ntime.sleep(3)\nprint('b slept')")
    project.edit("docs/a.md", "Some prose.", "Other prose.")
    log = tmp_path / "read.log"
    assert project.build(DEMO_READ_LOG=str(log)) == {"a", "b"}
    read = [line.split() for line in log.read_text().splitlines()]
    # First the pages with nothing to execute (c's outputs are current), while the
    # kernels run; then the stale pages, each once its outputs are in the cache.
    assert read[:3] == [["c", "running"], ["index", "running"], ["plain", "running"]]
    assert sorted(name for name, _ in read[3:]) == ["a", "b"]
    assert "b slept" in project.html("b")
    assert "a says hello!" in project.html("a")


def test_a_parallel_read_finds_every_page_executed(project):
    # Sphinx's -j reads in processes of its own, which cannot wait for this one's
    # kernels: every stale page executes before reading starts.
    project.page("b", "from demo.count import count\nprint('b says', count() * 2)")
    project.edit("pkg/demo/greet.py", '"hello"', '"hi"')
    assert project.build("-j", "2") == {"a", "b"}
    assert "a says hi!" in project.html("a")
    assert "b says 6" in project.html("b")


# -- The fingerprints themselves, without building ------------------------------------------

MODULE = '''\
"""A module."""
import functools

LIMIT = 3


@functools.cache
def cached(x):
    """Docstring."""
    return x * LIMIT


class Thing:
    size = 2

    def grow(self):
        return self.size + 1
'''


def units(text: str) -> FileUnits:
    return FileUnits.parse(text)


def test_a_module_splits_into_top_level_code_functions_and_methods():
    parsed = units(MODULE)
    assert sorted(parsed.fingerprints) == ["<module>", "Thing.grow", "cached"]
    lines = MODULE.splitlines()
    body = lines.index("    return x * LIMIT") + 1
    method_body = lines.index("        return self.size + 1") + 1
    decorator = lines.index("@functools.cache") + 1
    assert parsed.units_of([body]) == {"cached"}
    assert parsed.units_of([method_body]) == {"Thing.grow"}
    assert parsed.units_of([1, decorator, decorator + 1]) == {"<module>"}  # import time


def test_a_name_defined_twice_is_two_units():
    text = textwrap.dedent("""
        class Box:
            @property
            def size(self):
                return self._size

            @size.setter
            def size(self, value):
                self._size = value
        """)
    before = units(text)
    assert sorted(before.fingerprints) == ["<module>", "Box.size", "Box.size#2"]
    after = units(text.replace("return self._size", "return self._size + 1"))
    assert before.fingerprints["Box.size"] != after.fingerprints["Box.size"]
    assert before.fingerprints["Box.size#2"] == after.fingerprints["Box.size#2"]


@pytest.mark.parametrize(
    ("old", "new", "changed"),
    [
        ("    return x * LIMIT", "    return LIMIT * x", {"cached"}),
        ("        return self.size + 1", "        return self.size + 2", {"Thing.grow"}),
        ("LIMIT = 3", "LIMIT = 4", {"<module>"}),
        ('    """Docstring."""', '    """Another docstring."""', {"<module>", "cached"}),
        ("def cached(x):", "def cached(x, y=1):", {"<module>", "cached"}),
        ("    return x * LIMIT", "    return x * LIMIT  # a comment", set()),
        ("LIMIT = 3", "LIMIT = (3)", set()),
    ],
)
def test_what_counts_as_a_change(old, new, changed):
    before, after = units(MODULE), units(MODULE.replace(old, new))
    differs = {
        name
        for name in before.fingerprints
        if before.fingerprints[name] != after.fingerprints[name]
    }
    assert differs == changed
