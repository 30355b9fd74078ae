"""The synthetic-export generator: real formats that ingest, tag and report, with cost conserved."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import billing_audit
from billing_audit.cli.generate_cmd import generate as command
from billing_audit.config import load_config
from billing_audit.errors import BillingAuditError
from billing_audit.generate import generate
from billing_audit.report import build_report

ROWS = 10_000


def _source_total(provider: str, files: list[Path]) -> Decimal:
    """The files' billed cost, read without billing-audit."""
    if provider == "aws":
        total = Decimal(0)
        for f in files:
            for v in pq.read_table(f, columns=["line_item_unblended_cost"]).column(0).to_pylist():
                total += Decimal(repr(v))
        return total
    if provider == "gcp":
        total = Decimal(0)
        for f in files:
            t = pq.read_table(f, columns=["cost", "credits"])
            for cost, credits in zip(t.column("cost").to_pylist(), t.column("credits").to_pylist(), strict=True):
                total += Decimal(repr(cost)) + sum((Decimal(repr(c["amount"])) for c in credits), Decimal(0))
        return total
    paths = ", ".join(f"'{f}'" for f in files)
    row = duckdb.connect().execute(
        f"SELECT sum(CAST(CostInBillingCurrency AS DECIMAL(38,12))) FROM read_csv([{paths}], all_varchar=true)"
    ).fetchone()
    assert row is not None
    return Decimal(row[0])


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    root = tmp_path_factory.mktemp("gen")
    return {p: generate(p, ROWS, root / p, seed=3, rows_per_file=4_000) for p in ("aws", "azure", "gcp")}


@pytest.mark.parametrize("provider", ["aws", "azure", "gcp"])
def test_generated_export_ingests_tags_and_reports(provider: str, generated: dict[str, list[Path]],
                                                    tmp_path: Path) -> None:
    files = generated[provider]
    assert len(files) == 3  # 10k rows, 4k per part: multi-part like the real exports
    root = files[0].parents[{"aws": 5, "azure": 6, "gcp": 2}[provider]]
    with billing_audit.open(tmp_path / "s.duckdb") as store:
        rep = store.ingest([root])
        assert not rep.errors, rep.errors
        assert rep.rows == ROWS
        fmt = {"aws": "aws-cur", "azure": "azure-cost-details", "gcp": "gcp-billing-resource"}[provider]
        assert {r.format for r in rep.files} == {fmt}
        stored = store.con.execute("SELECT sum(BilledCost), count(*) FROM line_items").fetchone()
        assert stored is not None and stored[1] == ROWS
        expected = _source_total(provider, files)
        assert abs(Decimal(stored[0]) - expected) < Decimal("0.000001"), (stored[0], expected)
        result = store.tag()
        assert result.hits_by_rule.get("BA010", 0) > 0, "no restart-fee lines matched"
        for rule in ("BA001", "BA030", "BA040"):  # spot GPU, checkpoint re-reads, checkpoint egress
            assert result.hits_by_rule.get(rule, 0) > 0, rule
        fee_lines = store.con.execute(
            "SELECT count(*), sum(l.BilledCost) FROM rule_hits h JOIN line_items l USING (x_LineItemId) "
            "WHERE h.rule_id = 'BA010'").fetchone()
        assert fee_lines is not None
        assert 0.0003 * ROWS <= fee_lines[0] <= 0.003 * ROWS  # ~0.1% of the lines
        assert fee_lines[1] > 0
        report = build_report(store, load_config(None), "2026-10", "effective")
    jobs = report.jobs
    assert jobs.height > 10
    assert sum(jobs["restart_fees"].to_list()) > 0
    attributed = set(jobs["job"].to_list()) - {"(unattributed)"}
    assert len(attributed) >= 40  # the 48 training jobs
    assert len(set(report.teams["team"].to_list()) - {"(unattributed)"}) >= 6


def test_layouts_are_the_real_ones(generated: dict[str, list[Path]]) -> None:
    aws = generated["aws"][0]
    assert aws.name == "gpu-estate-cur-00001.snappy.parquet"
    assert aws.parent.parts[-4:] == ("gpu-estate-cur", "gpu-estate-cur", "year=2026", "month=10")
    cols = pq.read_schema(aws).names
    assert len(cols) >= 60
    assert sum(c.startswith("resource_tags_user_") for c in cols) >= 5
    assert str(pq.read_schema(aws).field("line_item_unblended_cost").type) == "double"
    assert str(pq.read_schema(aws).field("line_item_unblended_rate").type) == "string"
    az = generated["azure"][0]
    assert (az.parent / "manifest.json").is_file()
    assert az.read_bytes().startswith(b"\xef\xbb\xbfInvoiceSectionName,AccountName")
    gcp = pq.read_schema(generated["gcp"][0])
    assert str(gcp.field("credits").type).startswith("list<")
    assert str(gcp.field("service").type).startswith("struct<")


def test_cardinalities_look_like_an_estate(generated: dict[str, list[Path]]) -> None:
    paths = ", ".join(f"'{f}'" for f in generated["aws"])
    row = duckdb.connect().execute(
        f"""SELECT count(DISTINCT line_item_resource_id), count(DISTINCT line_item_usage_type),
                   count(DISTINCT resource_tags_user_team), count(DISTINCT resource_tags_user_training_job),
                   count(*) FILTER (WHERE line_item_line_item_type = 'Tax')
            FROM read_parquet([{paths}])"""
    ).fetchone()
    assert row is not None
    resources, usage_types, teams, jobs, _tax = row
    assert resources >= 2_000
    assert usage_types >= 100
    assert teams == 6
    assert jobs >= 40


def test_same_seed_same_files_other_seed_other_files(tmp_path: Path) -> None:
    a = generate("aws", 3_000, tmp_path / "a", seed=1)
    b = generate("aws", 3_000, tmp_path / "b", seed=1)
    c = generate("aws", 3_000, tmp_path / "c", seed=2)
    assert a[0].read_bytes() == b[0].read_bytes()
    assert a[0].read_bytes() != c[0].read_bytes()


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(BillingAuditError):
        generate("oracle", 10, tmp_path)
    with pytest.raises(BillingAuditError):
        generate("aws", 0, tmp_path)


def test_cli_generate(tmp_path: Path) -> None:
    r = CliRunner().invoke(command, ["--provider", "azure", "--rows", "500", "--out", str(tmp_path), "--seed", "4"])
    assert r.exit_code == 0, r.output
    files = [Path(line) for line in r.stdout.splitlines() if line.strip()]
    assert len(files) == 1 and files[0].is_file()
    help_text = CliRunner().invoke(command, ["--help"]).output
    assert "Examples:" in help_text
