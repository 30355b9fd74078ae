"""FOCUS exports: AWS Data Exports "FOCUS 1.0/1.2 with AWS columns", Azure FOCUS cost exports, and
FOCUS 1.0-1.2 files from any other provider.

FOCUS columns map 1:1 onto the canonical ones (which are FOCUS 1.2 names); the three formats share one
SELECT and differ only in how tags, usage type and pricing model are read:

* ``aws-focus``: lower-case column names (Glue), ``tags`` / ``skupricedetails`` as map columns in parquet,
  ``x_operation``, ``x_servicecode``, ``x_discounts`` (1.0 also ``x_usagetype``, ``x_costcategories``).
  Tag keys lose their ``user_`` / ``user:`` prefixes.
* ``azure-focus``: PascalCase FOCUS columns plus ``x_Sku*``, ``x_PricingSubcategory`` (``Spot``),
  ``x_ResourceGroupName``, ... ; ``Tags`` is a JSON object string.
* ``focus``: anything else that is FOCUS; the provider of each line comes from ``ProviderName``.
"""

from __future__ import annotations

from billing_audit.formats import NUM, RAW, TEXT, TIME, Check, ExportFormat, ManifestReader, has_all, has_any, table_columns

# FOCUS 1.0, 1.1 and 1.2 columns the store keeps, with the kind each is parsed as.  Names match
# case-insensitively, so the AWS lower-case Glue names and the Azure PascalCase names both answer.
FOCUS_SOURCE: dict[str, str] = {
    "AvailabilityZone": TEXT,
    "BilledCost": NUM,
    "BillingAccountId": TEXT,
    "BillingAccountName": TEXT,
    "BillingAccountType": TEXT,
    "BillingCurrency": TEXT,
    "BillingPeriodStart": TIME,
    "BillingPeriodEnd": TIME,
    "CapacityReservationId": TEXT,
    "CapacityReservationStatus": TEXT,
    "ChargeCategory": TEXT,
    "ChargeClass": TEXT,
    "ChargeDescription": TEXT,
    "ChargeFrequency": TEXT,
    "ChargePeriodStart": TIME,
    "ChargePeriodEnd": TIME,
    "CommitmentDiscountCategory": TEXT,
    "CommitmentDiscountId": TEXT,
    "CommitmentDiscountName": TEXT,
    "CommitmentDiscountQuantity": NUM,
    "CommitmentDiscountStatus": TEXT,
    "CommitmentDiscountType": TEXT,
    "CommitmentDiscountUnit": TEXT,
    "ConsumedQuantity": NUM,
    "ConsumedUnit": TEXT,
    "ContractedCost": NUM,
    "ContractedUnitPrice": NUM,
    "EffectiveCost": NUM,
    "InvoiceId": TEXT,
    "InvoiceIssuerName": TEXT,
    "ListCost": NUM,
    "ListUnitPrice": NUM,
    "PricingCategory": TEXT,
    "PricingCurrency": TEXT,
    "PricingQuantity": NUM,
    "PricingUnit": TEXT,
    "ProviderName": TEXT,
    "ServiceProviderName": TEXT,  # FOCUS 1.3 name of ProviderName
    "PublisherName": TEXT,
    "RegionId": TEXT,
    "RegionName": TEXT,
    "ResourceId": TEXT,
    "ResourceName": TEXT,
    "ResourceType": TEXT,
    "ServiceCategory": TEXT,
    "ServiceName": TEXT,
    "ServiceSubcategory": TEXT,
    "SkuId": TEXT,
    "SkuMeter": TEXT,
    "SkuPriceDetails": RAW,  # JSON text, or map<string,string> in AWS parquet
    "SkuPriceId": TEXT,
    "SubAccountId": TEXT,
    "SubAccountName": TEXT,
    "SubAccountType": TEXT,
    "Tags": RAW,  # JSON object text, or map<string,string> in AWS parquet
}

