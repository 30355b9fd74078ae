"""AWS CUR 2.0 (Data Exports): fixed schema with map columns ``product``, ``resource_tags``, ...

Layout: ``<prefix>/<export>/data/BILLING_PERIOD=2026-10/[<execution folder>/]<export>-00001.snappy.parquet``
and ``<prefix>/<export>/metadata/BILLING_PERIOD=2026-10/<export>-Manifest.json``, written after the data
files.  "Create new" mode keeps every refresh in its own timestamped folder; only the newest counts.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime
from pathlib import Path

from billing_audit.formats import (
    NUM,
    RAW,
    TEXT,
    DeliveryHint,
    ExportFormat,
    ManifestReader,
    has_all,
    has_any,
    resolve_keys,
    table_columns,
)
from billing_audit.sql import lit
from connectors.aws.cur import COMMON_COLUMNS, CUR_SELECT, SPOT, _strip_prefix, athena_name, list_cost_sql

# The map columns of the CUR 2.0 table (parquet MAP; JSON object text in the CSV flavour).
MAP_COLUMNS = ("product", "resource_tags", "cost_category", "discount", "tags")

CUR2_COLUMNS: dict[str, str] = {
    **COMMON_COLUMNS,
    "bill_payer_account_name": TEXT,
    "line_item_usage_account_name": TEXT,
    "product_usagetype": TEXT,
    "product_servicecode": TEXT,
    "product_fee_code": TEXT,
    "product_product_family": TEXT,
    "pricing_purchase_option": TEXT,
    # split cost allocation data (EKS/ECS container usage records); absent unless the export includes it
    "split_line_item_parent_resource_id": TEXT,
    "split_line_item_split_cost": NUM,
    "split_line_item_unused_cost": NUM,
    **{c: RAW for c in MAP_COLUMNS},
}

# The Glue table the Data Exports Athena integration creates for a CUR 2.0 export: each column's Glue name and
# Glue type, in the table's order (docs: aws-cur2-and-focus12-columns.tsv).  Three columns that list leaves out
# are top-level CUR 2.0 columns too: line_item_currency_code (a key column of every CUR, billing-formats.md "Legacy
# CUR"; CUR 2.0 only adds columns to those) and product_fee_code / product_usagetype (billing-formats.md "CUR 2.0":
# product fields that stay top-level beside the ``product`` map).  The Athena engine reads this table.
GLUE_TABLE: tuple[tuple[str, str], ...] = table_columns("""
bill_bill_type string
bill_billing_entity string
bill_billing_period_end_date timestamp
bill_billing_period_start_date timestamp
bill_invoice_id string
bill_payer_account_id string
bill_payer_account_name string
cost_category map<string,string>
discount map<string,double>
discount_bundled_discount double
discount_total_discount double
identity_line_item_id string
identity_time_interval string
line_item_availability_zone string
line_item_currency_code string
line_item_legal_entity string
line_item_line_item_description string
line_item_line_item_type string
line_item_operation string
line_item_product_code string
line_item_resource_id string
line_item_iam_principal string
line_item_net_unblended_cost double
line_item_net_unblended_rate string
line_item_unblended_cost double
line_item_unblended_rate string
line_item_usage_account_id string
line_item_usage_account_name string
line_item_usage_amount double
line_item_usage_end_date timestamp
line_item_usage_start_date timestamp
line_item_usage_type string
pricing_lease_contract_length string
pricing_offering_class string
pricing_public_on_demand_cost double
pricing_public_on_demand_rate string
pricing_purchase_option string
pricing_rate_code string
pricing_term string
pricing_unit string
product map<string,string>
product_fee_code string
product_from_location string
product_instance_type string
product_product_family string
product_region_code string
product_servicecode string
product_sku string
product_to_location string
product_usagetype string
reservation_amortized_upfront_fee_for_billing_period double
reservation_effective_cost double
reservation_end_time string
reservation_net_amortized_upfront_cost_for_usage double
reservation_net_amortized_upfront_fee_for_billing_period double
reservation_net_effective_cost double
reservation_net_recurring_fee_for_usage double
reservation_net_unused_amortized_upfront_fee_for_billing_period double
reservation_net_unused_recurring_fee double
reservation_net_upfront_value double
reservation_reservation_a_r_n string
reservation_start_time string
reservation_unused_amortized_upfront_fee_for_billing_period double
reservation_unused_recurring_fee double
resource_tags map<string,string>
savings_plan_amortized_upfront_commitment_for_billing_period double
savings_plan_end_time string
savings_plan_net_amortized_upfront_commitment_for_billing_period double
savings_plan_net_recurring_commitment_for_billing_period double
savings_plan_net_savings_plan_effective_cost double
savings_plan_offering_type string
savings_plan_payment_option string
savings_plan_purchase_term string
savings_plan_savings_plan_a_r_n string
savings_plan_savings_plan_effective_cost double
savings_plan_start_time string
savings_plan_total_commitment_to_date double
savings_plan_used_commitment double
split_line_item_parent_resource_id string
split_line_item_reserved_usage double
split_line_item_actual_usage double
split_line_item_split_usage double
split_line_item_split_usage_ratio double
split_line_item_split_cost double
split_line_item_unused_cost double
split_line_item_net_split_cost double
split_line_item_net_unused_cost double
split_line_item_public_on_demand_split_cost double
split_line_item_public_on_demand_unused_cost double
tags map<string,string>
source_account_id string
report_name string
data string
billing_period string
""")
# Columns of the table that say which delivery a row came from, not what the line is (billing_period: the partition).
GLUE_DELIVERY_COLUMNS = ("source_account_id", "report_name", "data", "billing_period")

# CUR 2.0 has the account names the legacy report lacks; added to the shared mapping.
_NAMES = "  bill_payer_account_name AS BillingAccountName,\n  line_item_usage_account_name AS SubAccountName,\n"
_ANCHOR = "SELECT\n  _row,\n"
assert _ANCHOR in CUR_SELECT, "CUR_SELECT changed shape: update aws_cur2"

SPOT2 = f"({SPOT} OR coalesce(pricing_purchase_option, '') = 'Spot')"

_EMPTY_TAGS = "MAP {}::MAP(VARCHAR, VARCHAR)"


def _field(cols: dict[str, str], column: str, key: str) -> str:
    """SQL for ``column[key]``: map element, JSON member of text, or NULL when the column is absent."""
    typ = cols.get(column, "")
    k = lit(key)
    if typ.startswith("MAP"):
        return f"CAST({column}[{k}] AS VARCHAR)"
    if typ:
        return f"json_extract_string(ba_json_obj(CAST({column} AS VARCHAR)), '$.' || {k})"
    return "NULL::VARCHAR"


def _tag_column(cols: dict[str, str]) -> str | None:
    """The file's column of tags: ``resource_tags`` (or ``tags``)."""
    return next((c for c in ("resource_tags", "tags") if c in cols), None)


