"""Synthetic AWS legacy CUR at scale, as Athena parquet (snake_case, ~75 columns incl. ``resource_tags_user_*``):
``<out>/cur/<report>/<report>/year=2026/month=10/<report>-0000N.snappy.parquet``, parts of at most 2M rows,
plus ``<report>-create-table.sql`` and ``cost_and_usage_data_status/``.  Restart fees read "Spot interruption
recovery charge".
"""

from __future__ import annotations

import io
import random
import zipfile
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from connectors import synthetic
from connectors.synthetic import (
    COUNT,
    DMAP,
    DRAWS_SQL,
    F64,
    HOURLY,
    MODEL_FIELDS,
    PARQUET_OPTIONS,
    RESTART_FEE_PPM,
    SMAP,
    STR,
    TEAMS,
    TS_MS,
    UNIFORM,
    Pool,
    _copy_parts,
    _flatten,
    _hexid,
    _jobs,
    _parts,
    _pick_sql,
    _register,
    csv_bytes,
    gzip_bytes,
    hash_str,
    write_json,
)

ROWS_PER_FILE = 2_000_000

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
AWS_TMPL_SCHEMA = pa.schema(
    MODEL_FIELDS
    + [pa.field(c, pa.string()) for c in AWS_TEXT_COLS]
    + [pa.field("normalization_factor", pa.float64())]
    + [pa.field(c, pa.string()) for c in AWS_TAG_COLS]
)


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

    kinds: list[list[dict[str, Any]]] = [[] for _ in range(11)]
    spot, fees, od, ebs, ckpt_get, s3_other, ckpt_out, egress, other, tax, credit = kinds
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
        # one spot pool in eight has no public on-demand price, as real CURs have (0 on SpotUsage lines: a
        # missing price, which price references or the bill's own on-demand lines have to fill)
        public = 0.0 if k % 8 == 5 else od_rate
        spot.append(base(
            line_item_usage_type=f"{reg[1]}SpotUsage:{itype}", line_item_operation="RunInstances:SV001",
            line_item_unblended_rate=f"{spot_rate:.10f}", rate=spot_rate, od_rate=public,
            line_item_line_item_description=f"{itype} Linux/UNIX Spot Instance-hour in {reg[2]}",
            pricing_public_on_demand_rate=f"{public:.10f}", pricing_term="", pricing_unit="Hrs",
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
    buckets: list[tuple[str, str, str | None, str, tuple[str, str, str, str]]] = []
    for job, team in jobs:
        buckets.append((f"ckpt-{job}", team, job, "checkpoint", AWS_REGIONS[hash_str(job) % len(AWS_REGIONS)]))
    for k in range(120):
        team = TEAMS[k % len(TEAMS)]
        purpose = ["data", "logs", "artifacts", "datasets"][k % 4]
        buckets.append((f"{team}-{purpose}-{k:03d}", team, None, purpose, AWS_REGIONS[k % len(AWS_REGIONS)]))
    for name, team, owner_job, purpose, reg in buckets:
        s3 = dict(
            line_item_usage_account_id=team_account[team], line_item_product_code="AmazonS3",
            line_item_resource_id=name, product_product_name="Amazon Simple Storage Service",
            product_servicecode="AmazonS3", pricing_term="OnDemand", **region_bits(reg, az=False),
            resource_tags_user_team=team, resource_tags_user_training_job=owner_job, resource_tags_user_purpose=purpose,
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


def write(con: duckdb.DuckDBPyConnection, rows: int, out: Path, seed: int, per_file: int, report: str = "gpu-estate-cur") -> list[Path]:
    pools = _aws_pools(random.Random(f"aws-{seed}"))
    _register(con, "tmpl", _flatten(pools), AWS_TMPL_SCHEMA)
    pick = _pick_sql(pools)
    folder = athena_cur_folder(out, report, 2026, 10, f"CREATE EXTERNAL TABLE IF NOT EXISTS {report.replace('-', '_')} (...)\n"
                               "PARTITIONED BY (year STRING, month STRING)\nSTORED AS PARQUET;\n")
    tags = ", ".join(AWS_TAG_COLS)
    jobs = []
    for n, (a, b) in enumerate(_parts(rows, per_file), start=1):
        path = folder / f"{report}-{n:05d}.snappy.parquet"
        sql = DRAWS_SQL.format(seed=int(seed), a=a, b=b, pick=pick) + AWS_SELECT.format(payer=AWS_PAYER, tags=tags)
        jobs.append((sql, path))
    _copy_parts(con, jobs, PARQUET_OPTIONS)
    return [p for _, p in jobs]


def generate(rows: int, out_dir: str | Path, seed: int = 0, rows_per_file: int | None = None) -> list[Path]:
    """Write ``rows`` synthetic line items of October 2026 under ``out_dir``; the data files written, in order."""
    return synthetic.generate(write, ROWS_PER_FILE, rows, out_dir, seed, rows_per_file)


# -- legacy CUR: the Athena parquet layout and the CSV report assemblies ----------------------------


def athena_cur_folder(out: Path, report: str, year: int, month: int, create_table: str) -> Path:
    """The Athena-integrated report's month folder ``cur/<report>/<report>/year=Y/month=M`` (made), its
    ``<report>-create-table.sql`` and ``cost_and_usage_data_status/``."""
    root = out / "cur" / report / report
    folder = root / f"year={year}" / f"month={month}"
    folder.mkdir(parents=True, exist_ok=True)
    (root / f"{report}-create-table.sql").write_text(create_table)
    (root / "cost_and_usage_data_status").mkdir(exist_ok=True)
    return folder


# The CSV header of each (Athena snake_case) column a legacy CUR line of the fixtures has, in file order.
CUR_CSV_HEADERS = {
    "identity_line_item_id": "identity/LineItemId",
    "identity_time_interval": "identity/TimeInterval",
    "bill_invoice_id": "bill/InvoiceId",
    "bill_billing_entity": "bill/BillingEntity",
    "bill_bill_type": "bill/BillType",
    "bill_payer_account_id": "bill/PayerAccountId",
    "bill_billing_period_start_date": "bill/BillingPeriodStartDate",
    "bill_billing_period_end_date": "bill/BillingPeriodEndDate",
    "line_item_usage_account_id": "lineItem/UsageAccountId",
    "line_item_line_item_type": "lineItem/LineItemType",
    "line_item_usage_start_date": "lineItem/UsageStartDate",
    "line_item_usage_end_date": "lineItem/UsageEndDate",
    "line_item_product_code": "lineItem/ProductCode",
    "line_item_usage_type": "lineItem/UsageType",
    "line_item_operation": "lineItem/Operation",
    "line_item_availability_zone": "lineItem/AvailabilityZone",
    "line_item_resource_id": "lineItem/ResourceId",
    "line_item_usage_amount": "lineItem/UsageAmount",
    "line_item_currency_code": "lineItem/CurrencyCode",
    "line_item_unblended_rate": "lineItem/UnblendedRate",
    "line_item_unblended_cost": "lineItem/UnblendedCost",
    "line_item_blended_cost": "lineItem/BlendedCost",
    "line_item_line_item_description": "lineItem/LineItemDescription",
    "line_item_legal_entity": "lineItem/LegalEntity",
    "product_product_name": "product/ProductName",
    "product_instance_type": "product/instanceType",
    "product_region": "product/region",
    "product_location": "product/location",
    "product_product_family": "product/productFamily",
    "pricing_term": "pricing/term",
    "pricing_unit": "pricing/unit",
    "pricing_public_on_demand_cost": "pricing/publicOnDemandCost",
    "pricing_public_on_demand_rate": "pricing/publicOnDemandRate",
    "resource_tags_user_team": "resourceTags/user:Team",
    "resource_tags_user_training_job": "resourceTags/user:training-job",
    "resource_tags_user_purpose": "resourceTags/user:purpose",
    "resource_tags_aws_created_by": "resourceTags/aws:createdBy",
}
CUR_PARQUET_TYPES: dict[str, pa.DataType] = {
    **dict.fromkeys(["bill_billing_period_start_date", "bill_billing_period_end_date", "line_item_usage_start_date",
                     "line_item_usage_end_date"], TS_MS),
    **dict.fromkeys(["line_item_usage_amount", "line_item_unblended_cost", "line_item_blended_cost",
                     "pricing_public_on_demand_cost"], F64),
}


def cur_line(start: datetime, **kw: Any) -> dict[str, Any]:
    """One legacy CUR line of an hour from ``start``: every column of ``CUR_CSV_HEADERS`` ("" unless given)."""
    end = start + timedelta(hours=1)
    row: dict[str, Any] = dict.fromkeys(CUR_CSV_HEADERS, "")
    row.update(identity_time_interval=f"{start:%Y-%m-%dT%H:00:00Z}/{end:%Y-%m-%dT%H:00:00Z}",
               line_item_usage_start_date=start, line_item_usage_end_date=end)
    row.update(kw)
    return row


def write_cur_parquet(rows: list[dict[str, Any]], path: Path) -> None:
    """Athena CUR parquet: empty strings for most text columns and NULL for absent tags."""
    path.parent.mkdir(parents=True, exist_ok=True)
    schema = pa.schema([pa.field(k, CUR_PARQUET_TYPES.get(k, STR)) for k in rows[0]])
    cols = {k: [r[k] if not k.startswith("resource_tags_") else (r[k] or None) for r in rows] for k in rows[0]}
    pq.write_table(pa.table(cols, schema=schema), path, compression="snappy")


def _cur_csv_value(v: object) -> str:
    if v is None:
        return ""
    if isinstance(v, datetime):
        return f"{v:%Y-%m-%dT%H:%M:%SZ}"
    if isinstance(v, float):
        return format(Decimal(repr(v)).normalize(), "f") if v else "0"
    return str(v)


def cur_csv(rows: list[dict[str, Any]]) -> bytes:
    """Legacy CUR lines as the CSV report writes them (``lineItem/UsageType`` headers)."""
    return csv_bytes(CUR_CSV_HEADERS.values(), rows, keys=CUR_CSV_HEADERS, value=_cur_csv_value)


def write_cur_csv_report(bucket: Path, report: str, start: datetime, end: datetime, payer: str,
                         assemblies: list[tuple[str, list[dict[str, Any]]]], report_id: str = "0f3b" * 16,
                         bucket_name: str = "example-billing-bucket") -> None:
    """A CSV report of one billing period under ``bucket/cur/<report>/<YYYYMMDD-YYYYMMDD>/``: each
    assembly (id, lines) a folder of two parts (``-1.csv.gz`` and ``-2.zip``) and its ``-Manifest.json``;
    the period's manifest names the last assembly (the current one, as with "keep versions")."""
    period = f"{start:%Y%m%d}-{end:%Y%m%d}"
    folder = bucket / "cur" / report / period
    manifest: dict[str, object] = {}
    for assembly, rows in assemblies:
        half = len(rows) // 2
        (folder / assembly).mkdir(parents=True, exist_ok=True)
        (folder / assembly / f"{report}-1.csv.gz").write_bytes(gzip_bytes(cur_csv(rows[:half])))
        zbuf = io.BytesIO()
        with zipfile.ZipFile(zbuf, "w", zipfile.ZIP_DEFLATED) as zf:
            delivered = end + timedelta(days=1)
            zf.writestr(zipfile.ZipInfo(f"{report}-2.csv", date_time=delivered.timetuple()[:6]), cur_csv(rows[half:]))
        (folder / assembly / f"{report}-2.zip").write_bytes(zbuf.getvalue())
        manifest = {
            "assemblyId": assembly,
            "account": payer,
            "columns": [{"category": k.split("/")[0], "name": k.split("/")[1]} for k in CUR_CSV_HEADERS.values()],
            "charset": "UTF-8",
            "compression": "GZIP",
            "contentType": "text/csv",
            "reportId": report_id,
            "reportName": report,
            "billingPeriod": {"start": f"{start:%Y%m%dT%H%M%S}.000Z", "end": f"{end:%Y%m%dT%H%M%S}.000Z"},
            "bucket": bucket_name,
            "reportKeys": [f"cur/{report}/{period}/{assembly}/{report}-1.csv.gz", f"cur/{report}/{period}/{assembly}/{report}-2.zip"],
            "additionalArtifactKeys": [],
        }
        write_json(folder / assembly / f"{report}-Manifest.json", manifest)
    write_json(folder / f"{report}-Manifest.json", manifest)


# -- CUR 2.0 and the other Data Exports (FOCUS 1.2 with AWS columns): parquet parts and the manifest --

# The CUR 2.0 columns the fixtures write, in table order, with their parquet types (text unless named here).
_CUR2_TYPES: dict[str, pa.DataType] = {
    **dict.fromkeys(["bill_billing_period_end_date", "bill_billing_period_start_date", "line_item_usage_end_date",
                     "line_item_usage_start_date"], TS_MS),
    **dict.fromkeys(["cost_category", "product", "resource_tags"], SMAP),
    "discount": DMAP,
    **dict.fromkeys(["discount_bundled_discount", "discount_total_discount", "line_item_net_unblended_cost",
                     "line_item_unblended_cost", "line_item_usage_amount", "pricing_public_on_demand_cost",
                     "reservation_effective_cost", "savings_plan_savings_plan_effective_cost"], F64),
}
CUR2_SCHEMA: list[tuple[str, pa.DataType]] = [(n, _CUR2_TYPES.get(n, STR)) for n in [
    "bill_bill_type", "bill_billing_entity", "bill_billing_period_end_date", "bill_billing_period_start_date",
    "bill_invoice_id", "bill_invoicing_entity", "bill_payer_account_id", "bill_payer_account_name", "cost_category",
    "discount", "discount_bundled_discount", "discount_total_discount", "identity_line_item_id",
    "identity_time_interval", "line_item_availability_zone", "line_item_currency_code", "line_item_legal_entity",
    "line_item_line_item_description", "line_item_line_item_type", "line_item_net_unblended_cost",
    "line_item_net_unblended_rate", "line_item_operation", "line_item_product_code", "line_item_resource_id",
    "line_item_unblended_cost", "line_item_unblended_rate", "line_item_usage_account_id",
    "line_item_usage_account_name", "line_item_usage_amount", "line_item_usage_end_date",
    "line_item_usage_start_date", "line_item_usage_type", "pricing_purchase_option", "pricing_public_on_demand_cost",
    "pricing_public_on_demand_rate", "pricing_term", "pricing_unit", "product", "product_fee_code",
    "product_from_location", "product_instance_type", "product_product_family", "product_region_code",
    "product_servicecode", "product_sku", "product_to_location", "product_usagetype", "reservation_effective_cost",
    "reservation_reservation_a_r_n", "resource_tags", "savings_plan_savings_plan_a_r_n",
    "savings_plan_savings_plan_effective_cost",
]]


def write_data_export_parquet(rows: list[dict[str, Any]], path: Path, schema: list[tuple[str, pa.DataType]] = CUR2_SCHEMA) -> None:
    """One Data Exports parquet part; map columns from dicts (None = NULL)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    cols: dict[str, list[object]] = {}
    for name, typ in schema:
        vals = [r[name] for r in rows]
        if isinstance(typ, pa.MapType):  # pyarrow takes maps as lists of (key, value)
            vals = [None if v is None else list(v.items()) for v in vals]
        cols[name] = vals
    pq.write_table(pa.table(cols, schema=pa.schema([pa.field(n, t) for n, t in schema])), path, compression="snappy")


def glue_type(t: pa.DataType) -> str:
    """A parquet column's type as the Data Exports manifest names it."""
    if t == SMAP:
        return "map<string,string>"
    if t == DMAP:
        return "map<string,double>"
    return {STR: "string", F64: "double", TS_MS: "timestamp"}[t]


def write_data_export(bucket: Path, prefix: str, export: str, arn: str, period: datetime,
                      executions: list[tuple[str | None, str, list[list[dict[str, Any]]]]],
                      schema: list[tuple[str, pa.DataType]] = CUR2_SCHEMA, bucket_name: str = "example-billing-bucket") -> None:
    """One billing period of a Data Export under ``bucket/<prefix>/<export>/``.

    Each execution (folder stamp or None for "overwrite" mode, execution id, parts) writes its parts to
    ``data/BILLING_PERIOD=YYYY-MM/[stamp/]<export>-0000N.snappy.parquet``; the manifest in
    ``metadata/BILLING_PERIOD=YYYY-MM/`` is rewritten on every execution, so the last one's is on disk.
    """
    end = (period + timedelta(days=32)).replace(day=1)
    manifest: dict[str, object] = {}
    for stamp, execution, parts in executions:
        keys = []
        for i, part in enumerate(parts, start=1):
            key = f"{prefix}/{export}/data/BILLING_PERIOD={period:%Y-%m}/{f'{stamp}/' if stamp else ''}{export}-{i:05d}.snappy.parquet"
            write_data_export_parquet(part, bucket / key, schema)
            keys.append(key)
        manifest = {
            "exportArn": arn,
            "exportName": export,
            "executionId": execution,
            "billingPeriod": {"start": f"{period:%Y-%m-%dT%H:%M:%S}.000Z", "end": f"{end:%Y-%m-%dT%H:%M:%S}.000Z"},
            "bucket": bucket_name,
            "dataFiles": [f"s3://{bucket_name}/{k}" for k in keys],
            "columns": [{"name": n, "type": glue_type(t)} for n, t in schema],
            "format": "PARQUET",
            "compression": "PARQUET",
            "additionalOutputFiles": [],
        }
    write_json(bucket / prefix / export / "metadata" / f"BILLING_PERIOD={period:%Y-%m}" / f"{export}-Manifest.json", manifest)
