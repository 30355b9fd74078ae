"""The ingest, summary and audit commands as a user meets them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

import billing_audit
from billing_audit.cli import main
from billing_audit.formats import registry
from support import FIXTURES, ROOT

PARQUET_DIR = FIXTURES / "aws/cur-legacy-parquet"


def test_ingest_help_documents_every_format() -> None:
    result = CliRunner().invoke(main, ["ingest", "--help"])
    assert result.exit_code == 0
    for fmt in registry():
        assert fmt.id in result.output, f"{fmt.id} missing from ingest --help"
    assert "Example" in result.output


def test_every_command_has_help_with_an_example() -> None:
    import click

    def walk(group: click.Group, path: list[str]) -> list[list[str]]:
        ctx = click.Context(group)
        out = []
        for name in group.list_commands(ctx):
            cmd = group.get_command(ctx, name)
            assert cmd is not None and cmd.help, name
            out += walk(cmd, [*path, name]) if isinstance(cmd, click.Group) else [[*path, name]]
        return out

    commands = walk(main, [])
    assert ["pull", "aws"] in commands and ["rules", "test"] in commands
    for path in commands:
        result = CliRunner().invoke(main, [*path, "--help"])
        assert result.exit_code == 0, path
        assert "Example" in result.output, f"{' '.join(path)} --help has no example"


def test_ingest_then_summary_csv(db: Path) -> None:
    r = CliRunner().invoke(main, ["ingest", str(PARQUET_DIR), "--db", str(db)])
    assert r.exit_code == 0, r.output
    assert "2 file(s) ingested (12 lines)" in r.output
    r = CliRunner().invoke(main, ["summary", "--db", str(db), "--format", "csv"])
    assert r.exit_code == 0
    lines = r.output.strip().splitlines()
    assert lines[0] == "provider,period,currency,lines,billed_cost,effective_cost,list_cost"
    assert lines[1].startswith("aws,2026-10,USD,12,57.099200000000,")


def test_summary_json_keeps_decimal_precision(db: Path) -> None:
    CliRunner().invoke(main, ["ingest", str(PARQUET_DIR), "--db", str(db)])
    r = CliRunner().invoke(main, ["summary", "--db", str(db), "--format", "json"])
    data = json.loads(r.output)
    assert data["periods"][0]["billed_cost"] == "57.0992"  # exact decimal string, never a float
    assert data["totals"] == [{"currency": "USD", "lines": 12, "billed_cost": "57.0992",
                               "effective_cost": data["periods"][0]["effective_cost"],
                               "list_cost": data["periods"][0]["list_cost"]}]


def test_quiet_prints_nothing_on_success(db: Path) -> None:
    r = CliRunner().invoke(main, ["ingest", str(PARQUET_DIR), "--db", str(db), "--quiet"])
    assert r.exit_code == 0
    assert r.output == ""


def test_db_from_environment(tmp_path: Path) -> None:
    target = tmp_path / "env.duckdb"
    r = CliRunner().invoke(main, ["ingest", str(PARQUET_DIR)], env={"BILLING_AUDIT_DB": str(target)})
    assert r.exit_code == 0, r.output
    with billing_audit.open(target) as store:
        assert store.con.execute("SELECT count(*) FROM line_items").fetchone() == (12,)


def test_default_store_is_in_the_working_directory(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "BILLING_AUDIT_DB"}
    proc = subprocess.run(
        [sys.executable, "-m", "billing_audit.cli", "ingest", str(PARQUET_DIR)],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "billing-audit.duckdb").exists()
    # on a pipe: no progress bar, no colour codes
    assert "\x1b[" not in proc.stderr + proc.stdout


def test_audit_on_the_bundled_fixtures(db: Path, tmp_path: Path) -> None:
    """The README's demo: every fixture ingests, is tagged and reported for every provider."""
    out = tmp_path / "demo-report"
    r = CliRunner().invoke(main, ["audit", str(FIXTURES), "--db", str(db), "--out", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads((out / "report.json").read_text())
    assert {j["provider"] for j in data["jobs"]} == {"aws", "azure", "gcp"}
    assert {t["currency"] for t in data["totals"]} == {"USD", "EUR"}
    assert "resnet-sweep-7" in r.output


def test_debug_shows_traceback(db: Path, tmp_path: Path) -> None:
    bad = tmp_path / "not-a-store.duckdb"
    bad.write_text("this is not a DuckDB database\n" * 100)
    r = CliRunner().invoke(main, ["summary", "--db", str(bad)])
    assert r.exit_code == 2
    assert "cannot open store" in r.output
    r = CliRunner().invoke(main, ["--debug", "summary", "--db", str(bad)])
    assert r.exception is not None


def test_readme_starts_with_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    blocks = [b.split("```", 1)[0] for b in text.split("```bash\n")[1:]]
    first = blocks[0].strip().splitlines()
    assert first == ["make demo", "make test"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci


def _linked_input(tmp_path: Path) -> tuple[Path, Path, int]:
    """An input folder holding only a symlink to a CUR parquet file outside it: (folder, target, its rows)."""
    import duckdb

    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "gpu-cur-00001.snappy.parquet"
    target.write_bytes((PARQUET_DIR / "cur/gpu-cur/gpu-cur/year=2026/month=10/gpu-cur-00001.snappy.parquet").read_bytes())
    inp = tmp_path / "in"
    inp.mkdir()
    (inp / "gpu-cur-00001.snappy.parquet").symlink_to(target)
    row = duckdb.connect().execute(f"SELECT count(*) FROM read_parquet('{target}')").fetchone()
    assert row is not None and row[0] > 0
    return inp, target, int(row[0])


def test_ingest_follow_outside_reads_a_symlink_out_of_the_named_folder(tmp_path: Path) -> None:
    inp, target, rows = _linked_input(tmp_path)
    link = inp / "gpu-cur-00001.snappy.parquet"
    refused = CliRunner().invoke(main, ["ingest", str(inp), "--db", str(tmp_path / "a.duckdb")])
    assert refused.exit_code == 2, refused.output
    assert (f"{link}: a symlink to {target.resolve()}, outside the input path(s): skipped (--follow-outside reads it)"
            in " ".join(refused.output.split()))
    with billing_audit.open(tmp_path / "a.duckdb", read_only=True) as store:
        assert store.sql("SELECT count(*) AS n FROM line_items")["n"][0] == 0

    followed = CliRunner().invoke(main, ["ingest", str(inp), "--db", str(tmp_path / "b.duckdb"), "--follow-outside"])
    assert followed.exit_code == 0, followed.output
    assert f"1 file(s) ingested ({rows:,} lines)" in followed.output
    with billing_audit.open(tmp_path / "b.duckdb", read_only=True) as store:
        got = store.sql("SELECT count(*) AS n, min(x_SourceRow) AS lo, max(x_SourceRow) AS hi FROM line_items").row(0)
        assert got == (rows, 1, rows)


def test_audit_follow_outside_reads_a_symlink_out_of_the_named_folder(tmp_path: Path) -> None:
    inp, target, rows = _linked_input(tmp_path)
    refused = CliRunner().invoke(main, ["audit", str(inp), "--db", str(tmp_path / "a.duckdb"), "--out",
                                        str(tmp_path / "ra"), "--quiet"])
    assert refused.exit_code == 2, refused.output
    assert "outside the input path(s): skipped (--follow-outside reads it)" in " ".join(refused.output.split())
    followed = CliRunner().invoke(main, ["audit", str(inp), "--db", str(tmp_path / "b.duckdb"), "--out",
                                         str(tmp_path / "rb"), "--quiet", "--follow-outside"])
    assert followed.exit_code == 0, followed.output
    with billing_audit.open(tmp_path / "b.duckdb", read_only=True) as store:
        assert store.sql("SELECT count(*) AS n FROM line_items")["n"][0] == rows
    assert json.loads((tmp_path / "rb" / "report.json").read_text())["jobs"], "the audit reports the linked lines"


def test_follow_outside_is_documented_and_off_by_default() -> None:
    for cmd in ("ingest", "audit"):
        text = " ".join(CliRunner().invoke(main, [cmd, "--help"]).output.split())
        assert "--follow-outside" in text and "symlinks pointing elsewhere and manifest keys resolving elsewhere" in text
        assert "Off by default" in text
