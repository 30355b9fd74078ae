"""AWS legacy Cost and Usage Report: Athena parquet (snake_case) and CSV (``lineItem/UsageType``)."""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path

from billing_audit.formats import NUM, TEXT, TIME, DeliveryHint, ExportFormat, ManifestReader, has_all, has_any, resolve_keys
from billing_audit.sql import ident, lit

# The Athena rule: underscore before capitals, lower-case, non-alphanumerics to _, collapse, trim.
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NON_ALNUM = re.compile(r"[^a-z0-9]+")


def athena_name(name: str) -> str:
    """``lineItem/UsageType`` -> ``line_item_usage_type``; ``resourceTags/user:team`` -> ``resource_tags_user_team``."""
    s = _CAMEL.sub("_", name.strip()).lower()
    return _NON_ALNUM.sub("_", s).strip("_")


# Columns both legacy flavours and CUR 2.0 share, with the kind each is parsed as.
COMMON_COLUMNS: dict[str, str] = {
    "identity_line_item_id": TEXT,
    "identity_time_interval": TEXT,
    "bill_invoice_id": TEXT,
    "bill_billing_entity": TEXT,
    "bill_bill_type": TEXT,
    "bill_payer_account_id": TEXT,
    "bill_billing_period_start_date": TIME,
    "bill_billing_period_end_date": TIME,
    "line_item_usage_account_id": TEXT,
    "line_item_line_item_type": TEXT,
    "line_item_usage_start_date": TIME,
    "line_item_usage_end_date": TIME,
    "line_item_product_code": TEXT,
    "line_item_usage_type": TEXT,
    "line_item_operation": TEXT,
    "line_item_availability_zone": TEXT,
    "line_item_resource_id": TEXT,
    "line_item_usage_amount": NUM,
    "line_item_currency_code": TEXT,
    "line_item_unblended_cost": NUM,
    "line_item_net_unblended_cost": NUM,
    "line_item_line_item_description": TEXT,
    "line_item_legal_entity": TEXT,
    "pricing_term": TEXT,
    "pricing_unit": TEXT,
    "pricing_public_on_demand_cost": NUM,
    "pricing_public_on_demand_rate": NUM,
    "product_instance_type": TEXT,
    "product_region_code": TEXT,
    "product_from_location": TEXT,
    "product_to_location": TEXT,
    "product_sku": TEXT,
    "reservation_reservation_a_r_n": TEXT,
    "reservation_effective_cost": NUM,
    "savings_plan_savings_plan_a_r_n": TEXT,
    "savings_plan_savings_plan_effective_cost": NUM,
}

LEGACY_COLUMNS: dict[str, str] = {
    **COMMON_COLUMNS,
    "product_product_name": TEXT,
    "product_region": TEXT,
    "product_location": TEXT,
    "product_product_family": TEXT,
    "product_servicecode": TEXT,
    "product_usagetype": TEXT,
    "pricing_purchase_option": TEXT,
}

