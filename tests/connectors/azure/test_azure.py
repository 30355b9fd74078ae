"""Azure Cost Management cost details: detection, mapping details, manifests and snapshot runs."""

from __future__ import annotations

import itertools
import shutil
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest

import billing_audit
from billing_audit.reader import detect, file_kind, install_macros, probe_columns
from connectors.azure.cost_details import AzureCostDetails, CostExportManifest
from support import FIXTURES, Case, dump_line_items, source_total

AZ = FIXTURES / "azure"
SNAP = AZ / "snapshots/costexports/ea/20261001-20261031/gpu-ea-daily"
RUNS = sorted(p for p in SNAP.iterdir() if p.is_dir())  # yyyyMMddHHmm folders, oldest first
EA_CASE = Case("ea", "", "azure-cost-details", ("CostInBillingCurrency",))


def _data_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and "manifest" not in p.name)


def _one(store: billing_audit.Store, sql: str, params: list[object] | None = None) -> object:
    rows = store.con.execute(sql, params or []).fetchall()  # fetchall: leaves no open result behind
    assert len(rows) == 1
    return rows[0][0]


@pytest.mark.parametrize("variant", ["ea-actual-csv", "mca-actual-csv-gz", "ea-old-parquet", "ea-legacy-manifest"])
def test_every_variant_is_detected(variant: str) -> None:
    con = duckdb.connect()
    install_macros(con)
    files = _data_files(AZ / variant)
    assert files
    for f in files:
        kind = file_kind(f)
        cols = probe_columns(con, f, str(f), kind)
        assert detect(cols, kind, str(f)).id == "azure-cost-details"


def test_focus_and_aws_columns_are_not_cost_details() -> None:
    fmt = AzureCostDetails()
    focus = {c: "VARCHAR" for c in ("billedcost", "chargeperiodstart", "x_skumetercategory", "subaccountid")}
    assert not fmt.detect(focus, "csv")
    cur = {c: "VARCHAR" for c in ("line_item_usage_start_date", "line_item_unblended_cost", "product_product_name")}
    assert not fmt.detect(cur, "parquet")


@pytest.fixture
def everything(db: Path) -> billing_audit.Store:
    store = billing_audit.open(db)
    report = store.ingest([AZ])
    assert not report.errors, report.errors
    yield store
    store.close()


def test_spot_gpu_is_dynamic_and_restart_fee_is_not(everything: billing_audit.Store) -> None:
    rows = everything.con.execute(
        "SELECT DISTINCT PricingCategory, x_PricingModel FROM line_items WHERE SkuMeter = 'NC24ads A100 v4 Spot'"
    ).fetchall()
    # old EA files have no PricingModel column: spot still comes from the meter name
    assert set(rows) == {("Dynamic", "Spot")}
    fees = everything.con.execute(
        "SELECT DISTINCT PricingCategory, x_UsageType, ServiceCategory FROM line_items "
        "WHERE ChargeDescription ILIKE '%Spot Restart Fee%'"
    ).fetchall()
    assert fees == [("Standard", "Virtual Machines|Other Compute Charges|Spot Restart Fee", "Compute")]
    assert _one(everything, "SELECT min(ConsumedQuantity) FROM line_items WHERE SkuMeter = 'Spot Restart Fee'") == 3


def test_on_demand_spelling_is_normalised(everything: billing_audit.Store) -> None:
    models = {r[0] for r in everything.con.execute("SELECT DISTINCT x_PricingModel FROM line_items").fetchall()}
    assert "OnDemand" in models and "On Demand" not in models


