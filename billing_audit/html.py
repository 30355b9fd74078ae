"""The HTML report: one self-contained file a FinOps reviewer can mail around.

``render_html(report, as_of)`` returns a single HTML document.  Everything it needs is
inline: the CSS and the charts, drawn here as plain SVG horizontal bars (no charting
library, no script needed to see them).  Opening it makes no network request; a
Content-Security-Policy in the page forbids any, and only the page's one small script
(pinned by hash: it opens the per-job details before printing) may run.

Money is never summed across currencies: every chart is drawn once per currency
and every money cell carries its currency code.  A saving that cannot be measured
(n/a) is never drawn, and each chart says how many jobs it left out.  Every text
value (job and team names come from tags on untrusted bills) is escaped.
"""

from __future__ import annotations

import base64
import hashlib
import html
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

import polars as pl

import billing_audit
from billing_audit.inert import NOT_MEASURED, clean
from billing_audit.report import MONEY_FIELDS, Report
from billing_audit.rollup import UNATTRIBUTED

# (field, legend label, colour, is an estimate)
COMPONENTS: list[tuple[str, str, str, bool]] = [
    ("restart_fees", "Restart fees", "#d62728", False),
    ("other_compute_charges", "Other compute charges", "#ff7f0e", False),
    ("storage_reread_cost", "Storage re-read", "#1f77b4", False),
    ("checkpoint_egress_cost", "Checkpoint egress", "#9467bd", False),
    ("recompute_cost_estimate", "Recompute (estimate)", "#8c8c8c", True),
    ("restart_idle_cost_estimate", "Restart idle (estimate)", "#bcbd22", True),
]
ESTIMATE_FIELDS = {"recompute_cost_estimate", "restart_idle_cost_estimate"}
MONEY = set(MONEY_FIELDS) | {"total_cost", "spot_hourly_cost", "unattributed_cost", "overhead"}
COUNTS = {"interruptions", "lines", "rows", "jobs"}
TOP = 10  # jobs drawn per chart; the rest are summed into one "other N jobs" bar
TOP_DAYS = 31  # active days drawn in the daily chart
# What a reviewer reads in the jobs table; every other field is in the row's details.
JOB_COLUMNS = ["job", "team", "currency", "hidden_overhead_total", "savings_eroded_pct", "restart_fees", "recommendation"]
JOB_HEADERS = {"hidden_overhead_total": "overhead", "savings_eroded_pct": "share of savings",
               "restart_fees": "restart fees"}

# The headline numbers shown per currency: (field, label).  ``savings_eroded_pct`` is
# computed here from the totals (hidden overhead / gross spot savings), as report.py
# does for teams.
HEADLINES: list[tuple[str, str]] = [
    ("hidden_overhead_total", "Hidden overhead total"),
    ("checkpoint_io_unlinked", "Checkpoint I/O outside restart windows"),
    ("restart_fees", "Restart fees"),
    ("gross_spot_savings", "Gross spot savings"),
    ("net_spot_savings", "Net spot savings"),
    ("savings_eroded_pct", "Savings eroded"),
    ("interruptions", "Interruptions"),
    ("unattributed_cost", "Unattributed cost"),
]

