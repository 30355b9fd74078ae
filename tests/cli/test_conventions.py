"""Conventions every command keeps: global options before or after the command, -q and --debug everywhere,
one spelling of a period and of a date, no escape codes under NO_COLOR or on a pipe, CSV with an optional BOM,
--save-rule never overwriting silently, and the JSON documents' envelope, money and counts."""

from __future__ import annotations

import csv
import io
import json
import os
import pty
import subprocess
import sys
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import click
import polars as pl
import pytest
from click.testing import CliRunner

import billing_audit
from billing_audit import inert
from billing_audit.cli import main
from billing_audit.errors import BillingAuditError
from support import FIXTURES, ROOT

CLI = [sys.executable, "-m", "billing_audit.cli"]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("conventions") / "s.duckdb"
    with billing_audit.open(path) as s:
        assert not s.ingest([FIXTURES]).errors
        s.tag()
    return path


def _run(*args: str) -> click.testing.Result:
    return CliRunner().invoke(main, list(args))


def _walk(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    """Every group and command under ``group`` (pull's subcommands are built when asked for)."""
    out: list[tuple[tuple[str, ...], click.Command]] = []
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None
        out.append(((*prefix, name), cmd))
        if isinstance(cmd, click.Group):
            out += _walk(cmd, (*prefix, name))
    return out


def _undated(doc: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in doc.items() if k != "generated_at"}


# -- global options -----------------------------------------------------------------------------------------------
def test_db_before_or_after_the_command(store: Path, tmp_path: Path) -> None:
    typo = tmp_path / "typo.duckdb"
    for args in (["--db", str(typo), "summary"], ["summary", "--db", str(typo)]):
        r = _run(*args)
        assert r.exit_code == 2 and f"no store at {typo}" in r.stderr, args
        assert not typo.exists()
    before = _run("--db", str(store), "summary", "--format", "json")
    after = _run("summary", "--format", "json", "--db", str(store))
    assert before.exit_code == after.exit_code == 0
    assert _undated(json.loads(before.stdout)) == _undated(json.loads(after.stdout))
    assert json.loads(before.stdout)["periods"]  # the real store, not an empty one
    # the one after the command wins over the one before it
    assert _run("--db", str(typo), "summary", "--db", str(store)).exit_code == 0


def test_db_after_the_command_wins_over_the_environment(store: Path, tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["--db", str(store), "summary"], env={"BILLING_AUDIT_DB": str(tmp_path / "env.duckdb")})
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["summary"], env={"BILLING_AUDIT_DB": str(tmp_path / "env.duckdb")})
    assert r.exit_code == 2 and "env.duckdb" in r.stderr


def test_every_command_and_group_takes_quiet_and_debug() -> None:
    seen = _walk(main)
    names = {" ".join(path) for path, _ in seen}
    assert {"rules", "rules list", "rules show", "rules test", "pull", "pull aws", "pull azure", "pull gcp",
            "summary", "search", "report", "export", "audit", "ingest", "tag", "explain", "validate"} <= names
    for path, cmd in seen:
        opts = {o for p in cmd.params for o in getattr(p, "opts", [])}
        assert {"--debug", "-q", "--quiet"} <= opts, path


def test_debug_before_or_after_the_command_shows_the_traceback(tmp_path: Path) -> None:
    missing = str(tmp_path / "none.duckdb")
    plain = _run("summary", "--db", missing)
    assert plain.exit_code == 2 and plain.stderr.startswith("error: no store at")
    for args in (["--debug", "summary", "--db", missing], ["summary", "--db", missing, "--debug"],
                 ["rules", "show", "NOPE999", "--debug"]):
        r = _run(*args)
        assert isinstance(r.exception, BillingAuditError), (args, r.output)


def test_quiet_before_or_after_the_command_drops_the_notes_only(store: Path) -> None:
    loud = _run("search", "egress", "--db", str(store), "--limit", "2")
    assert loud.exit_code == 0 and "searching for every word" in loud.stderr and "more groups matched" in loud.stderr
    for args in (["-q", "search", "egress", "--db", str(store), "--limit", "2"],
                 ["search", "egress", "--db", str(store), "--limit", "2", "--quiet"]):
        r = _run(*args)
        assert r.exit_code == 0
        assert "searching for every word" not in r.stderr
        assert "more groups matched" in r.stderr  # what the output leaves out is still said
        assert r.stdout == loud.stdout


