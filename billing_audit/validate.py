"""Check export files before loading them: what each is, what it holds, and what looks wrong.

Nothing is stored: every file is read into a scratch in-memory DuckDB, through the same reader and mapping
as ``ingest``, and described: the format detected (or the closest one and what it lacks), rows, cost per
currency, billing periods, the charge-date range, and findings.  A finding has a stable id, a severity and a
count of the lines it concerns:

- ``error``: the file cannot be ingested as it is (unreadable, unknown format, a bad value; the message
  names the file, row and column as ``ingest`` would);
- ``warning``: it ingests, but a figure built on it needs a look (zero or missing list prices, an unknown
  currency, tags that do not parse, charges outside their billing period) or, for FOCUS files, the file does
  not conform to the specification (ids in the style of the FinOps Foundation's validator, from the format's
  own ``checks()``).

>>> from billing_audit.validate import validate
>>> [f.status for f in validate(["fixtures/focus"])]          # doctest: +SKIP
['ok', 'ok', 'ok']
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb

from billing_audit.ddl import LINE_ITEMS
from billing_audit.deliveries import walk
from billing_audit.errors import BillingAuditError, InputError, UnknownFormatError
from billing_audit.formats import Check
from billing_audit.jsonout import money
from billing_audit.reader import (
    MappedFile,
    detect,
    diagnose,
    display_name,
    file_kind,
    install_macros,
    probe_columns,
    readable,
)

# ISO 4217 active codes (and the few funds codes exports use): a currency outside them is a finding.
CURRENCIES = frozenset((
    "AED", "AFN", "ALL", "AMD", "ANG", "AOA", "ARS", "AUD", "AWG", "AZN", "BAM", "BBD", "BDT", "BGN", "BHD", "BIF",
    "BMD", "BND", "BOB", "BRL", "BSD", "BTN", "BWP", "BYN", "BZD", "CAD", "CDF", "CHF", "CLP", "CNY", "COP", "CRC",
    "CUC", "CUP", "CVE", "CZK", "DJF", "DKK", "DOP", "DZD", "EGP", "ERN", "ETB", "EUR", "FJD", "FKP", "GBP", "GEL",
    "GHS", "GIP", "GMD", "GNF", "GTQ", "GYD", "HKD", "HNL", "HTG", "HUF", "IDR", "ILS", "INR", "IQD", "IRR", "ISK",
    "JMD", "JOD", "JPY", "KES", "KGS", "KHR", "KMF", "KPW", "KRW", "KWD", "KYD", "KZT", "LAK", "LBP", "LKR", "LRD",
    "LSL", "LYD", "MAD", "MDL", "MGA", "MKD", "MMK", "MNT", "MOP", "MRU", "MUR", "MVR", "MWK", "MXN", "MYR", "MZN",
    "NAD", "NGN", "NIO", "NOK", "NPR", "NZD", "OMR", "PAB", "PEN", "PGK", "PHP", "PKR", "PLN", "PYG", "QAR", "RON",
    "RSD", "RUB", "RWF", "SAR", "SBD", "SCR", "SDG", "SEK", "SGD", "SHP", "SLE", "SLL", "SOS", "SRD", "SSP", "STN",
    "SVC", "SYP", "SZL", "THB", "TJS", "TMT", "TND", "TOP", "TRY", "TTD", "TWD", "TZS", "UAH", "UGX", "USD", "UYU",
    "UZS", "VES", "VND", "VUV", "WST", "XAF", "XCD", "XCG", "XOF", "XPF", "YER", "ZAR", "ZMW", "ZWG", "ZWL"
))

# Checks every format gets, over the canonical lines of the file (table ``v``).
GENERAL_CHECKS: tuple[Check, ...] = (
    Check("ListCost-W-001", "warning", "lines that cost money but carry no usable list/on-demand price (0 or empty: "
          "a missing price, not a price; savings on them are unmeasured)",
          where="ListCost IS NULL AND coalesce(BilledCost, 0) <> 0 AND x_ListCostSource LIKE 'missing%'"),
    Check("BillingCurrency-W-001", "warning", "lines whose currency is not an ISO 4217 code",
          where="BillingCurrency IS NOT NULL AND NOT list_contains($currencies, upper(BillingCurrency))"),
    Check("Tags-W-001", "warning", "lines whose tag string does not parse (kept raw in x_TagsRaw, no tags read)",
          where="x_TagsRaw IS NOT NULL"),
    Check("ChargePeriod-W-001", "warning", "charges outside their billing period",
          where="ChargePeriodStart IS NOT NULL AND BillingPeriodStart IS NOT NULL AND (ChargePeriodStart < "
                "BillingPeriodStart OR (BillingPeriodEnd IS NOT NULL AND ChargePeriodStart >= BillingPeriodEnd))"),
)


@dataclass
class Finding:
    id: str
    severity: str  # error | warning
    message: str
    lines: int | None = None  # how many lines it concerns (None: the file as a whole)
    row: int | None = None  # the first row it concerns, when known
    column: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "severity": self.severity, "message": self.message, "lines": self.lines,
                "row": self.row, "column": self.column}


@dataclass
class FileValidation:
    file: str
    format: str | None = None
    format_title: str | None = None
    rows: int = 0
    cost: dict[str, Decimal] = field(default_factory=dict)  # billed cost per currency
    periods: list[str] = field(default_factory=list)
    charge_from: str | None = None
    charge_to: str | None = None
    findings: list[Finding] = field(default_factory=list)

    @property
    def status(self) -> str:
        severities = {f.severity for f in self.findings}
        return "errors" if "error" in severities else "warnings" if severities else "ok"

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file, "status": self.status, "format": self.format, "format_title": self.format_title,
            "rows": self.rows, "cost": {k: money(v) for k, v in sorted(self.cost.items())}, "periods": self.periods,
            "charge_dates": {"from": self.charge_from, "to": self.charge_to},
            "findings": [f.to_dict() for f in self.findings],
        }


def _connect() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET enable_progress_bar = false")
    con.execute("SET memory_limit = ?", [os.environ.get("BILLING_AUDIT_MEMORY_LIMIT", "600MB")])
    install_macros(con)
    con.execute(LINE_ITEMS)
    return con


def validate(paths: Sequence[str | os.PathLike[str]]) -> list[FileValidation]:
    """Describe every export file under ``paths`` (files or folders); manifests are read by ``ingest`` and not
    listed here.  Nothing is written anywhere."""
    with ExitStack() as unpack:  # tarballs are read like folders, from a temporary copy removed at the end
        data, _manifests, errors = walk([Path(p) for p in paths], unpack=unpack)
        out = [FileValidation(e.file, findings=[Finding("File-E-001", "error", e.reason)]) for e in errors]
        con = _connect()
        try:
            for f in data:
                out.extend(_validate_file(con, f))
        finally:
            con.close()
    return out


def _price_file(path: Path) -> FileValidation | None:
    """A price-reference file (``prices ingest`` reads it): its format, references and the months its prices
    take effect in; a reference it cannot read is its error."""
    from billing_audit import pricing

    found = pricing.sniff(path)
    if found is None:
        return None
    shown = display_name(path)
    res = FileValidation(shown, found[1].id, found[1].title)
    try:
        refs = list(found[1].read(path))
    except InputError as e:
        res.findings.append(Finding("File-E-002", "error", e.reason, row=e.row, column=e.column))
        return res
    res.rows = len(refs)
    res.periods = sorted({(r.effective_from or r.fetched_at).strftime("%Y-%m") for r in refs})
    return res


def _event_file(path: Path) -> FileValidation | None:
    """An interruption event file (``ingest`` reads it beside the exports): its format, events and the months they
    fall in; a record it cannot read is its error (named by record and key)."""
    from billing_audit import events

    found = events.sniff(path)
    if found is None:
        return None
    shown = display_name(path)
    fid, title = ("events-csv", "interruption events CSV") if isinstance(found, str) else (found.id, found.title)
    res = FileValidation(shown, fid, title)
    try:
        got, _n, _title = events.read_file(path, shown)
    except InputError as e:
        res.findings.append(Finding("File-E-002", "error", e.reason, row=e.row, column=e.column))
        return res
    res.rows = len(got)
    res.periods = sorted({e.time.strftime("%Y-%m") for e in got})
    return res


def _validate_file(con: duckdb.DuckDBPyConnection, path: Path) -> list[FileValidation]:
    results: list[FileValidation] = []
    price = _price_file(path) or _event_file(path)
    if price is not None:
        return [price]
    try:
        with readable(path) as parts:
            for local, display in parts:
                results.append(_validate_part(con, local, display, path))
    except InputError as e:
        results.append(_refused(e, display_name(path)))
    return results


def _refused(e: InputError, fallback: str) -> FileValidation:
    fid = "Format-E-001" if isinstance(e, UnknownFormatError) else "File-E-002"
    return FileValidation(e.file or fallback, findings=[Finding(fid, "error", e.reason, row=e.row, column=e.column)])


def _validate_part(con: duckdb.DuckDBPyConnection, local: Path, display: str, original: Path) -> FileValidation:
    kind = file_kind(local)
    try:
        cols = probe_columns(con, local, display, kind)
        fmt = detect(cols, kind, display)
    except InputError as e:
        return _refused(e, display)
    res = FileValidation(display, fmt.id, fmt.title)
    mf = MappedFile(local, display, kind, fmt, cols)
    con.execute("DELETE FROM line_items")
    try:
        sql = mf.mapped_sql(con, fp="validate", ingest_id=0)
        con.execute(f"INSERT INTO line_items {sql}")
    except InputError as e:
        res.findings.append(Finding("File-E-002", "error", e.reason, row=e.row, column=e.column))
        return res
    except duckdb.Error as e:
        err = diagnose(con, mf, e)
        res.findings.append(Finding("File-E-002", "error", err.reason, row=err.row, column=err.column))
        return res
    _describe(con, res)
    present = {c.lower() for c in cols}
    for check in (*GENERAL_CHECKS, *fmt.checks()):
        finding = _run_check(con, check, present)
        if finding is not None:
            res.findings.append(finding)
    if res.rows == 0:
        res.findings.append(Finding("File-E-003", "error", "file has a header but no data rows"))
    return res


def _describe(con: duckdb.DuckDBPyConnection, res: FileValidation) -> None:
    from billing_audit.store import PERIOD

    row = con.execute(
        f"SELECT count(*), list(DISTINCT strftime({PERIOD}, '%Y-%m') ORDER BY strftime({PERIOD}, '%Y-%m')) "
        "FILTER (WHERE BillingPeriodStart IS NOT NULL), min(ChargePeriodStart), max(ChargePeriodEnd) FROM line_items"
    ).fetchone()
    assert row is not None
    res.rows = int(row[0])
    res.periods = [p for p in (row[1] or []) if p]
    res.charge_from = row[2].isoformat(sep=" ") if row[2] is not None else None
    res.charge_to = row[3].isoformat(sep=" ") if row[3] is not None else None
    for cur, total in con.execute("SELECT coalesce(BillingCurrency, ''), sum(BilledCost) FROM line_items "
                                  "GROUP BY 1 ORDER BY 1").fetchall():
        res.cost[cur] = Decimal(total or 0)


def _run_check(con: duckdb.DuckDBPyConnection, check: Check, present: set[str]) -> Finding | None:
    if check.column is not None:  # a column the file must have
        if check.column.lower() in present:
            return None
        return Finding(check.id, check.severity, check.message, column=check.column)
    if check.where is None:
        return None
    params = {"currencies": sorted(CURRENCIES)} if "$currencies" in check.where else {}
    try:
        row = con.execute(f"SELECT count(*), min(x_SourceRow) FROM line_items WHERE {check.where}", params).fetchone()
    except duckdb.Error as e:  # a check that cannot run on this file is itself worth saying
        raise BillingAuditError(f"check {check.id} failed: {e}") from None
    n = int(row[0]) if row else 0
    if n == 0:
        return None
    return Finding(check.id, check.severity, check.message, lines=n, row=int(row[1]) if row and row[1] else None,
                   column=check.where_column)


def summary(results: Sequence[FileValidation]) -> dict[str, int]:
    return {"files": len(results), "errors": sum(1 for r in results if r.status == "errors"),
            "warnings": sum(1 for r in results if r.status == "warnings")}


def to_json(results: Sequence[FileValidation], filters: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON document (:mod:`billing_audit.jsonout`): schema_version, generated_at, filters, files, summary."""
    from billing_audit.jsonout import envelope

    return envelope("validate", filters, files=[r.to_dict() for r in results], summary=summary(results))