CSS = """
:root { --fg: #1d2330; --muted: #5b6475; --line: #d9dde5; --bg-alt: #f5f7fa; --warn: #fff4d6; --warn-line: #e0b43a; }
* { box-sizing: border-box; }
html { -webkit-text-size-adjust: 100%; }
body { font-family: -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; color: var(--fg);
       margin: 0 auto; padding: 1rem 1rem 3rem; max-width: 1200px; line-height: 1.4; overflow-wrap: anywhere; }
h1 { font-size: 1.5rem; margin: 0 0 .25rem; }
h2 { font-size: 1.25rem; margin: 2rem 0 .5rem; padding-bottom: .25rem; border-bottom: 2px solid var(--line); }
h3 { font-size: 1.05rem; margin: 1.4rem 0 .4rem; }
p.sub, .note { color: var(--muted); margin: .2rem 0 .8rem; }
nav { display: flex; flex-wrap: wrap; gap: .3rem 1rem; }
nav a { color: #2458b3; text-decoration: none; }
.warnings { background: var(--warn); border: 1px solid var(--warn-line); border-radius: 6px; padding: .6rem 1rem; }
.warnings ul { margin: .3rem 0; padding-left: 1.2rem; }
.currency-block { margin: 1rem 0 1.5rem; }
.kpis { display: grid; grid-template-columns: repeat(auto-fill, minmax(min(100%, 190px), 1fr)); gap: .6rem; }
.kpi { border: 1px solid var(--line); border-radius: 8px; padding: .6rem .8rem; background: #fff; min-width: 0; }
.kpi .label { font-size: .8rem; color: var(--muted); text-transform: uppercase; letter-spacing: .03em; }
.kpi .value { font-size: 1.3rem; font-weight: 600; font-variant-numeric: tabular-nums; }
.kpi .detail { font-size: .78rem; color: var(--muted); }
.chart { margin: .4rem 0 1.4rem; max-width: 100%; }
.chart h4 { margin: .2rem 0; font-size: .95rem; }
.chart svg { display: block; width: 100%; height: auto; max-width: 900px; }
.chart svg text { font-size: 12px; fill: #1d2330; }
.chart svg text.value { fill: #5b6475; font-size: 11px; }
.chart svg line.zero { stroke: #1d2330; stroke-width: 1; }
.chart svg .est { fill-opacity: .55; }
.legend { list-style: none; display: flex; flex-wrap: wrap; gap: .2rem 1rem; padding: 0; margin: .3rem 0; font-size: .8rem; }
.swatch { display: inline-block; width: .8rem; height: .8rem; margin-right: .3rem; vertical-align: -.1rem; border-radius: 2px; }
.swatch.est { opacity: .55; }
.left-out { font-size: .85rem; color: var(--muted); margin: .2rem 0; }
.scroll { overflow-x: auto; max-width: 100%; border: 1px solid var(--line); border-radius: 6px; margin: .4rem 0 1rem; }
table { border-collapse: collapse; font-size: .82rem; width: 100%; }
th, td { padding: .3rem .5rem; border-bottom: 1px solid var(--line); vertical-align: top; text-align: left; }
th { background: var(--bg-alt); font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tbody tr:nth-child(even) { background: #fafbfc; }
.est { font-style: italic; color: #555; }
th.est::after { content: " *"; }
details summary { cursor: pointer; color: #2458b3; white-space: nowrap; }
dl.fields { display: grid; grid-template-columns: max-content minmax(0, 1fr); gap: .1rem .8rem; margin: .4rem 0; }
dl.fields dt { color: var(--muted); }
dl.fields dd { margin: 0; font-variant-numeric: tabular-nums; }
dl.fields ul { margin: 0; padding-left: 1rem; }
.rec { display: inline-block; padding: .05rem .45rem; border-radius: 10px; font-size: .78rem; white-space: nowrap; }
.rec-keep_spot { background: #dff3e3; color: #1d6b30; }
.rec-review { background: #fff1c9; color: #7a5a00; }
.rec-switch_to_on_demand { background: #fbdada; color: #8f1d1d; }
.neg { color: #b3261e; }
.spikes { margin: 0 0 1rem; font-size: .85rem; }
.spikes .spike { color: #b3261e; font-weight: 600; }
footer { margin-top: 3rem; color: var(--muted); font-size: .8rem; }
@media print {
  body { max-width: none; padding: 0; font-size: 10pt; }
  nav, details summary { display: none; }
  .scroll { overflow: visible; border: 0; }
  table { table-layout: fixed; }
  th, td, td.num, th.num { white-space: normal; overflow-wrap: anywhere; padding: .2rem .25rem; }
  .chart svg { max-width: 100%; }
  dl.fields { grid-template-columns: minmax(0, 2fr) minmax(0, 3fr); }
  dl.fields dt, dl.fields dd { overflow-wrap: anywhere; }
  .chart, .kpi, tr, .currency-block { break-inside: avoid; }
  h2, h3 { break-after: avoid; }
  th { position: static; }
  a { color: inherit; }
}
"""

# Not needed to read the report: opens every row's details before printing, so the paper has them all.
PRINT_JS = ('window.addEventListener("beforeprint", function () {'
            ' document.querySelectorAll("details").forEach(function (d) { d.open = true; }); });')


# ---------------------------------------------------------------- formatting


def _e(v: Any) -> str:
    """A value as escaped HTML text (also safe inside SVG and quoted attributes)."""
    return html.escape("" if v is None else clean(str(v)), quote=True)


def _dec(v: Any) -> Decimal:
    if v is None:
        return Decimal(0)
    if isinstance(v, Decimal):
        return v
    return Decimal(str(v))


def fmt_money(v: Any, currency: str | None) -> str:
    """Money to 2 decimals (half-even) with thousands separators and the currency code."""
    if v is None:
        return "—"
    q = _dec(v).quantize(Decimal("0.01"), rounding=ROUND_HALF_EVEN)
    if q == 0:
        q = abs(q)  # no "-0.00"
    return f"{q:,.2f} {currency or '?'}"


def fmt_count(v: Any) -> str:
    if v is None:
        return "—"
    d = _dec(v)
    if d == d.to_integral_value():
        return f"{int(d):,}"
    return f"{d.quantize(Decimal('0.01'), rounding=ROUND_HALF_EVEN):,.2f}"


