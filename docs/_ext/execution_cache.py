"""Execute a notebook page only when its outputs could change, and never show stale ones.

MyST-NB's own cache keys a page on its code cells, so editing a function in a package
that the page imports leaves the old outputs in place. This extension runs before
MyST-NB reads any page (Sphinx's ``env-get-outdated`` event) and works like this:

1. **Record.** When a page executes, coverage.py records which *code units* of the
   tracked source trees ran, in the kernel and in every Python subprocess the kernel
   starts. A unit is a module's top-level code (imports, constants, class bodies,
   ``def`` lines with decorators, defaults and docstrings) or the body of one top-level
   function or method.
2. **Compare.** A page is stale when its source text changed; when the environment
   changed (Python, the versions of the distributions its code can import, or a
   configured value such as the device count); or when the syntax tree of any unit it
   ran changed. Comments and formatting do not count, anything that can change
   behaviour does. A unit the page never ran cannot change its outputs, so an edit
   there leaves the page alone.
3. **Execute.** Stale pages run in parallel kernels (one per core by default), each
   with its own temporary directory and IPC sockets, so kernels cannot collide. They
   run in a thread of their own while Sphinx reads the pages that need no execution;
   Sphinx then reads the stale pages in the order they started, each as soon as its
   executed notebook is in MyST-NB's jupyter-cache, where MyST-NB finds it.

Each build appends a line to ``executions.jsonl`` in the cache directory saying which
pages it executed, why and for how long: the build's own record, which the tests read.
The extension is active when ``nb_execution_mode = "cache"``.
"""

from __future__ import annotations

import ast
import asyncio
import concurrent.futures
import contextlib
import copy
import dataclasses
import datetime as dt
import hashlib
import importlib.metadata
import json
import math
import os
import platform
import re
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import coverage
import nbformat
from jupyter_cache import get_cache
from jupyter_cache.base import CacheBundleIn, JupyterCacheAbstract
from myst_nb.core.read import create_nb_reader
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.errors import ExtensionError
from sphinx.util import logging
from traitlets.config import Config

LOGGER = logging.getLogger(__name__)
MANIFEST = "manifest.json"
LOG = "executions.jsonl"
MODULE_UNIT = "<module>"
SAVE_COVERAGE = "import coverage as _c; _c.Coverage.current() and _c.Coverage.current().save()"

Definition = ast.FunctionDef | ast.AsyncFunctionDef


# -- Code units ---------------------------------------------------------------------------


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _is_docstring(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )


@dataclasses.dataclass(frozen=True)
class FileUnits:
    """The code units of one source file: their fingerprints and the lines of each body."""

    fingerprints: dict[str, str]
    body_lines: dict[int, str]  # line -> unit whose body holds it; other lines: MODULE_UNIT

    @classmethod
    def parse(cls, text: str) -> FileUnits:
        """Split a module into units and fingerprint each by its syntax tree."""
        tree = ast.parse(text)
        definitions: list[tuple[str, Definition]] = []
        for node in tree.body:
            if isinstance(node, Definition):
                definitions.append((node.name, node))
            elif isinstance(node, ast.ClassDef):
                definitions.extend(
                    (f"{node.name}.{item.name}", item)
                    for item in node.body
                    if isinstance(item, Definition)
                )
        # A name defined again (a property's setter, @overload, register) is another
        # unit: the second is ``name#2``, and so on.
        seen: dict[str, int] = {}
        for index, (name, node) in enumerate(definitions):
            seen[name] = seen.get(name, 0) + 1
            if seen[name] > 1:
                definitions[index] = (f"{name}#{seen[name]}", node)
        fingerprints: dict[str, str] = {}
        body_lines: dict[int, str] = {}
        for name, node in definitions:
            fingerprints[name] = _digest(ast.dump(node, include_attributes=False))
            statements = node.body[1:] if _is_docstring(node.body[0]) else node.body
            if statements:
                for line in range(statements[0].lineno, (node.end_lineno or 0) + 1):
                    body_lines[line] = name
        # What runs when the module is imported: everything but the bodies.
        for _, node in definitions:
            node.body = node.body[:1] if _is_docstring(node.body[0]) else [ast.Pass()]
        fingerprints[MODULE_UNIT] = _digest(ast.dump(tree, include_attributes=False))
        return cls(fingerprints, body_lines)

    def units_of(self, lines: Iterable[int]) -> set[str]:
        """The units that executed lines belong to."""
        return {self.body_lines.get(line, MODULE_UNIT) for line in lines}


