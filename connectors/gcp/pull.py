"""Pull one invoice month of a GCP billing export straight from BigQuery into the cache, then ingest it.

What a pull does, per invoice month:

1. ``tables.get`` on the export table: its schema says which kind it is (standard
   ``gcp_billing_export_v1_*``, detailed ``gcp_billing_export_resource_v1_*`` or the FOCUS table/view
   ``gcp_billing_export_focus_*``) and how it is partitioned.
2. A cheap freshness query (``COUNT(*)`` and ``MAX(export_time)`` of the month, two small columns of a
   few partitions).  When they equal what the last pull recorded in the cache state
   (:class:`~connectors.pull_common.PullCache`) and the cached file is still there, nothing is downloaded.
3. Otherwise one parameterised query selects the month's rows as the export has them (nested
   ``service``, ``sku``, ``project.labels``, ``labels``, ``credits`` arrays, ``invoice``, ...): credits
   and labels stay arrays - no UNNEST, so no row is repeated - and are summed / normalised by
   :mod:`connectors.gcp.billing_export` at ingest.  The result streams page by page as Arrow record batches
   (REST ``jobs.getQueryResults``; the BigQuery Storage API is not used) into a parquet file written
   batch by batch through ``<file>.part``, renamed when complete.
4. The month's folder is ingested with ``Store.ingest``: the file is a full snapshot of the month,
   so it replaces the month in the store.

The query filters ``invoice.month = @invoice_month`` (a query parameter, never pasted into the SQL) and,
so BigQuery bills a small scan, the partition time.  The export tables are partitioned by ingestion
day (``_PARTITIONTIME``), which follows ``export_time``: a month's rows are written from its first
hours until well after it ends (late usage, then the month-end tax, adjustment and rounding lines
a few days into the next month).  The window is therefore::

    month start - 3 days  <=  _PARTITIONTIME  <  next month start + 15 days (--late-days)

plus ``_PARTITIONTIME IS NULL`` (rows still in the streaming buffer).  A table partitioned on a
column uses that column instead; a column other than ``export_time`` (usage time) starts the
window 35 days earlier, since late usage of the previous month can be invoiced in this one.  Views
have no partitions: the month filter alone applies (``--dry-run`` shows what that scans).

The FOCUS table has no ``invoice`` record: its month is the UTC month of ``BillingPeriodStart``
plus one day (the period starts at midnight in the billing account's time zone, within a day of
UTC midnight), compared with the same ``@invoice_month`` parameter.  Its ``Tags`` array of
``{key, value}`` records becomes the JSON object text the generic FOCUS format reads.

The table name is the one thing that cannot be a query parameter: it is validated against
``project.dataset.table`` identifier characters before any request and then quoted in backticks.

The Google SDK is imported inside the functions: importing this module stays cheap.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from billing_audit import pulling
from connectors.focus.formats import FOCUS_SOURCE
from connectors.gcp.billing_export import RESOURCE_NESTED_COLUMNS, SCALAR_COLUMNS
from connectors.pull_common import PullCache, PullError, RemoteObject

if TYPE_CHECKING:
    from google.cloud import bigquery

    from billing_audit.store import IngestReport, Store

LEAD_DAYS = 3  # partitions written before the month starts (time zones, clock skew)
LATE_DAYS = 15  # partitions written after the month ends that still hold its rows
USAGE_LEAD_DAYS = 35  # when partitioned by usage time: late usage of the previous month
RETRY_DEADLINE = 120.0  # seconds of retrying throttling / 5xx / dropped connections per call
RETRY_INITIAL = 1.0

STANDARD_COLUMNS: tuple[str, ...] = (*SCALAR_COLUMNS, *RESOURCE_NESTED_COLUMNS)

PERMISSIONS = (
    "roles/bigquery.dataViewer on the export dataset (or table) - bigquery.tables.get, bigquery.tables.getData - "
    "and roles/bigquery.jobUser on the project that runs the query (--project) - bigquery.jobs.create"
)

NO_CREDENTIALS = (
    "no Google credentials found (application default credentials): run `gcloud auth application-default login`, "
    "set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file, or run where a service account is attached"
)

_PROJECT = r"(?:[a-z][a-z0-9.-]{0,61}[a-z0-9]:)?[a-z][a-z0-9-]{0,61}[a-z0-9]"
_NAME = r"[A-Za-z0-9_]{1,1024}"
_TABLE_RE = re.compile(rf"^(?P<project>{_PROJECT})\.(?P<dataset>{_NAME})\.(?P<table>[A-Za-z0-9_-]{{1,1024}})$")
_SHORT_RE = re.compile(rf"^(?P<dataset>{_NAME})\.(?P<table>[A-Za-z0-9_-]{{1,1024}})$")
_MONTH_RE = re.compile(r"^(\d{4})-?(0[1-9]|1[0-2])$")


# -- names and months ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TableRef:
    project: str
    dataset: str
    table: str

    @property
    def full(self) -> str:
        return f"{self.project}.{self.dataset}.{self.table}"

    @property
    def quoted(self) -> str:
        """For the SQL text: safe because every part was validated (no backtick can appear)."""
        return f"`{self.full}`"

    @property
    def folder(self) -> str:
        return f"{self.project.replace(':', '_')}/{self.dataset}/{self.table}"


def parse_table(value: str, project: str | None = None) -> TableRef:
    """``project.dataset.table`` (or ``dataset.table`` with --project), identifier characters only."""
    text = value or ""
    m = _TABLE_RE.fullmatch(text)
    if m:
        return TableRef(m["project"], m["dataset"], m["table"])
    m = _SHORT_RE.fullmatch(text)
    if m and project and re.fullmatch(_PROJECT, project):
        return TableRef(project, m["dataset"], m["table"])
    raise PullError(
        f"--table {value!r}: expected PROJECT.DATASET.TABLE with letters, digits, '_' and '-' only "
        "(e.g. my-project.billing.gcp_billing_export_v1_01ABCD_23EF45_678901)"
    )


@dataclass(frozen=True)
class Month:
    invoice_month: str  # YYYYMM
    start: date
    end: date  # first day of the next month

    @property
    def period(self) -> str:
        return f"{self.invoice_month[:4]}-{self.invoice_month[4:]}"


def parse_month(value: str) -> Month:
    m = _MONTH_RE.fullmatch((value or "").strip())
    if not m:
        raise PullError(f"--period {value!r}: expected YYYY-MM (the invoice month, e.g. 2026-10)")
    y, mo = int(m.group(1)), int(m.group(2))
    start = date(y, mo, 1)
    end = date(y + (mo == 12), mo % 12 + 1, 1)
    return Month(f"{y:04d}{mo:02d}", start, end)


# -- the table and the SQL -----------------------------------------------------------------------------------------


@dataclass
class TableInfo:
    """What tables.get says about the export table."""

    ref: TableRef
    kind: str  # standard | resource | focus
    columns: dict[str, str]  # name -> BigQuery type (RECORD, STRING, TIMESTAMP, ...)
    table_type: str = "TABLE"
    partition_column: str | None = None  # "_PARTITIONTIME" or a column name; None for views / unpartitioned
    partition_type: str = "TIMESTAMP"  # the filter's parameter type
    location: str | None = None

    def col(self, name: str) -> str | None:
        """The column's name as the table spells it (case-insensitive lookup)."""
        low = name.lower()
        return next((c for c in self.columns if c.lower() == low), None)


