"""AWS CUR 2.0 (Data Exports): mapping, detection, manifests and "create new" snapshots."""

from __future__ import annotations

import csv
import importlib.util
import json
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import billing_audit
from billing_audit.deliveries import group
from billing_audit.errors import InputError
from connectors.aws.cur2 import Cur2Manifest
from connectors.aws.synthetic import write_data_export_parquet
from support import FIXTURES, Case, source_total

CUR2 = FIXTURES / "aws" / "cur2"
CREATE_NEW = FIXTURES / "aws" / "cur2-create-new"
SNAP_DATA = CREATE_NEW / "exports" / "gpu-cur2-snap" / "data" / "BILLING_PERIOD=2026-09"
OLDER, NEWER = SNAP_DATA / "20261002T041500Z", SNAP_DATA / "20261003T041700Z"
COST = Case("cost", "", "aws-cur2", ("line_item_unblended_cost",))

_spec = importlib.util.spec_from_file_location("gen_aws_cur2", FIXTURES / "gen_aws_cur2.py")
assert _spec and _spec.loader
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)


def _total(store: billing_audit.Store) -> Decimal:
    return store.con.execute("SELECT coalesce(sum(BilledCost), 0) FROM line_items").fetchone()[0]


def _files_total(folder: Path) -> Decimal:
    return sum((source_total(f, COST) for f in sorted(folder.glob("*.parquet"))), Decimal(0))


def test_spot_list_cost_and_account_names(db: Path) -> None:
    with billing_audit.open(db) as store:
        report = store.ingest([CUR2])
        assert not report.errors
        rows = store.con.execute(
            "SELECT DISTINCT x_UsageType, PricingCategory, x_PricingModel, ListCost, EffectiveCost FROM line_items "
            "WHERE x_UsageType LIKE '%SpotUsage%'"
        ).fetchall()
        assert {r[0] for r in rows} == {"USE1-SpotUsage:p4d.24xlarge", "USW2-SpotUsage:g5.12xlarge"}
        assert all(r[1] == "Dynamic" and r[2] == "Spot" and r[3] > r[4] for r in rows)
        names = store.con.execute(
            "SELECT DISTINCT BillingAccountId, BillingAccountName, SubAccountId, SubAccountName "
            "FROM line_items ORDER BY 3"
        ).fetchall()
        assert names == [
            ("222233334444", "GPU Research Payer", "222233335555", "ml-training-prod"),
            ("222233334444", "GPU Research Payer", "222233336666", "ml-data-platform"),
        ]
        # values from the product map and the top-level product_* columns
        s3 = store.con.execute(
            "SELECT ServiceName, RegionName, SkuMeter, ServiceCategory FROM line_items "
            "WHERE x_UsageType = 'USE1-Requests-Tier2'"
        ).fetchone()
        assert s3 == ("Amazon Simple Storage Service", "US East (N. Virginia)", "API Request", "Storage")
        disc = store.con.execute(
            "SELECT BilledCost, EffectiveCost FROM line_items WHERE x_UsageType = 'USE1-BoxUsage:m5.xlarge'"
        ).fetchone()
        assert disc == (Decimal("0.192"), Decimal("0.1728"))  # net unblended after the private-rate discount
        cats = dict(store.con.execute("SELECT x_LineItemType, ChargeCategory FROM line_items").fetchall())
        assert cats["Tax"] == "Tax" and cats["Credit"] == "Credit"


def test_tags_strip_user_prefix_keep_aws_and_merge_case(db: Path, tmp_path: Path) -> None:
    rows = gen._lines(gen.datetime(2026, 10, 1), "t")[:2]
    rows[0]["resource_tags"] = {
        "user_Team": "",
        "user_team": "vision",
        "user_TEAM": "other",
        "user_Training_Job": "vit-1",
        "aws_created_by": "ci",
    }
    rows[1]["resource_tags"] = None
    path = tmp_path / "BILLING_PERIOD=2026-10" / "x-00001.snappy.parquet"
    write_data_export_parquet(rows, path)
    with billing_audit.open(db) as store:
        assert not store.ingest([path]).errors
        tags = [r[0] for r in store.con.execute("SELECT Tags FROM line_items ORDER BY x_SourceRow").fetchall()]
    assert tags[0] == {"team": "vision", "training_job": "vit-1", "aws_created_by": "ci"}
    assert tags[1] == {}


