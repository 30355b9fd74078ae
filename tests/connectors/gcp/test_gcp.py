"""GCP BigQuery billing export: detection, credits per row, spot, tags, timestamps and re-exports."""

from __future__ import annotations

import copy
import importlib.util
import itertools
import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import billing_audit
from billing_audit.errors import InputError
from connectors.gcp.synthetic import RESOURCE_SCHEMA, bq_json_value
from support import FIXTURES, Case, source_total

STANDARD = FIXTURES / "gcp" / "standard-ndjson"
RESOURCE = FIXTURES / "gcp" / "resource-parquet"
REEXPORT = FIXTURES / "gcp" / "reexport"
EARLY, LATER = REEXPORT / "20261102T060000Z", REEXPORT / "20261105T060000Z"
COST = Case("cost", "", "gcp-billing", ("cost",), credits="credits")

_spec = importlib.util.spec_from_file_location("gen_gcp", FIXTURES / "gen_gcp.py")
assert _spec and _spec.loader
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)


def _total(store: billing_audit.Store, where: str = "TRUE") -> Decimal:
    return store.con.execute(f"SELECT coalesce(sum(BilledCost), 0) FROM line_items WHERE {where}").fetchone()[0]


def _folder_total(folder: Path) -> Decimal:
    return sum((source_total(f, COST) for f in sorted(folder.iterdir()) if f.is_file()), Decimal(0))