def classify(ref: TableRef, fields: list[Any], table_type: str = "TABLE", partitioning: Any = None,
             location: str | None = None) -> TableInfo:
    """Kind and partition filter of a table from its schema (bigquery.SchemaField list) and time partitioning."""
    columns = {f.name: (f.field_type or "").upper() for f in fields}
    low = {c.lower() for c in columns}
    if {"billedcost", "chargeperiodstart", "billingaccountid"} <= low:
        kind = "focus"
    elif {"billing_account_id", "cost", "invoice"} <= low:
        kind = "resource" if ({"resource", "price"} & low) else "standard"
    else:
        raise PullError(
            f"table {ref.full} does not look like a GCP billing export: expected the standard or detailed export "
            "(billing_account_id, cost, invoice, ...) or the FOCUS table (BilledCost, ChargePeriodStart, ...)"
        )
    info = TableInfo(ref, kind, columns, table_type=table_type or "TABLE", location=location)
    if partitioning is not None and (table_type or "TABLE") == "TABLE":
        fld = getattr(partitioning, "field", None)
        if fld is None:
            info.partition_column, info.partition_type = "_PARTITIONTIME", "TIMESTAMP"
        elif info.col(fld):
            typ = columns[str(info.col(fld))]
            if typ in ("TIMESTAMP", "DATE", "DATETIME"):
                info.partition_column, info.partition_type = info.col(fld), typ
    return info


@dataclass
class Param:
    name: str
    type: str  # STRING, TIMESTAMP, DATE, DATETIME
    value: Any


@dataclass
class Query:
    sql: str
    params: list[Param] = field(default_factory=list)
    window: str = ""  # the partition filter in words, for the dry-run and the docs