class CodeIndex:
    """Units of the tracked source trees, keyed ``<path from the tree's parent>::<unit>``."""

    def __init__(self, roots: Iterable[str | Path]) -> None:
        """Index the trees under ``roots`` (files are parsed when first asked for)."""
        self.roots = [Path(root).resolve() for root in roots]
        self._files: dict[str, FileUnits | None] = {}

    def snapshot(self) -> None:
        """Parse every tracked file now, before any kernel starts.

        Fingerprints then describe the code the kernels ran, even if a file is saved
        again while they run (the next build sees that change).
        """
        for root in self.roots:
            for path in sorted(root.rglob("*.py")):
                key = self.key_of(path)
                if key is not None:
                    self.file(key)

    def key_of(self, filename: str | Path) -> str | None:
        """The tracked path of ``filename``, or None if it is outside every tracked tree."""
        path = Path(filename).resolve()
        for root in self.roots:
            if path.is_relative_to(root):
                return path.relative_to(root.parent).as_posix()
        return None

    def file(self, key: str) -> FileUnits | None:
        """The units of a tracked file (None if it no longer exists or does not parse)."""
        if key not in self._files:
            path = next(
                (root.parent / key for root in self.roots if (root.parent / key).is_file()),
                None,
            )
            try:
                self._files[key] = FileUnits.parse(path.read_text()) if path else None
            except SyntaxError:
                self._files[key] = None
        return self._files[key]

    def fingerprint(self, unit: str) -> str | None:
        """The current fingerprint of ``path::name``, or None if the unit is gone."""
        key, _, name = unit.partition("::")
        units = self.file(key)
        return units.fingerprints.get(name) if units else None


# -- Environment ----------------------------------------------------------------------------


def distribution_versions(names: Iterable[str]) -> dict[str, str]:
    """Versions of the named distributions and of everything they require, recursively."""
    versions: dict[str, str] = {}
    pending = [canonicalize_name(name) for name in names]
    while pending:
        name = pending.pop()
        if name in versions:
            continue
        try:
            distribution = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        versions[name] = distribution.version
        for line in distribution.requires or []:
            try:
                requirement = Requirement(line)
            except InvalidRequirement:
                continue
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                pending.append(canonicalize_name(requirement.name))
    return dict(sorted(versions.items()))


def environment(
    settings: dict[str, Any], distributions: Iterable[str], prefixes: Iterable[str]
) -> dict[str, Any]:
    """Everything besides the page and the tracked code that can change a page's outputs.

    The kernels inherit this process's environment variables; those whose names start
    with one of ``prefixes`` (``JAX_``, ``XLA_``) count.
    """
    prefixes = tuple(prefixes)
    return {
        "python": platform.python_version(),
        "settings": {key: str(value) for key, value in sorted(settings.items())},
        "variables": {
            key: value for key, value in sorted(os.environ.items()) if key.startswith(prefixes)
        },
        "distributions": distribution_versions(distributions),
    }


def _environment_change(old: dict[str, Any], new: dict[str, Any]) -> str:
    changes = []
    if old.get("python") != new["python"]:
        changes.append(f"python {old.get('python')} -> {new['python']}")
    for group in ("settings", "variables", "distributions"):
        before, after = old.get(group, {}), new[group]
        for key in sorted(before.keys() | after.keys()):
            if before.get(key) != after.get(key):
                changes.append(f"{key} {before.get(key, '(none)')} -> {after.get(key, '(none)')}")
    return ", ".join(changes[:3]) + (", ..." if len(changes) > 3 else "")


