"""The ``billing-audit`` command: thin click commands over the library."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
import duckdb
import polars as pl
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import billing_audit
from billing_audit.errors import BillingAuditError
from billing_audit.formats import describe_formats
from billing_audit.store import DEFAULT_DB, IngestReport

F = TypeVar("F", bound=Callable[..., Any])

out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 220)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def db_option(f: F) -> F:
    return click.option(
        "--db",
        "db",
        envvar="BILLING_AUDIT_DB",
        default=DEFAULT_DB,
        show_default=True,
        type=click.Path(dir_okay=False),
        help="Store file (env BILLING_AUDIT_DB).",
    )(f)


def handle_errors(f: F) -> F:
    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        try:
            return f(*args, **kwargs)
        except BillingAuditError as e:
            if ctx.find_root().params.get("debug"):
                raise
            err.print(f"error: {e}", markup=False)
            sys.exit(e.exit_code)
        except (OSError, duckdb.Error) as e:  # disk full, permissions, a vanished file
            io_like = isinstance(e, (OSError, duckdb.IOException)) or any(
                w in str(e) for w in ("Could not write", "No space left", "File too large", "IO Error"))
            if ctx.find_root().params.get("debug") or not io_like:
                raise
            where = f"{e.filename}: " if isinstance(e, OSError) and e.filename else ""
            err.print(f"error: {where}{e.strerror if isinstance(e, OSError) and e.strerror else e}", markup=False)
            sys.exit(2)

    return wrapper  # type: ignore[return-value]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.version_option(billing_audit.__version__, prog_name="billing-audit")
def main(debug: bool) -> None:
    """Audit what interrupted spot GPU training really costs, from cloud billing exports.

    \b
    Examples:
      billing-audit ingest exports/              # load every export file under exports/
      billing-audit summary                      # lines and cost per provider, period, currency
      billing-audit audit fixtures/              # ingest, then summarise (the bundled demo)
    """


INGEST_HELP = f"""Load billing export files or folders into the store.

Each file's format is recognised from its own header or schema:

\b
{describe_formats()}

\b
Folders are searched recursively.  Manifests (AWS *-Manifest.json, Azure
manifest.json/_manifest.json) group files into deliveries; without one, the
data files of a folder are one delivery.  A delivery replaces any older
delivery of the same provider, billing account and billing period, so
ingesting every snapshot of a month counts the month once; re-ingesting an
unchanged delivery does nothing.  A bad file is reported with its row and
column, lands nothing, and the other files still load (exit code 2).

\b
Examples:
  billing-audit ingest cur/my-report/year=2026/month=10/
  billing-audit --debug ingest export.csv.gz --db audit.duckdb
