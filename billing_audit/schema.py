"""The canonical line-item columns: FOCUS 1.2 names plus ``x_`` extras.

This module is the one source of truth that every connector maps into and every
rule reads from.  Money and quantities are DECIMAL(38, 12): never DOUBLE.
"""

from __future__ import annotations

from dataclasses import dataclass

from billing_audit.sql import ident

MONEY = "DECIMAL(38,12)"
QUANTITY = "DECIMAL(38,12)"
TEXT = "VARCHAR"
TIME = "TIMESTAMP"  # UTC, without zone
TAGS = "MAP(VARCHAR, VARCHAR)"


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    doc: str


def _c(name: str, type_: str, doc: str = "") -> Column:
    return Column(name, type_, doc)


FOCUS_COLUMNS: tuple[Column, ...] = (
    _c("AvailabilityZone", TEXT),
    _c("BilledCost", MONEY, "what the invoice charges for the line"),
    _c("BillingAccountId", TEXT, "payer account / billing account / billing account id"),
    _c("BillingAccountName", TEXT),
    _c("BillingAccountType", TEXT),
    _c("BillingCurrency", TEXT),
    _c("BillingPeriodStart", TIME),
    _c("BillingPeriodEnd", TIME),
    _c("CapacityReservationId", TEXT),
    _c("CapacityReservationStatus", TEXT),
    _c("ChargeCategory", TEXT, "Usage, Purchase, Tax, Credit, Adjustment"),
    _c("ChargeClass", TEXT, "Correction for refunds and restatements, else NULL"),
    _c("ChargeDescription", TEXT),
    _c("ChargeFrequency", TEXT),
    _c("ChargePeriodStart", TIME),
    _c("ChargePeriodEnd", TIME),
    _c("CommitmentDiscountCategory", TEXT),
    _c("CommitmentDiscountId", TEXT),
    _c("CommitmentDiscountName", TEXT),
    _c("CommitmentDiscountQuantity", QUANTITY),
    _c("CommitmentDiscountStatus", TEXT),
    _c("CommitmentDiscountType", TEXT),
    _c("CommitmentDiscountUnit", TEXT),
    _c("ConsumedQuantity", QUANTITY),
    _c("ConsumedUnit", TEXT),
    _c("ContractedCost", MONEY),
    _c("ContractedUnitPrice", MONEY),
    _c("EffectiveCost", MONEY, "cost after amortisation and discounts"),
    _c("InvoiceId", TEXT),
    _c("InvoiceIssuerName", TEXT),
    _c("ListCost", MONEY, "public on-demand cost of the same usage; see x_ListCostSource"),
    _c("ListUnitPrice", MONEY),
    _c("PricingCategory", TEXT, "Standard, Dynamic (spot), Committed, Other"),
    _c("PricingCurrency", TEXT),
    _c("PricingQuantity", QUANTITY),
    _c("PricingUnit", TEXT),
    _c("ProviderName", TEXT),
    _c("PublisherName", TEXT),
    _c("RegionId", TEXT),
    _c("RegionName", TEXT),
    _c("ResourceId", TEXT),
    _c("ResourceName", TEXT),
    _c("ResourceType", TEXT),
    _c("ServiceCategory", TEXT),
    _c("ServiceName", TEXT),
    _c("ServiceSubcategory", TEXT),
    _c("SkuId", TEXT),
    _c("SkuMeter", TEXT),
    _c("SkuPriceDetails", TEXT, "JSON text"),
    _c("SkuPriceId", TEXT),
    _c("SubAccountId", TEXT, "usage account / subscription / project id"),
    _c("SubAccountName", TEXT),
    _c("SubAccountType", TEXT),
    _c("Tags", TAGS, "keys lower-cased and trimmed, provider prefixes removed"),
)

EXTRA_COLUMNS: tuple[Column, ...] = (
    _c("x_LineItemId", TEXT, "stable id: <provider>-<file fingerprint>-<source row>"),
    _c("x_Provider", TEXT, "aws | azure | gcp"),
    _c("x_SourceFile", TEXT, "path of the ingested file"),
    _c("x_SourceRow", "BIGINT", "1-based record number in the file (header excluded)"),
    _c("x_SourceFormat", TEXT, "format id the file was read as"),
    _c("x_UsageType", TEXT, "AWS usage type / Azure meter category|subcategory|name / GCP SKU"),
    _c("x_Operation", TEXT, "AWS operation / Azure consumed service / GCP service"),
    _c("x_PricingModel", TEXT, "OnDemand, Spot, Reservation, SavingsPlan, CUD ... as the source says"),
    _c("x_LineItemType", TEXT, "the source's own line type"),
    _c("x_ListCostSource", TEXT, "how ListCost was derived"),
    _c("x_TagsRaw", TEXT, "the raw tag string when it could not be parsed"),
    _c("x_ExportTime", TIME, "GCP export_time; when the source says when it wrote the row"),
    _c("x_IngestId", "BIGINT", "the ingest (delivery) that brought the line"),
    _c("x_SplitParentId", TEXT, "a container (Kubernetes pod) usage record: the node it ran on (AWS split cost "
       "allocation data); its money stays the node's line's, it only says the pod's share"),
    _c("x_SplitCost", MONEY, "the pod's part of the node in that charge period as the bill splits it (AWS: split "
       "cost + unused cost); a weight for sharing the node's line, never added to totals"),
)

COLUMNS: tuple[Column, ...] = FOCUS_COLUMNS + EXTRA_COLUMNS
COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS)
BY_NAME: dict[str, Column] = {c.name: c for c in COLUMNS}
MONEY_COLUMNS: tuple[str, ...] = tuple(c.name for c in COLUMNS if c.type == MONEY)


def create_line_items_sql(table: str = "line_items", names: tuple[str, ...] | None = None) -> str:
    """A table of the canonical columns (``names``: those alone, in schema order)."""
    cols = ",\n  ".join(f"{ident(c.name)} {c.type}" for c in COLUMNS if names is None or c.name in names)
    return f"CREATE TABLE IF NOT EXISTS {table} (\n  {cols}\n)"
