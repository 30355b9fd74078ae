"""The terminal table of `report` / `audit` (issue #18, "a report that reads at a glance"): the rows that matter
first, one (unattributed) row per currency with a pointer to the resource map, --top/--all/--by, a period
column over several periods, the totals leading with overhead, erosion, restart fees and coverage, and every
amount of the JSON report shown in full at 80 and at 200 columns."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from decimal import Decimal
from typing import Any

import pytest

from support import FIXTURES

CLI = [sys.executable, "-m", "billing_audit.cli"]
UN = "(unattributed)"
BOX = ("┏", "┃", "┡", "│", "└")


def run(*args: str, columns: int = 200) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": str(columns)}
    env.pop("NO_COLOR", None)
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=env, timeout=180)


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    tmp = tmp_path_factory.mktemp("table")
    path = tmp / "s.duckdb"
    r = run("audit", str(FIXTURES), "--db", str(path), "--out", str(tmp / "out"), "-q")
    assert r.returncode in (0, 2), r.stderr  # a fixture built to fail ingest makes it 2; the rest is audited
    assert path.exists()
    return str(path)


def report_json(db: str, *args: str) -> dict[str, Any]:
    r = run("report", "--db", db, "--format", "json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def table(db: str, *args: str, columns: int = 200) -> str:
    r = run("report", "--db", db, *args, columns=columns)
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout  # a pipe: plain text
    return r.stdout


def money(v: Any) -> str:
    return "n/a" if v is None else f"{Decimal(str(v)):,.2f}"


def pct(v: Any) -> str:
    return "n/a" if v is None else f"{Decimal(str(v)):.1f}"


def num(v: Any) -> Decimal:
    return Decimal(0) if v is None else Decimal(str(v))


def expected_rows(rows: list[dict[str, Any]], key: str = "job") -> tuple[list[dict[str, Any]], int, int]:
    """By hand: (the rows with overhead or spot cost, biggest overhead first; how many of the rest have neither;
    how many unattributed rows there are)."""
    rest = [r for r in rows if r[key] != UN]
    active = [r for r in rest if num(r["hidden_overhead_total"]) != 0 or num(r["spot_compute_cost"]) != 0]
    active.sort(key=lambda r: (-num(r["hidden_overhead_total"]), -num(r["spot_compute_cost"])))
    return active, len(rest) - len(active), len(rows) - len(rest)


def has_row(text: str, *cells: str) -> bool:
    """A table line holding these cells, in this order."""
    for line in text.splitlines():
        if not line.startswith("│"):
            continue
        parts = [p.strip() for p in line.strip("│").split("│")]
        i = 0
        for p in parts:
            if i < len(cells) and p == cells[i]:
                i += 1
        if i == len(cells):
            return True
    return False


def body_lines(text: str, title: str) -> list[str]:
    """The row lines of the table titled `title`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    out = []
    for line in lines[start + 1:]:
        if line.startswith("└"):
            break
        if line.startswith("│"):
            out.append(line)
    return out


@pytest.mark.parametrize("columns", [80, 200])
def test_every_amount_of_the_shown_rows_in_full(db: str, columns: int) -> None:
    doc = report_json(db, "--period", "2026-10")
    text = table(db, "--period", "2026-10", columns=columns)
    assert "…" not in text
    for line in text.splitlines():
        if line.startswith(BOX):
            assert len(line) <= columns, line
    active, _, _ = expected_rows(doc["jobs"])
    assert len(active) > 15
    for r in active[:15]:
        # at 80 columns restart fees go (the provider stays: resnet-sweep-7 runs on aws and azure, in USD)
        cells = [r["job"], r["provider"], r["currency"], money(r["hidden_overhead_total"]),
                 pct(r["savings_eroded_pct"]), money(r["spot_compute_cost"])]
        if columns == 200:
            cells = [r["job"], r["team"], r["provider"], r["currency"], money(r["hidden_overhead_total"]),
                     pct(r["savings_eroded_pct"]), money(r["restart_fees"]), money(r["spot_compute_cost"]),
                     money(r["gross_spot_savings"]), money(r["net_spot_savings"])]
        assert has_row(text, *cells), (cells, text)
    # headers in words, none of the old jargon
    head = next(line for line in text.splitlines() if line.startswith("┃"))
    assert "currency" in head and "overhead" in head and " cur " not in head
    assert "(fee_lines)" not in text
    if columns == 80:
        assert "left out to fit 80 columns: counted from, unlinked checkpoint I/O, gross savings" in text


