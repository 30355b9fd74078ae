"""How many partitions a Spark audit runs in (pyspark local[2]): one per 250k kept lines within 8..192, an
environment override, the session's own setting left as it was, and the partition counts read back from Spark
itself (the kept lines' RDD, the shuffle setting the audit's steps see)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import billing_audit
from billing_audit.cli import main
from billing_audit.config import load_config
from billing_audit.engines import run_engine
from billing_audit.errors import BillingAuditError
from billing_audit.rules import load_rules
from connectors.spark import engine, raw
from support import FIXTURES

MASTER = "local[2]"
CFG = load_config(FIXTURES / "scenarios" / "billing-audit.toml")
RULES = load_rules().rules
CUR2 = FIXTURES / "aws" / "cur2"


@pytest.fixture
def no_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(engine.PARTITIONS_ENV, raising=False)
    monkeypatch.delenv(engine.PARTITION_BYTES_ENV, raising=False)


@pytest.mark.parametrize(("lines", "partitions"), [
    (0, 8), (1, 8), (2_000_000, 8), (2_000_001, 9), (3_000_000, 12), (10_000_000, 40), (48_000_000, 192),
    (48_000_001, 192), (10**10, 192)])
def test_one_partition_per_250k_lines_within_8_to_192(no_override: None, lines: int, partitions: int) -> None:
    assert engine.partitions_for(lines) == partitions


@pytest.mark.parametrize("value", ["1", "3", " 500 "])
def test_the_environment_says_how_many_whatever_the_lines(no_override: None, monkeypatch: pytest.MonkeyPatch,
                                                          value: str) -> None:
    monkeypatch.setenv(engine.PARTITIONS_ENV, value)
    assert engine.partitions_for(10) == engine.partitions_for(10**10) == int(value)


@pytest.mark.parametrize("value", ["0", "-4", "eight", "2.5", "1e3"])
def test_a_bad_partition_count_names_the_variable(no_override: None, monkeypatch: pytest.MonkeyPatch,
                                                  value: str) -> None:
    monkeypatch.setenv(engine.PARTITIONS_ENV, value)
    with pytest.raises(BillingAuditError, match=rf"^BILLING_AUDIT_SPARK_PARTITIONS='{re.escape(value)}': not a number"):
        engine.partitions_for(1000)


@pytest.mark.parametrize(("value", "ok"), [("16m", True), ("64MB", True), ("1g", True), ("1048576", True),
                                           ("0", False), ("sixteen", False), ("16 m", False), ("-1m", False)])
def test_the_advisory_partition_size_and_its_bad_value(no_override: None, monkeypatch: pytest.MonkeyPatch,
                                                       value: str, ok: bool) -> None:
    assert engine.partition_bytes() == "16m"
    monkeypatch.setenv(engine.PARTITION_BYTES_ENV, value)
    if ok:
        assert engine.partition_bytes() == value
    else:
        with pytest.raises(BillingAuditError, match=rf"^BILLING_AUDIT_SPARK_PARTITION_BYTES='{re.escape(value)}'"):
            engine.partition_bytes()


def test_a_bad_value_is_one_message_from_the_command_line(no_override: None, monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    monkeypatch.setenv(engine.PARTITIONS_ENV, "many")
    res = CliRunner().invoke(main, ["audit", str(CUR2), "--db", str(tmp_path / "s.duckdb"), "--out", str(tmp_path / "o"),
                                    "-q", "--engine", "spark", "--source", "raw", "--spark-master", MASTER])
    assert res.exit_code == 2, res.output
    assert "BILLING_AUDIT_SPARK_PARTITIONS='many': not a number of partitions" in res.output
    assert "Traceback" not in res.output


def test_the_shuffle_setting_is_the_blocks_and_restored_after_even_on_error(no_override: None) -> None:
    spark = engine.session(MASTER)
    spark.conf.set(engine.SHUFFLE, "5")
    with engine.shuffle_partitions(spark, 13):
        assert spark.sql(f"SET {engine.SHUFFLE}").collect()[0][1] == "13"
    assert spark.conf.get(engine.SHUFFLE) == "5"
    with pytest.raises(ZeroDivisionError), engine.shuffle_partitions(spark, 21):
        1 / 0  # noqa: B018
    assert spark.conf.get(engine.SHUFFLE) == "5"
    with engine.shuffle_partitions(spark, None):
        assert spark.conf.get(engine.SHUFFLE) == "5"


def test_the_session_takes_the_advisory_size(no_override: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(engine.PARTITION_BYTES_ENV, "8m")
    assert engine.session(MASTER).conf.get(engine.ADVISORY) in ("8m", str(8 * 2**20))
    monkeypatch.delenv(engine.PARTITION_BYTES_ENV)
    assert engine.session(MASTER).conf.get(engine.ADVISORY) in ("16m", str(16 * 2**20))


def _kept(spark: Any, folder: Path) -> tuple[raw.Kept, Any]:
    with raw.plan([folder]) as plan:
        lines = raw.mapped_lines(spark, plan)
        kept = raw.keep_newest(spark, plan, lines)
        return kept, lines


def test_a_run_uses_the_partitions_for_its_lines_and_leaves_the_session_as_it_was(
        no_override: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(engine, "LINES_PER_PARTITION", 1)  # the fixture's few lines, one a partition
    spark = engine.session(MASTER)
    kept, lines = _kept(spark, CUR2)
    want = engine.partitions_for(kept.lines)
    assert kept.lines > engine.MIN_PARTITIONS and want == kept.lines != engine.SESSION_PARTITIONS
    assert raw.kept_lines(lines, kept, want).rdd.getNumPartitions() == want
    assert raw.kept_lines(lines, kept).rdd.getNumPartitions() != want  # the files' own partitions, fewer

    session_value = engine.session(MASTER).conf.get(engine.SHUFFLE)
    assert session_value == str(engine.SESSION_PARTITIONS)
    held = engine.persisted(spark)
    with billing_audit.open(tmp_path / "s.duckdb") as store:
        run_engine(store, "spark", RULES, CFG, None, "effective", spark_master=MASTER, spark_source="raw",
                   spark_raw=str(CUR2))
    assert spark.conf.get(engine.SHUFFLE) == session_value
    # every step and file mapping the run checkpointed is released: the session holds what it held before
    assert engine.persisted(spark) == held


def test_a_run_that_fails_releases_the_steps_it_materialised(no_override: None) -> None:
    spark = engine.session(MASTER)
    held = engine.persisted(spark)
    frame = spark.range(40).selectExpr("cast(id % 7 AS string) AS k")
    steps = [("grouped", "SELECT k, count(*) AS n FROM line_items GROUP BY k"),
             ("counted", "SELECT count(*) AS n FROM grouped"),
             ("final", "SELECT no_such_column FROM counted")]
    with pytest.raises(BillingAuditError, match="Spark could not run the audit query"):
        engine.run(steps, "frame", MASTER, frame=frame)
    assert engine.persisted(spark) == held
    assert not {"grouped", "counted"} & {t.name for t in spark.catalog.listTables()}


def test_the_audit_steps_run_in_the_partitions_given(no_override: None) -> None:
    spark = engine.session(MASTER)
    before = spark.conf.get(engine.SHUFFLE)
    frame = spark.range(40).selectExpr("cast(id % 7 AS string) AS k")
    steps = [("grouped", "SELECT k, count(*) AS n FROM line_items GROUP BY k"),
             ("final", f"SET {engine.SHUFFLE}")]
    assert engine.run(steps, "frame", MASTER, frame=frame, partitions=13) == [(engine.SHUFFLE, "13")]
    assert engine.run(steps, "frame", MASTER, frame=frame) == [(engine.SHUFFLE, before)]
    assert spark.conf.get(engine.SHUFFLE) == before