def _rows(store: billing_audit.Store, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    return store.con.execute(sql, params or []).fetchall()


def _write_ndjson(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def _standard_json_rows() -> list[dict[str, Any]]:
    rows = gen.standard_rows("01ABCD-23EF45-678901", datetime(2026, 11, 3, 6, tzinfo=UTC))
    return [bq_json_value(r) for r in rows]


# -- detection -------------------------------------------------------------------------------------------------


def test_each_variant_is_detected(db: Path, tmp_path: Path) -> None:
    # the other two combinations: the standard table as parquet, the detailed table as NDJSON
    std = pa.Table.from_pylist(
        [{k: v for k, v in r.items() if k not in ("resource", "price")} for r in gen.resource_rows()],
        schema=pa.schema([f for f in RESOURCE_SCHEMA if f.name not in ("resource", "price")]),
    )
    (tmp_path / "std").mkdir()
    pq.write_table(std, tmp_path / "std" / "x.parquet")
    _write_ndjson(tmp_path / "detailed" / "x.json", [bq_json_value(r) for r in gen.resource_rows()])
    with billing_audit.open(db) as store:
        report = store.ingest([STANDARD, RESOURCE, tmp_path / "std", tmp_path / "detailed"])
        assert not report.errors, report.errors
        got = dict(
            _rows(
                store,
                "SELECT regexp_replace(file, '^.*/(std|detailed|standard-ndjson|resource-parquet)/.*$',"
                "'\\1'), any_value(format) FROM ingest_log GROUP BY 1",
            )
        )
    assert got == {
        "standard-ndjson": "gcp-billing",
        "resource-parquet": "gcp-billing-resource",
        "std": "gcp-billing",
        "detailed": "gcp-billing-resource",
    }


# -- credits: summed per row, never unnested -------------------------------------------------------------------


def test_row_with_credits_is_one_line_with_cost_plus_credits(db: Path) -> None:
    with billing_audit.open(db) as store:
        store.ingest([STANDARD])
        assert _rows(store, "SELECT count(*) FROM line_items")[0][0] == len(_standard_json_rows())
        lines = _rows(
            store,
            "SELECT BilledCost, EffectiveCost, ContractedCost, ListCost FROM line_items "
            "WHERE x_UsageType = 'A2 Instance Core running in Americas' AND Tags['training-job'] = 'eval-nightly'",
        )
    assert lines == [(Decimal("0.34248"), Decimal("0.34248"), Decimal("1.0531"), Decimal("1.0531"))]
    assert Decimal("1.0531") - Decimal("0.21062") - Decimal("0.5") == Decimal("0.34248")


@pytest.mark.parametrize("n", [0, 1, 2, 5])
def test_n_credits_give_one_line(db: Path, tmp_path: Path, n: int) -> None:
    row = _standard_json_rows()[0]
    row["credits"] = [
        {"name": f"c{i}", "amount": -0.125 * (i + 1), "full_name": f"c{i}", "id": f"id{i}", "type": "PROMOTION"}
        for i in range(n)
    ]
    path = _write_ndjson(tmp_path / "n" / "x.json", [row])
    with billing_audit.open(db) as store:
        report = store.ingest([path])
        assert not report.errors, report.errors
        lines = _rows(store, "SELECT BilledCost FROM line_items")
    want = Decimal(str(row["cost"])) - sum((Decimal("0.125") * (i + 1) for i in range(n)), Decimal(0))
    assert lines == [(want,)]


# -- spot, categories, tags ------------------------------------------------------------------------------------


def test_spot_skus_are_dynamic(db: Path) -> None:
    with billing_audit.open(db) as store:
        store.ingest([STANDARD, RESOURCE])
        rows = _rows(
            store, "SELECT x_UsageType, PricingCategory, x_PricingModel FROM line_items WHERE ChargeCategory = 'Usage'"
        )
    spot = [r for r in rows if "Spot" in r[0] or "Preemptible" in r[0]]
    assert len(spot) >= 10
    assert {(r[1], r[2]) for r in spot} == {("Dynamic", "Spot")}
    assert all(r[1] != "Dynamic" for r in rows if r not in spot)
    assert {r[0] for r in spot} >= {
        "Nvidia Tesla A100 GPU attached to Spot Preemptible VMs running in Americas",
        "Spot Preemptible A2 Instance Core running in Americas",
        "Spot Preemptible TPU v5e chip preemption overhead running in Americas",
        "Spot Preemptible Nvidia Tesla A100 GPU running in EMEA",
        "SSD backed Local Storage attached to Spot Preemptible VMs in EMEA",
    }


def test_charge_categories_from_cost_type(db: Path) -> None:
    with billing_audit.open(db) as store:
        store.ingest([STANDARD])
        got = set(_rows(store, "SELECT x_LineItemType, ChargeCategory, ChargeClass, PricingCategory FROM line_items"))
    assert ("tax", "Tax", None, None) in got
    assert ("adjustment", "Adjustment", "Correction", None) in got
    assert ("rounding_error", "Adjustment", None, None) in got
    assert ("regular", "Credit", None, None) in got  # cost 0, a credit only
    assert ("regular", "Purchase", None, "Standard") in got  # the commitment fee
    assert ("regular", "Usage", None, "Committed") in got  # usage covered by a CUD


def test_list_cost_and_period_from_invoice_month(db: Path) -> None:
    with billing_audit.open(db) as store:
        store.ingest([STANDARD, RESOURCE])
        spot = _rows(
            store,
            "SELECT ListCost, x_ListCostSource, EffectiveCost FROM line_items WHERE x_UsageType = "
            "'Nvidia Tesla A100 GPU attached to Spot Preemptible VMs running in Americas' LIMIT 1",
        )
        tax = _rows(
            store,
            "SELECT ListCost, x_ListCostSource FROM line_items WHERE ChargeCategory = 'Tax' "
            "AND BillingCurrency = 'USD'",
        )
        periods = set(
            _rows(
                store, "SELECT BillingAccountId, BillingPeriodStart, BillingPeriodEnd, BillingCurrency FROM line_items"
            )
        )
    # spot capacity is its own SKU: cost_at_list is the spot SKU's list price, 8 h x 1.10138 = the cost (no credits);
    # the on-demand equivalent is for the price references (tests/connectors/gcp/test_prices_gcp.py)
    assert spot == [(Decimal("8.81104"), "cost_at_list", Decimal("8.81104"))]
    assert tax == [(Decimal("21.73"), "cost (no cost_at_list in export)")]
    assert periods == {
        ("01ABCD-23EF45-678901", datetime(2026, 10, 1), datetime(2026, 11, 1), "USD"),
        ("01ABCD-23EF45-678902", datetime(2026, 10, 1), datetime(2026, 11, 1), "EUR"),
    }


def test_tags_merge_labels_and_project_labels_case_insensitively(db: Path) -> None:
    with billing_audit.open(db) as store:
        store.ingest([STANDARD])
        spot = _rows(store, "SELECT Tags FROM line_items WHERE x_SourceRow = 1 AND x_SourceFile LIKE '%0.json'")[0][0]
        two = _rows(store, "SELECT Tags FROM line_items WHERE Tags['training-job'] = 'eval-nightly'")[0][0]
        storage = _rows(
            store,
            "SELECT SubAccountId, Tags FROM line_items WHERE x_UsageType = 'Regional Standard Class B Operations'",
        )[0]
    # resource label "Team" wins over the project's "team"; project-only keys are kept
    assert spot == {"team": "vision", "training-job": "llm-pretrain-3", "cost-center": "cc-4410"}
    # "team" and "Team" on one row: the first listed wins; resource-manager tags join in, lower-cased
    assert two["team"] == "research" and two["environment"] == "prod"
    assert storage == ("ml-datasets", {"team": "vision", "purpose": "checkpoint"})


def test_resource_columns_from_the_detailed_export(db: Path) -> None:
    with billing_audit.open(db) as store:
        store.ingest([RESOURCE])
        rows = _rows(
            store,
            "SELECT ResourceName, ResourceId, ResourceType, ListUnitPrice, ContractedUnitPrice "
            "FROM line_items WHERE x_SourceRow = 1",
        )
        bucket = _rows(store, "SELECT DISTINCT ResourceType FROM line_items WHERE ServiceName = 'Cloud Storage'")
    assert rows == [
        (
            "a3-spot-trainer-0",
            "//compute.googleapis.com/projects/eu-vision-train/zones/europe-west4-a/instances/5104817735602931001",
            "Instance",
            Decimal("2.13535"),  # price.list_price of a spot SKU: the spot list price
            Decimal("2.13535"),
        )
    ]
    assert bucket == [("Bucket",)]


# -- what BigQuery really writes ---------------------------------------------------------------------------------


def test_timestamp_spellings_all_land_in_utc(db: Path, tmp_path: Path) -> None:
    base = _standard_json_rows()[0]
    spellings = [
        "2026-10-03 04:00:00 UTC",
        "2026-10-03 04:00:00.000000 UTC",
        "2026-10-03T04:00:00Z",
        "2026-10-03T06:00:00+02:00",
        "2026-10-03T04:00:00.000Z",
    ]
    rows = []
    for s in spellings:
        r = copy.deepcopy(base)
        r["usage_start_time"] = s
        rows.append(r)
    path = _write_ndjson(tmp_path / "ts" / "x.json", rows)
    with billing_audit.open(db) as store:
        report = store.ingest([path])
        assert not report.errors, report.errors
        got = {r[0] for r in _rows(store, "SELECT ChargePeriodStart FROM line_items")}
    assert got == {datetime(2026, 10, 3, 4)}


def test_costs_as_strings_or_mixed_numbers_and_strings(db: Path, tmp_path: Path) -> None:
    rows = _standard_json_rows()
    for i, r in enumerate(rows):
        if i % 2:
            r["cost"] = str(r["cost"])
            for c in r["credits"]:
                c["amount"] = str(c["amount"])
            if "cost_at_list" in r:
                r["cost_at_list"] = str(r["cost_at_list"])
    mixed = _write_ndjson(tmp_path / "mixed" / "x.json", rows)
    strings = _write_ndjson(
        tmp_path / "strings" / "x.json",
        [{**r, "cost": str(r["cost"]), "billing_account_id": "01ABCD-23EF45-678902"} for r in rows],
    )
    with billing_audit.open(db) as store:
        report = store.ingest([mixed, strings])
        assert not report.errors, report.errors
        for f in (mixed, strings):
            got = _total(store, f"x_SourceFile = '{f}'")
            assert got == source_total(f, COST)


def test_missing_fields_and_empty_lists(db: Path, tmp_path: Path) -> None:
    """NULL fields are left out of NDJSON: a file may lack zone, labels, credits, cost_at_list altogether."""
    rows = _standard_json_rows()[:3]
    for r in rows:
        for k in ("labels", "system_labels", "tags", "cost_at_list", "adjustment_info", "export_time"):
            r.pop(k, None)
        r["credits"] = []
        r["location"].pop("zone", None)
        r["project"].pop("labels", None)
    path = _write_ndjson(tmp_path / "sparse" / "x.json", rows)
    with billing_audit.open(db) as store:
        report = store.ingest([path])
        assert not report.errors, report.errors
        got = _rows(store, "SELECT AvailabilityZone, Tags, ListCost = BilledCost, x_ListCostSource FROM line_items")
    assert got == [(None, {}, True, "cost (no cost_at_list in export)")] * 3


def test_malformed_cost_names_file_row_and_column(db: Path, tmp_path: Path) -> None:
    rows = _standard_json_rows()[:4]
    for r in rows:
        r["cost"] = str(r["cost"])
    rows[2]["cost"] = "8,81"
    path = _write_ndjson(tmp_path / "bad" / "x.json", rows)
    with billing_audit.open(db) as store:
        report = store.ingest([path])
        assert _rows(store, "SELECT count(*) FROM line_items") == [(0,)]
    assert len(report.errors) == 1
    err = report.errors[0]
    assert isinstance(err, InputError)
    assert (err.file, err.row, err.column) == (str(path), 3, "cost")
    assert "8,81" in str(err)


# -- re-exports: the later extract of a month replaces the earlier one -----------------------------------------


@pytest.mark.parametrize("order", [("early", "later"), ("later", "early"), ("both",)])
def test_later_extract_wins_whatever_the_order(db: Path, order: tuple[str, ...]) -> None:
    paths = {"early": [EARLY], "later": [LATER], "both": [REEXPORT]}
    later_total = _folder_total(LATER)
    assert later_total != _folder_total(EARLY)
    with billing_audit.open(db) as store:
        for name in order:
            report = store.ingest(paths[name])
            assert not report.errors, report.errors
        assert _total(store) == later_total
        files = {r[0] for r in _rows(store, "SELECT DISTINCT x_SourceFile FROM line_items")}
        assert files == {str(f) for f in LATER.iterdir()}
        slices = _rows(store, "SELECT BillingPeriodStart, count(*) FROM line_items GROUP BY 1 ORDER BY 1")
    assert [s[0] for s in slices] == [datetime(2026, 10, 1), datetime(2026, 11, 1)]


def test_reexport_twice_changes_nothing(db: Path) -> None:
    with billing_audit.open(db) as store:
        for a, b in itertools.product([EARLY, LATER], repeat=2):
            store.ingest([a])
            store.ingest([b])
        assert _total(store) == _folder_total(LATER)