def fmt_pct(v: Any) -> str:
    if v is None:
        return "—"
    return f"{float(v):,.1f}%"


def _label(field: str) -> str:
    return field.replace("_", " ")


def _rows(df: pl.DataFrame | None) -> list[dict[str, Any]]:
    return [] if df is None else list(df.iter_rows(named=True))


def _currencies(report: Report) -> list[str]:
    found = {r["currency"] for r in _rows(report.totals)} | {r["currency"] for r in _rows(report.jobs)}
    return sorted(c if c is not None else "?" for c in found)


def eroded_pct(overhead: Any, gross: Any) -> float | None:
    """Hidden overhead as a percentage of gross spot savings (None when there are no savings)."""
    g = _dec(gross)
    return float(_dec(overhead) / g * 100) if g > 0 else None


def period_range(report: Report) -> str:
    """The periods the report covers: its one period, or the first and last the ingested files hold."""
    if report.period != "all":
        return report.period
    held = sorted({p.strip() for r in _rows(report.files) if r.get("periods")
                   for p in str(r["periods"]).split(",") if p.strip()})
    if not held:
        days = sorted(r["day"] for r in _rows(report.daily) if r.get("day") is not None)
        held = [days[0].strftime("%Y-%m"), days[-1].strftime("%Y-%m")] if days else []
    if not held:
        return "no periods"
    return held[0] if held[0] == held[-1] else f"{held[0]} to {held[-1]}"


def fmt_as_of(as_of: datetime | None) -> str:
    return "unknown" if as_of is None else as_of.strftime("%Y-%m-%d %H:%M")


def report_title(report: Report, as_of: datetime | None) -> str:
    return (f"Spot interruption overhead, {period_range(report)} (data as of {fmt_as_of(as_of)}), "
            f"cost basis {report.cost_basis}")


def zero_only(row: dict[str, Any]) -> bool:
    """A row whose every amount and count is zero or not measured: nothing to review."""
    return all(row.get(c) is None or _dec(row[c]) == 0 for c in row if c in MONEY or c in ("interruptions",))


# ---------------------------------------------------------------- tables


def _value_html(field: str, value: Any, row: dict[str, Any]) -> tuple[str, str]:
    """(css classes, escaped inner HTML) of one value."""
    est = " est" if field in ESTIMATE_FIELDS else ""
    if value is None and field in NOT_MEASURED:  # spot savings without an on-demand price: not measured
        return "num na", "n/a"
    if field in MONEY:
        neg = " neg" if value is not None and _dec(value) < 0 else ""
        return f"num{est}{neg}", _e(fmt_money(value, row.get("currency")))
    if field in COUNTS:
        return "num", _e(fmt_count(value))
    if field == "savings_eroded_pct":
        return "num", _e(fmt_pct(value))
    if field == "spot_hours":
        return "num", _e("—" if value is None else f"{float(value):,.2f}")
    if field == "recommendation":
        return "", f'<span class="rec rec-{_e(value)}">{_e(value)}</span>'
    if field == "reasons":
        return "reasons", "<ul>" + "".join(f"<li>{_e(r)}</li>" for r in (value or [])) + "</ul>"
    if isinstance(value, list):
        return "", _e(", ".join(str(x) for x in value))
    if isinstance(value, datetime | date):
        value = value.isoformat()
    return "", _e(value)


def _cell(field: str, value: Any, row: dict[str, Any]) -> str:
    cls, inner = _value_html(field, value, row)
    attr = f' class="{cls}"' if cls else ""
    return f'<td{attr} data-field="{_e(field)}">{inner}</td>'


def _head(cols: Sequence[str], labels: dict[str, str] | None = None) -> str:
    head = []
    for c in cols:
        cls = []
        if c in MONEY or c in COUNTS or c in ("savings_eroded_pct", "spot_hours"):
            cls.append("num")
        if c in ESTIMATE_FIELDS:
            cls.append("est")
        attr = f' class="{" ".join(cls)}"' if cls else ""
        text = (labels or {}).get(c, _label(c))
        head.append(f'<th{attr} data-field="{_e(c)}" title="{_e(c)}">{_e(text)}</th>')
    return "".join(head)


def _table(table_id: str, df: pl.DataFrame | None, columns: Sequence[str] | None = None, empty: str = "Nothing to show.",
           rows: list[dict[str, Any]] | None = None) -> str:
    if df is None:
        return f'<p class="note" id="{table_id}-missing">Not available in this report.</p>'
    cols = list(columns) if columns is not None else df.columns
    shown = _rows(df) if rows is None else rows
    if not shown:
        return f'<p class="note" id="{table_id}-empty">{_e(empty)}</p>'
    body = ["<tr>" + "".join(_cell(c, row.get(c), row) for c in cols) + "</tr>" for row in shown]
    return (f'<div class="scroll"><table id="{table_id}"><thead><tr>{_head(cols)}</tr></thead>'
            f'<tbody>\n{chr(10).join(body)}\n</tbody></table></div>')