# Provider extensions read by the mapping (absent ones are NULL).
EXTENSIONS: dict[str, str] = {
    # AWS
    "x_Operation": TEXT,
    "x_ServiceCode": TEXT,
    "x_UsageType": TEXT,  # FOCUS 1.0 with AWS columns; SkuMeter in 1.2
    # Azure
    "x_SkuMeterCategory": TEXT,
    "x_SkuMeterSubcategory": TEXT,
    "x_SkuMeterName": TEXT,  # 1.0r2; SkuMeter in 1.2
    "x_SkuDetails": TEXT,  # 1.0r2; SkuPriceDetails in 1.2
    "x_PricingSubcategory": TEXT,
    "x_InvoiceId": TEXT,  # 1.0r2; InvoiceId in 1.2
    "x_PricingCurrency": TEXT,  # 1.0r2; PricingCurrency in 1.2
}

COLUMNS: dict[str, str] = {**FOCUS_SOURCE, **EXTENSIONS}

# The Glue table the Data Exports Athena integration creates for an AWS "FOCUS 1.2 with AWS columns" export: each
# column's Glue name and Glue type, in the table's order (docs: aws-cur2-and-focus12-columns.tsv).  Unlike COLUMNS
# (what any FOCUS file may have) it has x_discounts and no FOCUS 1.0 (x_usagetype) or Azure columns; the order
# matters: the Athena engine's line id hashes the scalar columns in it.
AWS_GLUE_TABLE: tuple[tuple[str, str], ...] = table_columns("""
availabilityzone string
billedcost double
billingaccountid string
billingaccountname string
billingaccounttype string
billingcurrency string
billingperiodend timestamp
billingperiodstart timestamp
capacityreservationid string
capacityreservationstatus string
chargecategory string
chargeclass string
chargedescription string
chargefrequency string
chargeperiodend timestamp
chargeperiodstart timestamp
commitmentdiscountcategory string
commitmentdiscountid string
commitmentdiscountname string
commitmentdiscountquantity double
commitmentdiscounttype string
commitmentdiscountunit string
commitmentdiscountstatus string
consumedquantity double
consumedunit string
contractedcost double
contractedunitprice double
effectivecost double
invoiceid string
invoiceissuername string
listcost double
listunitprice double
pricingcategory string
pricingcurrency string
pricingcurrencycontractedunitprice double
pricingcurrencyeffectivecost double
pricingcurrencylistunitprice double
pricingquantity double
pricingunit string
providername string
publishername string
regionid string
regionname string
resourceid string
resourcename string
resourcetype string
servicecategory string
servicename string
servicesubcategory string
skuid string
skumeter string
skupriceid string
skupricedetails map<string,string>
subaccountid string
subaccountname string
subaccounttype string
tags map<string,string>
x_discounts map<string,double>
x_operation string
x_servicecode string
source_account_id string
report_name string
data string
billing_period string
""")
# Columns of the table that say which delivery a row came from, not what the line is (billing_period: the partition).
AWS_GLUE_DELIVERY_COLUMNS = ("source_account_id", "report_name", "data", "billing_period")

# FOCUS 0.5/1.0-preview spellings folded onto the 1.0+ values; an unknown value is kept as written.
PRICING_CATEGORY = """CASE
      WHEN {spot} THEN 'Dynamic'
      WHEN lower(trim(PricingCategory)) IN ('standard', 'on-demand', 'ondemand') THEN 'Standard'
      WHEN lower(trim(PricingCategory)) IN ('committed', 'commitment-based') THEN 'Committed'
      WHEN lower(trim(PricingCategory)) IN ('dynamic', 'spot') THEN 'Dynamic'
      WHEN lower(trim(PricingCategory)) = 'other' THEN 'Other'
      ELSE nullif(trim(PricingCategory), '') END"""

PRICING_MODEL = """coalesce({subcategory}, CASE ({pricing_category})
      WHEN 'Dynamic' THEN 'Spot'
      WHEN 'Standard' THEN 'OnDemand'
      WHEN 'Committed' THEN CASE
        WHEN CommitmentDiscountType ILIKE '%savings%' THEN 'SavingsPlan'
        WHEN CommitmentDiscountType ILIKE '%reserv%' THEN 'Reservation'
        WHEN CommitmentDiscountType ILIKE '%committed use%' THEN 'CUD'
        ELSE 'Commitment' END END)"""

