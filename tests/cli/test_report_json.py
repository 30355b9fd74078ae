"""The report as a JSON document (issue #18, "JSON for machines"), `report --by account`, and two conventions of
every command: a --db before a command that uses no store is said to be ignored, and -q leaves out every note.

The store is the scenarios-months fixture (fixtures/gen_scenarios.py ``months_rows``; the figures are worked out
in tests/core/test_report_months.py).  February 2027:

- pi (nlp, AWS USD): 3 restarts (fee lines, 0.30), 4 spot hours at 4.00 (list 10.00): 16.00 against 40.00 on
  demand, gross savings 24.00; GETs 0.30 in a restart window; recompute 3 x 0.25 h x 4.00 = 3.00, idle
  3 x 5/60 h x 4.00 = 1.00; overhead 0.30 + 0.30 + 4.00 = 4.60, net 19.40, erosion 4.60 / 24.00 = 19.1667 %.
  Its lines are billed under two payers: 444455556666 (2 restarts, fee 0.20) and 777788889999 (1 restart, fee
  0.10, the GETs 0.30), the estimates shared 2:1: overhead 2.866666666667 and 1.733333333333, savings 12.00 each.
- mu (vision, AWS USD, payer 444455556666): 3 spot hours at 10.00 (30.00 against 96.00, savings 66.00), no restart
  in February; GETs 0.50 and egress 2.00 in the window of January's last-hour restart (overhead 2.50), GETs 0.90
  outside every window (unlinked).
- rho and sigma (speech, Azure EA 33445566, EUR): spot with no on-demand price (savings n/a), fees 0.14,
  overhead 0.606666666666.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import click.testing
import pytest
from click.testing import CliRunner

import billing_audit
from billing_audit.cli import main
from billing_audit.report import MONEY_FIELDS
from support import FIXTURES, ROOT, report_body

MONTHS = FIXTURES / "scenarios-months"
MONEY = {*MONEY_FIELDS, "total_cost", "spot_hourly_cost", "spot_unpriced_cost", "spot_cost_priced",
         "unattributed_cost", "overhead", "spot_cost", "on_demand_cost"}
COUNTS = {"interruptions", "lines", "jobs"}
NUMBERS = {"savings_eroded_pct", "savings_coverage_pct", "spot_hours"}  # a percentage or hours: a JSON number


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("report-json") / "m.duckdb"
    with billing_audit.open(path) as s:
        assert not s.ingest([MONTHS]).errors
        s.tag()
    return path


def _run(*args: str, columns: int = 200) -> click.testing.Result:
    return CliRunner().invoke(main, list(args), env={"COLUMNS": str(columns), "NO_COLOR": "1"})


def _doc(store: Path, *args: str) -> dict[str, Any]:
    r = _run("report", "--db", str(store), "--format", "json", *args)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert isinstance(doc, dict)
    return doc


def _check_types(doc: dict[str, Any]) -> int:
    """Every value of every row: money an exact decimal string with at least two decimals (or null: n/a), a count
    an integer, a percentage or hours a number; no float anywhere else.  Returns how many values were checked."""
    checked = 0
    for key in ("totals", "jobs", "teams", "daily"):
        for row in doc[key]:
            for k, v in row.items():
                checked += 1
                if k in MONEY:
                    assert v is None or (isinstance(v, str) and re.fullmatch(r"-?\d+\.\d{2,}", v)), (key, k, v)
                elif k in COUNTS:
                    assert type(v) is int, (key, k, v)
                elif k in NUMBERS:
                    assert v is None or isinstance(v, int | float) and not isinstance(v, bool), (key, k, v)
                else:
                    assert not isinstance(v, float), (key, k, v)
    return checked


def test_the_report_json_has_the_envelope_exact_money_and_integer_counts(store: Path) -> None:
    doc = _doc(store, "--period", "2027-02")
    assert list(doc) == ["schema_version", "kind", "generated_at", "filters", "period", "cost_basis", "warnings",
                         "totals", "jobs", "teams", "daily", "fee_reconciliation"]
    assert (doc["schema_version"], doc["kind"], doc["period"], doc["cost_basis"]) == (1, "report", "2027-02",
                                                                                     "effective")
    assert doc["filters"] == {"period": "2027-02", "cost_basis": "effective", "engine": "duckdb"}
    generated = datetime.fromisoformat(doc["generated_at"].replace("Z", "+00:00"))
    assert doc["generated_at"].endswith("Z") and abs((datetime.now(UTC) - generated).total_seconds()) < 300
    assert _check_types(doc) > 100
    pi = next(j for j in doc["jobs"] if j["job"] == "pi")
    assert {k: pi[k] for k in ("interruptions", "interruptions_source", "lines")} == {
        "interruptions": 3, "interruptions_source": "fee_lines", "lines": 7}
    assert {k: pi[k] for k in ("restart_fees", "storage_reread_cost", "recompute_cost_estimate",
                               "restart_idle_cost_estimate", "hidden_overhead_total", "spot_compute_cost",
                               "on_demand_equivalent_cost", "gross_spot_savings", "net_spot_savings",
                               "spot_hourly_cost", "total_cost")} == {
        "restart_fees": "0.30", "storage_reread_cost": "0.30", "recompute_cost_estimate": "3.00",
        "restart_idle_cost_estimate": "1.00", "hidden_overhead_total": "4.60", "spot_compute_cost": "16.00",
        "on_demand_equivalent_cost": "40.00", "gross_spot_savings": "24.00", "net_spot_savings": "19.40",
        "spot_hourly_cost": "4.00", "total_cost": "16.60"}
    assert (pi["savings_eroded_pct"], pi["spot_hours"]) == (19.1667, 4.0)
    # the EUR spot lines have no on-demand price: n/a (null), never 0; the warning says so, and what to run
    eur = next(t for t in doc["totals"] if t["currency"] == "EUR")
    assert (eur["gross_spot_savings"], eur["net_spot_savings"], eur["savings_eroded_pct"]) == (None, None, None)
    assert (eur["savings_coverage_pct"], eur["spot_unpriced_cost"], eur["interruptions"]) == (0.0, "25.20", 2)
    assert eur["hidden_overhead_total"] == "0.606666666666"  # exact: 0.14 + 0.35 + 0.116666666666, never rounded
    assert any(w.startswith("savings measured for 0% of EUR spot cost") for w in doc["warnings"])
    reasons = [j["reasons"] for j in doc["jobs"] if j["currency"] == "EUR" and j["gross_spot_savings"] is None]
    assert reasons and all(any("cannot be measured" in r for r in rs) for rs in reasons)  # n/a with its reason
    # daily rows too: pi's day, 3 restarts (an integer) and 0.60 of billed overhead
    day = next(d for d in doc["daily"] if d["job"] == "pi")
    assert (day["day"], day["interruptions"], day["overhead"], day["spike"]) == ("2027-02-05", 3, "0.60", False)
    usd_team = next(t for t in doc["teams"] if (t["team"], t["currency"]) == ("nlp", "USD"))
    assert (usd_team["jobs"], usd_team["hidden_overhead_total"]) == (1, "4.60")


def test_every_period_the_audit_file_and_the_api_give_the_same_document(store: Path, tmp_path: Path) -> None:
    every = _doc(store)
    assert every["filters"] == {"period": None, "cost_basis": "effective", "engine": "duckdb"}
    assert every["period"] == "all" and _check_types(every) > 100
    mu = next(j for j in every["jobs"] if j["job"] == "mu")  # January's 0.12 fee and 0.30 GETs, February's 2.50
    assert (mu["interruptions"], mu["restart_fees"], mu["billed_interruption_overhead"]) == (1, "0.12", "2.92")
    billed = _doc(store, "--cost-basis", "billed", "--period", "2027-02")
    assert billed["filters"] == {"period": "2027-02", "cost_basis": "billed", "engine": "duckdb"}
    with billing_audit.open(store, read_only=True) as s:
        api = s.report().to_dict()
    assert report_body(api) == report_body(every) and api["filters"] == every["filters"]
    out = tmp_path / "audit"
    r = _run("audit", str(MONTHS), "--db", str(tmp_path / "a.duckdb"), "--out", str(out), "-q")
    assert r.exit_code == 0, r.output
    audited = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert audited["kind"] == "report" and report_body(audited) == report_body(every)


def _readme_example() -> dict[str, Any]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("**The report's JSON**")
    block = readme[readme.index("```json\n", start) + len("```json\n"):]
    return json.loads(block[:block.index("```")])  # type: ignore[no-any-return]


def test_the_readmes_report_json_example_is_a_real_document(store: Path) -> None:
    """The README's example is `report --period 2027-02 --format json` on this store: the same keys in the same
    order, each row it shows one of the document's rows, whole."""
    shown, real = _readme_example(), _doc(store, "--period", "2027-02")
    assert list(shown) == list(real)
    for key, value in shown.items():
        if key == "generated_at":
            continue
        if isinstance(value, list) and key != "warnings":
            assert value, key
            for row in value:
                assert row in real[key], (key, row)
                assert list(row) == list(real[key][0]), key  # every field, in the document's order
        else:
            assert value == real[key], key