# The mapping shared by every CUR flavour: {product_name}, {region_name}, {tags} and
# {product_family} are filled per flavour, {list_cost}, {list_source}, {list_unit_price} by list_cost_sql().
CUR_SELECT = """
SELECT
  _row,
  bill_payer_account_id AS BillingAccountId,
  bill_billing_period_start_date AS BillingPeriodStart,
  bill_billing_period_end_date AS BillingPeriodEnd,
  bill_invoice_id AS InvoiceId,
  coalesce(nullif(bill_billing_entity, ''), 'AWS') AS InvoiceIssuerName,
  'AWS' AS ProviderName,
  coalesce(nullif(line_item_legal_entity, ''), 'Amazon Web Services, Inc.') AS PublisherName,
  line_item_usage_account_id AS SubAccountId,
  line_item_usage_start_date AS ChargePeriodStart,
  line_item_usage_end_date AS ChargePeriodEnd,
  line_item_unblended_cost AS BilledCost,
  CASE line_item_line_item_type
    WHEN 'SavingsPlanCoveredUsage' THEN coalesce(savings_plan_savings_plan_effective_cost, 0)
    WHEN 'DiscountedUsage' THEN coalesce(reservation_effective_cost, 0)
    WHEN 'SavingsPlanNegation' THEN 0
    WHEN 'SavingsPlanRecurringFee' THEN 0
    WHEN 'SavingsPlanUpfrontFee' THEN 0
    WHEN 'RIFee' THEN 0
    ELSE coalesce(line_item_net_unblended_cost, line_item_unblended_cost) END AS EffectiveCost,
  line_item_unblended_cost AS ContractedCost,
  {list_cost} AS ListCost,
  {list_unit_price} AS ListUnitPrice,
  {list_source} AS x_ListCostSource,
  coalesce(nullif(line_item_currency_code, ''), 'USD') AS BillingCurrency,
  CASE WHEN line_item_line_item_type IN ('Usage', 'DiscountedUsage', 'SavingsPlanCoveredUsage', 'SavingsPlanNegation')
         THEN 'Usage'
       WHEN line_item_line_item_type = 'Tax' THEN 'Tax'
       WHEN line_item_line_item_type IN ('Credit', 'Refund', 'BundledDiscount', 'EdpDiscount', 'PrivateRateDiscount',
                                         'DistributorDiscount') THEN 'Credit'
       WHEN line_item_line_item_type IN ('Fee', 'RIFee', 'SavingsPlanRecurringFee', 'SavingsPlanUpfrontFee')
         THEN 'Purchase'
       ELSE 'Adjustment' END AS ChargeCategory,
  CASE WHEN line_item_line_item_type = 'Refund' THEN 'Correction' END AS ChargeClass,
  line_item_line_item_description AS ChargeDescription,
  CASE WHEN line_item_line_item_type IN ('Fee', 'SavingsPlanUpfrontFee') THEN 'One-Time'
       WHEN line_item_line_item_type IN ('RIFee', 'SavingsPlanRecurringFee') THEN 'Recurring'
       ELSE 'Usage-Based' END AS ChargeFrequency,
  CASE WHEN {is_spot} THEN 'Dynamic'
       WHEN line_item_line_item_type IN ('DiscountedUsage', 'SavingsPlanCoveredUsage') THEN 'Committed'
       WHEN line_item_line_item_type IN ('Usage') THEN 'Standard' END AS PricingCategory,
  CASE WHEN {is_spot} THEN 'Spot'
       WHEN line_item_line_item_type = 'DiscountedUsage' THEN 'Reservation'
       WHEN line_item_line_item_type LIKE 'SavingsPlan%' THEN 'SavingsPlan'
       ELSE nullif(pricing_term, '') END AS x_PricingModel,
  CASE WHEN line_item_line_item_type = 'DiscountedUsage' THEN reservation_reservation_a_r_n
       WHEN line_item_line_item_type = 'SavingsPlanCoveredUsage' THEN savings_plan_savings_plan_a_r_n END
    AS CommitmentDiscountId,
  CASE WHEN line_item_line_item_type = 'DiscountedUsage' THEN 'Reserved'
       WHEN line_item_line_item_type = 'SavingsPlanCoveredUsage' THEN 'Savings Plan' END AS CommitmentDiscountType,
  line_item_usage_amount AS ConsumedQuantity,
  pricing_unit AS ConsumedUnit,
  line_item_usage_amount AS PricingQuantity,
  pricing_unit AS PricingUnit,
  coalesce(nullif(product_region_code, ''), nullif({region_id}, '')) AS RegionId,
  {region_name} AS RegionName,
  nullif(line_item_availability_zone, '') AS AvailabilityZone,
  nullif(line_item_resource_id, '') AS ResourceId,
  nullif(line_item_resource_id, '') AS ResourceName,
  CASE WHEN line_item_resource_id LIKE 'i-%' THEN 'Instance'
       WHEN line_item_resource_id LIKE 'arn:aws:s3%' OR line_item_product_code = 'AmazonS3' THEN 'Bucket'
       WHEN line_item_resource_id LIKE 'vol-%' THEN 'Volume' END AS ResourceType,
  coalesce(nullif({product_name}, ''), line_item_product_code) AS ServiceName,
  CASE WHEN line_item_product_code IN ('AmazonEC2', 'AmazonECS', 'AmazonEKS', 'AWSLambda', 'AmazonSageMaker', 'AWSBatch')
         THEN CASE WHEN line_item_usage_type LIKE '%DataTransfer%' OR line_item_usage_type LIKE '%-Out-Bytes%'
                     OR line_item_usage_type LIKE '%-In-Bytes%' THEN 'Networking' ELSE 'Compute' END
       WHEN line_item_product_code IN ('AmazonS3', 'AmazonEFS', 'AmazonFSx', 'AmazonS3GlacierDeepArchive') THEN 'Storage'
       WHEN line_item_product_code IN ('AWSDataTransfer', 'AmazonCloudFront', 'AmazonVPC') THEN 'Networking'
       WHEN line_item_line_item_type = 'Tax' THEN 'Other'
       ELSE 'Other' END AS ServiceCategory,
  product_sku AS SkuId,
  nullif({product_family}, '') AS SkuMeter,
  line_item_usage_type AS x_UsageType,
  line_item_operation AS x_Operation,
  line_item_line_item_type AS x_LineItemType,
  {tags} AS Tags
FROM src
"""

