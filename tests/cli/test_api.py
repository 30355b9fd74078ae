"""The Python API (README "Python API"): its code block runs, and it gives the command line's answers."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import billing_audit
from billing_audit import app, inert
from billing_audit.api import Audit
from billing_audit.cli import main
from billing_audit.errors import BillingAuditError
from support import FIXTURES, ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")


def _api_block() -> str:
    section = README.split("\n## Python API\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the Python API section has one code block"
    return blocks[0]


@contextlib.contextmanager
def _inside(folder: Path) -> Iterator[None]:
    before = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object], str]:
    """The README block, run in a folder holding fixtures/ (as a checkout does)."""
    folder = tmp_path_factory.mktemp("api")
    (folder / "fixtures").symlink_to(FIXTURES, target_is_directory=True)
    namespace: dict[str, object] = {}
    printed = io.StringIO()
    with _inside(folder), contextlib.redirect_stdout(printed):
        exec(compile(_api_block(), "README.md: Python API", "exec"), namespace)  # noqa: S102
    return folder, namespace, printed.getvalue()


def _cli(folder: Path, *args: str) -> str:
    r = CliRunner().invoke(main, [*args, "--db", str(folder / "demo.duckdb")])
    assert r.exit_code == 0, r.output
    return r.stdout_bytes.decode("utf-8")  # .stdout would turn the CSV's CRLF into LF


def _undated(doc: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in doc.items() if k != "generated_at"}


def test_the_readme_block_runs(ran: tuple[Path, dict[str, object], str]) -> None:
    folder, ns, printed = ran
    loaded = ns["loaded"]
    assert isinstance(loaded, billing_audit.IngestReport) and not loaded.errors and loaded.rows > 0
    assert (folder / "demo.duckdb").exists()
    assert (folder / "surcharges.csv").read_bytes().startswith(b"\xef\xbb\xbf")  # bom=True
    assert "BA010" in [h["rule_id"] for h in ns["hits"]]  # type: ignore[attr-defined]  # a restart-fee line
    assert "restart_fees" in printed and "hidden_overhead_total" in printed


def test_the_api_gives_the_command_lines_answers(ran: tuple[Path, dict[str, object], str]) -> None:
    folder, ns, _ = ran
    # the report: the same job table as `report --format csv`
    assert app.render_report(ns["report"], "csv") == _cli(folder, "report", "--period", "2026-10", "--format", "csv")  # type: ignore[arg-type]
    # search: the same document as `search --format json`, but for when it was generated
    cli_search = json.loads(_cli(folder, "search", "egress", "--provider", "azure", "--format", "json"))
    assert _undated(ns["found"].to_dict()) == _undated(cli_search)  # type: ignore[attr-defined]
    # summary: the same document as `summary --format json`
    cli_summary = json.loads(_cli(folder, "summary", "--period", "2026-10", "--format", "json"))
    assert _undated(ns["held"].to_dict()) == _undated(cli_summary)  # type: ignore[attr-defined]
    # export: the same rows as `export --out -`
    cli_export = _cli(folder, "export", "--by", "team", "--period", "2026-10", "--format", "csv", "--out", "-")
    assert inert.csv_text(ns["rows"]) == cli_export  # type: ignore[arg-type]
    # tag: the hits per rule the CLI's tag reports
    assert ns["tagged"].hits_by_rule == {r.id: n for r, n in app.tag(str(folder / "demo.duckdb")).rows}  # type: ignore[attr-defined]


def test_open_gives_an_audit_store_that_is_a_store(tmp_path: Path) -> None:
    with billing_audit.open(tmp_path / "s.duckdb") as store:
        assert isinstance(store, Audit) and isinstance(store, billing_audit.Store)
        report = store.ingest(FIXTURES / "aws" / "cur-legacy-parquet")  # one path is a list of one
        assert report.rows == store.summary()["lines"].sum()
    with billing_audit.open(tmp_path / "s.duckdb", read_only=True) as reader:
        assert reader.summary(provider="azure").height == 0
        with pytest.raises(BillingAuditError, match="open read-only: ingest writes the store"):
            reader.ingest([FIXTURES / "aws"])
        with pytest.raises(BillingAuditError, match="open read-only: tag writes the store"):
            reader.tag()
        with pytest.raises(BillingAuditError, match="expected YYYY-MM-DD"):
            reader.search("restart", since="2026/10/01")
    with pytest.raises(BillingAuditError, match="no store at"):
        billing_audit.open(tmp_path / "none.duckdb", read_only=True)
    assert not (tmp_path / "none.duckdb").exists()


def test_prices_gives_the_prices_command_groups_answers(tmp_path: Path) -> None:
    """store.prices.ingest / list / needs are `prices ingest` / `prices list` / the pull's needs: the 2018 CUR with
    the saved June 2018 offer file leaves fewer spot lines unpriced, and the API's coverage is the CLI's."""
    db = tmp_path / "s.duckdb"
    with billing_audit.open(db) as store:
        store.ingest(FIXTURES / "aws" / "cur-2018-csv")
        store.tag()
        before = store.prices.needs("aws")
        load = store.prices.ingest(FIXTURES / "prices" / "aws" / "AmazonEC2-20180601-us-east-1.csv")
        assert load.added > 0 and not load.errors
        after = store.prices.needs("aws")
        assert len(after) < len(before)
        listing = store.prices.list()
        assert {r["provider"] for r in listing.references} == {"aws"}
        api_cov = [{k: str(v) for k, v in row.items()} for row in listing.coverage]
    cli = CliRunner().invoke(main, ["prices", "list", "--db", str(db), "--format", "json"])
    assert cli.exit_code == 0, cli.output
    doc = json.loads(cli.output)
    cli_cov = [{k: str(v) for k, v in row.items()} for row in doc["coverage"]]
    assert [r["unpriced"] for r in cli_cov] == [r["unpriced"] for r in api_cov]
    with billing_audit.open(db, read_only=True) as reader, pytest.raises(BillingAuditError, match="read-only"):
        reader.prices.ingest(FIXTURES / "prices" / "aws")


def test_importing_the_package_imports_neither_the_api_nor_the_app(tmp_path: Path) -> None:
    probe = ("import sys, billing_audit\n"
             "print(sorted(m for m in ('billing_audit.api', 'billing_audit.app', 'billing_audit.report', "
             "'billing_audit.search') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                       check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
