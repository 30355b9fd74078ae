"""Azure exports as they come (issue #14): pay-as-you-go (MOSP) 2019-11-01 in PascalCase and camelCase,
localised headers, currency in ``Currency``, parquet with the same quirks, and zero prices."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest

import billing_audit
from billing_audit.reader import detect, file_kind, install_macros, probe_columns
from connectors.azure.cost_details import english_name
from support import FIXTURES

AZ = FIXTURES / "azure"
PAYG = ("payg-mosp-csv", "payg-mosp-camel-csv", "localised-csv", "payg-parquet")
SUBS = {
    "payg-mosp-csv": "5d0c1e2f-0000-4000-8000-00000000b001",
    "payg-mosp-camel-csv": "5d0c1e2f-0000-4000-8000-00000000b002",
    "localised-csv": "5d0c1e2f-0000-4000-8000-00000000b003",
    "payg-parquet": "5d0c1e2f-0000-4000-8000-00000000b004",
}
# what each pay-as-you-go variant holds (fixtures/gen_azure_variants.py, mosp_lines): 9 lines
PAYG_TOTAL = Decimal("17.6304") + Decimal("6.9787") + Decimal("17.6304") + Decimal("0.24") + Decimal("6.12") \
    + Decimal("18.365") + Decimal("0.055") + Decimal("0.0012") + Decimal("3.48")
EPS = Decimal("0.000001")


def _files(variant: str) -> list[Path]:
    return sorted(p for p in (AZ / variant).rglob("*") if p.is_file() and "manifest" not in p.name)


@pytest.mark.parametrize("variant", PAYG)
def test_payg_variants_are_detected_as_payg(variant: str) -> None:
    con = duckdb.connect()
    install_macros(con)
    for f in _files(variant):
        kind = file_kind(f)
        assert detect(probe_columns(con, f, str(f), kind), kind, str(f)).id == "azure-usage-details-payg"


def test_localised_headers_answer_to_the_english_name() -> None:
    assert english_name("Abonnement-GUID (SubscriptionGuid)") == "subscriptionguid"
    assert english_name("PreTaxCost (PreTaxCost)") == "pretaxcost"
    assert english_name(" Kategorie der Verbrauchseinheit ( MeterCategory ) ") == "metercategory"
    assert english_name("preTaxCost") == "pretaxcost"
    assert english_name("Kosten (in EUR)") == "kosten (in eur)"  # not an English column name: left alone


@pytest.mark.parametrize("variant", PAYG)
def test_payg_variant_ingests_exactly(variant: str, db: Path) -> None:
    currency = "EUR" if variant == "payg-parquet" else "USD"
    with billing_audit.open(db) as store:
        report = store.ingest([AZ / variant])
        assert not report.errors, report.errors
        con = store.con
        rows = con.execute(
            "SELECT count(*), sum(BilledCost), any_value(BillingCurrency), count(DISTINCT BillingCurrency), "
            "min(BillingPeriodStart), max(BillingPeriodEnd), min(ChargePeriodStart), max(ChargePeriodEnd), "
            "count(DISTINCT BillingAccountId), any_value(BillingAccountId), any_value(BillingAccountType), "
            "any_value(SubAccountId), count(*) FILTER (WHERE ChargeCategory = 'Usage') FROM line_items"
        ).fetchone()
        assert rows is not None
        n, total, cur, ncur, bps, bpe, cps, cpe, naccts, acct, acct_type, sub, usage = rows
        assert n == 9 and usage == 9
        assert abs(total - PAYG_TOTAL) <= EPS
        assert (cur, ncur) == (currency, 1)
        # no billing-period columns: the usage date's month
        assert (bps, bpe) == (datetime(2026, 9, 1), datetime(2026, 10, 1))
        assert (cps, cpe) == (datetime(2026, 9, 1), datetime(2026, 9, 4))
        assert (naccts, acct, acct_type, sub) == (1, SUBS[variant], "Subscription", SUBS[variant])
        log = con.execute("SELECT format, periods, cost_total FROM ingest_log").fetchall()
        assert [(f, p) for f, p, _ in log] == [("azure-usage-details-payg", "2026-09")]
        assert set(log[0][2]) == {currency} and abs(log[0][2][currency] - PAYG_TOTAL) <= EPS


@pytest.mark.parametrize("variant", PAYG)
def test_payg_spot_low_priority_tags_and_list_cost(variant: str, db: Path) -> None:
    with billing_audit.open(db) as store:
        assert not store.ingest([AZ / variant]).errors
        con = store.con
        spot = con.execute(
            "SELECT SkuMeter, PricingCategory, x_PricingModel, count(*), sum(BilledCost), sum(ListCost) FROM line_items "
            "WHERE PricingCategory = 'Dynamic' GROUP BY ALL ORDER BY 1"
        ).fetchall()
        assert spot == [
            ("NC24ads A100 v4 Spot", "Dynamic", "Spot", 3, Decimal("42.2395"), Decimal("42.2395")),
            ("NC6s v3 Low Priority", "Dynamic", "Low Priority", 1, Decimal("6.12"), Decimal("6.12")),
        ]
        # the restart fee is not spot-priced usage
        fee = con.execute("SELECT PricingCategory, x_UsageType FROM line_items WHERE SkuMeter = 'Spot Restart Fee'"
                          ).fetchall()
        assert fee == [("Standard", "Virtual Machines|Other Compute Charges|Spot Restart Fee")]
        tags = con.execute(
            "SELECT Tags['team'], Tags['training-job'], ResourceName, ResourceType FROM line_items "
            "WHERE SkuMeter = 'NC24ads A100 v4 Spot' ORDER BY ChargePeriodStart"
        ).fetchall()
        job = "resnet-payg-" + {"payg-mosp-csv": "1", "payg-mosp-camel-csv": "2", "localised-csv": "3",
                                "payg-parquet": "5"}[variant]
        assert tags == [("vision", job, "gpu-spot-01", "Microsoft.Compute/virtualMachines"),
                        ("vision", job, "gpu-spot-01", "Microsoft.Compute/virtualMachines"),
                        ("vision", job, "gpu-spot-02", "Microsoft.Compute/virtualMachines")]
        # ResourceRate is the retail price paid; 0 on a line that costs money is no price
        sources = con.execute(
            "SELECT x_ListCostSource, count(*), count(ListCost) FROM line_items GROUP BY 1 ORDER BY 1"
        ).fetchall()
        assert sources == [("ResourceRate * UsageQuantity", 8, 8), ("missing: ResourceRate = 0", 1, 0)]
        assert con.execute("SELECT ListUnitPrice, BilledCost FROM line_items WHERE ListCost IS NULL").fetchall() == [
            (None, Decimal("0.0012"))
        ]


def test_ea_file_with_currency_column_and_zero_payg_price(db: Path) -> None:
    with billing_audit.open(db) as store:
        report = store.ingest([AZ / "ea-currency-column"])
        assert not report.errors, report.errors
        rows = store.con.execute(
            "SELECT SkuMeter, PricingCategory, BillingCurrency, BilledCost, ListCost, x_ListCostSource, ListUnitPrice "
            "FROM line_items ORDER BY x_SourceRow"
        ).fetchall()
        assert rows == [
            ("NC24ads A100 v4 Spot", "Dynamic", "USD", Decimal("17.6304"), None, "missing: PayGPrice = 0", None),
            ("NC24ads A100 v4 Spot", "Dynamic", "USD", Decimal("11.7536"), None, "missing: PayGPrice = 0", None),
            ("NC24ads A100 v4", "Standard", "USD", Decimal("13.224"), Decimal("14.692"), "PayGPrice * Quantity",
             Decimal("3.673")),
            # free: no cost, so a zero price is the price
            ("Free Operations", "Standard", "USD", Decimal("0"), Decimal("0"), "PayGPrice * Quantity", Decimal("0")),
        ]
        log = store.con.execute("SELECT periods, cost_total FROM ingest_log").fetchall()
        assert log == [("2026-10", {"USD": Decimal("42.608")})]


EA_HEADER = "Date,MeterCategory,MeterName,CostInBillingCurrency,SubscriptionId,ChargeType,PayGPrice,Quantity"


def _write(tmp: Path, name: str, text: str) -> Path:
    f = tmp / "exp" / name
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(text)
    return f


@pytest.mark.parametrize("header, row2", [
    (EA_HEADER + ",Currency", "10/2/2026,Virtual Machines,D4 v3,2.5,sub1,Usage,0.25,10,"),
    (EA_HEADER + ",billingCurrency", "10/2/2026,Virtual Machines,D4 v3,2.5,sub1,Usage,0.25,10,  "),
])
def test_row_without_currency_is_a_per_row_error_not_a_crash(tmp_path: Path, db: Path, header: str,
                                                              row2: str) -> None:
    col = header.rsplit(",", 1)[1]
    f = _write(tmp_path, "part_0_0001.csv", f"{header}\n10/1/2026,Virtual Machines,D4 v3,1.5,sub1,Usage,0.15,10,USD\n"
               f"{row2}\n")
    with billing_audit.open(db) as store:
        report = store.ingest([f])
        assert len(report.errors) == 1
        e = report.errors[0]
        assert (e.file, e.row, e.column) == (str(f), 2, "Currency" if col == "Currency" else "BillingCurrency")
        assert "no currency" in e.reason
        assert store.con.execute("SELECT count(*) FROM line_items").fetchone() == (0,)


def test_file_without_any_currency_column_is_refused_naming_the_columns(tmp_path: Path, db: Path) -> None:
    f = _write(tmp_path, "part.csv", EA_HEADER + "\n10/1/2026,Virtual Machines,D4 v3,1.5,sub1,Usage,0.15,10\n")
    with billing_audit.open(db) as store:
        report = store.ingest([f])
        assert [(e.row, e.column) for e in report.errors] == [(1, "BillingCurrencyCode")]
        assert "no currency column (BillingCurrencyCode, BillingCurrency or Currency)" in report.errors[0].reason


def test_cli_exits_2_with_file_row_column_for_a_blank_currency(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from billing_audit.cli import main

    f = _write(tmp_path, "x.csv", "date,meterCategory,meterName,costInBillingCurrency,Currency,subscriptionId\n"
               "2026-10-01,Virtual Machines,D4 v3,1.5,,sub1\n")
    res = CliRunner().invoke(main, ["ingest", str(f.parent), "--db", str(tmp_path / "s.duckdb")])
    assert res.exit_code == 2, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    assert f"{f}, row 1, column 'Currency': the row has no currency (Currency empty)" in res.output


def test_ingest_log_takes_any_currency_text(tmp_path: Path, db: Path) -> None:
    """The log's cost map is built in SQL: a blank or odd currency is a key, never a struct field."""
    header = ("BilledCost,EffectiveCost,ListCost,BillingCurrency,ChargePeriodStart,ChargePeriodEnd,BillingPeriodStart,"
              "BillingPeriodEnd,ChargeCategory,ProviderName,BillingAccountId,ServiceName")
    rows = [f'{c},{c},{c},{cur},2026-10-01,2026-10-02,2026-10-01,2026-11-01,Usage,Acme,a1,X'
            for c, cur in (("1.5", ""), ("2", '"we\'ird ""cur"""'), ("3", '"{""a"": 1}"'), ("4", "EUR"))]
    f = _write(tmp_path, "focus.csv", header + "\n" + "\n".join(rows) + "\n")
    with billing_audit.open(db) as store:
        assert not store.ingest([f]).errors
        row = store.con.execute("SELECT cost_total FROM ingest_log").fetchone()
    assert row is not None
    totals = row[0]
    assert totals == {"": Decimal("1.5"), 'we\'ird "cur"': Decimal("2"), '{"a": 1}': Decimal("3"),
                      "EUR": Decimal("4")}