# -- Pages ----------------------------------------------------------------------------------


@dataclasses.dataclass
class Page:
    """A notebook page as MyST-NB will read it."""

    docname: str
    path: Path
    source_hash: str
    notebook: nbformat.NotebookNode


def notebook_pages(env: BuildEnvironment) -> Iterator[Page]:
    """Every page that MyST-NB treats as a notebook, read the way MyST-NB reads it."""
    md_config = env.myst_config  # type: ignore[attr-defined]
    nb_config = env.mystnb_config  # type: ignore[attr-defined]
    for docname in sorted(env.found_docs):
        path = Path(env.doc2path(docname))
        if path.suffix not in {".md", ".ipynb"}:
            continue
        text = path.read_text(encoding="utf-8")
        reader = create_nb_reader(str(path), md_config, nb_config, text)
        if reader is None:
            continue
        notebook = reader.read(text)
        kernel = notebook.metadata.get("kernelspec", {}).get("name")
        for pattern, alias in nb_config.kernel_rgx_aliases.items():
            if kernel is not None and re.fullmatch(pattern, kernel):
                notebook.metadata["kernelspec"]["name"] = alias
                break
        yield Page(docname, path, _digest(text), notebook)


# -- The record of past executions ------------------------------------------------------------


class Manifest:
    """What each page's last execution depended on, kept in the cache directory."""

    def __init__(self, directory: Path) -> None:
        """Load the manifest from ``directory``, or start an empty one."""
        self.path = directory / MANIFEST
        try:
            saved = json.loads(self.path.read_text())
            self.pages: dict[str, dict[str, Any]] = saved["pages"]
            self.unread: set[str] = set(saved.get("unread", []))
        except (OSError, ValueError, KeyError):
            self.pages, self.unread = {}, set()

    def why_stale(
        self, page: Page, env: dict[str, Any], code: CodeIndex, cache: JupyterCacheAbstract
    ) -> str | None:
        """Why ``page`` must execute again, or None if its cached outputs are current."""
        record = self.pages.get(page.docname)
        if record is None:
            return "never executed"
        if record["source"] != page.source_hash:
            return "page changed"
        if record["environment"] != env:
            return "environment changed: " + _environment_change(record["environment"], env)
        changed = [unit for unit, fp in record["units"].items() if code.fingerprint(unit) != fp]
        if changed:
            return "code changed: " + ", ".join(sorted(changed))
        try:
            cache.match_cache_notebook(page.notebook)
        except KeyError:
            return "no outputs in the cache"
        return None

    def save(self, known_docnames: set[str]) -> None:
        """Write the manifest, forgetting pages that no longer exist.

        ``unread`` holds pages whose new outputs Sphinx has not yet read into a saved
        environment: if this build stops before it finishes (Ctrl-C), the next one
        reads them again rather than keep showing the outputs it read before.
        """
        pages = {name: record for name, record in self.pages.items() if name in known_docnames}
        unread = sorted(self.unread & known_docnames)
        self.path.write_text(
            json.dumps({"pages": pages, "unread": unread}, indent=1, sort_keys=True)
        )


# -- Execution ----------------------------------------------------------------------------------


UNKNOWN_UNITS = {"(unknown: the kernel left no record of what it ran)": "unknown"}


@dataclasses.dataclass
class Execution:
    """The outcome of executing one page."""

    page: Page
    notebook: nbformat.NotebookNode | None
    seconds: float
    units: dict[str, str] | None
    error: str | None = None
    finished: float = dataclasses.field(default_factory=time.time)  # when it ended (epoch)


