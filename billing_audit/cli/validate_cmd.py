"""`billing-audit validate`."""

from __future__ import annotations

import json
import sys

import click

from billing_audit.cli.console import echo, print_frame
from billing_audit.cli.options import format_option, handle_errors


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@format_option("table", "json")
@click.option("--strict", is_flag=True, help="Exit 1 on warnings too (FOCUS conformance, zero prices, ...).")
@handle_errors
def validate(paths: tuple[str, ...], fmt: str, strict: bool) -> None:
    """Check export files before loading them; the store is not touched.

    Per file: the format detected (or the one it most resembles and what it
    lacks), rows, billed cost per currency, billing periods, the charge-date
    range, and findings with stable ids: errors (the file would not ingest:
    file, row, column) and warnings (zero or missing list prices, unknown
    currencies, tag strings that do not parse, charges outside their billing
    period; for FOCUS files, conformance to the specification: mandatory
    columns, allowed values, cost relationships).  Exit 1 when a file has
    errors (with --strict: findings of any kind), else 0.  JSON: schema_version,
    generated_at, filters, files (billed cost per currency as exact decimal strings), summary.

    \b
    Examples:
      billing-audit validate exports/2026-10/
      billing-audit validate focus-export.csv --format json --strict
    """

    import polars as pl

    from billing_audit import app
    from billing_audit.inert import json_inert

    results = app.validate(paths)
    if fmt == "json":
        click.echo(json_inert(json.dumps(app.validation_json(results, {"paths": list(paths), "strict": strict}), indent=2, ensure_ascii=False)))
    else:
        rows = [{"status": r.status, "file": r.file, "format": r.format or "?", "rows": r.rows,
                 "cost": "; ".join(f"{v:,.2f} {k}" for k, v in sorted(r.cost.items())),
                 "periods": ", ".join(r.periods), "charges": f"{r.charge_from or ''} .. {r.charge_to or ''}"
                 if r.charge_from else ""} for r in results]
        print_frame(pl.DataFrame(rows, schema=["status", "file", "format", "rows", "cost", "periods", "charges"]),
                    "export files", "table")
        for r in results:
            for f in r.findings:
                where = "".join(f" {k} {v}" for k, v in (("row", f.row), ("column", f.column)) if v is not None)
                count = f" ({f.lines:,} lines)" if f.lines else ""
                echo(f"{f.severity}: {r.file}:{where} [{f.id}] {f.message}{count}")
        s = app.validation_summary(results)
        echo(f"{s['files']} file(s): {s['errors']} with errors, {s['warnings']} with warnings")
    if any(r.status == "errors" or (strict and r.status == "warnings") for r in results):
        sys.exit(1)


COMMANDS = (validate,)
