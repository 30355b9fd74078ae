"""FOCUS exports: AWS FOCUS parquet, Azure FOCUS CSV and generic FOCUS from any provider."""

from __future__ import annotations

import csv
import io
from decimal import Decimal
from pathlib import Path

import pytest

import billing_audit
from billing_audit.reader import detect
from support import FIXTURES

AWS = FIXTURES / "focus/aws-focus-1.2"
AZURE = FIXTURES / "focus/azure-focus-1.2"
GCP = FIXTURES / "focus/gcp-focus-1.0"

FOCUS_MIN = [
    "BilledCost",
    "BillingAccountId",
    "BillingCurrency",
    "ChargeCategory",
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "EffectiveCost",
    "ListCost",
    "PricingCategory",
    "ProviderName",
    "ChargeDescription",
    "Tags",
]


def _rows(db: Path, path: Path, sql: str, params: list[object] | None = None) -> list[tuple[object, ...]]:
    with billing_audit.open(db) as store:
        report = store.ingest([path])
        assert not report.errors, report.errors
        return store.con.execute(sql, params or []).fetchall()


def _write_csv(tmp_path: Path, header: list[str], rows: list[dict[str, str]], name: str = "focus.csv") -> Path:
    folder = tmp_path / name.replace(".", "_")
    folder.mkdir()
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=header, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: r.get(k, "") for k in header})
    p = folder / name
    p.write_text(buf.getvalue())
    return p


def _row(**kw: str) -> dict[str, str]:
    base = {
        "BilledCost": "1.5",
        "BillingAccountId": "TEST-ACCOUNT",
        "BillingCurrency": "USD",
        "ChargeCategory": "Usage",
        "ChargePeriodStart": "2026-10-02T00:00:00Z",
        "ChargePeriodEnd": "2026-10-02T01:00:00Z",
        "EffectiveCost": "1.5",
        "ListCost": "2",
        "PricingCategory": "Standard",
        "ProviderName": "Google Cloud",
        "ChargeDescription": "x",
        "Tags": "",
    }
    base.update(kw)
    return base


@pytest.mark.parametrize(
    ("columns", "expected"),
    [
        ([c.lower() for c in FOCUS_MIN] + ["x_operation", "x_servicecode", "x_discounts"], "aws-focus"),
        ([c.lower() for c in FOCUS_MIN] + ["x_usagetype", "x_operation"], "aws-focus"),  # FOCUS 1.0 with AWS columns
        (FOCUS_MIN + ["x_SkuMeterCategory", "x_SkuMeterSubcategory", "x_PricingSubcategory"], "azure-focus"),
        (FOCUS_MIN + ["x_ResourceGroupName"], "azure-focus"),
        (FOCUS_MIN, "focus"),
    ],
)
def test_detection_of_each_variant(columns: list[str], expected: str) -> None:
    cols = {c: "VARCHAR" for c in columns}
    assert detect(cols, "csv", "t.csv").id == expected


def test_fixtures_detected_as_their_format(db: Path) -> None:
    with billing_audit.open(db) as store:
        store.ingest([AWS, AZURE, GCP])
        got = dict(store.con.execute("SELECT DISTINCT x_Provider, x_SourceFormat FROM line_items").fetchall())
    assert got == {"aws": "aws-focus", "azure": "azure-focus", "gcp": "focus"}


def test_spot_lines_are_dynamic_with_list_cost(db: Path) -> None:
    rows = _rows(
        db,
        FIXTURES / "focus",
        "SELECT x_Provider, PricingCategory, x_PricingModel, ListCost > EffectiveCost FROM line_items "
        "WHERE ChargeClass IS NULL AND (x_UsageType ILIKE '%SpotUsage%' OR SkuMeter ILIKE '% Spot' "
        "OR ChargeDescription ILIKE '%attached to Spot Preemptible%')",
    )
    assert {r[0] for r in rows} == {"aws", "azure", "gcp"}
    assert all(r[1:] == ("Dynamic", "Spot", True) for r in rows), rows


