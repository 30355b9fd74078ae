"""`billing-audit validate`: every fixture described exactly, refusals named, FOCUS conformance checked, the JSON
shape pinned, and no store touched (issue #14)."""

from __future__ import annotations

import csv
import io
import json
import os
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner

import billing_audit
from billing_audit.cli import main
from billing_audit.deliveries import walk
from support import FIXTURES

FOCUS_SAMPLE = FIXTURES / "csv-quirks/null-literals/focus-sample-data/focus-1.2-sample.csv"
CUR_2018 = next((FIXTURES / "aws").rglob("gpu-cur-2018-1.csv"))


def _json(args: list[str]) -> tuple[int, dict]:  # type: ignore[type-arg]
    r = CliRunner().invoke(main, ["validate", *args, "--format", "json"])
    assert "Traceback" not in r.output, r.output
    return r.exit_code, json.loads(r.stdout)


def test_every_fixture_is_described_and_none_has_errors(tmp_path: Path) -> None:
    os.chdir(tmp_path)  # nothing may be written where it runs
    code, doc = _json([str(FIXTURES)])
    assert code == 0
    data, _, _ = walk([FIXTURES])
    zips = [p for p in data if p.suffix == ".zip"]
    assert len(doc["files"]) == len(data) - len(zips) + sum(1 for f in doc["files"] if "!" in f["file"])
    assert all(f["status"] in ("ok", "warnings") for f in doc["files"])
    assert all(f["format"] and f["rows"] > 0 and f["periods"] for f in doc["files"])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["fixtures/gcp/standard-ndjson", "fixtures/azure/payg-mosp-csv",
                                  "fixtures/csv-quirks/semicolon-decimal-comma", "fixtures/focus/aws-focus-1.2"])
def test_rows_and_cost_per_currency_are_what_ingest_stores(tmp_path: Path, name: str) -> None:
    folder = FIXTURES.parent / name
    _, doc = _json([str(folder)])
    want: dict[str, Decimal] = {}
    for f in doc["files"]:
        for cur, v in f["cost"].items():
            want[cur] = want.get(cur, Decimal(0)) + Decimal(v)
    with billing_audit.open(tmp_path / "s.duckdb") as s:
        s.ingest([folder])
        got = dict(s.con.execute("SELECT BillingCurrency, sum(BilledCost) FROM line_items GROUP BY 1").fetchall())
        rows = s.con.execute("SELECT count(*) FROM line_items").fetchone()
    assert rows is not None and rows[0] == sum(f["rows"] for f in doc["files"])
    assert {k: Decimal(v) for k, v in got.items()} == want


def test_json_shape() -> None:
    code, doc = _json([str(CUR_2018)])
    assert code == 0
    assert set(doc) == {"schema_version", "generated_at", "files", "summary"}
    assert doc["schema_version"] == 1 and isinstance(doc["generated_at"], str)
    assert doc["summary"] == {"files": 1, "errors": 0, "warnings": 1}
    (f,) = doc["files"]
    assert set(f) == {"file", "status", "format", "format_title", "rows", "cost", "periods", "charge_dates", "findings"}
    assert f["format"] == "aws-cur" and f["status"] == "warnings" and f["rows"] == 12
    # 25.78 (issue #14's lines) + yolo 0.918 + 0.918 + 3.672 + fee 0.16 + bert 3.672 + c5 spot 0.0331 + c5 0.085
    assert f["cost"] == {"USD": "35.238100000000"} and f["periods"] == ["2018-06"]
    assert set(f["charge_dates"]) == {"from", "to"} and f["charge_dates"]["from"].startswith("2018-06")
    (finding,) = f["findings"]
    assert set(finding) == {"id", "severity", "message", "lines", "row", "column"}
    assert finding["id"] == "ListCost-W-001" and finding["severity"] == "warning" and finding["lines"] == 8  # spot
    assert isinstance(finding["row"], int)


def test_strict_makes_warnings_fail() -> None:
    assert CliRunner().invoke(main, ["validate", str(CUR_2018)]).exit_code == 0
    r = CliRunner().invoke(main, ["validate", str(CUR_2018), "--strict"])
    assert r.exit_code == 1 and "[ListCost-W-001]" in r.stdout and "(8 lines)" in r.stdout


def _focus(tmp_path: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    rows = list(csv.DictReader(io.StringIO(FOCUS_SAMPLE.read_text(encoding="utf-8-sig"))))
    rows, fields = edit(rows, list(rows[0]))
    out = tmp_path / "focus.csv"
    with open(out, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return out


def test_focus_conformance_findings(tmp_path: Path) -> None:
    def edit(rows, fields):  # type: ignore[no-untyped-def]
        rows[0]["ChargeCategory"] = "Usagee"
        rows[1]["ListCost"], rows[1]["EffectiveCost"] = "0.50", "1.00"
        rows[2]["ChargeClass"] = "Refund"
        return rows, [c for c in fields if c != "InvoiceIssuerName"]

    code, doc = _json([str(_focus(tmp_path, edit)), "--strict"])
    assert code == 1
    ids = {f["id"]: f for f in doc["files"][0]["findings"]}
    assert {"InvoiceIssuerName-C-000-M", "ChargeCategory-C-001-M", "ListCost-C-002-M", "ChargeClass-C-001-M"} <= set(ids)
    assert ids["ChargeCategory-C-001-M"]["lines"] == 1 and ids["ChargeCategory-C-001-M"]["row"] == 1
    assert ids["ChargeCategory-C-001-M"]["column"] == "ChargeCategory"
    assert ids["InvoiceIssuerName-C-000-M"]["column"] == "InvoiceIssuerName"
    assert doc["files"][0]["status"] == "warnings"  # it still ingests: conformance findings are warnings


def test_refusals_name_the_reason(tmp_path: Path) -> None:
    def no_account(rows, fields):  # type: ignore[no-untyped-def]
        return rows, [c for c in fields if c != "BillingAccountId"]

    code, doc = _json([str(_focus(tmp_path, no_account))])
    assert code == 1
    (f,) = doc["files"]
    assert f["status"] == "errors" and f["format"] is None
    (finding,) = f["findings"]
    assert finding["id"] == "Format-E-001" and "lacks the required column BillingAccountId" in finding["message"]
    bad = tmp_path / "bad"
    bad.mkdir()

    def bad_cost(rows, fields):  # type: ignore[no-untyped-def]
        rows[3]["BilledCost"] = "N/A"
        return rows, fields

    p = _focus(bad, bad_cost)
    code, doc = _json([str(p)])
    (finding,) = doc["files"][0]["findings"]
    assert code == 1 and finding["id"] == "File-E-002"
    assert finding["row"] == 4 and finding["column"] == "BilledCost" and "N/A" in finding["message"]
    code, doc = _json([str(tmp_path / "missing.csv")])
    assert code == 1 and doc["files"][0]["findings"][0]["id"] == "File-E-001"


def test_the_store_is_not_touched(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    with billing_audit.open(db) as s:
        s.ingest([FIXTURES / "gcp/standard-ndjson"])
        before = s.summary().to_dicts()
    os.chdir(tmp_path)
    r = CliRunner().invoke(main, ["validate", str(FIXTURES / "azure")], env={"BILLING_AUDIT_DB": str(db)})
    assert r.exit_code == 0, r.output
    with billing_audit.open(db) as s:
        assert s.summary().to_dicts() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.duckdb"]