def test_report_by_account(store: Path) -> None:
    """February by billing account (the figures above): 444455556666 holds pi's first part and mu: overhead
    2.866666666667 + 2.50 = 5.37, savings 12.00 + 66.00 = 78.00, erosion 5.366666666667 / 78 = 6.9 %, fees 0.20,
    spot 8.00 + 30.00 = 38.00, net 9.133333333333 + 63.50 = 72.63, unlinked 0.90; 777788889999 pi's second part:
    1.73, 14.4 %, 0.10, 8.00, 12.00, 10.27; 33445566 the EUR jobs, savings n/a.  USD: 5.366666666667 +
    1.733333333333 = 7.10, the report's total."""
    r = _run("report", "--db", str(store), "--period", "2027-02", "--by", "account")
    assert r.exit_code == 0, r.output
    lines = [[c.strip() for c in line.strip("│").split("│")] for line in r.stdout.splitlines() if line.startswith("│")]
    head = next(line for line in r.stdout.splitlines() if line.startswith("┃"))
    assert [c.strip() for c in head.strip("┃").split("┃")] == [
        "billing account", "provider", "currency", "overhead", "erosion %", "restart fees", "spot cost",
        "gross savings", "net savings", "unlinked checkpoint I/O"]
    assert lines[:3] == [
        ["444455556666", "aws", "USD", "5.37", "6.9", "0.20", "38.00", "78.00", "72.63", "0.90"],
        ["777788889999", "aws", "USD", "1.73", "14.4", "0.10", "8.00", "12.00", "10.27", "0.00"],
        ["33445566", "azure", "EUR", "0.61", "n/a", "0.14", "25.20", "n/a", "n/a", "0.00"]]
    assert r.stdout.startswith("Interruption overhead by billing account, 2027-02 (effective cost)")
    assert lines[4][:4] == ["USD", "7.10", "7.9", "0.30"]  # the totals table: 7.10 / 90.00 = 7.9 %


