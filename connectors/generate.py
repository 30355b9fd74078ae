"""Deterministic synthetic billing exports at scale, in each provider's real format and layout.

``generate(provider, rows, out_dir, seed=0)`` writes one month (October 2026) of a large
GPU-training estate:

- ``aws``: legacy CUR, Athena parquet (snake_case, ~75 columns incl. ``resource_tags_user_*``),
  ``<out>/cur/<report>/<report>/year=2026/month=10/<report>-0000N.snappy.parquet``, parts of
  at most 2M rows, plus ``<report>-create-table.sql`` and ``cost_and_usage_data_status/``.
- ``azure``: Cost Management EA cost details (the 2024 EA column set, UTF-8 BOM, M/D/YYYY dates,
  decimal strings, ``Tags`` JSON without braces), a "create new report" run folder
  ``<out>/costexports/ea/20261001-20261031/<export>/<yyyyMMddHHmm>/<runId>/part_K_0001.csv``
  with its ``manifest.json``; parts of at most 1M rows.
- ``gcp``: the detailed (resource-level) BigQuery billing export extracted as parquet, nested
  ``service``/``sku``/``project``/``location``/``usage``/``price`` structs and ``labels``/``credits``
  lists, ``<out>/gcp_billing_export_resource_v1_<ACCT>/invoice_month=202610/<table>-00000000000N.parquet``.

What is in the month: thousands of resources (spot and on-demand instances, volumes, buckets),
hundreds of usage types, six teams, 48 training jobs; spot GPU hours (some cut short by an
interruption), on-demand compute, storage, checkpoint-bucket GETs and egress tagged
``purpose=checkpoint``, ~0.1% restart-fee lines phrased as each provider does ("Spot interruption
recovery charge" / "Spot Restart Fee" / "preemption overhead"), tax and a few credits.

How: the estate's catalogue (a few thousand *templates*: one resource x usage type each) is built
in Python, once; every line item is made by DuckDB SQL over ``range()``, picking a template and
varying hour, quantity and cost with ``hash(row, seed)``, and written with ``COPY ... TO``.  No
Python runs per row.  The same (provider, rows, seed, rows_per_file) gives the same files with the
same DuckDB version (``hash()`` is DuckDB's).
"""

from __future__ import annotations

import json
import math
import random
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from billing_audit.errors import BillingAuditError

PROVIDERS = ("aws", "azure", "gcp")
DEFAULT_ROWS_PER_FILE = {"aws": 2_000_000, "azure": 1_000_000, "gcp": 2_000_000}
HOURS = 744  # October 2026
PERIOD = "2026-10-01"

# What a line is, as a share of the month's lines (parts per million).
RESTART_FEE_PPM = 1000  # ~0.1%

TEAMS = ["vision", "nlp", "speech", "research", "recsys", "platform"]
MODELS = ["resnet-sweep", "detr-large", "llm-pretrain", "t5-xxl-ft", "whisper-ft", "bert-distill", "vit-huge",
          "dlrm-train"]


def _jobs(rng: random.Random) -> list[tuple[str, str]]:
    """48 training jobs: (job, team)."""
    out = []
    for i in range(48):
        team = TEAMS[i % len(TEAMS)]
        out.append((f"{MODELS[(i * 5) % len(MODELS)]}-{i + 1}", team))
    rng.shuffle(out)
    return out


@dataclass
class Pool:
    """Templates of one kind of line and the share of lines (ppm) drawn from them."""

    kind: str
    ppm: int
    templates: list[dict[str, Any]]


# amount models: how a line's quantity is drawn
HOURLY, UNIFORM, COUNT = 0, 1, 2


def _pick_sql(pools: list[Pool]) -> str:
    """SQL picking a template id from hash h (kind by share) and h1 (template within the kind)."""
    total = sum(p.ppm for p in pools if p.templates)
    arms, acc, off = [], 0, 0
    for p in pools:
        if not p.templates:
            continue
        acc += p.ppm
        bound = round(acc * 1_000_000 / total)
        arms.append(f"WHEN h % 1000000 < {bound} THEN {off} + CAST(h1 % {len(p.templates)} AS BIGINT)")
        off += len(p.templates)
    return "CASE " + " ".join(arms) + f" ELSE {off - 1} END"


def _flatten(pools: list[Pool]) -> list[dict[str, Any]]:
    out = []
    for p in pools:
        for t in p.templates:
            out.append({"tid": len(out), "kind": p.kind, **t})
    return out


def _register(con: duckdb.DuckDBPyConnection, name: str, rows: list[dict[str, Any]], schema: pa.Schema) -> None:
    table = pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in rows], schema=schema)
    con.register(f"{name}_arrow", table)
    con.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM {name}_arrow")
    con.unregister(f"{name}_arrow")


