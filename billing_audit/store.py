"""The DuckDB store: line_items, ingest_log and the bookkeeping that prevents double counting.

Replacement rule: the store keeps, for every slice (provider, billing account,
billing period), the lines of exactly one delivery: the newest one ingested.
A delivery is ingested in one transaction; a failure or a kill leaves the store
as it was before it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from billing_audit import schema
from billing_audit.deliveries import Delivery, group
from billing_audit.errors import BillingAuditError, InputError
from billing_audit.reader import (
    MappedFile,
    detect,
    diagnose,
    explain_duckdb_error,
    file_kind,
    install_macros,
    probe_columns,
    readable,
)

DEFAULT_DB = "billing-audit.duckdb"

# The billing month a line belongs to.  Periods start at local midnight for some
# providers (GCP FOCUS: 07:00 UTC); shifting by two weeks before truncating maps
# any time zone's period start to its own month.
PERIOD = "date_trunc('month', BillingPeriodStart + INTERVAL 14 DAY)"

BOOKKEEPING = [
    """CREATE TABLE IF NOT EXISTS deliveries (
        ingest_id BIGINT PRIMARY KEY,
        delivery_key VARCHAR NOT NULL,
        label VARCHAR,
        version TIMESTAMP NOT NULL,
        version_rank INTEGER NOT NULL,
        version_source VARCHAR,
        fingerprint VARCHAR NOT NULL,
        status VARCHAR NOT NULL,
        slice_keys STRUCT(p VARCHAR, a VARCHAR, s TIMESTAMP)[],
        ingested_at TIMESTAMP NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS slices (
        x_Provider VARCHAR NOT NULL,
        BillingAccountId VARCHAR,
        BillingPeriodStart TIMESTAMP,
        ingest_id BIGINT NOT NULL,
        rows BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS file_stats (
        path VARCHAR PRIMARY KEY,
        size BIGINT NOT NULL,
        mtime_ns BIGINT NOT NULL,
        fingerprint VARCHAR NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS ingest_log (
        ingest_id BIGINT NOT NULL,
        file VARCHAR NOT NULL,
        fingerprint VARCHAR NOT NULL,
        format VARCHAR NOT NULL,
        provider VARCHAR NOT NULL,
        delivery_key VARCHAR NOT NULL,
        periods VARCHAR,
        rows BIGINT NOT NULL,
        cost_total MAP(VARCHAR, DECIMAL(38,12)),
        status VARCHAR NOT NULL,
        ingested_at TIMESTAMP NOT NULL)""",
]


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

    @property
    def failed(self) -> int:
        return len(self.errors)

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files if f.status == "ingested")

    def count(self, status: str) -> int:
        return sum(1 for f in self.files if f.status == status)


Progress = Callable[[str, int], None]
WIDE_COLUMNS = 1000  # files with more columns are read on one thread (memory)
WIDE_KIB_PER_COLUMN = 160  # what such a file needs per column, measured (10,000 tag columns: ~1.5 GB)
DEFAULT_MEMORY_MB = 600


def configure(con: duckdb.DuckDBPyConnection) -> None:
    """Session settings: UTC, no progress bar, bounded memory (spilling to disk beyond it), all cores.

    600 MB keeps a 10M-line month under 0.8 GiB of RSS at every stage for a few percent of speed (bench/)."""
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET enable_progress_bar = false")
    con.execute("SET memory_limit = ?", [os.environ.get("BILLING_AUDIT_MEMORY_LIMIT", f"{DEFAULT_MEMORY_MB}MB")])
    con.execute("SET threads = ?", [int(os.environ.get("BILLING_AUDIT_THREADS", os.cpu_count() or 2))])


def checkpoint_params(rules: Sequence[Any], checkpoint: dict[str, Any] | None) -> dict[str, Any]:
    """The config's checkpoint keys as parameters of the rules that take them (explicit --param wins)."""
    merged: dict[str, Any] = {}
    declared = {p for r in rules for p in r.meta.params}
    for key in ("tag_keys", "tag_values"):
        name = f"checkpoint_{key}"
        if checkpoint and name in declared and checkpoint.get(key) is not None:
            merged[name] = [str(v).lower() for v in checkpoint[key]]
    return merged


def resolve_db(path: str | os.PathLike[str] | None) -> Path:
    return Path(path or os.environ.get("BILLING_AUDIT_DB") or DEFAULT_DB)


class Store:
    """A billing-audit store on disk.

    >>> import billing_audit
    >>> store = billing_audit.open("billing-audit.duckdb")   # doctest: +SKIP
    >>> store.ingest(["fixtures/aws"]).rows                   # doctest: +SKIP
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *, read_only: bool = False):
        self.path = resolve_db(path)
        self.read_only = read_only
        self._connect()
        if not read_only:
            self._create()

    def _connect(self) -> None:
        """Open the store; while another process holds it, wait up to $BILLING_AUDIT_LOCK_TIMEOUT s (10)."""
        deadline = time.monotonic() + float(os.environ.get("BILLING_AUDIT_LOCK_TIMEOUT", "10"))
        while True:
            try:
                self.con = duckdb.connect(str(self.path), read_only=self.read_only)
                break
            except duckdb.Error as e:
                msg = str(e)
                if "Conflicting lock" in msg and time.monotonic() < deadline:
                    time.sleep(0.2)
                    continue
                if "Conflicting lock" in msg:
                    m = re.search(r"PID (\d+)", msg)
                    who = f" (process {m.group(1)})" if m else ""
                    raise BillingAuditError(
                        f"{self.path}: the store is in use by another billing-audit process{who}; "
                        "try again when it has finished (or raise BILLING_AUDIT_LOCK_TIMEOUT)"
                    ) from None
                raise BillingAuditError(f"{self.path}: cannot open store: {explain_duckdb_error(e)}") from None
        configure(self.con)
        install_macros(self.con)

    # -- schema -----------------------------------------------------------------
    def _create(self) -> None:
        self.con.execute(schema.create_line_items_sql())
        for ddl in BOOKKEEPING:
            self.con.execute(ddl)

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- queries ----------------------------------------------------------------
    def sql(self, query: str, params: Sequence[Any] | dict[str, Any] | None = None) -> pl.DataFrame:
        """Run a query and return a polars DataFrame (DECIMAL stays Decimal)."""
        # execute() (not sql()): it supersedes any unfinished result and sees this connection's temp tables
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "extra copy": results here are small
            table = self.con.execute(query, params or []).to_arrow_table()
        out = pl.from_arrow(table)
        assert isinstance(out, pl.DataFrame)
        return out

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
    def ingest(self, paths: Iterable[str | os.PathLike[str]], progress: Progress | None = None) -> IngestReport:
        """Ingest export files or folders; returns what happened to each file.

        Bad files are reported in ``report.errors`` and leave the store untouched;
        the other files still ingest.
        """
        deliveries, errors = group([Path(p) for p in paths])
        report = IngestReport(errors=list(errors))
        for e in errors:
            report.files.append(FileResult(e.file, "failed", message=e.reason))
        for d in deliveries:
            try:
                self._ingest_delivery(d, report, progress)
            except InputError as e:
                report.errors.append(e)
                for f in d.files:
                    status = "failed" if e.file.split("!")[0] == str(f) else "not ingested"
                    msg = e.reason if status == "failed" else f"its delivery failed on {e.file}"
                    report.files.append(FileResult(str(f), status, message=msg))
        return report

    def _known_fingerprint(self, path: Path) -> str | None:
        """The fingerprint of a file already seen at this path with the same size and modification time."""
        st = path.stat()
        row = self.con.execute(
            "SELECT fingerprint FROM file_stats WHERE path = ? AND size = ? AND mtime_ns = ?",
            [str(path.resolve()), st.st_size, st.st_mtime_ns],
        ).fetchone()
        return str(row[0]) if row else None

    def _remember_files(self, d: Delivery) -> None:
        for f, fp in d.fingerprints().items():
            st = f.stat()
            self.con.execute("INSERT OR REPLACE INTO file_stats VALUES (?, ?, ?, ?)",
                             [str(f.resolve()), st.st_size, st.st_mtime_ns, fp])

    def _next_ingest_id(self) -> int:
        row = self.con.execute("SELECT coalesce(max(ingest_id), 0) + 1 FROM deliveries").fetchone()
        return int(row[0]) if row else 1

    def _ingest_delivery(self, d: Delivery, report: IngestReport, progress: Progress | None) -> None:
        fps = d.fingerprints(self._known_fingerprint)
        combined = d.combined_fingerprint()
        skip = self._already_seen(d, combined)
        if skip is not None:
            self._remember_files(d)
            status, msg = skip
            for f in d.files:
                report.files.append(FileResult(str(f), status, message=msg))
                if progress:
                    progress(str(f), 0)
            return
        con = self.con
        ingest_id = self._next_ingest_id()
        now = datetime.now(UTC).replace(tzinfo=None)
        results: list[FileResult] = []
        con.execute("BEGIN TRANSACTION")
        try:
            for f in d.files:
                with readable(f) as parts:
                    for local, display in parts:
                        kind = file_kind(local)
                        cols = probe_columns(con, local, display, kind)
                        fmt = detect(cols, kind, display)
                        mf = MappedFile(local, display, kind, fmt, cols)
                        fp = _part_fp(fps[f], display, local == f)
                        sql = mf.mapped_sql(con, fp=fp, ingest_id=ingest_id)
                        # a very wide file (thousands of tag columns) holds ~32 KiB per column in each
                        # stage of the read, whatever its length: one thread, and (unless the limit was
                        # set explicitly) a memory limit that grows with the width, not the length
                        wide = len(cols) > WIDE_COLUMNS
                        saved = con.execute("SELECT current_setting('threads'), current_setting('memory_limit')"
                                            ).fetchone() if wide else None
                        try:
                            if wide:
                                con.execute("SET threads = 1")
                                if "BILLING_AUDIT_MEMORY_LIMIT" not in os.environ:
                                    need = max(DEFAULT_MEMORY_MB, len(cols) * WIDE_KIB_PER_COLUMN // 1024)
                                    con.execute(f"SET memory_limit = '{need}MB'")
                            n = con.execute(f"INSERT INTO line_items {sql}").fetchone()
                        except duckdb.Error as e:
                            con.execute("ROLLBACK")
                            con.execute("BEGIN TRANSACTION")  # keep the outer handler's rollback valid
                            if any(w in str(e) for w in ("No space left", "File too large")):  # disk full
                                raise BillingAuditError(f"{self.path}: writing the store failed ({e}); "
                                                        "nothing of this delivery was stored") from None
                            raise diagnose(con, mf, e) from None
                        finally:
                            if saved:
                                con.execute(f"SET threads = {int(saved[0])}")
                                con.execute("SET memory_limit = ?", [saved[1]])
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
            replaced = self._settle_slices(d, ingest_id, combined, now, results)
            self._remember_files(d)
            con.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(duckdb.Error):
                con.execute("ROLLBACK")
            raise
        report.replaced_rows += replaced
        report.files.extend(results)

    def _owner(self, prov: str, acct: str | None, period: datetime | None) -> tuple[Any, ...] | None:
        return self.con.execute(
            "SELECT s.ingest_id, d.version_rank, d.version, d.delivery_key FROM slices s "
            "JOIN deliveries d USING (ingest_id) WHERE s.x_Provider = ? "
            "AND s.BillingAccountId IS NOT DISTINCT FROM ? AND s.BillingPeriodStart IS NOT DISTINCT FROM ?",
            [prov, acct, period],
        ).fetchone()

    @staticmethod
    def _is_newer(owner: tuple[Any, ...] | None, d: Delivery) -> bool:
        """True when the slice's owner beats delivery d (a re-delivery to the same place never loses)."""
        if owner is None or owner[3] == d.key:
            return False
        return bool((owner[1], owner[2]) > (d.rank, d.version.replace(tzinfo=None)))

    def _already_seen(self, d: Delivery, combined: str) -> tuple[str, str] | None:
        """Skip without reading: unchanged, or seen before and every slice it had now belongs to a newer delivery."""
        row = self.con.execute(
            "SELECT ingest_id, slice_keys, EXISTS (SELECT 1 FROM slices s WHERE s.ingest_id = d.ingest_id) "
            "FROM deliveries d WHERE fingerprint = ? ORDER BY ingest_id DESC LIMIT 1",
            [combined],
        ).fetchone()
        if row is None:
            return None
        if row[2]:
            return ("unchanged", "already in the store")
        keys = row[1] or []
        if keys and all(self._is_newer(self._owner(k["p"], k["a"], k["s"]), d) for k in keys):
            return ("superseded", "seen before; a newer delivery of its period is in the store")
        return None

    def _settle_slices(
        self, d: Delivery, ingest_id: int, combined: str, now: datetime, results: list[FileResult]
    ) -> int:
        """Keep the newest delivery per slice; drop what the other one had there."""
        con = self.con
        if d.version_source == "file time":  # the rows may say when they were exported (GCP export_time)
            row = con.execute("SELECT max(x_ExportTime) FROM line_items WHERE x_IngestId = ?", [ingest_id]).fetchone()
            if row and row[0] is not None:
                d.version, d.version_source = row[0].replace(tzinfo=UTC), "export_time"
        new_slices = con.execute(
            f"SELECT x_Provider, BillingAccountId, {PERIOD}, count(*) FROM line_items "
            "WHERE x_IngestId = ? GROUP BY ALL",
            [ingest_id],
        ).fetchall()
        con.execute(
            "INSERT INTO deliveries VALUES (?, ?, ?, ?, ?, ?, ?, 'current', ?, ?)",
            [
                ingest_id, d.key, d.label, d.version.replace(tzinfo=None), d.rank, d.version_source, combined,
                [{"p": p, "a": a, "s": s} for p, a, s, _ in new_slices], now,
            ],
        )
        replaced = 0
        superseded_rows = 0
        kept = 0
        for prov, acct, period, rows in new_slices:
            owner = self._owner(prov, acct, period)
            where = (
                f"x_Provider = ? AND BillingAccountId IS NOT DISTINCT FROM ? AND {PERIOD} IS NOT DISTINCT FROM ?"
            )
            if self._is_newer(owner, d):
                con.execute(f"DELETE FROM line_items WHERE x_IngestId = ? AND {where}", [ingest_id, prov, acct, period])
                superseded_rows += rows
                continue
            if owner:
                n = con.execute(
                    f"DELETE FROM line_items WHERE x_IngestId <> ? AND {where}", [ingest_id, prov, acct, period]
                ).fetchone()
                replaced += int(n[0]) if n else 0
                con.execute(f"DELETE FROM slices WHERE {where}", [prov, acct, period])
            con.execute("INSERT INTO slices VALUES (?, ?, ?, ?, ?)", [prov, acct, period, ingest_id, rows])
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
        if kept or replaced:  # the report's line groups no longer describe the lines
            from billing_audit.rollup import drop_groups

            drop_groups(con)
        if replaced and self._has_table("rule_hits"):  # hits of lines that are gone go with them
            con.execute("DELETE FROM rule_hits WHERE x_LineItemId NOT IN (SELECT x_LineItemId FROM line_items)")
        gone = "NOT EXISTS (SELECT 1 FROM slices s WHERE s.ingest_id = {t}.ingest_id)"
        con.execute(f"UPDATE deliveries SET status = 'replaced' WHERE status = 'current' AND {gone.format(t='deliveries')}")
        con.execute(f"UPDATE ingest_log SET status = 'replaced' WHERE status = 'ingested' AND {gone.format(t='ingest_log')}")
        return replaced

    # -- rules ------------------------------------------------------------------
    def tag(
        self,
        rules: Sequence[Any] | None = None,
        params: dict[str, Any] | None = None,
        checkpoint: dict[str, Any] | None = None,
    ) -> Any:
        """Run rules (default: the built-in pack) and record their hits in ``rule_hits``.

        The rules run on a sandboxed connection (no file or network access); the
        store's own connection is closed meanwhile and reopened afterwards.
        """
        from billing_audit.rules import load_rules
        from billing_audit.tagging import run_rules, sandbox

        chosen = list(rules) if rules is not None else load_rules().rules
        params = {**checkpoint_params(chosen, checkpoint), **(params or {})}
        self.con.close()
        try:
            box = sandbox(str(self.path))
            try:
                return run_rules(box, chosen, params, checkpoint)
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
        row = self.con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = ? AND table_schema = 'main'", [name]
        ).fetchone()
        return bool(row and row[0])

    # -- checks -----------------------------------------------------------------
    def totals_by_file(self) -> dict[str, Decimal]:
        rows = self.con.execute("SELECT x_SourceFile, sum(BilledCost) FROM line_items GROUP BY 1").fetchall()
        return {r[0]: r[1] for r in rows}


def _part_fp(file_fp: str, display: str, whole: bool) -> str:
    """A zip member's fingerprint: the archive's and the member's name, never the path (ids stay stable)."""
    if whole:
        return file_fp
    member = display.rsplit("!", 1)[-1]
    return hashlib.sha256((file_fp + "!" + member).encode()).hexdigest()


def open(path: str | os.PathLike[str] | None = None, *, read_only: bool = False) -> Store:  # noqa: A001
    """Open (creating if needed) a store; ``path`` defaults to $BILLING_AUDIT_DB or ./billing-audit.duckdb."""
    return Store(path, read_only=read_only)