def test_a_db_before_a_command_that_uses_no_store_is_said_to_be_ignored(tmp_path: Path) -> None:
    """`billing-audit --db x.duckdb rules list`: a note on stderr (left out by -q), the command's own output, exit
    0, and no store created.  A command that uses a store reads that --db (and says nothing)."""
    db = tmp_path / "x.duckdb"
    plain = _run("rules", "list", "--format", "json")
    for args in (["rules", "list", "--format", "json"], ["rules", "show", "BA010", "--format", "json"],
                 ["validate", str(FIXTURES / "gcp"), "--format", "json"]):
        r = _run("--db", str(db), *args)
        assert r.exit_code == 0, r.output
        path = " ".join(["billing-audit", *args[:2 if args[0] == "rules" else 1]])
        assert r.stderr == f"note: --db {db} is ignored: `{path}` uses no store\n", r.stderr
        quiet = _run("-q", "--db", str(db), *args)
        assert quiet.exit_code == 0 and quiet.stderr == ""
        assert json.loads(quiet.stdout).keys() == json.loads(r.stdout).keys()
        assert not db.exists()
    assert json.loads(_run("--db", str(db), "rules", "list", "--format", "json").stdout)["rules"] == json.loads(
        plain.stdout)["rules"]
    used = _run("--db", str(db), "summary")  # a command that reads a store: no note, the store's own error
    assert used.exit_code == 2 and used.stderr == f"error: no store at {db}: run `billing-audit ingest` first\n"


