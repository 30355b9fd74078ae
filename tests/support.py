"""Helpers for tests: independent source totals, golden dumps and fixture cases."""

from __future__ import annotations

import csv
import gzip
import io
import json
import zipfile
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
GOLDEN = ROOT / "tests" / "golden"


@dataclass(frozen=True)
class Case:
    """One fixture: where it is, the format each file must be detected as, and how to total its cost.

    ``cost`` names the source column(s) whose sum is the file's billed cost (matched
    case-insensitively; for CSV the header as written).  ``credits`` names a GCP-style
    array-of-structs column whose ``amount``s are added.
    """

    name: str
    path: str  # relative to fixtures/
    format: str
    cost: tuple[str, ...]
    credits: str | None = None

    @property
    def abspath(self) -> Path:
        return FIXTURES / self.path


def _dec(v: Any) -> Decimal:
    if v is None or v == "":
        return Decimal(0)
    if isinstance(v, float):
        return Decimal(repr(v))
    return Decimal(str(v).strip())


def _csv_rows(path: Path) -> list[dict[str, str]]:
    if path.name.endswith(".zip"):
        with zipfile.ZipFile(path) as zf:
            name = zf.namelist()[0]
            text = zf.read(name).decode("utf-8-sig")
    elif path.name.endswith(".gz"):
        text = gzip.decompress(path.read_bytes()).decode("utf-8-sig")
    else:
        text = path.read_bytes().decode("utf-8-sig")
    return list(csv.DictReader(io.StringIO(text)))


def _json_rows(path: Path) -> list[dict[str, Any]]:
    raw = gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()
    text = raw.decode("utf-8").strip()
    if text.startswith("["):
        return list(json.loads(text))
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def source_rows(path: Path) -> list[dict[str, Any]]:
    name = path.name.lower()
    if name.endswith(".parquet"):
        return pq.read_table(path).to_pylist()
    if name.endswith((".json", ".jsonl", ".ndjson", ".json.gz", ".jsonl.gz")):
        return _json_rows(path)
    return _csv_rows(path)


def source_total(path: Path, case: Case) -> Decimal:
    """The file's cost total, read without billing-audit (pyarrow / csv / json)."""
    total = Decimal(0)
    for row in source_rows(path):
        lower = {k.lower(): v for k, v in row.items()}
        for c in case.cost:
            total += _dec(lower.get(c.lower()))
        if case.credits:
            for cr in lower.get(case.credits.lower()) or []:
                total += _dec(cr["amount"])
    return total


def _plain(v: Any) -> Any:
    if isinstance(v, Decimal):
        return str(v)
    if isinstance(v, datetime):
        return v.isoformat()
    if isinstance(v, dict):
        return {k: v[k] for k in sorted(v)}
    if isinstance(v, list) and v and isinstance(v[0], tuple):
        return {k: val for k, val in sorted(v)}
    return v


def dump_line_items(con: Any) -> str:
    """line_items as JSON lines, in source order, paths relative to the repository."""
    cur = con.execute("SELECT * FROM line_items ORDER BY x_SourceFile, x_SourceRow")
    names = [d[0] for d in cur.description]
    prefix = str(ROOT) + "/"
    out = []
    for row in cur.fetchall():
        rec = {}
        for n, v in zip(names, row, strict=True):
            if n == "x_IngestId" or v is None:
                continue
            if n == "x_SourceFile":
                v = v.replace(prefix, "")
            rec[n] = _plain(v)
        out.append(json.dumps(rec, sort_keys=False, ensure_ascii=False))
    return "\n".join(out) + "\n"


# What a warehouse engine (BigQuery, Athena, Spark) cannot measure the way the local store does: it has the export's
# own on-demand prices only, not the price references nor the bill's on-demand lines (billing_audit/pricing.py).
SAVINGS_KEYS = ("on_demand_equivalent_cost", "gross_spot_savings", "net_spot_savings", "savings_eroded_pct",
                "recommendation", "reasons", "spot_unpriced_cost", "spot_cost_priced", "priced_spot_lines",
                "savings_coverage_pct")


def without_savings(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Report rows (jobs, teams or totals) without the spot-savings measures and what depends on them."""
    return [{k: v for k, v in r.items() if k not in SAVINGS_KEYS} for r in rows]


def report_body(doc: dict[str, Any]) -> dict[str, Any]:
    """A report JSON document without what may differ between two computations of the same figures: when it
    was generated, and which engine computed it (``filters.engine``); every row and value kept."""
    body = {k: v for k, v in doc.items() if k != "generated_at"}
    body["filters"] = {k: v for k, v in doc["filters"].items() if k != "engine"}
    return body



def writable_lines(con: Any) -> str:
    """The store's table of lines with every canonical column, for a test that writes lines by hand (the store
    holds only the columns some ingested export gave, behind the view ``line_items``).  Returns the table's name:
    write ``INSERT INTO <it> BY NAME SELECT ... FROM line_items``."""
    from billing_audit.store import lines_table

    return lines_table(con)
