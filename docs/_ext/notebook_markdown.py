"""A page's notebook as the site renders it: Markdown cells and code cells, no directives.

MyST-NB's own ``.ipynb`` of a page keeps the Markdown cells as written, so a notebook
reader would see ``{eval-rst}``, ``{reference-source}``, ``{ref}`` and the like as raw
text, and never the problem's statement, its starter or the reference code. This
module builds the notebook from the page's *rendered* document instead (the doctree
Sphinx writes to HTML, with every directive run and every reference resolved):

- text becomes Markdown: headings, paragraphs, lists, tables, admonitions (as quotes),
  math, and autodoc's descriptions (a problem's statement: the signature, then the
  docstring's text and fields);
- the page's code cells are the executed notebook's own, outputs included (consecutive
  output streams of the same name merged, as the site shows them);
- code that a directive renders becomes a code cell: ``reference-source`` and
  ``literalinclude`` as the code itself, ``starter-code`` as a cell that writes the
  starter file the page talks about, unless a file of that name exists (the reader's
  own solution is never replaced);
- a dropdown becomes its title, then its content in cells whose source is collapsed
  (``jupyter.source_hidden``), so a solution stays out of sight until asked for.

Links to other pages and to this page's sections point at the published site. A node
this module cannot render is reported (a Sphinx warning, so an error in ``nox -s docs``)
rather than silently dropped.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import nbformat
from docutils import nodes
from solution_source import imports_for
from sphinx import addnodes

Warn = Callable[[str, nodes.Node], None]

# Set by this site's directives on what they render (see reference_source.py and
# starter_files.py): "code" for code to show as a code cell, "writefile" for a file to
# write, "skip" for what a notebook does not need (a link to download that file).
NOTEBOOK = "notebook"
METADATA_KEY = "shard_tutorial"  # cell metadata: which directive made a cell

ADMONITIONS = (
    nodes.attention,
    nodes.caution,
    nodes.danger,
    nodes.error,
    nodes.hint,
    nodes.important,
    nodes.note,
    nodes.tip,
    nodes.warning,
    addnodes.seealso,
)
SKIPPED = (
    nodes.comment,
    nodes.target,
    nodes.substitution_definition,
    nodes.system_message,
    addnodes.index,
    addnodes.highlightlang,
    nodes.meta,
)


def merge_streams(outputs: Iterable[Any]) -> list[Any]:
    """Consecutive stream outputs of the same name (stdout, stderr) merged into one.

    A kernel sends what a cell prints in chunks, cut wherever its buffer was flushed
    (even mid-line); readers should see one block. Unlike MyST-NB's ``nb_merge_streams``
    this keeps the text exactly (no stripping, no added newlines) and never moves a
    stream past a figure drawn between two prints.
    """
    merged: list[Any] = []
    for output in outputs:
        previous = merged[-1] if merged else None
        if (
            output.get("output_type") == "stream"
            and previous is not None
            and previous.get("output_type") == "stream"
            and previous.get("name") == output.get("name")
        ):
            previous["text"] = _text(previous["text"]) + _text(output["text"])
        else:
            merged.append(copy.deepcopy(output))
    return merged


def _text(text: str | list[str]) -> str:
    return text if isinstance(text, str) else "".join(text)


def _escape(text: str) -> str:
    """Plain text as Markdown that shows it as it is (Jupyter reads ``$`` as math).

    An underscore inside a word (``shard_map``) never starts emphasis: it stays as is.
    """
    text = re.sub(r"([\\`*\[\]<>$|])", r"\\\1", text)
    return re.sub(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])", r"\\_", text)


def _code_span(text: str) -> str:
    text = " ".join(text.split("\n"))
    fence = "`"
    while fence in text:
        fence += "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _fenced(code: str, language: str = "") -> str:
    fence = "```"
    while fence in code:
        fence += "`"
    return f"{fence}{language}\n{code.rstrip()}\n{fence}"


def _indent(text: str, prefix: str, first: str) -> str:
    """``text`` after ``first`` (a list marker), its other lines indented by ``prefix``."""
    head, *rest = text.split("\n")
    return "\n".join([(first + head).rstrip(), *(prefix + line if line else "" for line in rest)])


def _quote(text: str) -> str:
    return "\n".join("> " + line if line else ">" for line in text.split("\n"))


def _is_component(node: nodes.Node, name: str) -> bool:
    return isinstance(node, nodes.Element) and node.get("design_component") == name


class MarkdownWriter:
    """Render doctree nodes as Markdown text (the text of the page, not its code cells)."""

    def __init__(self, page_url: str, warn: Warn) -> None:
        """``page_url``: the published page, against which relative links resolve."""
        self.page_url = page_url
        self.warn = warn

    # -- Links ------------------------------------------------------------------------------

    def url(self, node: nodes.Element) -> str | None:
        """Where a reference points, as an address a notebook can follow."""
        if node.get("refuri"):
            return urljoin(self.page_url, node["refuri"])
        if node.get("refid"):
            return f"{self.page_url}#{node['refid']}"
        return None

    # -- Inline -------------------------------------------------------------------------------

    def inline(self, node: nodes.Node) -> str:
        """The Markdown of inline content (the children of a paragraph, a title, ...)."""
        return "".join(self._inline(child) for child in node.children)

    def _inline(self, node: nodes.Node) -> str:
        if isinstance(node, nodes.Text):
            return _escape(re.sub(r"[ \t]*\n\s*", " ", node.astext()))
        if isinstance(node, nodes.literal | addnodes.literal_strong | addnodes.literal_emphasis):
            return _code_span(node.astext())
        if isinstance(node, nodes.math):
            return f"${node.astext()}$"
        if isinstance(node, nodes.strong | addnodes.desc_name):
            inner = self.inline(node)
            return f"**{inner}**" if inner.strip() else inner
        if isinstance(node, nodes.emphasis | nodes.title_reference):
            inner = self.inline(node)
            return f"*{inner}*" if inner.strip() else inner
        if isinstance(node, nodes.reference):
            text = self.inline(node)
            url = self.url(node)
            return f"[{text}]({url})" if url and text.strip() else text
        if isinstance(node, addnodes.download_reference):
            return self.inline(node)
        if isinstance(node, nodes.raw):
            return node.astext() if node.get("format") == "html" else ""
        if isinstance(node, nodes.subscript):
            return f"<sub>{self.inline(node)}</sub>"
        if isinstance(node, nodes.superscript):
            return f"<sup>{self.inline(node)}</sup>"
        if isinstance(node, nodes.image):
            return f"![{_escape(node.get('alt', ''))}]({urljoin(self.page_url, node['uri'])})"
        if isinstance(node, nodes.footnote_reference):
            return f"[{node.astext()}]"
        if isinstance(node, SKIPPED):
            return ""
        if isinstance(
            node,
            nodes.inline
            | nodes.abbreviation
            | nodes.generated
            | nodes.problematic
            | addnodes.desc_sig_element
            | addnodes.desc_inline,
        ):
            return self.inline(node)
        self.warn(f"no Markdown for the inline node <{node.tagname}>", node)
        return self.inline(node) if isinstance(node, nodes.Element) else ""

    # -- Blocks -------------------------------------------------------------------------------

    def blocks(self, children: Iterable[nodes.Node]) -> str:
        """The Markdown of a sequence of block nodes, separated by blank lines."""
        parts = [self.block(child) for child in children]
        return "\n\n".join(part for part in parts if part.strip())

    def block(self, node: nodes.Node) -> str:
        """The Markdown of one block node."""
        if isinstance(node, SKIPPED) or node.get(NOTEBOOK) == "skip":  # type: ignore[union-attr]
            return ""
        if isinstance(node, nodes.Text):
            return _escape(node.astext())
        if isinstance(node, nodes.paragraph):
            text = self.inline(node).strip()
            # Text that would start a heading, a quote or a list, and is none.
            return re.sub(r"^(#|>|[-+=]\s|\d+[.)]\s)", r"\\\1", text)
        if isinstance(node, nodes.literal_block | nodes.doctest_block):
            language = node.get(
                "language", "python" if isinstance(node, nodes.doctest_block) else ""
            )
            return _fenced(node.astext(), "" if language in ("default", "none") else language)
        if isinstance(node, nodes.bullet_list):
            return "\n".join(self._item(item, "- ") for item in node.children)
        if isinstance(node, nodes.enumerated_list):
            start = node.get("start", 1)
            return "\n".join(
                self._item(item, f"{start + i}. ") for i, item in enumerate(node.children)
            )
        if isinstance(node, nodes.definition_list):
            return "\n".join(self._definition(item) for item in node.children)
        if isinstance(node, nodes.field_list):
            return "\n\n".join(self._field(field) for field in node.children)
        if isinstance(node, ADMONITIONS):
            title = node.tagname.replace("seealso", "see also").capitalize()
            return _quote(f"**{title}**\n\n" + self.blocks(node.children))
        if isinstance(node, nodes.admonition):
            titles = [child for child in node.children if isinstance(child, nodes.title)]
            title = self.inline(titles[0]) if titles else ""
            rest = [child for child in node.children if not isinstance(child, nodes.title)]
            return _quote((f"**{title}**\n\n" if title else "") + self.blocks(rest))
        if isinstance(node, nodes.block_quote | nodes.topic | nodes.sidebar):
            return _quote(self.blocks(node.children))
        if isinstance(node, nodes.title | nodes.rubric | nodes.caption):
            return f"**{self.inline(node).strip()}**"
        if isinstance(node, nodes.attribution):
            return f"— {self.inline(node)}"
        if isinstance(node, nodes.math_block):
            return f"$$\n{node.astext().strip()}\n$$"
        if isinstance(node, nodes.table):
            return self._table(node)
        if isinstance(node, nodes.transition):
            return "---"
        if isinstance(node, nodes.line_block):
            return "  \n".join(self.inline(line) for line in node.findall(nodes.line))
        if isinstance(node, nodes.image):
            return self._inline(node)
        if isinstance(node, nodes.raw):
            return node.astext() if node.get("format") == "html" else ""
        if isinstance(node, addnodes.desc):
            return self._description(node)
        if isinstance(node, nodes.footnote):
            label = node.children[0].astext() if node.children else ""
            return f"[{label}] " + self.blocks(node.children[1:])
        if isinstance(node, nodes.section):
            self.warn("a section inside a block has no Markdown heading", node)
            return self.blocks(node.children)
        if isinstance(
            node, nodes.container | nodes.compound | nodes.figure | nodes.legend | nodes.entry
        ):
            return self.blocks(node.children)
        if isinstance(node, nodes.TextElement):
            self.warn(f"no Markdown for the node <{node.tagname}>; shown as a paragraph", node)
            return self.inline(node)
        self.warn(f"no Markdown for the node <{node.tagname}>; its content is shown", node)
        return self.blocks(node.children) if isinstance(node, nodes.Element) else ""

    def _item(self, item: nodes.Node, marker: str) -> str:
        body = self.blocks(item.children) if isinstance(item, nodes.Element) else ""
        return _indent(body, " " * len(marker), marker)

    def _definition(self, item: nodes.Node) -> str:
        terms = [self.inline(c) for c in item.children if isinstance(c, nodes.term)]
        bodies = [c for c in item.children if isinstance(c, nodes.definition)]
        text = self.blocks(child for body in bodies for child in body.children)
        return _indent(f"**{' '.join(terms)}**: {text}", "  ", "- ")

    def _field(self, field: nodes.Node) -> str:
        name = self.inline(field.children[0])  # type: ignore[index]
        body = self.blocks(field.children[1].children)  # type: ignore[index]
        joiner = " " if "\n" not in body and not body.startswith("- ") else "\n\n"
        return f"**{name}:**{joiner}{body}"

    def _table(self, table: nodes.Element) -> str:
        rows: list[list[str]] = []
        header_rows = 0
        for part in table.findall(lambda n: isinstance(n, nodes.thead | nodes.tbody)):
            for row in part.children:
                cells = [
                    " ".join(self.blocks(entry.children).split("\n")).replace("|", "\\|")
                    for entry in row.children
                ]
                rows.append(cells)
                if isinstance(part, nodes.thead):
                    header_rows += 1
        if not rows:
            return ""
        width = max(len(row) for row in rows)
        rows = [row + [""] * (width - len(row)) for row in rows]
        header = rows[0] if header_rows else [""] * width
        body = rows[1:] if header_rows else rows
        lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * width]
        lines += ["| " + " | ".join(row) + " |" for row in body]
        titles = [c for c in table.children if isinstance(c, nodes.title)]
        caption = f"**{self.inline(titles[0])}**\n\n" if titles else ""
        return caption + "\n".join(lines)

    def _description(self, desc: addnodes.desc) -> str:
        """An API description (autodoc): each signature as code, then the content."""
        parts = []
        for child in desc.children:
            if isinstance(child, addnodes.desc_signature):
                signature = child.deepcopy()
                links = []
                for ref in list(signature.findall(nodes.reference)):
                    source_link = any(
                        "viewcode-link" in inline["classes"] for inline in ref.findall(nodes.inline)
                    )
                    if source_link:  # sphinx.ext.linkcode's "[source]"
                        links.append(f"[source]({self.url(ref)})")
                        ref.parent.remove(ref)
                for only in list(signature.findall(addnodes.only)):
                    only.parent.remove(only)
                text = " ".join(signature.astext().split())
                line = f"**{_code_span(text)}**"
                parts.append(line + (" (" + ", ".join(links) + ")" if links else ""))
            elif isinstance(child, addnodes.desc_content):
                parts.append(self.blocks(child.children))
        return "\n\n".join(part for part in parts if part.strip())


class NotebookBuilder:
    """Build the reader's notebook of one page from its executed notebook and its doctree."""

    def __init__(self, executed: nbformat.NotebookNode, writer: MarkdownWriter) -> None:
        """``executed``: the page's notebook with its outputs, as MyST-NB executed it."""
        self.executed = executed
        self.writer = writer
        self.cells: list[nbformat.NotebookNode] = []
        self.pending: list[str] = []
        self.next_code = 0  # index in executed.cells of the next code cell not yet placed
        self.hidden = False

    def build(self, doctree: nodes.document) -> nbformat.NotebookNode:
        """The notebook: the document's content in order, then any code cell left out."""
        self.flow(doctree, depth=0)
        self.place_code_cells_before(len(self.executed.cells))
        self.flush()
        notebook = nbformat.v4.new_notebook(metadata=copy.deepcopy(self.executed.metadata))
        notebook.cells = self.cells
        seen: set[str] = set()
        for cell in notebook.cells:  # nbformat 4.5: every cell has an id of its own
            if not cell.get("id") or cell.id in seen:
                cell.id = nbformat.v4.new_code_cell().id
            seen.add(cell.id)
        nbformat.validate(notebook)
        return notebook

    # -- Cells -----------------------------------------------------------------------------

    def _hide(self, cell: nbformat.NotebookNode) -> nbformat.NotebookNode:
        if self.hidden:
            cell.metadata.setdefault("jupyter", {})["source_hidden"] = True
        return cell

    def markdown(self, text: str) -> None:
        """Add Markdown to the cell being written."""
        if text.strip():
            self.pending.append(text)

    def flush(self) -> None:
        """End the Markdown cell being written."""
        if self.pending:
            self.cells.append(self._hide(nbformat.v4.new_markdown_cell("\n\n".join(self.pending))))
            self.pending = []

    def code(self, source: str, directive: str) -> None:
        """Add a code cell that a directive rendered (not executed on the page)."""
        self.flush()
        cell = nbformat.v4.new_code_cell(source, metadata={METADATA_KEY: {"directive": directive}})
        self.cells.append(self._hide(cell))

    def place_code_cells_before(self, index: int) -> None:
        """Place the executed code cells before ``index`` not placed yet (removed ones)."""
        for position in range(self.next_code, min(index, len(self.executed.cells))):
            cell = self.executed.cells[position]
            if cell.cell_type == "code":
                self.flush()
                self.cells.append(self._executed_cell(cell))
        self.next_code = max(self.next_code, index)

    def _executed_cell(self, cell: nbformat.NotebookNode) -> nbformat.NotebookNode:
        cell = copy.deepcopy(cell)
        cell.outputs = merge_streams(cell.get("outputs", []))
        # What the page hides or leaves out, the notebook collapses (a removed cell
        # still runs: later cells may need it).
        tags = set(cell.metadata.get("tags", []))
        if tags & {"remove-input", "hide-input", "remove-cell", "hide-cell"}:
            cell.metadata.setdefault("jupyter", {})["source_hidden"] = True
        if tags & {"remove-output", "hide-output", "remove-cell", "hide-cell"}:
            cell.metadata.setdefault("jupyter", {})["outputs_hidden"] = True
        return self._hide(cell)

    # -- The document's flow -----------------------------------------------------------------

    def flow(self, node: nodes.Element, depth: int) -> None:
        """Walk block content that may hold cells: sections, containers, dropdowns."""
        for child in node.children:
            if isinstance(child, nodes.container) and child.get("nb_element") == "cell_code":
                index = child["cell_index"]
                self.place_code_cells_before(index)
                self.flush()
                self.cells.append(self._executed_cell(self.executed.cells[index]))
                self.next_code = max(self.next_code, index + 1)
            elif isinstance(child, nodes.section):
                self.flow(child, depth + 1)
            elif isinstance(child, nodes.title) and isinstance(node, nodes.section):
                self.markdown("#" * max(depth, 1) + " " + self.writer.inline(child).strip())
            elif isinstance(child, nodes.literal_block) and self._shown_code(child):
                self._code_block(child)
            elif _is_dropdown(child):
                self._dropdown(child, depth)
            elif isinstance(child, nodes.container | nodes.compound) and _holds_cells(child):
                self.flow(child, depth)
            else:
                self.markdown(self.writer.block(child))

    @staticmethod
    def _shown_code(block: nodes.literal_block) -> bool:
        # Sphinx's literalinclude marks its block with the file it read.
        return bool(block.get(NOTEBOOK) or block.get("source"))

    def _code_block(self, block: nodes.literal_block) -> None:
        kind = block.get(NOTEBOOK)
        if kind == "writefile":
            source = _write_if_absent(block["notebook_file"], block.astext())
            self.code(source, block.get("notebook_directive", "starter-code"))
        elif kind == "code":
            self.code(block.astext(), block.get("notebook_directive", "reference-source"))
        else:  # literalinclude
            self.code(_with_imports(block), "literalinclude")

    def _dropdown(self, dropdown: nodes.Element, depth: int) -> None:
        title, body = _dropdown_parts(dropdown)
        self.flush()
        text = self.writer.inline(title).strip() if title is not None else "Details"
        self.markdown(f"**{text}** (in the collapsed cells below: click to expand them)")
        self.flush()
        hidden, self.hidden = self.hidden, True
        self.flow(body, depth)
        self.flush()
        self.hidden = hidden


