"""Spot lines priced on Spark (pyspark local[2], ``--source raw``) exactly as a local tag run prices them: from the
export, the price references and the bill's own on-demand lines (billing_audit.engines.priced)."""

from __future__ import annotations

import csv
import json
import os
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pytest
from click.testing import CliRunner

from billing_audit.cli import main
from billing_audit.engines.portable import to_engine
from support import FIXTURES, report_body

os.environ.setdefault("BILLING_AUDIT_SPARK_PARTITIONS", "2")
CFG = FIXTURES / "scenarios" / "billing-audit.toml"
CUR_2018 = next((FIXTURES / "aws" / "cur-2018-csv").rglob("*.csv"))
PRICE_LIST = FIXTURES / "prices" / "aws" / "AmazonEC2-20180601-us-east-1.csv"


def _header(path: Path, line: int) -> list[str]:
    """The columns of a fixture's CSV (its header on ``line``): the test's files are laid out as the real ones."""
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.reader(f))[line]


# (line id, hour of 2018-06-12, usage type, operation, resource, hours, rate, cost).  No public on-demand cost (a 2018
# CUR's 0): every spot line is priced by the bill or a reference, or not at all.
LINES = [
    # on demand: 2 + 1 hours of p3.2xlarge for 6.12 + 3.06 = 9.18, so the bill's unit price is 9.18 / 3 = 3.06
    ("od-1", 1, "USE1-BoxUsage:p3.2xlarge", "RunInstances", "i-0d1", "2", "3.06", "6.12"),
    ("od-2", 2, "USE1-BoxUsage:p3.2xlarge", "RunInstances", "i-0d1", "1", "3.06", "3.06"),
    # spot p3.2xlarge, 22 hours for 20.196: priced by the bill, 22 x 3.06 = 67.32 on demand, 47.124 saved
    ("sp-1", 3, "USE1-SpotUsage:p3.2xlarge", "RunInstances:SV001", "i-0s1", "22", "0.918", "20.196"),
    # spot g4dn.xlarge, 10 hours for 1.578: priced by the reference (0.526 an hour), 5.26 on demand, 3.682 saved
    ("sp-2", 4, "USE1-SpotUsage:g4dn.xlarge", "RunInstances:SV001", "i-0s2", "10", "0.1578", "1.578"),
    # spot p2.xlarge, 15 hours for 5.4435: neither the bill nor a reference prices it (unpriced, never 0)
    ("sp-3", 5, "USE1-SpotUsage:p2.xlarge", "RunInstances:SV001", "i-0s3", "15", "0.3629", "5.4435"),
]
# totals: on demand 67.32 + 5.26 = 72.58 for the priced spot cost 20.196 + 1.578 = 21.774: gross savings 50.806;
# coverage 21.774 / (21.774 + 5.4435) = 21.774 / 27.2175 = 80%; 5.4435 of spot cost unpriced

def _bill(root: Path) -> Path:
    """A 2018 legacy CUR CSV (the fixture's columns) of LINES, as the export lays it out."""
    folder = root / "cur" / "test-bill" / "20180601-20180701" / "c3f2e7d4-0000-4000-8000-00000000feed"
    folder.mkdir(parents=True)
    with (folder / "test-bill-1.csv").open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, _header(CUR_2018, 0), restval="", lineterminator="\n")
        w.writeheader()
        for lid, hour, usage, op, res, qty, rate, cost in LINES:
            s, e = f"2018-06-12T{hour:02d}:00:00Z", f"2018-06-12T{hour + 1:02d}:00:00Z"
            w.writerow({"identity/LineItemId": lid, "identity/TimeInterval": f"{s}/{e}", "bill/BillingEntity": "AWS",
                        "bill/BillType": "Anniversary", "bill/PayerAccountId": "210987654321",
                        "bill/BillingPeriodStartDate": "2018-06-01T00:00:00Z",
                        "bill/BillingPeriodEndDate": "2018-07-01T00:00:00Z", "lineItem/UsageAccountId": "098765432109",
                        "lineItem/LineItemType": "Usage", "lineItem/UsageStartDate": s, "lineItem/UsageEndDate": e,
                        "lineItem/ProductCode": "AmazonEC2", "lineItem/UsageType": usage, "lineItem/Operation": op,
                        "lineItem/AvailabilityZone": "us-east-1a", "lineItem/ResourceId": res,
                        "lineItem/UsageAmount": qty, "lineItem/CurrencyCode": "USD", "lineItem/UnblendedRate": rate,
                        "lineItem/UnblendedCost": cost, "lineItem/LineItemDescription": f"{usage} in US East",
                        "product/ProductName": "Amazon Elastic Compute Cloud", "product/instanceType": usage.split(":")[1],
                        "product/region": "us-east-1", "pricing/publicOnDemandCost": "0",
                        "pricing/publicOnDemandRate": "0", "pricing/unit": "Hrs", "resourceTags/user:team": "vision",
                        "resourceTags/user:training-job": "detr-test"})
    return root


