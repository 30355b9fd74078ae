"""BigQuery: the audit query run where the GCP billing export lives, returning only the aggregates.

One statement, three layers of CTEs::

    WITH gcp_fields AS (<FIELDS_SQL: the export table, one month, flattened>),
         line_items AS (<LINES_SQL: the canonical columns>),
         <the audit pipeline's own CTEs (billing_audit.engines.pipeline)>
    <its result select>

``LINES_SQL`` is written in DuckDB SQL, like the rules and the pipeline, and translated by
:func:`billing_audit.engines.portable.to_engine`: it carries the meaning of :mod:`connectors.gcp.billing_export`
(charge and pricing categories, the pricing model, the service category, net cost) over flat columns.

``FIELDS_SQL`` is BigQuery SQL as written, because what it does has no portable form:

- the export's REPEATED RECORD columns are reduced per row by correlated ``UNNEST`` subqueries
  (credits summed, never joined: a join would repeat the row once per credit; labels, resource
  tags and project labels merged into the canonical ``Tags`` array with ``SELECT AS STRUCT``);
- ``x_LineItemId`` must be the same on every run and no column identifies an export row, so it is
  ``TO_HEX(MD5(TO_JSON_STRING(t)))`` of the whole row (a table alias as a STRUCT value is BigQuery's)
  plus a row number among identical rows;
- the month is the query parameter ``@invoice_month`` and, for pruning, the partition window of
  :mod:`connectors.gcp.pull` on ``_PARTITIONTIME`` (or the partitioning column);
- FLOAT money goes through its shortest decimal text to BIGNUMERIC rounded to 12 places, as the local
  ingest reads the same numbers (DECIMAL(38,12)), so both engines add up the same values.

Canonical timestamps are DATETIME (UTC wall time), as DuckDB's TIMESTAMP translates.  The Google SDK
is reached through :mod:`connectors.gcp.pull` only (the core never imports a cloud SDK).
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import sqlglot
from pydantic import Field
from sqlglot import exp

from billing_audit import schema
from billing_audit.config import Config
from billing_audit.engines.base import Engine, EngineOptions, EngineRunResult
from billing_audit.engines.pipeline import RESULT_COLUMNS
from billing_audit.engines.portable import parse, to_engine
from billing_audit.errors import BillingAuditError
from billing_audit.rules import Rule
from connectors.gcp import billing_export as be
from connectors.gcp import pull as gp

if TYPE_CHECKING:
    from billing_audit.store import Store

WS = r"' \t\n\r\v\f'"  # the whitespace ba_ws trims at ingest


def _num(expr: str) -> str:
    return f"ROUND(CAST(CAST({expr} AS STRING) AS BIGNUMERIC), 12)"


def _tag_sources(info: gp.TableInfo) -> str:
    """labels, then tags, then project.labels as one {k, v} list in that order (what the local ingest's
    ``tag_entries`` is); ``ba_tags`` normalises it (:func:`ba_tags`)."""
    sources = [c for c in ("labels", "tags") if info.col(c)] + ["project.labels"]
    union = " UNION ALL ".join(
        f"SELECT {i} AS src, pos, e.key AS k, e.value AS v FROM UNNEST(t.{s}) AS e WITH OFFSET AS pos"
        for i, s in enumerate(sources))
    return f"ARRAY(SELECT AS STRUCT k, v FROM ({union}) ORDER BY src, pos)"


def fields_sql(info: gp.TableInfo, where: str) -> str:
    """The month's export rows (standard or detailed table), one flat row each, with the columns the
    connector's own mapping reads after its JSON step (``billing_export.FIELDS_SQL``) (BigQuery SQL)."""
    if info.kind not in ("standard", "resource"):
        raise BillingAuditError(f"table {info.ref.full}: --engine bigquery reads the standard or detailed "
                                f"export (gcp_billing_export_v1_* / gcp_billing_export_resource_v1_*), not {info.kind}")

    def opt(column: str, expr: str, typ: str = "STRING") -> str:
        return expr if info.col(column) else f"CAST(NULL AS {typ})"

    return f"""
SELECT CONCAT('gcp-', r.row_hash, '-', CAST(ROW_NUMBER() OVER (PARTITION BY r.row_hash) AS STRING)) AS x_LineItemId,
       r.* EXCEPT (row_hash)
FROM (
  SELECT
    TO_HEX(MD5(TO_JSON_STRING(t))) AS row_hash,
    t.billing_account_id AS billing_account_id,
    t.service.description AS service_description,
    t.sku.id AS sku_id,
    t.sku.description AS sku_description,
    t.project.id AS project_id,
    t.project.name AS project_name,
    t.location.location AS location_location,
    t.location.region AS location_region,
    t.location.zone AS location_zone,
    DATETIME(t.usage_start_time) AS usage_start_time,
    DATETIME(t.usage_end_time) AS usage_end_time,
    DATETIME(t.export_time) AS export_time,
    {_num("t.cost")} AS cost,
    {opt("cost_at_list", _num("t.cost_at_list"), "BIGNUMERIC")} AS cost_at_list,
    t.currency AS currency,
    t.cost_type AS cost_type,
    {opt("seller_name", "t.seller_name")} AS seller_name,
    {_num("t.usage.amount")} AS usage_amount,
    t.usage.unit AS usage_unit,
    {_num("t.usage.amount_in_pricing_units")} AS usage_pricing_amount,
    t.usage.pricing_unit AS usage_pricing_unit,
    TRIM(t.invoice.month) AS invoice_month,
    {opt("adjustment_info", "t.adjustment_info.description")} AS adjustment_description,
    {opt("consumption_model", "t.consumption_model.description")} AS consumption_model_description,
    {opt("resource", "t.resource.name")} AS resource_name,
    {opt("resource", "t.resource.global_name")} AS resource_global_name,
    {opt("price", _num("t.price.effective_price"), "BIGNUMERIC")} AS price_effective,
    {opt("price", _num("t.price.list_price"), "BIGNUMERIC")} AS price_list,
    {opt("price", _num("t.price.pricing_unit_quantity"), "BIGNUMERIC")} AS price_unit_quantity,
    ARRAY(SELECT AS STRUCT CAST(c.amount AS STRING) AS amount, c.id AS id, c.type AS type
          FROM UNNEST(t.credits) AS c WITH OFFSET AS pos ORDER BY pos) AS credit_list,
    {_tag_sources(info)} AS tag_entries
  FROM {info.ref.quoted} AS t
  WHERE {where}
) AS r"""


