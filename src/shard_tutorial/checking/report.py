"""What a check found, as a report: a verdict per case and device count, as text or HTML.

:func:`shard_tutorial.check` returns a :class:`CheckReport`: one :class:`DeviceRun`
per device count, each with one :class:`CaseResult` per case. A verdict is one word
(pass, WRONG, ERROR, TIMEOUT, CRASHED, MEMORY, TECHNIQUE, PLACEMENT) and one message;
the same mistake on several cases is reported once, with how many cases it hit.
An input the statement's "Raises" section refuses is a row of its own, labelled
``refused (<the error it names>): <the clause>``; it passes only if that error was raised.
"""

from __future__ import annotations

import dataclasses
import html
import textwrap
from collections.abc import Iterable

from shard_tutorial.checking.protocol import Verdict

__all__ = ["SYMBOLS", "CaseResult", "CheckReport", "DeviceRun", "explained"]

_WRAP = "white-space: pre-wrap"  # a diagnosis is read, not scrolled
_CELL = "padding: 0.1em 1.2em 0.1em 0; text-align: left; white-space: nowrap"
# Green and red that keep 4.5:1 (WCAG AA) on white and on the light grey that
# pydata-sphinx-theme puts behind HTML outputs in dark mode (#ced6dd).
_PASS_COLOUR = "#116329"
_FAIL_COLOUR = "#a40e26"
SYMBOLS: dict[str, str] = {  # by Verdict, a str
    Verdict.PASS: "pass",
    Verdict.FAIL: "WRONG",
    Verdict.ERROR: "ERROR",
    Verdict.TIMEOUT: "TIMEOUT",
    Verdict.CRASH: "CRASHED",
    Verdict.MEMORY: "MEMORY",
    Verdict.TECHNIQUE: "TECHNIQUE",
    Verdict.PLACEMENT: "PLACEMENT",
    Verdict.REFERENCE: "REFERENCE",
    Verdict.BUDGET: "BUDGET",
    Verdict.NOT_RUN: "-",
}


RAN_NO_COLLECTIVE = "the program that computed it runs no collective over more than one device"
"""Added to a wrong value's bare message on several devices whose program combined nothing."""
RAN = "the program that computed it runs "
"""How the note on a wrong value's bare message begins (see :func:`shard_tutorial.checking.judge._what_ran`)."""


def explained(message: str) -> bool:
    """Whether a wrong value's message says more than where the values differ.

    A bare difference is one clause (``"value: expected 496.0, received 6.0"``); a
    problem that recognises the mistake adds sentences (``... received 6.0. That is
    the sum of ...``).

    Examples:
      >>> from shard_tutorial.checking.report import explained
      >>> explained("value: expected 496.0, received 6.0")
      False
      >>> explained("value: expected 496.0, received 6.0. That is one device's partial sum.")
      True
    """
    return ". " in message or message.rstrip().endswith(".")


@dataclasses.dataclass(frozen=True)
class CaseResult:
    """The outcome of one case on one device count.

    Attributes:
      label: what the case exercises.
      arguments: the arguments' shapes and values, e.g. ``"x=float32[32]"``.
      status: ``"pass"``, ``"fail"`` (a wrong answer), ``"error"`` (an exception),
        ``"timeout"``, ``"crash"`` (the process died), ``"memory"`` (more than
        :data:`MEMORY_LIMIT`), ``"technique"`` (right values without the technique
        the problem practises), ``"placement"`` (right values, laid out over the
        devices otherwise than asked), ``"reference"`` (right values from the
        package's own solution), ``"budget"`` (right values, sending or holding
        more bytes per device than the problem allows) or ``"not run"``.
      message: what went wrong; empty when the case passed.
      seconds: how long the case took, compilation included.
      raises: for an input the statement refuses, the error its "Raises" section
        names (``"TypeError"``), which the solution must raise; None for a case
        with an answer to compute.

    Examples:
      >>> from shard_tutorial.checking.report import CaseResult
      >>> CaseResult("a 2-D x", "x=float32[1,2]", "pass", raises="ValueError").row_label
      'refused (ValueError): a 2-D x'
      >>> CaseResult("empty", "x=float32[0]", "pass").row_label
      'empty'
    """

    label: str
    arguments: str
    status: str
    message: str = ""
    seconds: float = 0.0
    raises: str | None = None

    @property
    def row_label(self) -> str:
        """The label the report prints: a refused input's says so, and names its error."""
        return self.label if self.raises is None else f"refused ({self.raises}): {self.label}"