def test_tag_keys_merge_across_case_and_malformed_tags_keep_the_line(everything: billing_audit.Store) -> None:
    keys = everything.con.execute(
        "SELECT DISTINCT unnest(map_keys(Tags)) FROM line_items WHERE x_SourceFile LIKE '%ea-actual-csv%'"
    ).fetchall()
    assert {k[0] for k in keys} == {"team", "training-job", "purpose", "costcenter", "env"}
    # "TEAM"/"Training-Job" on one line, "Team"/"training-job" on another: the same keys
    assert (
        _one(
            everything,
            "SELECT count(*) FROM line_items WHERE Tags['team'] = 'vision' AND "
            "Tags['training-job'] = 'resnet-sweep-7' AND SkuMeter = 'NC24ads A100 v4 Spot' "
            "AND x_SourceFile LIKE '%ea-actual-csv%'",
        )
        == 4
    )
    bad = everything.con.execute(
        "SELECT x_TagsRaw, cardinality(Tags), BilledCost FROM line_items "
        "WHERE SkuMeter = 'All Other Operations' AND x_SourceFile LIKE '%ea-actual-csv%'"
    ).fetchall()
    assert bad == [('"team": "vision","purpose": "checkpo', 0, Decimal("0.00154"))]


def test_charge_categories(everything: billing_audit.Store) -> None:
    got = dict(
        everything.con.execute(
            "SELECT x_LineItemType, any_value(ChargeCategory || '/' || coalesce(ChargeClass, '')) FROM line_items "
            "GROUP BY 1"
        ).fetchall()
    )
    # pay-as-you-go (MOSP) files have no ChargeType: every line is usage
    assert got == {"Usage": "Usage/", "Refund": "Credit/Correction", "Purchase": "Purchase/", "Tax": "Tax/",
                   None: "Usage/"}
    assert _one(everything, "SELECT ChargeFrequency FROM line_items WHERE x_LineItemType = 'Purchase'") == "One-Time"


def test_mca_is_billed_in_eur_with_list_cost_in_billing_currency(everything: billing_audit.Store) -> None:
    rows = everything.con.execute(
        "SELECT DISTINCT BillingCurrency, PricingCurrency, x_ListCostSource FROM line_items "
        "WHERE x_SourceFile LIKE '%mca-actual%' AND x_LineItemType <> 'Tax'"
    ).fetchall()
    assert rows == [("EUR", "USD", "paygCostInBillingCurrency")]
    # unit prices are converted from the pricing currency too
    assert _one(
        everything, "SELECT ListUnitPrice FROM line_items WHERE x_SourceFile LIKE '%mca-actual%' AND x_SourceRow = 1"
    ) == Decimal("0.7346") * Decimal("0.92")
    currencies = {r[0] for r in everything.summary().select("currency").rows()}
    assert currencies == {"USD", "EUR"}


def test_list_cost_sources(everything: billing_audit.Store) -> None:
    src = dict(
        everything.con.execute(
            "SELECT regexp_extract(x_SourceFile, 'fixtures/azure/([^/]+)/', 1), "
            "string_agg(DISTINCT x_ListCostSource, ';' ORDER BY x_ListCostSource) "
            "FROM line_items GROUP BY 1"
        ).fetchall()
    )
    assert src["ea-actual-csv"] == ("CostInBillingCurrency (no pay-as-you-go price in export);PayGPrice * Quantity;"
                                    "missing: PayGPrice empty")
    # EA leaves PayGPrice empty on spot meters: their list cost is unknown (NULL), never the spot cost or 0
    spot = everything.con.execute(
        "SELECT ListCost, x_ListCostSource, count(*) FROM line_items WHERE x_SourceFile LIKE '%ea-actual-csv%' "
        "AND SkuMeter = 'NC24ads A100 v4 Spot' AND x_LineItemType = 'Usage' GROUP BY ALL").fetchall()
    assert spot == [(None, "missing: PayGPrice empty", 4)]
    assert src["ea-old-parquet"] == "CostInBillingCurrency (no pay-as-you-go price in export)"
    assert _one(
        everything,
        "SELECT ListCost FROM line_items WHERE x_SourceFile LIKE '%ea-actual-csv%' "
        "AND SkuMeter = 'D4s v5' AND x_LineItemType = 'Usage'",
    ) == Decimal("4.608")


