"""The ``reference-source`` directive: show a problem's reference solution, from the package.

A problem page shows its solution by naming the function::

    ```{reference-source} shard_tutorial.problems.shard_map_psum.shard_map_psum
    ```

The directive renders the import lines that code needs (public names only), then that
function *without* its docstring (the page shows the docstring as the problem
statement), followed by the module's private helpers it calls, directly or through one
another, in source order: a file a reader can paste into the starter and run (see
``solution_source.py``, and tests/test_pasted_solutions.py which does exactly that).
The code comes from the module file at build time, and the file is a dependency of the
page, so the page can never show code other than what the tests check.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, ClassVar

from docutils import nodes
from solution_source import solution_source
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective


class ReferenceSource(SphinxDirective):
    """Render a reference solution's code: ``{reference-source} package.module.function``."""

    required_arguments = 1
    has_content = False
    option_spec: ClassVar[dict[str, Any]] = {}

    def run(self) -> list[nodes.Node]:
        """Find the module, read the function and its helpers, return one code block."""
        module_name, _, function = self.arguments[0].rpartition(".")
        spec = importlib.util.find_spec(module_name)
        if spec is None or spec.origin is None:
            msg = f"reference-source: cannot find module {module_name!r}"
            raise self.error(msg)
        path = Path(spec.origin)
        self.env.note_dependency(str(path))
        try:
            code = solution_source(path, function)
        except ValueError as error:
            msg = f"reference-source: {error}"
            raise self.error(msg) from None
        block = nodes.literal_block(code, code, language="python")
        # In the downloaded notebook, a code cell (notebook_markdown.py).
        block["notebook"] = "code"
        block["notebook_directive"] = "reference-source"
        self.set_source_info(block)
        return [block]


def setup(app: Sphinx) -> dict[str, Any]:
    """Register the directive with Sphinx."""
    app.add_directive("reference-source", ReferenceSource)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
