"""Attribution scenarios: every number checked against a hand computation.

The scenario exports (fixtures/gen_scenarios.py) hold, in November 2026:
- alpha (vision, AWS USD): 4 spot hours at 10.00 (list 32.00), 2 restarts billed 0.16,
  checkpoint GETs 0.40 and egress 2.00 on bucket ckpt-alpha;
- beta (nlp, AWS USD): 2 spot hours at 2.00 (list 5.00) and two interruption notices;
- gamma (vision, AWS USD): instance c1 for 3 hours then c2 for 3 hours, at 3.00 (list 12.00);
- delta (speech, AWS USD): 2 spot hours at 10.00 (list 32.00), 3 restarts billed 0.75;
- unattributed: an m5 hour 0.50, GETs 0.30 on bucket ckpt-shared, tax 1.00, credit -2.00;
- alpha again on Azure, billed in EUR: 2 spot days of 10 hours at 7.00 (list = spot price),
  and a Spot Restart Fee of 2 x 0.07.
Defaults: checkpoint interval 30 min, restart 5 min.
"""

from __future__ import annotations

import csv
import json
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner

import billing_audit
from billing_audit.cli import main
from billing_audit.config import Config, load_config
from billing_audit.errors import BillingAuditError
from billing_audit.report import JOB_FIELDS, UNATTRIBUTED, build_report
from support import FIXTURES

SCENARIOS = FIXTURES / "scenarios"
BUDGETS = SCENARIOS / "billing-audit.toml"
D = Decimal


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("scen") / "s.duckdb"
    with billing_audit.open(path) as store:
        assert not store.ingest([SCENARIOS]).errors
        store.tag()
    return path


def _jobs(store_path: Path, cfg: Config | None = None, **kw: str) -> dict[tuple[str, str], dict]:
    with billing_audit.open(store_path) as store:
        rep = build_report(store, cfg or load_config(BUDGETS), "2026-11", **kw)
    return {(r["job"], r["currency"]): r for r in rep.jobs.iter_rows(named=True)}


def _close(got: Decimal | None, want: str) -> None:
    assert got is not None
    assert abs(got - D(want)) <= D("0.000000001"), f"{got} != {want}"


def test_job_with_fee_lines(store_path: Path) -> None:
    a = _jobs(store_path)[("alpha", "USD")]
    assert (a["team"], a["provider"], a["interruptions_source"]) == ("vision", "aws", "fee_lines")
    assert a["interruptions"] == 2
    _close(a["spot_compute_cost"], "40")  # 4 x 10.00
    _close(a["on_demand_equivalent_cost"], "128")  # 4 x 32.00
    _close(a["gross_spot_savings"], "88")
    _close(a["restart_fees"], "0.16")
    _close(a["storage_reread_cost"], "0.40")
    _close(a["checkpoint_egress_cost"], "2.00")
    _close(a["other_compute_charges"], "0")
    _close(a["checkpoint_io_unlinked"], "0")  # GETs and egress at hour 2, the hour of the restarts: linked
    # hourly cost 40 / 4 h = 10.00; recompute 2 x 15 min x 10.00; idle 2 x 5 min x 10.00
    _close(a["recompute_cost_estimate"], "5.00")
    _close(a["restart_idle_cost_estimate"], "1.666666666667")
    _close(a["hidden_overhead_total"], "9.226666666667")
    _close(a["net_spot_savings"], "78.773333333333")
    assert a["savings_eroded_pct"] == pytest.approx(9.226666666667 / 88 * 100)
    assert a["recommendation"] == "keep_spot"