async def _execute(page: Page, code: CodeIndex, options: dict[str, Any]) -> Execution:
    with tempfile.TemporaryDirectory(prefix="nbexec-") as scratch:
        rcfile = Path(scratch, "coveragerc")
        sources = "".join(f"\n    {root}" for root in code.roots)
        rcfile.write_text(
            f"[run]\nsource ={sources}\ndata_file = {scratch}/.coverage\nparallel = true\n"
        )
        # coverage.py's .pth file starts measuring every Python process that sees this
        # variable: the kernel and whatever it launches.
        kernel_env = {**os.environ, "COVERAGE_PROCESS_START": str(rcfile)}
        if sys.version_info >= (3, 12):
            kernel_env["COVERAGE_CORE"] = "sysmon"  # near-zero overhead outside tracked code
        notebook = copy.deepcopy(page.notebook)
        cwd = scratch if options["in_temp"] else str(page.path.parent)
        last_code_cell = max(
            (i for i, cell in enumerate(notebook.cells) if cell.cell_type == "code"), default=None
        )
        if last_code_cell is None:
            # Nothing to run: no kernel. One started for no cell is stopped by
            # jupyter_client with SIGINT while it may still be starting, and then logs
            # "KeyboardInterrupt caught in kernel" into the build's output (a CI run).
            return Execution(page, notebook, 0.0, {})

        async def save_record(cell: Any, cell_index: int, execute_reply: Any) -> None:
            # After the last cell, while the kernel is alive, have it write its coverage
            # data now rather than at exit, which a slow shutdown could cut short.
            del cell, execute_reply
            if cell_index == last_code_cell and client.kc is not None:
                request = client.kc.execute(SAVE_COVERAGE, silent=True, store_history=False)
                await client.async_wait_for_reply(request)
                # Then ask the kernel to exit. Left running, it is stopped by
                # jupyter_client's shutdown_kernel, which sends SIGINT first; a kernel
                # still finishing its last message then logs "KeyboardInterrupt caught
                # in kernel" as an error into the build's output (12 of 31 pages here).
                await client.km.request_shutdown()  # nbclient's AsyncKernelManager
                await client.km.finish_shutdown()

        client = NotebookClient(
            notebook,
            timeout=options["timeout"],
            allow_errors=options["allow_errors"],
            record_timing=False,
            kernel_name=notebook.metadata.get("kernelspec", {}).get("name", "python3"),
            resources={"metadata": {"path": cwd}},
            on_cell_executed=save_record,
            config=Config({"KernelManager": {"transport": "ipc", "ip": f"{scratch}/kernel"}}),
        )
        start = time.perf_counter()
        try:
            await client.async_execute(env=kernel_env)
        except (CellExecutionError, CellTimeoutError, DeadKernelError) as error:
            return Execution(page, None, time.perf_counter() - start, None, str(error))
        except Exception as error:  # noqa: BLE001 (no kernel of that name, say): this page's error
            message = f"{type(error).__name__}: {error}"
            return Execution(page, None, time.perf_counter() - start, None, message)
        seconds = time.perf_counter() - start
        return Execution(page, notebook, seconds, _units_run(scratch, rcfile, code))


def _units_run(scratch: str, rcfile: Path, code: CodeIndex) -> dict[str, str] | None:
    """The units the kernel and its subprocesses ran, or None if that is unknown.

    The kernel saves its data after the last cell (``SAVE_COVERAGE``), subprocesses as
    they exit. Unknown (no readable data) is not "nothing": the page is recorded as
    depending on an unknown unit, so the next build runs it again.
    """
    if not list(Path(scratch).glob(".coverage.*")):
        return None
    measured = coverage.Coverage(config_file=str(rcfile))
    try:
        measured.combine(data_paths=[scratch], strict=False, keep=False)
        data = measured.get_data()
    except coverage.exceptions.CoverageException:
        return None
    units: dict[str, str] = {}
    for filename in data.measured_files():
        key = code.key_of(filename)
        file_units = code.file(key) if key else None
        if key is None or file_units is None:
            continue
        for name in file_units.units_of(data.lines(filename) or []):
            units[f"{key}::{name}"] = file_units.fingerprints[name]
    return dict(sorted(units.items()))


