"""The engines behind one interface: found by name, each with its own options, the flags a CLI makes of them."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

import billing_audit
from billing_audit import engines
from billing_audit.config import Config
from billing_audit.engines import pipeline
from billing_audit.engines.base import Engine
from billing_audit.errors import BillingAuditError
from billing_audit.rules import load_rules
from support import FIXTURES

TODAY = {"--spark-master", "--spark-lines", "--source", "--spark-raw", "--spark-write-lines", "--bq-table", "--bq-project",
         "--bq-endpoint", "--max-bytes-billed", "--athena-table", "--athena-kind", "--athena-workgroup", "--athena-output", "--aws-profile", "--aws-region",
         "--aws-endpoint"}


def test_engines_found_by_name() -> None:
    assert engines.names() == ("athena", "bigquery", "duckdb", "spark")
    for name in engines.names():
        eng = engines.engine(name)
        assert isinstance(eng, Engine) and eng.name == name
        assert eng.Options.model_config.get("extra") == "forbid"
    assert type(engines.engine("spark")).__module__ == "connectors.spark.engine"
    assert type(engines.engine("bigquery")).__module__ == "connectors.gcp.bigquery"
    assert type(engines.engine("athena")).__module__ == "connectors.aws.athena"


def test_unknown_engine_says_did_you_mean() -> None:
    with pytest.raises(BillingAuditError, match=r"unknown engine \(did you mean 'bigquery'\?\)"):
        engines.engine("bigqeury")
    with pytest.raises(BillingAuditError, match="choose one of athena, bigquery, duckdb, spark"):
        engines.engine("snowflake")


def test_option_flags_are_todays_and_the_cli_has_them() -> None:
    specs = engines.option_specs()
    flags = [s.flag for s in specs]
    assert set(flags) == TODAY and len(flags) == len(TODAY)
    assert {s.engine for s in specs} == {"spark", "bigquery", "athena"}  # duckdb has none
    from billing_audit.cli import main

    report = main.get_command(click.Context(main), "report")  # the commands load lazily: asked for, not listed
    assert isinstance(report, click.Command)
    by_flag = {o: p for p in report.params if isinstance(p, click.Option) for o in p.opts}
    for s in specs:  # what the models say is what the command line offers
        p = by_flag[s.flag]
        assert p.name == s.name and (p.help or "") == s.help and p.metavar == s.metavar, s.flag
        assert (None if p.default in (None, getattr(click.core, "UNSET", None)) else p.default) == s.default, s.flag
        if s.choices:
            assert isinstance(p.type, click.Choice) and tuple(p.type.choices) == s.choices
        if s.type == "int":
            assert isinstance(p.type, click.IntRange) and p.type.min == s.min == 1
    kinds = {s.flag: s for s in specs}
    assert kinds["--athena-kind"].choices == ("cur2", "focus") and kinds["--athena-kind"].default == "cur2"
    assert kinds["--spark-master"].default == "local[*]"
    assert kinds["--bq-table"].metavar == "PROJECT.DATASET.TABLE"


def test_options_from_the_flat_cli_dict() -> None:
    flat = {"engine": "bigquery", "spark_master": "local[*]", "spark_lines": None, "bq_table": "p.d.t",
            "bq_project": None, "bq_endpoint": None, "max_bytes_billed": 10, "athena_table": None,
            "athena_kind": "cur2", "athena_workgroup": "primary", "athena_output": None, "aws_profile": None,
            "aws_region": None, "aws_endpoint": None}
    bq = engines.options_from_flat("bigquery", flat)
    assert bq.model_dump() == {"bq_table": "p.d.t", "bq_project": None, "bq_endpoint": None, "max_bytes_billed": 10}
    assert engines.options_from_flat("spark", flat).model_dump() == {"spark_master": "local[*]", "spark_lines": None,
                                                                      "spark_source": "lines", "spark_raw": None,
                                                                      "spark_write_lines": None}
    assert engines.options_from_flat("duckdb", flat).model_dump() == {}
    with pytest.raises(BillingAuditError, match="--athena-kind 'legacy'"):
        engines.options_from_flat("athena", {"athena_kind": "legacy"})
    with pytest.raises(BillingAuditError, match="--max-bytes-billed 0"):
        engines.options_from_flat("bigquery", {"max_bytes_billed": 0})
    with pytest.raises(Exception, match="extra"):  # each model forbids what is not its own
        engines.engine("bigquery").Options(spark_master="x")  # type: ignore[call-arg]


@pytest.mark.parametrize("name,options,message", [
    ("bigquery", {}, "--engine bigquery needs --bq-table PROJECT.DATASET.TABLE and --period YYYY-MM"),
    ("bigquery", {"bq_table": "p.d.t"}, "--engine bigquery needs --bq-table PROJECT.DATASET.TABLE and --period"),
    ("athena", {}, "--engine athena needs --athena-table DATABASE.TABLE and --period YYYY-MM"),
    ("athena", {"athena_table": "nodot"}, "--engine athena needs --athena-table DATABASE.TABLE"),
])
def test_missing_required_options_are_named(tmp_path: Path, name: str, options: dict[str, str], message: str) -> None:
    with billing_audit.open(tmp_path / "s.duckdb") as store:
        with pytest.raises(BillingAuditError, match=message.replace("(", r"\(").replace(".", r"\.")):
            engines.run_engine(store, name, [], Config(), None,
                               "effective", options=options)
        assert engines.expected_source(store, name, options) == options.get("bq_table", options.get("athena_table"))


def test_duckdb_engine_runs_the_one_query_on_the_store(tmp_path: Path) -> None:
    rules = load_rules().rules
    with billing_audit.open(tmp_path / "s.duckdb") as store:
        assert not store.ingest([str(FIXTURES / "scenarios")]).errors
        run_id = engines.run_engine(store, "duckdb", rules, Config(), "2026-11", "effective")
        got = store.con.execute("SELECT engine, source, sql FROM engine_runs WHERE run_id = ?", [run_id]).fetchone()
        n = store.con.execute("SELECT count(*) FROM engine_results WHERE run_id = ?", [run_id]).fetchone()
        want = store.con.execute(pipeline.engine_sql("duckdb", rules, Config(), "2026-11", "effective")).fetchall()
        assert got == ("duckdb", str(store.path), pipeline.engine_sql("duckdb", rules, Config(), "2026-11", "effective"))
        assert n is not None and n[0] == len(want) > 0