def test_quiet_before_the_command_reaches_a_commands_own_quiet(tmp_path: Path) -> None:
    db = str(tmp_path / "q.duckdb")
    loud = _run("ingest", str(FIXTURES / "aws" / "cur-legacy-parquet"), "--db", db)
    assert loud.exit_code == 0 and "ingested" in loud.stderr
    quiet = _run("-q", "ingest", str(FIXTURES / "aws" / "cur-legacy-parquet"), "--db", str(tmp_path / "q2.duckdb"))
    assert quiet.exit_code == 0 and quiet.output == ""


# -- one spelling of a period and of a day ------------------------------------------------------------------------
@pytest.mark.parametrize(("flag", "value", "expected"), [
    ("--since", "2026-13-01", "error: --since '2026-13-01': expected YYYY-MM-DD, e.g. 2026-10-01"),
    ("--since", "2026-10-32", "error: --since '2026-10-32': expected YYYY-MM-DD, e.g. 2026-10-01"),
    ("--since", "01/10/2026", "error: --since '01/10/2026': expected YYYY-MM-DD, e.g. 2026-10-01"),
    ("--period", "2026-13", "error: --period '2026-13': expected YYYY-MM, e.g. 2026-10"),
])
def test_since_is_checked_like_period(store: Path, flag: str, value: str, expected: str) -> None:
    r = _run("search", "restart", "--db", str(store), flag, value)
    assert r.exit_code == 2
    assert r.stderr.strip() == expected


def test_since_narrows(store: Path) -> None:
    every = json.loads(_run("search", "restart", "--db", str(store), "--format", "json").stdout)
    later = json.loads(_run("search", "restart", "--db", str(store), "--format", "json", "--since", "2026-10-15").stdout)
    assert later["filters"]["since"] == "2026-10-15"
    assert 0 < later["matched"]["lines"] < every["matched"]["lines"]


def test_pull_gcp_takes_period_and_still_reads_month_with_a_note(tmp_path: Path) -> None:
    table = "proj.billing.gcp_billing_export_v1_0123"
    help_text = _run("pull", "gcp", "--help").stdout
    assert "--period YYYY-MM" in help_text and "--month" not in help_text
    r = _run("pull", "gcp", "--table", table, "--period", "2026-13", "--db", str(tmp_path / "p.duckdb"))
    assert r.exit_code == 2 and "--period '2026-13': expected YYYY-MM" in r.stderr and "deprecated" not in r.stderr
    old = _run("pull", "gcp", "--table", table, "--month", "202613", "--db", str(tmp_path / "p.duckdb"))
    assert old.exit_code == 2
    assert "note: --month is deprecated; use --period" in old.stderr
    assert "--period '202613': expected YYYY-MM" in old.stderr  # the old flag's value went where --period's goes
    none = _run("pull", "gcp", "--table", table)
    assert none.exit_code == 2 and "Missing option '--period'" in none.stderr
    assert not (tmp_path / "p.duckdb").exists()


# -- plain text: NO_COLOR and pipes -------------------------------------------------------------------------------
def _in_terminal(args: list[str], env: dict[str, str]) -> bytes:
    """What the command writes to a real terminal (a pseudo-terminal), stdout and stderr together."""
    master, slave = pty.openpty()
    full = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    full.update({"TERM": "xterm-256color", "COLUMNS": "200", **env})
    p = subprocess.Popen([*CLI, *args], stdout=slave, stderr=slave, env=full, cwd=ROOT)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert p.wait(timeout=120) == 0
    return b"".join(chunks)


@pytest.mark.parametrize("args", [["rules", "list"], ["summary"], ["search", "egress"]])
def test_no_color_gives_plain_text_on_a_terminal(store: Path, args: list[str]) -> None:
    cmd = [*args, "--db", str(store)] if args[0] != "rules" else args
    styled = _in_terminal(cmd, {})
    assert b"\x1b[" in styled  # a terminal gets bold headers and colours ...
    plain = _in_terminal(cmd, {"NO_COLOR": "1"})
    assert b"\x1b" not in plain  # ... but not under NO_COLOR: no escape code of any kind
    assert b"egress" in plain or b"BA001" in plain or b"line items in the store" in plain