@dataclasses.dataclass(frozen=True)
class DeviceRun:
    """All cases on one device count.

    Attributes:
      devices: the number of fake CPU devices, of every process together.
      results: one result per case, in the problem's order.
      load_error: why the solution could not be loaded, if it could not.
      processes: how many JAX processes held the devices (a cluster when above 1,
        each process with ``devices // processes`` of them).
    """

    devices: int
    results: tuple[CaseResult, ...]
    load_error: str | None = None
    processes: int = 1

    @property
    def passed(self) -> bool:
        """Whether the solution loaded and every case passed."""
        return self.load_error is None and all(r.status == "pass" for r in self.results)

    @property
    def name(self) -> str:
        """``"1 device"``, ``"8 devices"``, or ``"2 processes x 4 devices"``."""
        if self.processes > 1:
            each = self.devices // self.processes
            return f"{self.processes} processes x {each} device{'s' if each != 1 else ''}"
        return f"{self.devices} device{'s' if self.devices != 1 else ''}"

    def judged_in_part(self) -> list[list[CaseResult]]:
        """The cases that passed without their technique judged in full, grouped by why.

        A case that cannot show the technique (one device, an empty array, a learning
        rate of 0) is judged on its values, where they were made and its layout.
        """
        groups: dict[str, list[CaseResult]] = {}
        for result in self.results:
            if result.status == "pass" and result.message:
                groups.setdefault(result.message, []).append(result)
        return list(groups.values())

    def problems(self) -> list[list[CaseResult]]:
        """The cases that did not pass, grouped when they went wrong the same way."""
        groups: dict[tuple[str, str], list[CaseResult]] = {}
        for result in self.results:
            if result.status != "pass" and (result.status != "not run" or result.message):
                groups.setdefault((result.status, result.message), []).append(result)
        return list(groups.values())