def _partition_filter(info: TableInfo, month: Month, late_days: int) -> tuple[str, list[Param], str]:
    col = info.partition_column
    if col is None:
        why = "a view" if info.table_type != "TABLE" else "not time-partitioned"
        return "", [], f"no partition filter ({info.ref.table} is {why}): the whole table is scanned for the month"
    lead = LEAD_DAYS if col in ("_PARTITIONTIME",) or col.lower() == "export_time" else USAGE_LEAD_DAYS
    lo = month.start - timedelta(days=lead)
    hi = month.end + timedelta(days=late_days)
    if info.partition_type == "DATE":
        params = [Param("partition_start", "DATE", lo), Param("partition_end", "DATE", hi)]
    elif info.partition_type == "DATETIME":
        params = [Param("partition_start", "DATETIME", datetime(lo.year, lo.month, lo.day)),
                  Param("partition_end", "DATETIME", datetime(hi.year, hi.month, hi.day))]
    else:
        params = [Param("partition_start", "TIMESTAMP", datetime(lo.year, lo.month, lo.day, tzinfo=UTC)),
                  Param("partition_end", "TIMESTAMP", datetime(hi.year, hi.month, hi.day, tzinfo=UTC))]
    q = col if col == "_PARTITIONTIME" else f"`{col}`"
    sql = f"{q} >= @partition_start AND {q} < @partition_end"
    sql = f"(({sql}) OR _PARTITIONTIME IS NULL)" if col == "_PARTITIONTIME" else f"({sql})"
    words = f"{col} from {lo.isoformat()} to {hi.isoformat()} (exclusive)"
    if col == "_PARTITIONTIME":
        words += " and the streaming buffer"
    return sql, params, words


def _month_filter(info: TableInfo) -> str:
    if info.kind != "focus":
        return "invoice.month = @invoice_month"
    col = info.col("BillingPeriodStart") or "BillingPeriodStart"
    typ = info.columns.get(col, "TIMESTAMP")
    if typ == "DATE":
        return f"FORMAT_DATE('%Y%m', DATE_ADD(`{col}`, INTERVAL 1 DAY)) = @invoice_month"
    if typ == "DATETIME":
        return f"FORMAT_DATETIME('%Y%m', DATETIME_ADD(`{col}`, INTERVAL 1 DAY)) = @invoice_month"
    return f"FORMAT_TIMESTAMP('%Y%m', TIMESTAMP_ADD(`{col}`, INTERVAL 1 DAY), 'UTC') = @invoice_month"


def selected_columns(info: TableInfo) -> list[str]:
    """The export's own columns the connectors read, in the table's order (nested ones stay nested)."""
    wanted = {c.lower() for c in (FOCUS_SOURCE if info.kind == "focus" else STANDARD_COLUMNS)}
    cols = [c for c in info.columns if c.lower() in wanted]
    if info.kind != "focus":
        missing = [c for c in ("billing_account_id", "cost", "usage_start_time", "invoice") if c not in cols]
        if missing:
            raise PullError(f"table {info.ref.full} lacks column(s) {', '.join(missing)}: not a GCP billing export")
    return cols


def export_time_column(info: TableInfo) -> str | None:
    return info.col("x_ExportTime") if info.kind == "focus" else info.col("export_time")


def _where(info: TableInfo, month: Month, late_days: int) -> tuple[str, list[Param], str]:
    part_sql, params, words = _partition_filter(info, month, late_days)
    where = _month_filter(info)
    if part_sql:
        where += f"\n  AND {part_sql}"
    return where, [Param("invoice_month", "STRING", month.invoice_month), *params], words


def freshness_query(info: TableInfo, month: Month, late_days: int = LATE_DAYS) -> Query:
    """How many rows the month has and when it was last exported: a scan of one or two small columns."""
    where, params, words = _where(info, month, late_days)
    exp = export_time_column(info)
    parts = ["COUNT(*) AS line_count"]
    if exp:
        parts.append(f"MAX(`{exp}`) AS max_export_time")
    else:  # a FOCUS view without x_ExportTime: the month's total stands in for the export time
        cost = info.col("BilledCost") or info.col("cost")
        parts.append(f"CAST(SUM(`{cost}`) AS STRING) AS cost_total")
    sql = f"SELECT {', '.join(parts)}\nFROM {info.ref.quoted}\nWHERE {where}"
    return Query(sql, params, words)


def rows_query(info: TableInfo, month: Month, late_days: int = LATE_DAYS) -> Query:
    """The month's rows as the export has them: nested records and arrays kept, credits not unnested."""
    where, params, words = _where(info, month, late_days)
    cols = ",\n  ".join(f"`{c}`" for c in selected_columns(info))
    sql = f"SELECT\n  {cols}\nFROM {info.ref.quoted}\nWHERE {where}"
    return Query(sql, params, words)