# ProviderName -> the store's provider id (generic FOCUS only; the others use the format's provider).
PROVIDER = """CASE
      WHEN {name} IS NULL THEN NULL
      WHEN lower({name}) IN ('aws', 'amazon') OR {name} ILIKE 'amazon web services%' OR {name} ILIKE 'aws %' THEN 'aws'
      WHEN {name} ILIKE 'microsoft%' OR {name} ILIKE '%azure%' THEN 'azure'
      WHEN {name} ILIKE 'google%' OR lower({name}) = 'gcp' THEN 'gcp'
      ELSE lower({name}) END"""

PROVIDER_NAME = "coalesce(nullif(trim(ProviderName), ''), nullif(trim(ServiceProviderName), ''))"

FOCUS_SELECT = """
SELECT
  _row,{x_provider}
  nullif(AvailabilityZone, '') AS AvailabilityZone,
  BilledCost,
  BillingAccountId,
  nullif(BillingAccountName, '') AS BillingAccountName,
  nullif(BillingAccountType, '') AS BillingAccountType,
  BillingCurrency,
  BillingPeriodStart,
  BillingPeriodEnd,
  nullif(CapacityReservationId, '') AS CapacityReservationId,
  nullif(CapacityReservationStatus, '') AS CapacityReservationStatus,
  ChargeCategory,
  nullif(ChargeClass, '') AS ChargeClass,
  nullif(ChargeDescription, '') AS ChargeDescription,
  nullif(ChargeFrequency, '') AS ChargeFrequency,
  ChargePeriodStart,
  ChargePeriodEnd,
  nullif(CommitmentDiscountCategory, '') AS CommitmentDiscountCategory,
  nullif(CommitmentDiscountId, '') AS CommitmentDiscountId,
  nullif(CommitmentDiscountName, '') AS CommitmentDiscountName,
  CommitmentDiscountQuantity,
  nullif(CommitmentDiscountStatus, '') AS CommitmentDiscountStatus,
  nullif(CommitmentDiscountType, '') AS CommitmentDiscountType,
  nullif(CommitmentDiscountUnit, '') AS CommitmentDiscountUnit,
  ConsumedQuantity,
  nullif(ConsumedUnit, '') AS ConsumedUnit,
  ContractedCost,
  ContractedUnitPrice,
  EffectiveCost,
  coalesce(nullif(InvoiceId, ''), nullif(x_InvoiceId, '')) AS InvoiceId,
  nullif(InvoiceIssuerName, '') AS InvoiceIssuerName,
  {list_cost} AS ListCost,
  CASE WHEN ListUnitPrice = 0 AND {costed} THEN NULL ELSE ListUnitPrice END AS ListUnitPrice,
  {list_source} AS x_ListCostSource,
  {pricing_category} AS PricingCategory,
  coalesce(nullif(PricingCurrency, ''), nullif(x_PricingCurrency, '')) AS PricingCurrency,
  PricingQuantity,
  nullif(PricingUnit, '') AS PricingUnit,
  {provider_name} AS ProviderName,
  nullif(PublisherName, '') AS PublisherName,
  nullif(RegionId, '') AS RegionId,
  nullif(RegionName, '') AS RegionName,
  nullif(ResourceId, '') AS ResourceId,
  nullif(ResourceName, '') AS ResourceName,
  nullif(ResourceType, '') AS ResourceType,
  nullif(ServiceCategory, '') AS ServiceCategory,
  nullif(ServiceName, '') AS ServiceName,
  nullif(ServiceSubcategory, '') AS ServiceSubcategory,
  nullif(SkuId, '') AS SkuId,
  nullif(SkuMeter, '') AS SkuMeter,
  {sku_price_details} AS SkuPriceDetails,
  nullif(SkuPriceId, '') AS SkuPriceId,
  nullif(SubAccountId, '') AS SubAccountId,
  nullif(SubAccountName, '') AS SubAccountName,
  nullif(SubAccountType, '') AS SubAccountType,
  {usage_type} AS x_UsageType,
  {operation} AS x_Operation,
  {pricing_model} AS x_PricingModel,
  {tags} AS Tags,
  {tags_raw} AS x_TagsRaw
FROM src
"""