@dataclasses.dataclass(frozen=True)
class CheckReport:
    """The verdict on a solution: prints as text, renders as a table in a notebook.

    Attributes:
      problem: the problem's name.
      solution: what was checked, e.g. ``"shard_map_psum in solution.py"``.
      runs: one run per device count.
      seconds: wall time of the whole check.
      seed: the seed of the check's random cases (None: it had none).
      notes: what the reader should know besides the verdict.
      deadline: the seconds the check was allowed in all.
    """

    problem: str
    solution: str
    runs: tuple[DeviceRun, ...]
    seconds: float
    seed: int | None = None
    notes: tuple[str, ...] = ()
    deadline: float | None = None

    @property
    def passed(self) -> bool:
        """Whether every case passed on every device count."""
        return all(run.passed for run in self.runs)

    def verdict(self) -> str:
        """One line: passed, or what failed where."""
        if self.passed:
            return f"PASSED: every case on {self._device_counts()}"
        failing = []
        for run in self.runs:
            if run.load_error is not None:
                failing.append(f"{run.name}: could not load the solution")
            elif not run.passed:
                bad = sum(r.status != "pass" for r in run.results)
                failing.append(f"{run.name}: {bad} of {len(run.results)} cases failed")
        return "FAILED (" + "; ".join(failing) + ")"

    def hints(self) -> list[str]:
        """Advice drawn from comparing the device counts."""
        single = next((run for run in self.runs if run.devices == 1 and _values_right(run)), None)
        if single is None:
            return []
        # Only where some answer on many devices is wrong: an ERROR (a mesh that does
        # not divide a length, say) has its own message, and this hint would not fit it.
        # A refused input that was not refused is wrong alike on every device count.
        broken = [
            run
            for run in self.runs
            if run.devices > 1
            and run.load_error is None
            and any(r.status == "fail" and r.raises is None for r in run.results)
        ]
        if not broken:
            return []
        failing = [
            r.message
            for run in broken
            for r in run.results
            if r.status == "fail" and r.raises is None
        ]
        if all(explained(message) for message in failing):
            return []  # each wrong answer already says what it looks like
        names = " and ".join(run.name for run in broken)
        if all(run.processes > 1 for run in broken):
            hint = (
                f"Every case gets the right values on 1 device, but not on {names}. Code "
                "that is right in one process can still assume that it sees every device "
                "and every block of an array (jax.local_devices() for jax.devices(), "
                "np.asarray or jax.device_get of a sharded array); in a cluster each "
                "process sees only its own."
            )
            return [hint]
        if any(RAN_NO_COLLECTIVE in message for message in failing):
            cause = "a missing collective (psum)"
        else:  # the programs ran collectives (or are not known): not a missing one
            cause = "a collective over the wrong values or axis"
        hint = (
            f"Every case gets the right values on 1 device, but not on {names}. An answer "
            f"that changes with the number of devices usually means {cause}, an out_specs "
            "that does not describe what each device returns, or code that assumes one "
            "block is the whole array. (On one device, it is.)"
        )
        return [hint]

    def __str__(self) -> str:
        """The report as text for a terminal."""
        lines = [
            f"Checking {self.solution} on {self._device_counts()}: {self.verdict()}",
            "",
        ]
        for note in self._notes():
            lines += [textwrap.fill("Note: " + note, 88), ""]
        for run in self.runs:
            if run.load_error is not None:
                lines += [
                    f"{run.name}: the solution could not be loaded:",
                    _indent(run.load_error, 2),
                    "",
                ]
        rows = self._rows()
        if rows:
            headers = ["case", "input", *(run.name for run in self.runs)]
            widths = [
                max(len(str(row[i])) for row in [headers, *rows]) for i in range(len(headers))
            ]
            for row in [headers, *rows]:
                lines.append(
                    "  ".join(
                        str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)
                    ).rstrip()
                )
            lines.append("")
        for run in self.runs:
            groups = run.problems()
            if groups:
                lines.append(f"What went wrong on {run.name}:")
                for results in groups:
                    lines.append(f"  {_cases(results)}: {SYMBOLS[results[0].status]}")
                    lines.append(_indent(results[0].message, 4))
                lines.append("")
        for run in self.runs:
            groups = run.judged_in_part()
            if groups:
                lines.append(f"Passed, judged in part ({_PART}) on {run.name}:")
                for results in groups:
                    lines.append(f"  {_cases(results)}:")
                    lines.append(_indent(results[0].message, 4))
                lines.append("")
        for hint in self.hints():
            lines += [textwrap.fill("Hint: " + hint, 88), ""]
        limit = f" (deadline {self.deadline:g} s)" if self.deadline is not None else ""
        lines.append(f"Checked in {self.seconds:.1f} s{limit}.")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        """The report as an HTML table, for notebooks."""
        colour = _PASS_COLOUR if self.passed else _FAIL_COLOUR
        heading = (
            f'<div class="shard-tutorial-check"><p><strong style="color:{colour}">'
            f"{html.escape(self.verdict())}</strong> &mdash; {html.escape(self.solution)}, "
            f"{self.seconds:.1f} s</p>"
        )
        parts = [heading]
        parts += [f"<p><em>Note:</em> {html.escape(note)}</p>" for note in self._notes()]
        for run in self.runs:
            if run.load_error is not None:
                parts.append(
                    f"<p>{run.name}: the solution could not be loaded:</p>"
                    f'<pre style="{_WRAP}">{html.escape(run.load_error)}</pre>'
                )
        rows = self._rows()
        if rows:
            head = "".join(
                f'<th style="{_CELL}">{html.escape(h)}</th>'
                for h in ["case", "input", *(r.name for r in self.runs)]
            )
            body = []
            for row in rows:
                cells = [
                    f'<td style="{_CELL}">{html.escape(row[0])}</td>',
                    f'<td style="{_CELL}"><code>{html.escape(row[1])}</code></td>',
                ]
                for status in row[2:]:
                    tint = _PASS_COLOUR if status.startswith("pass") else _FAIL_COLOUR
                    cells.append(f'<td style="{_CELL}; color:{tint}">{html.escape(status)}</td>')
                body.append("<tr>" + "".join(cells) + "</tr>")
            parts.append(
                f'<div style="overflow-x: auto" tabindex="0"><table><thead><tr>{head}</tr></thead>'
                f"<tbody>{''.join(body)}</tbody></table></div>"
            )
        for run in self.runs:
            for results in run.problems():
                parts.append(
                    f"<p>{html.escape(_cases(results))} on {run.name}: "
                    f"<strong>{SYMBOLS[results[0].status]}</strong></p>"
                    f'<pre style="{_WRAP}">{html.escape(results[0].message)}</pre>'
                )
        for run in self.runs:
            for results in run.judged_in_part():
                parts.append(
                    f"<p>{html.escape(_cases(results))} on {run.name}: passed, judged in part "
                    f"({_PART})</p><p>{html.escape(results[0].message)}</p>"
                )
        parts += [f"<p><em>Hint:</em> {html.escape(hint)}</p>" for hint in self.hints()]
        return "".join(parts) + "</div>"

    def _notes(self) -> list[str]:
        notes = list(self.notes)
        if self.seed is not None:
            notes.append(
                f"the random cases came from seed {self.seed}; --seed {self.seed} (seed="
                f"{self.seed} from Python) checks the same cases again."
            )
        return notes

    def _device_counts(self) -> str:
        if any(run.processes > 1 for run in self.runs):
            names = [run.name for run in self.runs]
            return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
        counts = [str(run.devices) for run in self.runs]
        joined = counts[0] if len(counts) == 1 else ", ".join(counts[:-1]) + " and " + counts[-1]
        return f"{joined} device{'s' if counts != ['1'] else ''}"

    def _rows(self) -> list[list[str]]:
        loaded = [run for run in self.runs if run.results]
        if not loaded:
            return []
        first = loaded[0].results
        return [
            [result.row_label, result.arguments]
            + [_symbol(run.results[i]) if run.results else "-" for run in self.runs]
            for i, result in enumerate(first)
        ]