# -- errors --------------------------------------------------------------------------------------------------------


def _reason(exc: Any) -> str:
    try:
        return str(exc.errors[0].get("reason") or "")
    except (AttributeError, IndexError, TypeError, KeyError):
        return ""


def _short(msg: str, limit: int = 300) -> str:
    msg = " ".join(str(msg).split())
    return msg if len(msg) <= limit else msg[: limit - 3] + "..."


def _server_message(exc: Any) -> str:
    msg = getattr(exc, "message", None) or str(exc)
    return _short(msg.split("\n\nLocation:")[0].split("\nLocation:")[0])


@contextmanager
def google_errors(what: str, ref: TableRef | None = None, job_project: str | None = None,
                  max_bytes: int | None = None) -> Iterator[None]:
    """Turn SDK and auth exceptions into one clear PullError (nothing secret is echoed)."""
    import requests
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as aexc

    table = ref.full if ref else "the table"
    try:
        yield
    except PullError:
        raise
    except aexc.DefaultCredentialsError as e:
        m = re.match(r"^File (.+) was not found\.?$", str(e).strip())
        extra = f" (GOOGLE_APPLICATION_CREDENTIALS names {m.group(1)}, which does not exist)" if m else ""
        raise PullError(NO_CREDENTIALS + extra) from None
    except aexc.RefreshError as e:
        code = re.search(r"\b(invalid_grant|invalid_client|unauthorized_client|invalid_scope|access_denied)\b",
                         str(e))
        raise PullError(
            "the Google credentials were rejected when asking for an access token"
            + (f" ({code.group(1)})" if code else "")
            + ": run `gcloud auth application-default login` again or check the service-account key"
        ) from None
    except aexc.GoogleAuthError as e:
        raise PullError(f"Google authentication failed ({type(e).__name__}) while {what}") from None
    except gexc.Unauthorized:
        raise PullError("BigQuery rejected the credentials (401): run `gcloud auth application-default login` "
                        "again or check GOOGLE_APPLICATION_CREDENTIALS") from None
    except gexc.Forbidden as e:
        reason = _reason(e)
        if reason in ("quotaExceeded", "rateLimitExceeded"):
            raise PullError(f"BigQuery quota exceeded while {what}: {_server_message(e)}") from None
        if reason == "billingNotEnabled":
            raise PullError(f"billing is not enabled on project {job_project}, which runs the query: "
                            "pick another with --project") from None
        raise PullError(
            f"access denied while {what} ({table}, query project {job_project}): {_server_message(e)}. "
            f"Needed: {PERMISSIONS}"
        ) from None
    except gexc.NotFound as e:
        raise PullError(
            f"table not found: {table} (check the project, dataset and table names; the table may be in another "
            f"project than --project): {_server_message(e)}"
        ) from None
    except gexc.BadRequest as e:
        if _reason(e) == "bytesBilledLimitExceeded":
            limit = f"--max-bytes-billed {max_bytes:,} bytes" if max_bytes is not None else "the project's byte limit"
            raise PullError(f"the query would bill more than {limit}; nothing was downloaded "
                            "(--dry-run shows the bytes it processes)") from None
        raise PullError(f"BigQuery refused the query while {what}: {_server_message(e)}") from None
    except gexc.RetryError as e:
        cause = getattr(e, "cause", None)
        raise PullError(f"BigQuery kept failing while {what}, gave up after retrying: "
                        f"{_server_message(cause) if cause is not None else _server_message(e)}") from None
    except gexc.GoogleAPICallError as e:
        raise PullError(f"BigQuery error while {what} ({getattr(e, 'code', '?')}): {_server_message(e)}") from None
    except (ConnectionError, TimeoutError, requests.exceptions.RequestException) as e:
        raise PullError(f"cannot reach BigQuery while {what}: {type(e).__name__}") from None


# -- the client ----------------------------------------------------------------------------------------------------


def make_retry(deadline: float = RETRY_DEADLINE, initial: float = RETRY_INITIAL) -> Any:
    """The client's retry: its own retryable reasons plus any 429/5xx and dropped connections."""
    import requests
    from google.api_core import exceptions as gexc
    from google.api_core import retry as gretry
    from google.auth import exceptions as aexc

    reasons = {"rateLimitExceeded", "backendError", "internalError", "badGateway"}
    kinds = (ConnectionError, gexc.TooManyRequests, gexc.InternalServerError, gexc.BadGateway,
             gexc.ServiceUnavailable, gexc.GatewayTimeout, requests.exceptions.ChunkedEncodingError,
             requests.exceptions.ConnectionError, requests.exceptions.Timeout, aexc.TransportError)

    def retryable(exc: BaseException) -> bool:
        if isinstance(exc, requests.exceptions.SSLError):
            return False
        return _reason(exc) in reasons or isinstance(exc, kinds)

    return gretry.Retry(predicate=retryable, initial=initial, maximum=max(initial, 30.0), multiplier=2.0,
                        timeout=deadline)


