"""Write a Report as JSON, CSV, Markdown or a terminal table, and the finance export."""

from __future__ import annotations

import json
import os
import re
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from billing_audit import inert
from billing_audit.errors import BillingAuditError
from billing_audit.inert import FORMULA_START, NOT_MEASURED, clean, csv_text, json_inert, safe_cell, text, write_csv
from billing_audit.report import FINANCE_COLUMNS, MONEY_FIELDS, Report

if TYPE_CHECKING:
    import polars as pl

__all__ = ["FORMULA_START", "csv_text", "export_frame", "export_totals", "finance_rows", "markdown", "report_json", "rich_table", "rich_totals",
           "safe_cell", "write_csv", "write_export"]
TABLE_COLUMNS = [
    ("job", "job"), ("team", "team"), ("provider", "provider"), ("currency", "cur"),
    ("interruptions", "interruptions"), ("spot_compute_cost", "spot cost"),
    ("gross_spot_savings", "gross savings"), ("restart_fees", "restart fees"),
    ("hidden_overhead_total", "overhead"), ("checkpoint_io_unlinked", "unlinked ckpt I/O"),
    ("net_spot_savings", "net savings"),
    ("savings_eroded_pct", "eroded %"), ("recommendation", "recommendation"),
]
MARKDOWN_COLUMNS = [
    "job", "team", "provider", "currency", "interruptions", "interruptions_source", "spot_compute_cost",
    "on_demand_equivalent_cost", "gross_spot_savings", "restart_fees", "other_compute_charges", "storage_reread_cost",
    "checkpoint_egress_cost", "billed_interruption_overhead", "recompute_cost_estimate", "restart_idle_cost_estimate",
    "estimated_interruption_overhead", "hidden_overhead_total", "checkpoint_io_unlinked", "net_spot_savings",
    "savings_eroded_pct", "recommendation", "over_budget",
]


def report_json(report: Report) -> str:
    """The report as JSON: values exact (it is data), control characters as \\u escapes (never raw)."""
    from billing_audit.jsonout import dumps

    return dumps(report.to_dict()) + "\n"


def _fmt(v: Any, key: str) -> str:
    if v is None:
        return "n/a" if key in NOT_MEASURED else "-"
    if key == "savings_eroded_pct":
        return f"{v:.1f}"
    if key == "interruptions":
        return f"{v.normalize():f}" if isinstance(v, Decimal) else str(v)
    if isinstance(v, Decimal):
        return f"{v:,.2f}"
    return clean(str(v))


def markdown(report: Report) -> str:
    lines = [f"# Interruption overhead, {clean(report.period)} ({report.cost_basis} cost)", ""]
    for w in report.warnings:
        lines.append(f"> warning: {md_text(w)}")
    lines += ["## Totals", ""]
    tot_cols = ["currency", "interruptions", "spot_compute_cost", "gross_spot_savings", "hidden_overhead_total",
                "checkpoint_io_unlinked", "net_spot_savings", "unattributed_cost", "total_cost"]
    lines += _md_table(report.totals, tot_cols)
    lines += ["", "## Jobs", ""]
    lines += _md_table(report.jobs, MARKDOWN_COLUMNS)
    lines += ["", "## Teams", ""]
    lines += _md_table(report.teams, ["team", "currency", "interruptions", *MONEY_FIELDS])
    return "\n".join(lines) + "\n"


_MD_ACTIVE = re.compile(r"([\\`*_\[\]<>|#!~&])")


def md_text(value: str) -> str:
    """Bill text for a markdown table cell: cleaned, on one line, and every character markdown could read as
    syntax (links, emphasis, HTML, the cell separator) backslash-escaped, so it renders as the text it is."""
    return _MD_ACTIVE.sub(r"\\\1", clean(value).replace("\t", " ").replace("\n", " "))


def _md_table(df: pl.DataFrame, cols: list[str]) -> list[str]:
    cols = [c for c in cols if c in df.columns]
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in df.select(cols).iter_rows(named=True):
        cells = [md_text(_fmt(row[c], c)) for c in cols]
        out.append("| " + " | ".join(cells) + " |")
    return out


def rich_table(report: Report) -> Any:
    from rich.table import Table

    table = Table(title=text(f"Interruption overhead by job, {report.period} ({report.cost_basis} cost)"))
    for key, title in TABLE_COLUMNS:
        table.add_column(title, justify="left" if key in ("job", "team", "provider", "currency", "recommendation") else "right")
    for row in report.jobs.iter_rows(named=True):
        cells = [_fmt(row[k], k) for k, _ in TABLE_COLUMNS]
        cells[4] = f"{cells[4]} ({row['interruptions_source']})" if row["interruptions_source"] != "none" else cells[4]
        if row.get("over_budget"):
            cells[-1] = f"{cells[-1]}, over budget"
        table.add_row(*(text(c) for c in cells))  # data, never markup
    return table