class Executions:
    """Stale pages executing in a thread of their own, while Sphinx reads the others.

    A page's :class:`Execution` is ready in :meth:`result` as soon as its kernel
    finishes; pages start in the order given, at most ``workers`` at once.
    """

    def __init__(
        self, pages: list[Page], code: CodeIndex, options: dict[str, Any], workers: int
    ) -> None:
        """Start executing ``pages`` in a background thread."""
        self.started = time.perf_counter()
        self.ended: float | None = None  # when the last execution ended
        self._futures: dict[str, concurrent.futures.Future[Execution]] = {
            page.docname: concurrent.futures.Future() for page in pages
        }
        self._thread = threading.Thread(
            target=asyncio.run,
            args=(self._execute_all(pages, code, options, workers),),
            name="execution-cache",
            daemon=True,  # a build stopped with Ctrl-C does not wait for its kernels
        )
        self._thread.start()

    async def _execute_all(
        self, pages: list[Page], code: CodeIndex, options: dict[str, Any], workers: int
    ) -> None:
        slots = asyncio.Semaphore(workers)

        async def one(page: Page) -> None:
            future = self._futures[page.docname]
            try:
                async with slots:
                    future.set_result(await _execute(page, code, options))
            except BaseException as error:  # noqa: BLE001 (raised where the result is read)
                future.set_exception(error)

        try:
            await asyncio.gather(*(one(page) for page in pages))
        finally:
            self.ended = time.perf_counter()

    @property
    def order(self) -> list[str]:
        """The pages, in the order they start."""
        return list(self._futures)

    def __contains__(self, docname: str) -> bool:
        """Whether ``docname`` is one of the pages being executed."""
        return docname in self._futures

    def result(self, docname: str) -> Execution:
        """Page ``docname``'s execution, once it has finished."""
        return self._futures[docname].result()

    def results(self) -> list[Execution]:
        """Every page's execution, once all have finished, in the order they started."""
        self._thread.join()
        return [future.result() for future in self._futures.values()]


def _with_outputs(source: nbformat.NotebookNode, executed: nbformat.NotebookNode) -> Any:
    """``source`` with the outputs of ``executed``: the cache must hash like the source."""
    merged = copy.deepcopy(source)
    for cell, done in zip(merged.cells, executed.cells, strict=True):
        if cell.cell_type == "code":
            cell.outputs = done.outputs
            cell.execution_count = done.execution_count
    for key in ("language_info", "widgets"):
        if key in executed.metadata:
            merged.metadata[key] = executed.metadata[key]
    return merged