@pytest.mark.parametrize("where", ["before", "after"])
def test_quiet_leaves_out_every_note(store: Path, tmp_path: Path, where: str) -> None:
    """-q (before or after the command) leaves out the notes of report, export, audit and prices ingest
    ("wrote FILE", the summary line): warnings and what was replaced stay."""
    def run(*args: str, quiet: bool) -> click.testing.Result:
        argv = list(args) + (["-q"] if quiet and where == "after" else [])
        r = _run(*(["-q", *argv] if quiet and where == "before" else argv))
        assert r.exit_code == 0, r.output
        return r

    warning = "warning: savings measured for 0% of EUR spot cost"
    out = tmp_path / "r.json"
    loud = run("report", "--db", str(store), "--period", "2027-02", "--format", "json", "--out", str(out), quiet=False)
    assert f"wrote {out}\n" in loud.stderr and warning in loud.stderr
    quiet = run("report", "--db", str(store), "--period", "2027-02", "--format", "json", "--out", str(out), quiet=True)
    assert "wrote" not in quiet.stderr and warning in quiet.stderr
    assert all(line.startswith("warning: ") for line in quiet.stderr.splitlines())

    csv = tmp_path / "t.csv"
    loud = run("export", "--db", str(store), "--out", str(csv), quiet=False)
    assert loud.stderr.startswith(f"wrote {csv} (")
    assert run("export", "--db", str(store), "--out", str(csv), quiet=True).stderr == ""

    folder = tmp_path / f"audit-{where}"
    loud = run("audit", str(MONTHS), "--db", str(tmp_path / f"a-{where}.duckdb"), "--out", str(folder), quiet=False)
    assert f"wrote {folder}/report.html, report.json, jobs.csv, teams.csv" in loud.stderr
    quiet = run("audit", str(MONTHS), "--db", str(tmp_path / f"b-{where}.duckdb"), "--out", str(folder), quiet=True)
    assert "wrote" not in quiet.stderr and "file(s) ingested" not in quiet.stderr and warning in quiet.stderr
    assert quiet.stdout == ""  # -q: no table either

    prices = FIXTURES / "prices" / "aws"
    db = tmp_path / f"p-{where}.duckdb"
    loud = run("prices", "ingest", str(prices), "--db", str(db), quiet=False)
    assert "price file(s) read" in loud.stderr and "note: " in loud.stderr  # a reference replaced: always said
    again = tmp_path / f"q-{where}.duckdb"
    quiet = run("prices", "ingest", str(prices), "--db", str(again), quiet=True)
    assert "price file(s) read" not in quiet.stderr
    assert [line for line in quiet.stderr.splitlines() if line.startswith("note: ")] == [
        line for line in loud.stderr.splitlines() if line.startswith("note: ")]


