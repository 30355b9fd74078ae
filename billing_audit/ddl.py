"""Every table and view the store keeps, in one place: what each module writes into, not how it fills it.

``line_items`` comes from :mod:`billing_audit.schema` (the canonical columns); the bookkeeping tables are the
store's (:mod:`billing_audit.store`), the rule tables and view the tag run's (:mod:`billing_audit.tagging`), the
engine result tables the engine runs' (:mod:`billing_audit.engines.pipeline`).  Derived tables a step rebuilds
from these (line groups, the search index) are created by that step as the result of its query.  Each
statement is idempotent (``IF NOT EXISTS``, ``ADD COLUMN IF NOT EXISTS`` for stores written by older versions).
"""

from __future__ import annotations

from billing_audit import prices, schema
from billing_audit.categories import CATEGORIES
from billing_audit.sql import ident, lit

LINE_ITEMS = schema.create_line_items_sql()  # every canonical column as a table (validate's, the rule cases')

# The store's lines: the table ``line_items_data`` holds the canonical columns some ingested export provides (a
# column joins it, ``ALTER TABLE ... ADD COLUMN``, when an export first provides it), and the view ``line_items``
# gives every canonical column in schema order, NULL where the table has none.  Everything reads the view; the
# store writes the table.  DuckDB pays to append a NULL to every column of a table (about 17 ns a value): a legacy
# CUR leaves 20 canonical columns NULL, about 9% of its ingest (README "Performance").
LINES_TABLE = "line_items_data"
# what every ingest writes (reader.MappedFile.mapped_sql's own columns): the table starts with these
LINES_CORE = ("x_LineItemId", "x_Provider", "x_SourceFile", "x_SourceRow", "x_SourceFormat", "x_IngestId",
              "BillingPeriodStart", "BillingPeriodEnd", "Tags")
LINES_TABLE_DDL = schema.create_line_items_sql(LINES_TABLE, LINES_CORE)


def lines_view_key(present: set[str] | frozenset[str]) -> str:
    """What the view is made from, as its comment: the table's columns and the canonical ones (a version that adds
    a canonical column makes the view again)."""
    return ",".join(sorted(present)) + "|" + ",".join(f"{c.name} {c.type}" for c in schema.COLUMNS)