def test_restart_fee_lines_keep_their_meter(db: Path) -> None:
    rows = _rows(
        db,
        FIXTURES / "focus",
        "SELECT x_Provider, x_UsageType, BilledCost FROM line_items "
        "WHERE ChargeDescription ILIKE '%restart%' OR ChargeDescription ILIKE '%preemption overhead%' ORDER BY 1",
    )
    assert [(r[0], r[1]) for r in rows] == [
        ("aws", "USE1-SpotRestartFee:p5.48xlarge"),
        ("azure", "Virtual Machines|Other Compute Charges|Spot Restart Fee"),
        ("gcp", "TPU v5e Spot Preemptible preemption overhead (per-second rate uplift) running in Americas"),
    ]
    assert [r[2] for r in rows] == [Decimal("0.21"), Decimal("0.18"), Decimal("0.0864")]


def test_aws_tags_lose_user_prefix_and_merge_case(db: Path) -> None:
    rows = _rows(db, AWS, "SELECT Tags FROM line_items ORDER BY x_SourceFile, x_SourceRow")
    keys = {k for (tags,) in rows for k in tags}
    assert not [k for k in keys if k.startswith("user")], keys
    assert {"team", "training_job", "purpose", "aws:createdby"} <= keys
    # row 4 carries user:Team=ML-Platform, user_Training_Job and an empty user_team
    assert rows[3][0] == {"team": "ML-Platform", "training_job": "llama-ft-42"}


def test_aws_map_columns(db: Path) -> None:
    rows = _rows(
        db,
        AWS,
        "SELECT SkuPriceDetails, x_Operation, x_ListCostSource FROM line_items WHERE x_SourceRow = 1 "
        "AND x_SourceFile LIKE '%00001%'",
    )
    assert rows == [
        (
            '{"InstanceType":"p5.48xlarge","OperatingSystem":"Linux","Tenancy":"Shared"}',
            "RunInstances:SV002",
            "ListCost",
        )
    ]


def test_azure_tags_json_and_malformed(db: Path) -> None:
    rows = _rows(db, AZURE, "SELECT x_SourceRow, Tags, x_TagsRaw FROM line_items ORDER BY x_SourceRow")
    by_row = {r[0]: (r[1], r[2]) for r in rows}
    assert by_row[2] == ({"team": "NLP", "training-job": "bert-large-7"}, None)  # Team/TEAM/team merged
    assert by_row[9] == ({}, '{"owner": "ops-team", "env": prod}')


def test_azure_pricing_model_follows_subcategory(db: Path) -> None:
    rows = _rows(db, AZURE, "SELECT DISTINCT PricingCategory, x_PricingModel FROM line_items ORDER BY ALL")
    assert rows == [("Committed", "Reservation"), ("Dynamic", "Spot"), ("Standard", "OnDemand"), (None, None)]


def test_generic_focus_provider_from_provider_name(db: Path, tmp_path: Path) -> None:
    names = ["Amazon Web Services", "AWS", "Microsoft", "Google Cloud", "Oracle Cloud Infrastructure", ""]
    p = _write_csv(tmp_path, FOCUS_MIN, [_row(ProviderName=n) for n in names])
    rows = _rows(db, p, "SELECT x_Provider, x_LineItemId FROM line_items ORDER BY x_SourceRow")
    want = ["aws", "aws", "azure", "gcp", "oracle cloud infrastructure", "focus"]  # no ProviderName: the format's
    assert [r[0] for r in rows] == want
    assert all(r[1].startswith(r[0] + "-") and r[1].endswith(f"-{i}") for i, r in enumerate(rows, start=1))


def test_generic_focus_pricing_category_and_tags(db: Path, tmp_path: Path) -> None:
    p = _write_csv(
        tmp_path,
        FOCUS_MIN + ["CommitmentDiscountType", "SkuMeter"],
        [
            _row(PricingCategory="Dynamic", Tags='{"Team":"a","team":"b"}', SkuMeter="spot-gpu"),
            _row(PricingCategory="Committed", CommitmentDiscountType="Savings Plan", Tags="not json"),
            _row(PricingCategory="On-Demand", ListCost=""),  # a FOCUS 0.5 spelling, an empty ListCost
        ],
    )
    rows = _rows(
        db,
        p,
        "SELECT PricingCategory, x_PricingModel, Tags, x_TagsRaw, x_UsageType, ListCost, x_ListCostSource "
        "FROM line_items ORDER BY x_SourceRow",
    )
    assert rows[0] == ("Dynamic", "Spot", {"team": "a"}, None, "spot-gpu", Decimal(2), "ListCost")
    assert rows[1][:4] == ("Committed", "SavingsPlan", {}, "not json")
    assert rows[2][:2] == ("Standard", "OnDemand")
    # an empty ListCost on usage that costs money is no list price (issue #14), not the billed cost
    assert rows[2][5:] == (None, "missing: ListCost empty")