def make_client(project: str, location: str | None = None, api_endpoint: str | None = None,
                credentials: Any = None) -> bigquery.Client:
    """A BigQuery client over application default credentials (or the given ones).

    ``api_endpoint`` (or the client's own ``BIGQUERY_EMULATOR_HOST`` variable) points it at another
    server, e.g. a local one in tests.
    """
    from google.api_core.client_options import ClientOptions
    from google.cloud import bigquery

    opts = ClientOptions(api_endpoint=api_endpoint) if api_endpoint else None
    with google_errors("loading credentials"):
        return bigquery.Client(project=project, credentials=credentials, location=location, client_options=opts)


def _bq_params(params: list[Param]) -> list[Any]:
    from google.cloud import bigquery

    return [bigquery.ScalarQueryParameter(p.name, p.type, p.value) for p in params]


def describe_table(client: bigquery.Client, ref: TableRef, retry: Any) -> TableInfo:
    from google.cloud import bigquery

    with google_errors("reading the table's schema", ref, client.project):
        t = client.get_table(bigquery.TableReference(bigquery.DatasetReference(ref.project, ref.dataset), ref.table),
                             retry=retry)
    return classify(ref, list(t.schema), t.table_type or "TABLE", t.time_partitioning, getattr(t, "location", None))


def _job_config(q: Query, *, dry_run: bool = False, max_bytes: int | None = None) -> Any:
    from google.cloud import bigquery

    cfg = bigquery.QueryJobConfig(query_parameters=_bq_params(q.params), use_legacy_sql=False,
                                  labels={"tool": "billing-audit"})
    if dry_run:
        cfg.dry_run = True
        cfg.use_query_cache = False
    if max_bytes is not None:
        cfg.maximum_bytes_billed = max_bytes
    return cfg


def dry_run_bytes(client: bigquery.Client, info: TableInfo, q: Query, retry: Any) -> int:
    with google_errors("estimating the query (dry run)", info.ref, client.project):
        job = client.query(q.sql, job_config=_job_config(q, dry_run=True), location=info.location, retry=retry)
        return int(job.total_bytes_processed or 0)


def _ts_text(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, datetime):
        return (v if v.tzinfo else v.replace(tzinfo=UTC)).astimezone(UTC).isoformat()
    return str(v)


def freshness(client: bigquery.Client, info: TableInfo, month: Month, retry: Any, *, late_days: int = LATE_DAYS,
              max_bytes: int | None = None) -> dict[str, Any]:
    """{rows, max_export_time | cost_total} of the month, from the cheap query."""
    q = freshness_query(info, month, late_days)
    with google_errors("checking the month for new rows", info.ref, client.project, max_bytes):
        job = client.query(q.sql, job_config=_job_config(q, max_bytes=max_bytes), location=info.location, retry=retry)
        rows = list(job.result(retry=retry))
    row = rows[0] if rows else None
    out: dict[str, Any] = {"rows": int(row["line_count"] or 0) if row else 0}
    names = list(row.keys()) if row is not None else []  # a bigquery Row's `in` looks at values, not names
    if row is not None and "max_export_time" in names:
        out["max_export_time"] = _ts_text(row["max_export_time"])
    elif row is not None:
        out["cost_total"] = row["cost_total"]
    return out


def fingerprint(fresh: dict[str, Any]) -> str:
    mark = fresh.get("max_export_time") or f"total {fresh.get('cost_total')}"
    return f"{mark}|{fresh['rows']} rows"


# -- streaming to parquet ------------------------------------------------------------------------------------------