def test_job_with_only_signals(store_path: Path) -> None:
    b = _jobs(store_path)[("beta", "USD")]
    assert (b["interruptions"], b["interruptions_source"]) == (2, "signals")
    _close(b["spot_compute_cost"], "4")
    _close(b["gross_spot_savings"], "6")
    # hourly cost 4 / 2 h = 2.00: recompute 2 x 0.25 h x 2 = 1.00, idle 2 x 5/60 h x 2
    _close(b["recompute_cost_estimate"], "1.00")
    _close(b["restart_idle_cost_estimate"], "0.333333333333")
    _close(b["hidden_overhead_total"], "1.333333333333")
    assert b["savings_eroded_pct"] == pytest.approx(1.333333333333 / 6 * 100)  # 22.2%: near the 25% budget
    assert b["recommendation"] == "review"
    assert any("near the 25% budget" in r for r in b["reasons"])


def test_job_inferred_from_churn(store_path: Path) -> None:
    g = _jobs(store_path)[("gamma", "USD")]
    assert (g["interruptions"], g["interruptions_source"]) == (1, "inferred")
    _close(g["spot_compute_cost"], "18")
    _close(g["on_demand_equivalent_cost"], "72")
    _close(g["recompute_cost_estimate"], "0.75")  # 1 x 0.25 h x 3.00
    _close(g["restart_idle_cost_estimate"], "0.25")  # 1 x 5/60 h x 3.00
    _close(g["hidden_overhead_total"], "1.00")
    _close(g["net_spot_savings"], "53")
    assert g["recommendation"] == "keep_spot"


def test_a_budget_breach_where_spot_still_saves_is_a_flag_not_a_switch(store_path: Path) -> None:
    """delta: 3 restarts billed 0.75 against the scenario's 0.50 a job: over budget by 0.25.  Spot still saves:
    spot 20.00 + overhead 10.75 = 30.75 < the on-demand 64.00, so no switch; erosion 10.75 / 44 = 24.4% is near the
    25% budget (review)."""
    with_budget = _jobs(store_path)[("delta", "USD")]
    without = _jobs(store_path, Config())[("delta", "USD")]
    for d in (with_budget, without):
        _close(d["restart_fees"], "0.75")
        assert d["interruptions"] == 3
        _close(d["recompute_cost_estimate"], "7.50")  # 3 x 0.25 h x 10.00
        _close(d["restart_idle_cost_estimate"], "2.50")
        _close(d["hidden_overhead_total"], "10.75")
    assert (without["recommendation"], without["over_budget"], without["budget_breaches"]) == ("keep_spot", False, [])
    assert with_budget["recommendation"] == "review"
    assert with_budget["over_budget"] is True
    assert with_budget["budget_breaches"] == [
        "budgets.interruption_fees_per_job: restart fees 0.75 USD exceed 0.50 USD by 0.25 USD"]
    assert any("near the 25% budget" in r for r in with_budget["reasons"])


def test_a_breach_where_on_demand_is_cheaper_switches(store_path: Path, tmp_path: Path) -> None:
    """delta with restart_minutes = 200: idle 3 x 200/60 h x 10.00 = 100.00, overhead 0.75 + 7.50 + 100.00 = 108.25;
    spot 20.00 + 108.25 = 128.25 >= the on-demand 64.00: switch, and still over the 0.50 fee budget by 0.25."""
    (tmp_path / "c.toml").write_text(BUDGETS.read_text() + '[estimates.jobs."delta"]\nrestart_minutes = 200\n')
    d = _jobs(store_path, load_config(tmp_path / "c.toml"))[("delta", "USD")]
    _close(d["hidden_overhead_total"], "108.25")
    assert d["recommendation"] == "switch_to_on_demand"
    assert d["reasons"][0] == "spot cost plus overhead (128.25 USD) is at least the on-demand equivalent (64.00 USD)"
    assert d["over_budget"] is True


