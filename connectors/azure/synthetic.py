"""Synthetic Azure Cost Management EA cost details at scale (the 2024 EA column set, UTF-8 BOM, M/D/YYYY
dates, decimal strings, ``Tags`` JSON without braces), a "create new report" run folder
``<out>/costexports/ea/20261001-20261031/<export>/<yyyyMMddHHmm>/<runId>/part_K_0001.csv`` with its
``manifest.json``; parts of at most 1M rows.  Restart fees read "Spot Restart Fee".  As in real EA files, spot
meters ("... Spot") are priced at the spot rate and carry no ``PayGPrice`` (the export cannot say what the hours
would have cost on demand: that comes from price references, ``billing-audit prices``).
"""

from __future__ import annotations

import json
import random
import shutil
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from connectors import synthetic
from connectors.synthetic import (
    BOM,
    COUNT,
    DRAWS_SQL,
    HOURLY,
    MODEL_FIELDS,
    RESTART_FEE_PPM,
    TEAMS,
    UNIFORM,
    Pool,
    _copy_parts,
    _flatten,
    _guid,
    _jobs,
    _parts,
    _pick_sql,
    _register,
    csv_bytes,
    hash_str,
    write_json,
)

ROWS_PER_FILE = 1_000_000

EA_COLUMNS = [
    "InvoiceSectionName", "AccountName", "AccountOwnerId", "SubscriptionId", "SubscriptionName", "ResourceGroup",
    "ResourceLocation", "Date", "ProductName", "MeterCategory", "MeterSubCategory", "MeterId", "MeterName",
    "MeterRegion", "UnitOfMeasure", "Quantity", "EffectivePrice", "CostInBillingCurrency", "CostCenter",
    "ConsumedService", "ResourceId", "Tags", "OfferId", "AdditionalInfo", "ServiceInfo1", "ServiceInfo2",
    "ResourceName", "ReservationId", "ReservationName", "UnitPrice", "ProductOrderId", "ProductOrderName", "Term",
    "PublisherType", "PublisherName", "ChargeType", "Frequency", "PricingModel", "AvailabilityZone",
    "BillingAccountId", "BillingAccountName", "BillingCurrencyCode", "BillingPeriodStartDate", "BillingPeriodEndDate",
    "BillingProfileId", "BillingProfileName", "InvoiceSectionId", "IsAzureCreditEligible", "PartNumber", "PayGPrice",
    "PlanName", "ServiceFamily", "CostAllocationRuleName", "benefitId", "benefitName",
]
EA_ROW_COLUMNS = {"Date", "Quantity", "CostInBillingCurrency"}  # the rest comes from the template
EA_TMPL_SCHEMA = pa.schema(
    [f for f in MODEL_FIELDS if f.name not in ("rate", "od_rate")]
    + [pa.field("price", pa.string())]
    + [pa.field(c, pa.string()) for c in EA_COLUMNS if c not in EA_ROW_COLUMNS]
)
AZ_REGIONS = [("eastus", "EastUS", "US East"), ("westus2", "WestUS2", "US West 2"), ("westeurope", "WestEurope", "EU West"),
              ("northeurope", "NorthEurope", "EU North"), ("southcentralus", "SouthCentralUS", "US South Central"),
              ("swedencentral", "SwedenCentral", "SE Central")]
# meter name (without " Spot"), series subcategory, pay-as-you-go $/h, vCPUs, restart fee
AZ_GPU = [
    ("NC24ads A100 v4", "NCadsA100v4 Series", 3.673, 24, 0.08), ("NC48ads A100 v4", "NCadsA100v4 Series", 7.346, 48, 0.08),
    ("NC96ads A100 v4", "NCadsA100v4 Series", 14.692, 96, 0.09), ("ND96asr A100 v4", "NDasrA100v4 Series", 27.197, 96, 0.12),
    ("ND96amsr A100 v4", "NDamsrA100v4 Series", 32.77, 96, 0.12), ("ND96isr H100 v5", "NDisrH100v5 Series", 98.32, 96, 0.25),
    ("NC6s v3", "NCSv3 Series", 3.06, 6, 0.05), ("NC24s v3", "NCSv3 Series", 12.24, 24, 0.06),
    ("NC4as T4 v3", "NCasT4v3 Series", 0.526, 4, 0.05), ("NC64as T4 v3", "NCasT4v3 Series", 4.352, 64, 0.06),
    ("NV36ads A10 v5", "NVadsA10v5 Series", 3.2, 36, 0.06),
]
AZ_CPU = [("D4s v5", "Dsv5 Series", 0.192, 4), ("D8s v5", "Dsv5 Series", 0.384, 8), ("E8s v5", "Esv5 Series", 0.504, 8),
          ("F8s v2", "FSv2 Series", 0.338, 8), ("B2ms", "BS Series", 0.0832, 2)]