def test_detection_of_each_variant(tmp_path: Path) -> None:
    # map-typed product without bill_payer_account_name: still CUR 2.0
    table = pq.read_table(CUR2 / "exports/gpu-cur2/data/BILLING_PERIOD=2026-10/gpu-cur2-00001.snappy.parquet")
    table = table.drop_columns(["bill_payer_account_name", "line_item_usage_account_name"]).slice(0, 2)
    no_names = tmp_path / "a" / "no-names.parquet"
    no_names.parent.mkdir()
    pq.write_table(table, no_names)
    # the CSV flavour of Data Exports: map columns as JSON text
    csv_path = tmp_path / "b" / "x-00001.csv"
    csv_path.parent.mkdir()
    _write_csv(
        csv_path,
        [
            {
                "product": json.dumps(
                    {
                        "product_name": "Amazon Elastic Compute Cloud",
                        "region": "us-east-1",
                        "location": "US East (N. Virginia)",
                    }
                ),
                "resource_tags": json.dumps({"user_Team": "vision", "user_training_job": "j1"}),
            },
            {"product": "", "resource_tags": "{not json"},
        ],
    )
    legacy = FIXTURES / "aws" / "cur-legacy-parquet"
    want = {CUR2: "aws-cur2", no_names: "aws-cur2", csv_path: "aws-cur2", legacy: "aws-cur"}
    for i, (path, fmt) in enumerate(want.items()):
        with billing_audit.open(tmp_path / f"s{i}.duckdb") as store:
            report = store.ingest([path])
            assert not report.errors, report.errors
            got = {r[0] for r in store.con.execute("SELECT DISTINCT format FROM ingest_log").fetchall()}
            assert got == {fmt}, path
            if path == csv_path:
                rows = store.con.execute(
                    "SELECT ServiceName, RegionName, Tags, x_TagsRaw, BillingAccountName, PricingCategory "
                    "FROM line_items ORDER BY x_SourceRow"
                ).fetchall()
    assert rows[0] == (
        "Amazon Elastic Compute Cloud",
        "US East (N. Virginia)",
        {"team": "vision", "training_job": "j1"},
        None,
        "GPU Research Payer",
        "Dynamic",
    )
    assert rows[1][0] == "AmazonEC2" and rows[1][2] == {} and rows[1][3] == "{not json"


def _write_csv(path: Path, extra: list[dict[str, str]]) -> None:
    header = [
        "bill_payer_account_id",
        "bill_payer_account_name",
        "line_item_usage_account_id",
        "line_item_line_item_type",
        "line_item_usage_start_date",
        "line_item_usage_end_date",
        "line_item_product_code",
        "line_item_usage_type",
        "line_item_unblended_cost",
        "pricing_public_on_demand_cost",
        "product",
        "resource_tags",
    ]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        for i, e in enumerate(extra):
            w.writerow(
                [
                    "222233334444",
                    "GPU Research Payer",
                    "022223333555",
                    "Usage",
                    f"2026-10-0{i + 1}T00:00:00Z",
                    f"2026-10-0{i + 1}T01:00:00Z",
                    "AmazonEC2",
                    "USE1-SpotUsage:g6e.xlarge",
                    e.get("cost", "1.25"),
                    "3.5",
                    e["product"],
                    e["resource_tags"],
                ]
            )


def test_malformed_cost_names_file_row_and_column(db: Path, tmp_path: Path) -> None:
    path = tmp_path / "x-00001.csv"
    _write_csv(
        path, [{"product": "{}", "resource_tags": "{}"}, {"product": "{}", "resource_tags": "{}", "cost": "1,25"}]
    )
    with billing_audit.open(db) as store:
        report = store.ingest([path])
        assert store.con.execute("SELECT count(*) FROM line_items").fetchone() == (0,)
    assert len(report.errors) == 1
    err = report.errors[0]
    assert isinstance(err, InputError)
    assert (err.file, err.row, err.column) == (str(path), 2, "line_item_unblended_cost")


