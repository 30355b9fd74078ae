"""The DuckDB store: line_items, ingest_log and the bookkeeping that prevents double counting.

Replacement rule: the store keeps, for every slice (provider, export, billing
account, billing period), the lines of exactly one delivery of that export: the
newest one ingested (:mod:`billing_audit.deliveries` says which is newest).  A
delivery never replaces another export's lines; where two exports deliver the
same lines for an account and period (a subscription export inside a billing
account export, a legacy CUR beside a CUR 2.0 export), the overlap is measured
and one export keeps the period, by the rule in :class:`OverlapPolicy`, and the
ingest says so.  A delivery is ingested in one transaction; a failure or a kill
leaves the store as it was before it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from billing_audit import schema
from billing_audit.ddl import BOOKKEEPING, EVENT_TABLES, LINES_TABLE, LINES_TABLE_DDL, PRICE_TABLES, lines_view, lines_view_key
from billing_audit.deliveries import Delivery, OverlapPolicy, group, order_key
from billing_audit.errors import BillingAuditError, InputError
from billing_audit.reader import (
    TAG_MEMO,
    WIDE_COLUMNS,
    MappedFile,
    detect,
    diagnose,
    display_name,
    explain_duckdb_error,
    file_kind,
    install_macros,
    probe_columns,
    readable,
)
from billing_audit.sql import ident, lit

if TYPE_CHECKING:
    import polars as pl
    import pyarrow as pa

DEFAULT_DB = "billing-audit.duckdb"

# The billing month a line belongs to.  Periods start at local midnight for some
# providers (GCP FOCUS: 07:00 UTC); shifting by two weeks before truncating maps
# any time zone's period start to its own month.
PERIOD = "date_trunc('month', BillingPeriodStart + INTERVAL 14 DAY)"

# Two export ids name the same export when they agree before any "@scope" and their scopes agree or one has
# none (a manifest names the export's scope; a folder layout only its name).  NULL: a store from before exports.
def same_export(column: str, param: str) -> str:
    return (f"({column} IS NULL OR (split_part({column}, '@', 1) = split_part({param}, '@', 1) AND "
            f"(strpos({column}, '@') = 0 OR strpos({param}, '@') = 0 OR {column} = {param})))")


# What makes two lines of two exports the same line (the overlap of two exports).
LINE_CONTENT = ("hash(x_Provider, BillingAccountId, SubAccountId, ResourceId, ChargePeriodStart, ChargePeriodEnd, "
                "ChargeCategory, coalesce(x_UsageType, ChargeDescription), ConsumedQuantity, BilledCost, BillingCurrency)")


@dataclass
class FileResult:
    file: str
    status: str  # ingested | unchanged | superseded | failed
    format: str | None = None
    rows: int = 0
    message: str = ""


@dataclass
class IngestReport:
    files: list[FileResult] = field(default_factory=list)
    errors: list[InputError] = field(default_factory=list)
    replaced_rows: int = 0
    notes: list[str] = field(default_factory=list)  # what was replaced, set aside or completed, in words
    overlapped_rows: int = 0  # lines set aside because another export delivers the same lines
    prices: Any = None  # billing_audit.pricing.PriceLoad: the price files among the paths, loaded as references
    events: Any = None  # billing_audit.events.EventLoad: the interruption event files among the paths

    @property
    def failed(self) -> int:
        return len(self.errors)

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files if f.status == "ingested")

    def count(self, status: str) -> int:
        return sum(1 for f in self.files if f.status == status)


def frame(table: pa.Table) -> pl.DataFrame:
    """An Arrow table as a polars DataFrame (DECIMAL stays Decimal); polars is imported here, not at the top: an
    ingest and a JSON search need none (0.1 to 0.2 s of their start-up)."""
    import polars as pl

    out = pl.from_arrow(table)
    assert isinstance(out, pl.DataFrame)
    return out


Progress = Callable[[str, int], None]
# What DuckDB reserves per column of a wide file (its vectors at every stage of the read, most never touched:
# 10,000 tag columns reserve ~1.6 GB at a resident 0.4 GB), on top of the default for the buffers and rows.
WIDE_KIB_PER_COLUMN = 160
DEFAULT_MEMORY_MB = 600


def memory_limit() -> str:
    """The store's memory limit: $BILLING_AUDIT_MEMORY_LIMIT, else the default."""
    return os.environ.get("BILLING_AUDIT_MEMORY_LIMIT", f"{DEFAULT_MEMORY_MB}MB")


# A table or view of the store (or a temp table) named so: what information_schema.tables lists, read from the
# catalog functions (the first information_schema query of a connection took 14 ms, these 1 ms).
_RELATION = ("SELECT EXISTS (SELECT 1 FROM duckdb_tables() WHERE schema_name = 'main' AND table_name = $n) "
             "OR EXISTS (SELECT 1 FROM duckdb_views() WHERE NOT internal AND schema_name = 'main' AND view_name = $n)")