def test_default_selection_top_and_all(db: str) -> None:
    doc = report_json(db, "--period", "2026-10")
    active, idle, unattributed = expected_rows(doc["jobs"])
    text = table(db, "--period", "2026-10")
    title = "Interruption overhead by job"
    currencies = {r["currency"] for r in doc["jobs"] if r["job"] == UN}
    assert len(body_lines(text, title)) == 15 + len(currencies)
    left = len(active) - 15 + idle
    assert (f"15 of {len(active) + idle} job rows shown; {left} left out ({len(active) - 15} beyond --top 15, "
            f"{idle} with no overhead and no spot cost): --top N shows more, --all shows every row") in text
    # the biggest overhead first
    assert body_lines(text, title)[0].split("│")[1].strip() == active[0]["job"]

    top5 = table(db, "--period", "2026-10", "--top", "5")
    assert len(body_lines(top5, title)) == 5 + len(currencies)
    assert f"5 of {len(active) + idle} job rows shown" in top5

    every = table(db, "--period", "2026-10", "--all")
    assert len(body_lines(every, title)) == len(doc["jobs"])
    assert "left out (" not in every
    assert unattributed > len(currencies)  # --all shows them one by one


def test_one_unattributed_row_per_currency_with_the_resource_map(db: str) -> None:
    doc = report_json(db, "--period", "2026-10")
    text = table(db, "--period", "2026-10")
    totals = {t["currency"]: t for t in doc["totals"]}
    for cur in sorted({r["currency"] for r in doc["jobs"] if r["job"] == UN}):
        rows = [r for r in doc["jobs"] if r["job"] == UN and r["currency"] == cur]
        spot = sum((num(r["spot_compute_cost"]) for r in rows), Decimal(0))
        over = sum((num(r["hidden_overhead_total"]) for r in rows), Decimal(0))
        fees = sum((num(r["restart_fees"]) for r in rows), Decimal(0))
        measured = [num(r["gross_spot_savings"]) for r in rows if r["gross_spot_savings"] is not None]
        gross = sum(measured, Decimal(0)) if measured else None  # n/a rows left out, as the report's sums do
        # erosion as the report's teams and totals have it: the overhead of the rows whose savings are measured
        eroding = sum((num(r["hidden_overhead_total"]) for r in rows if r["gross_spot_savings"] is not None),
                      Decimal(0))
        erosion = pct(eroding / gross * 100) if gross is not None and gross > 0 else "n/a"
        providers = sorted({r["provider"] for r in rows})
        cell = providers[0] if len(providers) == 1 else f"{len(providers)} providers"
        assert has_row(text, UN, UN, cell, cur, money(over), erosion, money(fees), money(spot), money(gross))
        assert (f"(unattributed) {cur} ({len(rows)} row(s) of {', '.join(providers)} summed): "
                f"{money(totals[cur]['unattributed_cost'])} {cur} "
                "of cost went to no job; map its resources to jobs and teams in attribution.resource_map in "
                "billing-audit.toml") in text
    assert sum(1 for line in body_lines(text, "Interruption overhead") if UN in line) == len(totals)


