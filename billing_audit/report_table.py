"""The terminal table of `report` and `audit`: the rows that matter first, every amount in full.

Rows (``--by job``, the default): the jobs with overhead or spot cost, biggest overhead first, the first
``--top N`` of them (``--all``: every row), then one ``(unattributed)`` row per currency (the report's
unattributed rows summed over their teams and providers) with a note pointing at the resource map.  A
line below the table says how many rows were left out and how to see them.  ``--by team`` shows the
report's team rows; ``--by provider`` sums the job rows per provider and currency, ``--by account`` the job
rows split by billing account (``Report.accounts``, the rows of ``export --by team,provider,account``) per
provider, billing account and currency.  Rows of several periods get a period column.

Width: money is never cut.  The table is measured at the terminal width (``COLUMNS`` when set) and the
low-priority columns go first, in this fixed order (:data:`DROP_ORDER`): interruption source, unlinked
checkpoint I/O, gross savings, recommendation, interruptions, net savings, provider, team, restart fees,
erosion; but a provider or team column that tells two shown rows apart (the same job on two providers or
teams) stays.  If the table is still too wide, each row becomes a block of ``label: value`` lines with every figure
(stacked layout).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from rich.console import Console, RenderableType
from rich.table import Table

from billing_audit.errors import BillingAuditError
from billing_audit.inert import NOT_MEASURED, clean, text
from billing_audit.report import MONEY_FIELDS, Report

UNATTRIBUTED = "(unattributed)"
RESOURCE_MAP_HINT = "attribution.resource_map in billing-audit.toml"
DEFAULT_TOP = 15
BY = ("job", "team", "provider", "account")

# (key, header): headers in words; the key is the report's field
COLUMNS: dict[str, str] = {
    "period": "period",
    "job": "job",
    "team": "team",
    "provider": "provider",
    "billing_account": "billing account",
    "currency": "currency",
    "hidden_overhead_total": "overhead",
    "savings_eroded_pct": "erosion %",
    "restart_fees": "restart fees",
    "spot_compute_cost": "spot cost",
    "gross_spot_savings": "gross savings",
    "net_spot_savings": "net savings",
    "interruptions": "interruptions",
    "interruptions_source": "counted from",
    "checkpoint_io_unlinked": "unlinked checkpoint I/O",
    "recommendation": "recommendation",
}
# the first to go when the table is too wide, in this order
DROP_ORDER = ["interruptions_source", "checkpoint_io_unlinked", "gross_spot_savings", "recommendation",
              "interruptions", "net_spot_savings", "provider", "team", "restart_fees", "savings_eroded_pct"]
# what a row is (the keys of the rows of every --by): a key column telling two shown rows apart is never dropped
ROW_KEYS = ("period", "job", "team", "provider", "billing_account", "currency")
TEXT_KEYS = {"period", "job", "team", "provider", "billing_account", "currency", "interruptions_source",
             "recommendation"}
TOTAL_COLUMNS: dict[str, str] = {
    "period": "period",
    "currency": "currency",
    "hidden_overhead_total": "overhead",
    "savings_eroded_pct": "erosion %",
    "restart_fees": "restart fees",
    "savings_coverage_pct": "coverage %",
    "spot_unpriced_cost": "unpriced spot",
    "spot_compute_cost": "spot cost",
    "gross_spot_savings": "gross savings",
    "net_spot_savings": "net savings",
    "interruptions": "interruptions",
    "unattributed_cost": "unattributed cost",
    "total_cost": "total cost",
}
TOTAL_DROP_ORDER = ["interruptions", "total_cost", "unattributed_cost", "net_spot_savings", "gross_spot_savings",
                    "spot_compute_cost", "spot_unpriced_cost"]
TOTALS_NOTE = ("erosion %: overhead as a share of the measured spot savings; coverage %: the share of spot cost "
               "whose savings could be measured (an on-demand price found); unpriced spot: the spot cost without one "
               "(its savings are n/a, never 0)")
SUMMED = [*MONEY_FIELDS, "interruptions"]


def amount(v: Any, key: str) -> str:
    """A cell as the table prints it: money with thousands separators and cents, percentages to one place,
    counts as integers, a figure that was not measured as n/a."""
    if v is None:
        return "n/a" if key in NOT_MEASURED else "-"
    if key.endswith("_pct"):
        return f"{Decimal(str(v)):.1f}"
    if key == "interruptions":
        return f"{Decimal(str(v)).normalize():f}"
    if isinstance(v, (Decimal, float, int)) and not isinstance(v, bool):
        return f"{Decimal(str(v)):,.2f}"
    return clean(str(v))


@dataclass
class Selection:
    """The rows a table shows and what it left out."""

    rows: list[dict[str, Any]]
    unattributed: list[dict[str, Any]] = field(default_factory=list)
    total: int = 0
    idle: int = 0  # rows with no overhead and no spot cost, left out by default
    beyond_top: int = 0
    label: str = "job"


def _num(v: Any) -> Decimal:
    return Decimal(str(v)) if v is not None else Decimal(0)


def _active(r: dict[str, Any]) -> bool:
    return _num(r.get("hidden_overhead_total")) != 0 or _num(r.get("spot_compute_cost")) != 0


def _sum_rows(rows: list[dict[str, Any]], keys: dict[str, Any]) -> dict[str, Any]:
    """Rows of one currency summed as the report sums its teams and totals: a figure a row could not measure
    (n/a) is left out of the sum, which covers the measured rows; n/a when no row measured it."""
    out: dict[str, Any] = dict(keys)
    for c in SUMMED:
        vals = [r.get(c) for r in rows if c in r]
        if not vals:
            continue
        measured = [Decimal(str(v)) for v in vals if v is not None]
        out[c] = sum(measured, Decimal(0)) if measured else None
    # erosion as the report's teams and totals work it out: the overhead of the rows whose savings are measured,
    # over those savings (a row without measured savings erodes nothing measured)
    gross = out.get("gross_spot_savings")
    over = sum((_num(r.get("hidden_overhead_total")) for r in rows if r.get("gross_spot_savings") is not None),
               Decimal(0))
    out["savings_eroded_pct"] = (over / gross * 100) if gross is not None and gross > 0 else None
    out["interruptions_source"] = "none"
    return out


def _group(rows: list[dict[str, Any]], keys: Sequence[str]) -> list[dict[str, Any]]:
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(r.get(k) for k in keys), []).append(r)
    return [_sum_rows(g, dict(zip(keys, k, strict=True))) for k, g in groups.items()]


def _base_rows(reports: Sequence[Report], by: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    if by == "account":  # the job rows split by billing account, as export --by team,provider,account has them
        for rep in reports:
            if rep.accounts is None:
                raise BillingAuditError("--by account: this report has no rows by billing account")
            for r in rep.accounts.iter_rows(named=True):
                rows.append({**r, "billing_account": r["account"], "period": rep.period})
        return _group(rows, ["period", "provider", "billing_account", "currency"])
    for rep in reports:
        src = rep.teams if by == "team" else rep.jobs
        for r in src.iter_rows(named=True):
            rows.append({**r, "period": rep.period})
    if by == "provider":
        return _group(rows, ["period", "provider", "currency"])
    return rows


def _is_unattributed(r: dict[str, Any], by: str) -> bool:
    return r.get("job" if by == "job" else "team") == UNATTRIBUTED if by in ("job", "team") else False


def select(reports: Sequence[Report], by: str = "job", top: int | None = DEFAULT_TOP) -> Selection:
    """The rows of the table: `top` None shows every row (``--all``)."""
    if by not in BY:
        raise BillingAuditError(f"--by {by!r}: expected one of {', '.join(BY)}")
    rows = _base_rows(reports, by)
    unattr = [r for r in rows if _is_unattributed(r, by)]
    rest = [r for r in rows if not _is_unattributed(r, by)]
    rest.sort(key=lambda r: (-_num(r.get("hidden_overhead_total")), -_num(r.get("spot_compute_cost"))))
    sel = Selection(rows=[], total=len(rows), label=by)
    if top is None:
        sel.rows = rest
        sel.unattributed = unattr
        return sel
    active = [r for r in rest if _active(r)]
    sel.idle = len(rest) - len(active)
    sel.rows = active[:top]
    sel.beyond_top = len(active) - len(sel.rows)
    per_cur: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in unattr:
        per_cur.setdefault((r["period"], r["currency"]), []).append(r)
    unattr_keys = ["job", "team"] if by == "job" else ["team"]
    for (period, cur), grp in per_cur.items():
        summed = _sum_rows(grp, {"period": period, "currency": cur, **dict.fromkeys(unattr_keys, UNATTRIBUTED)})
        provs = sorted({str(r.get("provider")) for r in grp if r.get("provider")})
        summed["_providers"] = ", ".join(provs)  # named in the note below the table; the cell counts them
        summed["provider"] = provs[0] if len(provs) == 1 else f"{len(provs)} providers"
        summed["recommendation"] = "attribute"
        summed["_rows"] = len(grp)
        sel.unattributed.append(summed)
    return sel


def _periods(reports: Sequence[Report]) -> bool:
    return len({r.period for r in reports}) > 1


def _columns(sel: Selection, multi_period: bool) -> list[str]:
    lead = {"job": ["job", "team", "provider"], "team": ["team"], "provider": ["provider"],
            "account": ["billing_account", "provider"]}[sel.label]
    cols = (["period"] if multi_period else []) + lead + ["currency", "hidden_overhead_total", "savings_eroded_pct",
                                                          "restart_fees", "spot_compute_cost", "gross_spot_savings",
                                                          "net_spot_savings"]
    if sel.label in ("job", "team"):
        cols.append("interruptions")
    if sel.label == "job":
        cols += ["interruptions_source", "checkpoint_io_unlinked", "recommendation"]
    else:
        cols.append("checkpoint_io_unlinked")
    return cols


def _cell(r: dict[str, Any], key: str) -> str:
    v = amount(r.get(key), key)
    if key == "recommendation" and r.get("over_budget"):
        v = f"{v}, over budget"
    if key == "interruptions_source" and v == "none":
        return "-"
    return v


def _width(renderable: RenderableType) -> int:
    console = Console(width=100_000, color_system=None, record=True, file=io.StringIO())
    console.print(renderable)
    return max((len(line.rstrip()) for line in console.export_text().splitlines()), default=0)


def _table(title: str, headers: dict[str, str], cols: list[str], rows: list[dict[str, Any]]) -> Table:
    table = Table(title=text(title), title_justify="left")
    for c in cols:
        table.add_column(headers[c], justify="left" if c in TEXT_KEYS else "right", no_wrap=True)
    for r in rows:
        table.add_row(*(text(_cell(r, c)) for c in cols))
    return table


def _fit(title: str, headers: dict[str, str], cols: list[str], drop: list[str], rows: list[dict[str, Any]],
         width: int) -> tuple[RenderableType, list[str]]:
    """The table with as many columns as fit in `width` (dropping in `drop` order), or the stacked layout;
    the dropped columns' headers come back for the note below."""
    every = list(cols)
    cols = list(cols)
    dropped: list[str] = []
    table = _table(title, headers, cols, rows)
    for c in drop:
        if _width(table) <= width:
            return table, dropped
        if c in cols and not _tells_apart(c, cols, rows):
            cols.remove(c)
            dropped.append(headers[c])
            table = _table(title, headers, cols, rows)
    if _width(table) <= width:
        return table, dropped
    return _stacked(title, headers, every, rows), []  # a block per row has room for every figure


