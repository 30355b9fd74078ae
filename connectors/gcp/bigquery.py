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

from billing_audit.config import Config
from billing_audit.engines.base import Engine, EngineOptions, EngineRunResult
from billing_audit.engines.pipeline import RESULT_COLUMNS
from billing_audit.engines.portable import to_engine
from billing_audit.errors import BillingAuditError
from billing_audit.rules import Rule
from connectors.gcp import pull as gp

if TYPE_CHECKING:
    from billing_audit.store import Store

WS = r"' \t\n\r\v\f'"  # the whitespace ba_ws trims at ingest


def _num(expr: str) -> str:
    return f"ROUND(CAST(CAST({expr} AS STRING) AS BIGNUMERIC), 12)"


def _tags_sql(info: gp.TableInfo) -> str:
    """labels, then tags, then project.labels as one {key, value} array: keys trimmed and lower-cased,
    blank keys and values dropped, one entry per key (the first in that order), sorted by key."""
    sources = [c for c in ("labels", "tags") if info.col(c)] + ["project.labels"]
    union = " UNION ALL ".join(
        f"SELECT {i} AS src, pos, e.key AS key, e.value AS value FROM UNNEST(t.{s}) AS e WITH OFFSET AS pos"
        for i, s in enumerate(sources))
    return f"""ARRAY(
      SELECT AS STRUCT key, ARRAY_AGG(value ORDER BY src, pos LIMIT 1)[OFFSET(0)] AS value
      FROM (SELECT LOWER(TRIM(key, {WS})) AS key, TRIM(value, {WS}) AS value, src, pos FROM ({union}))
      WHERE key IS NOT NULL AND key <> '' AND value IS NOT NULL AND value <> ''
      GROUP BY key ORDER BY key)"""