def test_a_pipe_gets_no_escape_codes(store: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    for args in (["summary", "--db", str(store)], ["rules", "list"], ["search", "egress", "--db", str(store)]):
        p = subprocess.run([*CLI, *args], capture_output=True, env=env, cwd=ROOT, timeout=120, check=False)
        assert p.returncode == 0, p.stderr
        assert p.stdout and b"\x1b" not in p.stdout and b"\x1b" not in p.stderr, args


# -- CSV with a byte order mark -----------------------------------------------------------------------------------
def test_csv_bom_keeps_formula_neutralising() -> None:
    df = pl.DataFrame({"team": ["=HYPERLINK(\"x\")", "ml"], "cost": [Decimal("1.50"), Decimal("2")]})
    plain = inert.csv_text(df)
    marked = inert.csv_text(df, bom=True)
    assert not plain.startswith(inert.BOM)
    assert marked == inert.BOM + plain
    assert marked.encode("utf-8")[:3] == b"\xef\xbb\xbf"
    rows = list(csv.reader(io.StringIO(marked.removeprefix(inert.BOM))))
    assert rows == [["team", "cost"], ["'=HYPERLINK(\"x\")", "1.5000"], ["ml", "2.0000"]]
    with inert.csv_bom():
        assert inert.csv_text(df) == marked
    assert inert.csv_text(df) == plain  # the scope ends with the block


@pytest.mark.parametrize("args", [["summary", "--format", "csv"], ["rules", "list", "--format", "csv"],
                                  ["search", "egress", "--format", "csv"]])
def test_bom_on_the_commands_that_print_csv(store: Path, args: list[str]) -> None:
    full = [*args, "--db", str(store)] if args[0] != "rules" else args
    plain, marked = _run(*full), _run(*full, "--bom")
    assert plain.exit_code == marked.exit_code == 0
    assert not plain.stdout.startswith(inert.BOM)
    assert marked.stdout == inert.BOM + plain.stdout


def test_export_bom_file(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "teams.csv"
    r = _run("export", "--db", str(store), "--format", "csv", "--out", str(out), "--bom")
    assert r.exit_code == 0, r.output
    data = out.read_bytes()
    assert data.startswith(b"\xef\xbb\xbf") and not data[3:].startswith(b"\xef\xbb\xbf")
    again = tmp_path / "plain.csv"
    assert _run("export", "--db", str(store), "--format", "csv", "--out", str(again)).exit_code == 0
    assert data[3:] == again.read_bytes()
    parquet = tmp_path / "t.parquet"  # not CSV: no mark
    assert _run("export", "--db", str(store), "--format", "parquet", "--out", str(parquet), "--bom").exit_code == 0
    assert parquet.read_bytes()[:4] == b"PAR1"


# -- --save-rule never overwrites silently ------------------------------------------------------------------------
def test_save_rule_refuses_an_existing_file_unless_force(store: Path, tmp_path: Path) -> None:
    rule = tmp_path / "SR100_spot_restart.sql"
    rule.write_text("-- mine\n", encoding="utf-8")
    r = _run("search", "spot restart", "--db", str(store), "--save-rule", str(rule))
    assert r.exit_code == 2
    assert r.stderr.strip() == (f"error: --save-rule {rule}: the file exists; give --force to overwrite it "
                                "(nothing was written)")
    assert r.stdout == ""  # refused before searching
    assert rule.read_text(encoding="utf-8") == "-- mine\n"
    forced = _run("search", "spot restart", "--db", str(store), "--save-rule", str(rule), "--force")
    assert forced.exit_code == 0, forced.output
    assert "id: SR100" in rule.read_text(encoding="utf-8")
    fresh = tmp_path / "SR101_x.sql"  # a new file needs no --force
    assert _run("search", "spot restart", "--db", str(store), "--save-rule", str(fresh)).exit_code == 0
    assert fresh.exists()


# -- JSON documents -----------------------------------------------------------------------------------------------
def _doc(*args: str) -> dict[str, object]:
    r = _run(*args, "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert isinstance(doc, dict)
    assert doc["schema_version"] == 1 and isinstance(doc["kind"], str)
    generated = datetime.fromisoformat(str(doc["generated_at"]).replace("Z", "+00:00"))
    assert generated.tzinfo is not None and abs((datetime.now(generated.tzinfo) - generated).total_seconds()) < 300
    return doc


def test_every_json_document_has_the_envelope(store: Path) -> None:
    line_id = json.loads(_run("search", "restart", "--db", str(store), "--lines", "--format", "json").stdout)["lines"][0]["x_LineItemId"]
    docs = {
        "summary": _doc("summary", "--db", str(store)),
        "search": _doc("search", "egress", "--db", str(store)),
        "rules": _doc("rules", "list"),
        "rule": _doc("rules", "show", "BA010"),
        "validate": _doc("validate", str(FIXTURES / "gcp")),
        "explain": _doc("explain", line_id, "--db", str(store)),
        "report": _doc("report", "--db", str(store), "--period", "2026-10"),
    }
    for kind, doc in docs.items():
        assert doc["kind"] == kind
        assert list(doc)[:3] == ["schema_version", "kind", "generated_at"]
    assert docs["explain"]["filters"] == {"line_item_id": line_id}
    assert isinstance(docs["explain"]["line"]["BilledCost"], str)  # type: ignore[index]
    assert docs["report"]["filters"] == {"period": "2026-10", "cost_basis": "effective", "engine": "duckdb"}
    assert all(isinstance(j["hidden_overhead_total"], str) and type(j["interruptions"]) is int
               for j in docs["report"]["jobs"])  # type: ignore[attr-defined]


def test_rules_list_gives_providers_as_a_list(store: Path) -> None:
    doc = _doc("rules", "list")
    ba010 = next(r for r in doc["rules"] if r["id"] == "BA010")  # type: ignore[attr-defined]
    assert ba010["providers"] == ["aws", "azure", "gcp"]
    shown = _doc("rules", "show", "BA010")["rule"]
    assert shown["providers"] == ["aws", "azure", "gcp"] and "select" in shown["sql"].lower()  # type: ignore[index]


def test_search_json_money_counts_filters_and_what_limit_left_out(store: Path) -> None:
    every = _doc("search", "egress", "--db", str(store), "--limit", "1000")
    one = _doc("search", "egress", "--db", str(store), "--limit", "1", "--provider", "azure")
    assert one["filters"] == {"period": None, "since": None, "provider": "azure", "exact": False, "lines": False}
    azure_groups = [g for g in every["groups"] if g["provider"] == "azure"]  # type: ignore[attr-defined]
    assert one["matched"] == {"groups": len(azure_groups), "lines": sum(g["lines"] for g in azure_groups)}
    assert one["left_out"] == {"groups": len(azure_groups) - 1} and len(one["groups"]) == 1  # type: ignore[arg-type]
    assert every["left_out"] == {"groups": 0}
    for g in every["groups"]:  # type: ignore[attr-defined]
        assert isinstance(g["lines"], int) and isinstance(g["total_cost"], str) and isinstance(g["accounts"], list)
    for t in every["totals"]:  # type: ignore[attr-defined]
        cents = sum(Decimal(g["total_cost"]) for g in every["groups"] if g["currency"] == t["currency"])  # type: ignore[attr-defined]
        assert Decimal(t["total_cost"]) == cents and isinstance(t["lines"], int)
    lines = _doc("search", "egress", "--db", str(store), "--lines", "--limit", "3")
    assert lines["left_out"]["lines"] == lines["matched"]["lines"] - 3  # type: ignore[index]


# -- summary ------------------------------------------------------------------------------------------------------
def test_summary_period_provider_totals_as_of_and_owners(store: Path) -> None:
    doc = _doc("summary", "--db", str(store), "--period", "2026-10", "--provider", "gcp")
    assert doc["filters"] == {"period": "2026-10", "provider": "gcp"}
    periods, totals, owners = doc["periods"], doc["totals"], doc["owners"]
    assert {(p["provider"], p["period"]) for p in periods} == {("gcp", "2026-10")}  # type: ignore[attr-defined]
    # per currency, never across currencies: the period rows add up to each currency's total
    assert [t["currency"] for t in totals] == ["EUR", "USD"]  # type: ignore[attr-defined]
    for t in totals:  # type: ignore[attr-defined]
        rows = [p for p in periods if p["currency"] == t["currency"]]  # type: ignore[attr-defined]
        assert t["lines"] == sum(p["lines"] for p in rows) and isinstance(t["lines"], int)
        for c in ("billed_cost", "effective_cost", "list_cost"):
            assert Decimal(t[c]) == sum(Decimal(p[c]) for p in rows)
    # which delivery owns each period, and the newest of their export times is the as-of time
    assert owners and {o["provider"] for o in owners} == {"gcp"}  # type: ignore[attr-defined]
    assert sum(o["lines"] for o in owners) == sum(p["lines"] for p in periods)  # type: ignore[attr-defined]
    assert doc["as_of"] == max(o["dated"] for o in owners)  # type: ignore[attr-defined]
    # fixtures/gcp/reexport: the later extract is dated by its folder, 20261105T060000Z (gen_gcp.py)
    assert doc["as_of"] == "2026-11-05T06:00:00"
    table = _run("summary", "--db", str(store), "--period", "2026-10", "--provider", "gcp")
    assert "data as of 2026-11-05 06:00:00" in table.stdout and "totals per currency" in table.stdout
    empty = _doc("summary", "--db", str(store), "--period", "2019-01")
    assert empty["periods"] == [] and empty["totals"] == [] and empty["as_of"] is None
    bad = _run("summary", "--db", str(store), "--provider", "oracle")
    assert bad.exit_code == 2