def _utc(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat(timespec="seconds")


# -- Sphinx -----------------------------------------------------------------------------------


def cache_directory(app: Sphinx) -> Path:
    """Where the executed notebooks, the manifest and the log live."""
    configured = app.config.nb_execution_cache_path
    return Path(configured) if configured else Path(app.outdir).parent / ".jupyter_cache"


@dataclasses.dataclass
class Build:
    """One build's stale pages: executing, then stored as Sphinx comes to read each."""

    cache: JupyterCacheAbstract
    directory: Path
    manifest: Manifest
    environment: dict[str, Any]
    pages: list[Page]
    stale: dict[str, str]  # docname -> why it executes
    workers: int
    executions: Executions | None = None
    stored: set[str] = dataclasses.field(default_factory=set)
    finished: bool = False


_BUILDS: weakref.WeakKeyDictionary[Sphinx, Build] = weakref.WeakKeyDictionary()


def refresh_outputs(
    app: Sphinx, env: BuildEnvironment, added: set[str], changed: set[str], removed: set[str]
) -> list[str]:
    """Start executing the stale pages; return them so that Sphinx reads them again.

    The pages execute in the background while Sphinx reads the others (each stale
    page is read once its execution is stored: :func:`wait_for_outputs`). When
    Sphinx reads in parallel processes, which cannot wait on this process' thread,
    every page executes before reading starts.
    """
    del added, changed, removed  # staleness is decided here, from the manifest
    config = app.config
    if config.nb_execution_mode != "cache":
        return []
    directory = cache_directory(app)
    directory.mkdir(parents=True, exist_ok=True)
    cache = get_cache(directory)
    code = CodeIndex(config.execution_cache_track)
    code.snapshot()
    current = environment(
        config.execution_cache_settings,
        config.execution_cache_distributions,
        config.execution_cache_variables,
    )
    manifest = Manifest(directory)

    pages = list(notebook_pages(env))
    stale: dict[str, str] = {}
    for page in pages:
        reason = manifest.why_stale(page, current, code, cache)
        if reason:
            stale[page.docname] = reason
            LOGGER.info(f"execution cache: {page.docname} is stale ({reason})")
    build = Build(
        cache=cache,
        directory=directory,
        manifest=manifest,
        environment=current,
        pages=pages,
        stale=stale,
        workers=max(1, config.execution_cache_workers or os.cpu_count() or 1),
    )
    _BUILDS[app] = build
    # Pages that ran longest last time start first, so that no kernel is left with a
    # long page at the end; pages never executed before start before those.
    to_run = sorted(
        (page for page in pages if page.docname in stale),
        key=lambda page: -manifest.pages.get(page.docname, {}).get("seconds", math.inf),
    )
    if to_run:
        options = {
            "timeout": config.nb_execution_timeout,
            "allow_errors": config.nb_execution_allow_errors,
            "in_temp": config.nb_execution_in_temp,
        }
        build.executions = Executions(to_run, code, options, build.workers)
        LOGGER.info(
            f"execution cache: executing {len(to_run)} of {len(pages)} pages with "
            f"{min(build.workers, len(to_run))} kernel(s)"
        )
    if not to_run or (app.parallel > 1 and app.is_parallel_allowed("read")):
        finish_executions(app, env)
    return sorted(stale.keys() | manifest.unread)


def order_reading(app: Sphinx, env: BuildEnvironment, docnames: list[str]) -> None:
    """Read the pages that need no execution first, then the stale ones as they start."""
    del env
    build = _BUILDS.get(app)
    if build is None or build.executions is None or build.finished:
        return
    started = {docname: index for index, docname in enumerate(build.executions.order)}
    docnames.sort(key=lambda docname: started.get(docname, -1))


def wait_for_outputs(app: Sphinx, docname: str, source: list[str]) -> None:
    """Before Sphinx reads a stale page, wait for its execution and store its outputs."""
    del source
    build = _BUILDS.get(app)
    if build is None or build.executions is None or build.finished:
        return
    if docname not in build.executions or docname in build.stored:
        return
    done = build.executions.result(docname)
    if done.notebook is None:  # report it with the others, once every kernel is done
        finish_executions(app, app.env)
        return
    _store(build, done)
    LOGGER.info(f"execution cache: executed {docname} in {done.seconds:.1f} s")


def _store(build: Build, done: Execution) -> None:
    """Put a page's executed notebook into the cache and its record into the manifest.

    The manifest is saved at once: a build stopped later still keeps this page's
    outputs, and reads them in the next build (``unread``).
    """
    manifest = build.manifest
    previous = manifest.pages.get(done.page.docname, {}).get("cache_pk")
    record = build.cache.cache_notebook_bundle(
        CacheBundleIn(
            _with_outputs(done.page.notebook, done.notebook),
            str(done.page.path),
            data={"execution_seconds": done.seconds},
        ),
        check_validity=False,
        overwrite=True,
    )
    if previous is not None and previous != record.pk:
        with contextlib.suppress(KeyError):  # already gone: nothing to tidy
            build.cache.remove_cache(previous)
    if done.units is None:
        LOGGER.info(
            f"execution cache: {done.page.docname} left no record of the code it ran; "
            "it will execute again in the next build"
        )
    manifest.pages[done.page.docname] = {
        "source": done.page.source_hash,
        "environment": build.environment,
        "units": UNKNOWN_UNITS if done.units is None else done.units,
        "seconds": round(done.seconds, 3),
        "executed": _utc(done.finished),
        "cache_pk": record.pk,
    }
    manifest.unread.add(done.page.docname)
    manifest.save({page.docname for page in build.pages})
    build.stored.add(done.page.docname)


def finish_executions(app: Sphinx, env: BuildEnvironment) -> list[str]:
    """Wait for every execution, store what is left, log the build, report failures.

    Runs when Sphinx has read every page (``env-updated``), or earlier when a page
    failed or Sphinx reads in parallel. Returns no pages to write again.
    """
    del env
    build = _BUILDS.get(app)
    if build is None or build.finished:
        return []
    build.finished = True
    config = app.config
    executions = build.executions.results() if build.executions is not None else []
    failures = [done for done in executions if done.notebook is None]
    for done in executions:
        if done.notebook is not None and done.page.docname not in build.stored:
            _store(build, done)
    build.manifest.unread |= build.stale.keys()
    build.manifest.save({page.docname for page in build.pages})

    wall = 0.0
    if build.executions is not None and build.executions.ended is not None:
        wall = build.executions.ended - build.executions.started
    with (build.directory / LOG).open("a") as log:
        entry = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "pages": len(build.pages),
            "workers": build.workers,
            "seconds": round(wall, 3),
            "executed": {
                done.page.docname: {
                    "reason": build.stale[done.page.docname],
                    "seconds": round(done.seconds, 3),
                    "succeeded": done.error is None,
                }
                for done in sorted(executions, key=lambda done: done.page.docname)
            },
        }
        log.write(json.dumps(entry) + "\n")
    LOGGER.info(
        f"execution cache: executed {len(executions)} of {len(build.pages)} pages "
        f"in {wall:.1f} s with {min(build.workers, max(1, len(executions)))} kernel(s)"
    )
    for failed in failures:
        message = f"executing {failed.page.docname} failed:\n{failed.error}"
        if config.nb_execution_raise_on_error:
            raise ExtensionError(message)
        LOGGER.warning(message, type="mystnb", subtype="exec", location=failed.page.docname)
    return []