def _tags(cols: dict[str, str], key: str) -> tuple[str, str]:
    """(Tags expression, x_TagsRaw expression) for the file's own Tags column type; ``key`` rewrites e.k."""
    kind = cols.get("tags")
    if kind is None:
        return "MAP {}::MAP(VARCHAR, VARCHAR)", "NULL"
    if kind.startswith("MAP"):
        entries = (
            "list_transform(map_entries(Tags), lambda e: {'k': CAST(e.key AS VARCHAR), 'v': CAST(e.value AS VARCHAR)})"
        )
        raw = "NULL"
    elif kind in ("VARCHAR", "JSON"):
        entries = "ba_json_tags(Tags)"
        raw = "CASE WHEN ba_tags_malformed(Tags) THEN Tags END"
    else:  # a struct or other nested value: its JSON form
        entries = "ba_json_tags(CAST(to_json(Tags) AS VARCHAR))"
        raw = "NULL"
    if key != "e.k":
        entries = f"list_transform({entries}, lambda e: {{'k': {key}, 'v': e.v}})"
    return f"ba_tags({entries})", raw


def _sku_price_details(cols: dict[str, str], fallback: str = "NULL") -> str:
    kind = cols.get("skupricedetails")
    if kind is None:
        own = "NULL"
    elif kind in ("VARCHAR", "JSON"):
        own = "nullif(nullif(trim(SkuPriceDetails), ''), '{}')"
    else:  # map<string,string> (AWS parquet) or a struct: its JSON text
        own = "nullif(CAST(to_json(SkuPriceDetails) AS VARCHAR), '{}')"
    return f"coalesce({own}, {fallback})"


# Usage that costs money: a ListCost of 0 (or none) there is no list price.
_COSTED = ("(lower(coalesce(ChargeCategory, '')) = 'usage' AND (coalesce(BilledCost, 0) <> 0 "
           "OR coalesce(EffectiveCost, 0) <> 0))")
_NO_LIST = "'BilledCost (no ListCost in export)'"


def list_cost_sql(cols: dict[str, str]) -> dict[str, str]:
    """ListCost and x_ListCostSource: the file's ListCost, except that 0 or empty on a costed usage line is
    NULL with ``missing: ListCost = 0`` (or ``... empty``); a file without ListCost keeps BilledCost, and says so."""
    if "listcost" not in cols:
        return {"list_cost": "BilledCost", "list_source": _NO_LIST, "costed": _COSTED}
    ok = f"(ListCost IS NOT NULL AND NOT (ListCost = 0 AND {_COSTED}))"
    return {
        "list_cost": f"CASE WHEN {ok} THEN ListCost WHEN {_COSTED} THEN NULL ELSE BilledCost END",
        "list_source": (f"CASE WHEN {ok} THEN 'ListCost' WHEN {_COSTED} THEN CASE WHEN ListCost = 0 "
                        f"THEN 'missing: ListCost = 0' ELSE 'missing: ListCost empty' END ELSE {_NO_LIST} END"),
        "costed": _COSTED,
    }


class _Focus(ExportFormat):
    file_kinds = ("parquet", "csv")
    columns = COLUMNS
    required = ("BilledCost", "ChargePeriodStart", "BillingAccountId")

    # Per-format pieces of FOCUS_SELECT.
    tag_key: str = "e.k"
    spot: str = "false"
    pricing_subcategory: str = "NULL"
    usage_type: str = "nullif(SkuMeter, '')"
    operation: str = "NULL"
    provider_name_default: str = "NULL"
    sku_details_fallback: str = "NULL"
    own_provider: bool = False  # the SELECT outputs x_Provider itself (from ProviderName)

    def checks(self) -> tuple[Check, ...]:
        from connectors.focus.conformance import CHECKS

        return CHECKS

    @staticmethod
    def is_focus(cols: dict[str, str]) -> bool:
        return has_all(cols, "billedcost", "chargeperiodstart", "billingaccountid") and has_any(
            cols, "effectivecost", "chargecategory", "providername", "serviceprovidername"
        )

    def tag_inputs(self, cols: dict[str, str]) -> tuple[str, list[str]] | None:
        return (_tags(cols, self.tag_key)[0], ["Tags"]) if "tags" in cols else None

    def render(self, cols: dict[str, str]) -> str:
        tags, tags_raw = _tags(cols, self.tag_key)
        pricing_category = PRICING_CATEGORY.format(spot=self.spot)
        provider_name = f"coalesce({PROVIDER_NAME}, {self.provider_name_default})"
        x_provider = f"\n  {PROVIDER.format(name=PROVIDER_NAME)} AS x_Provider," if self.own_provider else ""
        return FOCUS_SELECT.format(
            **list_cost_sql(cols),
            x_provider=x_provider,
            pricing_category=pricing_category,
            pricing_model=PRICING_MODEL.format(subcategory=self.pricing_subcategory, pricing_category=pricing_category),
            provider_name=provider_name,
            sku_price_details=_sku_price_details(cols, self.sku_details_fallback),
            usage_type=self.usage_type,
            operation=self.operation,
            tags=tags,
            tags_raw=tags_raw,
        )


