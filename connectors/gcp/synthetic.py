"""Synthetic GCP detailed (resource-level) BigQuery billing export at scale, extracted as parquet: nested
``service``/``sku``/``project``/``location``/``usage``/``price`` structs and ``labels``/``credits`` lists,
``<out>/gcp_billing_export_resource_v1_<ACCT>/invoice_month=202610/<table>-00000000000N.parquet``.
Restart fees read "preemption overhead".  Spot SKUs carry their own (spot) list price in ``cost_at_list``, as
real exports do: what they would have cost on demand is for the price references.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from connectors import synthetic
from connectors.synthetic import (
    DRAWS_SQL,
    HOURLY,
    MODEL_FIELDS,
    PARQUET_OPTIONS,
    RESTART_FEE_PPM,
    TEAMS,
    UNIFORM,
    Pool,
    _copy_parts,
    _flatten,
    _hexid,
    _jobs,
    _parts,
    _pick_sql,
    _register,
    hash_str,
)

ROWS_PER_FILE = 2_000_000

# The nested types of the export table's columns.
KV = pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())]))
ID_DESCRIPTION = pa.struct([("id", pa.string()), ("description", pa.string())])
PROJECT = pa.struct([
    ("id", pa.string()), ("number", pa.string()), ("name", pa.string()), ("labels", KV), ("ancestry_numbers", pa.string()),
    ("ancestors", pa.list_(pa.struct([("resource_name", pa.string()), ("display_name", pa.string())]))),
])
LOCATION = pa.struct([("location", pa.string()), ("country", pa.string()), ("region", pa.string()), ("zone", pa.string())])
RESOURCE = pa.struct([("name", pa.string()), ("global_name", pa.string())])
NUMERIC = pa.decimal128(38, 9)
TS_UTC = pa.timestamp("us", tz="UTC")

GCP_TMPL_SCHEMA = pa.schema(
    MODEL_FIELDS
    + [
        pa.field("service", ID_DESCRIPTION),
        pa.field("sku", ID_DESCRIPTION),
        pa.field("project", PROJECT),
        pa.field("labels", KV),
        pa.field("system_labels", KV),
        pa.field("location", LOCATION),
        pa.field("cost_type", pa.string()),
        pa.field("usage_unit", pa.string()),
        pa.field("usage_factor", pa.float64()),
        pa.field("pricing_unit", pa.string()),
        pa.field("consumption_model", ID_DESCRIPTION),
        pa.field("resource", RESOURCE),
        pa.field("credit_type", pa.string()),
        pa.field("credit_name", pa.string()),
        pa.field("credit_pct", pa.int32()),
        pa.field("credit_frac", pa.float64()),
    ]
)
GCP_ACCOUNT = "01ABCD-23EF45-678904"
COMPUTE = {"id": "6F81-5844-456A", "description": "Compute Engine"}
STORAGE = {"id": "95FF-2EF5-5EA1", "description": "Cloud Storage"}
TPU = {"id": "E000-3F24-B8AA", "description": "Cloud TPU"}
NETWORKING = {"id": "E505-1604-58F8", "description": "Networking"}
INVOICE = {"id": "2062-016F-44A2", "description": "Invoice"}
GCP_REGIONS = [("us-central1", "US", "Americas"), ("us-east4", "US", "Americas"), ("europe-west4", "NL", "EMEA"),
               ("asia-southeast1", "SG", "APAC"), ("us-west4", "US", "Americas")]
# GPU SKU family: (spot description, on-demand description, spot $/h, on-demand $/h).  Spot capacity is billed
# as its own SKUs: a spot line's cost_at_list (and price.list_price) is the *spot* SKU's list price, so the
# export's cost_at_list equals cost when there are no credits; the on-demand price is the counterpart SKU's, in
# the price lists (connectors/gcp/prices.py), never in the export.
GCP_GPU = [
    ("Nvidia Tesla A100 GPU attached to Spot Preemptible VMs running in {r}", "Nvidia Tesla A100 GPU running in {r}", 1.1014, 2.9387),
    ("Nvidia H100 80GB GPU attached to Spot Preemptible VMs running in {r}", "Nvidia H100 80GB GPU running in {r}", 2.2535, 11.0612),
    ("Nvidia L4 GPU attached to Spot Preemptible VMs running in {r}", "Nvidia L4 GPU running in {r}", 0.2236, 0.5600),
    ("Spot Preemptible Nvidia Tesla A100 GPU running in {r}", "Nvidia Tesla A100 80GB GPU running in {r}", 1.5700, 3.9300),
    ("Spot Preemptible A3 Instance Core running in {r}", "A3 Instance Core running in {r}", 0.0044, 0.0183),
    ("Spot Preemptible A2 Instance Core running in {r}", "A2 Instance Core running in {r}", 0.0038, 0.0110),
    ("Spot Preemptible A2 Instance Ram running in {r}", "A2 Instance Ram running in {r}", 0.0005, 0.0015),
    ("Nvidia Tesla T4 GPU attached to Spot Preemptible VMs running in {r}", "Nvidia Tesla T4 GPU running in {r}", 0.1400, 0.3500),
]
GCP_TPU = [("TPU v5e", 0.48, 1.20, 0.06), ("TPU v5p", 1.68, 4.20, 0.18), ("TPU v4", 1.29, 3.22, 0.14), ("TPU v6e", 1.08, 2.70, 0.12)]


def _sku_id(rng: random.Random, cache: dict[str, str], desc: str) -> dict[str, str]:
    if desc not in cache:
        h = _hexid(rng, 12).upper()
        cache[desc] = f"{h[:4]}-{h[4:8]}-{h[8:]}"
    return {"id": cache[desc], "description": desc}


def _gcp_pools(rng: random.Random) -> list[Pool]:
    jobs = _jobs(rng)
    skus: dict[str, str] = {}

    projects: dict[tuple[str, str], dict[str, Any]] = {}
    for i, team in enumerate(TEAMS):
        for kind in ("train", "data", "serve"):
            pid = f"{team}-{kind}-{100 + i}"
            projects[(team, kind)] = project(pid, str(481516234200 + len(projects)), kv(team=team, env=kind))

    def base(**kw: Any) -> dict[str, Any]:
        t: dict[str, Any] = dict(
            amt_model=HOURLY, amt_lo=1.0, amt_hi=1.0, amt_digits=4, partial_permille=0, whole_month=False,
            labels=[], system_labels=[], cost_type="regular", usage_unit="seconds", usage_factor=3600.0,
            pricing_unit="hour", consumption_model={"id": "D2C9-4F53-6E20", "description": "Default"},
            resource={"name": None, "global_name": None}, credit_type=None, credit_name=None, credit_pct=0,
            credit_frac=0.0,
        )
        t.update(kw)
        return t

    def loc(reg: tuple[str, str, str], zone: str | None) -> dict[str, str | None]:
        return {"location": reg[0], "country": reg[1], "region": reg[0], "zone": zone}

    kinds: list[list[dict[str, Any]]] = [[] for _ in range(10)]
    spot, fees, od, disks, ckpt_get, st_other, ckpt_out, egress, other, tax = kinds
    for k in range(2000):
        job, team = jobs[k % len(jobs)]
        reg = GCP_REGIONS[(hash_str(job) + k // 400) % len(GCP_REGIONS)]
        zone = f"{reg[0]}-{'abc'[k % 3]}"
        proj = projects[(team, "train")]
        labels = kv(team=team, training__job=job)
        if k % 5 == 4:  # TPU slices
            name, sp, lp, fee = GCP_TPU[(hash_str(job) + k) % len(GCP_TPU)]
            node = f"{job}-tpu-{k // 48:03d}"
            res = {"name": node, "global_name": f"//tpu.googleapis.com/projects/{proj['id']}/locations/{zone}/nodes/{node}"}
            spot.append(base(
                service=TPU, sku=_sku_id(rng, skus, f"Spot Preemptible {name} chip running in {reg[2]}"), project=proj,
                labels=labels, location=loc(reg, zone), resource=res, rate=sp, od_rate=sp, partial_permille=120,
                amt_model=UNIFORM, amt_lo=1.0, amt_hi=8.0, amt_digits=0,
            ))
            if k % 10 == 4:
                fees.append(base(
                    service=TPU, sku=_sku_id(rng, skus, f"Spot Preemptible {name} chip preemption overhead running in {reg[2]}"),
                    project=proj, labels=labels, location=loc(reg, zone), resource=res, rate=fee, od_rate=fee,
                    amt_model=UNIFORM, amt_lo=0.01, amt_hi=0.5, amt_digits=4,
                ))
            continue
        spot_desc, _, sp, lp = GCP_GPU[(hash_str(job) + k // 48) % len(GCP_GPU)]
        vm = f"{job}-spot-{k // 48:03d}"
        res = {"name": vm, "global_name": f"//compute.googleapis.com/projects/{proj['id']}/zones/{zone}/instances/"
                                          f"{rng.randrange(10**18, 10**19)}"}
        spot.append(base(
            service=COMPUTE, sku=_sku_id(rng, skus, spot_desc.format(r=reg[2])), project=proj, labels=labels,
            system_labels=kv(**{"compute.googleapis.com/machine_spec": rng.choice(["a2-highgpu-8g", "a3-highgpu-8g", "g2-standard-48"])}),
            location=loc(reg, zone), resource=res, rate=sp, od_rate=sp, partial_permille=120,
            amt_model=UNIFORM, amt_lo=1.0, amt_hi=96.0, amt_digits=0,
        ))
    for k in range(1500):
        team = TEAMS[k % len(TEAMS)]
        reg = GCP_REGIONS[k % len(GCP_REGIONS)]
        zone = f"{reg[0]}-{'abc'[k % 3]}"
        proj = projects[(team, ["serve", "data"][k % 2])]
        _, od_desc, _, lp = GCP_GPU[k % len(GCP_GPU)] if k % 10 == 0 else (None, "N2 Instance Core running in {r}", 0, 0.0316)
        vm = f"{team}-vm-{k:04d}"
        committed = k % 7 == 0
        od.append(base(
            service=COMPUTE, sku=_sku_id(rng, skus, od_desc.format(r=reg[2])), project=proj,
            labels=kv(team=team) if k % 5 else [], location=loc(reg, zone),
            resource={"name": vm, "global_name": f"//compute.googleapis.com/projects/{proj['id']}/zones/{zone}/instances/{rng.randrange(10**18, 10**19)}"},
            rate=lp, od_rate=lp, partial_permille=30, amt_model=UNIFORM, amt_lo=1.0, amt_hi=16.0, amt_digits=0,
            credit_type="COMMITTED_USAGE_DISCOUNT" if committed else "SUSTAINED_USAGE_DISCOUNT",
            credit_name="Committed Usage Discount: N2 Cpu" if committed else "Sustained Usage Discount",
            credit_pct=100 if committed else 30, credit_frac=1.0 if committed else 0.2,
            consumption_model=({"id": "5A13-1B2C-3D4E", "description": "Compute Flexible CUD Consumption Model"}
                               if committed else {"id": "D2C9-4F53-6E20", "description": "Default"}),
        ))
    for k in range(1000):
        team = TEAMS[k % len(TEAMS)]
        reg = GCP_REGIONS[k % len(GCP_REGIONS)]
        zone = f"{reg[0]}-{'abc'[k % 3]}"
        proj = projects[(team, ["train", "serve", "data"][k % 3])]
        disks.append(base(
            service=COMPUTE, sku=_sku_id(rng, skus, f"{['Balanced', 'SSD backed', 'Storage'][k % 3]} PD Capacity in {reg[2]}"),
            project=proj, labels=kv(team=team), location=loc(reg, zone),
            resource={"name": f"{team}-disk-{k:04d}", "global_name": f"//compute.googleapis.com/projects/{proj['id']}/zones/{zone}/disks/{team}-disk-{k:04d}"},
            rate=0.1, od_rate=0.1, usage_unit="byte-seconds", usage_factor=2.0 ** 30 * 3600 * 744, pricing_unit="gibibyte month",
            amt_model=UNIFORM, amt_lo=0.01, amt_hi=3.0, amt_digits=6,
        ))
    buckets: list[tuple[str, str, str | None, str]] = [(f"ckpt-{job}", team, job, "checkpoint") for job, team in jobs]
    buckets += [(f"{TEAMS[i % 6]}-{['data', 'logs', 'artifacts'][i % 3]}-{i:03d}", TEAMS[i % 6], None,
                 ["data", "logs", "artifacts"][i % 3]) for i in range(90)]
    for name, team, owner_job, purpose in buckets:
        reg = GCP_REGIONS[hash_str(name) % len(GCP_REGIONS)]
        proj = projects[(team, "data")]
        common = dict(project=proj, labels=kv(team=team, training__job=owner_job, purpose=purpose),
                      location=loc(reg, None),
                      resource={"name": name, "global_name": f"//storage.googleapis.com/projects/_/buckets/{name}"})
        for desc, rate, unit, factor, punit, lo, hi, target in [
            ("Regional Standard Class B Operations", 0.0000004, "requests", 1.0, "count", 100.0, 400000.0,
             ckpt_get if purpose == "checkpoint" else st_other),
            ("Nearline Storage Data Retrieval", 0.01, "bytes", 2.0 ** 30, "gibibyte", 0.1, 500.0,
             ckpt_get if purpose == "checkpoint" else st_other),
            ("Regional Standard Class A Operations", 0.000005, "requests", 1.0, "count", 10.0, 40000.0, st_other),
            ("Standard Storage US Regional", 0.02, "byte-seconds", 2.0 ** 30 * 3600 * 744, "gibibyte month", 1.0, 400.0, st_other),
        ]:
            target.append(base(service=STORAGE, sku=_sku_id(rng, skus, desc), rate=rate, od_rate=rate, usage_unit=unit,
                               usage_factor=factor, pricing_unit=punit, amt_model=UNIFORM, amt_lo=lo, amt_hi=hi,
                               amt_digits=0 if unit == "requests" else 6, **common))
        for dst in ("EMEA", "APAC", "Americas"):
            if dst == reg[2]:
                continue
            (ckpt_out if purpose == "checkpoint" else egress).append(base(
                service=STORAGE, sku=_sku_id(rng, skus, f"Network Inter Region Data Transfer Out from {reg[2]} to {dst}"),
                rate=0.02, od_rate=0.02, usage_unit="bytes", usage_factor=2.0 ** 30, pricing_unit="gibibyte",
                amt_model=UNIFORM, amt_lo=0.1, amt_hi=900.0, amt_digits=6, **common,
            ))
    for k in range(150):
        team = TEAMS[k % len(TEAMS)]
        reg = GCP_REGIONS[k % len(GCP_REGIONS)]
        proj = projects[(team, "serve")]
        egress.append(base(
            service=NETWORKING, sku=_sku_id(rng, skus, f"Network Internet Data Transfer Out from {reg[2]} to {['Americas', 'EMEA', 'APAC'][k % 3]}"),
            project=proj, labels=kv(team=team), location=loc(reg, None), rate=0.12, od_rate=0.12, usage_unit="bytes",
            usage_factor=2.0 ** 30, pricing_unit="gibibyte", amt_model=UNIFORM, amt_lo=0.01, amt_hi=80.0, amt_digits=6,
            credit_type="FREE_TIER" if k % 10 == 0 else None, credit_name="FreeTier" if k % 10 == 0 else None,
            credit_pct=50 if k % 10 == 0 else 0, credit_frac=0.05,
        ))
    for k in range(120):
        team = TEAMS[k % len(TEAMS)]
        reg = GCP_REGIONS[k % len(GCP_REGIONS)]
        proj = projects[(team, ["serve", "data"][k % 2])]
        svc, desc, rate, unit, punit, factor = [
            ({"id": "24E6-581D-38E5", "description": "BigQuery"}, "Analysis (us)", 6.25, "bytes", "tebibyte", 2.0 ** 40),
            ({"id": "5490-F7B7-8DF6", "description": "Cloud Logging"}, "Log Storage cost", 0.5, "bytes", "gibibyte", 2.0 ** 30),
            ({"id": "CCD8-9BF1-090E", "description": "Kubernetes Engine"}, "Regional Kubernetes Clusters", 0.1, "seconds", "hour", 3600.0),
        ][k % 3]
        other.append(base(
            service=svc, sku=_sku_id(rng, skus, desc), project=proj, labels=kv(team=team) if k % 3 else [],
            location=loc(reg, None), rate=rate, od_rate=rate, usage_unit=unit, pricing_unit=punit, usage_factor=factor,
            amt_model=UNIFORM, amt_lo=0.001, amt_hi=4.0, amt_digits=6,
            credit_type="PROMOTION" if k % 4 == 0 else None, credit_name="Research credits" if k % 4 == 0 else None,
            credit_pct=100 if k % 4 == 0 else 0, credit_frac=0.5,
        ))
    for _ in range(6):
        tax.append(base(service=INVOICE, sku=_sku_id(rng, skus, "Tax"), project=None, cost_type="tax", whole_month=True,
                        location={"location": None, "country": None, "region": None, "zone": None}, rate=1.0, od_rate=1.0,
                        usage_unit=None, usage_factor=0.0, pricing_unit=None, amt_model=UNIFORM, amt_lo=5.0, amt_hi=900.0,
                        amt_digits=2))
    return [
        Pool("restart_fee", RESTART_FEE_PPM, fees),
        Pool("spot_gpu", 300_000, spot),
        Pool("on_demand", 330_000, od),
        Pool("disks", 100_000, disks),
        Pool("checkpoint_get", 40_000, ckpt_get),
        Pool("storage_other", 110_000, st_other),
        Pool("checkpoint_egress", 30_000, ckpt_out),
        Pool("egress", 40_000, egress),
        Pool("other", 48_900, other),
        Pool("tax", 100, tax),
    ]


CREDIT_T = "STRUCT(name VARCHAR, amount DOUBLE, full_name VARCHAR, id VARCHAR, type VARCHAR)"
TAG_T = "STRUCT(key VARCHAR, value VARCHAR, inherited BOOLEAN, namespace VARCHAR)"
GCP_SELECT = f"""
SELECT
  '{GCP_ACCOUNT}' AS billing_account_id,
  service, sku,
  s AS usage_start_time, e AS usage_end_time,
  project, labels, system_labels, location,
  []::{TAG_T}[] AS tags,
  'GOOGLE' AS transaction_type,
  'Google' AS seller_name,
  least(e + to_minutes(CAST(90 + h2 % 1500 AS BIGINT)), TIMESTAMPTZ '2026-11-03 06:00:00+00') AS export_time,
  cost,
  'USD' AS currency,
  1.0::DOUBLE AS currency_conversion_rate,
  {{'amount': round(amount * usage_factor, 3), 'unit': usage_unit,
    'amount_in_pricing_units': amount, 'pricing_unit': pricing_unit}} AS usage,
  CASE WHEN credit_type IS NOT NULL AND h3 // 1000 % 100 < credit_pct
       THEN [{{'name': credit_name, 'amount': -round(cost * credit_frac, 10), 'full_name': credit_name,
               'id': credit_type, 'type': credit_type}}::{CREDIT_T}]
       ELSE []::{CREDIT_T}[] END AS credits,
  {{'month': '202610', 'publisher_type': 'GOOGLE'}} AS invoice,
  cost_type,
  NULL::STRUCT(id VARCHAR, description VARCHAR, mode VARCHAR, type VARCHAR) AS adjustment_info,
  round(amount * od_rate, 10) AS cost_at_list,
  consumption_model,
  resource,
  {{'effective_price': CAST(rate AS DECIMAL(38,9)), 'tier_start_amount': CAST(0 AS DECIMAL(38,9)),
    'unit': pricing_unit, 'pricing_unit_quantity': CAST(1 AS DECIMAL(38,9)),
    'list_price': CAST(od_rate AS DECIMAL(38,9)), 'effective_price_default': CAST(rate AS DECIMAL(38,9)),
    'list_price_consumption_model': CAST(od_rate AS DECIMAL(38,9))}} AS price