def _prices(path: Path) -> Path:
    """An AWS price list CSV with one on-demand price: g4dn.xlarge at 0.526 an hour in us-east-1."""
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, quoting=csv.QUOTE_ALL, lineterminator="\n")
        for row in (["FormatVersion", "v1.0"], ["Disclaimer", "test"], ["Publication Date", "2018-06-01T00:00:00Z"],
                    ["Version", "20180601000000"], ["OfferCode", "AmazonEC2"]):
            w.writerow(row)
        d = csv.DictWriter(f, _header(PRICE_LIST, 5), restval="", quoting=csv.QUOTE_ALL, lineterminator="\n")
        d.writeheader()
        d.writerow({"SKU": "TESTSKUG4DN", "OfferTermCode": "JRTCKXETXF", "RateCode": "TESTSKUG4DN.JRTCKXETXF.6YS6EN2CT7",
                    "TermType": "OnDemand", "PriceDescription": "$0.526 per On Demand Linux g4dn.xlarge Instance Hour",
                    "EffectiveDate": "2018-05-01", "StartingRange": "0", "EndingRange": "Inf", "Unit": "Hrs",
                    "PricePerUnit": "0.5260000000", "Currency": "USD", "Product Family": "Compute Instance",
                    "serviceCode": "AmazonEC2", "Location": "US East (N. Virginia)", "Location Type": "AWS Region",
                    "Instance Type": "g4dn.xlarge", "Tenancy": "Shared", "Operating System": "Linux",
                    "License Model": "No License required", "usageType": "BoxUsage:g4dn.xlarge",
                    "operation": "RunInstances", "CapacityStatus": "Used", "Pre Installed S/W": "NA",
                    "Region Code": "us-east-1", "serviceName": "Amazon Elastic Compute Cloud"})
    return path


def _audit(runner: CliRunner, tmp: Path, name: str, bill: Path, prices: Path, *engine: str) -> dict[str, Any]:
    db = str(tmp / f"{name}.duckdb")
    loaded = runner.invoke(main, ["prices", "ingest", str(prices), "--db", db])
    assert loaded.exit_code == 0, loaded.output
    done = runner.invoke(main, ["audit", str(bill), "--db", db, "--out", str(tmp / name), "--config", str(CFG), "-q",
                                *engine])
    assert done.exit_code == 0, done.output
    return json.loads((tmp / name / "report.json").read_text(encoding="utf-8"))


