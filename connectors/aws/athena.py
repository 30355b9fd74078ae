"""Athena: the audit query where the AWS export's Glue table is, returning only aggregates.

The lines are the CUR 2.0 table (``kind="cur2"``) or the AWS FOCUS 1.2 table (``kind="focus"``) that the
Data Exports Athena integration creates, partitioned by ``billing_period`` ('YYYY-MM').  One statement runs:
``WITH line_items AS (<mapping>), <the pipeline's steps> SELECT ...`` (Trino SQL), where the mapping is
the connector's own SELECT (connectors/aws/cur2.py, connectors/focus/formats.py), rendered for the Glue table
the format declares (``Cur2.glue_table``, ``AwsFocus.glue_table``), cut down to the canonical columns the pipeline
and the rules read, with these differences from a local ingest:

* ``Tags``: keys trimmed, lower-cased and stripped of ``user_``/``user:``; blank values dropped; keys that
  differ only by case merged (which value wins is Athena's map order, not the file's);
* ``x_LineItemId``: CUR 2.0 ``identity_line_item_id`` + ``identity_time_interval``; FOCUS has no line id, so
  a hash of the row's scalar columns in table order, the delivery columns (``billing_period``, ...) left out
  (identical rows share it, which changes no aggregate);
* map lookups use ``ELEMENT_AT`` (a missing key is NULL, not an error); absent source columns are NULL.

The core imports no cloud SDK: :func:`run` takes a boto3 Athena client (or anything with its methods).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal

import sqlglot
from pydantic import Field
from sqlglot import exp

from billing_audit import schema
from billing_audit.config import Config
from billing_audit.engines import pipeline
from billing_audit.engines.base import Engine, EngineOptions, EngineRunResult
from billing_audit.engines.portable import NotPortable, to_engine
from billing_audit.errors import BillingAuditError
from billing_audit.formats import NUM
from billing_audit.rules import Rule
from billing_audit.sql import lit
from connectors.aws.cur2 import Cur2
from connectors.focus.formats import AwsFocus

if TYPE_CHECKING:
    from billing_audit.store import Store

KINDS = ("cur2", "focus")


# The Glue tables' columns are the formats' own declarations (Cur2.glue_table, AwsFocus.glue_table: Glue name and
# type, in table order); a column the mapping reads that is not there is NULL (FOCUS 1.0's x_usagetype, Azure's x_ columns).
GLUE_FORMATS: dict[str, Cur2 | AwsFocus] = {"cur2": Cur2(), "focus": AwsFocus()}
_GLUE_SCALARS = {"string": "VARCHAR", "double": "DOUBLE", "timestamp": "TIMESTAMP", "bigint": "BIGINT", "int": "INTEGER",
                 "boolean": "BOOLEAN", "date": "DATE"}


def duck_type(glue: str) -> str:
    """A Glue (Hive) column type as the DuckDB type the connectors' mappings are rendered for: ``map<string,double>`` is
    ``MAP(VARCHAR, DOUBLE)``."""
    t = glue.strip().lower()
    if t.startswith("map<") and t.endswith(">"):
        key, value = t[4:-1].split(",", 1)
        return f"MAP({duck_type(key)}, {duck_type(value)})"
    if t not in _GLUE_SCALARS:
        raise BillingAuditError(f"Glue column type {glue!r}: not one the Athena mapping knows")
    return _GLUE_SCALARS[t]


def glue_table(kind: str) -> dict[str, str]:
    """The Glue table of `kind`, in table order: column name (the format's Glue naming) -> DuckDB type."""
    if kind not in GLUE_FORMATS:
        raise BillingAuditError(f"Athena table kind {kind!r}: choose one of {', '.join(KINDS)}")
    fmt = GLUE_FORMATS[kind]
    return {fmt.normalize_name(name): duck_type(typ) for name, typ in fmt.glue_table}


_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?")
_PERIOD = re.compile(r"\d{4}-\d{2}")


def _tags(col: str, strip: str) -> str:
    """DuckDB-parsable, Trino-only: a map column's tags normalised, duplicate keys (by case) merged."""
    val = f"TRIM(element_at({col}, k))"
    key = f"LOWER(TRIM(regexp_replace(k, '{strip}', '')))"
    keep = f"{val} <> '' AND {key} <> ''"
    entries = f"transform(filter(map_keys({col}), lambda k: {keep}), lambda k: row({key}, {val}))"
    return f"transform_values(multimap_from_entries({entries}), lambda k, v: v[1])"


def _focus_id(columns: Sequence[str]) -> str:
    parts = ", ".join(f"COALESCE(CAST({c} AS VARCHAR), '')" for c in columns)
    return f"'aws-focus-' || md5(concat_ws('|', {parts}))"


@dataclass(frozen=True)
class Source:
    """How one Glue table kind maps to the canonical columns."""

    kind: str
    table_columns: tuple[str, ...]
    types: dict[str, str]  # column -> DuckDB type
    maps: frozenset[str]  # the table's map columns
    select: str  # the connector's DuckDB mapping, rendered for the table's column types
    tags: str
    line_id: str


def _source(kind: str) -> Source:
    cols = glue_table(kind)
    fmt = GLUE_FORMATS[kind]
    maps = frozenset(c for c, t in cols.items() if t.startswith("MAP"))
    if kind == "cur2":
        tags = _tags("resource_tags", "(?i)^(resource_?tags[_/])?(user[:_])?")
        line_id = "'aws-' || COALESCE(identity_line_item_id, '') || '-' || COALESCE(identity_time_interval, '')"
    else:  # FOCUS has no line id: the line's own scalar columns, in table order
        tags = _tags("tags", "(?i)^\\s*user[:_]")
        line_id = _focus_id([c for c in cols if c not in maps and c not in fmt.glue_delivery_columns])
    return Source(kind, tuple(cols), cols, maps, fmt.render(cols), tags, line_id)


def referenced_columns(sql: str | exp.Expression) -> set[str]:
    """The canonical columns a DuckDB query reads (all of them when it selects ``*``)."""
    tree = sqlglot.parse_one(sql, read="duckdb") if isinstance(sql, str) else sql
    for star in tree.find_all(exp.Star):
        src = star.parent.args.get("from_") if isinstance(star.parent, exp.Select) else None
        if src is not None and isinstance(src.this, exp.Table) and src.this.name.lower() == "line_items":
            return set(schema.COLUMN_NAMES)
    by_lower = {c.lower(): c for c in schema.COLUMN_NAMES}
    return {by_lower[c.name.lower()] for c in tree.find_all(exp.Column) if c.name.lower() in by_lower}


def mapping_sql(table: str, kind: str, period: str | None, columns: set[str] | None = None) -> exp.Select:
    """The DuckDB-dialect SELECT of the canonical `columns` (default: all it can map) from the Glue table,
    pruned to the ``billing_period`` partition of `period`.  Raises NotPortable for a column it cannot map."""
    if not _TABLE_NAME.fullmatch(table):
        raise BillingAuditError(f"Athena table {table!r}: expected name or database.name")
    if period is not None and not _PERIOD.fullmatch(period):
        raise BillingAuditError(f"--period {period!r}: expected YYYY-MM")
    src = _source(kind)
    rendered = sqlglot.parse_one(src.select, read="duckdb")
    assert isinstance(rendered, exp.Select)
    given = {p.alias_or_name: p for p in rendered.expressions if p.alias_or_name != "_row"}
    given["Tags"] = sqlglot.parse_one(src.tags, read="duckdb").as_("Tags")
    given["x_LineItemId"] = sqlglot.parse_one(src.line_id, read="duckdb").as_("x_LineItemId")
    given["x_Provider"] = exp.Literal.string("aws").as_("x_Provider")
    wanted = columns if columns is not None else set(given)
    missing = sorted(wanted - set(given))
    if missing:
        raise NotPortable(f"the Athena {kind} mapping has no {', '.join(missing)}")
    present = set(src.table_columns)
    # Glue string columns the format reads as numbers (locally parsed before the mapping sees them): every
    # reference reads them as the local reader does ('' and blanks are no value; '1.2E-5' is a number)
    declared = GLUE_FORMATS[kind].columns
    numeric_text = frozenset(c for c, t in src.types.items() if t == "VARCHAR" and declared.get(c) == NUM)
    out = []
    for name in sorted(wanted, key=schema.COLUMN_NAMES.index):
        node = given[name].copy()
        if schema.BY_NAME[name].type == schema.MONEY:  # Glue doubles; the canonical money type
            value = exp.cast(node.unalias(), schema.MONEY)
            node = value.as_(name)
        out.append(_fit(node, present, src.maps, numeric_text))
    sel = exp.select(*out).from_(exp.to_table(table))
    if period is not None:
        sel = sel.where(f"billing_period = {lit(period)}", dialect="duckdb")
    return sel


def _fit(node: exp.Expression, present: set[str], maps: frozenset[str],
         numeric_text: frozenset[str] = frozenset()) -> exp.Expression:
    """Map subscripts as ELEMENT_AT (NULL for a missing key); columns the table lacks as NULL; text columns
    the format reads as numbers as numbers."""
    for br in list(node.find_all(exp.Bracket)):
        if isinstance(br.this, exp.Column) and br.this.name.lower() in maps and len(br.expressions) == 1:
            br.replace(exp.Anonymous(this="element_at", expressions=[br.this.copy(), br.expressions[0].copy()]))
    lambda_vars = {v.name for lam in node.find_all(exp.Lambda) for v in lam.expressions}
    for col in list(node.find_all(exp.Column)):
        name = col.name.lower()
        if not col.table and name not in present and col.name not in lambda_vars:
            col.replace(exp.Null())
        elif not col.table and name in numeric_text and col.name not in lambda_vars:
            col.replace(exp.cast(exp.cast(exp.func("nullif", exp.func("trim", col.copy()), exp.Literal.string("")),
                                          "DOUBLE"), schema.MONEY))
    return node


def athena_sql(table: str, kind: str, period: str | None, rules: Sequence[Rule], cfg: Config, basis: str,
               params: dict[str, Any] | None = None, checkpoint: dict[str, Any] | None = None) -> str:
    """The audit as one Trino statement over the Glue table; a rule that cannot run there raises."""
    pipeline.check_rules(rules, "athena", params)
    tree = sqlglot.parse_one(pipeline.pipeline_sql(rules, cfg, period, basis, checkpoint), read="duckdb")
    assert isinstance(tree, exp.Expression)
    mapping = mapping_sql(table, kind, period, referenced_columns(tree))
    with_ = tree.args.get("with_")
    assert isinstance(with_, exp.With), "the pipeline is one WITH statement"
    with_.set("expressions", [exp.CTE(this=mapping, alias=exp.TableAlias(this=exp.to_identifier("line_items"))),
                              *with_.expressions])
    return to_engine(tree, "athena", pipeline.bound_values(rules, params))


# -- running it ------------------------------------------------------------------------------------

@dataclass
class AthenaResult:
    rows: list[tuple[Any, ...]]
    sql: str
    query_execution_id: str
    data_scanned_bytes: int | None = None
    pages: int = 0
    states: list[str] = field(default_factory=list)


def _bool(s: str) -> bool:
    if s.lower() not in ("true", "false"):
        raise ValueError(s)
    return s.lower() == "true"


def _ts(s: str) -> datetime:
    return datetime.fromisoformat(s.replace(" UTC", ""))


_CONVERT: dict[str, Callable[[str], Any]] = {
    "VARCHAR": str, "DATE": date.fromisoformat, "BOOLEAN": _bool, "BIGINT": int, "DOUBLE": float,
    "DECIMAL(38,12)": Decimal, "TIMESTAMP": _ts,
}


def convert_row(data: Sequence[dict[str, str]]) -> tuple[Any, ...]:
    """An Athena ResultSet row (``Data``: ``VarCharValue`` strings; NULL has none) in RESULT_COLUMNS types."""
    if len(data) != len(pipeline.RESULT_COLUMNS):
        raise BillingAuditError(f"Athena returned {len(data)} columns, expected {len(pipeline.RESULT_COLUMNS)}")
    out = []
    for (name, typ), cell in zip(pipeline.RESULT_COLUMNS, data, strict=True):
        raw = cell.get("VarCharValue")
        try:
            out.append(None if raw is None else _CONVERT[typ](raw))
        except (ValueError, ArithmeticError):
            raise BillingAuditError(f"Athena returned {raw!r} for {name} ({typ})") from None
    return tuple(out)


def _call(what: str, fn: Callable[..., dict[str, Any]], **kw: Any) -> dict[str, Any]:
    try:
        return fn(**kw)
    except Exception as e:  # noqa: BLE001 - botocore's ClientError and friends (the core imports no SDK)
        raise BillingAuditError(f"Athena {what}: {e}") from None


def run(client: Any, database: str, table: str, kind: str, period: str | None, workgroup: str,
        output_location: str, *, rules: Sequence[Rule], cfg: Config, basis: str = "effective",
        params: dict[str, Any] | None = None, checkpoint: dict[str, Any] | None = None,
        poll: float = 1.0, timeout: float = 1800.0, sleep: Callable[[float], None] = time.sleep) -> AthenaResult:
    """Run the audit on Athena: start it, poll until it ends, page through the result rows."""
    sql = athena_sql(table, kind, period, rules, cfg, basis, params, checkpoint)
    qid = _call("StartQueryExecution", client.start_query_execution, QueryString=sql,
                QueryExecutionContext={"Database": database}, WorkGroup=workgroup,
                **({"ResultConfiguration": {"OutputLocation": output_location}} if output_location else {})
                )["QueryExecutionId"]
    states: list[str] = []
    deadline = time.monotonic() + timeout
    while True:
        qe = _call("GetQueryExecution", client.get_query_execution, QueryExecutionId=qid)["QueryExecution"]
        status = qe.get("Status", {})
        state = str(status.get("State"))
        states.append(state)
        if state == "SUCCEEDED":
            break
        if state in ("FAILED", "CANCELLED"):
            reason = status.get("StateChangeReason") or status.get("AthenaError", {}).get("ErrorMessage") or "no reason"
            raise BillingAuditError(f"Athena query {qid} {state}: {reason}")
        if time.monotonic() > deadline:
            _call("StopQueryExecution", client.stop_query_execution, QueryExecutionId=qid)
            raise BillingAuditError(f"Athena query {qid} still {state} after {timeout:.0f} s: stopped it")
        sleep(poll)
    scanned = qe.get("Statistics", {}).get("DataScannedInBytes")
    rows: list[tuple[Any, ...]] = []
    token: str | None = None
    pages = 0
    while True:
        kw: dict[str, Any] = {"QueryExecutionId": qid, **({"NextToken": token} if token else {})}
        page = _call("GetQueryResults", client.get_query_results, **kw)
        data = page["ResultSet"].get("Rows", [])
        if pages == 0 and data:  # the header row: the column names
            names = [c.get("VarCharValue", "").lower() for c in data[0]["Data"]]
            if names != [n.lower() for n, _ in pipeline.RESULT_COLUMNS]:
                raise BillingAuditError(f"Athena result columns {names} are not the audit's")
            data = data[1:]
        rows += [convert_row(r["Data"]) for r in data]
        pages += 1
        token = page.get("NextToken")
        if not token:
            break
    return AthenaResult(rows, sql, qid, int(scanned) if scanned is not None else None, pages, states)


def make_client(profile: str | None, region: str | None, endpoint: str | None) -> Any:
    """A boto3 Athena client (profile, region and endpoint as for `pull aws`)."""
    from connectors.aws.pull import AwsClients

    clients = AwsClients(profile=profile, region=region, endpoint_url=endpoint, what="--engine athena",
                         flags={"region": "--aws-region", "profile": "--aws-profile"})
    client = clients.client("athena")  # no region: one line, not botocore's NoRegionError
    clients.check_credentials()
    return client


class AthenaOptions(EngineOptions):
    athena_table: str | None = Field(None, description="Athena: the CUR 2.0 or FOCUS Glue table.",
                                     json_schema_extra={"flag": "--athena-table", "metavar": "DATABASE.TABLE"})
    athena_kind: Literal["cur2", "focus"] = Field("cur2", description="Athena: what the Glue table holds.",
                                                  json_schema_extra={"flag": "--athena-kind"})
    athena_workgroup: str = Field("primary", description="Athena: the workgroup.",
                                  json_schema_extra={"flag": "--athena-workgroup"})
    athena_output: str | None = Field(None, description="Athena: result location (default: the workgroup's).",
                                      json_schema_extra={"flag": "--athena-output", "metavar": "S3_URL"})
    aws_profile: str | None = Field(None, description="Athena: AWS profile.", json_schema_extra={"flag": "--aws-profile"})
    aws_region: str | None = Field(None, description="Athena: AWS region.", json_schema_extra={"flag": "--aws-region"})
    aws_endpoint: str | None = Field(None, description="Athena: another endpoint (tests, VPC endpoints).",
                                     json_schema_extra={"flag": "--aws-endpoint", "metavar": "URL"})


class AthenaEngine(Engine):
    """The audit as one Trino statement over one ``billing_period`` of a CUR 2.0 or FOCUS Glue table."""

    name = "athena"
    Options = AthenaOptions

    def source(self, store: Store, options: Any) -> str | None:
        assert isinstance(options, AthenaOptions)
        return options.athena_table

    def run(self, store: Store, rules: Sequence[Rule], cfg: Config, period: str | None, basis: str,
            params: dict[str, Any], checkpoint: dict[str, Any] | None, options: Any) -> EngineRunResult:
        assert isinstance(options, AthenaOptions)
        if not options.athena_table or not period or "." not in options.athena_table:
            raise BillingAuditError("--engine athena needs --athena-table DATABASE.TABLE and --period YYYY-MM")
        database, table = options.athena_table.split(".", 1)
        client = make_client(options.aws_profile, options.aws_region, options.aws_endpoint)
        res = run(client, database, table, options.athena_kind, period, options.athena_workgroup,
                  options.athena_output or "", rules=rules, cfg=cfg, basis=basis, params=params, checkpoint=checkpoint)
        return EngineRunResult(res.rows, res.sql, res.data_scanned_bytes, options.athena_table)
