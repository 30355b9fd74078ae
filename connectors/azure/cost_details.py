"""Azure Cost Management cost-details exports: EA (PascalCase, old and new names), MCA (camelCase) and
pay-as-you-go (MOSP) usage details, schema 2019-11-01 (PascalCase or camelCase).

One mapping covers every agreement: column names are matched case-insensitively, localised headers
(``Abonnement-GUID (SubscriptionGuid)``) answer to the English name in parentheses, and where
agreements or vintages spell a column differently both spellings are declared and coalesced in the
SELECT.  Runs are grouped by the export's ``manifest.json`` (or the legacy ``_manifest.json``).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar

from billing_audit.formats import (
    NUM,
    TEXT,
    TIME,
    DeliveryHint,
    ExportFormat,
    LayoutReader,
    ManifestReader,
    has_all,
    has_any,
    resolve_keys,
    row_error,
)
from billing_audit.sql import lit

# Declared source columns (lower-case; matching is case-insensitive).  Where two
# names mean the same thing, the comment says which agreement or vintage uses which.
COLUMNS: dict[str, str] = {
    # billing account and period
    "billingaccountid": TEXT,
    "billingaccountname": TEXT,
    "enrollmentnumber": TEXT,  # older EA files
    "billingprofileid": TEXT,  # MCA
    "billingprofilename": TEXT,
    "billingperiodstartdate": TIME,
    "billingperiodenddate": TIME,
    "invoiceid": TEXT,  # MCA
    # subscription
    "subscriptionid": TEXT,  # new EA and MCA: the GUID; old EA: a number
    "subscriptionguid": TEXT,  # old EA: the GUID
    "subscriptionname": TEXT,
    # when
    "date": TIME,  # M/D/YYYY or ISO
    "usagedatetime": TIME,  # MOSP 2019-11-01
    # what
    "productname": TEXT,  # new EA, MCA
    "product": TEXT,  # old EA
    "metercategory": TEXT,
    "metersubcategory": TEXT,
    "metername": TEXT,
    "meterid": TEXT,
    "meterregion": TEXT,
    "servicefamily": TEXT,
    "consumedservice": TEXT,
    "unitofmeasure": TEXT,
    "quantity": NUM,
    "usagequantity": NUM,  # MOSP
    # money
    "costinbillingcurrency": NUM,  # new EA, MCA
    "cost": NUM,  # old EA
    "pretaxcost": NUM,  # MOSP 2019-11-01 and legacy usage-details API files
    "billingcurrencycode": TEXT,  # new EA
    "billingcurrency": TEXT,  # old EA, MCA
    "currency": TEXT,  # MOSP and some legacy files
    "pricingcurrency": TEXT,  # MCA
    "exchangeratepricingtobilling": NUM,  # MCA
    "effectiveprice": NUM,
    "unitprice": NUM,
    "paygprice": NUM,  # EA: billing currency; MCA: pricing currency
    "paygcostinbillingcurrency": NUM,  # MCA
    "resourcerate": NUM,  # MOSP: the pay-as-you-go (retail) unit price
    "offerid": TEXT,  # MOSP: MS-AZR-0003P ...
    # charge
    "chargetype": TEXT,
    "frequency": TEXT,
    "pricingmodel": TEXT,
    "publishername": TEXT,
    "publishertype": TEXT,
    # commitment discounts
    "benefitid": TEXT,
    "benefitname": TEXT,
    "reservationid": TEXT,
    "reservationname": TEXT,
    # where
    "resourceid": TEXT,
    "instanceid": TEXT,  # old EA, MOSP
    "resourcetype": TEXT,  # MOSP
    "resourcename": TEXT,
    "resourcelocation": TEXT,
    "availabilityzone": TEXT,
    "tags": TEXT,
}

# ServiceCategory from MeterCategory (FOCUS 1.2 values).
_CATEGORY = {
    "Compute": (
        "Virtual Machines",
        "Virtual Machines Licenses",
        "Cloud Services",
        "Azure Kubernetes Service",
        "Container Instances",
        "Batch",
        "Functions",
        "Azure App Service",
        "App Service",
        "Azure Container Apps",
        "Azure Spring Apps",
        "Azure VMware Solution",
        "Service Fabric",
        "Dedicated Host",
    ),
    "Storage": ("Storage", "Backup", "Azure NetApp Files", "Azure Data Box", "Data Lake Store", "Azure Files"),
    "Networking": (
        "Bandwidth",
        "Virtual Network",
        "Load Balancer",
        "VPN Gateway",
        "Azure DNS",
        "DNS",
        "ExpressRoute",
        "Content Delivery Network",
        "Application Gateway",
        "Azure Front Door Service",
        "Network Watcher",
        "Azure Firewall",
        "NAT Gateway",
        "Azure Bastion",
        "IP Addresses",
        "Traffic Manager",
        "Private Link",
    ),
    "AI and Machine Learning": (
        "Azure Machine Learning",
        "Machine Learning Studio",
        "Cognitive Services",
        "Azure OpenAI Service",
        "Azure Cognitive Search",
        "Foundry Models",
        "Foundry Tools",
    ),
    "Databases": (
        "SQL Database",
        "SQL Managed Instance",
        "Azure Cosmos DB",
        "Azure Database for PostgreSQL",
        "Azure Database for MySQL",
        "Azure Database for MariaDB",
        "Redis Cache",
        "Azure Cache for Redis",
    ),
    "Analytics": (
        "Azure Synapse Analytics",
        "Azure Databricks",
        "HDInsight",
        "Azure Data Factory v2",
        "Azure Data Explorer",
        "Event Hubs",
        "Stream Analytics",
        "Microsoft Fabric",
    ),
    "Management and Governance": (
        "Log Analytics",
        "Azure Monitor",
        "Insight and Analytics",
        "Automation",
        "Azure Site Recovery",
        "Advanced Threat Protection",
    ),
    "Security": ("Key Vault", "Microsoft Defender for Cloud", "Security Center", "Sentinel", "Azure DDOS Protection"),
    "Integration": ("Service Bus", "Logic Apps", "API Management", "Event Grid"),
    "Identity": ("Microsoft Entra ID", "Azure Active Directory", "Azure Active Directory B2C"),
}


def _category_case() -> str:
    arms = []
    for cat, names in _CATEGORY.items():
        quoted = ", ".join(lit(n.lower()) for n in names)
        arms.append(f"WHEN lower(metercategory) IN ({quoted}) THEN '{cat}'")
    return "CASE " + " ".join(arms) + " ELSE 'Other' END"


# Spot: the source says so, or a compute meter named "... Spot" or "... Low Priority" (fee meters such as
# "Spot Restart Fee" are fixed-price charges, not spot-priced usage).
SPOT = (
    "(lower(coalesce(pricingmodel, '')) = 'spot' OR ("
    "regexp_matches(coalesce(metername, ''), '(^|\\s)(spot|low priority)(\\s|$)', 'i') "
    "AND NOT regexp_matches(coalesce(metername, '') || ' ' || coalesce(metersubcategory, ''), "
    "'\\b(fee|charges?|restart)\\b', 'i')))"
)
LOW_PRIORITY = "regexp_matches(coalesce(metername, ''), '(^|\\s)low priority(\\s|$)', 'i')"

# The currency columns, in the order they are trusted; a row with none of them is refused.
CURRENCY_COLUMNS = (("billingcurrencycode", "BillingCurrencyCode"), ("billingcurrency", "BillingCurrency"),
                    ("currency", "Currency"))
_CURRENCY = "coalesce(" + ", ".join(f"nullif(trim({c}), '')" for c, _ in CURRENCY_COLUMNS) + ")"

_TAGS = "ba_tags(ba_json_tags(tags))"  # the Tags expression SELECT writes (AzureCostDetails.tag_inputs)

SELECT = """
SELECT
  _row,
  coalesce(nullif(trim(billingaccountid), ''), nullif(trim(enrollmentnumber), ''), _sub) AS BillingAccountId,
  nullif(billingaccountname, '') AS BillingAccountName,
  CASE WHEN nullif(trim(billingaccountid), '') IS NOT NULL THEN 'Billing Account'
       WHEN nullif(trim(enrollmentnumber), '') IS NOT NULL THEN 'Enrollment'
       ELSE 'Subscription' END AS BillingAccountType,
  billingperiodstartdate AS BillingPeriodStart,
  -- Azure's end date is the period's last day; FOCUS ends are exclusive
  CASE WHEN billingperiodenddate = date_trunc('day', billingperiodenddate)
       THEN billingperiodenddate + INTERVAL 1 DAY ELSE billingperiodenddate END AS BillingPeriodEnd,
  nullif(invoiceid, '') AS InvoiceId,
  'Microsoft' AS InvoiceIssuerName,
  'Microsoft' AS ProviderName,
  coalesce(nullif(publishername, ''), 'Microsoft') AS PublisherName,
  _sub AS SubAccountId,
  nullif(subscriptionname, '') AS SubAccountName,
  'Subscription' AS SubAccountType,
  _date AS ChargePeriodStart,
  _date + INTERVAL 1 DAY AS ChargePeriodEnd,
  _billed AS BilledCost,
  _billed AS EffectiveCost,
  _billed AS ContractedCost,
  CAST(unitprice * _rate AS DECIMAL(38,12)) AS ContractedUnitPrice,
  {list_cost} AS ListCost,
  {list_source} AS x_ListCostSource,
  {list_unit_price} AS ListUnitPrice,
  _currency AS BillingCurrency,
  coalesce(nullif(pricingcurrency, ''), _currency) AS PricingCurrency,
  CASE WHEN _ctl IN ('usage', 'unusedreservation', 'unusedsavingsplan') THEN 'Usage'
       WHEN _ctl = 'purchase' THEN 'Purchase'
       WHEN _ctl IN ('refund', 'credit') THEN 'Credit'
       WHEN _ctl = 'tax' THEN 'Tax'
       WHEN _ct IS NULL THEN 'Usage'
       ELSE 'Adjustment' END AS ChargeCategory,
  CASE WHEN _ctl = 'refund' THEN 'Correction' END AS ChargeClass,
  {description} AS ChargeDescription,
  CASE lower(replace(trim(frequency), ' ', ''))
       WHEN 'onetime' THEN 'One-Time'
       WHEN 'recurring' THEN 'Recurring'
       WHEN 'usagebased' THEN 'Usage-Based'
       ELSE CASE WHEN _ctl = 'purchase' THEN 'One-Time' ELSE 'Usage-Based' END END AS ChargeFrequency,
  CASE WHEN {spot} THEN 'Dynamic'
       WHEN _ctl = 'tax' THEN NULL
       WHEN _pm IN ('Reservation', 'SavingsPlan') AND coalesce(_ctl, 'usage') IN ('usage', 'unusedreservation',
            'unusedsavingsplan') THEN 'Committed'
       ELSE 'Standard' END AS PricingCategory,
  CASE WHEN lower(_pm) = 'ondemand' THEN 'OnDemand'
       WHEN _pm IS NULL AND {spot} THEN CASE WHEN {low_priority} THEN 'Low Priority' ELSE 'Spot' END
       ELSE _pm END AS x_PricingModel,
  CASE WHEN _pm IN ('Reservation', 'SavingsPlan')
       THEN coalesce(nullif(benefitid, ''), nullif(reservationid, '')) END AS CommitmentDiscountId,
  CASE WHEN _pm IN ('Reservation', 'SavingsPlan')
       THEN coalesce(nullif(benefitname, ''), nullif(reservationname, '')) END AS CommitmentDiscountName,
  CASE _pm WHEN 'Reservation' THEN 'Usage' WHEN 'SavingsPlan' THEN 'Spend' END AS CommitmentDiscountCategory,
  CASE _pm WHEN 'Reservation' THEN 'Reservation' WHEN 'SavingsPlan' THEN 'Savings Plan' END AS CommitmentDiscountType,
  _qty AS ConsumedQuantity,
  nullif(unitofmeasure, '') AS ConsumedUnit,
  _qty AS PricingQuantity,
  nullif(unitofmeasure, '') AS PricingUnit,
  nullif(lower(replace(trim(resourcelocation), ' ', '')), '') AS RegionId,
  coalesce(nullif(meterregion, ''), nullif(resourcelocation, '')) AS RegionName,
  nullif(availabilityzone, '') AS AvailabilityZone,
  _rid AS ResourceId,
  coalesce(nullif(resourcename, ''), nullif(regexp_extract(_rid, '([^/]+)/?$', 1), '')) AS ResourceName,
  coalesce(nullif(regexp_extract(_rid, '/providers/([^/]+/[^/]+)/[^/]+/?$', 1), ''), nullif(trim(resourcetype), ''))
    AS ResourceType,
  coalesce(nullif(metercategory, ''), nullif(consumedservice, '')) AS ServiceName,
  {category} AS ServiceCategory,
  nullif(meterid, '') AS SkuId,
  nullif(metername, '') AS SkuMeter,
  nullif(concat_ws('|', coalesce(metercategory, ''), coalesce(metersubcategory, ''), coalesce(metername, '')), '||')
    AS x_UsageType,
  nullif(consumedservice, '') AS x_Operation,
  _ct AS x_LineItemType,
  ba_tags(ba_json_tags(tags)) AS Tags,
  CASE WHEN ba_tags_malformed(tags) THEN tags END AS x_TagsRaw
