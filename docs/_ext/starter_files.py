"""The ``starter-code`` directive: a problem's starter file, shown and downloadable.

::

    ```{starter-code} shard_map_psum
    ```

renders the file that ``python -m shard_tutorial starter shard_map_psum`` prints (the
reference's signature and docstring, no body), from
:meth:`shard_tutorial.problem.Problem.starter`, and links to the same text saved as
``starters/shard_map_psum.py`` in the built site.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any, ClassVar

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

FOLDER = "starters"


def _extra_dir(app: Sphinx) -> Path:
    return Path(app.outdir).parent / "extra"


def add_extra_path(app: Sphinx, config: Any) -> None:
    """Have html_extra_path copy the starter files, which the directive writes, to the site.

    They are written when a page that shows one is read, so a build that reads no page
    imports nothing (JAX takes seconds to import) and copies the files written before.
    """
    extra = _extra_dir(app)
    (extra / FOLDER).mkdir(parents=True, exist_ok=True)
    if str(extra) not in config.html_extra_path:
        config.html_extra_path.append(str(extra))


class StarterCode(SphinxDirective):
    """Show a problem's starter file, with a link to download it."""

    required_arguments = 1
    has_content = False
    option_spec: ClassVar[dict[str, Any]] = {}

    def run(self) -> list[nodes.Node]:
        """Render the starter code and the download link."""
        problems = importlib.import_module("shard_tutorial.problems")
        try:
            problem = problems.get_problem(self.arguments[0])
        except KeyError as error:
            msg = f"starter-code: {error.args[0]}"
            raise self.error(msg) from None
        # The starter is made of the reference's module (signature, docstring, imports)
        # and of Problem.starter: a change to either reads this page again.
        for source in (problem.reference, type(problem)):
            self.env.note_dependency(inspect.getfile(source))
        code = problem.starter()
        path = _extra_dir(self.env.app) / FOLDER / f"{problem.name}.py"
        if not path.is_file() or path.read_text() != code:
            path.write_text(code)
        block = nodes.literal_block(code, code, language="python")
        # In the downloaded notebook, a cell that writes the file (notebook_markdown.py),
        # so the notebook needs no link to download it.
        block["notebook"] = "writefile"
        block["notebook_file"] = f"{problem.name}.py"
        block["notebook_directive"] = "starter-code"
        self.set_source_info(block)
        depth = self.env.docname.count("/")
        link = nodes.reference(
            "", f"{problem.name}.py", refuri="../" * depth + f"{FOLDER}/{problem.name}.py"
        )
        link["classes"].append("starter-download")
        download = nodes.paragraph("", "", nodes.Text("Download it: "), link)
        download["notebook"] = "skip"
        return [download, block]


def setup(app: Sphinx) -> dict[str, Any]:
    """Register the directive and the starter files."""
    app.add_directive("starter-code", StarterCode)
    app.connect("config-inited", add_extra_path)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