def _focus_tags_to_json(batch: Any) -> Any:
    """FOCUS ``Tags`` as an array of {key, value, ...} -> JSON object text (first value of a key wins)."""
    import duckdb
    import pyarrow as pa

    name = next((n for n in batch.schema.names if n.lower() == "tags"), None)
    if name is None or not (pa.types.is_list(batch.schema.field(name).type)
                            or pa.types.is_large_list(batch.schema.field(name).type)):
        return batch
    con = duckdb.connect()
    try:
        con.register("b", pa.Table.from_batches([batch]))
        q = '"' + name.replace('"', '""') + '"'
        expr = (f"CASE WHEN {q} IS NULL OR len({q}) = 0 THEN NULL ELSE CAST(to_json(map_from_entries("
                f"list_transform(list_distinct(list_transform(list_filter({q}, lambda t: t.key IS NOT NULL), "
                f"lambda t: t.key)), lambda k: {{'key': k, 'value': list_filter({q}, lambda t: t.key = k)[1].value}})"
                f")) AS VARCHAR) END")
        tbl = con.sql(f"SELECT * REPLACE ({expr} AS {q}) FROM b").to_arrow_table()
    finally:
        con.close()
    return tbl.to_batches()[0] if tbl.num_rows else pa.RecordBatch.from_pylist([], schema=tbl.schema)


def write_parquet(batches: Iterator[Any], dest: Path, *, transform: Callable[[Any], Any] | None = None,
                  progress: Callable[[int], None] | None = None) -> int:
    """Write record batches to dest through dest.part, one batch at a time; returns the row count (0: no file)."""
    import pyarrow.parquet as pq

    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    writer = None
    rows = 0
    try:
        for batch in batches:
            if transform is not None:
                batch = transform(batch)
            if writer is None:
                schema = batch.schema
                writer = pq.ParquetWriter(part, schema, compression="zstd")
            elif batch.schema != schema:
                batch = batch.cast(schema)
            if batch.num_rows:
                writer.write_batch(batch)
                rows += batch.num_rows
                if progress:
                    progress(batch.num_rows)
    except BaseException:
        if writer is not None:
            writer.close()
        part.unlink(missing_ok=True)
        raise
    if writer is None:
        return 0
    writer.close()
    if rows == 0:
        part.unlink(missing_ok=True)
        return 0
    os.replace(part, dest)
    return rows


# -- the plan and the pull -----------------------------------------------------------------------------------------


@dataclass
class MonthResult:
    month: Month
    key: str  # cache-relative path of the month's parquet file
    path: Path
    status: str  # downloaded | unchanged | empty | dry-run
    rows: int = 0
    size: int = 0
    bytes_processed: int | None = None
    fresh: dict[str, Any] = field(default_factory=dict)
    window: str = ""
    lines: list[str] = field(default_factory=list)  # dry-run description


def cache_key(ref: TableRef, month: Month) -> str:
    return f"{ref.folder}/invoice_month={month.invoice_month}/{ref.table}-{month.invoice_month}.parquet"


def _cached(cache: PullCache, obj_key: str, source: str) -> dict[str, Any] | None:
    rec = cache.state.get(f"{source}/{obj_key}")
    path = cache.path_for(obj_key)
    if rec and path.exists() and path.stat().st_size == rec.get("size"):
        return rec
    return None


def pull_month(
    client: bigquery.Client,
    info: TableInfo,
    month: Month,
    cache: PullCache,
    *,
    retry: Any = None,
    late_days: int = LATE_DAYS,
    max_bytes: int | None = None,
    force: bool = False,
    dry_run: bool = False,
    on_start: Callable[[int | None], None] | None = None,
    progress: Callable[[int], None] | None = None,
) -> MonthResult:
    """Bring one invoice month into the cache (or, with dry_run, say what that would cost)."""
    retry = retry if retry is not None else make_retry()
    key = cache_key(info.ref, month)
    path = cache.path_for(key)
    rec = _cached(cache, key, cache.source)
    q = rows_query(info, month, late_days)
    res = MonthResult(month, key, path, "dry-run", window=q.window)
    if dry_run:
        fq = freshness_query(info, month, late_days)
        main_bytes = dry_run_bytes(client, info, q, retry)
        check_bytes = dry_run_bytes(client, info, fq, retry)
        res.bytes_processed = main_bytes
        res.lines = [
            f"{month.period}  {info.ref.full} ({info.kind} export) invoice month {month.invoice_month}: "
            f"the query would process {main_bytes:,} bytes (the freshness check {check_bytes:,} bytes)",
            f"    partition filter: {q.window}",
            f"    {'cached' if rec else 'fetch '} {key}"
            + (f" (last pull: {rec.get('etag')}, {rec.get('size', 0):,} bytes; fetched again only if "
               "the month changed)" if rec else ""),
        ]
        if max_bytes is not None and main_bytes > max_bytes:
            res.lines.append(f"    over --max-bytes-billed {max_bytes:,}: the query would be refused")
        return res
    fresh = freshness(client, info, month, retry, late_days=late_days, max_bytes=max_bytes)
    res.fresh = fresh
    mark = fingerprint(fresh)
    if fresh["rows"] == 0:
        res.status = "empty"
        return res
    if rec and rec.get("etag") == mark and not force:
        res.status, res.rows, res.size = "unchanged", fresh["rows"], int(rec.get("size", 0))
        return res
    with google_errors("running the query", info.ref, client.project, max_bytes):
        job = client.query(q.sql, job_config=_job_config(q, max_bytes=max_bytes), location=info.location, retry=retry)
        it = job.result(retry=retry)
        if on_start:
            on_start(it.total_rows)
        transform = _focus_tags_to_json if info.kind == "focus" else None
        rows = write_parquet(iter(it.to_arrow_iterable(bqstorage_client=None)), path, transform=transform,
                             progress=progress)
        res.bytes_processed = job.total_bytes_processed
    if rows == 0:  # deleted between the two queries
        res.status = "empty"
        return res
    res.status, res.rows, res.size = "downloaded", rows, path.stat().st_size
    cache.record(RemoteObject(key=key, size=res.size, etag=mark))
    return res