def lines_view(present: set[str] | frozenset[str]) -> list[str]:
    """The view ``line_items`` over ``line_items_data`` holding the columns ``present``, and its comment."""
    cols = ", ".join(ident(c.name) if c.name in present else f"NULL::{c.type} AS {ident(c.name)}"
                     for c in schema.COLUMNS)
    return [f"CREATE OR REPLACE VIEW line_items AS SELECT {cols} FROM {LINES_TABLE}",
            f"COMMENT ON VIEW line_items IS {lit(lines_view_key(present))}"]


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
        ingested_at TIMESTAMP NOT NULL,
        export VARCHAR,
        file_time TIMESTAMP)""",
    """CREATE TABLE IF NOT EXISTS slices (
        x_Provider VARCHAR NOT NULL,
        BillingAccountId VARCHAR,
        BillingPeriodStart TIMESTAMP,
        ingest_id BIGINT NOT NULL,
        rows BIGINT NOT NULL,
        export VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS file_stats (
        path VARCHAR PRIMARY KEY,
        size BIGINT NOT NULL,
        mtime_ns BIGINT NOT NULL,
        fingerprint VARCHAR NOT NULL,
        ctime_ns BIGINT)""",
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
    # stores written before exports were told apart (their NULL export matches any export)
    "ALTER TABLE deliveries ADD COLUMN IF NOT EXISTS export VARCHAR",
    "ALTER TABLE deliveries ADD COLUMN IF NOT EXISTS file_time TIMESTAMP",
    "ALTER TABLE slices ADD COLUMN IF NOT EXISTS export VARCHAR",
    "ALTER TABLE file_stats ADD COLUMN IF NOT EXISTS ctime_ns BIGINT",
]

# Interruption events read from the providers' logs beside the bills (billing_audit.events): one row per
# provider, resource, time and kind, with the file and record that first delivered it.
EVENT_TABLES = [
    """CREATE TABLE IF NOT EXISTS interruption_events (
        provider VARCHAR NOT NULL,
        resource_id VARCHAR NOT NULL,
        time TIMESTAMP NOT NULL,
        kind VARCHAR NOT NULL,
        source_file VARCHAR NOT NULL,
        source_row BIGINT NOT NULL,
        source_format VARCHAR NOT NULL,
        ingested_at TIMESTAMP NOT NULL,
        PRIMARY KEY (provider, resource_id, time, kind))""",
]

# Price references (billing_audit.prices: the columns and their meaning) and each spot line's on-demand
# equivalent with its provenance (billing_audit.pricing fills it at tag time; ListCost stays the export's).
PRICE_TABLES = [
    "CREATE TABLE IF NOT EXISTS price_references ("
    + ", ".join(f"{name} {typ}" for name, typ, _ in prices.COLUMNS) + ")",
    """CREATE TABLE IF NOT EXISTS spot_od (
        x_LineItemId VARCHAR NOT NULL,
        x_Provider VARCHAR,
        od_cost DECIMAL(38,12),
        od_source VARCHAR,
        od_unit_price DECIMAL(38,12),
        price_key VARCHAR,
        region VARCHAR,
        unit VARCHAR,
        currency VARCHAR,
        quantity DECIMAL(38,12),
        price_ref VARCHAR,
        price_kind VARCHAR,
        price_as_of TIMESTAMP,
        reason VARCHAR,
        run_id BIGINT)""",
    # the bill's own on-demand prices per slice and on-demand key (billing_audit.pricing.bill_slices_sql), as the
    # last tag run found them: the next run re-reads only the changed slices' (billing_audit.incremental)
    """CREATE TABLE IF NOT EXISTS spot_bill (
        p VARCHAR,
        a VARCHAR,
        s TIMESTAMP,
        provider VARCHAR,
        price_key VARCHAR,
        region VARCHAR,
        unit VARCHAR,
        currency VARCHAR,
        cost DECIMAL(38,12),
        qty DECIMAL(38,12),
        n BIGINT,
        first TIMESTAMP,
        last TIMESTAMP,
        run_id BIGINT)""",
]

RULE_TABLES = [
    """CREATE TABLE IF NOT EXISTS rule_hits (
        x_LineItemId VARCHAR NOT NULL,
        rule_id VARCHAR NOT NULL,
        category VARCHAR NOT NULL,
        reason VARCHAR,
        run_id BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS tag_runs (
        run_id BIGINT PRIMARY KEY,
        started_at TIMESTAMP NOT NULL,
        rules VARCHAR[] NOT NULL,
        params VARCHAR,
        hits BIGINT NOT NULL)""",
    "ALTER TABLE tag_runs ADD COLUMN IF NOT EXISTS lines_sig VARCHAR",  # a signature of the lines it tagged
    # what else the run's state was computed from (billing_audit.tagging.state_key: rules, parameters, checkpoint
    # config, code versions; NULL when a rule failed) and the price references it priced with (pricing.prices_key)
    "ALTER TABLE tag_runs ADD COLUMN IF NOT EXISTS state_key VARCHAR",
    "ALTER TABLE tag_runs ADD COLUMN IF NOT EXISTS prices_key VARCHAR",
    # what checkpoint_resources held (rules that read it are slice-local only while it stays the same)
    "ALTER TABLE tag_runs ADD COLUMN IF NOT EXISTS checkpoint_key VARCHAR",
    # the slices (billing_audit.store's `slices`) the last tag run's state was computed from: what changed since
    # is what the next run redoes (billing_audit.incremental)
    """CREATE TABLE IF NOT EXISTS tag_slices (
        x_Provider VARCHAR NOT NULL,
        BillingAccountId VARCHAR,
        BillingPeriodStart TIMESTAMP,
        ingest_id BIGINT NOT NULL,
        rows BIGINT NOT NULL,
        run_id BIGINT NOT NULL)""",
]

# Each line's category for reports: the first in precedence order among its hits.
LINE_CATEGORY = ("arg_min(category, array_position(" + "[" + ", ".join(f"'{c}'" for c in CATEGORIES)
                 + "], category)) AS category")
LINE_CATEGORY_VIEW = (
    "CREATE OR REPLACE VIEW line_categories AS "
    f"SELECT x_LineItemId, {LINE_CATEGORY}, "
    "list(DISTINCT rule_id ORDER BY rule_id) AS rule_ids, list(DISTINCT category ORDER BY category) AS categories "
    "FROM rule_hits GROUP BY x_LineItemId"
)


# The aggregates an engine run returns ({cols}: engines.pipeline.RESULT_COLUMNS).
RESULT_TABLES = """
CREATE TABLE IF NOT EXISTS engine_runs (run_id BIGINT, engine VARCHAR, source VARCHAR, period VARCHAR,
  basis VARCHAR, config_key VARCHAR, started_at TIMESTAMP, bytes_processed BIGINT, sql VARCHAR);
CREATE TABLE IF NOT EXISTS engine_results (run_id BIGINT, {cols});
ALTER TABLE engine_results ADD COLUMN IF NOT EXISTS unpriced DECIMAL(38,12);
ALTER TABLE engine_results ADD COLUMN IF NOT EXISTS od_cost DECIMAL(38,12);
"""