def execution_record(app: Sphinx, docname: str) -> dict[str, Any] | None:
    """When page ``docname``'s cached outputs were produced, and in what environment.

    ``{"executed": <ISO 8601 time, UTC>, "environment": {...}}`` (the environment as
    :func:`environment` describes it), or None if the page has no cached execution.
    Pages executed before the manifest recorded the time get their cache record's
    creation time.
    """
    if app.config.nb_execution_mode != "cache":
        return None
    directory = cache_directory(app)
    record = Manifest(directory).pages.get(docname)
    if record is None:
        return None
    executed = record.get("executed")
    if executed is None:
        try:
            created = get_cache(directory).get_cache_record(record["cache_pk"]).created
        except (KeyError, ValueError):
            return None
        executed = created.replace(tzinfo=dt.UTC).isoformat(timespec="seconds")
    return {"executed": executed, "environment": record["environment"]}


def mark_read(app: Sphinx, exception: Exception | None) -> None:
    """After a build that finished, every page's outputs are in Sphinx's saved environment."""
    if exception is not None or app.config.nb_execution_mode != "cache":
        return
    manifest = Manifest(cache_directory(app))
    if manifest.unread:
        manifest.unread.clear()
        manifest.save(set(manifest.pages))


def setup(app: Sphinx) -> dict[str, Any]:
    """Register the configuration values and the event handler."""
    app.setup_extension("myst_nb")
    app.add_config_value("execution_cache_track", [], "env", list)
    app.add_config_value("execution_cache_distributions", [], "env", list)
    app.add_config_value("execution_cache_settings", {}, "env", dict)
    app.add_config_value("execution_cache_variables", ["JAX_", "XLA_"], "env", list)
    app.add_config_value("execution_cache_workers", 0, "", int)
    app.connect("env-get-outdated", refresh_outputs)
    app.connect("env-before-read-docs", order_reading)
    app.connect("source-read", wait_for_outputs)
    app.connect("env-updated", finish_executions)
    app.connect("build-finished", mark_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