def test_manifest_reader_fields() -> None:
    man = CUR2 / "exports/gpu-cur2/metadata/BILLING_PERIOD=2026-10/gpu-cur2-Manifest.json"
    hint = Cur2Manifest().read(man)
    assert hint is not None
    assert hint.key == "aws-cur2:gpu-cur2:2026-10:3f9a1c2e-0000-4000-8000-00000000e001"
    assert [f.name for f in hint.files] == ["gpu-cur2-00001.snappy.parquet", "gpu-cur2-00002.snappy.parquet"]
    assert all(f.is_file() for f in hint.files) and hint.newest and hint.version is None
    snap = Cur2Manifest().read(
        CREATE_NEW / "exports/gpu-cur2-snap/metadata/BILLING_PERIOD=2026-09/gpu-cur2-snap-Manifest.json"
    )
    assert snap is not None and {f.parent for f in snap.files} == {NEWER}
    assert snap.version is not None and snap.version.isoformat() == "2026-10-03T04:17:00+00:00"  # execution folder
    # a legacy CUR manifest is not ours
    legacy = FIXTURES / "aws/cur-legacy-csv/cur/gpu-cur-csv/20261001-20261101/gpu-cur-csv-Manifest.json"
    assert Cur2Manifest().read(legacy) is None


def test_manifest_timestamp_gives_version(tmp_path: Path) -> None:
    meta = tmp_path / "e" / "metadata" / "BILLING_PERIOD=2026-10"
    meta.mkdir(parents=True)
    data = tmp_path / "e" / "data" / "BILLING_PERIOD=2026-10"
    data.mkdir(parents=True)
    (data / "e-00001.snappy.parquet").write_bytes(b"x")
    man = meta / "e-Manifest.json"
    man.write_text(
        json.dumps(
            {
                "exportArn": "arn:aws:bcm-data-exports:us-east-1:222233334444:export/e-1234",
                "billingPeriod": "2026-10",
                "executionTime": "2026-10-05T06:07:08Z",
                "dataFiles": ["s3://b/p/e/data/BILLING_PERIOD=2026-10/e-00001.snappy.parquet"],
            }
        )
    )
    hint = Cur2Manifest().read(man)
    assert hint is not None and hint.version is not None
    assert hint.version.isoformat() == "2026-10-05T06:07:08+00:00"
    assert hint.key.startswith("aws-cur2:e-1234:2026-10:files-")  # name from the ARN; no execution id
    assert [f.name for f in hint.files] == ["e-00001.snappy.parquet"]


def test_group_uses_cur2_manifest() -> None:
    deliveries, errors = group([CUR2])
    assert not errors
    assert [d.key for d in deliveries] == ["aws-cur2:gpu-cur2:2026-10:3f9a1c2e-0000-4000-8000-00000000e001"]


def test_create_new_only_newest_execution_counts(db: Path) -> None:
    newest, older = _files_total(NEWER), _files_total(OLDER)
    assert newest != older and newest != 0
    with billing_audit.open(db) as store:
        report = store.ingest([CREATE_NEW])
        assert not report.errors
        assert _total(store) == newest
        files = {r[0] for r in store.con.execute("SELECT DISTINCT x_SourceFile FROM line_items").fetchall()}
        assert files and all("/20261003T041700Z/" in f for f in files)


@pytest.mark.parametrize("order", [(OLDER, NEWER), (NEWER, OLDER)], ids=["older-first", "newer-first"])
def test_create_new_executions_one_by_one(order: tuple[Path, Path], tmp_path: Path) -> None:
    with billing_audit.open(tmp_path / "s.duckdb") as store:
        for folder in order:
            assert not store.ingest([folder]).errors
        assert _total(store) == _files_total(NEWER)
        # the whole export (manifest included) afterwards changes nothing
        store.ingest([CREATE_NEW])
        assert _total(store) == _files_total(NEWER)