_PART = "pass*: the case cannot show the technique, so its values, devices and layout were judged"


def _symbol(result: CaseResult) -> str:
    """The table's word for a result: ``pass*`` for a pass judged in part."""
    return "pass*" if result.status == "pass" and result.message else SYMBOLS[result.status]


def _values_right(run: DeviceRun) -> bool:
    """Whether every case of ``run`` gave the right values (its technique aside).

    The inputs the statement refuses have no values to get right: they are left out.
    """
    right = {Verdict.PASS, Verdict.TECHNIQUE, Verdict.PLACEMENT, Verdict.REFERENCE, Verdict.BUDGET}
    return run.load_error is None and all(
        r.status in right for r in run.results if r.raises is None
    )


def _cases(results: list[CaseResult]) -> str:
    """``"<label> (<arguments>)"``, or how many cases and which, for a group."""
    if len(results) == 1:
        return f"{results[0].row_label} ({results[0].arguments})"
    labels = [f"'{r.row_label}'" for r in results[:2]]
    more = f" and {len(results) - 2} more" if len(results) > 2 else ""
    return f"{len(results)} cases ({', '.join(labels)}{more})"


def _indent(text: str, spaces: int) -> str:
    wrapped: Iterable[str] = (
        textwrap.fill(line, 88, initial_indent=" " * spaces, subsequent_indent=" " * spaces)
        if len(line) > 88 and not line.startswith("  ")
        else " " * spaces + line
        for line in text.splitlines()
    )
    return "\n".join(wrapped)