def test_budgets_per_currency(store_path: Path, tmp_path: Path) -> None:
    """[budgets] 0.50 a job, [budgets.EUR] 0.10: alpha EUR's fees 0.14 break budgets.EUR by 0.04; alpha USD's 0.16
    are under the plain budget (and not near it: 0.8 x 0.50 = 0.40); delta USD's 0.75 break it by 0.25."""
    (tmp_path / "c.toml").write_text("[budgets]\ninterruption_fees_per_job = 0.50\n"
                                     "[budgets.EUR]\ninterruption_fees_per_job = 0.10\n")
    jobs = _jobs(store_path, load_config(tmp_path / "c.toml"))
    assert jobs[("alpha", "EUR")]["budget_breaches"] == [
        "budgets.EUR.interruption_fees_per_job: restart fees 0.14 EUR exceed 0.10 EUR by 0.04 EUR"]
    assert jobs[("alpha", "USD")]["over_budget"] is False
    assert jobs[("delta", "USD")]["budget_breaches"] == [
        "budgets.interruption_fees_per_job: restart fees 0.75 USD exceed 0.50 USD by 0.25 USD"]
    (tmp_path / "usd.toml").write_text("[budgets.USD]\ninterruption_fees_per_job = 0.10\n")
    jobs = _jobs(store_path, load_config(tmp_path / "usd.toml"))  # EUR has no budget at all now
    assert jobs[("alpha", "EUR")]["over_budget"] is False
    assert jobs[("alpha", "USD")]["budget_breaches"][0].startswith("budgets.USD.interruption_fees_per_job")


def test_fail_on_exits_1_listing_the_rows(store_path: Path, tmp_path: Path) -> None:
    base = ["report", "--db", str(store_path), "--period", "2026-11", "--config", str(BUDGETS), "--format", "json",
            "--out", str(tmp_path / "r.json")]
    r = CliRunner().invoke(main, [*base, "--fail-on", "over_budget"])
    assert r.exit_code == 1, r.output
    assert ("over_budget: delta (speech, aws, USD): budgets.interruption_fees_per_job: restart fees 0.75 USD exceed "
            "0.50 USD by 0.25 USD") in r.stderr
    assert "alpha" not in r.stderr
    r = CliRunner().invoke(main, [*base, "--fail-on", "switch"])  # no row would be cheaper on demand
    assert r.exit_code == 0, r.output
    (tmp_path / "empty.toml").write_text("")
    r = CliRunner().invoke(main, ["report", "--db", str(store_path), "--period", "2026-11", "--fail-on", "over_budget",
                                  "--config", str(tmp_path / "empty.toml"), "--format", "json"])
    assert r.exit_code == 0, r.output  # no budgets set: nothing is over one
    (tmp_path / "c.toml").write_text('[estimates.jobs."delta"]\nrestart_minutes = 200\n')
    out = tmp_path / "audit"
    r = CliRunner().invoke(main, ["audit", str(SCENARIOS), "--db", str(tmp_path / "a.duckdb"), "--out", str(out),
                                  "--config", str(tmp_path / "c.toml"), "--period", "2026-11", "--fail-on", "switch",
                                  "-q"])
    assert r.exit_code == 1, r.output
    assert "switch: delta (speech, aws, USD): spot cost plus overhead (128.25 USD)" in r.stderr
    assert (out / "jobs.csv").exists()  # the files are written before the exit


def test_no_spot_and_unattributed_rows(store_path: Path) -> None:
    """The unattributed row: -0.20 USD (0.50 + 0.30 + 1.00 - 2.00) to attribute; no job row without spot here."""
    un = _jobs(store_path)[(UNATTRIBUTED, "USD")]
    assert un["recommendation"] == "attribute"
    assert un["reasons"] == ["-0.20 USD is attributed to no job: tag its resources, or map them to a job and team in "
                             "the resource map (attribution.resource_map)"]