def _tags(cols: dict[str, str]) -> str:
    """Tag map from ``resource_tags`` (or ``tags``): ``user_`` prefix dropped, ``aws_`` kept, keys merged by case."""
    col = _tag_column(cols)
    if col is None:
        return _EMPTY_TAGS
    typ = cols[col]
    if typ.startswith("MAP"):
        entries = (
            f"list_transform(map_entries({col}), "
            "lambda e: {'k': CAST(e.key AS VARCHAR), 'v': CAST(e.value AS VARCHAR)})"
        )
    else:
        entries = f"ba_json_tags(CAST({col} AS VARCHAR))"
    stripped = f"list_transform({entries}, lambda e: {{'k': {_strip_prefix('e.k')}, 'v': e.v}})"
    return f"coalesce(ba_tags({stripped}), {_EMPTY_TAGS})"


def _tags_raw(cols: dict[str, str]) -> str:
    col = _tag_column(cols)
    if col is None or cols[col].startswith("MAP"):
        return "NULL::VARCHAR"
    return f"CASE WHEN ba_tags_malformed(CAST({col} AS VARCHAR)) THEN CAST({col} AS VARCHAR) END"


def _split(cols: dict[str, str]) -> str:
    """Split cost allocation data: a container usage record's parent instance and its part of the instance in
    that hour, ``split_line_item_split_cost`` + ``split_line_item_unused_cost`` (AWS: the instance's unused
    cost is spread over its containers in proportion to their split usage, so the parts add up to the
    instance's amortised cost).  Nothing when the export has no split columns."""
    if "split_line_item_parent_resource_id" not in cols:
        return ""
    parts = [c for c in ("split_line_item_split_cost", "split_line_item_unused_cost") if c in cols]
    weight = " + ".join(f"coalesce({c}, 0)" for c in parts) if parts else "NULL"
    return ("  nullif(split_line_item_parent_resource_id, '') AS x_SplitParentId,\n"
            f"  CASE WHEN nullif(split_line_item_parent_resource_id, '') IS NOT NULL THEN {weight} END AS x_SplitCost,\n")


class Cur2(ExportFormat):
    id = "aws-cur2"
    provider = "aws"
    title = "AWS CUR 2.0 (Data Exports): parquet with map columns product/resource_tags, or its CSV flavour"
    file_kinds = ("parquet", "csv")
    columns = CUR2_COLUMNS
    required = ("line_item_unblended_cost", "line_item_usage_start_date", "line_item_line_item_type")
    priority = 40  # before the legacy CUR, whose columns CUR 2.0 mostly shares
    glue_table = GLUE_TABLE
    glue_delivery_columns = GLUE_DELIVERY_COLUMNS

    def export_of(self, path: Path) -> str | None:
        """The data export: its files lie under ``<prefix>/<export>/data/BILLING_PERIOD=YYYY-MM/``."""
        parts = path.parts
        for i in range(len(parts) - 2, 0, -1):
            if parts[i] == "data" and i + 1 < len(parts) and _PERIOD_DIR.fullmatch(parts[i + 1]):
                return f"aws-data-export:{parts[i - 1]}"
        return None

    def normalize_name(self, name: str) -> str:
        return athena_name(name)

    def detect(self, cols: dict[str, str], kind: str) -> bool:
        cur2 = "bill_payer_account_name" in cols or cols.get("product", "").startswith("MAP")
        return (
            cur2
            and has_all(cols, "line_item_usage_start_date")
            and has_any(cols, "line_item_unblended_cost", "line_item_line_item_type", "identity_line_item_id")
        )

    def tag_inputs(self, cols: dict[str, str]) -> tuple[str, list[str]] | None:
        col = _tag_column(cols)
        return (_tags(cols), [col]) if col else None

    def render(self, cols: dict[str, str]) -> str:
        def product(key: str) -> str:
            return _field(cols, "product", key)

        sql = CUR_SELECT.format(
            product_name=product("product_name"),
            region_id=product("region"),
            region_name=f"coalesce(nullif({product('location')}, ''), {product('region')})",
            product_family=f"coalesce(nullif(product_product_family, ''), {product('product_family')})",
            is_spot=SPOT2,
            tags=_tags(cols),
            **list_cost_sql(cols),
        )
        extra = _NAMES + f"  {_tags_raw(cols)} AS x_TagsRaw,\n" + _split(cols)
        return sql.replace(_ANCHOR, _ANCHOR + extra, 1)