EA_ACCOUNT = "87654322"


def _az_tags(pairs: list[tuple[str, str | None]], rng: random.Random) -> str:
    """Tags as Azure writes them: JSON without the outer braces, key case varying."""
    parts = []
    for k, v in pairs:
        if v is None:
            continue
        key = rng.choice([k, k, k.capitalize(), k.upper()])
        parts.append(f'"{key}": "{v}"')
    return ",".join(parts)


def _azure_pools(rng: random.Random) -> list[Pool]:
    jobs = _jobs(rng)
    subs = [(_guid(rng), f"{t}-{kind}") for t in TEAMS for kind in ("training", "shared", "dev")]
    team_sub = {t: subs[i * 3] for i, t in enumerate(TEAMS)}
    meters: dict[str, str] = {}

    def meter_id(name: str) -> str:
        return meters.setdefault(name, _guid(rng))

    def base(**kw: Any) -> dict[str, Any]:
        t: dict[str, Any] = {c: "" for c in EA_TMPL_SCHEMA.names if c not in ("tid", "kind")}
        t.update(
            amt_model=HOURLY, amt_lo=24.0, amt_hi=24.0, amt_digits=4, partial_permille=0, whole_month=False,
            InvoiceSectionName="GPU research", AccountName="ml-platform@example.com",
            AccountOwnerId="ml-platform@example.com", CostCenter="R&D-42", OfferId="MS-AZR-0017P",
            PublisherType="Azure", PublisherName="Microsoft", ChargeType="Usage", Frequency="UsageBased",
            PricingModel="OnDemand", BillingAccountId=EA_ACCOUNT, BillingAccountName="Example Research Ltd",
            BillingCurrencyCode="USD", BillingPeriodStartDate="10/01/2026", BillingPeriodEndDate="10/31/2026",
            BillingProfileId=EA_ACCOUNT, BillingProfileName="Example Research Ltd", InvoiceSectionId="5",
            IsAzureCreditEligible="True", PartNumber="AAH-00001",
        )
        t.update(kw)
        t["UnitPrice"] = t["EffectivePrice"] = t["PayGPrice"] = t["price"]
        if t.get("MeterName", "").endswith((" Spot", " Low Priority")):
            t["PayGPrice"] = ""  # EA leaves PayGPrice empty on spot meters; their price is the spot rate
        if t.get("ResourceId") and not t.get("ResourceName"):
            t["ResourceName"] = t["ResourceId"].rsplit("/", 1)[-1]
        return t

    def where(sub: tuple[str, str], rg: str, reg: tuple[str, str, str]) -> dict[str, Any]:
        return dict(SubscriptionId=sub[0], SubscriptionName=sub[1], ResourceGroup=rg, ResourceLocation=reg[1],
                    MeterRegion=reg[2])

    def rid(sub: tuple[str, str], rg: str, provider: str, name: str) -> str:
        return f"/subscriptions/{sub[0]}/resourceGroups/{rg}/providers/{provider}/{name}"

    kinds: list[list[dict[str, Any]]] = [[] for _ in range(11)]
    spot, fees, od, disks, ckpt_get, st_other, ckpt_out, egress, other, tax, credit = kinds
    for k in range(2200):
        job, team = jobs[k % len(jobs)]
        sub = team_sub[team]
        rg = f"rg-{job}"
        reg = AZ_REGIONS[(hash_str(job) + k // 200) % len(AZ_REGIONS)]
        meter, series, payg, vcpu, fee = AZ_GPU[(hash_str(job) + k // 48) % len(AZ_GPU)]
        spot_price = round(payg * rng.uniform(0.2, 0.35), 4)
        vm = rid(sub, rg, "Microsoft.Compute", f"virtualMachines/{job}-spot-{k // 48:03d}")
        tags = _az_tags([("team", team), ("training-job", job)], rng)
        info = json.dumps({"UsageType": "ComputeHR", "ImageType": "Canonical",
                           "ServiceType": "Standard_" + meter.replace(" ", "_"), "VMName": None, "VCPUs": vcpu},
                          separators=(",", ":"))
        spot.append(base(
            ProductName=f"Virtual Machines {series} Linux - {meter} Spot - {reg[2]}", MeterCategory="Virtual Machines",
            MeterSubCategory=f"{series} Linux", MeterId=meter_id(meter + " Spot" + reg[0]), MeterName=f"{meter} Spot",
            UnitOfMeasure="1 Hour", price=f"{spot_price}", PricingModel="Spot", ConsumedService="Microsoft.Compute",
            ResourceId=vm, Tags=tags, AdditionalInfo=info, AvailabilityZone=str(1 + k % 3), ServiceFamily="Compute",
            partial_permille=150, **where(sub, rg, reg),
        ))
        if k % 6 == 0:
            fees.append(base(
                ProductName=f"Virtual Machines Other Compute Charges - Spot Restart Fee - {reg[2]}",
                MeterCategory="Virtual Machines", MeterSubCategory="Other Compute Charges",
                MeterId=meter_id("Spot Restart Fee" + reg[0]), MeterName="Spot Restart Fee", UnitOfMeasure="1 Restart",
                price=f"{fee}", ConsumedService="Microsoft.Compute", ResourceId=vm, Tags=tags, ServiceFamily="Compute",
                amt_model=COUNT, amt_hi=3.0, **where(sub, rg, reg),
            ))
    for k in range(1600):
        team = TEAMS[k % len(TEAMS)]
        sub = subs[k % len(subs)]
        reg = AZ_REGIONS[k % len(AZ_REGIONS)]
        rg = f"rg-{team}-{['web', 'ci', 'eval', 'data'][k % 4]}"
        if k % 10 == 0:
            meter, series, payg, vcpu, _ = AZ_GPU[k % len(AZ_GPU)]
        else:
            meter, series, payg, vcpu = AZ_CPU[k % len(AZ_CPU)]
        tags = _az_tags([("team", team), ("env", rng.choice(["prod", "dev", "ci"]))], rng) if k % 5 else ""
        if k % 211 == 7:
            tags = tags[: len(tags) // 2]  # real exports cut tag strings now and then
        od.append(base(
            ProductName=f"Virtual Machines {series} - {meter} - {reg[2]}", MeterCategory="Virtual Machines",
            MeterSubCategory=series, MeterId=meter_id(meter + reg[0]), MeterName=meter, UnitOfMeasure="1 Hour",
            price=f"{payg}", PricingModel=rng.choice(["OnDemand", "On Demand"]), ConsumedService="Microsoft.Compute",
            ResourceId=rid(sub, rg, "Microsoft.Compute", f"virtualMachines/{team}-vm-{k:04d}"), Tags=tags,
            ServiceFamily="Compute", partial_permille=40, AvailabilityZone=str(1 + k % 3), **where(sub, rg, reg),
        ))
    for k in range(1200):
        team = TEAMS[k % len(TEAMS)]
        sub = subs[k % len(subs)]
        reg = AZ_REGIONS[k % len(AZ_REGIONS)]
        rg = f"rg-{team}-disks"
        tier, price = [("P30 LRS Disk", "4.9"), ("P40 LRS Disk", "9.3"), ("E30 LRS Disk", "2.4")][k % 3]
        disks.append(base(
            ProductName=f"Premium SSD Managed Disks - {tier} - {reg[2]}", MeterCategory="Storage",
            MeterSubCategory="Premium SSD Managed Disks", MeterId=meter_id(tier + reg[0]), MeterName=tier,
            UnitOfMeasure="1/Month", price=price, ConsumedService="Microsoft.Compute",
            ResourceId=rid(sub, rg, "Microsoft.Compute", f"disks/{team}-disk-{k:04d}"),
            Tags=_az_tags([("team", team)], rng) if k % 3 else "", ServiceFamily="Storage",
            amt_model=UNIFORM, amt_lo=0.01, amt_hi=0.0333, amt_digits=6, **where(sub, rg, reg),
        ))
    accounts_st: list[tuple[str, str, str | None, str]] = [(f"ckpt{job.replace('-', '')}"[:24], team, job, "checkpoint") for job, team in jobs]
    accounts_st += [(f"{team}{p}{k:03d}"[:24], team, None, p)
                    for k, (team, p) in enumerate((TEAMS[i % 6], ["data", "logs", "artifacts"][i % 3]) for i in range(90))]
    for name, team, owner_job, purpose in accounts_st:
        sub = team_sub[team]
        rg = f"rg-{team}-storage"
        reg = AZ_REGIONS[hash_str(name) % len(AZ_REGIONS)]
        sa = rid(sub, rg, "Microsoft.Storage", f"storageAccounts/{name}")
        tags = _az_tags([("team", team), ("training-job", owner_job), ("purpose", purpose)], rng)
        common = dict(ConsumedService="Microsoft.Storage", ResourceId=sa, Tags=tags, ServiceFamily="Storage",
                      MeterCategory="Storage", **where(sub, rg, reg))
        for mname, price, lo, hi, target in [
            ("Hot Read Operations", "0.0044", 0.01, 400.0, ckpt_get if purpose == "checkpoint" else st_other),
            ("All Other Operations", "0.0044", 0.01, 50.0, ckpt_get if purpose == "checkpoint" else st_other),
            ("Hot Write Operations", "0.055", 0.01, 40.0, st_other),
            ("Hot LRS Data Stored", "0.0184", 1.0, 9000.0, st_other),
        ]:
            target.append(base(
                ProductName=f"Tiered Block Blob - {mname}", MeterSubCategory="Tiered Block Blob",
                MeterId=meter_id(mname + reg[0]), MeterName=mname,
                UnitOfMeasure="1 GB/Month" if "Stored" in mname else "10K", price=price,
                amt_model=UNIFORM, amt_lo=lo, amt_hi=hi, amt_digits=4, **common,
            ))
        for sub_cat, mname, price in [("Inter Region", "Intra Continent Data Transfer Out", "0.02"),
                                      ("Rtn Preference: MGN", "Standard Data Transfer Out", "0.087")]:
            (ckpt_out if purpose == "checkpoint" else egress).append(base(
                ProductName=f"Bandwidth - {sub_cat} - {mname}", MeterCategory="Bandwidth", MeterSubCategory=sub_cat,
                MeterId=meter_id(mname), MeterName=mname, UnitOfMeasure="1 GB", price=price,
                ConsumedService="Microsoft.Storage", ResourceId=sa, Tags=tags, ServiceFamily="Networking",
                amt_model=UNIFORM, amt_lo=0.01, amt_hi=900.0, amt_digits=4, **where(sub, rg, reg) | {"MeterRegion": "Zone 1"},
            ))
    for k in range(200):
        team = TEAMS[k % len(TEAMS)]
        sub = subs[k % len(subs)]
        reg = AZ_REGIONS[k % len(AZ_REGIONS)]
        cat, subcat, mname, unit, price, svc, fam = [
            ("Log Analytics", "", "Analytics Logs Data Ingestion", "1 GB", "2.3", "Microsoft.OperationalInsights", "Management and Governance"),
            ("Azure Kubernetes Service", "Standard", "Standard Uptime SLA", "1 Hour", "0.1", "Microsoft.ContainerService", "Compute"),
            ("Virtual Network", "IP Addresses", "Standard IPv4 Static Public IP", "1 Hour", "0.005", "Microsoft.Network", "Networking"),
            ("Key Vault", "Standard", "Operations", "10K", "0.03", "Microsoft.KeyVault", "Security"),
        ][k % 4]
        rg = f"rg-{team}-platform"
        other.append(base(
            ProductName=f"{cat} - {mname}", MeterCategory=cat, MeterSubCategory=subcat, MeterId=meter_id(mname + reg[0]),
            MeterName=mname, UnitOfMeasure=unit, price=price, ConsumedService=svc,
            ResourceId=rid(sub, rg, svc, f"things/{team}-{k:03d}"), Tags=_az_tags([("team", team)], rng),
            ServiceFamily=fam, amt_model=UNIFORM, amt_lo=0.1, amt_hi=24.0, amt_digits=4, **where(sub, rg, reg),
        ))
    for k in range(6):
        sub = subs[k * 3]
        tax.append(base(ProductName="Tax", ChargeType="Tax", PricingModel="", price="1", UnitOfMeasure="",
                        amt_model=UNIFORM, amt_lo=5.0, amt_hi=900.0, amt_digits=2,
                        **where(sub, "", ("", "", "")), whole_month=True))
        credit.append(base(
            ProductName=f"Virtual Machines {AZ_GPU[k][1]} Linux - {AZ_GPU[k][0]} Spot - US East",
            MeterCategory="Virtual Machines", MeterSubCategory=f"{AZ_GPU[k][1]} Linux",
            MeterId=meter_id(AZ_GPU[k][0] + " Spot" + "eastus"), MeterName=f"{AZ_GPU[k][0]} Spot", ChargeType="Refund",
            PricingModel="Spot", UnitOfMeasure="1 Hour", price="-" + str(round(AZ_GPU[k][2] * 0.3, 4)),
            ConsumedService="Microsoft.Compute", amt_model=UNIFORM, amt_lo=1.0, amt_hi=20.0, amt_digits=1,
            **where(sub, "rg-" + jobs[k][0], AZ_REGIONS[0]),
        ))
    return [
        Pool("restart_fee", RESTART_FEE_PPM, fees),
        Pool("spot_gpu", 300_000, spot),
        Pool("on_demand", 330_000, od),
        Pool("disks", 100_000, disks),
        Pool("checkpoint_get", 40_000, ckpt_get),
        Pool("storage_other", 110_000, st_other),
        Pool("checkpoint_egress", 30_000, ckpt_out),
        Pool("egress", 40_000, egress),
        Pool("other", 48_800, other),
        Pool("tax", 100, tax),
        Pool("refund", 100, credit),
    ]


def _dec_text(expr: str) -> str:
    """A DECIMAL as the plain decimal string Azure writes (trailing zeros dropped)."""
    return (f"CASE WHEN {expr} = 0 THEN '0' ELSE rtrim(rtrim(CAST({expr} AS VARCHAR), '0'), '.') END")


def _azure_select() -> str:
    qty = "CAST(round(CASE WHEN amt_model = 0 THEN amount * amt_hi ELSE amount END, 6) AS DECIMAL(18,6))"
    cols = []
    for c in EA_COLUMNS:
        if c == "Date":
            cols.append("strftime(TIMESTAMP '2026-10-01' + to_days(CAST(h3 % 31 AS INTEGER)), '%-m/%-d/%Y') AS \"Date\"")
        elif c == "Quantity":
            cols.append(f"{_dec_text('q')} AS \"Quantity\"")
        elif c == "CostInBillingCurrency":
            cols.append(f"{_dec_text('CAST(q * CAST(price AS DECIMAL(18,6)) AS DECIMAL(38,10))')} AS \"CostInBillingCurrency\"")
        else:
            cols.append(f'"{c}"')
    return f"SELECT {', '.join(cols)} FROM (SELECT x.*, {qty} AS q FROM x) AS y"


def write(con: duckdb.DuckDBPyConnection, rows: int, out: Path, seed: int, per_file: int) -> list[Path]:
    pools = _azure_pools(random.Random(f"azure-{seed}"))
    _register(con, "tmpl", _flatten(pools), EA_TMPL_SCHEMA)
    pick = _pick_sql(pools)
    export, stamp = "gpu-estate-ea-actual", "202611020512"
    run_id = _guid(random.Random(f"azure-run-{seed}-{rows}"))
    rel = f"ea/20261001-20261031/{export}/{stamp}/{run_id}"
    folder = out / "costexports" / rel
    folder.mkdir(parents=True, exist_ok=True)
    select = _azure_select()
    parts = _parts(rows, per_file)
    jobs = [(DRAWS_SQL.format(seed=int(seed), a=a, b=b, pick=pick) + select, folder / f".part_{k}_0001.csv.tmp")
            for k, (a, b) in enumerate(parts)]

    def add_bom(tmp: Path) -> None:  # Azure writes a UTF-8 byte-order mark
        path = tmp.with_name(tmp.name[1:].removesuffix(".tmp"))
        with open(path, "wb") as dst, open(tmp, "rb") as src:
            dst.write(BOM)
            shutil.copyfileobj(src, dst, 1 << 22)
        tmp.unlink()

    _copy_parts(con, jobs, "FORMAT csv, HEADER true, DELIMITER ',', QUOTE '\"', ESCAPE '\"'", after=add_bom)
    files = [folder / f"part_{k}_0001.csv" for k in range(len(parts))]
    blobs = [{"blobName": f"{rel}/{p.name}", "byteCount": p.stat().st_size, "dataRowCount": b - a}
             for p, (a, b) in zip(files, parts, strict=True)]
    write_json(folder / "manifest.json", export_manifest(
        export=export, scope=f"/providers/Microsoft.Billing/billingAccounts/{EA_ACCOUNT}", run_id=run_id,
        submitted="2026-11-02T05:12:43.1234567Z", start=datetime(2026, 10, 1), end=datetime(2026, 10, 31), root="ea",
        blobs=blobs, container_uri="/subscriptions/00000000-0000-4000-8000-0000000000f1/resourceGroups/rg-finops/providers/"
                                   "Microsoft.Storage/storageAccounts/costexportsacct"))
    return files


def generate(rows: int, out_dir: str | Path, seed: int = 0, rows_per_file: int | None = None) -> list[Path]:
    """Write ``rows`` synthetic line items of October 2026 under ``out_dir``; the data files written, in order."""
    return synthetic.generate(write, ROWS_PER_FILE, rows, out_dir, seed, rows_per_file)


# -- the small files of an export run (fixtures/gen_azure.py, gen_focus.py, gen_scenarios.py) -----------

# Older EA files: Cost / BillingCurrency / Product, SubscriptionGuid beside a numeric SubscriptionId.
EA_OLD_COLUMNS = [
    "AccountOwnerId", "AccountName", "SubscriptionId", "SubscriptionGuid", "SubscriptionName", "BillingAccountId",
    "BillingAccountName", "Date", "Product", "PartNumber", "MeterId", "ServiceFamily", "MeterCategory",
    "MeterSubCategory", "MeterRegion", "MeterName", "Quantity", "EffectivePrice", "Cost", "UnitPrice",
    "BillingCurrency", "ResourceLocation", "AvailabilityZone", "ConsumedService", "ResourceId", "ResourceName",
    "ServiceInfo1", "ServiceInfo2", "AdditionalInfo", "Tags", "CostCenter", "UnitOfMeasure", "ResourceGroup",
    "ReservationId", "ReservationName", "OfferId", "IsAzureCreditEligible", "Term", "PublisherName", "PlanName",
    "ChargeType", "Frequency", "PublisherType",
]
# MCA cost details (camelCase, mostly).
MCA_COLUMNS = [
    "invoiceId", "previousInvoiceId", "billingAccountId", "billingAccountName", "billingProfileId",
    "billingProfileName", "invoiceSectionId", "invoiceSectionName", "resellerName", "resellerMpnId", "costCenter",
    "billingPeriodEndDate", "billingPeriodStartDate", "servicePeriodEndDate", "servicePeriodStartDate", "date",
    "serviceFamily", "productOrderId", "productOrderName", "consumedService", "meterId", "meterName",
    "meterCategory", "meterSubCategory", "meterRegion", "ProductId", "ProductName", "SubscriptionId",
    "subscriptionName", "publisherType", "publisherId", "publisherName", "resourceGroupName", "ResourceId",
    "resourceLocation", "location", "effectivePrice", "quantity", "unitOfMeasure", "chargeType", "billingCurrency",
    "pricingCurrency", "costInBillingCurrency", "costInPricingCurrency", "costInUsd", "paygCostInBillingCurrency",
    "paygCostInUsd", "exchangeRatePricingToBilling", "exchangeRateDate", "isAzureCreditEligible", "serviceInfo1",
    "serviceInfo2", "additionalInfo", "tags", "PayGPrice", "frequency", "term", "reservationId", "reservationName",
    "pricingModel", "unitPrice", "benefitId", "benefitName", "provider",
]


def cost_text(v: object) -> str:
    """A cost-details value as text: decimals plain (no exponent, no trailing zeros), None empty."""
    if v is None:
        return ""
    if isinstance(v, Decimal):
        return format(v.normalize(), "f")
    return str(v)


def cost_csv(columns: list[str], rows: list[dict[str, Any]], bom: bool = False) -> bytes:
    """Cost-details lines as an export's CSV part (CRLF line ends, a byte-order mark if ``bom``)."""
    return csv_bytes(columns, rows, value=cost_text, newline="\r\n", bom=bom)


def write_cost_parquet(rows: list[dict[str, Any]], columns: list[str], numbers: set[str], path: Path) -> None:
    """Cost-details lines as a parquet export: ``numbers`` as DOUBLE, ``Date`` as timestamp[us, UTC], text else."""
    types = {**dict.fromkeys(numbers, pa.float64()), "Date": pa.timestamp("us", tz="UTC")}
    cols: dict[str, list[object]] = {}
    for k in columns:
        vals = [r.get(k, "") for r in rows]
        cols[k] = [float(v) for v in vals] if k in numbers else vals if k == "Date" else [cost_text(v) for v in vals]
    path.parent.mkdir(parents=True, exist_ok=True)
    schema = pa.schema([pa.field(k, types.get(k, pa.string())) for k in columns])
    pq.write_table(pa.table(cols, schema=schema), path, compression="snappy")


def export_manifest(*, export: str, scope: str, run_id: str, submitted: str, start: datetime, end: datetime, root: str,
                    blobs: list[dict[str, Any]], container_uri: str, style: str = "current", fmt: str = "Csv",
                    overwrite: str = "CreateNewReport", compression: str = "None") -> dict[str, Any]:
    """An export run's manifest.  ``style``: ``current`` (``manifest.json`` of 2024), ``legacy`` (the older
    ``_manifest.json``: version and counts first, no compressionMode) or ``focus`` (a FOCUS cost export)."""
    counts = {"byteCount": sum(b["byteCount"] for b in blobs), "blobCount": len(blobs),
              "dataRowCount": sum(b["dataRowCount"] for b in blobs)}
    delivery: dict[str, Any] = {"partitionData": True, "dataOverwriteBehavior": overwrite, "fileFormat": fmt}
    if style != "legacy":
        delivery["compressionMode"] = compression
    body = {
        "exportConfig": {
            "exportName": export,
            "resourceId": f"{scope}/providers/Microsoft.CostManagement/exports/{export}",
            "dataVersion": {"current": "2024-08-01", "legacy": "2021-10-01", "focus": "1.2-preview"}[style],
            "apiVersion": "2023-07-01-preview",
            "type": "FocusCost" if style == "focus" else "ActualCost",
            "timeFrame": "MonthToDate",
            "granularity": "Daily",
        },
        "deliveryConfig": {**delivery, "containerUri": container_uri, "rootFolderPath": root},
        "runInfo": {
            "executionType": "Scheduled",
            "submittedTime": submitted,
            "runId": run_id,
            "startDate": f"{start:%Y-%m-%dT%H:%M:%S}",
            "endDate": f"{end:%Y-%m-%dT%H:%M:%S}",
        },
        "blobs": blobs,
    }
    if style == "current":
        return {"manifestVersion": "2024-04-01", **body, "blobCount": counts["blobCount"], "byteCount": counts["byteCount"],
                "dataRowCount": counts["dataRowCount"]}
    return {**({"manifestVersion": "2021-01-01"} if style == "legacy" else {}), **counts, **body}


def write_export_run(base: Path, rel: str, files: list[tuple[str, bytes, int]], **manifest: Any) -> None:
    """One run of an export under ``base/rel``: its part files (name, bytes, lines) and the manifest beside
    them (``_manifest.json`` for the legacy style, ``manifest.json`` else); ``manifest``: of ``export_manifest``."""
    folder = base / rel
    folder.mkdir(parents=True, exist_ok=True)
    for name, data, _ in files:
        (folder / name).write_bytes(data)
    blobs = [{"blobName": f"{rel}/{name}", "byteCount": len(data), "dataRowCount": n} for name, data, n in files]
    name = "_manifest.json" if manifest.get("style") == "legacy" else "manifest.json"
    write_json(folder / name, export_manifest(blobs=blobs, **manifest))