def _jobs_table(df: pl.DataFrame | None) -> str:
    """The columns a reviewer reads, then every field of the row one click away (a <details> per row)."""
    if df is None:
        return '<p class="note" id="jobs-missing">Not available in this report.</p>'
    if df.is_empty():
        return '<p class="note" id="jobs-empty">No jobs in this period.</p>'
    cols = [c for c in JOB_COLUMNS if c in df.columns]
    rest = [c for c in df.columns if c not in cols]
    body = []
    for row in df.iter_rows(named=True):
        fields = []
        for c in rest:
            cls, inner = _value_html(c, row.get(c), row)
            attr = f' class="{cls}"' if cls else ""
            fields.append(f'<dt title="{_e(c)}">{_e(_label(c))}</dt><dd{attr} data-field="{_e(c)}">{inner}</dd>')
        details = (f'<td class="more"><details><summary>all fields</summary>'
                   f'<dl class="fields">{"".join(fields)}</dl></details></td>')
        body.append("<tr>" + "".join(_cell(c, row.get(c), row) for c in cols) + details + "</tr>")
    head = _head(cols, JOB_HEADERS) + '<th data-field="more">details</th>'
    return (f'<div class="scroll"><table id="jobs"><thead><tr>{head}</tr></thead>'
            f'<tbody>\n{chr(10).join(body)}\n</tbody></table></div>')


# ---------------------------------------------------------------- charts (inline SVG)


@dataclass
class Segment:
    field: str
    name: str
    colour: str
    value: Decimal
    estimate: bool = False


@dataclass
class Bar:
    """One row of a chart: a label and one or more bars (each a stack of segments)."""

    label: str
    bars: list[list[Segment]]
    job: str | None = None  # the job it stands for (None for "other N jobs" and days)
    note: str = ""  # shown after the value (e.g. "2 interruptions")
    spike: bool = False


def _job_labels(rows: list[dict[str, Any]]) -> list[str]:
    """Unique labels for one currency's jobs: the job, then its provider, then its team when needed."""
    labels = [str(r["job"]) for r in rows]
    n = Counter(labels)
    labels = [f"{lab} · {r['provider']}" if n[lab] > 1 else lab for lab, r in zip(labels, rows, strict=True)]
    n = Counter(labels)
    return [f"{lab} · {r['team']}" if n[lab] > 1 else lab for lab, r in zip(labels, rows, strict=True)]


def _short(text: str, n: int = 26) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


W, LABEL_W, VALUE_W, BAR_H, GAP = 720, 180, 215, 14, 9


def _svg(key: str, rows: list[Bar], currency: str) -> str:
    """Horizontal bars: positive segments stack right of the zero line, negative ones left of it."""
    ends = [0.0]
    for row in rows:
        for bar in row.bars:
            ends.append(float(sum((s.value for s in bar if s.value > 0), Decimal(0))))
            ends.append(float(sum((s.value for s in bar if s.value < 0), Decimal(0))))
    lo, hi = min(ends), max(ends)
    span = (hi - lo) or 1.0
    x0, pw = LABEL_W, W - LABEL_W - VALUE_W
    zero = x0 + (0 - lo) / span * pw
    out: list[str] = []
    y = 4
    for row in rows:
        height = len(row.bars) * (BAR_H + 2) - 2
        cls = "row spike" if row.spike else "row"
        job = f' data-job="{_e(row.job)}"' if row.job is not None else ""
        out.append(f'<g class="{cls}"{job}><title>{_e(row.label)}</title>'
                   f'<text class="label" x="{LABEL_W - 6}" y="{y + height / 2 + 4:.1f}" text-anchor="end">'
                   f'{_e(_short(row.label))}</text>')
        for i, bar in enumerate(row.bars):
            by = y + i * (BAR_H + 2)
            right, left = zero, zero
            for s in bar:
                w = abs(float(s.value)) / span * pw
                if s.value == 0:
                    continue
                if s.value > 0:
                    x, right = right, right + w
                else:
                    left -= w
                    x = left
                est = ' class="bar est"' if s.estimate else ' class="bar"'
                out.append(f'<rect{est} data-field="{_e(s.field)}" data-value="{s.value.quantize(Decimal("0.01"))}" '
                           f'x="{x:.2f}" y="{by}" width="{max(w, 0.5):.2f}" height="{BAR_H}" fill="{s.colour}">'
                           f'<title>{_e(row.label)}: {_e(s.name)} {_e(fmt_money(s.value, currency))}</title></rect>')
            total = sum((s.value for s in bar), Decimal(0))
            tx = max(right, zero) + 4
            note = f" · {row.note}" if row.note and i == 0 else ""
            out.append(f'<text class="value" x="{tx:.1f}" y="{by + BAR_H - 3}">{_e(fmt_money(total, currency))}'
                       f'{_e(note)}</text>')
        out.append("</g>")
        y += height + GAP
    out.append(f'<line class="zero" x1="{zero:.2f}" x2="{zero:.2f}" y1="0" y2="{y}"></line>')
    return (f'<svg id="svg-{_e(key)}" viewBox="0 0 {W} {y}" role="img" aria-label="bar chart" '
            f'xmlns="http://www.w3.org/2000/svg" preserveAspectRatio="xMinYMin meet">{"".join(out)}</svg>')