"""


def _run_ingest(db: str, paths: tuple[str, ...], quiet: bool) -> IngestReport:
    show = not quiet and err.is_terminal
    with billing_audit.open(db) as store:
        if not show:
            return store.ingest(list(paths))
        with Progress(
            TextColumn("[bold]ingest"),
            BarColumn(),
            TextColumn("{task.fields[rows]:,} rows · {task.fields[file]}"),
            TimeElapsedColumn(),
            console=err,
            transient=True,
        ) as bar:
            task = bar.add_task("ingest", total=None, rows=0, file="")
            total = 0

            def tick(file: str, rows: int) -> None:
                nonlocal total
                total += rows
                bar.update(task, advance=1, rows=total, file=file[-60:])

            return store.ingest(list(paths), progress=tick)


def _print_ingest(report: IngestReport, quiet: bool) -> None:
    for e in report.errors:
        err.print(f"error: {e}", markup=False)
    if quiet and not report.errors:
        return
    parts = [f"{report.count('ingested')} file(s) ingested ({report.rows:,} lines)"]
    if report.count("unchanged"):
        parts.append(f"{report.count('unchanged')} unchanged")
    if report.count("superseded"):
        parts.append(f"{report.count('superseded')} superseded by a newer delivery")
    if report.replaced_rows:
        parts.append(f"{report.replaced_rows:,} lines of older deliveries replaced")
    if report.failed:
        parts.append(f"{report.failed} file(s) failed")
    err.print(", ".join(parts), markup=False)


@main.command(help=INGEST_HELP)
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@db_option
@click.option("-q", "--quiet", is_flag=True, help="No progress bar or summary line.")
@handle_errors
def ingest(paths: tuple[str, ...], db: str, quiet: bool) -> None:
    report = _run_ingest(db, paths, quiet)
    _print_ingest(report, quiet)
    if report.failed:
        sys.exit(2)


def _print_frame(df: pl.DataFrame, title: str, fmt: str) -> None:
    if fmt == "csv":
        click.echo(df.write_csv(), nl=False)
        return
    if fmt == "json":
        click.echo(df.write_json())
        return
    table = Table(title=title, show_lines=False)
    for c in df.columns:
        table.add_column(c, justify="right" if df[c].dtype.is_numeric() else "left")
    for row in df.iter_rows():
        table.add_row(*("" if v is None else f"{v:,.2f}" if hasattr(v, "as_tuple") else str(v) for v in row))
    out.print(table)


format_option = click.option(
    "--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True
)


@main.command()
@db_option
@format_option
@handle_errors
def summary(db: str, fmt: str) -> None:
    """Lines and cost in the store per provider, billing period and currency.

    \b
    Example:
      billing-audit summary --format csv > totals.csv
    """
    with billing_audit.open(db) as store:
        _print_frame(store.summary(), "line items in the store", fmt)


def rules_option(f: F) -> F:
    return click.option(
        "--rules",
        "rule_dirs",
        multiple=True,
        type=click.Path(),
        help="Folder (or file) of extra rules; repeatable.  The built-in pack is always loaded.",
    )(f)


def _parse_params(values: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values:
        if "=" not in v:
            raise BillingAuditError(f"--param {v!r}: expected NAME=VALUE")
        k, _, val = v.partition("=")
        out[k.strip()] = val
    return out


def _typed_params(rules: list[Any], raw: dict[str, str]) -> dict[str, Any]:
    from billing_audit.rules import coerce_param

    typed: dict[str, Any] = {}
    for name, value in raw.items():
        owner = next((r for r in rules if name in r.meta.params), None)
        if owner is None:
            raise BillingAuditError(f"--param {name}: no selected rule has a parameter called {name!r}")
        typed[name] = coerce_param(owner, name, value)
    return typed


ENGINE_OPTIONS = ("engine", "spark_master", "spark_lines", "bq_table", "bq_project", "bq_endpoint",
                  "max_bytes_billed", "athena_table", "athena_kind", "athena_workgroup", "athena_output",
                  "aws_profile", "aws_region", "aws_endpoint")


def engine_options(f: Any) -> Any:
    """--engine and its settings: where rules, attribution and aggregation run (README: Scaling out).
    The command receives them as one `engine_opts` dict."""
    import functools

    opts = [
        click.option("--engine", type=click.Choice(["duckdb", "spark", "bigquery", "athena"]), default="duckdb",
                     show_default=True, help="Where the heavy work runs; only aggregates come back into the store."),
        click.option("--spark-master", default="local[*]", show_default=True, help="Spark: the master URL."),
        click.option("--spark-lines", metavar="PATH|TABLE",
                     help="Spark: canonical lines as a parquet folder or catalog table (default: the store's "
                          "lines, written next to it as by `billing-audit lines-export`)."),
        click.option("--bq-table", metavar="PROJECT.DATASET.TABLE", help="BigQuery: the GCP billing export table."),
        click.option("--bq-project", help="BigQuery: the project that runs the query (default: the table's)."),
        click.option("--bq-endpoint", metavar="URL", help="BigQuery: another API endpoint (tests, proxies)."),
        click.option("--max-bytes-billed", type=click.IntRange(min=1), metavar="BYTES",
                     help="BigQuery: refuse (after a dry run) to process more than this."),
        click.option("--athena-table", metavar="DATABASE.TABLE", help="Athena: the CUR 2.0 or FOCUS Glue table."),
        click.option("--athena-kind", type=click.Choice(["cur2", "focus"]), default="cur2", show_default=True,
                     help="Athena: what the Glue table holds."),
        click.option("--athena-workgroup", default="primary", show_default=True, help="Athena: the workgroup."),
        click.option("--athena-output", metavar="S3_URL", help="Athena: result location (default: the workgroup's)."),
        click.option("--aws-profile", help="Athena: AWS profile."),
        click.option("--aws-region", help="Athena: AWS region."),
        click.option("--aws-endpoint", metavar="URL", help="Athena: another endpoint (tests, VPC endpoints)."),
    ]

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        kwargs["engine_opts"] = {k: kwargs.pop(k) for k in ENGINE_OPTIONS}
        return f(*args, **kwargs)

    for o in reversed(opts):
        wrapper = o(wrapper)
    return wrapper


def _options(engine_opts: dict[str, Any]) -> Any:
    from billing_audit.engines import options_from_flat

    return options_from_flat(engine_opts["engine"], engine_opts)


@main.command()
@db_option
@rules_option
@click.option("--select", "select", multiple=True, help="Run only rules with this id, name or category; repeatable.")
@click.option("--exclude", "exclude", multiple=True, help="Skip rules with this id, name or category; repeatable.")
@click.option("--param", "params", multiple=True, metavar="NAME=VALUE", help="Set a rule parameter; repeatable.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="Config file (checkpoint tags and storage); default ./billing-audit.toml when present.")
@click.option("-q", "--quiet", is_flag=True, help="No summary line.")
@click.option("--period", metavar="YYYY-MM", help="Other engines: only this billing month (BigQuery and Athena need it).")
@engine_options
@handle_errors
def tag(db: str, rule_dirs: tuple[str, ...], select: tuple[str, ...], exclude: tuple[str, ...],
        params: tuple[str, ...], config_path: str | None, quiet: bool, period: str | None,
        engine_opts: dict[str, Any]) -> None:
    """Run the rules over the store and record what they match in rule_hits.

    Re-tagging replaces the earlier hits of the rules that run: never duplicates.

    \b
    Examples:
      billing-audit tag                                  # the built-in pack
      billing-audit tag --select restart_fee             # one category
      billing-audit tag --rules team-rules/ --param min_cost=0.01
      billing-audit tag --engine spark --spark-lines s3a://billing/lines/
    """
    from pathlib import Path

    from billing_audit.rules import load_rules

    ruleset = load_rules([Path(d) for d in rule_dirs])
    chosen = ruleset.select(list(select), list(exclude))
    typed = _typed_params(chosen, _parse_params(params))
    from billing_audit.config import load_config

    cfg = load_config(config_path)
    engine = engine_opts["engine"]
    _check_period(period)
    if engine == "duckdb" and period:
        raise BillingAuditError("--period: local tagging covers every line in the store; --period is for --engine "
                                "spark, bigquery or athena")
    if engine != "duckdb":  # the rules (and the aggregation) run on the engine; hit counts come back
        from billing_audit.engines import run_engine
        from billing_audit.store import checkpoint_params

        checkpoint = cfg.checkpoint_settings()
        merged = {**checkpoint_params(chosen, checkpoint), **typed}
        with billing_audit.open(db) as store:
            run_id = run_engine(store, engine, chosen, cfg, period, "effective", merged,
                                checkpoint, options=_options(engine_opts))
            _say_run(store, run_id)
            counts = dict(store.con.execute(
                "SELECT rule_id, n FROM engine_results WHERE run_id = ? AND kind = 'rule'", [run_id]).fetchall())
        if not quiet:
            table = Table(title=f"{engine} run {run_id}")
            for col in ("rule", "category", "lines"):
                table.add_column(col, justify="right" if col == "lines" else "left")
            for r in chosen:
                table.add_row(f"{r.id} {r.name}", r.category, f"{int(counts.get(r.id, 0)):,}")
            out.print(table)
            err.print(f"{sum(int(v) for v in counts.values()):,} hits from {len(chosen)} rules on {engine}; "
                      f"aggregates stored as engine run {run_id}", markup=False)
        return
    with billing_audit.open(db) as store:
        result = store.tag(chosen, typed, checkpoint=cfg.checkpoint_settings())
    if quiet:
        return
    table = Table(title=f"tag run {result.run_id}")
    table.add_column("rule")
    table.add_column("category")
    table.add_column("lines", justify="right")
    by_id = {r.id: r for r in chosen}
    for rid, n in result.hits_by_rule.items():
        table.add_row(f"{rid} {by_id[rid].name}", by_id[rid].category, f"{n:,}")
    out.print(table)
    err.print(f"{result.hits:,} hits from {len(chosen)} rules in {result.scans} scan(s) of line_items", markup=False)


@main.group()
def rules() -> None:
    """List, show and test rule files.

    \b
    Examples:
      billing-audit rules list
      billing-audit rules show BA010
      billing-audit rules test --rules team-rules/
    """


@rules.command("list")
@rules_option
@format_option
@handle_errors
def rules_list(rule_dirs: tuple[str, ...], fmt: str) -> None:
    """Every loaded rule: id, name, category, severity, providers and source.

    \b
    Example:
      billing-audit rules list --rules team-rules/ --format csv
    """
    from pathlib import Path

    from billing_audit.rules import load_rules

    ruleset = load_rules([Path(d) for d in rule_dirs])
    df = pl.DataFrame(
        {
            "id": [r.id for r in ruleset.rules],
            "name": [r.name for r in ruleset.rules],
            "category": [r.category for r in ruleset.rules],
            "severity": [r.meta.severity for r in ruleset.rules],
            "providers": [",".join(r.meta.providers) for r in ruleset.rules],
            "title": [r.meta.title for r in ruleset.rules],
            "source": ["built-in" if r.builtin else str(r.path) for r in ruleset.rules],
        }
    )
    _print_frame(df, "rules", fmt)


@rules.command("show")
@click.argument("rule_id")
@rules_option
@handle_errors
def rules_show(rule_id: str, rule_dirs: tuple[str, ...]) -> None:
    """One rule's header, parameters and query.

    \b
    Example:
      billing-audit rules show restart_fee.interrupted_spot
    """
    from pathlib import Path

    from billing_audit.rules import load_rules

    r = load_rules([Path(d) for d in rule_dirs]).get(rule_id)
    click.echo(f"{r.id}  {r.name}  [{r.category}, {r.meta.severity}]  providers: {', '.join(r.meta.providers)}")
    click.echo(f"{r.meta.title}\nfile: {r.path}")
    if r.meta.description:
        click.echo("\n" + r.meta.description.strip())
    if r.meta.params:
        click.echo("\nparameters:")
        for name, p in r.meta.params.items():
            click.echo(f"  {name} = {p.default!r}  {p.description}")
    click.echo("\n" + r.sql)


@rules.command("test")
@rules_option
@handle_errors
def rules_test(rule_dirs: tuple[str, ...]) -> None:
    """Check rules: header, SQL safety, binding against the store schema, and case files.

    A case file beside a rule (BA100_x.sql -> BA100_x.cases.yaml) lists rows that
    must match and rows that must not; they are run on a scratch store.

    \b
    Example:
      billing-audit rules test --rules team-rules/
    """
    from pathlib import Path

    from billing_audit.rulecases import check_rules

    failures, lines = check_rules([Path(d) for d in rule_dirs])
    for line in lines:
        click.echo(line)
    if failures:
        err.print(f"{failures} rule check(s) failed", markup=False)
        sys.exit(1)


@main.command()
@click.argument("line_item_id")
@db_option
@handle_errors
def explain(line_item_id: str, db: str) -> None:
    """Show one line item, every rule that matched it and why, and where it came from.

    \b
    Example:
      billing-audit explain aws-1b57f7bf1241-7
    """
    with billing_audit.open(db) as store:
        line, hits = store.explain(line_item_id)
    click.echo(f"{line_item_id}: {line.get('x_SourceFile')} row {line.get('x_SourceRow')} ({line.get('x_SourceFormat')})")
    for key in ("ChargeDescription", "x_UsageType", "ServiceName", "ResourceId", "SubAccountId", "ChargePeriodStart",
                "BilledCost", "EffectiveCost", "ListCost", "BillingCurrency", "PricingCategory", "Tags"):
        click.echo(f"  {key:<18} {line.get(key)}")
    if not hits:
        click.echo("no rule matched this line (run `billing-audit tag` after ingesting)")
    for h in hits:
        click.echo(f"  matched {h['rule_id']} [{h['category']}]: {h['reason']}")


config_option = click.option(
    "--config", "config_path", type=click.Path(dir_okay=False),
    help="Config file (default: ./billing-audit.toml when present).",
)
period_option = click.option("--period", metavar="YYYY-MM", help="Only this billing month.")
basis_option = click.option(
    "--cost-basis", type=click.Choice(["effective", "billed", "list"]), default="effective", show_default=True,
    help="Which cost the money columns use (the on-demand equivalent is always list cost).",
)


def _engine_report(db: str, cfg: Any, period: str | None, basis: str, engine_opts: dict[str, Any],
                   reuse: bool = True) -> Any:
    """The report with the work done on `engine` (the latest matching engine run when `reuse`)."""
    from billing_audit.engines import expected_source, pipeline, run_engine
    from billing_audit.report import build_report
    from billing_audit.rules import load_rules
    from billing_audit.store import checkpoint_params

    rules = load_rules().rules
    checkpoint = cfg.checkpoint_settings()
    with billing_audit.open(db) as store:
        params = checkpoint_params(rules, checkpoint)
        engine = engine_opts["engine"]
        source = expected_source(store, engine, _options(engine_opts))
        run_id = pipeline.latest_run(store.con, engine, period, basis, pipeline.config_key(cfg, rules, params),
                                     source) if reuse else None
        if run_id is None:
            run_id = run_engine(store, engine, rules, cfg, period, basis, params, checkpoint,
                                options=_options(engine_opts))
            _say_run(store, run_id)
        else:
            err.print(f"using {engine} run {run_id} (same source, period, basis, config and rules)", markup=False)
        return build_report(store, cfg, period, basis, engine_run=run_id)


def _say_run(store: Any, run_id: int) -> None:
    """What came back from the engine, and what it read (bytes processed/scanned where it says)."""
    engine, source, scanned, n = store.con.execute(
        "SELECT r.engine, r.source, r.bytes_processed, (SELECT count(*) FROM engine_results e WHERE e.run_id = r.run_id) "
        "FROM engine_runs r WHERE r.run_id = ?", [run_id]).fetchone()
    read = f"; it processed {scanned:,} bytes" if scanned is not None else ""
    err.print(f"{engine} run {run_id} over {source}: {n:,} aggregate rows came back{read}", markup=False)


def _check_period(period: str | None) -> None:
    import re

    if period is not None and not re.fullmatch(r"\d{4}-(0[1-9]|1[0-2])", period):
        raise BillingAuditError(f"--period {period!r}: expected YYYY-MM, e.g. 2026-10")


def _build(db: str, config_path: str | None, period: str | None, basis: str) -> Any:
    from billing_audit.config import load_config
    from billing_audit.report import build_report

    _check_period(period)
    cfg = load_config(config_path)
    with billing_audit.open(db) as store:
        return build_report(store, cfg, period, basis)


def _emit_report(report: Any, fmt: str, out_file: str | None) -> None:
    from billing_audit import outputs

    if fmt == "table" and out_file is None:
        for w in report.warnings:
            err.print(f"warning: {w}", markup=False)
        out.print(outputs.rich_table(report))
        out.print(outputs.rich_totals(report))
        return
    if fmt == "json":
        text = outputs.report_json(report)
    elif fmt == "csv":
        text = outputs.csv_text(report.jobs.drop("reasons").with_columns(
            report.jobs["reasons"].list.join("; ").alias("reasons")))
    elif fmt == "markdown":
        text = outputs.markdown(report)
    elif fmt == "html":
        from billing_audit.html import render_html

        text = render_html(report)
    else:  # table into a file
        from rich.console import Console as _C

        buf = _C(record=True, width=200, file=open(os.devnull, "w"))  # noqa: SIM115
        buf.print(outputs.rich_table(report))
        buf.print(outputs.rich_totals(report))
        text = buf.export_text()
    if out_file:
        from pathlib import Path

        Path(out_file).parent.mkdir(parents=True, exist_ok=True)
        Path(out_file).write_text(text, encoding="utf-8")
        err.print(f"wrote {out_file}", markup=False)
    else:
        click.echo(text, nl=False)


@main.command()
@db_option
@config_option
@period_option
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv", "markdown", "html"]), default="table",
              show_default=True)
@click.option("--out", "out_file", type=click.Path(dir_okay=False), help="Write to this file instead of stdout.")
@basis_option
@engine_options
@handle_errors
def report(db: str, config_path: str | None, period: str | None, fmt: str, out_file: str | None, cost_basis: str,
           engine_opts: dict[str, Any]) -> None:
    """Interruption overhead per training job and team, biggest overhead first.

    Reads the store and the rule hits (run `billing-audit tag` first).

    \b
    Examples:
      billing-audit report --period 2026-10
      billing-audit report --format json --out report.json
      billing-audit report --format html --out report.html --cost-basis billed
      billing-audit report --engine spark --spark-master spark://head:7077
    """
    if engine_opts["engine"] != "duckdb":
        from billing_audit.config import load_config

        _check_period(period)
        rep = _engine_report(db, load_config(config_path), period, cost_basis, engine_opts)
        _emit_report(rep, fmt, out_file)
        return
    _emit_report(_build(db, config_path, period, cost_basis), fmt, out_file)


@main.command()
@db_option
@config_option
@period_option
@click.option("--by", type=click.Choice(["team", "job"]), default="team", show_default=True)
@click.option("--format", "fmt", type=click.Choice(["csv", "parquet", "json"]), default="csv", show_default=True)
@click.option("--out", "out_file", required=True, type=click.Path(dir_okay=False), help="File to write.")
@basis_option
@handle_errors
def export(db: str, config_path: str | None, period: str | None, by: str, fmt: str, out_file: str,
           cost_basis: str) -> None:
    """The finance file: per-team (or per-job) interruption surcharges.

    One row per billing period x team (or job) x currency with every component and
    the total.  CSV is plain RFC 4180; text cells that start with = + - @ are
    prefixed with ' so a tag value cannot become a spreadsheet formula.

    \b
    Examples:
      billing-audit export --by team --format csv --out surcharges-2026-10.csv --period 2026-10
      billing-audit export --by job --format parquet --out jobs.parquet
    """
    from pathlib import Path

    from billing_audit import outputs
    from billing_audit.config import load_config
    from billing_audit.report import build_report, store_periods

    _check_period(period)
    cfg = load_config(config_path)
    with billing_audit.open(db) as store:
        periods = [period] if period else store_periods(store)
        reports = [build_report(store, cfg, p, cost_basis) for p in periods]
    df = outputs.export_frame(reports, by)
    outputs.write_export(df, fmt, Path(out_file))
    err.print(f"wrote {out_file} ({df.height} rows)", markup=False)


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@db_option
@config_option
@period_option
@click.option("--out", "out_dir", default="audit-report", show_default=True, type=click.Path(file_okay=False),
              help="Folder for report.html, report.json, jobs.csv and teams.csv.")
@basis_option
@click.option("-q", "--quiet", is_flag=True, help="No progress bar or table.")
@engine_options
@handle_errors
def audit(paths: tuple[str, ...], db: str, config_path: str | None, period: str | None, out_dir: str,
          cost_basis: str, quiet: bool, engine_opts: dict[str, Any]) -> None:
    """The monthly audit in one command: ingest PATHS, tag, report.

    Writes report.html, report.json, jobs.csv and teams.csv to --out and prints
    the job table.  Exits 2 if a file failed to ingest (the rest is still audited).

    \b
    Examples:
      billing-audit audit fixtures/ --db demo.duckdb --out demo-report
      billing-audit audit exports/2026-10/ --period 2026-10 --config billing-audit.toml
      billing-audit audit fixtures/ --engine spark --out spark-report
    """
    from pathlib import Path

    from billing_audit import outputs
    from billing_audit.config import load_config
    from billing_audit.html import render_html
    from billing_audit.report import build_report

    _check_period(period)
    cfg = load_config(config_path)
    ingest_report = _run_ingest(db, paths, quiet)
    _print_ingest(ingest_report, quiet)
    if engine_opts["engine"] != "duckdb":  # rules, attribution and aggregation on the engine; always a fresh run
        rep = _engine_report(db, cfg, period, cost_basis, engine_opts, reuse=False)
    else:
        with billing_audit.open(db) as store:
            store.tag(checkpoint=cfg.checkpoint_settings())
            rep = build_report(store, cfg, period, cost_basis)
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.json").write_text(outputs.report_json(rep), encoding="utf-8")
    (folder / "report.html").write_text(render_html(rep), encoding="utf-8")
    jobs = rep.jobs.with_columns(rep.jobs["reasons"].list.join("; ").alias("reasons"))
    with open(folder / "jobs.csv", "w", newline="", encoding="utf-8") as f:
        outputs.write_csv(jobs, f)
    with open(folder / "teams.csv", "w", newline="", encoding="utf-8") as f:
        outputs.write_csv(rep.teams, f)
    if not quiet:
        for w in rep.warnings:
            err.print(f"warning: {w}", markup=False)
        out.print(outputs.rich_table(rep))
        out.print(outputs.rich_totals(rep))
    err.print(f"wrote {folder}/report.html, report.json, jobs.csv, teams.csv", markup=False)
    if ingest_report.failed:
        sys.exit(2)


@main.command("lines-export")
@click.argument("folder", type=click.Path(file_okay=False))
@db_option
@period_option
@handle_errors
def lines_export(folder: str, db: str, period: str | None) -> None:
    """Write the store's canonical line items as parquet partitioned by provider and billing period.

    For Spark (`--engine spark --spark-lines FOLDER`) or any parquet reader.  A folder this
    command wrote before is replaced whole; another non-empty folder is refused.

    \b
    Examples:
      billing-audit lines-export lines/ --period 2026-10
      billing-audit tag --engine spark --spark-lines lines/
    """
    from pathlib import Path

    from billing_audit.engines import write_lines

    _check_period(period)
    with billing_audit.open(db) as store:
        n = write_lines(store, Path(folder), period)
    err.print(f"wrote {n:,} line items to {folder}", markup=False)


@main.command()
@click.argument("query")
@db_option
@period_option
@click.option("--since", type=click.DateTime(formats=["%Y-%m-%d"]), help="Only usage on or after this date (YYYY-MM-DD).")
@click.option("--provider", type=click.Choice(["aws", "azure", "gcp"]), help="Only this provider.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True)
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True, help="At most this many rows.")
@click.option("--lines", "show_lines", is_flag=True, help="List the line items (id, source file and row), not groups.")
@click.option("--exact", is_flag=True, help="Match the words as typed, without word families.")
@click.option("--fail-above", type=str, metavar="AMOUNT",
              help="Exit 1 when the matched total in any currency is above AMOUNT.")
@click.option("--save-rule", type=click.Path(dir_okay=False), metavar="FILE.sql",
              help="Write a rule file that tags exactly the lines found.")
@click.option("--rule-id", help="Id of the saved rule (default: the start of FILE's name, e.g. SR100_x.sql).")
@click.option("--category", default="custom", show_default=True, help="Category of the saved rule.")
@handle_errors
def search(query: str, db: str, period: str | None, since: Any, provider: str | None, fmt: str, limit: int,
           show_lines: bool, exact: bool, fail_above: str | None, save_rule: str | None, rule_id: str | None,
           category: str) -> None:
    """Search the bills for words, e.g. whether you are charged per restart.

    Searches descriptions, usage types, operations, meters, services and resource
    names, case- and accent-insensitively; every word must match.  Word families
    make a word mean the same across providers (--exact turns them off):
    interrupt ~ interruption ~ evict ~ eviction ~ preempt ~ preemption ~ preemptible ~ reclaim;
    restart ~ recovery ~ relaunch ~ resume ~ "preemption overhead";
    spot ~ preemptible ~ low priority.

    \b
    Examples:
      billing-audit search "spot restart"
      billing-audit search interrupt --provider azure --period 2026-10 --format json
      billing-audit search "spot restart" --fail-above 10 --format json   # daily automation
      billing-audit search "spot restart" --save-rule team-rules/SR100_spot_restart.sql
    """
    import json
    import re
    from decimal import Decimal, InvalidOperation
    from pathlib import Path

    from billing_audit import outputs
    from billing_audit.search import rule_text
    from billing_audit.search import search as run_search

    _check_period(period)
    threshold = None
    if fail_above is not None:
        try:
            threshold = Decimal(fail_above)
        except InvalidOperation:
            raise BillingAuditError(f"--fail-above {fail_above!r}: expected an amount such as 10 or 12.50") from None
    with billing_audit.open(db) as store:
        result = run_search(store, query, exact=exact, period=period, since=since.date() if since else None,
                            provider=provider, limit=None if save_rule else limit, lines=show_lines)
    if fmt == "json":
        click.echo(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
    elif fmt == "csv":
        df = result.lines if show_lines and result.lines is not None else result.groups
        df = df.with_columns(df["accounts"].list.join(";")) if "accounts" in df.columns else df
        click.echo(outputs.csv_text(df), nl=False)
    else:
        terms = "; ".join(f"{w}: {' | '.join(alts)}" for w, alts in result.terms)
        err.print(f"searching for every word of {query!r} ({terms})", markup=False)
        if show_lines and result.lines is not None:
            _print_frame(result.lines, "matching line items", "table")
        else:
            _print_frame(result.groups.with_columns(result.groups["accounts"].list.join(", ")), "matches", "table")
        _print_frame(result.totals, "totals per currency", "table")
    if save_rule:
        path = Path(save_rule)
        rid = rule_id or (m.group(0) if (m := re.match(r"[A-Z]{2,5}[0-9]{3,4}", path.name)) else None)
        if not rid:
            raise BillingAuditError(f"--save-rule {save_rule}: name the file after a rule id (e.g. SR100_spot_restart.sql) "
                                    "or give --rule-id")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rule_text(result, rid, category), encoding="utf-8")
        err.print(f"wrote {path}: `billing-audit rules test --rules {path.parent}` checks it", markup=False)
    if threshold is not None:
        over = result.over(threshold)
        if over:
            err.print(f"matched total above {threshold} in {', '.join(over)}", markup=False)
            sys.exit(1)


def _register() -> None:
    from billing_audit.cli_generate import command as generate
    from billing_audit.cli_pull import pull

    main.add_command(pull)
    main.add_command(generate, "generate")


_register()

if __name__ == "__main__":  # pragma: no cover
    main()