def fields_sql(info: gp.TableInfo, where: str) -> str:
    """The month's export rows (standard or detailed table), one flat row each (BigQuery SQL)."""
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
    DATETIME(SAFE.PARSE_DATE('%Y%m', TRIM(t.invoice.month))) AS invoice_start,
    {opt("adjustment_info", "t.adjustment_info.description")} AS adjustment_description,
    {opt("consumption_model", "t.consumption_model.description")} AS consumption_model_description,
    {opt("resource", "t.resource.name")} AS resource_name,
    {opt("resource", "t.resource.global_name")} AS resource_global_name,
    COALESCE((SELECT SUM({_num("c.amount")}) FROM UNNEST(t.credits) AS c), 0) AS credit_total,
    EXISTS(SELECT 1 FROM UNNEST(t.credits) AS c
           WHERE c.type IN ('COMMITTED_USAGE_DISCOUNT', 'COMMITTED_USAGE_DISCOUNT_DOLLAR_BASE')) AS has_cud_credit,
    {_tags_sql(info)} AS tags
  FROM {info.ref.quoted} AS t
  WHERE {where}
) AS r"""


# The canonical columns the rules and the pipeline read, from gcp_fields (DuckDB SQL; see connectors/gcp.py).
LINES_SQL = r"""
SELECT
  x_LineItemId,
  'gcp' AS x_Provider,
  billing_account_id AS BillingAccountId,
  invoice_start AS BillingPeriodStart,
  'Google Cloud' AS ProviderName,
  coalesce(nullif(seller_name, ''), 'Google Cloud') AS PublisherName,
  project_id AS SubAccountId,
  project_name AS SubAccountName,
  usage_start_time AS ChargePeriodStart,
  usage_end_time AS ChargePeriodEnd,
  coalesce(cost, 0) + credit_total AS BilledCost,
  coalesce(cost, 0) + credit_total AS EffectiveCost,
  cost AS ContractedCost,
  coalesce(cost_at_list, cost) AS ListCost,
  currency AS BillingCurrency,
  currency AS PricingCurrency,
  charge_category AS ChargeCategory,
  CASE WHEN cost_type = 'adjustment' THEN 'Correction' END AS ChargeClass,
  CASE WHEN coalesce(adjustment_description, '') = '' THEN sku_description
       WHEN sku_description IS NULL THEN adjustment_description
       ELSE sku_description || ': ' || adjustment_description END AS ChargeDescription,
  CASE WHEN is_commitment_fee THEN 'Recurring' ELSE 'Usage-Based' END AS ChargeFrequency,
  CASE WHEN charge_category NOT IN ('Usage', 'Purchase') THEN NULL
       WHEN is_commitment_fee THEN 'Standard'
       WHEN is_spot THEN 'Dynamic'
       WHEN is_committed THEN 'Committed'
       ELSE 'Standard' END AS PricingCategory,
  CASE WHEN is_spot THEN 'Spot'
       WHEN nullif(consumption_model_description, '') IS NOT NULL
            AND consumption_model_description <> 'Default' THEN consumption_model_description
       WHEN is_committed OR is_commitment_fee THEN 'CUD'
       WHEN cost_type = 'regular' THEN 'OnDemand' END AS x_PricingModel,
  usage_amount AS ConsumedQuantity,
  usage_unit AS ConsumedUnit,
  usage_pricing_amount AS PricingQuantity,
  usage_pricing_unit AS PricingUnit,
  nullif(location_region, '') AS RegionId,
  coalesce(nullif(location_region, ''), nullif(location_location, '')) AS RegionName,
  nullif(location_zone, '') AS AvailabilityZone,
  nullif(resource_global_name, '') AS ResourceId,
  nullif(resource_name, '') AS ResourceName,
  service_description AS ServiceName,
  CASE WHEN cost_type IN ('tax', 'rounding_error') THEN 'Other'
       WHEN regexp_matches(lower(coalesce(sku_description, '')), 'data transfer|egress|network .* out|load balanc')
            OR service_description IN ('Networking', 'Cloud CDN', 'Cloud DNS', 'Cloud NAT', 'Cloud Interconnect')
         THEN 'Networking'
       WHEN service_description IN ('Cloud Storage', 'Filestore', 'Cloud Storage for Firebase')
            OR (service_description = 'Compute Engine'
                AND regexp_matches(lower(coalesce(sku_description, '')),
                                   'pd capacity|storage pd|snapshot|local storage|hyperdisk'))
         THEN 'Storage'
       WHEN service_description IN ('Compute Engine', 'Kubernetes Engine', 'Cloud TPU', 'Cloud Run', 'Cloud Functions',
                                    'App Engine', 'Batch', 'Cloud Batch') THEN 'Compute'
       WHEN service_description IN ('Vertex AI', 'Cloud Machine Learning Engine', 'AI Platform', 'Gemini API')
         THEN 'AI and Machine Learning'
       WHEN service_description IN ('BigQuery', 'Dataflow', 'Dataproc', 'Pub/Sub', 'Looker') THEN 'Analytics'
       WHEN service_description IN ('Cloud SQL', 'Cloud Spanner', 'Cloud Bigtable', 'Cloud Firestore', 'AlloyDB',
                                    'Cloud Memorystore for Redis') THEN 'Databases'
       WHEN service_description IN ('Cloud Logging', 'Cloud Monitoring', 'Stackdriver Logging',
                                    'Stackdriver Monitoring') THEN 'Management and Governance'
       ELSE 'Other' END AS ServiceCategory,
  sku_id AS SkuId,
  CAST(NULL AS VARCHAR) AS SkuMeter,
  sku_description AS x_UsageType,
  service_description AS x_Operation,
  cost_type AS x_LineItemType,
  export_time AS x_ExportTime,
  tags AS Tags
FROM (
  SELECT *,
    CASE WHEN cost_type = 'tax' THEN 'Tax'
         WHEN cost_type IN ('adjustment', 'rounding_error') THEN 'Adjustment'
         WHEN coalesce(cost, 0) = 0 AND credit_total <> 0 THEN 'Credit'
         WHEN is_commitment_fee THEN 'Purchase'
         WHEN cost_type = 'regular' OR cost_type IS NULL THEN 'Usage'
         ELSE 'Adjustment' END AS charge_category
  FROM (
    SELECT *,
      regexp_matches(lower(coalesce(sku_description, '')), '\b(spot|preemptible)\b')
        OR lower(coalesce(consumption_model_description, '')) LIKE '%spot%' AS is_spot,
      has_cud_credit
        OR lower(coalesce(consumption_model_description, '')) LIKE '%commit%'
        OR lower(coalesce(consumption_model_description, '')) LIKE '%cud%' AS is_committed,
      lower(coalesce(sku_description, '')) LIKE 'commitment%' AS is_commitment_fee
    FROM gcp_fields) AS d
) AS c
"""


def lines_sql() -> str:
    """LINES_SQL as BigQuery SQL."""
    return to_engine(LINES_SQL, "bigquery")


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