def ba_num(x: str) -> str:
    """The ingest macro ``ba_num`` (text to DECIMAL(38,12); blank is NULL) in BigQuery SQL."""
    return f"ROUND(CAST(NULLIF(TRIM(CAST({x} AS STRING)), '') AS BIGNUMERIC), 12)"


def ba_tags(entries: str) -> str:
    """The ingest macro ``ba_tags`` in BigQuery SQL: {k, v} entries to the canonical tags (keys trimmed and
    lower-cased, blank keys and values dropped, one entry per key: the first in source order, sorted by key),
    as ``ARRAY<STRUCT<key, value>>`` because BigQuery has no MAP."""
    return f"""ARRAY(
      SELECT AS STRUCT key, ARRAY_AGG(value ORDER BY pos LIMIT 1)[OFFSET(0)] AS value
      FROM (SELECT LOWER(TRIM(e.k, {WS})) AS key, TRIM(e.v, {WS}) AS value, pos
            FROM UNNEST({entries}) AS e WITH OFFSET AS pos)
      WHERE key IS NOT NULL AND key <> '' AND value IS NOT NULL AND value <> ''
      GROUP BY key ORDER BY key)"""


_MACROS = {"ba_num": ba_num, "ba_tags": ba_tags}


def mapping_select() -> str:
    """The connector's own mapping (``billing_export``: derived values, charge category, ``GCP_SELECT``) over
    ``gcp_fields`` instead of its JSON step, in DuckDB SQL; ``_row`` becomes the line id and the provider."""
    derived = be.DERIVED_SQL.replace("{fields}", "SELECT * FROM gcp_fields")
    select = be.select_sql(derived)
    anchor = "SELECT\n  _row,\n"
    assert select.startswith("\n" + anchor), "GCP_SELECT changed shape: update connectors.gcp.bigquery"
    select = select.replace(anchor, "SELECT\n  x_LineItemId,\n  'gcp' AS x_Provider,\n", 1)
    tree = sqlglot.parse_one(select, read="duckdb")
    assert isinstance(tree, exp.Select)
    given = {e.alias_or_name for e in tree.expressions}
    absent = [f"CAST(NULL AS {schema.BY_NAME[c].type}) AS {c}" for c in schema.COLUMN_NAMES
              if c not in given and c not in _BOOKKEEPING]  # NULL, as the local ingest leaves them
    return tree.select(*absent, dialect="duckdb").sql(dialect="duckdb")


_BOOKKEEPING = {"x_SourceFile", "x_SourceRow", "x_SourceFormat", "x_IngestId", "x_TagsRaw"}  # what ingest records


def lines_sql() -> str:
    """The canonical line items from ``gcp_fields`` as BigQuery SQL: :func:`mapping_select` translated by
    :func:`billing_audit.engines.portable.to_engine`, the ingest macros written out in BigQuery SQL."""
    tree = parse(mapping_select(), "duckdb")
    for node in list(tree.find_all(exp.Anonymous)):
        fn = _MACROS.get(node.name.lower())
        if fn is not None:
            (arg,) = node.expressions
            node.replace(sqlglot.parse_one(fn(arg.sql(dialect="bigquery")), read="bigquery"))
    return to_engine(tree, "bigquery")