def _legend(items: Iterable[tuple[str, str, bool]]) -> str:
    lis = "".join(f'<li><span class="swatch{" est" if est else ""}" style="background:{colour}"></span>{_e(name)}</li>'
                  for name, colour, est in items)
    return f'<ul class="legend">{lis}</ul>'


def _chart(kind: str, key: str, currency: str, title: str, rows: list[Bar], legend: str, left_out: str,
           empty: str) -> str:
    drawn = _svg(key, rows, currency) if rows else f'<p class="note no-data">{_e(empty)}</p>'
    lo = f'<p class="left-out">{_e(left_out)}</p>' if left_out else ""
    return (f'<figure class="chart" id="chart-{_e(key)}" data-kind="{kind}" data-currency="{_e(currency)}" '
            f'data-bars="{len(rows)}"><h4>{_e(title)}</h4>{legend if rows else ""}{drawn}{lo}</figure>')


def _top(rows: list[dict[str, Any]], key: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    ranked = sorted(rows, key=lambda r: (-_dec(r.get(key)), str(r["job"]), str(r["team"]), str(r["provider"])))
    return ranked[:TOP], ranked[TOP:]


def _other_label(rest: list[dict[str, Any]]) -> str:
    return f"other {len(rest)} job{'s' if len(rest) != 1 else ''}"


def _overhead_chart(jobs: list[dict[str, Any]], currency: str, key: str) -> str:
    with_overhead = [r for r in jobs if any(_dec(r.get(c)) != 0 for c, *_ in COMPONENTS)]
    top, rest = _top(with_overhead, "hidden_overhead_total")

    def segments(src: list[dict[str, Any]]) -> list[Segment]:
        return [Segment(f, name, colour, sum((_dec(r.get(f)) for r in src), Decimal(0)), est)
                for f, name, colour, est in COMPONENTS]

    rows = [Bar(label, [segments([r])], job=str(r["job"])) for label, r in zip(_job_labels(top), top, strict=True)]
    if rest:
        rows.append(Bar(_other_label(rest), [segments(rest)]))
    zero = len(jobs) - len(with_overhead)
    left_out = f"{zero} job{'s' if zero != 1 else ''} with no overhead not drawn." if zero else ""
    return _chart("overhead", key, currency, f"Interruption overhead by job, {currency} (top {TOP}, biggest first)", rows,
                  _legend((n, c, est) for _, n, c, est in COMPONENTS), left_out, f"No interruption overhead in {currency}")


def _daily_by_day(daily: list[dict[str, Any]], currency: str) -> list[dict[str, Any]]:
    days: dict[Any, dict[str, Any]] = defaultdict(lambda: {"interruptions": Decimal(0), "overhead": Decimal(0), "spikes": []})
    for r in daily:
        if r["currency"] != currency or r["day"] is None:
            continue
        d = days[r["day"]]
        d["interruptions"] += _dec(r["interruptions"])
        d["overhead"] += _dec(r["overhead"])
        if r.get("spike"):
            d["spikes"].append(r)
    return [{"day": day, **v} for day, v in sorted(days.items())]


def _daily_chart(days: list[dict[str, Any]], currency: str, key: str) -> str:
    active = [d for d in days if d["interruptions"] != 0 or d["overhead"] != 0 or d["spikes"]]
    shown = sorted(sorted(active, key=lambda d: (not d["spikes"], -d["overhead"], -d["interruptions"]))[:TOP_DAYS],
                   key=lambda d: d["day"])
    rows = [Bar(d["day"].isoformat() + (" ★ spike" if d["spikes"] else ""),
                [[Segment("overhead", "billed overhead", "#b3261e" if d["spikes"] else "#1f77b4", d["overhead"])]],
                note=f"{fmt_count(d['interruptions'])} interruptions", spike=bool(d["spikes"])) for d in shown]
    more = len(active) - len(shown)
    left_out = f"{more} other active day{'s' if more != 1 else ''} with less overhead not drawn." if more else ""
    legend = _legend([("billed overhead", "#1f77b4", False), ("spike day (over 3x the job's median)", "#b3261e", False)])
    return _chart("daily", key, currency, f"Billed overhead and interruptions per day, {currency}", rows, legend,
                  left_out, f"No daily data in {currency}")


def _savings_chart(jobs: list[dict[str, Any]], currency: str, key: str) -> str:
    # only jobs whose savings are measured: a job without an on-demand price is n/a, never drawn (never a loss)
    spot = [r for r in jobs if _dec(r.get("spot_compute_cost")) != 0 or r.get("gross_spot_savings") is not None]
    measured = [r for r in spot if r.get("gross_spot_savings") is not None and r.get("net_spot_savings") is not None]
    top, rest = _top(measured, "gross_spot_savings")

    def bars(src: list[dict[str, Any]]) -> list[list[Segment]]:
        gross = sum((_dec(r["gross_spot_savings"]) for r in src), Decimal(0))
        net = sum((_dec(r["net_spot_savings"]) for r in src), Decimal(0))
        return [[Segment("gross_spot_savings", "gross spot savings", "#9fb7d9", gross)],
                [Segment("net_spot_savings", "net spot savings", "#2ca02c" if net >= 0 else "#b3261e", net)]]

    rows = [Bar(label, bars([r]), job=str(r["job"]), note=f"{fmt_pct(r.get('savings_eroded_pct'))} eroded")
            for label, r in zip(_job_labels(top), top, strict=True)]
    if rest:
        rows.append(Bar(_other_label(rest), bars(rest)))
    na = len(spot) - len(measured)
    left_out = (f"{na} job{'s' if na != 1 else ''} with unmeasured savings (n/a: no on-demand price) left out."
                if na else "")
    legend = _legend([("gross spot savings", "#9fb7d9", False), ("net spot savings (after hidden overhead)", "#2ca02c", False),
                      ("net loss", "#b3261e", False)])
    return _chart("savings", key, currency, f"Spot savings before and after overhead, {currency} (top {TOP} by gross savings)",
                  rows, legend, left_out, f"No measured spot savings in {currency}")


def _csp_hash(script: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii") + "'"

# ---------------------------------------------------------------- sections


def _headlines(report: Report, currencies: Iterable[str]) -> str:
    totals = {r["currency"]: r for r in _rows(report.totals)}
    out = []
    for cur in currencies:
        t = totals.get(cur, {})
        estimates = _dec(t.get("recompute_cost_estimate")) + _dec(t.get("restart_idle_cost_estimate"))
        details = {
            "hidden_overhead_total": f"incl. {fmt_money(estimates, cur)} estimated (recompute, restart idle)",
            "checkpoint_io_unlinked": "checkpoint re-reads and egress no interruption caused: not overhead",
            "gross_spot_savings": (f"on-demand equivalent {fmt_money(t.get('on_demand_equivalent_cost'), cur)}"
                                   + (f", measured for {fmt_pct(t.get('savings_coverage_pct'))} of spot cost"
                                      if t.get("spot_unpriced_cost") else "")),
            "net_spot_savings": "gross savings minus hidden overhead",
            "savings_eroded_pct": "hidden overhead / gross spot savings",
            "unattributed_cost": f"of {fmt_money(t.get('total_cost'), cur)} total cost",
        }
        cards = []
        for field, label in HEADLINES:
            if field == "savings_eroded_pct":
                value = fmt_pct(t["savings_eroded_pct"] if "savings_eroded_pct" in t
                                else eroded_pct(t.get("hidden_overhead_total"), t.get("gross_spot_savings")))
                value = "n/a" if t.get("gross_spot_savings") is None and t else value
            elif field in NOT_MEASURED and t and t.get(field) is None:
                value = "n/a"
            elif field == "interruptions":
                value = fmt_count(t.get(field))
            else:
                value = fmt_money(t.get(field), cur)
            detail = f'<div class="detail">{_e(details[field])}</div>' if field in details else ""
            cards.append(f'<div class="kpi" data-currency="{_e(cur)}" data-field="{field}">'
                         f'<div class="label">{_e(label)}</div><div class="value">{_e(value)}</div>{detail}</div>')
        out.append(f'<div class="currency-block" data-currency="{_e(cur)}"><h3>{_e(cur)}</h3>'
                   f'<div class="kpis">{"".join(cards)}</div></div>')
    return "\n".join(out)


def _spike_list(days: list[dict[str, Any]]) -> str:
    items = []
    for d in days:
        for s in d["spikes"]:
            items.append(f'<span class="spike">{_e(d["day"].isoformat())}</span> {_e(s["job"])} ({_e(s["provider"])}): '
                         f'{_e(fmt_count(s["interruptions"]))} interruptions, {_e(fmt_money(s["overhead"], s["currency"]))} billed overhead')
    if not items:
        return '<p class="spikes note">No spike days.</p>'
    return '<p class="spikes">Spike days: ' + "; ".join(items) + "</p>"


def _text_frame(rows: list[dict[str, Any]], cols: list[str]) -> pl.DataFrame:
    return pl.DataFrame([{c: None if r.get(c) is None else (",".join(r[c]) if isinstance(r[c], list) else str(r[c]))
                          for c in cols} for r in rows], schema={c: pl.Utf8 for c in cols})


def _reconciliation(rec: dict[str, Any] | None) -> str:
    """The fee reconciliation (billing_audit.reconcile): totals per currency, the fees to dispute, the interruptions
    without a fee, and what could not be reconciled."""
    if rec is None:
        return ('<section id="reconciliation-section"><h2>Fee reconciliation</h2><p class="note" '
                'id="reconciliation-missing">Not available in this report.</p></section>')
    if not rec["providers_reconciled"]:
        held = "".join(f"<li>{_e(n['provider'])}: {_e(n['fee_lines'])} fee line(s) not reconciled: {_e(n['reason'])}</li>"
                       for n in rec["not_reconciled"])
        return ('<section id="reconciliation-section"><h2>Fee reconciliation</h2><p class="note" id="reconciliation-none">'
                'No interruption events are in the store: the restart fees are not reconciled.</p>'
                f'<ul id="not-reconciled">{held}</ul></section>')
    fee_cols = ["line_id", "provider", "resource_id", "charge_period_start", "charge_period_end", "restarts_billed",
                "interruptions_observed", "billed_cost", "disputable_amount", "currency", "source"]
    ev_cols = ["provider", "resource_id", "time", "kinds", "resource_in_bills"]
    tot_cols = ["currency", "fee_lines", "billed_cost", "fee_lines_disputed", "disputable_amount"]
    others = "".join(f"<li>{_e(n['provider'])}: {_e(n['fee_lines'])} fee line(s) not reconciled: {_e(n['reason'])}</li>"
                     for n in rec["not_reconciled"])
    return f"""<section id="reconciliation-section">
<h2>Fee reconciliation</h2>
<p class="note">Restart fees billed against the interruptions the providers' event logs recorded
 ({_e(", ".join(rec["providers_reconciled"]))}), per resource and charge period. A fee whose restarts no interruption
 accounts for is listed with the part of its cost to dispute.</p>
{_table("reconciliation-totals", _text_frame(rec["totals"], tot_cols), empty="No restart fees in this period.")}
<h3>Fees without a matching interruption</h3>
{_table("fees-without-events", _text_frame(rec["fees_without_events"], fee_cols),
        empty="Every restart fee has a matching interruption.")}
<h3>Interruptions without a fee</h3>
{_table("interruptions-without-fee", _text_frame(rec["interruptions_without_fee"], ev_cols),
        empty="Every interruption observed has its fee.")}
{f'<ul id="not-reconciled">{others}</ul>' if others else ""}
</section>"""


def render_html(report: Report, as_of: datetime | None = None) -> str:
    """The report as one self-contained HTML document (no network access needed to view it).  ``as_of``: the
    data's as-of time (the newest delivery's export time), shown in the title; default the report's own, if any."""
    if as_of is None:
        found = getattr(report, "as_of", None)
        as_of = found if isinstance(found, datetime) else None
    currencies = _currencies(report)
    jobs = _rows(report.jobs)
    daily = _rows(report.daily)
    charts: dict[str, list[str]] = {"overhead": [], "daily": [], "savings": []}
    for i, cur in enumerate(currencies):
        cur_jobs = [r for r in jobs if (r["currency"] or "?") == cur]
        days = _daily_by_day(daily, cur)
        charts["overhead"].append(_overhead_chart(cur_jobs, cur, f"overhead-{i}"))
        charts["daily"].append(_daily_chart(days, cur, f"daily-{i}") + _spike_list(days))
        charts["savings"].append(_savings_chart(cur_jobs, cur, f"savings-{i}"))

    csp = ("default-src 'none'; "
           f"script-src {_csp_hash(PRINT_JS)}; "
           "style-src 'unsafe-inline'; img-src data:; font-src 'none'; connect-src 'none'; "
           "base-uri 'none'; form-action 'none'")

    title = report_title(report, as_of)
    unattributed = report.jobs.filter(pl.col("job") == UNATTRIBUTED) if report.jobs is not None else None
    warnings = "".join(f"<li>{_e(w)}</li>" for w in report.warnings)
    warnings_html = (f'<div class="warnings" id="warnings"><strong>Warnings</strong><ul>{warnings}</ul></div>'
                     if report.warnings else '<p class="note" id="warnings">No warnings.</p>')
    totals_cols = None if report.totals is None else report.totals.columns
    teams = _rows(report.teams)
    active_teams = [t for t in teams if not zero_only(t)]
    hidden = len(teams) - len(active_teams)
    hidden_note = (f'<p class="note" id="teams-hidden" data-hidden="{hidden}">{hidden} team row{"s" if hidden != 1 else ""} '
                   "with only zero amounts (no overhead, no cost, no interruptions) not shown.</p>" if hidden else "")

    body = f"""
<header>
<h1 id="title">{_e(title)}</h1>
<p class="sub">billing-audit {_e(billing_audit.__version__)} &middot; period{"" if report.period != "all" else "s"}
 <strong id="period-range">{_e(period_range(report))}</strong>
 &middot; data as of <strong id="as-of">{_e(fmt_as_of(as_of))}</strong>
 &middot; cost basis <strong>{_e(report.cost_basis)}</strong> &middot; currencies: {_e(", ".join(currencies) or "none")}.
 Amounts in different currencies are never added together.</p>
<nav><a href="#headline">Headline</a><a href="#charts">Charts</a><a href="#jobs-section">Jobs</a><a href="#teams-section">Teams</a>
<a href="#unattributed-section">Unattributed</a><a href="#rules-section">Rules fired</a><a href="#files-section">Files</a></nav>
</header>
{warnings_html}

<section id="headline">
<h2>Headline numbers per currency</h2>
<p class="note">Hidden overhead = restart fees + other compute charges + storage re-read + checkpoint egress
 + recompute and restart-idle <em>estimates</em>. Net spot savings = gross spot savings &minus; hidden overhead.</p>
{_headlines(report, currencies)}
</section>

<section id="charts">
<h2>Charts</h2>
<h3>Overhead by job and component</h3>
<p class="note">The {TOP} jobs with the most overhead, biggest first; the rest summed as one bar. Lighter bars
 (recompute, restart idle) are <strong>estimates</strong> from the configured checkpoint interval and restart time,
 not billed amounts.</p>
{"".join(charts["overhead"])}
<h3>Interruptions and overhead per day</h3>
<p class="note">Days with interruptions or billed overhead, in date order. Billed overhead only (estimates are per job,
 not per day); unattributed lines are not included. A spike day has more than 3x a job's median daily interruptions.</p>
{"".join(charts["daily"])}
<h3>Savings before and after overhead</h3>
<p class="note">The {TOP} jobs with the most gross spot savings (upper bar) and their net savings (lower bar); the rest
 summed as one bar. Gross savings are on-demand equivalent minus spot cost, over the spot lines with an on-demand price
 (the export's, a price reference's or the bill's); net savings subtract the hidden overhead (including estimates).
 A job with no priced spot line is n/a: it is left out, never drawn as a loss.</p>
{"".join(charts["savings"])}
</section>

<section id="jobs-section">
<h2>Jobs</h2>
<p class="note">One row per job, team, provider and currency. Overhead is the hidden overhead total; share of savings is
 that overhead over the job's gross spot savings. Every other field is under the row's <em>all fields</em>;
 fields marked * are estimates.</p>
{_jobs_table(report.jobs)}
</section>

<section id="teams-section">
<h2>Teams</h2>
{hidden_note}
{_table("teams", report.teams, empty="No teams in this period.", rows=active_teams)}
</section>

<section id="totals-section">
<h2>Totals per currency</h2>
{_table("totals", report.totals, totals_cols, empty="No totals in this period.")}
</section>

{_reconciliation(report.fee_reconciliation)}

<section id="unattributed-section">
<h2>Unattributed cost</h2>
<p class="note">Cost on lines that no job tag, resource tag or resource map attributed to a job.</p>
<ul id="unattributed">{"".join(f'<li data-currency="{_e(r["currency"])}">{_e(fmt_money(r.get("unattributed_cost"), r["currency"]))}</li>'
                               for r in _rows(report.totals)) or "<li>none</li>"}</ul>
{_table("unattributed-rows", unattributed, ["team", "provider", "currency", "total_cost", "lines", "hidden_overhead_total",
                                            "storage_reread_cost", "checkpoint_egress_cost", "restart_fees",
                                            "other_compute_charges"], empty="Every line was attributed to a job.")}
</section>

<section id="rules-section">
<h2>Rules that fired</h2>
{_table("rules", report.rules_fired, empty="No rule fired on this period's lines.")}
</section>

<section id="files-section">
<h2>Ingested files</h2>
{_table("files", report.files, empty="No files ingested.")}
</section>

<footer>Generated by billing-audit {_e(billing_audit.__version__)}. Charts drawn as inline SVG; the page loads nothing.</footer>
"""
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_e(csp)}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)}</title>
<style>{CSS}</style>
</head>
<body>
{body}
<script>{PRINT_JS}</script>
</body>
</html>
"""