def _parts(rows: int, per_file: int) -> list[tuple[int, int]]:
    n = max(1, math.ceil(rows / per_file))
    bounds = [rows * k // n for k in range(n + 1)]
    return [(bounds[k], bounds[k + 1]) for k in range(n)]


def _connect() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    _settings(con)
    return con


def _settings(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("SET preserve_insertion_order = true")
    con.execute("SET enable_progress_bar = false")
    con.execute("SET TimeZone = 'UTC'")


def _copy_parts(con: duckdb.DuckDBPyConnection, jobs: list[tuple[str, Path]], options: str,
                after: Callable[[Path], None] | None = None) -> None:
    """Run one COPY per part, as many at once as DuckDB has threads.

    A COPY over ``range()`` runs on one thread (the table function is not parallel), so the
    parts of a multi-part export are written side by side, each on its own cursor.
    """

    def run(job: tuple[str, Path]) -> None:
        sql, path = job
        cur = con.cursor()
        try:
            _settings(cur)
            cur.execute(f"COPY ({sql}) TO '{path}' ({options})")
        finally:
            cur.close()
        if after is not None:
            after(path)

    threads = int(con.execute("SELECT current_setting('threads')").fetchone()[0])  # type: ignore[index]
    workers = max(1, min(threads, len(jobs)))
    if workers == 1:
        for job in jobs:
            run(job)
        return
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for f in [pool.submit(run, job) for job in jobs]:
            f.result()


# Row-level draws shared by every provider: h picks the kind, h1 the template, h2 the quantity,
# h3 the hour / day.  amount: HOURLY -> 1.0, or a partial hour in partial_permille of lines;
# UNIFORM -> lo..hi rounded to digits; COUNT -> 1..hi.
DRAWS_SQL = """
WITH r AS (SELECT i, hash(i, {seed}) AS h, hash(i, {seed}, 1) AS h1 FROM range({a}, {b}) AS g(i)),
p AS (SELECT i, h, {pick} AS tid, hash(h, 2) AS h2, hash(h, 3) AS h3 FROM r),
x AS (
  SELECT p.i, p.h, p.h2, p.h3, t.*,
    CASE t.amt_model
      WHEN 0 THEN CASE WHEN p.h2 % 1000 < t.partial_permille
                       THEN round(0.05 + CAST((p.h2 // 1000) % 9000 AS DOUBLE) / 10000.0, 4) ELSE 1.0 END
      WHEN 2 THEN CAST(1 + (p.h2 // 1000) % CAST(t.amt_hi AS UBIGINT) AS DOUBLE)
      ELSE round(t.amt_lo + CAST((p.h2 // 1000) % 1000000 AS DOUBLE) / 1000000.0 * (t.amt_hi - t.amt_lo), t.amt_digits)
    END AS amount
  FROM p JOIN tmpl AS t USING (tid)
)
"""


# ---------------------------------------------------------------------------------------------------------------
# AWS legacy CUR, Athena parquet
# ---------------------------------------------------------------------------------------------------------------

AWS_REGIONS = [  # code, CUR usage-type prefix, location name, inter-region prefix
    ("us-east-1", "", "US East (N. Virginia)", "USE1"),
    ("us-east-2", "USE2-", "US East (Ohio)", "USE2"),
    ("us-west-2", "USW2-", "US West (Oregon)", "USW2"),
    ("eu-west-1", "EU-", "EU (Ireland)", "EU"),
    ("eu-central-1", "EUC1-", "EU (Frankfurt)", "EUC1"),
    ("ap-northeast-1", "APN1-", "Asia Pacific (Tokyo)", "APN1"),
    ("ap-southeast-2", "APS2-", "Asia Pacific (Sydney)", "APS2"),
    ("ca-central-1", "CAN1-", "Canada (Central)", "CAN1"),
]
# instance type, on-demand $/h, vcpu, memory, gpus, restart fee $
AWS_GPU = [
    ("p3.2xlarge", 3.06, 8, "61 GiB", 1, 0.05), ("p3.8xlarge", 12.24, 32, "244 GiB", 4, 0.06),
    ("p3.16xlarge", 24.48, 64, "488 GiB", 8, 0.07), ("p4d.24xlarge", 32.7726, 96, "1152 GiB", 8, 0.08),
    ("p4de.24xlarge", 40.9657, 96, "1152 GiB", 8, 0.09), ("p5.48xlarge", 98.32, 192, "2048 GiB", 8, 0.25),
    ("p5e.48xlarge", 108.152, 192, "2048 GiB", 8, 0.25), ("g4dn.xlarge", 0.526, 4, "16 GiB", 1, 0.05),
    ("g4dn.12xlarge", 3.912, 48, "192 GiB", 4, 0.05), ("g5.xlarge", 1.006, 4, "16 GiB", 1, 0.05),
    ("g5.12xlarge", 5.672, 48, "192 GiB", 4, 0.06), ("g5.48xlarge", 16.288, 192, "768 GiB", 8, 0.07),
    ("g6.xlarge", 0.8048, 4, "16 GiB", 1, 0.05), ("g6.12xlarge", 4.6016, 48, "192 GiB", 4, 0.06),
    ("g6e.xlarge", 1.861, 4, "32 GiB", 1, 0.05), ("g6e.12xlarge", 10.493, 48, "384 GiB", 4, 0.07),
    ("trn1.32xlarge", 21.50, 128, "512 GiB", 16, 0.12), ("inf2.xlarge", 0.7582, 4, "16 GiB", 1, 0.05),
    ("inf2.48xlarge", 12.9813, 192, "768 GiB", 12, 0.10),
]
AWS_CPU = [
    ("m5.xlarge", 0.192, 4, "16 GiB"), ("m5.4xlarge", 0.768, 16, "64 GiB"), ("m6i.large", 0.096, 2, "8 GiB"),
    ("m6i.8xlarge", 1.536, 32, "128 GiB"), ("c5.2xlarge", 0.34, 8, "16 GiB"), ("c6i.4xlarge", 0.68, 16, "32 GiB"),
    ("r5.2xlarge", 0.504, 8, "64 GiB"), ("r6i.4xlarge", 1.008, 16, "128 GiB"), ("t3.medium", 0.0416, 2, "4 GiB"),
    ("t3.xlarge", 0.1664, 4, "16 GiB"),
]
AWS_TEXT_COLS = [
    "line_item_usage_account_id", "line_item_line_item_type", "line_item_product_code", "line_item_usage_type",
    "line_item_operation", "line_item_availability_zone", "line_item_resource_id", "line_item_unblended_rate",
    "line_item_blended_rate", "line_item_line_item_description", "line_item_tax_type", "line_item_legal_entity",
    "product_product_name", "product_product_family", "product_servicecode", "product_sku", "product_usagetype",
    "product_operation", "product_location", "product_location_type", "product_region", "product_region_code",
    "product_instance_type", "product_instance_family", "product_instance_type_family", "product_operating_system",
    "product_tenancy", "product_vcpu", "product_memory", "product_gpu", "product_storage_class",
    "product_volume_api_name", "product_from_location", "product_to_location", "product_transfer_type",
    "product_group", "pricing_purchase_option", "pricing_rate_code", "pricing_rate_id",
    "pricing_public_on_demand_rate", "pricing_term", "pricing_unit",
]
AWS_TAG_COLS = [
    "resource_tags_aws_created_by", "resource_tags_user_cost_center", "resource_tags_user_environment",
    "resource_tags_user_name", "resource_tags_user_purpose", "resource_tags_user_team",
    "resource_tags_user_training_job",
]
MODEL_FIELDS = [
    pa.field("tid", pa.int64()), pa.field("kind", pa.string()), pa.field("amt_model", pa.int32()),
    pa.field("amt_lo", pa.float64()), pa.field("amt_hi", pa.float64()), pa.field("amt_digits", pa.int32()),
    pa.field("partial_permille", pa.int32()), pa.field("rate", pa.float64()), pa.field("od_rate", pa.float64()),
    pa.field("whole_month", pa.bool_()),
]
AWS_TMPL_SCHEMA = pa.schema(
    MODEL_FIELDS
    + [pa.field(c, pa.string()) for c in AWS_TEXT_COLS]
    + [pa.field("normalization_factor", pa.float64())]
    + [pa.field(c, pa.string()) for c in AWS_TAG_COLS]
)


def _hexid(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def _aws_pools(rng: random.Random) -> list[Pool]:
    jobs = _jobs(rng)
    accounts = [f"{rng.randrange(10**11, 10**12):012d}" for _ in range(12)]
    team_account = {t: accounts[i] for i, t in enumerate(TEAMS)}

    def base(**kw: Any) -> dict[str, Any]:
        t: dict[str, Any] = {c: "" for c in AWS_TEXT_COLS}
        t.update(
            amt_model=HOURLY, amt_lo=1.0, amt_hi=1.0, amt_digits=4, partial_permille=0, whole_month=False,
            line_item_line_item_type="Usage", line_item_legal_entity="Amazon Web Services, Inc.",
            product_location_type="AWS Region", normalization_factor=0.0,
        )
        t.update(kw)
        t["product_usagetype"] = t["line_item_usage_type"]
        t["product_operation"] = t["line_item_operation"]
        t["line_item_blended_rate"] = t["line_item_unblended_rate"]
        if t["line_item_line_item_type"] == "Usage" and not t["product_sku"]:
            t["product_sku"] = _hexid(rng, 16).upper()
        t["pricing_rate_code"] = f"{t['product_sku']}.JRTCKXETXF.6YS6EN2CT7" if t["line_item_line_item_type"] == "Usage" else ""
        t["pricing_rate_id"] = str(rng.randrange(10**9, 10**10)) if t["line_item_line_item_type"] == "Usage" else ""
        return t

    def region_bits(reg: tuple[str, str, str, str], az: bool = True) -> dict[str, Any]:
        code, _, loc, _ = reg
        return dict(product_region=code, product_region_code=code, product_location=loc,
                    line_item_availability_zone=(code + rng.choice("abc")) if az else "")

    def ec2_tags(team: str | None, job: str | None, env: str = "prod", name: str = "") -> dict[str, Any]:
        return dict(resource_tags_user_team=team, resource_tags_user_training_job=job,
                    resource_tags_user_environment=env, resource_tags_user_name=name or None,
                    resource_tags_user_cost_center=(f"cc-{4400 + TEAMS.index(team)}" if team else None),
                    resource_tags_aws_created_by=rng.choice([None, "AssumedRole:AROAEXAMPLE:karpenter",
                                                             "IAMUser:AIDAEXAMPLE:ci"]))

    spot, fees, od, ebs, ckpt_get, s3_other, ckpt_out, egress, other, tax, credit = ([] for _ in range(11))
    # spot GPU instances of the training jobs (and the restart fee lines of some of them)
    for k in range(2400):
        job, team = jobs[k % len(jobs)]
        reg = AWS_REGIONS[(k * 7 + hash_str(job)) % len(AWS_REGIONS)]
        itype, od_rate, vcpu, mem, gpu, fee = AWS_GPU[(hash_str(job) + k // 48) % len(AWS_GPU)]
        spot_rate = round(od_rate * rng.uniform(0.28, 0.42), 4)
        iid = "i-0" + _hexid(rng, 16)
        common = dict(
            line_item_usage_account_id=team_account[team], line_item_product_code="AmazonEC2",
            line_item_resource_id=iid, product_product_name="Amazon Elastic Compute Cloud",
            product_product_family="Compute Instance", product_servicecode="AmazonEC2",
            product_instance_type=itype, product_instance_family="GPU instance",
            product_instance_type_family=itype.split(".")[0], product_operating_system="Linux",
            product_tenancy="Shared", product_vcpu=str(vcpu), product_memory=mem, product_gpu=str(gpu),
            **region_bits(reg), **ec2_tags(team, job, "train", f"{job}-worker-{k // 48}"),
        )
        spot.append(base(
            line_item_usage_type=f"{reg[1]}SpotUsage:{itype}", line_item_operation="RunInstances:SV001",
            line_item_unblended_rate=f"{spot_rate:.10f}", rate=spot_rate, od_rate=od_rate,
            line_item_line_item_description=f"{itype} Linux/UNIX Spot Instance-hour in {reg[2]}",
            pricing_public_on_demand_rate=f"{od_rate:.10f}", pricing_term="", pricing_unit="Hrs",
            partial_permille=120, normalization_factor=float(vcpu), **common,
        ))
        if k % 6 == 0:
            phrase = (f"Spot interruption recovery charge, {itype}, per restart" if k % 12 == 0
                      else f"Interrupted compute restart fee for {itype} spot instance in {reg[2]}")
            fees.append(base(
                line_item_usage_type=f"{reg[1]}SpotInterruptionRecovery:{itype}", line_item_operation="RunInstances:SV001",
                line_item_unblended_rate=f"{fee:.10f}", rate=fee, od_rate=fee, amt_model=COUNT, amt_hi=3.0,
                line_item_line_item_description=phrase, pricing_public_on_demand_rate=f"{fee:.10f}",
                pricing_term="OnDemand", pricing_unit="Restarts", **common,
            ))
    # on-demand instances: CPU fleet, a few GPU boxes for evaluation
    for k in range(1800):
        team = TEAMS[k % len(TEAMS)]
        reg = AWS_REGIONS[(k * 3) % len(AWS_REGIONS)]
        if k % 9 == 0:
            itype, rate, vcpu, mem, gpu, _ = AWS_GPU[k % len(AWS_GPU)]
            family = "GPU instance"
        else:
            itype, rate, vcpu, mem = AWS_CPU[k % len(AWS_CPU)]
            gpu, family = 0, "General purpose"
        windows = k % 13 == 0
        tagged = k % 5 != 0
        od.append(base(
            line_item_usage_account_id=accounts[k % len(accounts)], line_item_product_code="AmazonEC2",
            line_item_usage_type=f"{reg[1]}BoxUsage:{itype}", line_item_operation="RunInstances:0002" if windows else "RunInstances",
            line_item_resource_id="i-0" + _hexid(rng, 16), line_item_unblended_rate=f"{rate:.10f}", rate=rate, od_rate=rate,
            line_item_line_item_description=f"${rate:.4f} per On Demand {'Windows' if windows else 'Linux'} {itype} Instance Hour",
            product_product_name="Amazon Elastic Compute Cloud", product_product_family="Compute Instance",
            product_servicecode="AmazonEC2", product_instance_type=itype, product_instance_family=family,
            product_instance_type_family=itype.split(".")[0], product_operating_system="Windows" if windows else "Linux",
            product_tenancy="Shared", product_vcpu=str(vcpu), product_memory=mem, product_gpu=str(gpu) if gpu else "",
            pricing_public_on_demand_rate=f"{rate:.10f}", pricing_term="OnDemand", pricing_unit="Hrs",
            partial_permille=30, normalization_factor=float(vcpu), **region_bits(reg),
            **(ec2_tags(team, ("eval-" + team) if gpu else None, rng.choice(["prod", "dev", "ci"])) if tagged
               else ec2_tags(None, None, "")),
        ))
    # EBS volumes
    vol_types = [("gp3", 0.08, "General Purpose"), ("gp2", 0.10, "General Purpose"), ("io2", 0.125, "Provisioned IOPS"),
                 ("st1", 0.045, "Throughput Optimized HDD")]
    for k in range(1500):
        team = TEAMS[k % len(TEAMS)]
        reg = AWS_REGIONS[(k * 5) % len(AWS_REGIONS)]
        vt, rate, cls = vol_types[k % len(vol_types)]
        ebs.append(base(
            line_item_usage_account_id=team_account[team], line_item_product_code="AmazonEC2",
            line_item_usage_type=f"{reg[1]}EBS:VolumeUsage.{vt}", line_item_operation=f"CreateVolume-{vt.capitalize()}",
            line_item_resource_id="vol-0" + _hexid(rng, 16), line_item_unblended_rate=f"{rate:.10f}", rate=rate, od_rate=rate,
            line_item_line_item_description=f"${rate} per GB-month of {cls} ({vt}) provisioned storage - {reg[2]}",
            product_product_name="Amazon Elastic Compute Cloud", product_product_family="Storage",
            product_servicecode="AmazonEC2", product_volume_api_name=vt, product_storage_class=cls,
            pricing_public_on_demand_rate=f"{rate:.10f}", pricing_term="OnDemand", pricing_unit="GB-Mo",
            amt_model=UNIFORM, amt_lo=0.01, amt_hi=8.0, amt_digits=8, **region_bits(reg, az=True),
            **ec2_tags(team if k % 4 else None, None, "prod"),
        ))
    # buckets: one checkpoint bucket per job (purpose=checkpoint), plus data / log / artifact buckets
    buckets = []
    for job, team in jobs:
        buckets.append((f"ckpt-{job}", team, job, "checkpoint", AWS_REGIONS[hash_str(job) % len(AWS_REGIONS)]))
    for k in range(120):
        team = TEAMS[k % len(TEAMS)]
        purpose = ["data", "logs", "artifacts", "datasets"][k % 4]
        buckets.append((f"{team}-{purpose}-{k:03d}", team, None, purpose, AWS_REGIONS[k % len(AWS_REGIONS)]))
    for name, team, job, purpose, reg in buckets:
        s3 = dict(
            line_item_usage_account_id=team_account[team], line_item_product_code="AmazonS3",
            line_item_resource_id=name, product_product_name="Amazon Simple Storage Service",
            product_servicecode="AmazonS3", pricing_term="OnDemand", **region_bits(reg, az=False),
            resource_tags_user_team=team, resource_tags_user_training_job=job, resource_tags_user_purpose=purpose,
        )
        get = base(
            line_item_usage_type=f"{reg[1]}Requests-Tier2", line_item_operation="GetObject",
            line_item_unblended_rate="0.0000004000", rate=0.0000004, od_rate=0.0000004,
            line_item_line_item_description="$0.0004 per 1,000 GET and all other requests",
            product_product_family="API Request", product_group="S3-API-Tier2", pricing_unit="Requests",
            pricing_public_on_demand_rate="0.0000004000", amt_model=UNIFORM, amt_lo=100.0, amt_hi=400000.0,
            amt_digits=0, **s3,
        )
        (ckpt_get if purpose == "checkpoint" else s3_other).append(get)
        s3_other.append(base(
            line_item_usage_type=f"{reg[1]}Requests-Tier1", line_item_operation="PutObject",
            line_item_unblended_rate="0.0000050000", rate=0.000005, od_rate=0.000005,
            line_item_line_item_description="$0.005 per 1,000 PUT, COPY, POST, or LIST requests",
            product_product_family="API Request", product_group="S3-API-Tier1", pricing_unit="Requests",
            pricing_public_on_demand_rate="0.0000050000", amt_model=UNIFORM, amt_lo=10.0, amt_hi=40000.0,
            amt_digits=0, **s3,
        ))
        s3_other.append(base(
            line_item_usage_type=f"{reg[1]}TimedStorage-ByteHrs", line_item_operation="StandardStorage",
            line_item_unblended_rate="0.0230000000", rate=0.023, od_rate=0.023,
            line_item_line_item_description="$0.023 per GB - first 50 TB / month of storage used",
            product_product_family="Storage", product_storage_class="General Purpose", pricing_unit="GB-Mo",
            pricing_public_on_demand_rate="0.0230000000", amt_model=UNIFORM, amt_lo=0.5, amt_hi=400.0, amt_digits=8,
            **s3,
        ))
        for dst in AWS_REGIONS[:4] if purpose == "checkpoint" else AWS_REGIONS[:1]:
            if dst == reg:
                continue
            out = base(
                line_item_usage_type=f"{reg[3]}-{dst[3]}-AWS-Out-Bytes", line_item_operation="GetObject",
                line_item_unblended_rate="0.0200000000", rate=0.02, od_rate=0.02,
                line_item_line_item_description=f"$0.02 per GB - {reg[2]} data transfer to {dst[2]}",
                product_product_family="Data Transfer", product_from_location=reg[2], product_to_location=dst[2],
                product_transfer_type="InterRegion Outbound", pricing_unit="GB",
                pricing_public_on_demand_rate="0.0200000000", amt_model=UNIFORM, amt_lo=0.1, amt_hi=900.0,
                amt_digits=8, **s3,
            )
            (ckpt_out if purpose == "checkpoint" else egress).append(out)
    # internet egress of instances
    for k in range(300):
        reg = AWS_REGIONS[k % len(AWS_REGIONS)]
        team = TEAMS[k % len(TEAMS)]
        egress.append(base(
            line_item_usage_account_id=team_account[team], line_item_product_code="AWSDataTransfer",
            line_item_usage_type=f"{reg[3]}-DataTransfer-Out-Bytes", line_item_operation="RunInstances",
            line_item_resource_id="i-0" + _hexid(rng, 16), line_item_unblended_rate="0.0900000000", rate=0.09, od_rate=0.09,
            line_item_line_item_description="$0.090 per GB - first 10 TB / month data transfer out beyond the global free tier",
            product_product_name="AWS Data Transfer", product_product_family="Data Transfer", product_servicecode="AWSDataTransfer",
            product_from_location=reg[2], product_to_location="External", product_transfer_type="AWS Outbound",
            pricing_term="OnDemand", pricing_unit="GB", pricing_public_on_demand_rate="0.0900000000",
            amt_model=UNIFORM, amt_lo=0.001, amt_hi=50.0, amt_digits=8, **region_bits(reg, az=False),
            resource_tags_user_team=team,
        ))
    # other services
    others = [
        ("AmazonCloudWatch", "AmazonCloudWatch", "CW:MetricMonitorUsage", "MetricStorage", "Metric", 0.30, "Metrics", 0.01, 2.0),
        ("AmazonEKS", "Amazon Elastic Container Service for Kubernetes", "AmazonEKS-Hours:perCluster", "CreateOperation",
         "Compute", 0.10, "Hours", 1.0, 1.0),
        ("AmazonVPC", "Amazon Virtual Private Cloud", "NatGateway-Hours", "NatGateway", "NAT Gateway", 0.045, "Hrs", 1.0, 1.0),
        ("AmazonVPC", "Amazon Virtual Private Cloud", "NatGateway-Bytes", "NatGateway", "NAT Gateway", 0.045, "GB", 0.01, 80.0),
        ("AmazonECR", "Amazon EC2 Container Registry (ECR)", "TimedStorage-ByteHrs", "", "Storage", 0.10, "GB-Mo", 0.01, 5.0),
        ("AmazonFSx", "Amazon FSx", "Lustre-PersistentSSD-125-Storage", "CreateFileSystem", "Storage", 0.145, "GB-Mo", 1.0, 60.0),
    ]
    for k in range(len(others) * len(AWS_REGIONS) * 4):
        code, pname, ut, op, fam, rate, unit, lo, hi = others[k % len(others)]
        reg = AWS_REGIONS[(k // len(others)) % len(AWS_REGIONS)]
        team = TEAMS[k % len(TEAMS)]
        other.append(base(
            line_item_usage_account_id=team_account[team], line_item_product_code=code,
            line_item_usage_type=f"{reg[3]}-{ut}", line_item_operation=op,
            line_item_resource_id=f"arn:aws:{code.lower()}:{reg[0]}:{team_account[team]}:res/{_hexid(rng, 8)}",
            line_item_unblended_rate=f"{rate:.10f}", rate=rate, od_rate=rate,
            line_item_line_item_description=f"${rate} per {unit} - {pname}", product_product_name=pname,
            product_product_family=fam, product_servicecode=code, pricing_term="OnDemand", pricing_unit=unit,
            pricing_public_on_demand_rate=f"{rate:.10f}", amt_model=UNIFORM if hi > lo else HOURLY, amt_lo=lo, amt_hi=hi,
            amt_digits=8, **region_bits(reg, az=False), resource_tags_user_team=team if k % 3 else None,
        ))
    for k, code in enumerate(["AmazonEC2", "AmazonS3", "AWSDataTransfer", "AmazonCloudWatch", "AmazonEKS", "AmazonVPC"] * 2):
        tax.append(base(
            line_item_usage_account_id=accounts[k], line_item_line_item_type="Tax", line_item_product_code=code,
            line_item_line_item_description=f"Tax for product code {code}", line_item_tax_type="VAT",
            product_product_name="", product_location_type="", whole_month=True,
            amt_model=UNIFORM, amt_lo=5.0, amt_hi=900.0, amt_digits=2, rate=1.0, od_rate=None, product_sku="",
        ))
    for k in range(4):
        credit.append(base(
            line_item_usage_account_id=accounts[k], line_item_line_item_type="Credit", line_item_product_code="AmazonEC2",
            line_item_line_item_description="AWS Credit - research grant", product_product_name="", product_location_type="",
            whole_month=True, amt_model=UNIFORM, amt_lo=10.0, amt_hi=300.0, amt_digits=2, rate=-1.0, od_rate=None,
            product_sku="",
        ))
    # pricing_unit on tax/credit stays "": real CUR leaves it empty
    return [
        Pool("restart_fee", RESTART_FEE_PPM, fees),
        Pool("spot_gpu", 300_000, spot),
        Pool("on_demand", 330_000, od),
        Pool("ebs", 120_000, ebs),
        Pool("checkpoint_get", 40_000, ckpt_get),
        Pool("s3_other", 90_000, s3_other),
        Pool("checkpoint_egress", 30_000, ckpt_out),
        Pool("egress", 40_000, egress),
        Pool("other", 48_800, other),
        Pool("tax", 100, tax),
        Pool("credit", 100, credit),
    ]


def hash_str(s: str) -> int:
    """A stable small hash of a string (Python's hash() is salted per process)."""
    h = 0
    for ch in s:
        h = (h * 131 + ord(ch)) % 1_000_003
    return h


AWS_SELECT = """
SELECT
  lower(hex(h)) || lower(hex(hash(h, 5))) AS identity_line_item_id,
  strftime(s, '%Y-%m-%dT%H:%M:%SZ') || '/' || strftime(e, '%Y-%m-%dT%H:%M:%SZ') AS identity_time_interval,
  '' AS bill_invoice_id,
  'Amazon Web Services, Inc.' AS bill_invoicing_entity,
  'AWS' AS bill_billing_entity,
  'Anniversary' AS bill_bill_type,
  '{payer}' AS bill_payer_account_id,
  TIMESTAMP '2026-10-01' AS bill_billing_period_start_date,
  TIMESTAMP '2026-11-01' AS bill_billing_period_end_date,
  line_item_usage_account_id, line_item_line_item_type,
  s AS line_item_usage_start_date, e AS line_item_usage_end_date,
  line_item_product_code, line_item_usage_type, line_item_operation, line_item_availability_zone,
  line_item_resource_id,
  amount AS line_item_usage_amount,
  normalization_factor AS line_item_normalization_factor,
  round(amount * normalization_factor, 8) AS line_item_normalized_usage_amount,
  'USD' AS line_item_currency_code,
  line_item_unblended_rate,
  cost AS line_item_unblended_cost,
  line_item_blended_rate,
  cost AS line_item_blended_cost,
  line_item_line_item_description, line_item_tax_type, line_item_legal_entity,
  product_product_name, product_product_family, product_servicecode, product_sku, product_usagetype,
  product_operation, product_location, product_location_type, product_region, product_region_code,
  product_instance_type, product_instance_family, product_instance_type_family, product_operating_system,
  product_tenancy, product_vcpu, product_memory, product_gpu, product_storage_class, product_volume_api_name,
  product_from_location, product_to_location, product_transfer_type, product_group,
  'USD' AS pricing_currency, '' AS pricing_lease_contract_length, '' AS pricing_offering_class,
  pricing_purchase_option, pricing_rate_code, pricing_rate_id,
  round(amount * od_rate, 10) AS pricing_public_on_demand_cost,
  pricing_public_on_demand_rate, pricing_term, pricing_unit,
  0.0::DOUBLE AS reservation_amortized_upfront_cost_for_usage,
  0.0::DOUBLE AS reservation_effective_cost,
  '' AS reservation_reservation_a_r_n,
  '' AS savings_plan_savings_plan_a_r_n,
  0.0::DOUBLE AS savings_plan_savings_plan_effective_cost,
  0.0::DOUBLE AS savings_plan_savings_plan_rate,
  {tags}
FROM (
  SELECT x.*, round(amount * rate, 10) AS cost,
    CASE WHEN whole_month THEN TIMESTAMP '2026-10-01'
         ELSE TIMESTAMP '2026-10-01' + to_hours(CAST(h3 % 744 AS BIGINT)) END AS s,
    CASE WHEN whole_month THEN TIMESTAMP '2026-11-01'
         ELSE TIMESTAMP '2026-10-01' + to_hours(CAST(h3 % 744 AS BIGINT) + 1) END AS e
  FROM x
) AS y
"""

AWS_PAYER = "998877665544"
PARQUET_OPTIONS = "FORMAT parquet, COMPRESSION snappy, ROW_GROUP_SIZE 122880"


def _aws(con: duckdb.DuckDBPyConnection, rows: int, out: Path, seed: int, per_file: int, report: str = "gpu-estate-cur") -> list[Path]:
    pools = _aws_pools(random.Random(f"aws-{seed}"))
    _register(con, "tmpl", _flatten(pools), AWS_TMPL_SCHEMA)
    pick = _pick_sql(pools)
    root = out / "cur" / report / report
    folder = root / "year=2026" / "month=10"
    folder.mkdir(parents=True, exist_ok=True)
    (root / f"{report}-create-table.sql").write_text(
        f"CREATE EXTERNAL TABLE IF NOT EXISTS {report.replace('-', '_')} (...)\n"
        "PARTITIONED BY (year STRING, month STRING)\nSTORED AS PARQUET;\n"
    )
    (root / "cost_and_usage_data_status").mkdir(exist_ok=True)
    tags = ", ".join(AWS_TAG_COLS)
    jobs = []
    for n, (a, b) in enumerate(_parts(rows, per_file), start=1):
        path = folder / f"{report}-{n:05d}.snappy.parquet"
        sql = DRAWS_SQL.format(seed=int(seed), a=a, b=b, pick=pick) + AWS_SELECT.format(payer=AWS_PAYER, tags=tags)
        jobs.append((sql, path))
    _copy_parts(con, jobs, PARQUET_OPTIONS)
    return [p for _, p in jobs]


# ---------------------------------------------------------------------------------------------------------------
# Azure EA cost details, CSV, partitioned run with manifest.json
# ---------------------------------------------------------------------------------------------------------------

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


def _guid(rng: random.Random) -> str:
    h = _hexid(rng, 32)
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-8{h[17:20]}-{h[20:]}"


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
        if t.get("ResourceId") and not t.get("ResourceName"):
            t["ResourceName"] = t["ResourceId"].rsplit("/", 1)[-1]
        return t

    def where(sub: tuple[str, str], rg: str, reg: tuple[str, str, str]) -> dict[str, Any]:
        return dict(SubscriptionId=sub[0], SubscriptionName=sub[1], ResourceGroup=rg, ResourceLocation=reg[1],
                    MeterRegion=reg[2])

    def rid(sub: tuple[str, str], rg: str, provider: str, name: str) -> str:
        return f"/subscriptions/{sub[0]}/resourceGroups/{rg}/providers/{provider}/{name}"

    spot, fees, od, disks, ckpt_get, st_other, ckpt_out, egress, other, tax, credit = ([] for _ in range(11))
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
            meter, series, price, vcpu, _ = AZ_GPU[k % len(AZ_GPU)]
        else:
            meter, series, price, vcpu = AZ_CPU[k % len(AZ_CPU)]
        tags = _az_tags([("team", team), ("env", rng.choice(["prod", "dev", "ci"]))], rng) if k % 5 else ""
        if k % 211 == 7:
            tags = tags[: len(tags) // 2]  # real exports cut tag strings now and then
        od.append(base(
            ProductName=f"Virtual Machines {series} - {meter} - {reg[2]}", MeterCategory="Virtual Machines",
            MeterSubCategory=series, MeterId=meter_id(meter + reg[0]), MeterName=meter, UnitOfMeasure="1 Hour",
            price=f"{price}", PricingModel=rng.choice(["OnDemand", "On Demand"]), ConsumedService="Microsoft.Compute",
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
    accounts_st = [(f"ckpt{job.replace('-', '')}"[:24], team, job, "checkpoint") for job, team in jobs]
    accounts_st += [(f"{team}{p}{k:03d}"[:24], team, None, p)
                    for k, (team, p) in enumerate((TEAMS[i % 6], ["data", "logs", "artifacts"][i % 3]) for i in range(90))]
    for name, team, job, purpose in accounts_st:
        sub = team_sub[team]
        rg = f"rg-{team}-storage"
        reg = AZ_REGIONS[hash_str(name) % len(AZ_REGIONS)]
        sa = rid(sub, rg, "Microsoft.Storage", f"storageAccounts/{name}")
        tags = _az_tags([("team", team), ("training-job", job), ("purpose", purpose)], rng)
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


def _azure(con: duckdb.DuckDBPyConnection, rows: int, out: Path, seed: int, per_file: int) -> list[Path]:
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
            dst.write(b"\xef\xbb\xbf")
            shutil.copyfileobj(src, dst, 1 << 22)
        tmp.unlink()

    _copy_parts(con, jobs, "FORMAT csv, HEADER true, DELIMITER ',', QUOTE '\"', ESCAPE '\"'", after=add_bom)
    files = [folder / f"part_{k}_0001.csv" for k in range(len(parts))]
    blobs = [{"blobName": f"{rel}/{p.name}", "byteCount": p.stat().st_size, "dataRowCount": b - a}
             for p, (a, b) in zip(files, parts, strict=True)]
    manifest = {
        "manifestVersion": "2024-04-01",
        "exportConfig": {
            "exportName": export,
            "resourceId": f"/providers/Microsoft.Billing/billingAccounts/{EA_ACCOUNT}/providers/"
                          f"Microsoft.CostManagement/exports/{export}",
            "dataVersion": "2024-08-01", "apiVersion": "2023-07-01-preview", "type": "ActualCost",
            "timeFrame": "MonthToDate", "granularity": "Daily",
        },
        "deliveryConfig": {
            "partitionData": True, "dataOverwriteBehavior": "CreateNewReport", "fileFormat": "Csv",
            "compressionMode": "None",
            "containerUri": "/subscriptions/00000000-0000-4000-8000-0000000000f1/resourceGroups/rg-finops/providers/"
                            "Microsoft.Storage/storageAccounts/costexportsacct",
            "rootFolderPath": "ea",
        },
        "runInfo": {
            "executionType": "Scheduled", "submittedTime": "2026-11-02T05:12:43.1234567Z", "runId": run_id,
            "startDate": "2026-10-01T00:00:00", "endDate": "2026-10-31T00:00:00",
        },
        "blobs": blobs,
        "blobCount": len(blobs),
        "byteCount": sum(b["byteCount"] for b in blobs),
        "dataRowCount": rows,
    }
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return files


# ---------------------------------------------------------------------------------------------------------------
# GCP detailed billing export, parquet
# ---------------------------------------------------------------------------------------------------------------

KV = pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())]))
GCP_TMPL_SCHEMA = pa.schema(
    MODEL_FIELDS
    + [
        pa.field("service", pa.struct([("id", pa.string()), ("description", pa.string())])),
        pa.field("sku", pa.struct([("id", pa.string()), ("description", pa.string())])),
        pa.field("project", pa.struct([
            ("id", pa.string()), ("number", pa.string()), ("name", pa.string()), ("labels", KV),
            ("ancestry_numbers", pa.string()),
            ("ancestors", pa.list_(pa.struct([("resource_name", pa.string()), ("display_name", pa.string())]))),
        ])),
        pa.field("labels", KV),
        pa.field("system_labels", KV),
        pa.field("location", pa.struct([("location", pa.string()), ("country", pa.string()), ("region", pa.string()),
                                        ("zone", pa.string())])),
        pa.field("cost_type", pa.string()),
        pa.field("usage_unit", pa.string()),
        pa.field("usage_factor", pa.float64()),
        pa.field("pricing_unit", pa.string()),
        pa.field("consumption_model", pa.struct([("id", pa.string()), ("description", pa.string())])),
        pa.field("resource", pa.struct([("name", pa.string()), ("global_name", pa.string())])),
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
# GPU SKU family: (spot description, on-demand description, spot $/h, list $/h)
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

    def kv(**kw: str | None) -> list[dict[str, str]]:
        return [{"key": k.replace("__", "-"), "value": v} for k, v in kw.items() if v is not None]

    projects = {}
    for i, team in enumerate(TEAMS):
        for kind in ("train", "data", "serve"):
            pid = f"{team}-{kind}-{100 + i}"
            number = str(481516234200 + len(projects))
            projects[(team, kind)] = {
                "id": pid, "number": number, "name": pid, "labels": kv(team=team, env=kind),
                "ancestry_numbers": f"/418273645091/{number}/",
                "ancestors": [{"resource_name": f"projects/{number}", "display_name": pid},
                              {"resource_name": "organizations/418273645091", "display_name": "example.com"}],
            }

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

    spot, fees, od, disks, ckpt_get, st_other, ckpt_out, egress, other, tax = ([] for _ in range(10))
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
                labels=labels, location=loc(reg, zone), resource=res, rate=sp, od_rate=lp, partial_permille=120,
                amt_model=UNIFORM, amt_lo=1.0, amt_hi=8.0, amt_digits=0,
            ))
            if k % 10 == 4:
                fees.append(base(
                    service=TPU, sku=_sku_id(rng, skus, f"Spot Preemptible {name} chip preemption overhead running in {reg[2]}"),
                    project=proj, labels=labels, location=loc(reg, zone), resource=res, rate=fee, od_rate=fee * 2.5,
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
            location=loc(reg, zone), resource=res, rate=sp, od_rate=lp, partial_permille=120,
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
    buckets = [(f"ckpt-{job}", team, job, "checkpoint") for job, team in jobs]
    buckets += [(f"{TEAMS[i % 6]}-{['data', 'logs', 'artifacts'][i % 3]}-{i:03d}", TEAMS[i % 6], None,
                 ["data", "logs", "artifacts"][i % 3]) for i in range(90)]
    for name, team, job, purpose in buckets:
        reg = GCP_REGIONS[hash_str(name) % len(GCP_REGIONS)]
        proj = projects[(team, "data")]
        common = dict(project=proj, labels=kv(team=team, training__job=job, purpose=purpose),
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


def _gcp(con: duckdb.DuckDBPyConnection, rows: int, out: Path, seed: int, per_file: int) -> list[Path]:
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


WRITERS: dict[str, Callable[[duckdb.DuckDBPyConnection, int, Path, int, int], list[Path]]] = {
    "aws": _aws, "azure": _azure, "gcp": _gcp,
}


def generate(provider: str, rows: int, out_dir: str | Path, seed: int = 0, rows_per_file: int | None = None) -> list[Path]:
    """Write ``rows`` synthetic line items of October 2026 for ``provider`` under ``out_dir``.

    Returns the data files written (parquet or CSV), in order.  ``rows_per_file`` caps a part's
    size (default: 2M for AWS and GCP, 1M for Azure); parts are of near-equal size.
    """
    if provider not in WRITERS:
        raise BillingAuditError(f"unknown provider {provider!r}: expected one of {', '.join(PROVIDERS)}")
    if rows < 1:
        raise BillingAuditError(f"rows must be at least 1 (got {rows})")
    per_file = rows_per_file or DEFAULT_ROWS_PER_FILE[provider]
    if per_file < 1:
        raise BillingAuditError(f"rows_per_file must be at least 1 (got {per_file})")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    con = _connect()
    try:
        return WRITERS[provider](con, int(rows), out, int(seed), int(per_file))
    finally:
        con.close()
