"""The HTML report in a real browser: headless Chromium opens the rendered file offline.

Needs Debian's /usr/bin/chromium (CI installs it; `.ci/run` does it on a fresh machine)
and the `playwright` Python package from the `test` extra.  Playwright never downloads
a browser here: it drives the system Chromium through ``executable_path``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import billing_audit
from billing_audit.config import load_config
from billing_audit.html import render_html
from billing_audit.report import Report, build_report
from support import FIXTURES

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
CHART_KINDS = ("overhead", "daily", "savings")

EVIL_JOB = "<script>alert(1)</script>"
EVIL_TEAM = '<img src=x onerror="alert(2)">'
EVIL_REASON = "</script><script>alert(3)</script>"
EVIL_WARNING = "<b onmouseover=alert(4)>bold</b>"
ENTITY_JOB = "&lt;b&gt;not bold&lt;/b&gt; & co"  # must show exactly like this, not decoded to <b>
EVIL_CURRENCY = 'E<U>R"'


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    store = billing_audit.open(tmp_path_factory.mktemp("html") / "store.duckdb")
    try:
        ingested = store.ingest([FIXTURES])
        assert not ingested.errors, ingested.errors
        store.tag()
        return build_report(store, load_config(None))
    finally:
        store.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: the HTML report test needs Debian's Chromium "
                    "(apt-get install -y chromium; .ci/run installs it). Do not run `playwright install`.")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # pragma: no cover - the test extra installs it
        pytest.fail("the `playwright` package is missing: pip install -e '.[test]'")
    pw = sync_playwright().start()
    try:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
    except Exception as exc:
        pw.stop()
        pytest.fail(f"could not start {CHROMIUM} through playwright: {exc}")
    yield b
    b.close()
    pw.stop()


class Opened:
    """A page showing one rendered report, with everything it tried to do recorded."""

    def __init__(self, browser: Any, path: Path) -> None:
        self.url = path.resolve().as_uri()
        self.requests: list[str] = []
        self.console_errors: list[str] = []
        self.page_errors: list[str] = []
        self.dialogs: list[str] = []
        self.context = browser.new_context(viewport={"width": 1400, "height": 1000})
        self.page = self.context.new_page()
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("console", lambda m: self.console_errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.page_errors.append(str(e)))
        self.page.on("dialog", self._dialog)
        self.page.goto(self.url, wait_until="load")

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def wait_for_charts(self, n: int) -> None:
        """Until n charts are drawn, each with its svg."""
        self.page.wait_for_function(
            "n => { const c = [...document.querySelectorAll('div.chart.js-plotly-plot')];"
            " return c.length === n && c.every(d => d.querySelector('svg.main-svg')); }", arg=n, timeout=20_000)

    def assert_clean(self) -> None:
        assert self.page_errors == [], f"page errors: {self.page_errors}"
        assert self.console_errors == [], f"console errors: {self.console_errors}"
        assert self.dialogs == [], f"the page opened dialogs: {self.dialogs}"
        others = [u for u in self.requests if u != self.url]
        assert others == [], f"the report made network requests besides its own file: {others}"

    def close(self) -> None:
        self.context.close()


def _open(browser: Any, report: Report, path: Path) -> Opened:
    path.write_text(render_html(report), encoding="utf-8")
    return Opened(browser, path)


def _money(v: Any, currency: str) -> str:
    q = Decimal(str(v if v is not None else 0)).quantize(Decimal("0.01"), rounding=ROUND_HALF_EVEN)
    return f"{abs(q) if q == 0 else q:,.2f} {currency}"


def _currencies(report: Report) -> list[str]:
    return sorted(report.totals["currency"].to_list())


# ---------------------------------------------------------------- the fixtures' report


@pytest.fixture(scope="module")
def opened(browser: Any, report: Report, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Opened]:
    o = _open(browser, report, tmp_path_factory.mktemp("page") / "report.html")
    o.wait_for_charts(len(CHART_KINDS) * len(_currencies(report)))
    yield o
    o.close()


def test_fixture_report_has_data(report: Report) -> None:
    """The checks below mean something only if the fixtures give several currencies, jobs and a spike."""
    assert len(_currencies(report)) >= 2
    assert report.jobs.height >= 5
    assert report.daily["spike"].any()
    assert report.rules_fired is not None and report.rules_fired.height > 0
    assert report.files is not None and report.files.height > 0


def test_opens_offline_without_errors(opened: Opened) -> None:
    opened.page.wait_for_timeout(300)  # let late errors or requests surface
    opened.assert_clean()
    assert opened.requests == [opened.url]


def test_one_chart_of_each_kind_per_currency_is_drawn(opened: Opened, report: Report) -> None:
    currencies = _currencies(report)
    page = opened.page
    assert page.locator(".js-plotly-plot").count() == len(CHART_KINDS) * len(currencies)
    for kind in CHART_KINDS:
        charts = page.locator(f'div.chart[data-kind="{kind}"]')
        assert [charts.nth(i).get_attribute("data-currency") for i in range(charts.count())] == currencies
        for i in range(charts.count()):
            chart = charts.nth(i)
            assert "js-plotly-plot" in (chart.get_attribute("class") or "")
            assert chart.locator(".plot-container").count() == 1
            assert chart.locator("svg.main-svg").count() >= 1, f"{kind} chart {i} has no svg"
            assert chart.locator("g.trace").count() >= 1, f"{kind} chart {i} drew no trace"


def test_overhead_chart_shows_every_job_with_overhead_and_labels_estimates(opened: Opened, report: Report) -> None:
    page = opened.page
    for cur in _currencies(report):
        chart = page.locator(f'div.chart[data-kind="overhead"][data-currency="{cur}"]')
        ticks = " | ".join(chart.locator(".ytick text").all_text_contents())
        jobs = report.jobs.filter((pl.col("currency") == cur) & (pl.col("hidden_overhead_total") != 0))["job"].to_list()
        for job in jobs:
            assert job in ticks, f"{job} missing from the {cur} overhead chart: {ticks}"
        legend = chart.locator(".legendtext").all_text_contents()
        assert "Recompute (estimate)" in legend and "Restart idle (estimate)" in legend
        # the stacked bars are drawn (one bar path per job and component)
        assert chart.locator(".barlayer .point").count() >= len(jobs)


def test_daily_chart_marks_spike_days(opened: Opened, report: Report) -> None:
    page = opened.page
    for cur in _currencies(report):
        spikes = report.daily.filter((pl.col("currency") == cur) & pl.col("spike"))["day"].unique().to_list()
        chart = page.locator(f'div.chart[data-kind="daily"][data-currency="{cur}"]')
        # one star per spike day (the third trace) and one shaded band per spike day
        stars = chart.locator("g.scatterlayer g.trace").nth(1).locator("path.point")
        assert stars.count() == len(spikes)
        assert chart.locator("g.layer-below g.shapelayer path").count() == len(spikes)
        text = page.locator(f'div.chart[data-kind="daily"][data-currency="{cur}"] + p.spikes').inner_text()
        for day in spikes:
            assert day.isoformat() in text


def test_job_table_has_one_row_per_job_and_every_field(opened: Opened, report: Report) -> None:
    page = opened.page
    rows = page.locator("table#jobs tbody tr")
    assert rows.count() == report.jobs.height
    headers = page.locator("table#jobs thead th").evaluate_all("ths => ths.map(th => th.dataset.field)")
    assert headers == report.jobs.columns
    cells = page.locator('table#jobs tbody td[data-field="job"]').all_text_contents()
    assert cells == report.jobs["job"].to_list()
    recs = page.locator('table#jobs tbody td[data-field="recommendation"]').all_text_contents()
    assert recs == report.jobs["recommendation"].to_list()
    reasons = page.locator('table#jobs tbody td[data-field="reasons"]')
    for i, want in enumerate(report.jobs["reasons"].to_list()):
        assert reasons.nth(i).locator("li").all_text_contents() == want
    # money to 2 decimals with the row's currency
    overhead = page.locator('table#jobs tbody td[data-field="hidden_overhead_total"]').all_text_contents()
    assert overhead == [_money(v, c) for v, c in zip(report.jobs["hidden_overhead_total"], report.jobs["currency"], strict=True)]


def test_every_money_cell_shows_its_currency(opened: Opened, report: Report) -> None:
    texts = opened.page.locator("td.num").evaluate_all(
        "tds => tds.filter(td => /cost|fees|charges|savings$|overhead_total|estimate/.test(td.dataset.field))"
        ".map(td => td.textContent)")
    assert texts
    codes = "|".join(re.escape(c) for c in _currencies(report))
    bad = [t for t in texts if not re.fullmatch(rf"(-?[\d,]+\.\d\d ({codes})|—|n/a)", t)]
    assert bad == []
    # "n/a" only where savings are not measured (no priced spot line), exactly as many as the report's NULLs
    na = opened.page.locator("table#jobs td.na").evaluate_all("tds => tds.map(td => td.dataset.field)")
    want = [f for row in report.jobs.iter_rows(named=True) for f in ("on_demand_equivalent_cost", "gross_spot_savings",
            "net_spot_savings", "savings_eroded_pct") if row[f] is None and f in _job_columns(opened)]
    assert sorted(na) == sorted(want) and na


def _job_columns(opened: Opened) -> set[str]:
    return set(opened.page.locator("table#jobs thead th").evaluate_all("ths => ths.map(th => th.dataset.field)"))


def test_headline_numbers_match_totals(opened: Opened, report: Report) -> None:
    page = opened.page
    for t in report.totals.iter_rows(named=True):
        cur = t["currency"]

        def value(field: str, cur: str = cur) -> str:
            return page.locator(f'.kpi[data-currency="{cur}"][data-field="{field}"] .value').inner_text()

        for field in ("hidden_overhead_total", "restart_fees", "gross_spot_savings", "net_spot_savings", "unattributed_cost"):
            assert value(field) == ("n/a" if t[field] is None else _money(t[field], cur)), (cur, field)
        assert value("interruptions") == f"{int(t['interruptions']):,}"
        # erosion over the jobs whose savings are measured: their overhead / their gross savings
        measured = [j for j in report.jobs.iter_rows(named=True)
                    if j["currency"] == cur and j["gross_spot_savings"] is not None]
        gross = sum((Decimal(j["gross_spot_savings"]) for j in measured), Decimal(0))
        overhead = sum((Decimal(j["hidden_overhead_total"]) for j in measured), Decimal(0))
        want = f"{float(overhead / gross * 100):,.1f}%" if gross > 0 else ("n/a" if not measured else "—")
        assert value("savings_eroded_pct") == want
        assert page.locator(f'#unattributed li[data-currency="{cur}"]').inner_text() == _money(t["unattributed_cost"], cur)


def test_teams_rules_files_and_title(opened: Opened, report: Report) -> None:
    page = opened.page
    assert page.locator("table#teams tbody tr").count() == report.teams.height
    assert report.rules_fired is not None and report.files is not None
    assert page.locator('table#rules tbody td[data-field="rule_id"]').all_text_contents() == report.rules_fired["rule_id"].to_list()
    assert page.locator('table#files tbody td[data-field="file"]').all_text_contents() == report.files["file"].to_list()
    title = page.title()
    assert report.period in title and report.cost_basis in title
    # the only warnings: how much of each currency's spot cost has no on-demand price (the fixtures' own gaps)
    assert report.warnings and all(w.startswith("savings measured for ") for w in report.warnings)
    shown = page.locator("#warnings").inner_text()
    assert all(w in shown for w in report.warnings)


# ---------------------------------------------------------------- untrusted text


def _hostile(report: Report) -> Report:
    """The fixtures' report with tag values, reasons, warnings and a currency an attacker could choose."""
    victim = report.jobs.filter(pl.col("hidden_overhead_total") > 0).filter(pl.col("job") != "(unattributed)")["job"][0]
    other = report.jobs.filter(~pl.col("job").is_in([victim, "(unattributed)"]) & (pl.col("hidden_overhead_total") > 0))["job"][0]

    def names(df: pl.DataFrame) -> pl.DataFrame:
        out = df
        if "job" in df.columns:
            out = out.with_columns(pl.col("job").replace({victim: EVIL_JOB, other: ENTITY_JOB}))
        if "team" in df.columns:
            out = out.with_columns(pl.col("team").replace({"vision": EVIL_TEAM}))
        return out.with_columns(pl.col("currency").replace({"EUR": EVIL_CURRENCY}))

    jobs = names(report.jobs).with_columns(pl.col("reasons").list.concat(pl.lit([EVIL_REASON])))
    files = report.files.with_columns(pl.lit(EVIL_JOB).alias("file")) if report.files is not None else None
    return replace(report, jobs=jobs, teams=names(report.teams), daily=names(report.daily), totals=names(report.totals),
                   files=files, warnings=[EVIL_WARNING], period=EVIL_JOB)


