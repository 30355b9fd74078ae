"""The HTML report: one self-contained file a FinOps reviewer can mail around.

``render_html(report)`` returns a single HTML document.  Everything it needs is
inline: the CSS, plotly.js (embedded once, from the installed ``plotly``
package), the figure data and a few lines of start-up script.  Opening it makes
no network request; a Content-Security-Policy in the page forbids any, and only
the page's own two scripts (pinned by hash) may run.

Money is never summed across currencies: every chart is drawn once per currency
and every money cell carries its currency code.  Every text value (job and team
names come from tags on untrusted bills) is escaped, both for HTML and for
plotly's own pseudo-HTML in chart labels.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from datetime import date, datetime, time, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

import plotly.graph_objects as go
import polars as pl
from plotly.offline import get_plotlyjs

import billing_audit
from billing_audit.inert import NOT_MEASURED, clean, json_inert
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

PLOTLY_CONFIG = {"displaylogo": False, "responsive": True, "typesetMath": False, "showLink": False, "showSendToCloud": False}

CSS = """
:root { --fg: #1d2330; --muted: #5b6475; --line: #d9dde5; --bg-alt: #f5f7fa; --warn: #fff4d6; --warn-line: #e0b43a; }
* { box-sizing: border-box; }
body { font-family: -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; color: var(--fg);
       margin: 0 auto; padding: 1.5rem 2rem 4rem; max-width: 1400px; line-height: 1.4; }
h1 { font-size: 1.6rem; margin: 0 0 .25rem; }
h2 { font-size: 1.25rem; margin: 2.2rem 0 .5rem; padding-bottom: .25rem; border-bottom: 2px solid var(--line); }
h3 { font-size: 1.05rem; margin: 1.4rem 0 .4rem; }
p.sub, .note { color: var(--muted); margin: .2rem 0 .8rem; }
nav a { margin-right: 1rem; color: #2458b3; text-decoration: none; }
.warnings { background: var(--warn); border: 1px solid var(--warn-line); border-radius: 6px; padding: .6rem 1rem; }
.warnings ul { margin: .3rem 0; padding-left: 1.2rem; }
.currency-block { margin: 1rem 0 1.5rem; }
.kpis { display: grid; grid-template-columns: repeat(auto-fill, minmax(190px, 1fr)); gap: .6rem; }
.kpi { border: 1px solid var(--line); border-radius: 8px; padding: .6rem .8rem; background: #fff; }
.kpi .label { font-size: .8rem; color: var(--muted); text-transform: uppercase; letter-spacing: .03em; }
.kpi .value { font-size: 1.35rem; font-weight: 600; font-variant-numeric: tabular-nums; white-space: nowrap; }
.kpi .detail { font-size: .78rem; color: var(--muted); }
.chart { width: 100%; min-height: 320px; margin: .4rem 0 1.2rem; }
.scroll { overflow-x: auto; border: 1px solid var(--line); border-radius: 6px; margin: .4rem 0 1rem; }
table { border-collapse: collapse; font-size: .82rem; width: 100%; }
th, td { padding: .3rem .5rem; border-bottom: 1px solid var(--line); vertical-align: top; text-align: left; }
th { background: var(--bg-alt); position: sticky; top: 0; font-weight: 600; white-space: nowrap; }
td[data-field="job"], td[data-field="team"] { white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tbody tr:nth-child(even) { background: #fafbfc; }
.est { font-style: italic; color: #555; }
th.est::after { content: " *"; }
td.reasons ul { margin: 0; padding-left: 1rem; min-width: 22rem; }
.rec { display: inline-block; padding: .05rem .45rem; border-radius: 10px; font-size: .78rem; white-space: nowrap; }
.rec-keep_spot { background: #dff3e3; color: #1d6b30; }
.rec-review { background: #fff1c9; color: #7a5a00; }
.rec-switch_to_on_demand { background: #fbdada; color: #8f1d1d; }
.neg { color: #b3261e; }
.spikes { margin: -.6rem 0 1rem; font-size: .85rem; }
.spikes .spike { color: #b3261e; font-weight: 600; }
footer { margin-top: 3rem; color: var(--muted); font-size: .8rem; }
@media print { .chart { break-inside: avoid; } .scroll { overflow: visible; } }
"""

# Draws every figure from the JSON block; the same text every time, so its CSP hash is stable.
INIT_JS = """
(function () {
  var figures = JSON.parse(document.getElementById("ba-figures").textContent);
  var config = JSON.parse(document.getElementById("ba-plotly-config").textContent);
  var nodes = document.querySelectorAll("div.chart[data-figure]");
  for (var i = 0; i < nodes.length; i++) {
    var fig = figures[nodes[i].getAttribute("data-figure")];
    Plotly.newPlot(nodes[i], fig.data, fig.layout, config);
  }
})();
"""


# ---------------------------------------------------------------- formatting


def _e(v: Any) -> str:
    """A value as escaped HTML text."""
    return html.escape("" if v is None else clean(str(v)), quote=True)


def _pl(v: Any) -> str:
    """A value for plotly text (tick labels, legend, hover): plotly reads a subset of HTML
    and decodes entities once, so escaping &, < and > makes it show the text as it is."""
    return html.escape("" if v is None else clean(str(v)), quote=False)


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


def _f(v: Any) -> float:
    return float(v) if v is not None else 0.0


def _rows(df: pl.DataFrame | None) -> list[dict[str, Any]]:
    return [] if df is None else list(df.iter_rows(named=True))


def _currencies(report: Report) -> list[str]:
    found = {r["currency"] for r in _rows(report.totals)} | {r["currency"] for r in _rows(report.jobs)}
    return sorted(c if c is not None else "?" for c in found)


def eroded_pct(overhead: Any, gross: Any) -> float | None:
    """Hidden overhead as a percentage of gross spot savings (None when there are no savings)."""
    g = _dec(gross)
    return float(_dec(overhead) / g * 100) if g > 0 else None


# ---------------------------------------------------------------- tables


def _cell(field: str, value: Any, row: dict[str, Any]) -> str:
    est = " est" if field in ESTIMATE_FIELDS else ""
    if value is None and field in NOT_MEASURED:  # spot savings without an on-demand price: not measured
        return f'<td class="num na" data-field="{field}">n/a</td>'
    if field in MONEY:
        neg = " neg" if value is not None and _dec(value) < 0 else ""
        return f'<td class="num{est}{neg}" data-field="{field}">{_e(fmt_money(value, row.get("currency")))}</td>'
    if field == "interruptions" or field in ("lines", "rows", "jobs"):
        return f'<td class="num" data-field="{field}">{_e(fmt_count(value))}</td>'
    if field == "savings_eroded_pct":
        return f'<td class="num" data-field="{field}">{_e(fmt_pct(value))}</td>'
    if field == "spot_hours":
        return f'<td class="num" data-field="{field}">{_e("—" if value is None else f"{float(value):,.2f}")}</td>'
    if field == "recommendation":
        return f'<td data-field="{field}"><span class="rec rec-{_e(value)}">{_e(value)}</span></td>'
    if field == "reasons":
        items = "".join(f"<li>{_e(r)}</li>" for r in (value or []))
        return f'<td class="reasons" data-field="{field}"><ul>{items}</ul></td>'
    if isinstance(value, list):
        return f'<td data-field="{field}">{_e(", ".join(str(x) for x in value))}</td>'
    if isinstance(value, datetime | date):
        value = value.isoformat()
    return f'<td data-field="{field}">{_e(value)}</td>'


def _table(table_id: str, df: pl.DataFrame | None, columns: Sequence[str] | None = None, empty: str = "Nothing to show.") -> str:
    if df is None:
        return f'<p class="note" id="{table_id}-missing">Not available in this report.</p>'
    cols = list(columns) if columns is not None else df.columns
    if df.is_empty():
        return f'<p class="note" id="{table_id}-empty">{_e(empty)}</p>'
    head = []
    for c in cols:
        cls = []
        if c in MONEY or c in ("interruptions", "lines", "rows", "jobs", "savings_eroded_pct", "spot_hours"):
            cls.append("num")
        if c in ESTIMATE_FIELDS:
            cls.append("est")
        attr = f' class="{" ".join(cls)}"' if cls else ""
        head.append(f'<th{attr} data-field="{_e(c)}" title="{_e(c)}">{_e(_label(c))}</th>')
    body = []
    for row in df.iter_rows(named=True):
        body.append("<tr>" + "".join(_cell(c, row.get(c), row) for c in cols) + "</tr>")
    return (f'<div class="scroll"><table id="{table_id}"><thead><tr>{"".join(head)}</tr></thead>'
            f'<tbody>\n{chr(10).join(body)}\n</tbody></table></div>')


# ---------------------------------------------------------------- charts


def _job_labels(rows: list[dict[str, Any]]) -> list[str]:
    """Unique axis labels for one currency's jobs: the job, then its provider, then its team when needed."""
    labels = [str(r["job"]) for r in rows]
    n = Counter(labels)
    labels = [f"{lab} · {r['provider']}" if n[lab] > 1 else lab for lab, r in zip(labels, rows, strict=True)]
    n = Counter(labels)
    return [f"{lab} · {r['team']}" if n[lab] > 1 else lab for lab, r in zip(labels, rows, strict=True)]


def _base_layout(title: str, height: int) -> dict[str, Any]:
    return {
        "title": {"text": title, "x": 0, "xanchor": "left", "font": {"size": 15}},
        "template": "plotly_white",
        "height": height,
        "margin": {"l": 10, "r": 10, "t": 70, "b": 40},
        "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "left", "x": 0},
        "font": {"family": "-apple-system, Segoe UI, Roboto, Helvetica, Arial, sans-serif", "size": 12},
    }


def _no_data(fig: go.Figure, text: str) -> None:
    fig.add_annotation(text=_pl(text), showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5, font={"size": 14})
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)


def _overhead_figure(jobs: list[dict[str, Any]], currency: str) -> go.Figure:
    rows = [r for r in jobs if any(_f(r.get(c)) != 0 for c, *_ in COMPONENTS)]
    labels = [_pl(x) for x in _job_labels(rows)]
    cur = _pl(currency)
    fig = go.Figure()
    for field, name, colour, estimate in COMPONENTS:
        fig.add_trace(go.Bar(
            name=name, y=labels, x=[_f(r.get(field)) for r in rows], orientation="h", meta=cur,
            marker={"color": colour, "pattern": {"shape": "/" if estimate else "", "fgcolor": "#ffffff", "solidity": 0.35},
                    "opacity": 0.75 if estimate else 1.0},
            hovertemplate="%{y}<br>" + name + ": %{x:,.2f} %{meta}<extra></extra>",
        ))
    layout = _base_layout(f"Interruption overhead by job and component, {cur} (hatched bars are estimates)",
                          max(320, 140 + 26 * len(rows)))
    layout["barmode"] = "relative"
    layout["xaxis"] = {"title": {"text": cur}, "tickformat": ",.2f", "zeroline": True}
    layout["yaxis"] = {"type": "category", "autorange": "reversed", "automargin": True}
    fig.update_layout(**layout)
    if not rows:
        _no_data(fig, f"No interruption overhead in {currency}")
    return fig


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
    if days:  # every day of the range, so quiet days show as zero rather than being bridged by the line
        first, last = min(days), max(days)
        if (last - first).days <= 731:
            for n in range((last - first).days + 1):
                days[first + timedelta(days=n)]  # noqa: B018 - creates the zero day
    return [{"day": day, **v} for day, v in sorted(days.items())]


def _midnight(day: date) -> datetime:
    return day if isinstance(day, datetime) else datetime.combine(day, time())


def _daily_figure(days: list[dict[str, Any]], currency: str) -> go.Figure:
    cur = _pl(currency)
    x = [d["day"].isoformat() for d in days]
    fig = go.Figure()
    fig.add_trace(go.Bar(
        name=f"Billed overhead ({cur})", x=x, y=[_f(d["overhead"]) for d in days], marker={"color": "#1f77b4"},
        opacity=0.8, meta=cur, hovertemplate="%{x}<br>billed overhead: %{y:,.2f} %{meta}<extra></extra>",
    ))
    fig.add_trace(go.Scatter(
        name="Interruptions", x=x, y=[_f(d["interruptions"]) for d in days], yaxis="y2", mode="lines+markers",
        line={"color": "#d62728"}, hovertemplate="%{x}<br>interruptions: %{y:,}<extra></extra>",
    ))
    spikes = [d for d in days if d["spikes"]]
    fig.add_trace(go.Scatter(
        name="Spike day (over 3x the job's median)", x=[d["day"].isoformat() for d in spikes],
        y=[_f(d["interruptions"]) for d in spikes], yaxis="y2", mode="markers",
        marker={"symbol": "star", "size": 16, "color": "#b3261e", "line": {"color": "#000", "width": 1}},
        customdata=["<br>".join(f"{_pl(s['job'])} ({_pl(s['provider'])}): {fmt_count(s['interruptions'])} interruptions"
                                for s in d["spikes"]) for d in spikes],
        hovertemplate="%{x} spike<br>%{customdata}<extra></extra>",
    ))
    layout = _base_layout(f"Interruptions and billed overhead per day, {cur} (stars mark spike days)", 380)
    layout["xaxis"] = {"type": "date", "tickformat": "%Y-%m-%d"}
    layout["yaxis"] = {"title": {"text": f"billed overhead ({cur})"}, "tickformat": ",.2f", "rangemode": "tozero"}
    most = max([_f(d["interruptions"]) for d in days] + [1.0])
    layout["yaxis2"] = {"title": {"text": "interruptions"}, "overlaying": "y", "side": "right", "rangemode": "tozero",
                        "showgrid": False, "tickmode": "linear", "tick0": 0, "dtick": max(1, math.ceil(most / 6))}
    layout["shapes"] = [
        {"type": "rect", "xref": "x", "yref": "paper", "y0": 0, "y1": 1, "layer": "below", "line": {"width": 0},
         "fillcolor": "rgba(214, 39, 40, 0.12)",
         "x0": (_midnight(d["day"]) - timedelta(hours=12)).isoformat(),
         "x1": (_midnight(d["day"]) + timedelta(hours=12)).isoformat()}
        for d in spikes
    ]
    fig.update_layout(**layout)
    if not days:
        _no_data(fig, f"No daily data in {currency}")
    return fig


def _savings_figure(jobs: list[dict[str, Any]], currency: str) -> go.Figure:
    # only jobs whose savings are measured: a job without an on-demand price is n/a, never drawn as a loss
    rows = [r for r in jobs if r.get("gross_spot_savings") is not None
            and (_f(r.get("spot_compute_cost")) != 0 or _f(r.get("gross_spot_savings")) != 0)]
    labels = [_pl(x) for x in _job_labels(rows)]
    cur = _pl(currency)
    net = [_f(r.get("net_spot_savings")) for r in rows]
    eroded = [fmt_pct(r.get("savings_eroded_pct")) for r in rows]
    fig = go.Figure()
    fig.add_trace(go.Bar(
        name="Gross spot savings (on-demand equivalent minus spot)", y=labels, x=[_f(r.get("gross_spot_savings")) for r in rows],
        orientation="h", marker={"color": "#9fb7d9"}, meta=cur,
        hovertemplate="%{y}<br>gross spot savings: %{x:,.2f} %{meta}<extra></extra>",
    ))
    fig.add_trace(go.Bar(
        name="Net spot savings (after hidden overhead)", y=labels, x=net, orientation="h", meta=cur,
        marker={"color": ["#2ca02c" if v >= 0 else "#b3261e" for v in net]}, customdata=eroded,
        hovertemplate="%{y}<br>net spot savings: %{x:,.2f} %{meta}<br>savings eroded: %{customdata}<extra></extra>",
    ))
    layout = _base_layout(f"Spot savings before and after interruption overhead, {cur}", max(320, 140 + 34 * len(rows)))
    layout["barmode"] = "group"
    layout["xaxis"] = {"title": {"text": cur}, "tickformat": ",.2f", "zeroline": True, "zerolinewidth": 2}
    layout["yaxis"] = {"type": "category", "autorange": "reversed", "automargin": True}
    fig.update_layout(**layout)
    if not rows:
        _no_data(fig, f"No spot compute in {currency}")
    return fig


def _script_json(obj: Any) -> str:
    """JSON safe inside a <script> block: no <, > or & that the HTML parser could see."""
    text = json_inert(json.dumps(obj, separators=(",", ":"), ensure_ascii=False))
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


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


def render_html(report: Report) -> str:
    """The report as one self-contained HTML document (no network access needed to view it)."""
    currencies = _currencies(report)
    jobs = _rows(report.jobs)
    daily = _rows(report.daily)
    figures: dict[str, Any] = {}
    charts: dict[str, list[str]] = {"overhead": [], "daily": [], "savings": []}
    for i, cur in enumerate(currencies):
        cur_jobs = [r for r in jobs if (r["currency"] or "?") == cur]
        days = _daily_by_day(daily, cur)
        for kind, fig, extra in (
            ("overhead", _overhead_figure(cur_jobs, cur), ""),
            ("daily", _daily_figure(days, cur), _spike_list(days)),
            ("savings", _savings_figure(cur_jobs, cur), ""),
        ):
            key = f"{kind}-{i}"
            figures[key] = json.loads(fig.to_json())
            charts[kind].append(f'<div class="chart" id="chart-{key}" data-figure="{key}" data-kind="{kind}" '
                                f'data-currency="{_e(cur)}"></div>{extra}')

    plotly_js = get_plotlyjs()
    if "</script" in plotly_js.lower():  # pragma: no cover - would break the page
        raise RuntimeError("the installed plotly.js cannot be inlined")
    csp = ("default-src 'none'; "
           f"script-src {_csp_hash(plotly_js)} {_csp_hash(INIT_JS)}; "
           "style-src 'unsafe-inline'; img-src data: blob:; font-src 'none'; connect-src 'none'; "
           "base-uri 'none'; form-action 'none'")

    title = f"Spot interruption overhead: period {report.period}, cost basis {report.cost_basis}"
    unattributed = report.jobs.filter(pl.col("job") == UNATTRIBUTED) if report.jobs is not None else None
    warnings = "".join(f"<li>{_e(w)}</li>" for w in report.warnings)
    warnings_html = (f'<div class="warnings" id="warnings"><strong>Warnings</strong><ul>{warnings}</ul></div>'
                     if report.warnings else '<p class="note" id="warnings">No warnings.</p>')
    totals_cols = None if report.totals is None else report.totals.columns

    body = f"""
<header>
<h1 id="title">{_e(title)}</h1>
<p class="sub">billing-audit {_e(billing_audit.__version__)} &middot; period <strong>{_e(report.period)}</strong>
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
<p class="note">Jobs with any overhead. Hatched, lighter bars (recompute, restart idle) are <strong>estimates</strong>
 from the configured checkpoint interval and restart time, not billed amounts.</p>
{"".join(charts["overhead"])}
<h3>Interruptions and overhead per day</h3>
<p class="note">Billed overhead only (estimates are per job, not per day); unattributed lines are not included.
 A spike day has more than 3x a job's median daily interruptions.</p>
{"".join(charts["daily"])}
<h3>Savings before and after overhead</h3>
<p class="note">Jobs with spot compute. Gross savings are on-demand equivalent minus spot cost, over the spot lines with
 an on-demand price (the export's, a price reference's or the bill's); net savings subtract the hidden overhead (including
 estimates). A job with no priced spot line is n/a and not drawn.</p>
{"".join(charts["savings"])}
</section>

<section id="jobs-section">
<h2>Jobs</h2>
<p class="note">One row per job, team, provider and currency. Columns marked * are estimates.</p>
{_table("jobs", report.jobs, empty="No jobs in this period.")}
</section>

<section id="teams-section">
<h2>Teams</h2>
{_table("teams", report.teams, empty="No teams in this period.")}
</section>

<section id="totals-section">
<h2>Totals per currency</h2>
{_table("totals", report.totals, totals_cols, empty="No totals in this period.")}
</section>

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

<footer>Generated by billing-audit {_e(billing_audit.__version__)}. Charts drawn with plotly.js (MIT licence), embedded in this file.</footer>
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
<script type="application/json" id="ba-figures">{_script_json(figures)}</script>
<script type="application/json" id="ba-plotly-config">{_script_json(PLOTLY_CONFIG)}</script>
<script>{plotly_js}</script>
<script>{INIT_JS}</script>
</body>
</html>
"""