def _write_if_absent(name: str, text: str) -> str:
    """A code cell that writes ``text`` to the file ``name`` only if there is none.

    Not ``%%writefile``, which replaces the file: a reader who runs the whole notebook
    again, beside the solution they wrote in that file, must not lose it. The cell
    says which it did. The text is one string literal per line, so that no line of
    the cell starts with a docstring's ``>>>``, which IPython strips from a cell's
    lines as a pasted prompt.
    """
    lines = "".join(f"    {line!r}\n" for line in text.splitlines(keepends=True))
    return (
        f"# Writes the starter to {name}, unless the file exists: yours is never replaced.\n"
        "from pathlib import Path\n\n"
        f"STARTER = (\n{lines})\n"
        f"starter_file = Path({name!r})\n"
        "if starter_file.exists():\n"
        '    print(f"{starter_file} exists: kept as it is (delete it for a blank starter)")\n'
        "else:\n"
        "    starter_file.write_text(STARTER)\n"
        '    print(f"wrote the blank starter to {starter_file}")\n'
    )


def _is_dropdown(node: nodes.Node) -> bool:
    return node.__class__.__name__ == "dropdown_main" or _is_component(node, "dropdown")


def _dropdown_parts(dropdown: nodes.Element) -> tuple[nodes.Element | None, nodes.Element]:
    """The title and the body of a sphinx-design dropdown, before or after its HTML form."""
    if dropdown.__class__.__name__ == "dropdown_main":
        title = next(
            (
                inline
                for inline in dropdown.findall(nodes.inline)
                if "sd-summary-text" in inline["classes"]
            ),
            None,
        )
        body = next(child for child in dropdown.children if _is_component(child, "dropdown-body"))
        return title, body
    if dropdown.get("has_title"):
        body = nodes.container()
        body.children = dropdown.children[1:]
        return dropdown.children[0], body  # type: ignore[return-value]
    return None, dropdown


