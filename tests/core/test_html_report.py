"""The HTML report in a real browser: headless Chromium opens the rendered file offline.

Needs Debian's /usr/bin/chromium (CI installs it; `.ci/run` does it on a fresh machine)
and the `playwright` Python package from the `test` extra.  Playwright never downloads
a browser here: it drives the system Chromium through ``executable_path``.
"""

from __future__ import annotations

import re
from collections import Counter
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

    def __init__(self, browser: Any, path: Path, width: int = 1400) -> None:
        self.url = path.resolve().as_uri()
        self.requests: list[str] = []
        self.console_errors: list[str] = []
        self.page_errors: list[str] = []
        self.dialogs: list[str] = []
        self.context = browser.new_context(viewport={"width": width, "height": 1000})
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
        """Until n charts are laid out (inline SVG: drawn by the parser, no script)."""
        self.page.wait_for_function(
            "n => { const c = [...document.querySelectorAll('figure.chart')];"
            " return c.length === n && c.every(d => d.querySelector('svg, p.no-data')); }", arg=n, timeout=20_000)

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


def _bars(opened: Opened, kind: str, cur: str) -> list[dict[str, Any]]:
    """Each drawn bar of one chart: its row's label and job, field, value, and where it lies against the zero line."""
    return opened.page.locator(f'figure.chart[data-kind="{kind}"][data-currency="{cur}"] svg').evaluate(
        """svg => { const zero = svg.querySelector('line.zero').getBoundingClientRect().left;
        return [...svg.querySelectorAll('g.row')].flatMap(g => [...g.querySelectorAll('rect.bar')].map(r => {
          const b = r.getBoundingClientRect();
          return {label: g.querySelector('text.label').textContent, full: g.querySelector('title').textContent,
                  job: g.dataset.job ?? null, field: r.dataset.field, value: r.dataset.value,
                  left: b.left - zero, right: b.right - zero, width: b.width}; })); }""")


def _labels(opened: Opened, kind: str, cur: str) -> list[str]:
    return opened.page.locator(f'figure.chart[data-kind="{kind}"][data-currency="{cur}"] g.row > title').all_text_contents()


def test_one_chart_of_each_kind_per_currency_is_drawn(opened: Opened, report: Report) -> None:
    currencies = _currencies(report)
    page = opened.page
    assert page.locator("figure.chart svg").count() == len(CHART_KINDS) * len(currencies)
    for kind in CHART_KINDS:
        charts = page.locator(f'figure.chart[data-kind="{kind}"]')
        assert [charts.nth(i).get_attribute("data-currency") for i in range(charts.count())] == currencies
        for i in range(charts.count()):
            chart = charts.nth(i)
            assert chart.locator("svg rect.bar").count() >= 1, f"{kind} chart {i} drew no bar"
            assert chart.locator("svg").bounding_box()["height"] > 20


