"""Fee reconciliation: the restart fees the bill charges against the interruptions the providers' logs record.

Per resource and charge period: a restart-fee line (a line whose category is ``restart_fee``) bills a number of
restarts (its quantity when its unit counts restarts, else one: the rule rollup.py counts fees by); the
interruptions observed are the ``interruption_events`` of the same provider and resource (resource ids
compared case-insensitively: Azure's Activity Log upper-cases them) whose time falls in the line's charge period
(from ``MATCH_BEFORE`` before its start: a warning two minutes before the hour that bills the restart).  Events
of one resource less than ``CLUSTER_GAP`` apart are one interruption (EventBridge's warning and CloudTrail's
BidEvictedEvent two minutes later are the same one); rebalance recommendations are no interruption.

Each fee line claims up to its restarts among the unclaimed interruptions in its window, earliest first.  What it
cannot claim is a restart billed with no interruption observed: the line is listed with its id, amount, currency,
resource and time, and the disputable part of its billed cost (cost x unmatched / billed restarts).  Interruptions
no fee claims are listed as interruptions without a fee.  Only providers with events in the store are reconciled:
the fee lines of the others are counted as not reconciled, with the reason (never as disputable).
Reconciliation adds information: no overhead figure of the report changes with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from billing_audit.categories import CATEGORIES
from billing_audit.errors import BillingAuditError
from billing_audit.events import INTERRUPTING
from billing_audit.rollup import COUNTABLE_UNIT, NO_TAG_RUN, period_filter
from billing_audit.sql import lit
from billing_audit.store import PERIOD, Store

if TYPE_CHECKING:
    import duckdb

CLUSTER_GAP = timedelta(minutes=10)
MATCH_BEFORE = timedelta(minutes=10)
PLACES = Decimal("0.000000000001")


@dataclass
class Interruption:
    provider: str
    resource_id: str
    time: datetime
    kinds: list[str]
    sources: list[str]  # file:row of each event
    last: datetime  # the time of its latest event (the next event within CLUSTER_GAP of it is the same interruption)
    claimed_by: str | None = None
    billed: bool = False  # the bills held have lines of this resource (else its bill is not in the store)


@dataclass
class FeeLine:
    line_id: str
    provider: str
    resource_id: str | None
    start: datetime | None
    end: datetime | None
    restarts: Decimal
    billed_cost: Decimal
    currency: str
    source: str
    matched: list[Interruption] = field(default_factory=list)

    @property
    def unmatched(self) -> Decimal:
        return max(self.restarts - len(self.matched), Decimal(0))

    @property
    def status(self) -> str:
        if self.resource_id is None or self.start is None or self.end is None:
            return "not_matchable"
        return "matched" if not self.unmatched else "partly_matched" if self.matched else "unmatched"

    @property
    def disputable(self) -> Decimal | None:
        """The billed cost of the restarts no interruption accounts for; n/a for a line that cannot be matched."""
        if self.status == "not_matchable":
            return None
        if self.restarts <= 0:
            return Decimal(0)
        return (self.billed_cost * self.unmatched / self.restarts).quantize(PLACES)

    def to_dict(self) -> dict[str, Any]:
        from billing_audit.jsonout import money, plain

        return {"line_id": self.line_id, "provider": self.provider, "resource_id": self.resource_id,
                "charge_period_start": plain(self.start), "charge_period_end": plain(self.end),
                "restarts_billed": _count(self.restarts), "interruptions_observed": len(self.matched),
                "restarts_unmatched": _count(self.unmatched), "billed_cost": money(self.billed_cost),
                "disputable_amount": money(self.disputable), "currency": self.currency, "status": self.status,
                "reason": "the fee line names no resource or charge period" if self.status == "not_matchable" else None,
                "source": self.source,
                "events": [s for i in self.matched for s in i.sources]}


def _count(d: Decimal) -> int | str:
    return int(d) if d == d.to_integral_value() else format(d.normalize(), "f")


@dataclass
class Reconciliation:
    period: str
    events_held: int
    providers: list[str]  # reconciled (they have events in the store)
    fees: list[FeeLine]
    not_reconciled: list[dict[str, Any]]
    without_fee: list[Interruption]

    @property
    def fees_without_events(self) -> list[FeeLine]:
        return [f for f in self.fees if f.status in ("unmatched", "partly_matched")]

    def totals(self) -> list[dict[str, Any]]:
        """Per currency (never summed across): fee lines and billed cost reconciled, and what is disputable."""
        out: dict[str, dict[str, Any]] = {}
        for f in self.fees:
            t = out.setdefault(f.currency, {"currency": f.currency, "fee_lines": 0, "billed_cost": Decimal(0),
                                            "fee_lines_disputed": 0, "disputable_amount": Decimal(0)})
            t["fee_lines"] += 1
            t["billed_cost"] += f.billed_cost
            if f in self.fees_without_events:
                t["fee_lines_disputed"] += 1
                t["disputable_amount"] += f.disputable or Decimal(0)
        return [out[c] for c in sorted(out)]

    def over(self, amount: Decimal) -> list[str]:
        """Currencies whose disputable total is above ``amount``."""
        return [t["currency"] for t in self.totals() if t["disputable_amount"] > amount]

    def to_dict(self) -> dict[str, Any]:
        from billing_audit.jsonout import money, plain

        return {
            "period": self.period, "events_held": self.events_held, "providers_reconciled": self.providers,
            "rules": {"cluster_gap_minutes": int(CLUSTER_GAP.total_seconds() // 60),
                      "match_before_minutes": int(MATCH_BEFORE.total_seconds() // 60)},
            "totals": [{**t, "billed_cost": money(t["billed_cost"]), "disputable_amount": money(t["disputable_amount"])}
                       for t in self.totals()],
            "fees_without_events": [f.to_dict() for f in self.fees_without_events],
            "interruptions_without_fee": [{"provider": i.provider, "resource_id": i.resource_id, "time": plain(i.time),
                                           "kinds": i.kinds, "resource_in_bills": i.billed, "events": i.sources}
                                          for i in self.without_fee],
            "fee_lines": [f.to_dict() for f in self.fees],
            "not_reconciled": self.not_reconciled,
        }


def _month(period: str) -> tuple[datetime, datetime]:
    y, m = (int(x) for x in period.split("-"))
    return datetime(y, m, 1), datetime(y + m // 12, m % 12 + 1, 1)


def _not_reconciled(counts: dict[str, int]) -> list[dict[str, Any]]:
    """Per provider without events in the store: its fee lines, not reconciled, and why."""
    return [{"provider": p, "fee_lines": n, "reason": f"no interruption events of {p} are in the store "
             "(ingest its event logs beside the bill: README \"Interruption events\")"} for p, n in sorted(counts.items())]


def _fee_counts(con: duckdb.DuckDBPyConnection, period: str | None) -> dict[str, int] | None:
    """The fee lines (category restart_fee) of ``period`` per provider, from the stored line groups (the lines of
    a category counted per group: no scan of every rule hit for a month's few fee lines); None when the groups are
    not those of the lines stored now."""
    from billing_audit.rollup import current_groups

    stored = current_groups(con)
    if stored is None:
        return None
    groups, keys = stored
    rows = con.execute(f"SELECT k.provider, sum(g.n) FROM {groups} g JOIN {keys} k ON k.h = g.h "
                       f"WHERE g.rank = {CATEGORIES.index('restart_fee') + 1} AND {period_filter(period)} "
                       "GROUP BY k.provider").fetchall()
    return {str(p): int(n) for p, n in rows if n}


def reconcile(store: Store, period: str | None = None) -> Reconciliation:
    """The reconciliation of ``period`` (YYYY-MM; None: every period held)."""
    con = store.con
    if not store._has_table("line_categories"):
        raise BillingAuditError(NO_TAG_RUN + ": fee reconciliation needs the lines' categories")
    has_events = store._has_table("interruption_events")
    events = con.execute(
        "SELECT provider, resource_id, time, kind, source_file, source_row FROM interruption_events "
        f"WHERE kind IN ({', '.join(lit(k) for k in INTERRUPTING)}) ORDER BY provider, lower(resource_id), time, kind"
    ).fetchall() if has_events else []
    held_row = con.execute("SELECT count(*), list(DISTINCT provider ORDER BY provider) FROM interruption_events"
                           ).fetchone() if has_events else None
    held, providers = (int(held_row[0]), list(held_row[1] or [])) if held_row else (0, [])
    # one interruption per resource per burst of events
    interruptions: dict[tuple[str, str], list[Interruption]] = {}
    for prov, rid, t, kind, f, row in events:
        runs = interruptions.setdefault((prov, rid.lower()), [])
        if runs and t - runs[-1].last <= CLUSTER_GAP:
            runs[-1].kinds = sorted({*runs[-1].kinds, kind})
            runs[-1].sources.append(f"{f}:{row}")
            runs[-1].last = t
        else:
            runs.append(Interruption(prov, rid, t, [kind], [f"{f}:{row}"], t))
    if not providers:  # no events at all: every fee line is only counted, per provider
        counts = _fee_counts(con, period)
        if counts is not None:
            return Reconciliation(period or "all", held, [], [], _not_reconciled(counts), [])
    # A line's category (line_categories) is restart_fee when one of its hits is and none of a category before it
    # in precedence: read those hits alone, not every line's category (the view groups all the hits in the store).
    where = "l.x_LineItemId IN (SELECT x_LineItemId FROM rule_hits WHERE category = 'restart_fee')"
    before = CATEGORIES[:CATEGORIES.index("restart_fee")]
    if before:
        where += (" AND l.x_LineItemId NOT IN (SELECT x_LineItemId FROM rule_hits WHERE category IN "
                  f"({', '.join(lit(c) for c in before)}))")
    if period is not None:  # the range first: storage skips the other months' row groups
        where += (f" AND {period_filter(period, 'l.BillingPeriodStart')} AND "
                  f"strftime({PERIOD.replace('BillingPeriodStart', 'l.BillingPeriodStart')}, '%Y-%m') = {lit(period)}")
    fees = [FeeLine(r[0], r[1], r[2], r[3], r[4], Decimal(r[5]), r[6] if r[6] is not None else Decimal(0), r[7] or "",
                    f"{r[8]}:{r[9]}")
            for r in con.execute(
                "SELECT l.x_LineItemId, l.x_Provider, l.ResourceId, l.ChargePeriodStart, l.ChargePeriodEnd, "
                f"CASE WHEN regexp_matches(lower(coalesce(l.ConsumedUnit, '')), {lit(COUNTABLE_UNIT)}) "
                "THEN coalesce(l.ConsumedQuantity, 1) ELSE 1 END, l.BilledCost, l.BillingCurrency, l.x_SourceFile, "
                f"l.x_SourceRow FROM line_items l WHERE {where} "
                "ORDER BY l.x_Provider, lower(l.ResourceId), l.ChargePeriodStart, l.x_LineItemId").fetchall()]
    mine = [f for f in fees if f.provider in providers]
    others: dict[str, list[FeeLine]] = {}
    for f in fees:
        if f.provider not in providers:
            others.setdefault(f.provider, []).append(f)
    not_reconciled = _not_reconciled({p: len(fs) for p, fs in others.items()})
    for f in mine:
        if f.status == "not_matchable":
            continue
        assert f.resource_id is not None and f.start is not None and f.end is not None
        for it in interruptions.get((f.provider, f.resource_id.lower()), []):
            if len(f.matched) >= f.restarts:
                break
            if it.claimed_by is None and f.start - MATCH_BEFORE <= it.time < f.end:
                it.claimed_by = f.line_id
                f.matched.append(it)
    lo, hi = _month(period) if period is not None else (datetime.min, datetime.max)
    without = [it for runs in interruptions.values() for it in runs
               if it.claimed_by is None and lo <= it.time < hi]
    without.sort(key=lambda i: (i.provider, i.time, i.resource_id))
    if without:
        con.execute("CREATE OR REPLACE TEMP TABLE ba_ev_res (provider VARCHAR, rid VARCHAR)")
        con.executemany("INSERT INTO ba_ev_res VALUES (?, ?)", [[i.provider, i.resource_id.lower()] for i in without])
        billed = {(p, r) for p, r in con.execute(
            "SELECT DISTINCT e.provider, e.rid FROM ba_ev_res e WHERE EXISTS (SELECT 1 FROM line_items l WHERE "
            "l.x_Provider = e.provider AND lower(l.ResourceId) = e.rid)").fetchall()}
        con.execute("DROP TABLE ba_ev_res")
        for i in without:
            i.billed = (i.provider, i.resource_id.lower()) in billed
    return Reconciliation(period or "all", held, providers, mine, not_reconciled, without)