def audit_query(info: gp.TableInfo, month: gp.Month, pipeline_sql: str, late_days: int = gp.LATE_DAYS) -> gp.Query:
    """The one statement: the pipeline's CTEs (BigQuery SQL over ``line_items``) after gcp_fields and line_items."""
    where, params, words = gp._where(info, month, late_days)
    tree = sqlglot.parse_one(pipeline_sql, read="bigquery")
    with_ = tree.args.get("with_") or tree.args.get("with")
    if not isinstance(with_, exp.With):
        raise BillingAuditError("the audit query has no WITH clause to add the export's line items to")
    taken = {c.alias_or_name.lower() for c in with_.expressions}
    if taken & {"gcp_fields", "line_items"}:
        raise BillingAuditError("the audit query already defines gcp_fields or line_items")
    ours = [exp.CTE(this=sqlglot.parse_one(sql, read="bigquery"), alias=exp.TableAlias(this=exp.to_identifier(name)))
            for name, sql in (("gcp_fields", fields_sql(info, where)), ("line_items", lines_sql()))]
    with_.set("expressions", [*ours, *with_.expressions])
    return gp.Query(tree.sql(dialect="bigquery", pretty=True), params, words)


_MONEY = {"cost", "list_cost", "fee_n"}


def _value(name: str, v: Any) -> Any:
    if v is not None and name in _MONEY and not isinstance(v, Decimal):
        return Decimal(str(v))
    return v


def run(client: Any, table: str, sql_for_line_items: str, invoice_month: str, max_bytes_billed: int | None,
        *, late_days: int = gp.LATE_DAYS, retry: Any = None) -> tuple[list[tuple[Any, ...]], int]:
    """Run the audit (`sql_for_line_items`: ``engine_sql('bigquery', ...)``) over one invoice month of the
    export `table`: a dry run first, refused above `max_bytes_billed`, then the query with that byte limit.
    Returns the result rows in RESULT_COLUMNS order and the bytes processed."""
    retry = retry if retry is not None else gp.make_retry()
    ref = gp.parse_table(table, client.project)
    month = gp.parse_month(invoice_month)
    info = gp.describe_table(client, ref, retry)
    q = audit_query(info, month, sql_for_line_items, late_days)
    estimate = gp.dry_run_bytes(client, info, q, retry)
    if max_bytes_billed is not None and estimate > max_bytes_billed:
        raise BillingAuditError(
            f"the audit query over {ref.full} (invoice month {month.invoice_month}) would process {estimate:,} bytes, "
            f"more than --max-bytes-billed {max_bytes_billed:,}; nothing was run")
    with gp.google_errors("running the audit query", ref, client.project, max_bytes_billed):
        job = client.query(q.sql, job_config=gp._job_config(q, max_bytes=max_bytes_billed), location=info.location,
                           retry=retry)
        rows = list(job.result(retry=retry))
    names = [n for n, _ in RESULT_COLUMNS]
    out = [tuple(_value(n, r[n]) for n in names) for r in rows]
    return out, int(job.total_bytes_processed or estimate)


def make_client(project: str, api_endpoint: str | None = None) -> Any:
    """A google-cloud-bigquery client for ``project`` (the one `pull gcp` uses)."""
    return gp.make_client(project, api_endpoint=api_endpoint)


class BigQueryOptions(EngineOptions):
    bq_table: str | None = Field(None, description="BigQuery: the GCP billing export table.",
                                 json_schema_extra={"flag": "--bq-table", "metavar": "PROJECT.DATASET.TABLE"})
    bq_project: str | None = Field(None, description="BigQuery: the project that runs the query (default: the table's).",
                                   json_schema_extra={"flag": "--bq-project"})
    bq_endpoint: str | None = Field(None, description="BigQuery: another API endpoint (tests, proxies).",
                                    json_schema_extra={"flag": "--bq-endpoint", "metavar": "URL"})
    max_bytes_billed: int | None = Field(None, ge=1, description="BigQuery: refuse (after a dry run) to process more than this.",
                                         json_schema_extra={"flag": "--max-bytes-billed", "metavar": "BYTES"})


class BigQueryEngine(Engine):
    """The audit as one BigQuery statement over one invoice month of the GCP billing export table."""

    name = "bigquery"
    Options = BigQueryOptions

    def source(self, store: Store, options: Any) -> str | None:
        assert isinstance(options, BigQueryOptions)
        return options.bq_table

    def run(self, store: Store, rules: Sequence[Rule], cfg: Config, period: str | None, basis: str,
            params: dict[str, Any], checkpoint: dict[str, Any] | None, options: Any) -> EngineRunResult:
        from billing_audit.engines import pipeline

        assert isinstance(options, BigQueryOptions)
        if not options.bq_table or not period:
            raise BillingAuditError("--engine bigquery needs --bq-table PROJECT.DATASET.TABLE and --period YYYY-MM")
        sql = pipeline.engine_sql("bigquery", rules, cfg, period, basis, params, checkpoint)
        project = options.bq_project or options.bq_table.split(".")[0]
        client = make_client(project, api_endpoint=options.bq_endpoint)
        rows, scanned = run(client, options.bq_table, sql, period, options.max_bytes_billed)
        return EngineRunResult(rows, sql, scanned, options.bq_table)