def _top_by(report: Report, cur: str, field: str, keep: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rows = [r for r in report.jobs.iter_rows(named=True) if r["currency"] == cur and keep(r)]
    rows.sort(key=lambda r: (-Decimal(r[field]), r["job"], r["team"], r["provider"]))
    return rows[:10], rows[10:]


def _has_overhead(r: dict[str, Any]) -> bool:
    return any(r[f] is not None and r[f] != 0 for f in ("restart_fees", "other_compute_charges", "storage_reread_cost", "checkpoint_egress_cost",
                                   "recompute_cost_estimate", "restart_idle_cost_estimate"))


def test_overhead_chart_shows_the_top_jobs_sorted_with_the_rest_summed(opened: Opened, report: Report) -> None:
    page = opened.page
    for cur in _currencies(report):
        chart = page.locator(f'figure.chart[data-kind="overhead"][data-currency="{cur}"]')
        top, rest = _top_by(report, cur, "hidden_overhead_total", _has_overhead)
        jobs = page.locator(f'figure.chart[data-kind="overhead"][data-currency="{cur}"] g.row').evaluate_all(
            "gs => gs.map(g => g.dataset.job ?? null)")
        assert jobs == [r["job"] for r in top] + ([None] if rest else [])
        labels = _labels(opened, "overhead", cur)
        if rest:
            assert labels[-1] == f"other {len(rest)} jobs"
        # each row's bar is as long as its overhead: widths proportional to the hidden overhead total
        bars = _bars(opened, "overhead", cur)
        width: dict[str, float] = {}
        segments: Counter[str] = Counter()
        for b in bars:
            width[b["full"]] = width.get(b["full"], 0.0) + b["width"]
            segments[b["full"]] += 1
        totals = [sum((Decimal(r["hidden_overhead_total"]) for r in top[i:i + 1]), Decimal(0)) for i in range(len(top))]
        if rest:
            totals.append(sum((Decimal(r["hidden_overhead_total"]) for r in rest), Decimal(0)))
        scale = width[labels[0]] / float(totals[0])
        for label, want in zip(labels, totals, strict=True):
            # (a tiny segment is drawn at least half a pixel wide, so it stays visible)
            assert abs(width[label] - float(want) * scale) < 1.0 + 0.5 * segments[label], (cur, label, width[label], want)
        assert all(b["left"] >= -0.5 for b in bars), "an overhead bar is drawn left of zero"
        legend = chart.locator(".legend li").all_text_contents()
        assert "Recompute (estimate)" in legend and "Restart idle (estimate)" in legend
        zero = sum(1 for r in report.jobs.iter_rows(named=True) if r["currency"] == cur and not _has_overhead(r))
        if zero:
            assert chart.locator(".left-out").inner_text() == f"{zero} jobs with no overhead not drawn."


def test_savings_chart_never_draws_an_unmeasured_saving(opened: Opened, report: Report) -> None:
    for cur in _currencies(report):
        jobs = [r for r in report.jobs.iter_rows(named=True) if r["currency"] == cur]
        na = {r["job"] for r in jobs if r["gross_spot_savings"] is None}
        spot_na = [r for r in jobs if r["gross_spot_savings"] is None and r["spot_compute_cost"] != 0]
        top, rest = _top_by(report, cur, "gross_spot_savings", lambda r: r["gross_spot_savings"] is not None)
        bars = _bars(opened, "savings", cur)
        drawn = [b["job"] for b in bars if b["job"] is not None]
        assert not (set(drawn) & (na - {r["job"] for r in top})), "a job with n/a savings is drawn"
        assert [b["job"] for b in bars if b["field"] == "gross_spot_savings"] == \
            [r["job"] for r in top] + ([None] if rest else [])
        for b in bars:  # a bar left of zero only for a measured net loss, and its value is that loss
            if b["left"] < -0.5:
                assert b["field"] == "net_spot_savings" and Decimal(b["value"]) < 0, b
                row = next(r for r in top if r["job"] == b["job"]) if b["job"] else None
                assert row is None or row["net_spot_savings"] is not None
        nets = [Decimal(b["value"]) for b in bars if b["field"] == "net_spot_savings" and b["job"]]
        assert nets == [Decimal(r["net_spot_savings"]).quantize(Decimal("0.01")) for r in top]
        text = opened.page.locator(f'figure.chart[data-kind="savings"][data-currency="{cur}"] .left-out')
        if spot_na:
            assert text.inner_text() == f"{len(spot_na)} jobs with unmeasured savings (n/a: no on-demand price) left out."
    # the fixtures hold a measured loss (llama: 3,220 - 4,644) drawn left of zero, so the check above is exercised
    losses = [b for b in _bars(opened, "savings", "USD") if b["left"] < -0.5]
    assert [(b["job"], b["value"]) for b in losses] == [("llama", "-1424.00")]


def test_daily_chart_marks_spike_days(opened: Opened, report: Report) -> None:
    page = opened.page
    for cur in _currencies(report):
        spikes = report.daily.filter((pl.col("currency") == cur) & pl.col("spike"))["day"].unique().to_list()
        chart = page.locator(f'figure.chart[data-kind="daily"][data-currency="{cur}"]')
        assert chart.locator("g.row.spike").count() == len(spikes)
        marked = chart.locator("g.row.spike > title").all_text_contents()
        assert sorted(marked) == sorted(f"{d.isoformat()} ★ spike" for d in spikes)
        text = page.locator(f'figure.chart[data-kind="daily"][data-currency="{cur}"] + p.spikes').inner_text()
        for day in spikes:
            assert day.isoformat() in text


def test_job_table_shows_the_reviewer_columns_and_the_rest_in_details(opened: Opened, report: Report) -> None:
    page = opened.page
    rows = page.locator("table#jobs tbody tr")
    assert rows.count() == report.jobs.height
    headers = page.locator("table#jobs thead th").evaluate_all("ths => ths.map(th => th.textContent)")
    assert headers == ["job", "team", "currency", "overhead", "share of savings", "restart fees", "recommendation", "details"]
    cells = page.locator('table#jobs tbody td[data-field="job"]').all_text_contents()
    assert cells == report.jobs["job"].to_list()
    recs = page.locator('table#jobs tbody td[data-field="recommendation"]').all_text_contents()
    assert recs == report.jobs["recommendation"].to_list()
    # money to 2 decimals with the row's currency
    overhead = page.locator('table#jobs tbody td[data-field="hidden_overhead_total"]').all_text_contents()
    assert overhead == [_money(v, c) for v, c in zip(report.jobs["hidden_overhead_total"], report.jobs["currency"], strict=True)]
    share = page.locator('table#jobs tbody td[data-field="savings_eroded_pct"]').all_text_contents()
    assert share == ["n/a" if v is None else f"{v:,.1f}%" for v in report.jobs["savings_eroded_pct"]]
    # every other field is in the row's details, hidden until clicked
    first = rows.nth(0)
    dd = first.locator('dd[data-field="spot_compute_cost"]')
    assert not dd.is_visible()
    first.locator("details summary").click()
    assert dd.is_visible()
    assert dd.inner_text() == _money(report.jobs["spot_compute_cost"][0], report.jobs["currency"][0])
    shown = first.locator("dd").evaluate_all("dds => dds.map(d => d.dataset.field)")
    assert shown == [c for c in report.jobs.columns if c not in
                     ("job", "team", "currency", "hidden_overhead_total", "savings_eroded_pct", "restart_fees", "recommendation")]
    reasons = page.locator('table#jobs tbody dd[data-field="reasons"]')
    for i, want in enumerate(report.jobs["reasons"].to_list()):
        assert reasons.nth(i).locator("li").all_text_contents() == want
    first.locator("details summary").click()


def test_zero_only_teams_are_hidden_with_a_count(opened: Opened, report: Report) -> None:
    money = [c for c in report.teams.columns if c not in ("team", "currency", "jobs", "savings_eroded_pct")]
    zero = [t for t in report.teams.iter_rows(named=True) if all(t[c] is None or t[c] == 0 for c in money)]
    assert zero, "the fixtures should hold a team with nothing but zeros"
    page = opened.page
    assert page.locator("table#teams tbody tr").count() == report.teams.height - len(zero)
    assert page.locator("#teams-hidden").get_attribute("data-hidden") == str(len(zero))
    shown = page.locator('table#teams tbody td[data-field="team"]').all_text_contents()
    kept = [t["team"] for t in report.teams.iter_rows(named=True) if t not in zero]
    assert shown == kept


def test_every_money_cell_shows_its_currency(opened: Opened, report: Report) -> None:
    texts = opened.page.locator("td.num, dd.num").evaluate_all(
        "tds => tds.filter(td => /cost|fees|charges|savings$|overhead_total|estimate/.test(td.dataset.field))"
        ".map(td => td.textContent)")
    assert texts
    codes = "|".join(re.escape(c) for c in _currencies(report))
    bad = [t for t in texts if not re.fullmatch(rf"(-?[\d,]+\.\d\d ({codes})|—|n/a)", t)]
    assert bad == []
    # "n/a" only where savings are not measured (no priced spot line), exactly as many as the report's NULLs
    na = opened.page.locator("table#jobs .na").evaluate_all("tds => tds.map(td => td.dataset.field)")
    want = [f for row in report.jobs.iter_rows(named=True) for f in ("on_demand_equivalent_cost", "gross_spot_savings",
            "net_spot_savings", "savings_eroded_pct") if row[f] is None]
    assert sorted(na) == sorted(want) and na


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
    assert page.locator("table#teams tbody tr").count() > 0
    assert report.rules_fired is not None and report.files is not None
    assert page.locator('table#rules tbody td[data-field="rule_id"]').all_text_contents() == report.rules_fired["rule_id"].to_list()
    assert page.locator('table#files tbody td[data-field="file"]').all_text_contents() == report.files["file"].to_list()
    title = page.title()
    periods = sorted({p for f in report.files["periods"].to_list() for p in f.split(",")})
    assert title == (f"Spot interruption overhead, {periods[0]} to {periods[-1]} (data as of unknown), "
                     f"cost basis {report.cost_basis}")
    assert page.locator("h1#title").inner_text() == title
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
    out = replace(report, warnings=[EVIL_WARNING], period=EVIL_JOB)
    out.jobs, out.teams, out.daily, out.totals = jobs, names(report.teams), names(report.daily), names(report.totals)
    out.files = files
    return out


def test_untrusted_text_is_escaped_in_the_file(report: Report) -> None:
    text = render_html(_hostile(report))
    for evil in (EVIL_JOB, EVIL_TEAM, EVIL_REASON, EVIL_WARNING, "<img", "<b onmouseover", 'E<U>R"'):
        assert evil not in text, f"{evil!r} reached the HTML unescaped"
    assert text.count("<script") == 1  # the print helper, nothing else
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
        assert page.locator("script").count() == 1
        assert page.locator("img, b, iframe, object, embed").count() == 0
        jobs = page.locator('table#jobs tbody td[data-field="job"]').all_text_contents()
        assert EVIL_JOB in jobs and ENTITY_JOB in jobs
        assert EVIL_TEAM in page.locator('table#jobs tbody td[data-field="team"]').all_text_contents()
        assert EVIL_REASON in page.locator('table#jobs tbody dd[data-field="reasons"] li').all_text_contents()
        assert EVIL_WARNING in page.locator("#warnings li").all_text_contents()
        assert EVIL_JOB in page.title()
        assert page.locator('table#files tbody td[data-field="file"]').first.inner_text() == EVIL_JOB
        # charts: the names show literally as the bars' labels (SVG text, escaped like the rest)
        ticks = page.locator('figure.chart[data-kind="overhead"] text.label').all_text_contents()
        assert any(t.startswith(EVIL_JOB) for t in ticks), ticks
        assert any(t.endswith("…") and ENTITY_JOB.startswith(t[:-1]) for t in ticks), ticks  # long: cut, in full below
        full = page.locator('figure.chart[data-kind="overhead"] g.row > title').all_text_contents()
        assert EVIL_JOB in full and ENTITY_JOB in full, full
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
        assert o.page.locator("figure.chart svg").count() == 0
        assert o.page.locator("figure.chart p.no-data").count() == 0  # no currency, no chart
        assert o.page.title() == "Spot interruption overhead, 1999-01 (data as of unknown), cost basis effective"
    finally:
        o.close()


# ---------------------------------------------------------------- the demo audit: size, title, 700 px, print


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """`billing-audit audit fixtures/` as the README's demo runs it: the store and its report.html."""
    from billing_audit import app

    folder = tmp_path_factory.mktemp("demo")
    result = app.audit(folder / "d.duckdb", [FIXTURES], folder / "out")
    assert not result.ingest.errors
    return folder / "d.duckdb", folder / "out" / "report.html"


def test_demo_report_is_mailable(demo: tuple[Path, Path]) -> None:
    size = demo[1].stat().st_size
    assert size < 1_500_000, f"report.html is {size:,} bytes"


def test_demo_title_names_the_period_range_and_the_data_as_of_time(browser: Any, demo: tuple[Path, Path]) -> None:
    from billing_audit import app

    db, page_file = demo
    as_of = app.summary_report(str(db)).as_of
    assert as_of is not None
    with billing_audit.open(db, read_only=True) as store:
        periods = sorted({p for (f,) in store.con.execute("SELECT periods FROM ingest_log").fetchall() for p in f.split(",")})
    o = Opened(browser, page_file)
    try:
        o.assert_clean()
        assert o.page.title() == (f"Spot interruption overhead, {periods[0]} to {periods[-1]} "
                                  f"(data as of {as_of:%Y-%m-%d %H:%M}), cost basis effective")
        assert o.page.locator("#as-of").inner_text() == f"{as_of:%Y-%m-%d %H:%M}"
    finally:
        o.close()


_OVERFLOW = """() => { const w = document.documentElement.clientWidth;
  const wide = [...document.querySelectorAll('body *')].filter(e => {
    if (e.closest('.scroll')) return false;  // a table scrolls inside its own box
    const r = e.getBoundingClientRect(); return r.width > 0 && (r.right > w + 0.5 || r.left < -0.5); });
  return {scroll: document.documentElement.scrollWidth, client: w,
          wide: wide.slice(0, 5).map(e => e.tagName + '#' + e.id + '.' + e.className)}; }"""

_OVERLAPS = """() => { const boxes = [...document.querySelectorAll('.kpi, figure.chart, .scroll, section > p, h2, h3')]
  .map(e => [e, e.getBoundingClientRect()]).filter(([e, r]) => r.height > 0);
  const out = [];
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const [a, r] = boxes[i], [b, q] = boxes[j];
    if (a.contains(b) || b.contains(a)) continue;
    if (r.left < q.right - 1 && q.left < r.right - 1 && r.top < q.bottom - 1 && q.top < r.bottom - 1)
      out.push(a.className + ' / ' + b.className);
  } return out.slice(0, 5); }"""


def test_demo_lays_out_at_700px_without_overflow_or_overlap(browser: Any, demo: tuple[Path, Path]) -> None:
    o = Opened(browser, demo[1], width=700)
    try:
        o.assert_clean()
        got = o.page.evaluate(_OVERFLOW)
        assert got["scroll"] <= 700 and got["wide"] == [], got
        assert o.page.evaluate(_OVERLAPS) == []
        # the charts scale to the page: each svg fits, and its labels stay readable (not shrunk below 8 px)
        for box in o.page.locator("figure.chart svg").evaluate_all("ss => ss.map(s => s.getBoundingClientRect().width)"):
            assert 300 < box <= 700
        sizes = o.page.locator("figure.chart svg text.label").evaluate_all(
            "ts => ts.map(t => t.getBoundingClientRect().height)")
        assert sizes and min(sizes) >= 8
    finally:
        o.close()


def test_demo_prints_cleanly(browser: Any, demo: tuple[Path, Path], tmp_path: Path) -> None:
    o = Opened(browser, demo[1], width=700)
    try:
        o.page.emulate_media(media="print")
        assert o.page.locator("nav").is_visible() is False
        closed = o.page.locator("details:not([open])").count()
        assert closed == o.page.locator("table#jobs tbody tr").count() > 0
        o.page.pdf(path=str(tmp_path / "first.pdf"), format="A4")  # printing opens every row's details (beforeprint)
        assert o.page.locator("details:not([open])").count() == 0
        o.page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")  # as beforeprint does
        got = o.page.evaluate(_OVERFLOW.replace("if (e.closest('.scroll')) return false;", ""))
        assert got["scroll"] <= 700 and got["wide"] == [], got  # on paper nothing scrolls: every table fits
        pdf = tmp_path / "report.pdf"
        o.page.pdf(path=str(pdf), format="A4")
        assert pdf.read_bytes().startswith(b"%PDF") and pdf.stat().st_size > 10_000
    finally:
        o.close()


def test_report_command_html_carries_the_period_and_as_of(demo: tuple[Path, Path], tmp_path: Path) -> None:
    """`billing-audit report --period P --format html`: the one period, dated by the deliveries that own it."""
    from click.testing import CliRunner

    from billing_audit import app
    from billing_audit.cli import main

    db = demo[0]
    with billing_audit.open(db, read_only=True) as store:
        owners = store.owners().filter(pl.col("period") == "2026-10")
    want = owners["dated"].max()
    assert want is not None and want != app.summary_report(str(db)).as_of  # an older time than the whole store's
    out = tmp_path / "r.html"
    r = CliRunner().invoke(main, ["report", "--db", str(db), "--period", "2026-10", "--format", "html", "--out", str(out)])
    assert r.exit_code == 0, r.output
    title = re.search(r"<title>(.*?)</title>", out.read_text(encoding="utf-8"))
    assert title is not None
    assert title.group(1) == f"Spot interruption overhead, 2026-10 (data as of {want:%Y-%m-%d %H:%M}), cost basis effective"
