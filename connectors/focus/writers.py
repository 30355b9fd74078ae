"""FOCUS columns as each provider's export writes them, for the synthetic exports (fixtures/gen_focus.py).

The column sets and their order are the providers' own: AWS Data Exports "FOCUS 1.2 with AWS columns"
(lower-case Glue names, map columns in parquet), the Azure Cost Management FOCUS 1.2 export (PascalCase
plus ``x_`` columns, text), the GCP FOCUS 1.0 BigQuery view (text when extracted to CSV).  The delivery
around the files (AWS Data Exports folders and manifest, an Azure export run) is the cloud connector's
``synthetic`` writer.  Not named ``synthetic``: that part name is how ``billing-audit generate`` finds
the providers that write an estate.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import pyarrow as pa

from connectors.synthetic import DMAP, F64, SMAP, STR, TS_MS, csv_bytes

# AWS FOCUS 1.2 with AWS columns, in the order of the Glue table (docs/aws-cur2-and-focus12-columns.tsv,
# second table), with their parquet types (text unless named here).
_AWS_TYPES: dict[str, pa.DataType] = {
    **dict.fromkeys(
        [
            "billedcost", "commitmentdiscountquantity", "consumedquantity", "contractedcost", "contractedunitprice",
            "effectivecost", "listcost", "listunitprice", "pricingcurrencycontractedunitprice",
            "pricingcurrencyeffectivecost", "pricingcurrencylistunitprice", "pricingquantity",
        ], F64),
    **dict.fromkeys(["billingperiodend", "billingperiodstart", "chargeperiodend", "chargeperiodstart"], TS_MS),
    "skupricedetails": SMAP, "tags": SMAP, "x_discounts": DMAP,
}
AWS_FOCUS_12_SCHEMA: list[tuple[str, pa.DataType]] = [(n, _AWS_TYPES.get(n, STR)) for n in [
    "availabilityzone", "billedcost", "billingaccountid", "billingaccountname", "billingaccounttype",
    "billingcurrency", "billingperiodend", "billingperiodstart", "capacityreservationid",
    "capacityreservationstatus", "chargecategory", "chargeclass", "chargedescription", "chargefrequency",
    "chargeperiodend", "chargeperiodstart", "commitmentdiscountcategory", "commitmentdiscountid",
    "commitmentdiscountname", "commitmentdiscountquantity", "commitmentdiscounttype", "commitmentdiscountunit",
    "commitmentdiscountstatus", "consumedquantity", "consumedunit", "contractedcost", "contractedunitprice",
    "effectivecost", "invoiceid", "invoiceissuername", "listcost", "listunitprice", "pricingcategory",
    "pricingcurrency", "pricingcurrencycontractedunitprice", "pricingcurrencyeffectivecost",
    "pricingcurrencylistunitprice", "pricingquantity", "pricingunit", "providername", "publishername", "regionid",
    "regionname", "resourceid", "resourcename", "resourcetype", "servicecategory", "servicename",
    "servicesubcategory", "skuid", "skumeter", "skupriceid", "skupricedetails", "subaccountid", "subaccountname",
    "subaccounttype", "tags", "x_discounts", "x_operation", "x_servicecode",
]]

# The Azure FOCUS cost export (dataVersion 1.2-preview).
AZURE_FOCUS_12_COLUMNS = [
    "BilledCost", "BillingAccountId", "BillingAccountName", "BillingAccountType", "BillingCurrency",
    "BillingPeriodEnd", "BillingPeriodStart", "CapacityReservationId", "CapacityReservationStatus", "ChargeCategory",
    "ChargeClass", "ChargeDescription", "ChargeFrequency", "ChargePeriodEnd", "ChargePeriodStart",
    "CommitmentDiscountCategory", "CommitmentDiscountId", "CommitmentDiscountName", "CommitmentDiscountQuantity",
    "CommitmentDiscountStatus", "CommitmentDiscountType", "CommitmentDiscountUnit", "ConsumedQuantity",
    "ConsumedUnit", "ContractedCost", "ContractedUnitPrice", "EffectiveCost", "InvoiceId", "InvoiceIssuerName",
    "ListCost", "ListUnitPrice", "PricingCategory", "PricingCurrency", "PricingQuantity", "PricingUnit",
    "ProviderName", "PublisherName", "RegionId", "RegionName", "ResourceId", "ResourceName", "ResourceType",
    "ServiceCategory", "ServiceName", "ServiceSubcategory", "SkuId", "SkuMeter", "SkuPriceDetails", "SkuPriceId",
    "SubAccountId", "SubAccountName", "SubAccountType", "Tags", "x_AccountId", "x_AccountName", "x_AccountOwnerId",
    "x_AmortizationClass", "x_BilledCostInUsd", "x_BilledUnitPrice", "x_BillingAccountId", "x_BillingAccountName",
    "x_BillingExchangeRate", "x_BillingExchangeRateDate", "x_BillingProfileId", "x_BillingProfileName",
    "x_ContractedCostInUsd", "x_CostAllocationRuleName", "x_CostCenter", "x_CustomerId", "x_CustomerName",
    "x_EffectiveCostInUsd", "x_EffectiveUnitPrice", "x_InvoiceIssuerId", "x_InvoiceSectionId",
    "x_InvoiceSectionName", "x_ListCostInUsd", "x_PartnerCreditApplied", "x_PartnerCreditRate", "x_PricingBlockSize",
    "x_PricingSubcategory", "x_PricingUnitDescription", "x_PublisherCategory", "x_PublisherId", "x_ResellerId",
    "x_ResellerName", "x_ResourceGroupName", "x_ResourceType", "x_ServiceModel", "x_ServicePeriodEnd",
    "x_ServicePeriodStart", "x_SkuDescription", "x_SkuIsCreditEligible", "x_SkuMeterCategory", "x_SkuMeterId",
    "x_SkuMeterSubcategory", "x_SkuOfferId", "x_SkuOrderId", "x_SkuOrderName", "x_SkuPartNumber", "x_SkuPlanName",
    "x_SkuRegion", "x_SkuServiceFamily", "x_SkuTerm", "x_SkuTier",
]

# The GCP FOCUS 1.0 BigQuery view.
GCP_FOCUS_10_COLUMNS = [
    "AvailabilityZone", "BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency",
    "BillingPeriodEnd", "BillingPeriodStart", "ChargeCategory", "ChargeClass", "ChargeDescription",
    "ChargeFrequency", "ChargePeriodEnd", "ChargePeriodStart", "CommitmentDiscountCategory", "CommitmentDiscountId",
    "CommitmentDiscountName", "CommitmentDiscountStatus", "CommitmentDiscountType", "ConsumedQuantity",
    "ConsumedUnit", "ContractedCost", "ContractedUnitPrice", "EffectiveCost", "InvoiceIssuerName", "ListCost",
    "ListUnitPrice", "PricingCategory", "PricingQuantity", "PricingUnit", "ProviderName", "PublisherName",
    "RegionId", "RegionName", "ResourceId", "ResourceName", "ResourceType", "ServiceCategory", "ServiceName",
    "SkuId", "SkuPriceId", "SubAccountId", "SubAccountName", "Tags",
]


def focus_row(columns: list[str], blank: object, *values: Mapping[str, Any], **kw: Any) -> dict[str, Any]:
    """One line: every column (``blank`` where not given), then ``values`` and ``kw`` in turn."""
    row: dict[str, Any] = dict.fromkeys(columns, blank)
    for v in values:
        row.update(v)
    row.update(kw)
    return row


def azure_time(t: datetime) -> str:
    """A FOCUS date-time as Azure writes it: seven fractional second digits."""
    return f"{t:%Y-%m-%dT%H:%M:%S}.0000000Z"


def bigquery_time(t: datetime) -> str:
    """A TIMESTAMP as a BigQuery CSV extract writes it."""
    return f"{t:%Y-%m-%d %H:%M:%S} UTC"


def focus_csv(columns: list[str], rows: list[dict[str, Any]], *, quote_all: bool, bom: bool) -> bytes:
    """FOCUS lines as CSV text (Azure quotes every value and writes a byte-order mark; a BigQuery extract neither)."""
    return csv_bytes(columns, rows, quote_all=quote_all, bom=bom)