@dataclass
class PullPlan:
    ref: TableRef
    job_project: str
    months: list[Month]
    cache_root: Path
    late_days: int = LATE_DAYS
    max_bytes: int | None = None


def pull(
    plan: PullPlan,
    *,
    client: bigquery.Client | None = None,
    retry: Any = None,
    dry_run: bool = False,
    force: bool = False,
    on_start: Callable[[Month, int | None], None] | None = None,
    progress: Callable[[int], None] | None = None,
    api_endpoint: str | None = None,
) -> tuple[TableInfo, list[MonthResult]]:
    """Pull every month of the plan into the cache; the caller ingests the folders of the results."""
    client = client or make_client(plan.job_project, api_endpoint=api_endpoint)
    retry = retry if retry is not None else make_retry()
    info = describe_table(client, plan.ref, retry)
    cache = PullCache(plan.cache_root, plan.ref.full)
    results = []
    for m in plan.months:
        results.append(pull_month(
            client, info, m, cache, retry=retry, late_days=plan.late_days, max_bytes=plan.max_bytes, force=force,
            dry_run=dry_run, on_start=functools.partial(on_start, m) if on_start else None, progress=progress,
        ))
    return info, results


def ingest_paths(results: list[MonthResult]) -> list[Path]:
    """The month folders to hand to Store.ingest (downloaded or unchanged - re-ingesting is a no-op)."""
    return [r.path.parent for r in results if r.status in ("downloaded", "unchanged") and r.path.exists()]


# -- `billing-audit pull gcp` (billing_audit.pulling.Puller) ---------------------------------------------------------
HELP = """Query GCP billing export rows of an invoice month from BigQuery, cache them, ingest them.

\b
TABLE is the export table, PROJECT.DATASET.TABLE:
  gcp_billing_export_v1_<ACCOUNT>           standard usage cost export
  gcp_billing_export_resource_v1_<ACCOUNT>  detailed (resource-level) export
  gcp_billing_export_focus_<ACCOUNT>        FOCUS table or view
The kind is read from the table's schema.

\b
One parameterised query per month selects the rows as the export has them
(nested service, sku, project, labels, credits arrays, ...), filtered by
invoice.month = @invoice_month and by partition time - from 3 days before
the month to --late-days (15) after it, since late usage, tax and
adjustments are written after the month ends - so BigQuery bills a small
scan.  The result streams into a parquet file under --cache
(<project>/<dataset>/<table>/invoice_month=YYYYMM/), a full snapshot of the
month that replaces it in the store.  A cheap COUNT(*)/MAX(export_time)
query runs first: when the month has not changed since the last pull,
nothing is downloaded (--force downloads anyway).  --dry-run only asks
BigQuery how many bytes the queries would process.

\b
Authentication: Google application default credentials, in this order -
GOOGLE_APPLICATION_CREDENTIALS (a service-account key file or other
credential file), the gcloud user login (`gcloud auth
application-default login`), or the service account attached to the GCE
VM / GKE pod / Cloud Run service running the command.

\b
Permissions needed:
  roles/bigquery.dataViewer on the export dataset or table
      (bigquery.tables.get, bigquery.tables.getData)
  roles/bigquery.jobUser on the project that runs the query, --project
      (bigquery.jobs.create); it is billed for the bytes the query scans.

\b
Examples:
  billing-audit pull gcp --table my-proj.billing.gcp_billing_export_v1_01ABCD_23EF45_678901 --period 2026-10
  billing-audit pull gcp --table my-proj.billing.gcp_billing_export_resource_v1_01ABCD_23EF45_678901 \\
      --period 2026-10 --project my-analytics-proj --max-bytes-billed 2000000000
  billing-audit pull gcp --table my-proj.billing.gcp_billing_export_v1_01ABCD_23EF45_678901 --period 2026-11 --dry-run
"""