def test_accounts_periods_and_subscriptions(everything: billing_audit.Store) -> None:
    got = everything.con.execute(
        "SELECT BillingAccountId, strftime(BillingPeriodStart, '%Y-%m'), strftime(min(BillingPeriodEnd), '%Y-%m-%d') "
        "FROM line_items GROUP BY ALL ORDER BY ALL"
    ).fetchall()
    assert got == [
        ("54321000", "2026-10", "2026-11-01"),  # ea-currency-column
        # pay-as-you-go (MOSP): the subscription is the billing account, the usage month the period
        *[(f"5d0c1e2f-0000-4000-8000-00000000b00{i}", "2026-09", "2026-10-01") for i in (1, 2, 3, 4)],
        ("65432100", "2026-10", "2026-11-01"),
        ("76543210", "2026-09", "2026-10-01"),
        ("76543210", "2026-10", "2026-11-01"),
        ("87654321", "2026-10", "2026-11-01"),
        (
            "a1b2c3d4-0000-4000-8000-00000000mca1:e5f6a7b8-0000-4000-8000-0000000000b1_2019-05-31",
            "2026-10",
            "2026-11-01",
        ),
    ]
    # old EA: the GUID (SubscriptionGuid) wins over the numeric SubscriptionId
    subs = everything.con.execute(
        "SELECT DISTINCT SubAccountId FROM line_items WHERE BillingAccountId = '76543210'"
    ).fetchall()
    assert {s[0] for s in subs} == {"3f2a1b0c-0000-4000-8000-0000000000a1", "3f2a1b0c-0000-4000-8000-0000000000a2"}
    # M/D/YYYY, zero-padded MM/DD/YYYY, ISO with 7 fractional digits and parquet timestamps all land on midnight UTC
    assert (
        _one(
            everything,
            "SELECT count(*) FROM line_items WHERE ChargePeriodStart <> date_trunc('day', "
            "ChargePeriodStart) OR ChargePeriodEnd <> ChargePeriodStart + INTERVAL 1 DAY",
        )
        == 0
    )


# -- manifests ---------------------------------------------------------------------------------


def test_new_manifest_reader() -> None:
    m = next((AZ / "ea-actual-csv").rglob("manifest.json"))
    reader = CostExportManifest()
    assert reader.matches(m)
    hint = reader.read(m)
    assert hint is not None
    assert [f.name for f in hint.files] == ["part_0_0001.csv", "part_1_0001.csv"]
    assert all(f.parent == m.parent for f in hint.files)
    assert hint.version is not None and hint.version.isoformat() == "2026-11-02T05:12:43.123456+00:00"
    assert hint.key.endswith(":202610:6c1e9f40-0000-4000-8000-00000000e001")
    assert "/exports/gpu-ea-actual" in hint.key


def test_legacy_manifest_reader() -> None:
    m = next((AZ / "ea-legacy-manifest").rglob("_manifest.json"))
    reader = CostExportManifest()
    assert reader.matches(m)
    hint = reader.read(m)
    assert hint is not None
    assert [f.name for f in hint.files] == ["part_0_0001.csv"]
    assert hint.version is not None and hint.version.year == 2026 and hint.version.month == 10
    assert ":202609:" in hint.key


def test_foreign_manifest_json_is_ignored(tmp_path: Path) -> None:
    m = tmp_path / "manifest.json"
    m.write_text('{"name": "some-npm-thing", "version": "1.0.0"}')
    assert CostExportManifest().read(m) is None
    assert not CostExportManifest().matches(tmp_path / "gpu-cur-Manifest.json")


def test_manifest_version_falls_back_to_the_run_folder(tmp_path: Path, db: Path) -> None:
    """Without runInfo.submittedTime the yyyyMMddHHmm folder dates the run."""
    import json

    root = tmp_path / "exp"
    shutil.copytree(SNAP, root)
    for man in root.rglob("manifest.json"):
        data = json.loads(man.read_text())
        del data["runInfo"]["submittedTime"]
        man.write_text(json.dumps(data))
    with billing_audit.open(db) as store:
        store.ingest([root])
        got = store.con.execute("SELECT version, version_source, status FROM deliveries ORDER BY version").fetchall()
    assert [(str(v), s) for v, s, _ in got] == [
        ("2026-10-11 03:00:00", "path"),
        ("2026-10-21 03:00:00", "path"),
        ("2026-11-02 03:00:00", "path"),
    ]
    assert [s for _, _, s in got] == ["replaced", "replaced", "current"]