def test_a_period_column_over_several_periods(db: str) -> None:
    one = table(db, "--period", "2026-10")
    assert "period" not in next(line for line in one.splitlines() if line.startswith("┃"))
    text = table(db)
    head = next(line for line in text.splitlines() if line.startswith("┃"))
    assert head.split("┃")[1].strip() == "period"
    # each row is the JSON's row of its own period
    for period in ("2026-09", "2026-10"):
        doc = report_json(db, "--period", period)
        top = expected_rows(doc["jobs"])[0][0]
        assert has_row(text, period, top["job"], top["team"], top["provider"], top["currency"],
                       money(top["hidden_overhead_total"]))
        for t in doc["totals"]:
            assert has_row(text, period, t["currency"], money(t["hidden_overhead_total"]))


def test_by_team_and_by_provider(db: str) -> None:
    doc = report_json(db, "--period", "2026-10")
    teams = table(db, "--period", "2026-10", "--by", "team")
    active, _, _ = expected_rows(doc["teams"], "team")
    for r in active[:15]:
        assert has_row(teams, r["team"], r["currency"], money(r["hidden_overhead_total"]),
                       money(r["restart_fees"]), money(r["spot_compute_cost"]))
    assert "Interruption overhead by team" in teams

    prov = table(db, "--period", "2026-10", "--by", "provider")
    sums: dict[tuple[str, str], dict[str, Decimal]] = {}
    for r in doc["jobs"]:
        s = sums.setdefault((r["provider"], r["currency"]), {"o": Decimal(0), "f": Decimal(0), "s": Decimal(0)})
        s["o"] += num(r["hidden_overhead_total"])
        s["f"] += num(r["restart_fees"])
        s["s"] += num(r["spot_compute_cost"])
    assert len(body_lines(prov, "Interruption overhead by provider")) == len(sums)
    for (p, cur), s in sums.items():
        assert has_row(prov, p, cur, money(s["o"]), money(s["f"]), money(s["s"])), (p, cur, prov)


def test_by_account(db: str) -> None:
    """--by account: the job rows split by billing account (the rows of export --by team,provider,account) summed
    per provider, billing account and currency, by hand here; per currency they add up to the report's totals
    exactly."""
    r = run("report", "--db", db, "--period", "2026-10", "--by", "account", "--all", columns=300)  # an MCA id is long
    assert r.returncode == 0, r.stderr
    doc = report_json(db, "--period", "2026-10")
    exported = run("export", "--db", db, "--period", "2026-10", "--by", "team,provider,account", "--format", "json",
                   "--out", "-")
    assert exported.returncode == 0, exported.stderr
    fields = ["hidden_overhead_total", "restart_fees", "spot_compute_cost", "gross_spot_savings", "net_spot_savings",
              "checkpoint_io_unlinked"]
    sums: dict[tuple[str, str, str], dict[str, Any]] = {}
    eroding: dict[tuple[str, str, str], Decimal] = {}  # the overhead of the jobs whose savings are measured
    for row in json.loads(exported.stdout):
        key = (row["provider"], row["billing_account"] or "-", row["currency"])
        s = sums.setdefault(key, {})
        for f in fields:
            if row[f] is not None:  # n/a rows left out of the sum; n/a when none is measured
                s[f] = s.get(f, Decimal(0)) + Decimal(row[f])
        if row["gross_spot_savings"] is not None:  # net = gross - the measured jobs' overhead, in a team row too
            eroding[key] = (eroding.get(key, Decimal(0)) + Decimal(row["gross_spot_savings"])
                            - Decimal(row["net_spot_savings"]))
    assert len(sums) >= 3 and len({k[1] for k in sums}) >= 3  # several accounts, three providers
    body = body_lines(r.stdout, "Interruption overhead by billing account, 2026-10")
    assert len(body) == len(sums)
    for (provider, account, cur), s in sums.items():
        gross = s.get("gross_spot_savings")
        erosion = pct(eroding[(provider, account, cur)] / gross * 100) if gross is not None and gross > 0 else "n/a"
        cells = [account, provider, cur, money(s["hidden_overhead_total"]), erosion, money(s["restart_fees"]),
                 money(s["spot_compute_cost"]), money(gross), money(s.get("net_spot_savings")),
                 money(s["checkpoint_io_unlinked"])]
        assert has_row(r.stdout, *cells), (cells, r.stdout)
    for t in doc["totals"]:  # the accounts of a currency tie to its totals, exactly
        for f in ("hidden_overhead_total", "restart_fees", "spot_compute_cost", "checkpoint_io_unlinked"):
            got = sum((s[f] for k, s in sums.items() if k[2] == t["currency"]), Decimal(0))
            assert got == Decimal(t[f]), (t["currency"], f, got, t[f])