FROM (SELECT *,
    CAST(CAST(paygprice * _qty AS DECIMAL(38,12)) * _rate AS DECIMAL(38,12)) AS _list,
    CAST(resourcerate * _qty AS DECIMAL(38,12)) AS _rate_list,
    -- a line that costs money in a usage charge: a zero or missing price there is no price
    coalesce(_billed <> 0, false) AND (_ct IS NULL OR _ctl IN ('usage', 'unusedreservation', 'unusedsavingsplan'))
      AS _costed
  FROM (
  SELECT *,
    coalesce(costinbillingcurrency, cost, pretaxcost) AS _billed,
    CASE WHEN {currency} IS NULL THEN {no_currency} ELSE {currency} END AS _currency,
    coalesce("date", usagedatetime) AS _date,
    coalesce(quantity, usagequantity) AS _qty,
    nullif(trim(chargetype), '') AS _ct,
    lower(trim(chargetype)) AS _ctl,
    nullif(replace(trim(pricingmodel), ' ', ''), '') AS _pm,
    coalesce(nullif(subscriptionguid, ''), nullif(subscriptionid, '')) AS _sub,
    coalesce(nullif(resourceid, ''), nullif(instanceid, '')) AS _rid,
    -- prices are in the pricing currency (MCA: often USD); costs in the billing currency
    CASE WHEN nullif(trim(pricingcurrency), '') IS NULL OR trim(pricingcurrency) = {currency} THEN 1
         ELSE exchangeratepricingtobilling END::DECIMAL(38,12) AS _rate
  FROM src
) AS a0) AS a
"""

# Where a list cost can come from, most direct first: (declared column the file must have, the list cost,
# x_ListCostSource, the price column a "missing" reason names, its SQL).
PriceSource = tuple[str, str, str, str, str]
_PAYG_COST = ("paygcostinbillingcurrency", "paygcostinbillingcurrency", "'paygCostInBillingCurrency'",
              "paygCostInBillingCurrency", "paygcostinbillingcurrency")
_PAYG_PRICE = ("paygprice", "_list",
               "CASE WHEN _rate = 1 THEN 'PayGPrice * Quantity' "
               "ELSE 'PayGPrice * Quantity * exchangeRatePricingToBilling' END", "PayGPrice", "paygprice")
_RESOURCE_RATE = ("resourcerate", "_rate_list", "'ResourceRate * UsageQuantity'", "ResourceRate", "resourcerate")
_NO_PRICE = "CostInBillingCurrency (no pay-as-you-go price in export)"


def list_cost_sql(cols: dict[str, str], sources: tuple[PriceSource, ...]) -> tuple[str, str, str]:
    """(ListCost, x_ListCostSource, ListUnitPrice) SQL for a file with these columns.

    The first source whose value is usable wins.  A zero or empty price on a usage line that costs money is
    no price: ListCost is NULL and the source says ``missing: PayGPrice = 0`` (or ``... empty``).  A file
    without any price column keeps its cost as list cost (the source says so), as before.
    """
    present = [src for src in sources if src[0] in cols]
    if not present:
        return "_billed", lit(_NO_PRICE), "NULL::DECIMAL(38,12)"
    ok = [f"({v} IS NOT NULL AND NOT ({v} = 0 AND _costed))" for _, v, *_ in present]
    cost = " ".join(f"WHEN {c} THEN {v}" for c, (_, v, *_) in zip(ok, present, strict=True))
    source = " ".join(f"WHEN {c} THEN {label}" for c, (_, _, label, *_) in zip(ok, present, strict=True))
    _, value, _, name, price = present[0]
    why = (f"CASE WHEN {price} = 0 THEN {lit('missing: ' + name + ' = 0')} "
           f"WHEN {price} IS NULL THEN {lit('missing: ' + name + ' empty')} "
           f"ELSE {lit('missing: ' + name + ' gives a zero list cost')} END")
    list_cost = f"CASE {cost} WHEN _costed THEN NULL ELSE _billed END"
    list_source = f"CASE {source} WHEN _costed THEN {why} ELSE {lit(_NO_PRICE)} END"
    unit = next((p for _, _, _, n, p in present if n != "paygCostInBillingCurrency"), None)
    if unit is None:
        unit_price = "NULL::DECIMAL(38,12)"
    else:
        scale = " * _rate" if unit == "paygprice" else ""
        unit_price = f"CASE WHEN {unit} = 0 AND _costed THEN NULL ELSE CAST({unit}{scale} AS DECIMAL(38,12)) END"
    return list_cost, list_source, unit_price


_LOCALISED = re.compile(r".*\(\s*([A-Za-z][A-Za-z0-9_]*)\s*\)\s*")


def english_name(name: str) -> str:
    """``Abonnement-GUID (SubscriptionGuid)`` -> ``subscriptionguid``: localised headers carry the English name."""
    m = _LOCALISED.fullmatch(name)
    return (m.group(1) if m else name).strip().lower()


def _no_currency(cols: dict[str, str]) -> str:
    named = next((shown for c, shown in CURRENCY_COLUMNS if c in cols), "BillingCurrencyCode")
    have = [shown for c, shown in CURRENCY_COLUMNS if c in cols]
    why = ("the row has no currency (" + ", ".join(have) + " empty)") if have else \
        "the file has no currency column (BillingCurrencyCode, BillingCurrency or Currency)"
    return row_error(named, why)


class AzureCostDetails(ExportFormat):
    id = "azure-cost-details"
    provider = "azure"
    title = "Azure Cost Management cost details (EA PascalCase, old or new names; MCA camelCase): CSV, .csv.gz, parquet"
    file_kinds = ("parquet", "csv")
    columns = COLUMNS
    required: ClassVar[tuple[str, ...]] = ("date", "metercategory")
    price_sources: ClassVar[tuple[PriceSource, ...]] = (_PAYG_COST, _PAYG_PRICE)
    description: ClassVar[str] = "coalesce(nullif(productname, ''), nullif(product, ''))"

    def normalize_name(self, name: str) -> str:
        return english_name(name)

    def detect(self, cols: dict[str, str], kind: str) -> bool:
        return (
            has_all(cols, "date", "metercategory")
            and has_any(cols, "costinbillingcurrency", "cost", "pretaxcost")
            and has_any(cols, "subscriptionid", "subscriptionguid", "metername", "chargetype")
        )

    def tag_inputs(self, cols: dict[str, str]) -> tuple[str, list[str]] | None:
        return (_TAGS, ["tags"]) if "tags" in cols else None

    def render(self, cols: dict[str, str]) -> str:
        list_cost, list_source, unit_price = list_cost_sql(cols, self.price_sources)
        return SELECT.format(
            spot=SPOT, low_priority=LOW_PRIORITY, category=_category_case(), currency=_CURRENCY,
            no_currency=_no_currency(cols), list_cost=list_cost, list_source=list_source,
            list_unit_price=unit_price, description=self.description,
        )

    def export_of(self, path: Path) -> str | None:
        return export_from_path(path)


class AzureUsageDetailsPayg(AzureCostDetails):
    """Pay-as-you-go (MOSP) usage details, schema 2019-11-01: ``SubscriptionGuid``, ``UsageDateTime``,
    ``UsageQuantity``, ``ResourceRate``, ``PreTaxCost``, ``Currency`` (PascalCase or camelCase).

    The subscription is the billing account; the billing period is the usage date's month unless the file
    has billing-period columns; every line is usage; ``ResourceRate`` is the retail price paid, so the list
    cost is ``ResourceRate * UsageQuantity``.
    """

    id = "azure-usage-details-payg"
    title = "Azure pay-as-you-go (MOSP) usage details, schema 2019-11-01 (PascalCase or camelCase): CSV, parquet"
    required = ("usagedatetime", "metercategory", "pretaxcost")
    priority = 45  # before the EA/MCA cost details, whose columns a MOSP file partly shares
    price_sources = (_PAYG_COST, _PAYG_PRICE, _RESOURCE_RATE)
    description = ("coalesce(nullif(productname, ''), nullif(product, ''), "
                   "nullif(concat_ws(' - ', nullif(metercategory, ''), nullif(metersubcategory, ''), "
                   "nullif(metername, '')), ''))")

    def detect(self, cols: dict[str, str], kind: str) -> bool:
        return (
            has_all(cols, "usagedatetime", "metercategory", "pretaxcost")
            and not has_any(cols, "date", "costinbillingcurrency")
        )



_RUN_FILE = re.compile(r"(?P<export>.+)_(?P<run>[0-9a-f]{8}(?:-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})?)"
                       r"\.(?:csv|csv\.gz|parquet|snappy\.parquet)", re.IGNORECASE)


def export_from_path(path: Path) -> str | None:
    """The export a cost file belongs to, from Azure's layouts: a legacy run file ``<export>_<guid>.csv``, or
    ``{yyyyMMdd-yyyyMMdd}/{export}/{yyyyMMddHHmm}/{runId}/part_*`` (the folder after the date range)."""
    m = _RUN_FILE.fullmatch(path.name)
    if m:
        return f"azure-export:{m.group('export')}"
    parts = path.parts
    for i in range(len(parts) - 2, -1, -1):
        if _PERIOD_DIR.fullmatch(parts[i]) and i + 2 < len(parts):
            return f"azure-export:{parts[i + 1]}"
    return None


class LegacyRunFiles(LayoutReader):
    """Older Azure exports (no manifest) add one ``<export>_<guid>`` file per run to the month's folder: each is a
    full snapshot of the month, so each is its own delivery of the export, never parts of one."""

    def split(self, files: list[Path]) -> list[DeliveryHint]:
        hints = []
        for f in files:
            m = _RUN_FILE.fullmatch(f.name)
            if m:
                hints.append(DeliveryHint(key=f"azure-run:{f.parent.resolve()}:{f.name}", files=[f],
                                          export=f"azure-export:{m.group('export')}",
                                          label=f"{m.group('export')} run {m.group('run')} ({f})"))
        return hints


# -- manifests ----------------------------------------------------------------------

_PERIOD_DIR = re.compile(r"(\d{8})-(\d{8})")


def _parse_time(value: object) -> datetime | None:
    """``2026-11-02T05:12:43.1234567Z`` (seven fractional digits) -> aware UTC datetime."""
    if not isinstance(value, str) or not value.strip():
        return None
    s = value.strip().replace("Z", "+00:00")
    s = re.sub(r"(\.\d{6})\d+", r"\1", s)
    try:
        t = datetime.fromisoformat(s)
    except ValueError:
        return None
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


class CostExportManifest(ManifestReader):
    """``manifest.json`` (exports since 2024) and ``_manifest.json`` (older partitioned exports).

    Both list the run's files in ``blobs[].blobName``; ``runInfo.submittedTime`` dates the run.
    With "create new report" every run is a full snapshot of the month, so each run is
    its own delivery and the newest replaces the others.
    """

    name_pattern = re.compile(r"_?manifest\.json", re.IGNORECASE)

    def read(self, path: Path) -> DeliveryHint | None:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
        if not isinstance(data, dict) or "blobs" not in data or "exportConfig" not in data:
            return None  # some other tool's manifest.json
        export = data.get("exportConfig") or {}
        run = data.get("runInfo") or {}
        name = export.get("resourceId") or export.get("exportName") or ""
        period = _period(run, path)
        run_id = run.get("runId") or path.parent.name
        keys = []
        for blob in data.get("blobs") or []:
            key = blob.get("blobName") if isinstance(blob, dict) else None
            if key:
                keys.append(re.sub(r"^[a-z]+://[^/]+/", "", key))  # a full blob URL
        files, missing = resolve_keys(path, keys)
        return DeliveryHint(
            key=f"azure-export:{name}:{period}:{run_id}",
            files=files,
            export=f"azure-export:{export.get('exportName') or name}" + (f"@{name}" if export.get("resourceId") else ""),
            missing=missing,
            version=_parse_time(run.get("submittedTime")),
            label=f"{export.get('exportName', '')} run {run_id}",
        )


def _period(run: dict[str, object], path: Path) -> str:
    start = _parse_time(run.get("startDate"))
    if start is not None:
        return f"{start:%Y%m}"
    for part in reversed(path.parts[:-1]):
        m = _PERIOD_DIR.fullmatch(part)
        if m:
            return m.group(1)[:6]
    return ""


FORMATS = [AzureCostDetails(), AzureUsageDetailsPayg()]
MANIFESTS = [CostExportManifest()]
LAYOUTS = [LegacyRunFiles()]
