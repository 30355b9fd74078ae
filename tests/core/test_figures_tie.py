"""One computation, every output: per currency, to the cent, for every period and for all periods,

    report totals = sum of job rows = sum of team rows = export rows = audit's jobs.csv and teams.csv,

and the export rows' total cost is the store's own total for the period (its totals file says ``ties``).  Run over
every fixture (one ``audit`` of fixtures/, many months and providers) and over generated estates (the AWS, Azure
and GCP generators, audited together, a seed each).
"""

from __future__ import annotations

import csv
import json
from decimal import Decimal
from pathlib import Path

import pytest

import billing_audit
from billing_audit import app
from billing_audit.config import Config
from billing_audit.report import FINANCE_COLUMNS, build_report, store_periods
from support import FIXTURES

CENT = Decimal("0.01")
MONEY = [c for c in FINANCE_COLUMNS if c != "interruptions"]


def _dec(v: object) -> Decimal | None:
    if v is None or v in ("", "n/a"):  # n/a: not measured (every CSV writes it so)
        return None
    return Decimal(str(v))


def _sums(rows: list[dict], columns: list[str]) -> dict[tuple[str, str], Decimal | None]:
    out: dict[tuple[str, str], Decimal | None] = {}
    for r in rows:
        for c in columns:
            v = _dec(r[c])
            key = (r["currency"], c)
            if v is not None:
                out[key] = (out.get(key) or Decimal(0)) + v
            else:
                out.setdefault(key, None)
    return out


def _tie(a: dict, b: dict, what: str, slack: Decimal = Decimal(0)) -> None:
    """Equal to the cent (plus `slack`: files written at 4 places, each row off by at most 0.00005)."""
    for key in set(a) | set(b):
        x, y = a.get(key), b.get(key)
        if x is None or y is None:
            assert x is None and y is None or (x or 0) == (y or 0) == 0, f"{what}: {key} {x} vs {y}"
            continue
        assert abs(x - y) < CENT + slack, f"{what}: {key} {x} != {y}"


@pytest.fixture(scope="module", params=["fixtures", "generated"])
def audited(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp(f"tie-{request.param}")
    if request.param == "fixtures":
        src = [FIXTURES]
    else:
        src = []
        for seed, provider in enumerate(("aws", "azure", "gcp")):
            out = root / "estate" / provider
            app.generate(provider, 3000, str(out), seed=seed)
            src.append(out)
    db, out_dir = root / "s.duckdb", root / "audit"
    res = app.audit(str(db), src, out_dir)
    assert not res.ingest.errors
    return db, out_dir


def test_every_output_ties_per_period_and_over_all_periods(audited: tuple[Path, Path], tmp_path: Path) -> None:
    db, out_dir = audited
    cfg = Config()
    with billing_audit.open(db, read_only=True) as store:
        periods = store_periods(store)
        reports = {p: build_report(store, cfg, p) for p in [*periods, None]}
        held = app.store_totals(store, periods)
    assert len(periods) >= 1
    per_period_totals: list[dict] = []
    for p, rep in reports.items():
        data = {"jobs": rep.jobs.to_dicts(), "teams": rep.teams.to_dicts(), "totals": rep.totals.to_dicts()}
        json_totals = {(r["currency"], c): _dec(r[c]) for r in rep.to_dict()["totals"] for c in FINANCE_COLUMNS}
        totals = {(r["currency"], c): _dec(r[c]) for r in data["totals"] for c in FINANCE_COLUMNS}
        _tie(totals, json_totals, f"{p}: the JSON's totals")
        _tie(totals, _sums(data["jobs"], FINANCE_COLUMNS), f"{p}: totals vs jobs")
        _tie(totals, _sums(data["teams"], FINANCE_COLUMNS), f"{p}: totals vs teams")
        if p is not None:
            per_period_totals += data["totals"]
            for r in data["totals"]:  # the report's total cost is the store's, per currency
                assert abs(Decimal(str(r["total_cost"])) - held[(p, r["currency"])]) < CENT
    # over all periods: the sum of the per-period rows, estimates included
    _tie({(r["currency"], c): _dec(r[c]) for r in reports[None].totals.to_dicts() for c in FINANCE_COLUMNS},
         _sums(per_period_totals, FINANCE_COLUMNS), "all periods vs the sum of the periods")
    # export, every period, by team and by team and provider: the same sums, and its totals file ties to the store
    for by in ("team", "team,provider", "team,account", "team,provider,account"):
        out = tmp_path / f"export-{by.replace(',', '-')}.json"
        rows = app.export(str(db), out, by=by, fmt="json").to_dicts()
        for p in periods:
            mine = [r for r in rows if r["period"] == p]
            _tie({(r["currency"], c): _dec(r[c]) for r in reports[p].totals.to_dicts() for c in FINANCE_COLUMNS},
                 _sums(mine, FINANCE_COLUMNS), f"{p}: export by {by}")
            for cur in {r["currency"] for r in mine}:
                got = sum((r["total_cost"] for r in mine if r["currency"] == cur), Decimal(0))
                assert got == held[(p, cur)], f"{p} {cur}: export rows {got} != store {held[(p, cur)]}"
        ties = json.loads(out.with_name(out.stem + ".totals.json").read_text())
        assert ties and all(t["ties"] for t in ties), ties
    # audit's CSVs (all periods): the same figures, in the same columns and order as report --format csv and export
    all_totals = {(r["currency"], c): _dec(r[c]) for r in reports[None].totals.to_dicts() for c in FINANCE_COLUMNS}
    for name in ("jobs.csv", "teams.csv"):
        with open(out_dir / name, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        money = {k: v for k, v in all_totals.items() if k[1] in MONEY}
        _tie(money, _sums(rows, MONEY), f"audit {name}", Decimal("0.00005") * len(rows))
    header = (out_dir / "jobs.csv").read_text().splitlines()[0].split(",")
    assert header[:5] == ["period", "job", "team", "provider", "currency"]
    assert header[5:5 + len(FINANCE_COLUMNS)] == FINANCE_COLUMNS
    team_header = (out_dir / "teams.csv").read_text().splitlines()[0].split(",")
    assert team_header == ["period", "team", "currency", *FINANCE_COLUMNS]
    with billing_audit.open(db, read_only=True) as store:
        report_csv = app.render_report(build_report(store, cfg, None), "csv").splitlines()[0].split(",")
    assert report_csv == header
    export_header = app.export_text(app.export(str(db), None, by="team", fmt="csv"), "csv").splitlines()[0].split(",")
    assert export_header == team_header