SPOT = (
    "(coalesce(line_item_usage_type, '') LIKE '%SpotUsage%' OR pricing_term = 'Spot' "
    "OR coalesce(line_item_line_item_description, '') ILIKE '% Spot Instance-hour%')"
)


_NO_PRICE = "'line_item_unblended_cost (no public price in export)'"
# usage that costs money: there a zero public price is no price (older CURs: every SpotUsage line)
_COSTED = ("(coalesce(line_item_unblended_cost, 0) <> 0 AND line_item_line_item_type IN "
           "('Usage', 'DiscountedUsage', 'SavingsPlanCoveredUsage'))")


def list_cost_sql(cols: dict[str, str]) -> dict[str, str]:
    """ListCost, x_ListCostSource and ListUnitPrice for a file with these columns.

    ``pricing_public_on_demand_cost`` is the list cost; where it is 0 or empty on a usage line that costs
    money, ListCost is NULL and the source says ``missing: pricing_public_on_demand_cost = 0`` (or
    ``... empty``).  A file without the column keeps the unblended cost as list cost, and says so.
    """
    if "pricing_public_on_demand_cost" not in cols:
        return {"list_cost": "line_item_unblended_cost", "list_source": _NO_PRICE,
                "list_unit_price": "pricing_public_on_demand_rate"}
    od = "pricing_public_on_demand_cost"
    ok = f"({od} IS NOT NULL AND NOT ({od} = 0 AND {_COSTED}))"
    return {
        "list_cost": f"CASE WHEN {ok} THEN {od} WHEN {_COSTED} THEN NULL ELSE line_item_unblended_cost END",
        "list_source": (f"CASE WHEN {ok} THEN '{od}' WHEN {_COSTED} THEN CASE WHEN {od} = 0 "
                        f"THEN 'missing: {od} = 0' ELSE 'missing: {od} empty' END ELSE {_NO_PRICE} END"),
        "list_unit_price": (f"CASE WHEN coalesce(pricing_public_on_demand_rate, 0) = 0 AND NOT {ok} AND {_COSTED} "
                            "THEN NULL ELSE pricing_public_on_demand_rate END"),
    }


def _strip_prefix(expr: str) -> str:
    """Tag keys lose the CUR prefixes: ``user:``, ``user_``, ``resource_tags_user_``."""
    return f"regexp_replace({expr}, '^(resource_?tags[_/])?(user[:_])?', '', 'i')"


_PART_NAME = re.compile(r"(.+?)-\d+(?:\.snappy)?\.(?:csv\.gz|csv|zip|parquet)", re.IGNORECASE)


class CurLegacy(ExportFormat):
    id = "aws-cur"
    provider = "aws"
    title = "AWS legacy Cost and Usage Report: Athena parquet (resource_tags_user_*) or CSV (lineItem/UsageType), .csv.gz/.zip"
    file_kinds = ("parquet", "csv")
    columns = LEGACY_COLUMNS
    required = ("line_item_unblended_cost", "line_item_usage_start_date", "line_item_line_item_type")

    def normalize_name(self, name: str) -> str:
        return athena_name(name)

    def export_of(self, path: Path) -> str | None:
        """The report: its files are ``<report>-<n>.csv.gz`` / ``<report>-0000n.snappy.parquet``."""
        m = _PART_NAME.fullmatch(path.name)
        return f"aws-cur:{m.group(1)}" if m else None

    def detect(self, cols: dict[str, str], kind: str) -> bool:
        if "bill_payer_account_name" in cols or cols.get("product", "").startswith("MAP"):
            return False  # CUR 2.0
        return has_all(cols, "line_item_usage_start_date") and has_any(
            cols, "line_item_unblended_cost", "line_item_line_item_type", "identity_line_item_id"
        )

    def dynamic_columns(self, cols: dict[str, str]) -> dict[str, str]:
        return {c: TEXT for c in cols if c.startswith("resource_tags_")}

    @staticmethod
    def _tags(cols: dict[str, str]) -> tuple[str, list[str]]:
        """(the Tags expression, the tag columns it reads)."""
        tag_cols = sorted(c for c in cols if c.startswith("resource_tags_"))
        if not tag_cols:
            return "MAP {}::MAP(VARCHAR, VARCHAR)", []
        unique = len({_key(c) for c in tag_cols}) == len(tag_cols)  # then no merging is needed
        if unique and len(tag_cols) <= WIDE_TAG_COLUMNS:
            return _unique_tags(tag_cols), tag_cols
        return f"{'ba_tags_unique' if unique else 'ba_tags'}({_tag_entries(tag_cols)})", tag_cols

    def tag_inputs(self, cols: dict[str, str]) -> tuple[str, list[str]] | None:
        tags, tag_cols = self._tags(cols)
        return (tags, tag_cols) if tag_cols else None

    def render(self, cols: dict[str, str]) -> str:
        tags, _ = self._tags(cols)
        return CUR_SELECT.format(
            product_name="product_product_name",
            region_id="product_region",
            region_name="coalesce(nullif(product_location, ''), product_region)",
            product_family="product_product_family",
            is_spot=SPOT,
            tags=tags,
            **list_cost_sql(cols),
        )


