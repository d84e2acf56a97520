#!/usr/bin/env -S uv run --script
# /// script
# dependencies = ["nox>=2026.10.20"]
# ///
"""Every check of the project, as nox sessions: `nox` runs the default ones, `nox -l` lists all."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import nox

nox.needs_version = ">=2026.10.20"  # sessions in parallel (`nox --parallel`)
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_existing_virtualenvs = True
# nox runs three sessions at once (`nox -j 1` runs one at a time), in the order they
# are defined here, each as soon as a place is free and what it requires has run.
# Building the site, then auditing it in Chromium (`docs`, then `browser`), is the
# longest chain of sessions that must wait for each other, so it starts first beside
# work that nothing waits for and that no clock can fail: the 8-device passes of the
# in-process tests (the two `tests`), which run at a lower CPU priority (`nice`, see
# _in_background) and take the cores whenever the chain waits or cannot use both.
# The sessions whose processes have deadlines (the checker's, a cluster's: `processes`,
# `distributed`, and the oldest stack's process tests at the end of `tests-3.11`) run at
# the normal priority, and are defined after `browser` and `site` so that they start
# once `docs` is done, with the rest; `lint` (niced too) before them, so that the run
# does not end on it alone. Measured on 2 cores (nox's wall-clock time): three at once
# and no priorities, 1328 s, the site's chain 1095 s of it and the last 8 minutes one
# session's alone; four at once with the test passes niced, 1107 s, all of it the
# chain's (`docs` slowed by the process tests started beside it); as here, 1068 s, both
# cores busy from the first minute to the last but one. Each session spends part of its
# time waiting (for processes to start JAX, for a hang to be stopped, for a cluster to
# join, for the package index): a third session's work fills those waits.
nox.options.parallel = 3
nox.options.allow_parallel = True

ROOT = Path(__file__).parent
PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")
# Which Python tests what. The suite runs in full on the two stacks that can differ:
# Python 3.11 gets the oldest supported jax/flax (0.10.x / 0.12.8) and 3.13 the newest
# Python with the newest jax/flax. Python 3.12 gets the same jax/flax as 3.13 today, so a
# third full run would repeat 3.13's; it builds and tests the site instead (doctests,
# docs, browser, lint), as Read the Docs does.
TEST_PYTHONS = ["3.11", "3.13"]
DOCS_PYTHON = "3.12"
# Every pytest run uses both cores (pytest-xdist). Tests marked `subprocesses` or
# `distributed` start processes of their own (the checker's workers, 2-process clusters),
# but spend much of their time waiting for them to start JAX, or for a hang to be
# stopped: two at once keep both cores busy (measured on 2 cores: the subprocess tests
# in 124 s instead of 172, the distributed ones in 82 instead of 156).
WORKERS = ["--numprocesses", "2"]
# The code cells of the pages: errors, imports, bugbear, pyupgrade; lines are the
# formatter's business (80 columns, to fit the page).
PAGE_RULES = "E,F,I,B,UP --ignore E402,E501"
# JAX's persistent compilation cache, shared by the sessions of one machine (see _jax_env).
JAX_CACHE = ROOT / ".nox" / "jax-compilation-cache"
# Where .ci/run asks for each pytest run's JUnit report (its test times), to total the
# CI time each problem costs; unset, nothing is written.
TIMINGS = os.environ.get("SHARD_TUTORIAL_TIMINGS")


def _expose_pyenv_pythons() -> None:
    """Let nox find every Python that pyenv installed, not only the active one.

    pyenv's shims run the versions PYENV_VERSION names (pyenv sets it to the active
    one for every program it starts, nox included); adding the other installed 3.x
    versions after it makes `python3.12` and friends resolve while `python3` stays
    what it was. Without pyenv this does nothing.
    """
    if shutil.which("pyenv") is None:
        return
    run = subprocess.run(
        ["pyenv", "versions", "--bare"], capture_output=True, text=True, check=True
    )
    installed = [v for v in run.stdout.split() if v.startswith("3.")]
    active = [v for v in os.environ.get("PYENV_VERSION", "").split(":") if v]
    os.environ["PYENV_VERSION"] = ":".join(dict.fromkeys(active + installed[::-1]))


_expose_pyenv_pythons()


def _timed(session: nox.Session, label: str) -> list[str]:
    """The arguments that make pytest write its JUnit report for .ci/run, if it asked."""
    if not TIMINGS:
        return []
    return [f"--junitxml={Path(TIMINGS) / f'{session.name}-{label}.xml'}"]


def _install(session: nox.Session, *groups: str) -> None:
    """Install the package (editable) with its dependency ``groups``, no bytecode compiled.

    Compiling every installed module at install time (uv's UV_COMPILE_BYTECODE) took
    24 s of CPU for the test group alone, mostly for modules no test imports; the
    sessions that start processes write the bytecode of what they import instead, once,
    as they import it (_jax_env).
    """
    session.install(
        "-e", ".", *nox.project.dependency_groups(PYPROJECT, *groups),
        env={"UV_COMPILE_BYTECODE": "0"},
    )  # fmt: skip


# The models behind the pages (their gradients and vmaps, the transformer block, the
# training runs, the strategies compared): the pages run on the newest stack, at 8
# devices, so their tests do too (at 1 device they took 155 of the newest pass's 661
# test-seconds). The oldest still runs every problem's module and reference
# (tests/problems, and each reference pasted into a file and checked), the corpus of
# answers, and everything that judges them or reads compiled programs, whose text
# differs between the stacks. (They took 5.6 of the oldest run's 24 CPU-minutes.)
# The reference tests whose module holds no behaviour of one JAX version (each
# reference against NumPy at many shapes, its errors, its docstring's claims): on the
# oldest stack every reference is checked against its oracle on every case by the
# checker itself (tests/test_pasted_solutions.py, marked `oldest`). The modules that
# do hold a version's behaviour (fsdp, simulate, psum, all_to_all, moe) run on both.
ORACLE_ONLY = [
    f"tests/problems/test_{name}.py"
    for name in (
        "shard_map_double", "shard_map_vs_vmap", "shard_map_pmean", "shard_map_all_gather",
        "shard_map_ppermute", "shard_map_psum_scatter", "shard_map_axis_index",
        "data_parallel_sgd_step", "tensor_parallel_mlp", "nnx_data_parallel_step",
        "collective_matmul_all_gather", "collective_matmul_reduce_scatter",
        "pipeline_forward", "ring_attention", "zero_adam_step", "pipeline_train_step",
        "ulysses_attention",
    )
]  # fmt: skip
# The checker's tests of verdicts beyond the corpus (one problem's further cases, and the
# shortcuts and right styles of the checker's first doors): on the oldest stack the
# corpus of answers (tests/test_solutions.py) judges every problem's right answers and
# classic mistakes, which is what can differ with JAX's version (how its programs
# print); these files run on the newest, at 8 devices and at 1.
CHECKER_EXTRAS = [
    f"tests/test_checker_{name}.py"
    for name in (
        "data_parallel_sgd_step", "fsdp_sgd_step", "nnx_data_parallel_step",
        "tensor_parallel_mlp", "zero_adam_step", "pipeline_train_step", "doors", "collectives",
    )
]  # fmt: skip
PAGE_MODELS = [
    "tests/test_reference_transformations.py",
    "tests/test_collectives_transformations.py",
    "tests/test_transformer_block.py",
    "tests/test_training_run.py",
    "tests/test_strategies.py",
    "tests/test_reference_inputs.py",
    "tests/test_reference_solutions.py",
]


@nox.session(python=TEST_PYTHONS)
def tests(session: nox.Session) -> None:
    """Run the in-process test suite at 8 devices; on the oldest stack, its process tests too.

    The newest stack's other passes are sessions of their own, so that nox runs them
    beside this one (the 8-device pass alone is CI's longest piece of work): at 1
    device, `tests_newest`; the tests that start processes, `processes`. The oldest runs what can differ with
    JAX's version: the in-process tests at 8 devices (where the stacks' programs and
    collectives differ) but the pages' models, the reference tests that hold no
    version's behaviour (ORACLE_ONLY) and the checker's tests of one problem beyond the
    corpus (CHECKER_EXTRAS), and the process tests but those marked `once`
    (what a check does with hangs, crashes and Ctrl-C depends on no JAX). Those marked
    `oldest` check on the oldest stack what the docs build checks on the newest: every
    problem's reference passes the checker on 1 and 8 devices (pyproject.toml).
    """
    _install(session, "test")
    newest = session.python == TEST_PYTHONS[-1]
    # With arguments (`-- -k psum`) one of the runs may select no test (pytest's exit 5).
    codes = [0, 5] if session.posargs else [0]
    # Tests marked `once` run in one pass: the newest Python at 8 devices (pyproject.toml).
    marks = "not subprocesses" + (" and not oldest" if newest else " and not once")
    ignored = (
        [] if newest else [f"--ignore={p}" for p in PAGE_MODELS + ORACLE_ONLY + CHECKER_EXTRAS]
    )
    _in_background(
        session, "pytest", "--devices=8", "-m", marks, *WORKERS, *ignored,
        *_timed(session, "devices8"), *session.posargs, success_codes=codes, env=_jax_env(),
    )  # fmt: skip
    if not newest:
        _process_tests(session, "subprocesses and not distributed and not once", codes)


# The program that runs a command at a lower CPU priority, where there is one (Linux,
# macOS): 10, where a niceness-0 process gets ten times the CPU time when both want it.
NICE = ["nice", "-n", "10"] if shutil.which("nice") else []


def _in_background(session: nox.Session, *args: str, **kwargs: Any) -> None:
    """``session.run(*args)`` at a lower CPU priority than the site's build and audit.

    Only for work with no clock to miss: the checker's cases, a cluster's joins and
    collectives and a sphinx build's cells have deadlines, and run at the normal
    priority (their processes would inherit this one).
    """
    session.run(*NICE, *args, external=bool(NICE), **kwargs)


def _process_tests(session: nox.Session, marks: str, codes: list[int]) -> None:
    session.run(
        "pytest", "-m", marks, *WORKERS, *_timed(session, "subprocesses"), *session.posargs,
        success_codes=codes, env=_jax_env(),
    )  # fmt: skip


def _fast_compiles() -> str:
    """XLA_FLAGS for the tests and the site: LLVM's quick code generation, the same HLO.

    On this 2-core machine most of the suite's time is XLA compiling small programs,
    and most of that is LLVM optimising machine code the tests run once on a few
    numbers. Level 0 leaves XLA's own passes alone: the compiled HLO the judge and
    the pages read is the same text (every reference's program at 8 devices compared,
    jax 0.12.0.1); the suite's 8-device pass took 338 s instead of 394 (jax 0.10.2).
    Flags already in the environment come after, and win.
    """
    fast = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
    return f"{fast} {os.environ.get('XLA_FLAGS', '')}".strip()


def _jax_env() -> dict[str, str]:
    """The environment of every session that runs JAX: quick compiles, and cached ones.

    JAX's persistent compilation cache keeps each compiled program on disk, keyed by
    the program (without its source locations), the XLA flags, the compile options
    and jaxlib's version, so a program compiled again in another process (the
    checker's workers, the other pytest worker, a page's kernel) is read back instead:
    every check of a reference on a page, say, is a check the tests ran already. A
    program read back prints the same HLO and memory analysis (compared on both
    stacks; only the order of its table of source locations differs). The processes of
    a cluster leave it off (shard_tutorial.devices.join_cpu_cluster: with jax 0.12.1 a
    cluster's program read back from it hangs in its first collective).

    The cache has no size limit: a limit turns on eviction, which reads every entry's
    access time on every write (a run's thousands of programs took minutes each of
    waiting for the cache's lock). Without its lock, a process can read an entry
    that another is still writing, the same program compiled at the same moment: JAX
    then warns and compiles it itself. That warning alone is ignored, here for every
    process and in pyproject.toml for pytest, which makes warnings errors.
    """
    return {
        # Python writes the bytecode of each module it imports, so that the hundreds of
        # processes a session starts (the checker's workers, notebook kernels, clusters)
        # read it rather than compile JAX and the package from source again: `import
        # jax, shard_tutorial` took 3.8 s of CPU without bytecode, 1.6 s with it. An
        # empty value is "unset" to Python, whatever the machine sets.
        "PYTHONDONTWRITEBYTECODE": "",
        "XLA_FLAGS": _fast_compiles(),
        "JAX_COMPILATION_CACHE_DIR": str(JAX_CACHE),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
        "PYTHONWARNINGS": "ignore:Error reading persistent compilation cache entry",
    }


@nox.session(python=DOCS_PYTHON)
def docs(session: nox.Session) -> None:
    """Build the executed site into docs/_build/html; `-- --serve` to preview (`site` tests it)."""
    _install(session, "docs", "test")
    if session.posargs[:1] == ["--serve"]:
        # Rebuilds on saving a page or the package, and reloads the browser; the
        # execution cache decides which pages run again, as in a normal build.
        session.run(
            "sphinx-autobuild", "docs", "docs/_build/html", "--watch", "src",
            "--re-ignore", r"(^|/)(_build|jupyter_execute|tests|__pycache__)(/|$)",
            "--host", "127.0.0.1", "--port", "8000", *session.posargs[1:], env=_jax_env(),
        )  # fmt: skip
        return
    _build_site(session, *session.posargs)


@nox.session(python=DOCS_PYTHON, requires=["docs"])
def browser(session: nox.Session) -> None:
    """Test the site `docs` built in headless Chromium: every page, link and reader action."""
    chromium = _chromium(session)
    _install(session, "docs", "test", "browser")
    session.run(
        "pytest", "docs/tests/browser", *WORKERS, *_timed(session, "all"), *session.posargs,
        env={"CHROMIUM": chromium},
    )  # fmt: skip


def _build_site(session: nox.Session, *args: str) -> None:
    session.run(
        "sphinx-build", "-W", "--keep-going", "-b", "html", "docs", "docs/_build/html", *args,
        env=_jax_env(),
    )  # fmt: skip


def _chromium(session: nox.Session) -> str:
    """The system's Chromium; installed from Debian's packages if missing and possible."""
    found = (
        os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    )
    if found:
        return found
    if shutil.which("apt-get") and hasattr(os, "geteuid") and os.geteuid() == 0:
        env = {"DEBIAN_FRONTEND": "noninteractive"}
        session.run("apt-get", "update", "-q", external=True, env=env)
        session.run(
            "apt-get", "install", "-y", "-q", "--no-install-recommends", "chromium",
            "fonts-dejavu-core", external=True, env=env,
        )  # fmt: skip
        found = shutil.which("chromium")
    if not found:
        session.error(
            "the browser tests need Chromium: install Debian's `chromium` package "
            "(or set CHROMIUM to a Chromium executable)"
        )
    return found


@nox.session(python=DOCS_PYTHON, requires=["docs"])
def site(session: nox.Session) -> None:
    """Test the site `docs` built: each page's executed outputs, links, sources and notebooks.

    A session of its own, so that `browser` starts as soon as the site is built rather
    than after these tests too: the build and the browser's tests are CI's longest chain
    of sessions that must follow each other.
    """
    _install(session, "docs", "test")
    session.run(
        "pytest", "docs/tests", "--ignore=docs/tests/browser",
        "--ignore=docs/tests/test_execution_cache.py", *WORKERS, *_timed(session, "all"),
        *session.posargs, env=_jax_env(),
    )  # fmt: skip


@nox.session(python=DOCS_PYTHON)
def lint(session: nox.Session) -> None:
    """Lint, format-check and type-check the code; validate .readthedocs.yaml; repo-review."""
    _install(session, "lint")
    _in_background(session, "ruff", "check", ".")
    _in_background(session, "ruff", "format", "--check", ".")
    pages = [str(p) for p in sorted(ROOT.glob("docs/**/*.md")) if "_build" not in p.parts]
    # nbqa turns each MyST page into Python through jupytext. (Its --nbqa-md flag is for
    # Markdown tools: with it, ruff is handed .md files, finds no Python and passes.)
    _in_background(session, "nbqa", f"ruff check --select {PAGE_RULES}", *pages)
    _in_background(session, "nbqa", "ruff format --check --line-length 80", *pages)
    _in_background(session, "mypy", "src")
    _in_background(
        session, "check-jsonschema", "--builtin-schema", "vendor.readthedocs", ".readthedocs.yaml"
    )
    _in_background(session, "repo-review", ".")


@nox.session(python=TEST_PYTHONS[-1])
def tests_newest(session: nox.Session) -> None:
    """Run the newest stack's in-process tests at 1 device.

    The pages' models are tested at 8 devices only, as the pages run them (`tests`);
    the references' tests against NumPy (ORACLE_ONLY) too: on 1 device every
    reference is checked against its oracle on every case by the docs build's checks.
    """
    _install(session, "test")
    codes = [0, 5] if session.posargs else [0]
    _in_background(
        session, "pytest", "--devices=1",
        "-m", "not subprocesses and not once and not oldest and not one_device_work",
        *WORKERS, *[f"--ignore={p}" for p in PAGE_MODELS + ORACLE_ONLY],
        *_timed(session, "devices1"),
        *session.posargs, success_codes=codes, env=_jax_env(),
    )  # fmt: skip


@nox.session(python=TEST_PYTHONS[-1])
def processes(session: nox.Session) -> None:
    """Run the newest stack's tests that start processes: the checker's, at its own counts.

    A test marked `subprocesses` runs its work in processes that choose their own
    device counts (the checker's workers run 1 and 8 devices whatever this process
    has), so --devices cannot change its outcome: it runs once, not once per count.
    A session of its own, at the normal CPU priority (its checks have deadlines), and
    defined after `browser` and `site`, so that it starts once `docs` is done. The
    multi-process tests have their own session, `distributed`.
    """
    _install(session, "test")
    codes = [0, 5] if session.posargs else [0]
    _process_tests(session, "subprocesses and not distributed and not oldest", codes)


@nox.session(python=DOCS_PYTHON)
def distributed(session: nox.Session) -> None:
    """Run the multi-process tests: scripts launched as 2-process JAX clusters (gloo)."""
    _install(session, "test")
    session.run(
        "pytest", "-m", "distributed", *WORKERS, *_timed(session, "all"), *session.posargs,
        env=_jax_env(),
    )  # fmt: skip


@nox.session(python=DOCS_PYTHON)
def execution_cache(session: nox.Session) -> None:
    """Test the docs build's execution cache (docs/_ext) on small Sphinx projects of its own.

    Apart from `docs`, whose site these tests do not read, so that `browser`, which
    waits for `docs`, starts two minutes sooner.
    """
    _install(session, "docs", "test")
    session.run(
        "pytest", "docs/tests/test_execution_cache.py", *WORKERS, *_timed(session, "all"),
        *session.posargs, env=_jax_env(),
    )  # fmt: skip


@nox.session(python=DOCS_PYTHON)
def doctests(session: nox.Session) -> None:
    """Run every docstring example of the package on 8 fake CPU devices."""
    _install(session, "test")
    # At the normal priority: the examples of `check` start the checker's workers.
    session.run(
        "pytest", "--devices=8", "--doctest-modules", "src", *_timed(session, "all"),
        *session.posargs, env=_jax_env(),
    )  # fmt: skip


@nox.session(python=DOCS_PYTHON, default=False)
def format(session: nox.Session) -> None:
    """Format the package and the code cells of the pages (what `lint` checks)."""
    _install(session, "lint")
    session.run("ruff", "check", "--fix", "--select", "I", ".")
    session.run("ruff", "format", ".")
    pages = [str(p) for p in sorted(ROOT.glob("docs/**/*.md")) if "_build" not in p.parts]
    session.run("nbqa", "ruff format --line-length 80", *pages)


@nox.session(python=DOCS_PYTHON, default=False)
def bench(session: nox.Session) -> None:
    """Print the benchmarks: call latency, the checker, the docs build and its cache."""
    _install(session, "docs")
    session.run("python", "benchmarks/repeated_call.py", *session.posargs)
    session.run("python", "benchmarks/checker.py")
    session.run("python", "benchmarks/docs_build.py")


if __name__ == "__main__":
    nox.main()