FROM (
  SELECT x.*, round(amount * rate, 10) AS cost,
    CASE WHEN whole_month THEN TIMESTAMPTZ '2026-10-01 00:00:00+00'
         ELSE TIMESTAMPTZ '2026-10-01 00:00:00+00' + to_hours(CAST(h3 % 744 AS BIGINT)) END AS s,
    CASE WHEN whole_month THEN TIMESTAMPTZ '2026-11-01 00:00:00+00'
         ELSE TIMESTAMPTZ '2026-10-01 00:00:00+00' + to_hours(CAST(h3 % 744 AS BIGINT) + 1) END AS e
  FROM x
) AS y
"""


def write(con: duckdb.DuckDBPyConnection, rows: int, out: Path, seed: int, per_file: int) -> list[Path]:
    pools = _gcp_pools(random.Random(f"gcp-{seed}"))
    _register(con, "tmpl", _flatten(pools), GCP_TMPL_SCHEMA)
    pick = _pick_sql(pools)
    table = "gcp_billing_export_resource_v1_" + GCP_ACCOUNT.replace("-", "_")
    folder = out / table / "invoice_month=202610"
    folder.mkdir(parents=True, exist_ok=True)
    jobs = []
    for k, (a, b) in enumerate(_parts(rows, per_file)):
        path = folder / f"{table}-{k:012d}.parquet"
        jobs.append((DRAWS_SQL.format(seed=int(seed), a=a, b=b, pick=pick) + GCP_SELECT, path))
    _copy_parts(con, jobs, PARQUET_OPTIONS)
    return [p for _, p in jobs]


def generate(rows: int, out_dir: str | Path, seed: int = 0, rows_per_file: int | None = None) -> list[Path]:
    """Write ``rows`` synthetic line items of October 2026 under ``out_dir``; the data files written, in order."""
    return synthetic.generate(write, ROWS_PER_FILE, rows, out_dir, seed, rows_per_file)


# -- rows of the export table and the files a BigQuery extract writes (fixtures/gen_gcp.py) ------------

# The detailed (resource-level) export table; the standard one is the same without ``resource`` and ``price``.
RESOURCE_SCHEMA = pa.schema([
    ("billing_account_id", pa.string()),
    ("service", ID_DESCRIPTION),
    ("sku", ID_DESCRIPTION),
    ("usage_start_time", TS_UTC),
    ("usage_end_time", TS_UTC),
    ("project", PROJECT),
    ("labels", KV),
    ("system_labels", KV),
    ("location", LOCATION),
    ("tags", pa.list_(pa.struct([("key", pa.string()), ("value", pa.string()), ("inherited", pa.bool_()),
                                 ("namespace", pa.string())]))),
    ("transaction_type", pa.string()),
    ("seller_name", pa.string()),
    ("export_time", TS_UTC),
    ("cost", pa.float64()),
    ("currency", pa.string()),
    ("currency_conversion_rate", pa.float64()),
    ("usage", pa.struct([("amount", pa.float64()), ("unit", pa.string()), ("amount_in_pricing_units", pa.float64()),
                         ("pricing_unit", pa.string())])),
    ("credits", pa.list_(pa.struct([("name", pa.string()), ("amount", pa.float64()), ("full_name", pa.string()),
                                    ("id", pa.string()), ("type", pa.string())]))),
    ("invoice", pa.struct([("month", pa.string()), ("publisher_type", pa.string())])),
    ("cost_type", pa.string()),
    ("adjustment_info", pa.struct([("id", pa.string()), ("description", pa.string()), ("mode", pa.string()),
                                   ("type", pa.string())])),
    ("cost_at_list", pa.float64()),
    ("consumption_model", ID_DESCRIPTION),
    ("resource", RESOURCE),
    ("price", pa.struct([("effective_price", NUMERIC), ("tier_start_amount", NUMERIC), ("unit", pa.string()),
                         ("pricing_unit_quantity", NUMERIC), ("list_price", NUMERIC), ("effective_price_default", NUMERIC),
                         ("list_price_consumption_model", NUMERIC)])),
])

Row = dict[str, Any]


def kv(**kw: str | None) -> list[dict[str, str]]:
    """Labels as the export holds them (``__`` in a name stands for ``-``; None left out)."""
    return [{"key": k.replace("__", "-"), "value": v} for k, v in kw.items() if v is not None]


def project(pid: str, number: str, labels: list[dict[str, str]]) -> dict[str, Any]:
    """A project of the example.com organization."""
    return {
        "id": pid, "number": number, "name": pid, "labels": labels, "ancestry_numbers": f"/418273645091/{number}/",
        "ancestors": [{"resource_name": f"projects/{number}", "display_name": pid},
                      {"resource_name": "organizations/418273645091", "display_name": "example.com"}],
    }


def credit(name: str, amount: float, type_: str, id_: str, full_name: str | None = None) -> dict[str, Any]:
    return {"name": name, "amount": amount, "full_name": full_name or name, "id": id_, "type": type_}


class ExportRows:
    """Rows of one export table; every field of the schema present (None = NULL)."""

    def __init__(self, account: str, currency: str, rate: float, detailed: bool, exported: datetime):
        self.account = account
        self.currency = currency
        self.rate = rate
        self.detailed = detailed
        self.exported = exported
        self.rows: list[Row] = []

    def add(
        self,
        *,
        service: dict[str, str],
        sku: tuple[str, str],
        start: datetime,
        hours: int = 1,
        cost: float,
        cost_at_list: float | None = None,
        usage: tuple[float, str, float, str] | None = None,
        project: dict[str, Any] | None = None,
        labels: list[dict[str, str]] | None = None,
        tags: list[dict[str, Any]] | None = None,
        location: tuple[str | None, str | None, str | None, str | None] = ("us-central1", "US", "us-central1", None),
        credits: list[dict[str, Any]] | None = None,
        cost_type: str = "regular",
        invoice_month: str = "202610",
        adjustment: dict[str, Any] | None = None,
        consumption_model: tuple[str, str] = ("D2C9-4F53-6E20", "Default"),
        resource: tuple[str | None, str | None] = (None, None),
        price: tuple[Decimal, Decimal, str, Decimal] | None = None,
        export_delay: timedelta = timedelta(hours=5, minutes=41, seconds=12, microseconds=345678),
        system_labels: list[dict[str, str]] | None = None,
    ) -> None:
        loc, country, region, zone = location
        row: Row = {
            "billing_account_id": self.account,
            "service": dict(service),
            "sku": {"id": sku[0], "description": sku[1]},
            "usage_start_time": start,
            "usage_end_time": start + timedelta(hours=hours),
            "project": project,
            "labels": labels or [],
            "system_labels": system_labels or [],
            "location": {"location": loc, "country": country, "region": region, "zone": zone},
            "tags": tags or [],
            "transaction_type": "GOOGLE",
            "seller_name": "Google",
            "export_time": min(start + export_delay, self.exported),
            "cost": cost,
            "currency": self.currency,
            "currency_conversion_rate": self.rate,
            "usage": (
                {"amount": usage[0], "unit": usage[1], "amount_in_pricing_units": usage[2], "pricing_unit": usage[3]}
                if usage
                else {"amount": 0.0, "unit": None, "amount_in_pricing_units": 0.0, "pricing_unit": None}
            ),
            "credits": credits or [],
            "invoice": {"month": invoice_month, "publisher_type": "GOOGLE"},
            "cost_type": cost_type,
            "adjustment_info": adjustment,
            "cost_at_list": cost_at_list,
            "consumption_model": {"id": consumption_model[0], "description": consumption_model[1]},
        }
        if self.detailed:
            row["resource"] = {"name": resource[0], "global_name": resource[1]}
            row["price"] = (
                {
                    "effective_price": price[0],
                    "tier_start_amount": Decimal(0),
                    "unit": price[2],
                    "pricing_unit_quantity": price[3],
                    "list_price": price[1],
                    "effective_price_default": price[0],
                    "list_price_consumption_model": price[1],
                }
                if price
                else None
            )
        self.rows.append(row)


def bq_timestamp(t: datetime) -> str:
    """A TIMESTAMP as ``bq extract`` writes it to JSON: UTC, fractional seconds only when there are some."""
    s = t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    if t.microsecond:
        s += f".{t.microsecond:06d}".rstrip("0")
    return s + " UTC"


def bq_json_value(v: Any) -> Any:
    """NULL fields left out, TIMESTAMP as text, NUMERIC as text, FLOAT as numbers."""
    if isinstance(v, dict):
        return {k: bq_json_value(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [bq_json_value(x) for x in v]
    if isinstance(v, datetime):
        return bq_timestamp(v)
    if isinstance(v, Decimal):
        return str(v)
    return v


def ndjson_bytes(rows: list[Row]) -> bytes:
    """Rows as ``bq extract --destination_format NEWLINE_DELIMITED_JSON`` writes them."""
    lines = [json.dumps(bq_json_value(r), separators=(",", ":"), ensure_ascii=False) for r in rows]
    return ("\n".join(lines) + "\n").encode()


def write_extract_parquet(rows: list[Row], path: Path, schema: pa.Schema = RESOURCE_SCHEMA) -> None:
    """Rows as a parquet extract of the table (nested structs and lists, TIMESTAMP in microseconds UTC)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist([{f.name: r[f.name] for f in schema} for r in rows], schema=schema)
    pq.write_table(table, path, compression="snappy")