class GcpOptions(BaseModel):
    """The flags of `billing-audit pull gcp`, in --help order (the shared --db goes before --dry-run)."""

    model_config = ConfigDict(frozen=True)

    table: str = Field(description="The billing export table.", json_schema_extra={"metavar": "PROJECT.DATASET.TABLE"})
    months: tuple[str, ...] = Field(description="Invoice month to pull, as every command spells a billing period "
                                                "(YYYYMM is read too); repeatable.",
                                    json_schema_extra={"flag": "--period", "metavar": "YYYY-MM",
                                                       "deprecated_flag": "--month"})
    project: str | None = Field(None, description="Project that runs (and pays for) the query; default the table's project.",
                                json_schema_extra={"metavar": "PROJECT"})
    cache: str = Field("billing-audit-cache/gcp", description="Cache folder for the downloaded months.",
                       json_schema_extra={"path": "dir"})
    dry_run: bool = Field(False, description="Print the bytes the queries would process; download nothing.")
    max_bytes: int | None = Field(None, ge=1, description="Refuse to run a query that would bill more than this (job maximum_bytes_billed).",
                                  json_schema_extra={"flag": "--max-bytes-billed", "metavar": "BYTES"})
    late_days: int = Field(LATE_DAYS, ge=0, le=120, description="Days after the month whose partitions are still searched for its late rows.")
    force: bool = Field(False, description="Download the month even if it looks unchanged since the last pull.")
    quiet: bool = Field(False, description="No progress bar or summary lines.", json_schema_extra={"flag": "-q/--quiet"})


@dataclass
class GcpPullPlan:
    plan: PullPlan
    force: bool = False
    messages: list[pulling.Message] = field(default_factory=list)

    def dry_run(self) -> pulling.DryRun:
        _, results = pull(self.plan, dry_run=True, force=self.force)
        return pulling.DryRun([line for r in results for line in r.lines])


@dataclass
class GcpFetched:
    results: list[MonthResult]
    messages: list[pulling.Message] = field(default_factory=list)
    failed: bool = False
    error: str | None = None

    @property
    def ready(self) -> bool:
        return bool(ingest_paths(self.results))


class GcpPuller:
    name = "gcp"
    title = "GCP"
    example = "billing-audit pull gcp --table proj.billing.gcp_billing_export_v1_0123 --period 2026-10"
    help = HELP
    Options = GcpOptions
    db_before = "dry_run"

    def plan(self, options: GcpOptions) -> GcpPullPlan:
        ref = parse_table(options.table, options.project)  # before any request
        return GcpPullPlan(PullPlan(ref=ref, job_project=options.project or ref.project,
                                    months=[parse_month(m) for m in dict.fromkeys(options.months)],
                                    cache_root=Path(options.cache), late_days=options.late_days,
                                    max_bytes=options.max_bytes), force=options.force)

    def fetch(self, p: GcpPullPlan, progress: pulling.FetchProgress | None) -> GcpFetched:
        on_start: Callable[[Month, int | None], None] | None = None
        if progress is not None:
            def on_start(month: Month, total: int | None) -> None:
                progress.start(f"pull gcp {month.invoice_month}", total, "rows")

        table, results = pull(p.plan, force=p.force, on_start=on_start, progress=progress.advance if progress else None)
        said = []
        for r in results:
            if r.status == "downloaded":
                processed = f", the query processed {r.bytes_processed:,} bytes" if r.bytes_processed is not None else ""
                said.append(f"{r.month.invoice_month}: {r.rows:,} line(s) downloaded to {r.path} ({r.size:,} bytes{processed})")
            elif r.status == "unchanged":
                said.append(f"{r.month.invoice_month}: unchanged since the last pull ({r.rows:,} lines, last export "
                            f"{r.fresh.get('max_export_time') or 'unknown'}): nothing downloaded")
            elif r.status == "empty":
                said.append(f"{r.month.invoice_month}: no rows for this invoice month in {table.ref.full}: nothing ingested")
        return GcpFetched(results, [pulling.info(s) for s in said])

    def ingest(self, store: Store, fetched: GcpFetched, progress: pulling.IngestProgress | None) -> IngestReport:
        return store.ingest([str(p) for p in ingest_paths(fetched.results)], progress=progress)


PULLER: pulling.Puller[GcpOptions, GcpPullPlan, GcpFetched] = GcpPuller()