def _key(col: str) -> str:
    return lit(_key_text(col))


def _key_text(col: str) -> str:
    return re.sub(r"^resource_tags_(user_)?", "", col)


WIDE_TAG_COLUMNS = 256  # files with more tag columns build the tag list through one string (memory)


def _unique_tags(tag_cols: list[str]) -> str:
    """The tag map of columns whose keys are unique, built directly: what ``ba_tags_unique`` over
    :func:`_tag_entries` gives (the same entries, in column order, empty and NULL values left out), at half its
    cost on a 1M-line CUR (the macro's entries list goes through a list_transform lambda and two trims per tag)."""
    entries = ", ".join(f"{{'key': {_key(c)}, 'value': ba_ws({ident(c)})}}" for c in tag_cols)
    return f"map_from_entries(list_filter([{entries}], lambda e: e.value <> ''))"


def _tag_entries(tag_cols: list[str]) -> str:
    """The list of {k, v} the tag macros read, one entry per tag column, in column order.

    A list literal holds every column's entry for every row: DuckDB materialises it 2,048 rows at a time, so
    10,000 tag columns cost ~0.7 GB per chunk (and a file's first chunks grow with its length).  Past
    ``WIDE_TAG_COLUMNS`` the row's non-empty cells are joined into one string instead (an empty cell is NULL
    and leaves no piece) and split back into entries: the list then holds only the row's non-empty tags.
    Keys are Athena names ([a-z0-9_], never the chr(31) ending a key); pieces are joined by chr(30) and a
    random nonce drawn per mapping, which no value in a file can contain except by a 2^-64 accident.
    """
    if len(tag_cols) <= WIDE_TAG_COLUMNS:
        return "[" + ", ".join(f"{{'k': {_key(c)}, 'v': {ident(c)}}}" for c in tag_cols) + "]"
    sep = lit(chr(30) + secrets.token_hex(8))
    pieces = ", ".join(f"{lit(_key_text(c) + chr(31))} || {ident(c)}" for c in tag_cols)
    return (f"list_transform(list_filter(string_split(concat_ws({sep}, {pieces}), {sep}), lambda p: p <> ''), "
            "lambda p: {'k': substr(p, 1, strpos(p, chr(31)) - 1), 'v': substr(p, strpos(p, chr(31)) + 1)})")


class CurManifest(ManifestReader):
    """Legacy CUR ``<report>-Manifest.json``: ``reportKeys`` list the assembly's files.

    The copy in the billing-period folder names the period's current assembly.
    """

    name_pattern = re.compile(r".+-Manifest\.json", re.IGNORECASE)

    def read(self, path: Path) -> DeliveryHint | None:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
        if "reportKeys" not in data or "assemblyId" not in data:
            return None
        period = data.get("billingPeriod", {}).get("start", "")
        key = f"aws-cur:{data.get('reportName', '')}:{period}:{data['assemblyId']}"
        files, missing = resolve_keys(path, data["reportKeys"])
        in_period_dir = bool(_PERIOD_DIR.fullmatch(path.parent.name))
        current = data["assemblyId"] if in_period_dir else _current_assembly(path)
        return DeliveryHint(
            key=key,
            files=files,
            export=f"aws-cur:{data.get('reportName', '')}",
            label=f"{data.get('reportName', '')} assembly {data['assemblyId']}",
            newest=current == data["assemblyId"],
            outdated=current is not None and current != data["assemblyId"],
            missing=missing,
        )


_PERIOD_DIR = re.compile(r"\d{8}-\d{8}")


def _current_assembly(assembly_manifest: Path) -> str | None:
    """The assembly the billing-period folder's manifest names as current, if it is there."""
    period_dir = assembly_manifest.parent.parent
    if not _PERIOD_DIR.fullmatch(period_dir.name):
        return None
    for cand in period_dir.glob("*-Manifest.json"):
        try:
            data = json.loads(cand.read_text(encoding="utf-8-sig"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("assemblyId"):
            return str(data["assemblyId"])
    return None


FORMATS = [CurLegacy()]
MANIFESTS = [CurManifest()]