def has_relation(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    """Whether a table or view ``name`` is there (in the store's main schema, or a temp table)."""
    row = con.execute(_RELATION, {"n": name}).fetchone()
    return bool(row and row[0])


def configure(con: duckdb.DuckDBPyConnection, write: bool = False) -> None:
    """Session settings: UTC, no progress bar, bounded memory (spilling to disk beyond it), all cores; for a
    connection that writes, whether its checkpoints compact the tables (:func:`compaction`).

    600 MB keeps a 10M-line month under 0.8 GiB of RSS at every stage for a few percent of speed (bench/)."""
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET enable_progress_bar = false")
    con.execute("SET memory_limit = ?", [memory_limit()])
    con.execute("SET threads = ?", [int(os.environ.get("BILLING_AUDIT_THREADS", os.cpu_count() or 2))])
    if write:
        compaction(con)


# Deleted rows a store may hold before its next write compacts the tables it changes: a quarter of its rows.
DEAD_ROWS_SHARE = 0.25
VACUUM_TASKS = 100  # DuckDB's default max_vacuum_tasks


def dead_rows(con: duckdb.DuckDBPyConnection) -> tuple[int, int]:
    """(rows deleted but still stored, rows stored) over the store's tables: ``estimated_size`` counts every row
    a table's row groups hold, deleted ones included, and ``count(*)`` the live ones (both from metadata)."""
    tables = con.execute("SELECT table_name, estimated_size FROM duckdb_tables() WHERE database_name = "
                         "current_database() AND schema_name = 'main' AND NOT temporary").fetchall()
    stored = sum(int(n) for _, n in tables)
    live = 0
    for name, n in tables:
        if n:
            row = con.execute(f'SELECT count(*) FROM main."{name}"').fetchone()
            live += int(row[0]) if row else 0
    return max(0, stored - live), stored


def lines_columns(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The columns the store's table of lines holds (:data:`billing_audit.ddl.LINES_TABLE`)."""
    return [r[0] for r in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE database_name = current_database() AND schema_name = 'main' "
        "AND table_name = ? ORDER BY column_index", [LINES_TABLE]).fetchall()]


def lines_table(con: duckdb.DuckDBPyConnection, names: Iterable[str] = schema.COLUMN_NAMES) -> str:
    """The store's table of lines, holding the canonical columns ``names`` (default: every one): those it lacks are
    added, NULL for the lines it holds, and the view ``line_items`` over it made again, in the caller's transaction
    if any.  Returns the table's name: what writes lines (an ingest, a rule case, a test) inserts into."""
    have = set(lines_columns(con))
    new = [c for c in names if c not in have]
    for name in new:
        con.execute(f"ALTER TABLE {LINES_TABLE} ADD COLUMN {ident(name)} {schema.BY_NAME[name].type}")
    if new:
        for stmt in lines_view(have | set(new)):
            con.execute(stmt)
    return LINES_TABLE


def compaction(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether this connection's checkpoints compact the tables it changes (DuckDB's vacuum: row groups holding
    deleted rows, and the short row groups appends leave, merged and written again), decided as it opens.

    Compacting costs about as much as writing those row groups again, and most of a refresh's checkpoint was
    that: the tag of a re-delivered month in a 12 x 1M-line store closed in 0.90 s compacting and 0.06 s not
    (its deletes and appends touch the last row groups of rule_hits, spot_od and the line groups).  Left alone,
    deleted rows stay stored but invisible, so a write compacts only once those the store holds reach
    DEAD_ROWS_SHARE of its rows (the file is at most about that much bigger).  A row group all of whose rows are
    deleted is dropped by any checkpoint: re-delivering the current month of that store seven times left its
    deleted rows at 2.5% (the first re-delivery's, from row groups the month shared) and the file at 1.7 GB."""
    dead, stored = dead_rows(con)
    on = stored > 0 and dead >= DEAD_ROWS_SHARE * stored
    con.execute(f"SET max_vacuum_tasks = {VACUUM_TASKS if on else 0}")
    return on


def checkpoint_params(rules: Sequence[Any], checkpoint: dict[str, Any] | None) -> dict[str, Any]:
    """The config's checkpoint keys as parameters of the rules that take them (explicit --param wins)."""
    merged: dict[str, Any] = {}
    declared = {p for r in rules for p in r.meta.params}
    for key in ("tag_keys", "tag_values"):
        name = f"checkpoint_{key}"
        if checkpoint and name in declared and checkpoint.get(key) is not None:
            merged[name] = [str(v).lower() for v in checkpoint[key]]
    return merged


def lock_wait(wait: float | None) -> float:
    """How long to wait for a store another process holds: ``wait``, else $BILLING_AUDIT_LOCK_TIMEOUT, else 10 s."""
    if wait is not None:
        return max(0.0, float(wait))
    raw = os.environ.get("BILLING_AUDIT_LOCK_TIMEOUT", "10")
    try:
        return max(0.0, float(raw))
    except ValueError:
        raise BillingAuditError(f"BILLING_AUDIT_LOCK_TIMEOUT={raw!r}: expected a number of seconds") from None


def holder(message: str) -> str:
    """Who holds the store, from DuckDB's "Conflicting lock is held in <program> (PID <n>)"."""
    m = re.search(r"held in (.+?) \(PID (\d+)\)", message)
    if m:
        return f"process {m.group(2)} ({Path(m.group(1)).name})"
    m = re.search(r"PID (\d+)", message)
    return f"process {m.group(1)}" if m else "another process"


def resolve_db(path: str | os.PathLike[str] | None) -> Path:
    return Path(path or os.environ.get("BILLING_AUDIT_DB") or DEFAULT_DB)


class Store:
    """A billing-audit store on disk.

    >>> import billing_audit
    >>> store = billing_audit.open("billing-audit.duckdb")   # doctest: +SKIP
    >>> store.ingest(["fixtures/aws"]).rows                   # doctest: +SKIP
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *, read_only: bool = False,
                 wait: float | None = None, on_wait: Callable[[str], None] | None = None):
        self.path = resolve_db(path)
        self.read_only = read_only
        self.wait = lock_wait(wait)
        self.on_wait = on_wait
        if read_only and not self.path.exists():
            raise BillingAuditError(f"no store at {self.path}: run `billing-audit ingest` first")
        self._connect()
        if not read_only:
            self._create()

    def _connect(self) -> None:
        """Open the store.  Readers (read_only) open side by side; while a writer holds the store, or a writer
        finds readers, wait up to ``wait`` seconds (--wait, $BILLING_AUDIT_LOCK_TIMEOUT, 10), saying so once
        through ``on_wait``, then fail naming the process that holds it."""
        deadline = time.monotonic() + self.wait
        told = False
        while True:
            try:
                self.con = duckdb.connect(str(self.path), read_only=self.read_only)
                break
            except duckdb.Error as e:
                msg = str(e)
                if "Conflicting lock" not in msg:
                    raise BillingAuditError(f"{self.path}: cannot open store: {explain_duckdb_error(e)}") from None
                who = holder(msg)
                if time.monotonic() < deadline:
                    if not told and self.on_wait is not None:
                        self.on_wait(f"waiting for {who} to close the store {self.path} (up to {self.wait:g} s)")
                        told = True
                    time.sleep(0.2)
                    continue
                raise BillingAuditError(
                    f"{self.path}: the store is in use by {who}; try again when it has finished "
                    "(or wait longer: --wait SECONDS, or $BILLING_AUDIT_LOCK_TIMEOUT)"
                ) from None
        configure(self.con, write=not self.read_only)
        if not self.read_only:  # the ingest's macros (formats' SQL); a reader runs none of it (0.01 s an open)
            install_macros(self.con)

    # -- schema -----------------------------------------------------------------
    def _create(self) -> None:
        self._lines_layout()
        for ddl in (*BOOKKEEPING, *PRICE_TABLES, *EVENT_TABLES):
            self.con.execute(ddl)

    def _lines_layout(self) -> None:
        """The table of lines and the view ``line_items`` over it (:data:`billing_audit.ddl.LINES_TABLE`), made in
        one transaction when missing or when the view no longer reads what the table holds (a store written by an
        older version: its table ``line_items`` of every canonical column becomes the table of lines)."""
        con = self.con
        kinds = dict(con.execute(
            "SELECT table_name, table_type FROM information_schema.tables WHERE table_schema = 'main' "
            "AND table_catalog = current_database() AND table_name IN ('line_items', ?)", [LINES_TABLE]).fetchall())
        if kinds.get("line_items") == "VIEW" and LINES_TABLE in kinds:
            row = con.execute("SELECT comment FROM duckdb_views() WHERE database_name = current_database() "
                              "AND schema_name = 'main' AND view_name = 'line_items'").fetchone()
            if row and row[0] == lines_view_key(set(lines_columns(con))):
                return
        con.execute("BEGIN TRANSACTION")
        try:
            if kinds.get("line_items") == "BASE TABLE":
                con.execute(f"ALTER TABLE line_items RENAME TO {LINES_TABLE}")
            con.execute(LINES_TABLE_DDL)
            for stmt in lines_view(set(lines_columns(con))):
                con.execute(stmt)
            con.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(duckdb.Error):
                con.execute("ROLLBACK")
            raise

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- queries ----------------------------------------------------------------
    def sql(self, query: str, params: Sequence[Any] | dict[str, Any] | None = None) -> pl.DataFrame:
        """Run a query and return a polars DataFrame (DECIMAL stays Decimal)."""
        return frame(self.arrow(query, params))

    def arrow(self, query: str, params: Sequence[Any] | dict[str, Any] | None = None) -> pa.Table:
        """Run a query and return its rows as an Arrow table (what a caller reads without polars)."""
        # execute() (not sql()): it supersedes any unfinished result and sees this connection's temp tables
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "extra copy": results here are small
            return self.con.execute(query, params or []).to_arrow_table()

    def summary(self) -> pl.DataFrame:
        """Lines and cost per provider, billing period and currency."""
        return self.sql(
            """SELECT x_Provider AS provider, strftime(""" + PERIOD + """, '%Y-%m') AS period,
                      BillingCurrency AS currency, count(*) AS lines,
                      sum(BilledCost) AS billed_cost, sum(EffectiveCost) AS effective_cost,
                      sum(ListCost) AS list_cost
               FROM line_items GROUP BY ALL ORDER BY provider, period, currency"""
        )

    # -- ingest -----------------------------------------------------------------
    def ingest(self, paths: Iterable[str | os.PathLike[str]], progress: Progress | None = None,
               overlap: OverlapPolicy | None = None, *, follow_outside: bool = False) -> IngestReport:
        """Ingest export files or folders; returns what happened to each file.

        Bad files are reported in ``report.errors`` and leave the store untouched;
        the other files still ingest.  ``overlap`` says which export keeps a period two exports
        both deliver (default :class:`OverlapPolicy`); ``report.notes`` says what was replaced or set aside.
        Only files under ``paths`` are read (symlinks and manifest keys pointing elsewhere are errors) unless
        ``follow_outside``; tarballs are unpacked into a temporary folder, removed before this returns.
        An unexpected error in one delivery is that delivery's error, naming the file it was reading.
        """
        from billing_audit import events, pricing

        with contextlib.ExitStack() as unpack:
            aside: list[Path] = []
            deliveries, errors = group([Path(p) for p in paths], unpack=unpack, follow_outside=follow_outside,
                                       set_aside=lambda f: pricing.is_price_file(f) or events.is_event_file(f),
                                       aside=aside)
            event_files = [f for f in aside if not pricing.is_price_file(f)]
            price_files = [f for f in aside if f not in event_files]
            report = IngestReport(errors=list(errors))
            self._overlap = overlap or OverlapPolicy()
            for e in errors:
                report.files.append(FileResult(e.file, "failed", message=e.reason))
            for d in deliveries:
                self._complete(d, report)
                self._reading = display_name(d.files[0]) if d.files else d.label
                try:
                    try:
                        self._ingest_delivery(d, report, progress)
                    except _LineEndings:  # a quirk past the sniffed first MB: again, from normalised copies
                        self._ingest_delivery(d, report, progress, rewrite=True)
                except InputError as e:
                    self._failed(d, e, report)
                except BillingAuditError:  # the store itself cannot be written (disk full): stop
                    raise
                except Exception as e:  # noqa: BLE001 - a bug or an input nobody foresaw: this delivery's error
                    why = explain_duckdb_error(e) if isinstance(e, duckdb.Error) else f"{type(e).__name__}: {e}"
                    self._failed(d, InputError(self._reading, f"unexpected error, nothing of this delivery was "
                                                              f"stored: {why}"), report)
            if price_files:  # price references, recognised from their content: one transaction per file
                report.prices = pricing.load_paths(self.con, price_files)
                report.errors.extend(report.prices.errors)
                report.notes.extend(report.prices.notes())
                if report.prices.added or report.prices.replaced:
                    report.prices.repriced = pricing.reprice(self.con)
            if event_files:  # interruption events, recognised from their content: one transaction per file
                if self.read_only:
                    raise BillingAuditError(f"{self.path}: opened read-only, cannot store interruption events")
                report.events = events.load_paths(self.con, event_files)
                report.errors.extend(report.events.errors)
                report.notes.extend(report.events.notes())
        return report


    def _failed(self, d: Delivery, e: InputError, report: IngestReport) -> None:
        report.errors.append(e)
        for f in d.files:
            shown = display_name(f)
            status = "failed" if e.file == shown or e.file.startswith(shown + "!") else "not ingested"
            msg = e.reason if status == "failed" else f"its delivery failed on {e.file}"
            report.files.append(FileResult(shown, status, message=msg))

    def _known_fingerprint(self, path: Path) -> str | None:
        """The fingerprint of a file already seen at this path, unchanged since: same size, modification time
        and inode change time (a rewrite that restores the size and mtime still changes the change time)."""
        st = path.stat()
        row = self.con.execute(
            "SELECT fingerprint FROM file_stats WHERE path = ? AND size = ? AND mtime_ns = ? AND ctime_ns = ?",
            [str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ctime_ns],
        ).fetchone()
        return str(row[0]) if row else None

    def _remember_files(self, d: Delivery) -> None:
        for f, fp in d.fingerprints().items():
            st = f.stat()
            self.con.execute("INSERT OR REPLACE INTO file_stats (path, size, mtime_ns, fingerprint, ctime_ns) "
                             "VALUES (?, ?, ?, ?, ?)", [str(f.resolve()), st.st_size, st.st_mtime_ns, fp, st.st_ctime_ns])

    def _complete(self, d: Delivery, report: IngestReport) -> None:
        """A folder delivery named in part (one fixed file of a folder ingested before) is completed with the
        files its current ingest had, so it stays the same set of files; files that are gone are said."""
        if not d.key.startswith("folder:") or "!" in d.key:  # a tarball's folder is whole in its archive
            return
        rows = self.con.execute(
            "SELECT DISTINCT split_part(l.file, '!', 1) FROM ingest_log l JOIN deliveries d USING (ingest_id) "
            "WHERE d.delivery_key = ? AND d.status = 'current'", [d.key]).fetchall()
        have = {f.resolve() for f in d.files}
        gone = []
        for (name,) in rows:
            p = Path(name)
            if p.resolve() in have:
                continue
            if p.is_file():
                d.files.append(p)
                d.completed_with.append(p)
                have.add(p.resolve())
            else:
                gone.append(name)
        d.files.sort()
        if d.completed_with:
            report.notes.append(f"{d.label}: ingested with the {len(d.completed_with)} other file(s) of its earlier "
                                f"ingest ({', '.join(p.name for p in d.completed_with[:3])}"
                                f"{', ...' if len(d.completed_with) > 3 else ''}): a folder is one delivery")
        if gone:
            report.notes.append(f"{d.label}: {len(gone)} file(s) of its earlier ingest are no longer there and their "
                                f"lines go with it: {', '.join(gone[:3])}{', ...' if len(gone) > 3 else ''}")

    def _next_ingest_id(self) -> int:
        row = self.con.execute("SELECT coalesce(max(ingest_id), 0) + 1 FROM deliveries").fetchone()
        return int(row[0]) if row else 1

    def _ingest_delivery(self, d: Delivery, report: IngestReport, progress: Progress | None, rewrite: bool = False) -> None:
        fps = d.fingerprints(self._known_fingerprint)
        combined = d.combined_fingerprint()
        skip = self._already_seen(d, combined)
        if skip is not None:
            self._remember_files(d)
            status, msg = skip
            for f in d.files:
                report.files.append(FileResult(display_name(f), status, message=msg))
                if progress:
                    progress(display_name(f), 0)
            return
        con = self.con
        ingest_id = self._next_ingest_id()
        now = datetime.now(UTC).replace(tzinfo=None)
        results: list[FileResult] = []
        con.execute("BEGIN TRANSACTION")
        try:
            for f in d.files:
                self._reading = display_name(f)
                with readable(f, rewrite=rewrite) as parts:
                    for local, display in parts:
                        self._reading = display
                        kind = file_kind(local)
                        cols = probe_columns(con, local, display, kind)
                        fmt = detect(cols, kind, display)
                        if not d.export:  # a delivery no manifest describes: the export its layout says, else its own
                            d.export = fmt.export_of(f) or d.key
                        mf = MappedFile(local, display, kind, fmt, cols)
                        fp = _part_fp(fps[f], display, display == display_name(f))
                        wide = len(cols) > WIDE_COLUMNS
                        sql = mf.mapped_sql(con, fp=fp, ingest_id=ingest_id, memo=not wide)
                        try:
                            if wide:
                                with self._staged(sql, len(cols), display) as staged:
                                    n = con.execute(self._insert_lines(mf.written, staged)).fetchone()
                            else:  # each distinct tag input's map built once (reader.MappedFile.tag_memo)
                                sql = mf.tag_memo(con) or sql
                                n = con.execute(self._insert_lines(mf.written, f"({sql})")).fetchone()
                                con.execute(f"DROP TABLE IF EXISTS {TAG_MEMO}")
                        except duckdb.Error as e:
                            con.execute("ROLLBACK")
                            con.execute("BEGIN TRANSACTION")  # keep the outer handler's rollback valid
                            if any(w in str(e) for w in ("No space left", "File too large")):  # disk full
                                raise BillingAuditError(f"{self.path}: writing the store failed ({e}); "
                                                        "nothing of this delivery was stored") from None
                            if kind == "csv" and not rewrite and "state machine reached an invalid state" in str(e):
                                raise _LineEndings from None
                            raise diagnose(con, mf, e) from None
                        rows = int(n[0]) if n else 0
                        if rows == 0:
                            raise InputError(display, "file has a header but no data rows")
                        # the log row is built in SQL, never bound from Python: any currency text (even '')
                        # stays a map key and cannot turn into a struct field name
                        con.execute(
                            "INSERT INTO ingest_log WITH this AS (SELECT x_Provider, BillingPeriodStart, "
                            "BillingCurrency, BilledCost FROM line_items WHERE x_IngestId = $1 AND x_SourceFile = $2) "
                            "SELECT $1, $2, $3, $4, coalesce((SELECT string_agg(DISTINCT x_Provider, ',') FROM this), $5), "
                            f"$6, (SELECT string_agg(DISTINCT strftime({PERIOD}, '%Y-%m'), ',' ORDER BY "
                            f"strftime({PERIOD}, '%Y-%m')) FROM this), $7, "
                            "(SELECT map_from_entries(list({'key': coalesce(c, ''), 'value': t} ORDER BY c)) FROM "
                            "(SELECT BillingCurrency AS c, CAST(sum(BilledCost) AS DECIMAL(38,12)) AS t FROM this "
                            "GROUP BY 1)), 'ingested', $8",
                            [ingest_id, display, fp, fmt.id, fmt.provider, d.key, rows, now],
                        )
                        results.append(FileResult(display, "ingested", fmt.id, rows))
                        if progress:
                            progress(display, rows)
            replaced = self._settle_slices(d, ingest_id, combined, now, results, report)
            self._remember_files(d)
            con.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(duckdb.Error):
                con.execute("ROLLBACK")
            raise
        report.replaced_rows += replaced
        report.files.extend(results)

    def _insert_lines(self, written: list[str], rows: str) -> str:
        """The INSERT of a file's mapped ``rows`` (a relation of every canonical column) into the store's table of
        lines: the columns the file's mapping gives values (``written``, added to the table first: :func:`lines_table`)."""
        table = lines_table(self.con, written)
        cols = ", ".join(ident(c) for c in written)
        return f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {rows} AS ba_rows"

    @contextlib.contextmanager
    def _staged(self, sql: str, ncols: int, display: str) -> Iterator[str]:
        """A wide file's mapped rows, staged in a Parquet file in the temp folder: yields the scan that reads them.

        A very wide file (thousands of tag columns) reserves ~32 KiB per column in each stage of the read,
        whatever its length: it is read on one thread and (unless the limit was set explicitly) with the default
        limit plus what the width reserves.  Inserted straight into the store, its rows would also stay in
        memory until the delivery commits (DuckDB keeps a transaction's appends in memory until a row group of
        122,880 rows fills: ~0.7 GB of wide rows' tags), on top of that reservation.  Staged first, the read
        holds only its buffers (the Parquet writer keeps one row group of 2,048 rows), and the insert from the
        stage runs with the ordinary settings, after the read's memory is freed, inside the delivery's one
        transaction as before."""
        con = self.con
        folder = Path(tempfile.mkdtemp(prefix="ba-wide-"))
        stage = folder / "rows.parquet"
        try:
            threads = con.execute("SELECT current_setting('threads')").fetchone()
            assert threads is not None
            raise_limit = "BILLING_AUDIT_MEMORY_LIMIT" not in os.environ
            try:
                con.execute("SET threads = 1")
                if raise_limit:
                    need = DEFAULT_MEMORY_MB + ncols * WIDE_KIB_PER_COLUMN // 1024
                    con.execute(f"SET memory_limit = '{need}MB'")
                try:
                    con.execute(f"COPY ({sql}) TO {lit(str(stage))} (FORMAT parquet, ROW_GROUP_SIZE 2048)")
                except duckdb.Error as e:
                    if any(w in str(e) for w in ("No space left", "File too large")):
                        raise BillingAuditError(f"{display}: cannot stage its rows in {folder}/ ({e}); "
                                                "nothing of this delivery was stored") from None
                    raise
            finally:  # through a cursor: a failed COPY has aborted con's transaction until the caller rolls back
                with con.cursor() as side:
                    side.execute(f"SET GLOBAL threads = {int(threads[0])}")
                    if raise_limit:  # the configured value itself: current_setting's text is rounded to 0.1 MiB
                        side.execute("SET GLOBAL memory_limit = ?", [memory_limit()])
            yield f"read_parquet({lit(str(stage))})"
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _owner(self, prov: str, export: str, acct: str | None, period: datetime | None) -> tuple[Any, ...] | None:
        """The delivery of ``export`` that holds the slice (a store from before exports were told apart: any)."""
        return self.con.execute(
            "SELECT s.ingest_id, d.version_rank, d.version, d.delivery_key, d.file_time FROM slices s "
            f"JOIN deliveries d USING (ingest_id) WHERE s.x_Provider = $p AND {same_export('s.export', '$e')} "
            "AND s.BillingAccountId IS NOT DISTINCT FROM $a AND s.BillingPeriodStart IS NOT DISTINCT FROM $s",
            {"p": prov, "e": export, "a": acct, "s": period},
        ).fetchone()

    @staticmethod
    def _is_newer(owner: tuple[Any, ...] | None, d: Delivery) -> bool:
        """True when the slice's owner beats delivery d (a re-delivery to the same place never loses)."""
        if owner is None or owner[3] == d.key:
            return False
        return order_key(owner[1], owner[2], owner[4]) > d.order

    def _already_seen(self, d: Delivery, combined: str) -> tuple[str, str] | None:
        """Skip without reading: unchanged, or seen before and every slice it had now belongs to a newer delivery."""
        row = self.con.execute(
            "SELECT ingest_id, slice_keys, EXISTS (SELECT 1 FROM slices s WHERE s.ingest_id = d.ingest_id), export "
            "FROM deliveries d WHERE fingerprint = ? ORDER BY ingest_id DESC LIMIT 1",
            [combined],
        ).fetchone()
        if row is None:
            return None
        if row[2]:
            return ("unchanged", "already in the store")
        keys = row[1] or []
        export = row[3] or d.export or d.key
        if keys and all(self._is_newer(self._owner(k["p"], export, k["a"], k["s"]), d) for k in keys):
            return ("superseded", "seen before; a newer delivery of its period is in the store")
        return None

    def _data_version(self, d: Delivery, ingest_id: int) -> None:
        """A delivery dated only by its files' times: what its rows say instead (GCP export_time; else the latest
        usage a month-to-date snapshot holds), the file time staying as the last tie-break."""
        if d.version_source != "file time":
            return
        row = self.con.execute("SELECT max(x_ExportTime), max(ChargePeriodEnd) FROM line_items WHERE x_IngestId = ?",
                               [ingest_id]).fetchone()
        if row and row[0] is not None:
            d.version, d.version_source = row[0].replace(tzinfo=UTC), "export_time"
        elif row and row[1] is not None:
            d.version, d.version_source = row[1].replace(tzinfo=UTC), "latest usage"

    def _settle_slices(
        self, d: Delivery, ingest_id: int, combined: str, now: datetime, results: list[FileResult],
        report: IngestReport | None = None,
    ) -> int:
        """Keep the newest delivery of each export per slice; drop what its older delivery had there; settle
        overlaps with other exports."""
        con = self.con
        self._removed = False  # lines of another export set aside by an overlap
        self._data_version(d, ingest_id)
        new_slices = con.execute(
            f"SELECT x_Provider, BillingAccountId, {PERIOD}, count(*) FROM line_items "
            "WHERE x_IngestId = ? GROUP BY ALL",
            [ingest_id],
        ).fetchall()
        con.execute(
            "INSERT INTO deliveries (ingest_id, delivery_key, label, version, version_rank, version_source, fingerprint, "
            "status, slice_keys, ingested_at, export, file_time) VALUES (?, ?, ?, ?, ?, ?, ?, 'current', ?, ?, ?, ?)",
            [
                ingest_id, d.key, d.label, d.version.replace(tzinfo=None), d.rank, d.version_source, combined,
                [{"p": p, "a": a, "s": s} for p, a, s, _ in new_slices], now, d.export,
                d.file_time.replace(tzinfo=None) if d.file_time else None,
            ],
        )
        replaced = 0
        superseded_rows = 0
        kept = 0
        where = f"x_Provider = ? AND BillingAccountId IS NOT DISTINCT FROM ? AND {PERIOD} IS NOT DISTINCT FROM ?"
        tagged = self._has_table("rule_hits")
        if tagged:
            con.execute("CREATE OR REPLACE TEMP TABLE ba_gone (x_LineItemId VARCHAR NOT NULL)")
        for prov, acct, period, rows in new_slices:
            owner = self._owner(prov, d.export, acct, period)
            if self._is_newer(owner, d):
                con.execute(f"DELETE FROM {LINES_TABLE} WHERE x_IngestId = ? AND {where}", [ingest_id, prov, acct, period])
                superseded_rows += rows
                continue
            if owner:
                if tagged:  # the ids of the lines this re-delivery removes, for their hits and equivalents
                    con.execute(f"INSERT INTO ba_gone SELECT x_LineItemId FROM line_items WHERE x_IngestId = ? "
                                f"AND {where}", [owner[0], prov, acct, period])
                n = con.execute(
                    f"DELETE FROM {LINES_TABLE} WHERE x_IngestId = ? AND {where}", [owner[0], prov, acct, period]
                ).fetchone()
                replaced += int(n[0]) if n else 0
                con.execute("DELETE FROM slices WHERE ingest_id = ? AND x_Provider = ? AND BillingAccountId IS NOT "
                            "DISTINCT FROM ? AND BillingPeriodStart IS NOT DISTINCT FROM ?", [owner[0], prov, acct, period])
            left = self._settle_overlap(d, ingest_id, prov, acct, period, rows, report)
            if left == 0:
                superseded_rows += rows
                continue
            rows = left
            con.execute("INSERT INTO slices (x_Provider, BillingAccountId, BillingPeriodStart, ingest_id, rows, export) "
                        "VALUES (?, ?, ?, ?, ?, ?)", [prov, acct, period, ingest_id, rows, d.export])
            kept += rows
        if superseded_rows:
            status = "superseded" if kept == 0 else "partly superseded"
            con.execute("UPDATE ingest_log SET status = ? WHERE ingest_id = ?", [status, ingest_id])
            for r in results:
                r.status = "superseded" if kept == 0 else "ingested"
                r.message = "a newer delivery of the same period is already in the store"
                if kept == 0:
                    r.rows = 0
        if kept == 0:
            con.execute("UPDATE deliveries SET status = 'superseded' WHERE ingest_id = ?", [ingest_id])
        # the report's line groups and the search index stay: they no longer match the lines' signature, so nothing
        # reads them (rollup.current_groups) until the next tag run, which rebuilds only the changed slices' part
        if tagged:  # the hits and on-demand equivalents of lines that are gone go with them
            from billing_audit import incremental

            incremental.drop_gone(con, everywhere=self._removed)
            con.execute("DROP TABLE ba_gone")
        gone = "NOT EXISTS (SELECT 1 FROM slices s WHERE s.ingest_id = {t}.ingest_id)"
        con.execute(f"UPDATE deliveries SET status = 'replaced' WHERE status = 'current' AND {gone.format(t='deliveries')}")
        con.execute(f"UPDATE ingest_log SET status = 'replaced' WHERE status = 'ingested' AND {gone.format(t='ingest_log')}")
        return replaced

    def _settle_overlap(self, d: Delivery, ingest_id: int, prov: str, acct: str | None, period: datetime,
                        rows: int, report: IngestReport | None) -> int:
        """Where another export holds the same (provider, account, period) and delivers some of the same lines,
        count those lines once: the export the policy ranks lower gives up its copies of them (nothing else), and
        the ingest says so.  Returns how many of this delivery's lines stay in the slice."""
        con = self.con
        others = con.execute(
            "SELECT s.ingest_id, s.rows, s.export, d.label, d.version_rank, d.version, d.file_time FROM slices s "
            "JOIN deliveries d USING (ingest_id) WHERE s.x_Provider = $p AND s.BillingAccountId IS NOT DISTINCT FROM $a "
            f"AND s.BillingPeriodStart IS NOT DISTINCT FROM $s AND s.ingest_id <> $i AND NOT {same_export('s.export', '$e')} "
            "ORDER BY s.ingest_id", {"p": prov, "a": acct, "s": period, "i": ingest_id, "e": d.export}).fetchall()
        policy = getattr(self, "_overlap", OverlapPolicy())
        where = f"x_Provider = $p AND BillingAccountId IS NOT DISTINCT FROM $a AND {PERIOD} IS NOT DISTINCT FROM $s"
        month = f"{period:%Y-%m}" if period else "?"
        for oid, orows, oexport, olabel, orank, oversion, ofile_time in others:
            keys = {"p": prov, "a": acct, "s": period}
            shared = con.execute(
                f"WITH a AS (SELECT {LINE_CONTENT} AS h, count(*) AS n, any_value(BilledCost) AS c, "
                f"any_value(BillingCurrency) AS cur FROM line_items WHERE x_IngestId = $new AND {where} GROUP BY 1), "
                f"b AS (SELECT {LINE_CONTENT} AS h, count(*) AS n FROM line_items WHERE x_IngestId = $old AND {where} "
                "GROUP BY 1) SELECT coalesce(sum(least(a.n, b.n)), 0), string_agg(DISTINCT a.cur, ','), "
                "sum(least(a.n, b.n) * a.c) FROM a JOIN b USING (h)", {**keys, "new": ingest_id, "old": oid}).fetchone()
            n_shared = int(shared[0]) if shared else 0
            if n_shared == 0:
                continue
            cost = f"{shared[2]:,.2f} {shared[1]}" if shared and shared[2] is not None else "no cost"
            what = (f"exports {d.export!r} and {oexport!r} deliver {n_shared:,} of the same lines ({cost}) for "
                    f"{prov} account {acct} {month}")
            if policy.keep == "both":
                if report is not None:
                    report.notes.append(f"{what}: both counted ([exports] keep = \"both\")")
                continue
            mine = (policy.rank(d.export), -rows)  # preferred first, then more lines, then the newer delivery
            theirs = (policy.rank(str(oexport)), -int(orows))
            new_wins = mine < theirs or (mine == theirs and d.order >= order_key(orank, oversion, ofile_time))
            why = "listed first in [exports] prefer" if mine[0] != theirs[0] else (
                "more lines" if rows != orows else "newer delivery")
            winner, loser = (ingest_id, oid) if new_wins else (oid, ingest_id)
            gone = con.execute(
                f"DELETE FROM {LINES_TABLE} WHERE x_IngestId = $l AND x_LineItemId IN (WITH w AS (SELECT {LINE_CONTENT} AS h, count(*) AS n "
                f"FROM line_items WHERE x_IngestId = $w AND {where} GROUP BY 1), l AS (SELECT x_LineItemId, "
                f"{LINE_CONTENT} AS h, row_number() OVER (PARTITION BY {LINE_CONTENT} ORDER BY x_SourceFile, "
                f"x_SourceRow) AS rn FROM line_items WHERE x_IngestId = $l AND {where}) "
                "SELECT l.x_LineItemId FROM l JOIN w USING (h) WHERE l.rn <= w.n)",
                {**keys, "w": winner, "l": loser}).fetchone()
            n_gone = int(gone[0]) if gone else 0
            self._removed = True
            left = (int(orows) if new_wins else rows) - n_gone
            kept_name, lost_label = (d.export, olabel) if new_wins else (oexport, d.label)
            if new_wins:
                con.execute("UPDATE slices SET rows = ? WHERE ingest_id = ? AND x_Provider = ? AND BillingAccountId "
                            "IS NOT DISTINCT FROM ? AND BillingPeriodStart IS NOT DISTINCT FROM ?",
                            [left, oid, prov, acct, period])
                if left == 0:
                    con.execute("DELETE FROM slices WHERE ingest_id = ? AND rows = 0", [oid])
                    con.execute("UPDATE deliveries SET status = 'overlapped' WHERE ingest_id = ? AND NOT EXISTS "
                                "(SELECT 1 FROM slices s WHERE s.ingest_id = ?)", [oid, oid])
            else:
                rows = left
            if report is not None:
                report.overlapped_rows += n_gone
                rest = (f"every line of {lost_label} for that period is in {kept_name!r}: it is set aside" if left == 0
                        else f"{lost_label} keeps its {left:,} other lines")
                report.notes.append(f"{what}: counted once, in {kept_name!r} ({why}); {rest} "
                                    f"(choose with [exports] prefer or keep in the config)")
        return rows

    def owners(self) -> pl.DataFrame:
        """Which export's delivery holds each provider, billing account and period, and how it was dated."""
        return self.sql(
            "SELECT s.x_Provider AS provider, s.BillingAccountId AS billing_account, "
            "strftime(s.BillingPeriodStart, '%Y-%m') AS period, "
            "split_part(coalesce(s.export, d.delivery_key), '@', 1) AS export, s.rows AS lines, "
            "d.version AS dated, d.version_source AS dated_by, d.label AS delivery, "
            "coalesce(s.export, d.delivery_key) AS export_id, d.ingested_at "
            "FROM slices s JOIN deliveries d USING (ingest_id) ORDER BY provider, billing_account, period, export")

    # -- rules ------------------------------------------------------------------
    def tag(
        self,
        rules: Sequence[Any] | None = None,
        params: dict[str, Any] | None = None,
        checkpoint: dict[str, Any] | None = None,
        *,
        force: bool = False,
    ) -> Any:
        """Run rules (default: the built-in pack) and record their hits in ``rule_hits``, in one transaction.

        Nothing changed since the last tag run (the same lines, rules, parameters, checkpoint config and price
        references: :func:`billing_audit.tagging.unchanged_run`): nothing is redone, and the result says so
        (``unchanged``, that run's ``run_id`` and hits); ``force`` re-tags all the same.

        Built-in rules run fused on a sandboxed connection (no file or network access); every other rule is
        untrusted and runs first, in its own child process with its memory, time and disk bounded, over a
        read-only view of the store (:func:`billing_audit.tagging.run_user_rule`).  A user rule that fails is
        in the result's ``failed`` and skipped; the other rules' hits are stored.  The store's own connection is
        closed meanwhile and reopened afterwards.
        """
        import tempfile

        from billing_audit.rollup import lines_signature
        from billing_audit.rules import load_rules
        from billing_audit.tagging import TagResult, run_rules, run_user_rule, sandbox, state_key, unchanged_run

        chosen = list(rules) if rules is not None else load_rules().rules
        params = {**checkpoint_params(chosen, checkpoint), **(params or {})}
        for name in params:
            if not any(name in r.meta.params for r in chosen):
                raise BillingAuditError(f"--param {name}: no selected rule has a parameter called {name!r}")
        key = state_key(chosen, params, checkpoint)
        done = None if force or self.read_only else unchanged_run(self.con, key)
        if done is not None:
            run_id, slices = done
            ids = [r.id for r in chosen]
            counts = dict(self.con.execute("SELECT rule_id, count(*) FROM rule_hits WHERE list_contains(?, rule_id) "
                                           "GROUP BY 1", [ids or [""]]).fetchall())
            return TagResult(run_id=run_id, rules=ids, hits_by_rule={i: int(counts.get(i, 0)) for i in ids},
                             unchanged=True, slices=slices)
        trusted = [r for r in chosen if r.builtin]
        untrusted = [r for r in chosen if not r.builtin]
        sig = lines_signature(self.con) if untrusted else None
        self.con.close()
        try:
            with tempfile.TemporaryDirectory(prefix="ba-rules-") as work:
                runs = [run_user_rule(str(self.path), r, params, checkpoint, Path(work)) for r in untrusted]
                box = sandbox(str(self.path))
                try:
                    return run_rules(box, trusted, params, checkpoint, runs, sig, key, force=force)
                finally:
                    box.close()
        finally:
            self._connect()

    def explain(self, line_item_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The line and every rule hit on it; raises with "did you mean" for unknown ids."""
        cur = self.con.execute("SELECT * FROM line_items WHERE x_LineItemId = ?", [line_item_id])
        names = [d[0] for d in cur.description]
        row = cur.fetchone()
        if row is None:
            near = self.con.execute(
                "SELECT x_LineItemId FROM line_items ORDER BY levenshtein(x_LineItemId, ?) LIMIT 3", [line_item_id]
            ).fetchall()
            hint = f"; did you mean {', '.join(r[0] for r in near)}?" if near else ""
            raise BillingAuditError(f"no line item {line_item_id!r} in {self.path}{hint}")
        hits: list[dict[str, Any]] = []
        if self._has_table("rule_hits"):
            cur = self.con.execute(
                "SELECT rule_id, category, reason, run_id FROM rule_hits WHERE x_LineItemId = ? ORDER BY rule_id",
                [line_item_id],
            )
            hits = [dict(zip(["rule_id", "category", "reason", "run_id"], r, strict=True)) for r in cur.fetchall()]
        return dict(zip(names, row, strict=True)), hits

    def _has_table(self, name: str) -> bool:
        return has_relation(self.con, name)

    # -- checks -----------------------------------------------------------------
    def totals_by_file(self) -> dict[str, Decimal]:
        rows = self.con.execute("SELECT x_SourceFile, sum(BilledCost) FROM line_items GROUP BY 1").fetchall()
        return {r[0]: r[1] for r in rows}


class _LineEndings(Exception):
    """DuckDB's CSV state machine failed: line endings the first-MB sniff did not see; retried normalised."""


def _part_fp(file_fp: str, display: str, whole: bool) -> str:
    """A zip member's fingerprint: the archive's and the member's name, never the path (ids stay stable)."""
    if whole:
        return file_fp
    member = display.rsplit("!", 1)[-1]
    return hashlib.sha256((file_fp + "!" + member).encode()).hexdigest()


def open(path: str | os.PathLike[str] | None = None, *, read_only: bool = False,  # noqa: A001
         wait: float | None = None, on_wait: Callable[[str], None] | None = None) -> Store:
    """Open a store; ``path`` defaults to $BILLING_AUDIT_DB or ./billing-audit.duckdb.

    ``read_only=True`` (what reading needs): the store must exist (else BillingAuditError "no store at ..."),
    nothing is created, and any number of readers open it side by side.  Otherwise the store is created if
    needed and opened for writing, which waits for readers and writers to close it: up to ``wait`` seconds
    ($BILLING_AUDIT_LOCK_TIMEOUT, default 10), calling ``on_wait(message)`` once when it has to wait."""
    return Store(path, read_only=read_only, wait=wait, on_wait=on_wait)