def test_spark_prices_spot_lines_from_the_bill_and_references_as_locally(tmp_path: Path) -> None:
    bill, prices = _bill(tmp_path / "exports"), _prices(tmp_path / "AmazonEC2-20180601-us-east-1.csv")
    runner = CliRunner()
    local = _audit(runner, tmp_path, "local", bill, prices)
    spark = _audit(runner, tmp_path, "spark", bill, prices, "--engine", "spark", "--source", "raw",
                   "--spark-master", "local[2]")
    con = duckdb.connect(str(tmp_path / "local.duckdb"), read_only=True)
    try:
        priced = con.execute("SELECT l.ResourceId, o.od_source, o.od_cost FROM spot_od o "
                             "JOIN line_items l USING (x_LineItemId) ORDER BY 1").fetchall()
    finally:
        con.close()
    assert priced == [("i-0s1", "bill", Decimal("67.32")), ("i-0s2", "reference", Decimal("5.26")), ("i-0s3", None, None)]
    for doc in (local, spark):
        [t] = doc["totals"]
        assert (t["currency"], Decimal(t["on_demand_equivalent_cost"]), Decimal(t["gross_spot_savings"]),
                Decimal(t["spot_unpriced_cost"]), t["savings_coverage_pct"]) == (
            "USD", Decimal("72.58"), Decimal("50.806"), Decimal("5.4435"), 80.0)
    assert spark["filters"]["engine"] == "spark"
    body = {n: report_body(d) for n, d in (("local", local), ("spark", spark))}
    for b in body.values():
        b.pop("fee_reconciliation", None)
        b["warnings"] = [w for w in b["warnings"] if not w.startswith("fee reconciliation: not done")]
    assert body["spark"] == body["local"]
    for name in ("jobs.csv", "teams.csv"):
        assert (tmp_path / "spark" / name).read_bytes() == (tmp_path / "local" / name).read_bytes(), name


@pytest.mark.parametrize(("duckdb_sql", "spark_sql"), [
    # DuckDB replaces the first match only without 'g': one anchored replace, the groups moved up by one
    (r"SELECT regexp_replace(x, '(^|-)Spot:', '\1Box:')", r"SELECT REGEXP_REPLACE(x, '(?s)^(.*?)(?:(^|-)Spot:)', '$1$2Box:')"),
    (r"SELECT regexp_replace(x, '\s+', ' ', 'g')", r"SELECT REGEXP_REPLACE(x, '\\s+', ' ')"),
    (r"SELECT regexp_replace(x, 'a', '$', 'gi')", r"SELECT REGEXP_REPLACE(x, '(?i)a', '\\$')"),
    (r"SELECT regexp_matches(x, 'spot\b', 'i')", r"SELECT x RLIKE '(?i)spot\\b'"),
    (r"SELECT regexp_extract(x, 'a(b)(c)', 2, 'i')", r"SELECT REGEXP_EXTRACT(x, '(?i)a(b)(c)', 2)"),
])
def test_regexp_options_and_backreferences_translate_to_spark(duckdb_sql: str, spark_sql: str) -> None:
    assert to_engine(duckdb_sql, "spark") == spark_sql


VALUES = ["USE1-SpotUsage:p3.2xlarge", "SpotUsage:a-SpotUsage:b", "NC24ads A100 v4   Spot ", "cost $5", None]


@pytest.mark.parametrize("expr", [
    r"regexp_replace(x, '(^|-)SpotUsage:', '\1BoxUsage:')",  # the first match only, its group kept
    r"regexp_replace(x, '\s+(spot|low priority)\s*$', '', 'i')",
    r"regexp_replace(x, '\s+', ' ', 'g')",
    r"regexp_replace(x, '[$]', '$$', 'g')",  # a literal $ in the replacement
    r"regexp_matches(x, 'SPOT\b', 'i')",
    r"regexp_extract(x, '^(\w+)-(\w+)', 2, 'i')",
])
def test_the_translated_regexps_give_duckdbs_values_on_spark(expr: str) -> None:
    from connectors.spark.engine import session

    rows = ", ".join("(NULL)" if v is None else f"('{v}')" for v in VALUES)
    sql = f"SELECT {expr} AS r FROM (VALUES {rows}) AS t(x)"
    con = duckdb.connect()
    try:
        local = [r[0] for r in con.execute(sql).fetchall()]
    finally:
        con.close()
    remote = [r[0] for r in session("local[2]").sql(to_engine(sql, "spark")).collect()]
    assert remote == local
