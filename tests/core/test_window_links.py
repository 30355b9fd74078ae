"""The restart-window link of checkpoint groups (report._link_ctes) against its definition, written here in Python
datetime arithmetic: a checkpoint group of charge period [s, e), length L, is linked when an interruption of the
same job row (this period's) or of the same job, provider and currency (the previous period's; the team too for
the unattributed row) has its charge period [ts, te) overlapping [s - N x L, e); N is the job's own window, else
the hourly one for L <= 1 hour, else the daily one.  An interruption inferred from a churned stop has no ts: its
[te - L, te).

The SQL tests this in whole microseconds with semi joins; the definition is interval arithmetic per pair.  The
examples are random (hypothesis) over lengths of 30 min to 3 days and times on the quarter hour, so that the
window's edges (te + N x L = s, te - L = e) are met exactly, plus the edges written out."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

import duckdb
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from billing_audit.config import MAX_WINDOW_PERIODS, Config
from billing_audit.report import PREV_EVENTS, UNATTRIBUTED, _link_ctes

T0 = datetime(2026, 11, 30)
LENGTHS = [timedelta(minutes=30), timedelta(hours=1), timedelta(hours=2), timedelta(days=1), timedelta(days=3)]
JOBS = ["eps", "zeta", UNATTRIBUTED]
TEAMS = ["vision", "nlp"]
CATEGORIES = ["storage_reread", "checkpoint_egress", "restart_fee"]


def _config(override: int | None) -> Config:
    cfg = Config()
    if override is not None:
        cfg = Config.from_dict({"estimates": {"jobs": {"zeta": {"restart_window_periods": override}}}})
    return cfg


def _n(cfg: Config, job: str, length: timedelta) -> int:
    own = cfg.window_overrides().get(job)
    if own is not None:
        return own
    e = cfg.estimates
    return e.restart_window_hourly_periods if length <= timedelta(hours=1) else e.restart_window_daily_periods


def _expected(cfg: Config, ck: list[tuple], ev: list[tuple], pv: list[tuple]) -> list[tuple]:
    out = []
    for job, team, prov, cur, cat, s, e, cost, acct in ck:
        if cat not in ("storage_reread", "checkpoint_egress") or s is None or e is None or not e > s:
            continue
        length = e - s
        n = _n(cfg, job, length)

        def hit(ts: datetime | None, te: datetime, length: timedelta = length, n: int = n,
                s: datetime = s, e: datetime = e) -> bool:
            return s < te + n * length and e > (ts if ts is not None else te - length)

        if (any((j, t, p, c) == (job, team, prov, cur) and hit(ts, te) for j, t, p, c, ts, te in ev)
                or any((j, p, c) == (job, prov, cur) and (t == team or job != UNATTRIBUTED) and hit(ts, te)
                       for j, t, p, c, ts, te in pv)):
            out.append((job, team, prov, cur, cat, s.date(), cost, acct))
    return sorted(out, key=repr)


def _linked(con: duckdb.DuckDBPyConnection, cfg: Config, ck: list[tuple], ev: list[tuple],
            pv: list[tuple]) -> list[tuple]:
    con.execute("CREATE OR REPLACE TABLE ba_win (job VARCHAR, team VARCHAR, provider VARCHAR, currency VARCHAR, "
                "category VARCHAR, s TIMESTAMP, e TIMESTAMP, cost DECIMAL(38,12), account VARCHAR)")
    for name in ("ba_ev", PREV_EVENTS):
        con.execute(f"CREATE OR REPLACE TABLE {name} (job VARCHAR, team VARCHAR, provider VARCHAR, "
                    "currency VARCHAR, ts TIMESTAMP, te TIMESTAMP)")
    if ck:
        con.executemany("INSERT INTO ba_win VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", ck)
    if ev:
        con.executemany("INSERT INTO ba_ev VALUES (?, ?, ?, ?, ?, ?)", ev)
    if pv:
        con.executemany(f"INSERT INTO {PREV_EVENTS} VALUES (?, ?, ?, ?, ?, ?)", pv)
    rows = con.execute(f"WITH ev AS (SELECT * FROM ba_ev), {_link_ctes(cfg)} SELECT * FROM lk").fetchall()
    return sorted(rows, key=repr)


quarter = st.integers(min_value=-4 * 24 * 3, max_value=4 * 24 * 6).map(lambda q: T0 + timedelta(minutes=15 * q))
length = st.sampled_from(LENGTHS)
row_key = st.tuples(st.sampled_from(JOBS), st.sampled_from(TEAMS), st.sampled_from(["aws"]), st.sampled_from(["USD"]))


@st.composite
def checkpoint(draw: st.DrawFn) -> tuple:
    job, team, prov, cur = draw(row_key)
    s, ln = draw(quarter), draw(length)
    return (job, team, prov, cur, draw(st.sampled_from(CATEGORIES)), s, s + ln,
            Decimal(draw(st.integers(1, 999))) / 100, draw(st.sampled_from(["111", "222"])))


@st.composite
def interruption(draw: st.DrawFn) -> tuple:
    job, team, prov, cur = draw(row_key)
    te = draw(quarter)
    inferred = draw(st.booleans())
    return (job, team, prov, cur, None if inferred else te - draw(length), te)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ck=st.lists(checkpoint(), max_size=12), ev=st.lists(interruption(), max_size=5),
       pv=st.lists(interruption(), max_size=4), override=st.sampled_from([None, 0, 2, 30, MAX_WINDOW_PERIODS]))
def test_links_match_the_definition(tmp_path: Path, ck: list[tuple], ev: list[tuple], pv: list[tuple],
                                    override: int | None) -> None:
    cfg = _config(override)
    with duckdb.connect(str(tmp_path / "w.duckdb")) as con:
        assert _linked(con, cfg, ck, ev, pv) == _expected(cfg, ck, ev, pv)


def test_window_edges(tmp_path: Path) -> None:
    """Hourly, N = 3: an interruption of [10:00, 11:00) links the groups of [10:00, 11:00) to [13:00, 14:00); the
    group of [14:00, 15:00) starts at te + 3 x L and is not linked; one of [09:00, 10:00) ends at ts, not linked.
    A churned stop at 10:00 (no ts) stands for [09:00, 10:00) for an hourly group: [09:00, 10:00) linked."""
    h = timedelta(hours=1)
    t = datetime(2026, 12, 1, 10)
    key = ("eps", "vision", "aws", "USD")
    ck = [(*key, "storage_reread", t + k * h, t + (k + 1) * h, Decimal(k + 2), "111") for k in range(-1, 5)]
    cfg = Config()
    with duckdb.connect(str(tmp_path / "w.duckdb")) as con:
        got = _linked(con, cfg, ck, [(*key, t, t + h)], [])
        assert [r[6] for r in got] == [Decimal(k + 2) for k in range(0, 4)]
        assert got == _expected(cfg, ck, [(*key, t, t + h)], [])
        stop = _linked(con, cfg, ck, [(*key, None, t)], [])
        assert [r[6] for r in stop] == [Decimal(k + 2) for k in range(-1, 3)]
        # the previous period's interruption links across teams, but not for the unattributed row
        other = ("eps", "nlp", "aws", "USD")
        assert len(_linked(con, cfg, ck, [], [(*other, t, t + h)])) == 4
        unattr = [(UNATTRIBUTED, "vision", "aws", "USD", "storage_reread", t, t + h, Decimal(1), "111")]
        assert _linked(con, cfg, unattr, [], [(UNATTRIBUTED, "nlp", "aws", "USD", t, t + h)]) == []