def test_two_currency_team_and_no_list_price(store_path: Path) -> None:
    jobs = _jobs(store_path)
    eur = jobs[("alpha", "EUR")]
    assert (eur["team"], eur["provider"], eur["interruptions_source"]) == ("vision", "azure", "fee_lines")
    assert eur["interruptions"] == 2
    _close(eur["spot_compute_cost"], "14")
    _close(eur["restart_fees"], "0.14")
    # spot hours: two daily lines of 10 hours -> 20 h; 14 / 20 = 0.70 an hour
    _close(eur["recompute_cost_estimate"], "0.35")
    _close(eur["restart_idle_cost_estimate"], "0.116666666667")
    assert eur["savings_eroded_pct"] is None  # no gross savings to erode
    assert eur["recommendation"] == "review"
    assert any("no on-demand price" in r for r in eur["reasons"])
    with billing_audit.open(store_path) as store:
        rep = build_report(store, load_config(BUDGETS), "2026-11")
    vision = {r["currency"]: r for r in rep.teams.iter_rows(named=True) if r["team"] == "vision"}
    assert set(vision) == {"USD", "EUR"}
    _close(vision["USD"]["spot_compute_cost"], "58")  # alpha 40 + gamma 18
    _close(vision["USD"]["hidden_overhead_total"], "10.226666666667")
    _close(vision["EUR"]["hidden_overhead_total"], "0.606666666667")


def test_unattributed_is_shown_and_totals_add_up(store_path: Path) -> None:
    jobs = _jobs(store_path)
    un = jobs[(UNATTRIBUTED, "USD")]
    assert un["team"] == UNATTRIBUTED
    _close(un["total_cost"], "-0.20")  # 0.50 + 0.30 + 1.00 - 2.00
    # ckpt-shared's GETs: no interruption of the unattributed row, so no restart window: ordinary checkpoint I/O
    _close(un["storage_reread_cost"], "0")
    _close(un["checkpoint_io_unlinked"], "0.30")
    assert un["recompute_cost_estimate"] is None
    with billing_audit.open(store_path) as store:
        rep = build_report(store, load_config(BUDGETS), "2026-11")
        store_totals = dict(store.con.execute(
            "SELECT BillingCurrency, sum(EffectiveCost) FROM line_items GROUP BY 1").fetchall())
    for row in rep.totals.iter_rows(named=True):
        assert row["total_cost"] == store_totals[row["currency"]]
        assert row["total_cost"] == sum(r["total_cost"] for r in jobs.values() if r["currency"] == row["currency"])
    usd = next(r for r in rep.totals.iter_rows(named=True) if r["currency"] == "USD")
    _close(usd["unattributed_cost"], "-0.20")
    _close(usd["restart_fees"], "0.91")


def test_resource_map_and_account_map(store_path: Path, tmp_path: Path) -> None:
    (tmp_path / "map.csv").write_text("resource,job,team\nckpt-sh*,Alpha,Vision\n")
    (tmp_path / "billing-audit.toml").write_text(
        '[attribution]\nresource_map = "map.csv"\n[attribution.account_teams]\n"444455557777" = "platform"\n')
    jobs = _jobs(store_path, load_config(tmp_path / "billing-audit.toml"))
    # the mapped bucket's 0.30 is at hour 40, alpha's restarts at hour 2: outside its window (hours 2-5), unlinked
    _close(jobs[("alpha", "USD")]["storage_reread_cost"], "0.40")
    _close(jobs[("alpha", "USD")]["checkpoint_io_unlinked"], "0.30")
    un = jobs[(UNATTRIBUTED, "USD")]
    assert un["team"] == "platform"  # the usage account's team
    _close(un["total_cost"], "-0.50")


def test_daily_rows(store_path: Path) -> None:
    with billing_audit.open(store_path) as store:
        rep = build_report(store, load_config(BUDGETS), "2026-11")
    daily = {(r["job"], r["currency"], str(r["day"])): r for r in rep.daily.iter_rows(named=True)}
    assert daily[("alpha", "USD", "2026-11-01")]["interruptions"] == 2
    _close(daily[("alpha", "USD", "2026-11-01")]["overhead"], "2.56")  # fee + GETs + egress
    assert daily[("delta", "USD", "2026-11-02")]["interruptions"] == 3
    assert daily[("alpha", "EUR", "2026-11-02")]["interruptions"] == 2
    assert daily[("alpha", "EUR", "2026-11-01")]["interruptions"] == 0