# -- snapshots -----------------------------------------------------------------------------------


def _newest_total() -> Decimal:
    return sum((source_total(f, EA_CASE) for f in _data_files(RUNS[-1])), Decimal(0))


def test_snapshot_runs_totals_differ() -> None:
    totals = [sum((source_total(f, EA_CASE) for f in _data_files(r)), Decimal(0)) for r in RUNS]
    assert len(RUNS) == 3 and len(set(totals)) == 3


def test_whole_snapshot_folder_counts_only_the_newest_run(db: Path) -> None:
    with billing_audit.open(db) as store:
        report = store.ingest([AZ / "snapshots"])
        assert not report.errors
        assert _one(store, "SELECT sum(BilledCost) FROM line_items") == _newest_total()
        files = {r[0] for r in store.con.execute("SELECT DISTINCT x_SourceFile FROM line_items").fetchall()}
        assert files == {str(f) for f in _data_files(RUNS[-1])}


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))), ids=lambda o: "".join(map(str, o)))
def test_runs_one_at_a_time_in_any_order_end_the_same(order: tuple[int, ...], tmp_path: Path) -> None:
    with billing_audit.open(tmp_path / "all.duckdb") as store:
        store.ingest([AZ / "snapshots"])
        want = dump_line_items(store.con)
    with billing_audit.open(tmp_path / "one.duckdb") as store:
        for i in order:
            report = store.ingest([RUNS[i]])
            assert not report.errors
        assert _one(store, "SELECT sum(BilledCost) FROM line_items") == _newest_total()
        assert dump_line_items(store.con) == want


# -- bad input -----------------------------------------------------------------------------------

HEADER = "Date,SubscriptionId,MeterCategory,MeterName,Quantity,CostInBillingCurrency,BillingCurrencyCode,Tags\n"


def test_bad_cost_names_file_row_and_column(tmp_path: Path, db: Path) -> None:
    f = tmp_path / "part_0_0001.csv"
    f.write_bytes(
        b"\xef\xbb\xbf"
        + (
            HEADER + "10/1/2026,s1,Storage,Hot Read Operations,1,0.5,USD,\n"
            "10/2/2026,s1,Storage,Hot Read Operations,1,0.5,USD,\n"
            '10/3/2026,s1,Storage,Hot Read Operations,1,"1,25",USD,\n'
        ).encode()
    )
    with billing_audit.open(db) as store:
        report = store.ingest([f])
        assert len(report.errors) == 1
        e = report.errors[0]
        assert (e.file, e.row, e.column) == (str(f), 3, "CostInBillingCurrency")
        assert _one(store, "SELECT count(*) FROM line_items") == 0


def test_bad_date_names_the_column(tmp_path: Path, db: Path) -> None:
    f = tmp_path / "x.csv"
    f.write_text(
        HEADER + "10/1/2026,s1,Storage,Hot Read Operations,1,0.5,USD,\n"
        "31/31/2026,s1,Storage,Hot Read Operations,1,0.5,USD,\n"
    )
    with billing_audit.open(db) as store:
        e = store.ingest([f]).errors[0]
        assert (e.row, e.column) == (2, "Date")


def test_bom_before_a_declared_first_column_and_subscription_fallback(tmp_path: Path, db: Path) -> None:
    """``Date`` is the first header behind the BOM; no BillingAccountId: the subscription stands in."""
    f = tmp_path / "x.csv"
    f.write_bytes(
        b"\xef\xbb\xbf"
        + (
            HEADER + "10/1/2026,sub-1,Bandwidth,Standard Data Transfer Out,2,0.17,USD,"
            '"""Team"": ""a"",""team"": ""b"""\n'
        ).encode()
    )
    with billing_audit.open(db) as store:
        assert not store.ingest([f]).errors
        row = store.con.execute(
            "SELECT ChargePeriodStart, BillingAccountId, BillingAccountType, ServiceCategory, Tags FROM line_items"
        ).fetchone()
    assert row is not None
    assert (str(row[0]), row[1], row[2], row[3]) == ("2026-10-01 00:00:00", "sub-1", "Subscription", "Networking")
    assert row[4] == {"team": "a"}