def test_rows_of_one_job_on_two_providers_are_told_apart_at_80_columns(db: str) -> None:
    """resnet-sweep-7 runs on aws and on azure, both in USD, in 2026-10: at 80 columns the provider column stays
    (restart fees go instead), and no two rows of the table read alike."""
    doc = report_json(db, "--period", "2026-10")
    twins = [j for j in doc["jobs"] if (j["job"], j["currency"]) == ("resnet-sweep-7", "USD")]
    assert sorted(j["provider"] for j in twins) == ["aws", "azure"]
    text = table(db, "--period", "2026-10", columns=80)
    head = next(line for line in text.splitlines() if line.startswith("┃"))
    assert [c.strip() for c in head.strip("┃").split("┃")][:3] == ["job", "provider", "currency"]
    for j in twins:
        assert has_row(text, j["job"], j["provider"], j["currency"], money(j["hidden_overhead_total"]),
                       pct(j["savings_eroded_pct"]), money(j["spot_compute_cost"])), (j, text)
    rows = body_lines(text, "Interruption overhead by job")
    keys = [tuple(c.strip() for c in line.strip("│").split("│")[:3]) for line in rows]
    assert len(set(keys)) == len(keys), keys
    assert "left out to fit 80 columns: counted from, unlinked checkpoint I/O, gross savings, recommendation, " \
           "interruptions, net savings, team, restart fees " in text
    # where no two rows share a job and currency the provider goes as before (2026-11)
    nov = table(db, "--period", "2026-11", columns=80)
    nov_head = next(line for line in nov.splitlines() if line.startswith("┃"))
    assert "provider" not in nov_head


@pytest.mark.parametrize("columns", [80, 200])
def test_totals_lead_with_overhead_erosion_fees_coverage(db: str, columns: int) -> None:
    doc = report_json(db, "--period", "2026-11")
    text = table(db, "--period", "2026-11", columns=columns)
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Totals per currency"))
    head = next(line for line in lines[start:] if line.startswith("┃"))
    assert [c.strip() for c in head.strip("┃").split("┃")][:6] == [
        "currency", "overhead", "erosion %", "restart fees", "coverage %", "unpriced spot"]
    assert len(doc["totals"]) == 2
    for t in doc["totals"]:
        assert has_row("\n".join(lines[start:]), t["currency"], money(t["hidden_overhead_total"]),
                       pct(t["savings_eroded_pct"]), money(t["restart_fees"]), pct(t["savings_coverage_pct"]),
                       money(t["spot_unpriced_cost"]))
    eur = next(t for t in doc["totals"] if t["currency"] == "EUR")
    assert eur["savings_eroded_pct"] is None  # savings not measured: printed n/a, never 0
    assert has_row("\n".join(lines[start:]), "EUR", money(eur["hidden_overhead_total"]), "n/a")


def test_too_narrow_for_any_table_stacks_the_rows(db: str) -> None:
    doc = report_json(db, "--period", "2026-10")
    text = table(db, "--period", "2026-10", columns=40)
    assert "…" not in text and "┃" not in text.split("Totals per currency")[0]
    top = expected_rows(doc["jobs"])[0][0]
    block = text.split(f"{top['job']} · {top['team']} · {top['provider']} · {top['currency']}", 1)[1]
    assert block.splitlines()[1:4] == [f"  overhead: {money(top['hidden_overhead_total'])}",
                                       f"  erosion %: {pct(top['savings_eroded_pct'])}",
                                       f"  restart fees: {money(top['restart_fees'])}"]