def test_azure_focus_1_0r2_columns(db: Path, tmp_path: Path) -> None:
    header = FOCUS_MIN + [
        "x_SkuMeterCategory",
        "x_SkuMeterSubcategory",
        "x_SkuMeterName",
        "x_SkuDetails",
        "x_InvoiceId",
        "x_PricingCurrency",
        "x_PricingSubcategory",
    ]
    p = _write_csv(
        tmp_path,
        header,
        [
            _row(
                ProviderName="Microsoft",
                x_SkuMeterCategory="Virtual Machines",
                x_SkuMeterSubcategory="NDv2 Series",
                x_SkuMeterName="ND40rs v2 Spot",
                x_SkuDetails='{"VCPUs":40}',
                x_InvoiceId="G012345678",
                x_PricingCurrency="USD",
                x_PricingSubcategory="Spot",
                PricingCategory="Standard",
                Tags='"CostCenter": "1234","Application": "train"',
            ),
        ],
    )
    rows = _rows(
        db,
        p,
        "SELECT x_SourceFormat, x_UsageType, SkuPriceDetails, InvoiceId, PricingCurrency, "
        "PricingCategory, x_PricingModel, Tags FROM line_items",
    )
    assert rows == [
        (
            "azure-focus",
            "Virtual Machines|NDv2 Series|ND40rs v2 Spot",
            '{"VCPUs":40}',
            "G012345678",
            "USD",
            "Dynamic",
            "Spot",
            {"costcenter": "1234", "application": "train"},
        )
    ]


def test_aws_focus_1_0_csv_flavour(db: Path, tmp_path: Path) -> None:
    header = [c.lower() for c in FOCUS_MIN] + ["x_usagetype", "x_operation", "x_servicecode"]
    p = _write_csv(
        tmp_path,
        header,
        [
            {
                k.lower(): v
                for k, v in _row(
                    ProviderName="AWS", PricingCategory="Dynamic", Tags='{"user:Team":"vision","aws:createdBy":"me"}'
                ).items()
            }
            | {
                "x_usagetype": "USE1-SpotUsage:p4d.24xlarge",
                "x_operation": "RunInstances:SV001",
                "x_servicecode": "AmazonEC2",
            },
        ],
    )
    rows = _rows(db, p, "SELECT x_SourceFormat, x_Provider, x_UsageType, x_Operation, Tags FROM line_items")
    assert rows == [
        (
            "aws-focus",
            "aws",
            "USE1-SpotUsage:p4d.24xlarge",
            "RunInstances:SV001",
            {"team": "vision", "aws:createdby": "me"},
        )
    ]


def test_gcp_second_currency_total(db: Path) -> None:
    with billing_audit.open(db) as store:
        store.ingest([FIXTURES / "focus"])
        rows = store.con.execute(
            "SELECT BillingCurrency, x_Provider, count(*) FROM line_items GROUP BY ALL ORDER BY ALL"
        ).fetchall()
    assert ("EUR", "gcp", 14) in rows
    assert {r[0] for r in rows} == {"EUR", "USD"}


def test_malformed_cost_names_file_row_column(db: Path, tmp_path: Path) -> None:
    p = _write_csv(tmp_path, FOCUS_MIN, [_row(), _row(), _row(BilledCost="12,50")])
    with billing_audit.open(db) as store:
        report = store.ingest([p])
        assert store.con.execute("SELECT count(*) FROM line_items").fetchone() == (0,)
    assert len(report.errors) == 1
    err = report.errors[0]
    assert err.file == str(p)
    assert err.row == 3
    assert err.column == "BilledCost"