def _tells_apart(c: str, cols: list[str], rows: list[dict[str, Any]]) -> bool:
    """Whether column `c` is what tells two of the shown rows apart (the same job on two providers or teams):
    such a column stays, whatever the width; the table stacks rather than show two rows alike."""
    if c not in ROW_KEYS:
        return False
    keys = [k for k in cols if k in ROW_KEYS]
    rest = [k for k in keys if k != c]
    return len({tuple(r.get(k) for k in rest) for r in rows}) < len({tuple(r.get(k) for k in keys) for r in rows})


def _stacked(title: str, headers: dict[str, str], cols: list[str], rows: list[dict[str, Any]]) -> RenderableType:
    """One block per row: its text fields on one line, then one ``label: value`` line per figure."""
    from rich.text import Text

    lines = [clean(title), ""]
    for r in rows:
        lines.append(" · ".join(_cell(r, c) for c in cols if c in TEXT_KEYS and c != "interruptions_source"))
        for c in cols:
            if c not in TEXT_KEYS or c == "interruptions_source":
                lines.append(f"  {headers[c]}: {_cell(r, c)}")
        lines.append("")
    return Text("\n".join(lines), no_wrap=True)


def render(reports: Sequence[Report], by: str = "job", top: int | None = DEFAULT_TOP,
           width: int = 200) -> list[RenderableType]:
    """What `report` prints on a terminal: the rows table, the notes below it, the totals table."""
    if not reports:
        return []
    sel = select(reports, by, top)
    multi = _periods(reports)
    period = reports[0].period if not multi else f"{reports[0].period} to {reports[-1].period}"
    title = f"Interruption overhead by {'billing account' if by == 'account' else by}, {period} " \
            f"({reports[0].cost_basis} cost)"
    cols = _columns(sel, multi)
    shown = sel.rows + sel.unattributed
    table, dropped = _fit(title, COLUMNS, cols, DROP_ORDER, shown, width)
    out: list[RenderableType] = [table]
    notes: list[str] = []
    if "interruptions_source" in cols and "counted from" not in dropped:
        notes.append("counted from: the lines the interruptions were counted from (fee_lines: restart fee lines, "
                     "signals: interruption signal lines, inferred: stops of churned resources)")
    if dropped:
        notes.append(f"left out to fit {width} columns: {', '.join(dropped)} (a wider terminal, COLUMNS=200, "
                     "or --format json shows them)")
    left = sel.idle + sel.beyond_top
    if left:
        parts = []
        if sel.beyond_top:
            parts.append(f"{sel.beyond_top} beyond --top {top}")
        if sel.idle:
            parts.append(f"{sel.idle} with no overhead and no spot cost")
        notes.append(f"{len(sel.rows)} of {len(sel.rows) + left} {by} rows shown; {left} left out "
                     f"({', '.join(parts)}): --top N shows more, --all shows every row")
    totals = {(rep.period, t["currency"]): t for rep in reports for t in rep.totals.iter_rows(named=True)}
    for u in sel.unattributed:
        cost = totals.get((u["period"], u["currency"]), {}).get("unattributed_cost")
        where = f" in {u['period']}" if multi else ""
        rows = f" ({u['_rows']} row(s) of {u['_providers']} summed)" if u.get("_rows", 1) > 1 else ""
        notes.append(f"{UNATTRIBUTED} {u['currency']}{where}{rows}: {amount(cost, 'unattributed_cost')} "
                     f"{u['currency']} of cost went to no job; map its resources to jobs and teams in "
                     f"{RESOURCE_MAP_HINT}")
    out += [text(n) for n in notes]
    out.append(render_totals(reports, width))
    return out


def render_totals(reports: Sequence[Report], width: int = 200) -> RenderableType:
    """Totals per currency, leading with overhead, its share of measured spot savings (erosion), restart fees
    and how much of the spot cost the savings could be measured for."""
    multi = _periods(reports)
    rows = [{**t, "period": rep.period} for rep in reports for t in rep.totals.iter_rows(named=True)]
    cols = [c for c in TOTAL_COLUMNS if c != "period" or multi]
    table, dropped = _fit("Totals per currency", TOTAL_COLUMNS, cols, TOTAL_DROP_ORDER, rows, width)
    from rich.console import Group

    notes = [text(TOTALS_NOTE)]
    if dropped:
        notes.append(text(f"left out to fit {width} columns: {', '.join(dropped)}"))
    return Group(table, *notes)