def _holds_cells(node: nodes.Element) -> bool:
    return any(
        (isinstance(n, nodes.container) and n.get("nb_element") == "cell_code")
        or (isinstance(n, nodes.literal_block) and (n.get(NOTEBOOK) or n.get("source")))
        or _is_dropdown(n)
        for n in node.findall(include_self=False)
    )


def _with_imports(block: nodes.literal_block) -> str:
    """An excerpt of a module, after the lines of that module it needs to run on its own.

    Those are the module's ``from __future__`` lines (so, as in the module, annotations
    are not evaluated when the cell runs) and its imports of the names the excerpt
    uses (a decorator such as ``functools.cache`` runs when the cell does).
    """
    code = block.astext()
    path = Path(block["source"])
    try:
        module = path.read_text()
        imports = imports_for(path, code)
    except (OSError, SyntaxError, ValueError):
        return code
    future = [line for line in module.splitlines() if line.startswith("from __future__ import")]
    header = "\n".join(future) + ("\n\n" if future and imports else "") + imports
    return f"{header}\n\n\n{code}" if header.strip() else code


def reader_notebook(
    executed: nbformat.NotebookNode, doctree: nodes.document, page_url: str, warn: Warn
) -> nbformat.NotebookNode:
    """The notebook a reader downloads: the page as rendered, with its executed cells."""
    return NotebookBuilder(executed, MarkdownWriter(page_url, warn)).build(doctree)