# -- manifests -------------------------------------------------------------------------------------

_PERIOD_DIR = re.compile(r"BILLING_PERIOD=(\d{4}-\d{2})", re.IGNORECASE)
# Execution folders of "create new" mode, and manifest time fields: compact or ISO stamps.
_STAMP = re.compile(
    r"(?P<y>\d{4})-?(?P<mo>\d{2})-?(?P<d>\d{2})T?(?P<h>\d{2}):?(?P<mi>\d{2}):?(?P<s>\d{2})?(?:\.\d+)?Z?"
)
_TIME_FIELDS = (
    "executionTime",
    "exportTime",
    "deliveryTime",
    "createdAt",
    "creationTime",
    "lastUpdatedAt",
    "lastUpdated",
    "timestamp",
)


def _stamp(text: str) -> datetime | None:
    m = _STAMP.search(text)
    if not m:
        return None
    try:
        return datetime(int(m["y"]), int(m["mo"]), int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"] or 0), tzinfo=UTC)
    except ValueError:
        return None


def _period(data: dict[str, object], path: Path) -> str:
    bp = data.get("billingPeriod")
    if isinstance(bp, dict):
        bp = bp.get("start") or bp.get("Start")
    if isinstance(bp, str) and (m := re.match(r"(\d{4})-?(\d{2})", bp)):
        return f"{m[1]}-{m[2]}"
    for part in reversed(path.parts):
        if m := _PERIOD_DIR.fullmatch(part):
            return m[1]
    return ""


def _data_keys(value: object) -> list[str]:
    out: list[str] = []
    for item in value if isinstance(value, list) else []:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            key = next((item[k] for k in ("s3Uri", "uri", "key", "path", "name") if isinstance(item.get(k), str)), None)
            if key:
                out.append(key)
    return out


def _execution_stamp(data_file: Path) -> datetime | None:
    """ "Create new" mode: the folder between ``BILLING_PERIOD=...`` and the file carries the time."""
    parts = data_file.parts[:-1]
    idx = next((i for i in range(len(parts) - 1, -1, -1) if _PERIOD_DIR.fullmatch(parts[i])), None)
    if idx is None:
        return None
    return next((v for part in parts[idx + 1 :] if (v := _stamp(part))), None)


class Cur2Manifest(ManifestReader):
    """CUR 2.0 ``metadata/BILLING_PERIOD=YYYY-MM/<export>-Manifest.json``: ``dataFiles`` list the execution's files.

    The manifest in the billing-period folder is rewritten on every refresh, so it names the period's
    current execution; older "create new" executions keep only their data folders.
    """

    name_pattern = re.compile(r".+-Manifest\.json", re.IGNORECASE)

    def read(self, path: Path) -> DeliveryHint | None:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
        if not isinstance(data, dict) or "dataFiles" not in data:
            return None
        keys = _data_keys(data["dataFiles"])
        files, missing = resolve_keys(path, keys)
        arn = str(data.get("exportArn") or "")
        name = str(
            data.get("exportName") or (arn.rsplit("/", 1)[-1] if arn else "") or path.name[: -len("-Manifest.json")]
        )
        period = _period(data, path)
        execution = str(data.get("executionId") or "")
        if not execution:  # no id: the list of files is what identifies the execution
            execution = "files-" + hashlib.sha256("\n".join(sorted(keys)).encode()).hexdigest()[:16]
        version = next((v for f in _TIME_FIELDS if isinstance(data.get(f), str) and (v := _stamp(data[f]))), None)
        if version is None and files:
            version = _execution_stamp(files[0])
        return DeliveryHint(
            key=f"aws-cur2:{name}:{period}:{execution}",
            files=files,
            export=f"aws-data-export:{name}",
            version=version,
            label=f"{name} {period} execution {execution}",
            newest=bool(_PERIOD_DIR.fullmatch(path.parent.name)),
            missing=missing,
        )


FORMATS = [Cur2()]
MANIFESTS = [Cur2Manifest()]