def test_money_in_the_finance_export_json_is_exact_too(store: Path) -> None:
    """export --format json: a list of rows (as the CSV and parquet files), money as exact decimal strings."""
    r = _run("export", "--db", str(store), "--period", "2027-02", "--by", "team,account", "--format", "json",
             "--out", "-")
    assert r.exit_code == 0, r.output
    rows = {(x["team"], x["billing_account"]): x for x in json.loads(r.stdout)}
    a, b = rows[("nlp", "444455556666")], rows[("nlp", "777788889999")]
    assert (a["interruptions"], a["hidden_overhead_total"], a["total_cost"]) == (2, "2.866666666667", "8.20")
    assert (b["interruptions"], b["hidden_overhead_total"], b["net_spot_savings"]) == (1, "1.733333333333",
                                                                                       "10.266666666667")
    assert Decimal(a["hidden_overhead_total"]) + Decimal(b["hidden_overhead_total"]) == Decimal("4.60")


def test_rows_of_one_job_on_two_teams_keep_the_team_column_when_narrow(store: Path) -> None:
    """The table layout (billing_audit.report_table) on February's report with pi's row also under a second team
    (as when a job's lines carry two team tags across a re-tag), 70 columns wide (the job names here are short:
    at 80 everything but the low-priority columns fits): the team column stays and restart fees go, so the two
    pi rows read apart; without the twin the team column goes, as before."""
    import io

    import polars as pl
    from rich.console import Console

    from billing_audit.config import Config
    from billing_audit.report import build_report
    from billing_audit.report_table import render

    def text(rep: Any) -> str:
        console = Console(width=70, record=True, file=io.StringIO(), color_system=None)
        for part in render([rep], "job", 15, 70):
            console.print(part)
        return console.export_text()

    with billing_audit.open(store, read_only=True) as s:
        rep = build_report(s, Config(), "2027-02")
    alone = text(rep)
    assert "team" not in next(line for line in alone.splitlines() if line.startswith("┃"))
    pi = rep.jobs.filter(pl.col("job") == "pi")
    rep.jobs = pl.concat([rep.jobs, pi.with_columns(pl.lit("speech").alias("team"))])
    twins = text(rep)
    head = [c.strip() for c in next(line for line in twins.splitlines() if line.startswith("┃")).strip("┃").split("┃")]
    assert head == ["job", "team", "currency", "overhead", "erosion %", "spot cost"]
    rows = [[c.strip() for c in line.strip("│").split("│")] for line in twins.splitlines() if line.startswith("│")]
    assert ["pi", "nlp", "USD", "4.60"] in [r[:4] for r in rows] and ["pi", "speech", "USD", "4.60"] in [
        r[:4] for r in rows]


def test_rules_fired_are_read_for_the_html_only(store: Path, tmp_path: Path) -> None:
    """The rules fired (only the HTML shows them; they read every rule hit of the store) are left out of the other
    formats: the JSON is the API's document built with them, and the HTML still has the rules table."""
    from billing_audit import outputs
    from billing_audit.config import load_config
    from billing_audit.report import build_report

    with billing_audit.open(store, read_only=True) as s:
        full = build_report(s, load_config(None), "2027-01")
        lean = build_report(s, load_config(None), "2027-01", rules_fired=False)
    assert lean.rules_fired is None
    assert full.rules_fired is not None and full.rules_fired.height > 0
    docs = [json.loads(outputs.report_json(r)) for r in (full, lean)]
    for d in docs:
        d.pop("generated_at")
    assert docs[0] == docs[1]
    cli = _doc(store, "--period", "2027-01")
    cli.pop("generated_at")
    assert cli == docs[0]
    html = tmp_path / "r.html"
    r = _run("report", "--db", str(store), "--period", "2027-01", "--format", "html", "--out", str(html))
    assert r.exit_code == 0, r.output
    text = html.read_text()
    assert '<table id="rules">' in text and "rules-missing" not in text
    assert all(rule in text for rule in full.rules_fired["rule_id"].to_list())
