"""What the commands print: the two consoles, tables of frames, the ingest summary, the report, progress bars.

Everything printed goes through here, and every text from a bill or a rule is data: :func:`say` and
:func:`echo` print plain cleaned lines (no markup, no emoji codes, no control characters), tables get
:func:`billing_audit.inert.text` cells, CSV comes from the one CSV writer and JSON from
:func:`billing_audit.inert.json_inert`."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    import polars as pl
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from billing_audit.app import EngineRun
    from billing_audit.report import Report
    from billing_audit.store import IngestReport



def plain() -> bool:
    """NO_COLOR (any value but empty, https://no-color.org): no escape codes at all, not even bold, and no
    animated progress bars.  A pipe or a file gets none either way (rich writes styles to terminals only)."""
    return bool(os.environ.get("NO_COLOR"))


_consoles: dict[str, Console] = {}


def _console(name: str) -> Console:
    """The stdout (``out``) or stderr (``err``) console, made on first use: rich is imported by the commands
    that print, not by `billing-audit --help`."""
    if not _consoles:
        from rich.console import Console

        class _Out(Console):
            def on_broken_pipe(self) -> None:
                """`billing-audit report | head`: the reader has all it wants; exit 0 quietly (rich exits 1)."""
                self.quiet = True
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
                os.close(devnull)
                raise SystemExit(0)

        styles = {"color_system": None} if plain() else {}
        _consoles["out"] = _Out(highlight=False, soft_wrap=True, emoji=False, markup=False,
                                width=None if sys.stdout.isatty() else 220, **styles)  # type: ignore[arg-type]
        _consoles["err"] = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False, markup=False,
                                   **styles)  # type: ignore[arg-type]
    return _consoles[name]


def __getattr__(name: str) -> Any:
    """``console.out`` and ``console.err``: the two consoles (made on first use)."""
    if name in ("out", "err"):
        return _console(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _clean(value: str) -> str:
    from billing_audit.inert import clean

    return clean(value)


def live() -> bool:
    """Progress bars may be drawn: stderr is a terminal and NO_COLOR is not set."""
    return _console("err").is_terminal and not plain()


def say(line: str) -> None:
    """One plain line on stderr: cleaned, never markup.  Through the stderr console once it exists (progress bars
    draw on it); before, written as that console would write it (tabs to 8 columns), without importing rich."""
    if _consoles:
        from billing_audit.inert import text

        _console("err").print(text(line))
        return
    sys.stderr.write(_clean(line).expandtabs(8) + "\n")
    sys.stderr.flush()


def note(line: str) -> None:
    """An informational line on stderr ("wrote ..."), left out with -q/--quiet (warnings and errors never are)."""
    from billing_audit.cli.options import quiet_on

    if not quiet_on():
        say(line)


def echo(line: str = "", nl: bool = True) -> None:
    """Plain text on stdout (what a command prints outside tables): cleaned, never markup."""
    from billing_audit.inert import clean

    click.echo(clean(line), nl=nl)


def frame_table(df: pl.DataFrame, title: str) -> Table:
    """A frame as a rich table whose cells are text, never markup."""
    from rich.table import Table

    from billing_audit.inert import text

    table = Table(title=text(title), show_lines=False)
    for c in df.columns:
        table.add_column(text(c), justify="right" if df[c].dtype.is_numeric() else "left")
    for row in df.iter_rows():
        table.add_row(*(text("" if v is None else f"{v:,.2f}" if hasattr(v, "as_tuple") else v) for v in row))
    return table


def print_frame(df: pl.DataFrame, title: str, fmt: str) -> None:
    """A frame as CSV (the one CSV writer; amounts exact), JSON (control characters escaped) or a rich table."""
    from billing_audit import inert

    if fmt == "csv":
        click.echo(inert.csv_text(df, places=None), nl=False)
        return
    if fmt == "json":
        click.echo(inert.json_inert(df.write_json()))
        return
    _console("out").print(frame_table(df, title))


def print_ingest(report: IngestReport, quiet: bool) -> None:
    """Each failed file, then one summary line (unless quiet and nothing failed)."""
    for e in report.errors:
        say(f"error: {e}")
    for note in report.notes:  # what was replaced, completed or counted once: always said
        say(f"note: {note}")
    if quiet and not report.errors:
        return
    events_only = not report.files and report.events is not None and report.prices is None  # e.g. `pull <cloud>-events`
    if events_only:
        say(report.events.summary())
        return
    parts = [f"{report.count('ingested')} file(s) ingested ({report.rows:,} lines)"]
    if report.count("unchanged"):
        parts.append(f"{report.count('unchanged')} unchanged")
    if report.count("superseded"):
        parts.append(f"{report.count('superseded')} superseded by a newer delivery")
    if report.replaced_rows:
        parts.append(f"{report.replaced_rows:,} lines of older deliveries replaced")
    if report.overlapped_rows:
        parts.append(f"{report.overlapped_rows:,} lines delivered by two exports counted once")
    if report.failed:
        parts.append(f"{report.failed} file(s) failed")
    if report.prices is not None:
        parts.append(report.prices.summary())
    if report.events is not None:
        parts.append(report.events.summary())
    say(", ".join(parts))


def print_run(run: EngineRun) -> None:
    """Which engine run a result comes from: reused, or what came back and what it read (a note: not with -q)."""
    if run.reused:
        note(f"using {run.engine} run {run.run_id} (same source, period, basis, config and rules)")
        return
    read = f"; it processed {run.bytes_processed:,} bytes" if run.bytes_processed is not None else ""
    note(f"{run.engine} run {run.run_id} over {run.source}: {run.rows:,} aggregate rows came back{read}")


def table_width() -> int:
    """The width the report table must fit: COLUMNS when set (a pipe too), else the terminal's, else 220."""
    cols = os.environ.get("COLUMNS", "")
    return int(cols) if cols.isdigit() and int(cols) > 0 else _console("out").width


def print_report(report: Report | Sequence[Report], by: str = "job", top: int | None = 15,
                 warn: bool = True) -> None:
    """Warnings on stderr, the row table (billing_audit.report_table: rows that matter, every amount in
    full) and the totals on stdout.  Several reports: one per period, with a period column."""
    from billing_audit.report_table import render

    reports = [report] if not isinstance(report, Sequence) else list(report)
    if warn:
        for rep in reports:
            for w in rep.warnings:
                say(f"warning: {w}")
    width = table_width()
    for part in render(reports, by, top, width):
        _console("out").print(part, width=width)
    for rep in reports:
        print_reconciliation(rep.fee_reconciliation)


def print_reconciliation(rec: dict[str, Any] | None, full: bool = False) -> None:
    """The fee reconciliation: a line per currency on stderr (beside the report's tables, which stay as they are);
    ``full`` (``search --fees-without-events``): its tables on stdout, the fees to dispute and the interruptions
    without a fee."""
    if not rec or not (full or rec["providers_reconciled"]):  # no events held: the JSON says what is not reconciled
        return
    for n in rec["not_reconciled"]:
        say(f"fee reconciliation: {n['fee_lines']} {n['provider']} fee line(s) not reconciled: {n['reason']}")
    if not rec["providers_reconciled"]:
        return
    for t in rec["totals"]:
        say(f"fee reconciliation {rec['period']} {t['currency']}: {t['fee_lines']} restart-fee line(s), "
            f"{t['billed_cost']} billed; {t['fee_lines_disputed']} without a matching interruption, "
            f"{t['disputable_amount']} disputable")
    if rec["interruptions_without_fee"]:
        say(f"fee reconciliation: {len(rec['interruptions_without_fee'])} interruption(s) without a fee")
    if not full:
        if rec["fees_without_events"]:
            say("fee reconciliation: `billing-audit search --fees-without-events` lists the fees to dispute")
        return
    cols = ["line_id", "provider", "resource_id", "charge_period_start", "restarts_billed", "interruptions_observed",
            "disputable_amount", "currency"]
    import polars as pl

    if rec["fees_without_events"]:
        df = pl.DataFrame([{c: str(f[c]) for c in cols} for f in rec["fees_without_events"]])
        _console("out").print(frame_table(df, "fees without a matching interruption (to dispute)"))
    if rec["interruptions_without_fee"]:
        df = pl.DataFrame([{"provider": i["provider"], "resource_id": i["resource_id"], "time": i["time"],
                            "kinds": ",".join(i["kinds"]), "resource_in_bills": str(i["resource_in_bills"]).lower()}
                           for i in rec["interruptions_without_fee"]])
        _console("out").print(frame_table(df, "interruptions without a fee"))


class Bars:
    """Progress bars on stderr, one rich display at a time: ingest (files and rows), a download (bytes) or a
    query result (rows).  Switching kind, or saying a line, closes the current bar first (bars are transient)."""

    def __init__(self, label: str = "") -> None:
        self.label = label
        self._bar: Progress | None = None
        self._kind = ""
        self._task: Any = None
        self._rows = 0

    def __enter__(self) -> Bars:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
        self._bar, self._kind, self._task = None, "", None

    def say(self, text: str) -> None:
        self.stop()
        say(text)

    def _open(self, kind: str) -> Progress:
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TransferSpeedColumn,
        )

        if self._bar is not None and self._kind == kind:
            return self._bar
        self.stop()
        columns: list[Any]
        if kind == "ingest":
            # file names, labels and details are data: the columns read no markup
            columns = [TextColumn("ingest", style="bold", markup=False), BarColumn(),
                       TextColumn("{task.fields[rows]:,} rows · {task.fields[file]}", markup=False), TimeElapsedColumn()]
        elif kind == "bytes":
            columns = [TextColumn("{task.description}", style="bold", markup=False), BarColumn(), DownloadColumn(),
                       TransferSpeedColumn(), TextColumn("{task.fields[detail]}", markup=False)]
        else:
            columns = [TextColumn("{task.description}", style="bold", markup=False), BarColumn(),
                       TextColumn("{task.completed:,.0f}{task.fields[of]} rows", markup=False), TimeElapsedColumn()]
        self._bar = Progress(*columns, console=_console("err"), transient=True)
        self._bar.start()
        self._kind = kind
        return self._bar

    # the ingest's progress(file, rows)
    def ingest(self, file: str, rows: int) -> None:
        if self._kind != "ingest":
            bar = self._open("ingest")
            self._rows = 0
            self._task = bar.add_task("ingest", total=None, rows=0, file="")
        assert self._bar is not None
        self._rows += rows
        self._bar.update(self._task, advance=1, rows=self._rows, file=_clean(file)[-60:])

    # a pull's fetch progress (billing_audit.pulling.FetchProgress)
    def start(self, label: str, total: int | None, unit: str = "bytes") -> None:
        bar = self._open("bytes" if unit == "bytes" else "rows")
        self._task = bar.add_task(_clean(label), total=total or None, detail="", of=f"/{total:,}" if total else "")

    def advance(self, n: int) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, advance=n)

    def detail(self, text: str) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, detail=_clean(text)[-60:])