def test_cost_basis_changes_the_components_never_the_savings(store_path: Path) -> None:
    """--cost-basis list shows alpha's spot compute at its list cost (4 x 32.00 = 128.00) and its fees at list
    (0.16); savings stay effective spot cost against the on-demand equivalent: 128 - 40 = 88, and so the advice."""
    eff = _jobs(store_path)[("alpha", "USD")]
    with billing_audit.open(store_path) as store:
        rep = build_report(store, load_config(BUDGETS), "2026-11", cost_basis="list")
    a = {(r["job"], r["currency"]): r for r in rep.jobs.iter_rows(named=True)}[("alpha", "USD")]
    _close(a["spot_compute_cost"], "128")
    _close(a["gross_spot_savings"], "88")
    _close(a["net_spot_savings"], str(eff["net_spot_savings"]))
    assert a["recommendation"] == eff["recommendation"] == "keep_spot"
    assert any("--cost-basis list: the components and totals are list cost" in w for w in rep.warnings)
    billed = _jobs(store_path, cost_basis="billed")[("alpha", "USD")]
    _close(billed["gross_spot_savings"], "88")


def test_json_shape_is_stable(store_path: Path) -> None:
    r = CliRunner().invoke(main, ["report", "--db", str(store_path), "--period", "2026-11", "--format", "json",
                                  "--config", str(BUDGETS)])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)  # warnings go to stderr
    assert list(data) == ["schema_version", "kind", "generated_at", "filters", "period", "cost_basis", "warnings",
                          "totals", "jobs", "teams", "daily", "fee_reconciliation"]
    assert (data["kind"], data["period"], data["cost_basis"]) == ("report", "2026-11", "effective")
    assert data["filters"] == {"period": "2026-11", "cost_basis": "effective", "engine": "duckdb"}
    for job in data["jobs"]:
        assert set(JOB_FIELDS) <= set(job)
        assert isinstance(job["reasons"], list)
    alpha = next(j for j in data["jobs"] if j["job"] == "alpha" and j["currency"] == "USD")
    # money exact, as decimal strings: idle 2 x 5/60 h x 10.00 = 1.666666666667 (to 12 places); overhead 0.16 +
    # 0.40 + 2.00 + recompute 2 x 0.25 h x 10.00 = 5.00 + 1.666666666667 = 9.226666666667; a count an integer
    assert alpha["hidden_overhead_total"] == "9.226666666667" and alpha["restart_idle_cost_estimate"] == "1.666666666667"
    assert alpha["interruptions"] == 2 and alpha["restart_fees"] == "0.16" and alpha["gross_spot_savings"] == "88.00"
    assert alpha["savings_eroded_pct"] == round(9.226666666667 / 88 * 100, 4)  # a percentage: a number, 4 places
    overheads = [Decimal(j["hidden_overhead_total"]) for j in data["jobs"]]
    assert overheads == sorted(overheads, reverse=True)


