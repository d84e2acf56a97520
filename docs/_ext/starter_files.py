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
from pathlib import Path
from typing import Any, ClassVar

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

FOLDER = "starters"


def _extra_dir(app: Sphinx) -> Path:
    return Path(app.outdir).parent / "extra"


def publish_starters(app: Sphinx, config: Any) -> None:
    """Write every problem's starter file, and have html_extra_path copy them to the site."""
    extra = str(_extra_dir(app))
    if extra not in config.html_extra_path:
        config.html_extra_path.append(extra)
    problems = importlib.import_module("shard_tutorial.problems")
    target = _extra_dir(app) / FOLDER
    target.mkdir(parents=True, exist_ok=True)
    for name, problem in problems.PROBLEMS.items():
        path = target / f"{name}.py"
        text = problem.starter()
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)


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
        module = importlib.import_module(problem.reference.__module__)
        self.env.note_dependency(str(module.__file__))
        code = problem.starter()
        block = nodes.literal_block(code, code, language="python")
        self.set_source_info(block)
        depth = self.env.docname.count("/")
        link = nodes.reference(
            "", f"{problem.name}.py", refuri="../" * depth + f"{FOLDER}/{problem.name}.py"
        )
        link["classes"].append("starter-download")
        download = nodes.paragraph("", "", nodes.Text("Download it: "), link)
        return [download, block]


def setup(app: Sphinx) -> dict[str, Any]:
    """Register the directive and the starter files."""
    app.add_directive("starter-code", StarterCode)
    app.connect("config-inited", publish_starters)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