def rich_totals(report: Report) -> Any:
    from rich.table import Table

    table = Table(title="Totals per currency")
    cols = ["currency", "interruptions", "spot_compute_cost", "gross_spot_savings", "hidden_overhead_total",
            "net_spot_savings", "unattributed_cost", "total_cost"]
    for c in cols:
        table.add_column(c.replace("_", " "), justify="left" if c == "currency" else "right")
    for row in report.totals.iter_rows(named=True):
        table.add_row(*[text(_fmt(row[c], c)) for c in cols])
    return table


EXPORT_COMPONENTS = FINANCE_COLUMNS
EXPORT_KEYS = {"team": ["team", "currency"], "job": ["job", "team", "provider", "currency"],
               "team,provider": ["team", "provider", "currency"],
               "team,account": ["team", "billing_account", "currency"],
               "team,provider,account": ["team", "provider", "billing_account", "currency"]}
JOB_CSV_EXTRA = ["interruptions_source", "savings_eroded_pct", "recommendation", "over_budget", "budget_breaches",
                 "reasons", "spot_hours", "spot_hourly_cost", "spot_unpriced_cost", "lines"]


def _sum(c: str) -> pl.Expr:
    import polars as pl

    return pl.when(pl.col(c).is_not_null().any()).then(pl.col(c).sum()).otherwise(None).alias(c)


def finance_rows(report: Report, by: str) -> pl.DataFrame:
    """One report's rows in the finance layout: period, the keys of `by`, then FINANCE_COLUMNS (per job, also
    the advice and the job's extras).  report --format csv, audit's CSVs and export all come from here."""
    import polars as pl

    if by not in EXPORT_KEYS:
        raise BillingAuditError(f"--by {by!r}: choose {', '.join(EXPORT_KEYS)}")
    keys = EXPORT_KEYS[by]
    if by == "job":
        df = report.jobs.select([*keys, *FINANCE_COLUMNS, *JOB_CSV_EXTRA])
        df = df.with_columns(df["reasons"].list.join("; ").alias("reasons"),
                             df["budget_breaches"].list.join("; ").alias("budget_breaches"))
    elif by == "team":
        df = report.teams.select([*keys, *FINANCE_COLUMNS])
    elif "billing_account" in keys:  # the job rows split by billing account (each job row's parts sum to it)
        if report.accounts is None:
            raise BillingAuditError(f"--by {by}: this report has no rows by billing account")
        df = report.accounts.rename({"account": "billing_account"}).group_by(keys).agg(
            [_sum(c) for c in FINANCE_COLUMNS])
    else:
        df = report.jobs.group_by(keys).agg([_sum(c) for c in FINANCE_COLUMNS])
    return df.with_columns(pl.lit(report.period).alias("period")).select(["period", *df.columns]).sort(keys)


def export_frame(reports: list[Report], by: str) -> pl.DataFrame:
    """One row per period x team (or job, or team and provider) x currency with every component and the total."""
    import polars as pl

    frames = [finance_rows(r, by).drop(JOB_CSV_EXTRA, strict=False) for r in reports]
    if not frames:
        return pl.DataFrame()
    keys = ["period", *EXPORT_KEYS[by]]
    return pl.concat(frames, how="vertical_relaxed").sort(keys)


def export_totals(df: pl.DataFrame, store_totals: dict[tuple[str, str], Decimal]) -> pl.DataFrame:
    """Per period and currency: the export's rows summed, and the store's total cost for the period beside it
    (``ties``: the rows' total_cost adds up to it exactly)."""
    import polars as pl

    if df.is_empty():
        return df
    out = df.group_by(["period", "currency"]).agg([_sum(c) for c in FINANCE_COLUMNS]).sort(["period", "currency"])
    store = [store_totals.get((p, c)) for p, c in zip(out["period"], out["currency"], strict=True)]
    out = out.with_columns(pl.Series("store_total_cost", store, dtype=pl.Decimal(38, 12)))
    return out.with_columns((pl.col("total_cost") == pl.col("store_total_cost")).alias("ties"))


def export_text(df: pl.DataFrame, fmt: str) -> str:
    """The finance file as text: csv (the one CSV writer) or json (a list of rows; money as exact decimal
    strings and counts as integers, as in every JSON document: :mod:`billing_audit.jsonout`)."""
    if fmt == "csv":
        return inert.csv_text(df)
    from billing_audit.report import json_records

    return json_inert(json.dumps(json_records(df), indent=2, ensure_ascii=False)) + "\n"


def write_export(df: pl.DataFrame, fmt: str, path: Path) -> None:
    """Write through a temporary file, so a full disk never leaves half an export behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    try:
        if fmt == "csv":
            with open(tmp, "w", newline="", encoding="utf-8") as f:
                inert.write_csv(df, f)
        elif fmt == "parquet":
            df.write_parquet(tmp)
        else:
            tmp.write_text(export_text(df, "json"), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise BillingAuditError(f"{path}: cannot write the export ({e.strerror or e})") from None