def test_export_by_team_csv_opens_in_a_spreadsheet(store_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "teams.csv"
    r = CliRunner().invoke(main, ["export", "--db", str(store_path), "--by", "team", "--format", "csv",
                                  "--out", str(out), "--period", "2026-11"])
    assert r.exit_code == 0, r.output
    raw = out.read_bytes()
    assert b"\r\n" in raw
    rows = list(csv.DictReader(raw.decode().splitlines()))
    vision = [row for row in rows if row["team"] == "vision"]
    assert {row["currency"] for row in vision} == {"USD", "EUR"}
    assert all(row["period"] == "2026-11" for row in rows)
    usd = next(row for row in vision if row["currency"] == "USD")
    assert usd["hidden_overhead_total"] == "10.2267" and usd["restart_fees"] == "0.1600"


def test_export_neutralises_formulas(tmp_path: Path) -> None:
    folder = tmp_path / "evil"
    folder.mkdir()
    src = (SCENARIOS / "aws-cur-csv/20261101-20261201/scenario-cur-1.csv").read_text()
    (folder / "evil.csv").write_text(src.replace(",alpha,", ",=HYPERLINK(\"http://x\"),").replace(",vision,", ",@SUM(A1),"))
    db = tmp_path / "e.duckdb"
    with billing_audit.open(db) as store:
        assert not store.ingest([folder]).errors
        store.tag()
    for fmt, name in (("csv", "t.csv"), ("json", "t.json"), ("parquet", "t.parquet")):
        r = CliRunner().invoke(main, ["export", "--db", str(db), "--by", "job", "--format", fmt,
                                      "--out", str(tmp_path / name)])
        assert r.exit_code == 0, r.output
    rows = list(csv.DictReader((tmp_path / "t.csv").read_text().splitlines()))
    jobs = {row["job"] for row in rows}
    assert "'=hyperlink(\"http://x\")" in jobs
    assert all(not v.startswith(("=", "+", "@")) for row in rows for v in row.values())
    # no spot line, so no on-demand price: savings not measured ("n/a"), never a loss of -0.30 (its overhead)
    assert [row["net_spot_savings"] for row in rows if row["job"] == "(unattributed)"] == ["n/a"]
    assert any(row["total_cost"].startswith("-") for row in rows)  # numbers keep their sign (the credit)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[attribution]\njob_keys = ['x']\n", "unknown key 'attribution.job_keys'"),
        ("[estimates]\nrestart_minutes = 'five'\n", "key 'estimates.restart_minutes'"),
        ("[budgets]\ninterruption_fees_per_job = -1\n", "key 'budgets.interruption_fees_per_job'"),
        ("[attribution]\nresource_map = 'nope.csv'\n", "attribution.resource_map"),
        ("[surprise]\n", "unknown key 'surprise'"),
        # a window beyond any real one (its start in microseconds would overflow): refused, not a traceback
        ("[estimates]\nrestart_window_hourly_periods = 1000000000000\n",
         "key 'estimates.restart_window_hourly_periods': Input should be less than or equal to 10000"),
        ('[estimates.jobs."x"]\nrestart_window_periods = 10001\n',
         "key 'estimates.jobs.x.restart_window_periods': Input should be less than or equal to 10000"),
        ("not toml at all = = =\n", "not a valid TOML file"),
    ],
)
def test_config_errors_name_the_key(tmp_path: Path, text: str, words: str) -> None:
    cfg = tmp_path / "billing-audit.toml"
    cfg.write_text(text)
    with pytest.raises(BillingAuditError) as e:
        load_config(cfg)
    assert words in str(e.value)


def test_per_job_estimate_overrides(store_path: Path, tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text('[estimates.jobs."alpha"]\ncheckpoint_interval_minutes = 60\n')
    a = _jobs(store_path, load_config(tmp_path / "c.toml"))[("alpha", "USD")]
    _close(a["recompute_cost_estimate"], "10.00")  # 2 x 30 min x 10.00
    (tmp_path / "off.toml").write_text("[estimates]\nenabled = false\n")
    a = _jobs(store_path, load_config(tmp_path / "off.toml"))[("alpha", "USD")]
    assert a["recompute_cost_estimate"] is None
    _close(a["hidden_overhead_total"], "2.56")


def test_report_before_tagging_says_what_to_do(tmp_path: Path) -> None:
    db = tmp_path / "untagged.duckdb"
    with billing_audit.open(db) as store:
        store.ingest([SCENARIOS])
    r = CliRunner().invoke(main, ["report", "--db", str(db)])
    assert r.exit_code == 2
    assert "billing-audit tag" in r.output


def test_audit_writes_all_four_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["audit", str(SCENARIOS), "--db", str(tmp_path / "a.duckdb"), "--out", str(out),
                                  "--config", str(BUDGETS), "--period", "2026-11"])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in out.iterdir()) == ["jobs.csv", "report.html", "report.json", "teams.csv"]
    data = json.loads((out / "report.json").read_text())
    assert {j["job"] for j in data["jobs"]} == {"alpha", "beta", "gamma", "delta", UNATTRIBUTED}
    assert "over budget" in r.output  # delta's fees: a flag, not a switch (spot still saves)