def test_untrusted_text_is_escaped_in_the_file(report: Report) -> None:
    text = render_html(_hostile(report))
    for evil in (EVIL_JOB, EVIL_TEAM, EVIL_REASON, EVIL_WARNING, "<img", "<b onmouseover", 'E<U>R"'):
        assert evil not in text, f"{evil!r} reached the HTML unescaped"
    assert text.count("<script") == 4  # two JSON blocks, plotly.js, the start-up script
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text


def test_untrusted_text_renders_as_text_in_the_browser(browser: Any, report: Report, tmp_path: Path) -> None:
    hostile = _hostile(report)
    currencies = sorted(hostile.totals["currency"].to_list())
    o = _open(browser, hostile, tmp_path / "hostile.html")
    try:
        o.wait_for_charts(len(CHART_KINDS) * len(currencies))
        o.page.wait_for_timeout(300)
        o.assert_clean()
        page = o.page
        assert page.locator("script").count() == 4
        assert page.locator("img, b, iframe, object, embed").count() == 0
        jobs = page.locator('table#jobs tbody td[data-field="job"]').all_text_contents()
        assert EVIL_JOB in jobs and ENTITY_JOB in jobs
        assert EVIL_TEAM in page.locator('table#jobs tbody td[data-field="team"]').all_text_contents()
        assert EVIL_REASON in page.locator('table#jobs tbody td[data-field="reasons"] li').all_text_contents()
        assert EVIL_WARNING in page.locator("#warnings li").all_text_contents()
        assert EVIL_JOB in page.title()
        assert page.locator('table#files tbody td[data-field="file"]').first.inner_text() == EVIL_JOB
        # charts: the names show literally on the axis (plotly reads HTML in labels, so they must be escaped for it too)
        ticks = page.locator('div.chart[data-kind="overhead"] .ytick text').all_text_contents()
        assert any(t.startswith(EVIL_JOB) for t in ticks), ticks
        assert any(t.startswith(ENTITY_JOB) for t in ticks), ticks
        assert page.locator(f".kpi[data-currency='{EVIL_CURRENCY}'][data-field=restart_fees] .value").inner_text().endswith(
            " " + EVIL_CURRENCY)
    finally:
        o.close()


# ---------------------------------------------------------------- edge cases


def test_empty_period_renders(browser: Any, tmp_path: Path) -> None:
    store = billing_audit.open(tmp_path / "s.duckdb")
    try:
        store.ingest([FIXTURES])
        store.tag()
        empty = build_report(store, load_config(None), period="1999-01")
    finally:
        store.close()
    assert empty.jobs.is_empty()
    o = _open(browser, empty, tmp_path / "empty.html")
    try:
        o.page.wait_for_timeout(500)
        o.assert_clean()
        assert o.page.locator("#jobs-empty").count() == 1
        assert o.page.locator(".js-plotly-plot").count() == 0
    finally:
        o.close()