class AwsFocus(_Focus):
    id = "aws-focus"
    provider = "aws"
    title = "AWS Data Exports FOCUS 1.0/1.2 with AWS columns (lower-case names, map tags, x_operation, x_servicecode)"
    priority = 45
    tag_key = "regexp_replace(e.k, '^\\s*user[:_]', '', 'i')"
    usage_type = "coalesce(nullif(x_UsageType, ''), nullif(SkuMeter, ''))"
    operation = "nullif(x_Operation, '')"
    provider_name_default = "'AWS'"
    glue_table = AWS_GLUE_TABLE
    glue_delivery_columns = AWS_GLUE_DELIVERY_COLUMNS

    def detect(self, cols: dict[str, str], kind: str) -> bool:
        return self.is_focus(cols) and has_any(cols, "x_servicecode", "x_operation")


class AzureFocus(_Focus):
    id = "azure-focus"
    provider = "azure"
    title = "Azure Cost Management FOCUS export 1.0r2/1.2 (FOCUS columns plus x_SkuMeterCategory, x_PricingSubcategory)"
    priority = 45
    spot = "coalesce(trim(x_PricingSubcategory), '') ILIKE 'spot'"
    # the vocabulary of the Azure cost-details PricingModel, so both Azure formats say the same
    pricing_subcategory = """CASE lower(trim(x_PricingSubcategory))
        WHEN '' THEN NULL
        WHEN 'standard' THEN 'OnDemand'
        WHEN 'spot' THEN 'Spot'
        WHEN 'committed usage' THEN 'Reservation'
        WHEN 'committed spend' THEN 'SavingsPlan'
        ELSE trim(x_PricingSubcategory) END"""
    usage_type = """CASE WHEN coalesce(nullif(x_SkuMeterCategory, ''), nullif(x_SkuMeterSubcategory, ''),
                               nullif(x_SkuMeterName, ''), nullif(SkuMeter, '')) IS NOT NULL
        THEN concat_ws('|', coalesce(x_SkuMeterCategory, ''), coalesce(x_SkuMeterSubcategory, ''),
                       coalesce(nullif(x_SkuMeterName, ''), SkuMeter, '')) END"""
    provider_name_default = "'Microsoft'"
    sku_details_fallback = "nullif(nullif(trim(x_SkuDetails), ''), '{}')"

    def detect(self, cols: dict[str, str], kind: str) -> bool:
        return self.is_focus(cols) and has_any(cols, "x_skumetercategory", "x_resourcegroupname")


class GenericFocus(_Focus):
    id = "focus"
    provider = "focus"  # only when a line has no ProviderName; each line's own provider comes from it
    title = "FOCUS 1.0-1.2 CSV or parquet from any provider (provider read from ProviderName)"
    priority = 90
    own_provider = True
    usage_type = "coalesce(nullif(SkuMeter, ''), nullif(ChargeDescription, ''))"

    def detect(self, cols: dict[str, str], kind: str) -> bool:
        return self.is_focus(cols)


FORMATS = [AwsFocus(), AzureFocus(), GenericFocus()]
MANIFESTS: list[ManifestReader] = []  # AWS and Azure FOCUS exports use the CUR 2.0 / Azure export manifests
