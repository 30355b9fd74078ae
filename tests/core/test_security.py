"""The attack lists: hostile rules against the sandbox, hostile keys against the pull cache."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import billing_audit
from billing_audit.errors import BillingAuditError
from billing_audit.rules import RuleError, parse_rule_file
from connectors.pull_common import PullCache, PullError, RemoteObject, safe_relpath
from support import FIXTURES

HEADER = """/*
id: TM900
name: custom.attack
title: attack
category: custom
severity: low
providers: [aws]
*/
"""

ATTACKS = [
    ("select * from read_csv('/etc/passwd')", "read_csv"),
    ("select x_LineItemId, content as reason from read_text('/etc/hostname')", "read_text"),
    ("select x_LineItemId, 'x' as reason from read_parquet('/tmp/x.parquet')", "read_parquet"),
    ("select x_LineItemId, 'x' as reason from glob('/etc/*')", "glob"),
    ("select x_LineItemId, 'x' as reason from query('select 1')", "query"),
    ("select x_LineItemId, getenv('HOME') as reason from line_items", "getenv"),
    ("copy line_items to '/tmp/stolen.csv'", "COPY"),
    ("attach '/tmp/other.duckdb' as o", "ATTACH"),
    ("install httpfs", "INSTALL"),
    ("load httpfs", "not"),
    ("set enable_external_access = true", "SET"),
    ("pragma database_list", "PRAGMA"),
    ("call pragma_version()", "not"),
    ("create table t as select 1", "CREATE"),
    ("insert into rule_hits values ('a', 'b', 'c', 'd', 1)", "INSERT"),
    ("update line_items set BilledCost = 0", "UPDATE"),
    ("select x_LineItemId, 'x' as reason from line_items; drop table line_items", "exactly one"),
    ("select x_LineItemId, 'x' as reason from main.line_items", "other schemas"),
    ("select x_LineItemId, 'x' as reason from ingest_log", "unknown table"),
    ("select x_LineItemId, 'x' as reason from duckdb_settings()", "not allowed"),
]


@pytest.mark.parametrize(("sql", "words"), ATTACKS, ids=[a[0][:40] for a in ATTACKS])
def test_attack_rules_are_refused(tmp_path: Path, sql: str, words: str) -> None:
    path = tmp_path / "TM900_attack.sql"
    path.write_text(HEADER + sql + "\n")
    with pytest.raises(RuleError) as e:
        parse_rule_file(path)
    assert words.lower() in str(e.value).lower()
    assert not Path("/tmp/stolen.csv").exists()


def test_very_long_sql_is_refused_quickly(tmp_path: Path) -> None:
    path = tmp_path / "TM900_attack.sql"
    path.write_text(HEADER + "select x_LineItemId, 'x' as reason from line_items where " + " or ".join(
        f"BilledCost = {i}" for i in range(40_000)))
    start = time.monotonic()
    with pytest.raises(RuleError, match="larger than"):
        parse_rule_file(path)
    assert time.monotonic() - start < 2


@pytest.mark.slow
def test_recursive_cte_bomb_is_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "TM900_attack.sql"
    path.write_text(HEADER + """with recursive r(n) as (select 1 union all select n + 1 from r)
select l.x_LineItemId, 'bomb' as reason from line_items l, r where n < 0
""")
    rule = parse_rule_file(path)
    monkeypatch.setenv("BILLING_AUDIT_RULE_TIMEOUT", "2")
    db = tmp_path / "s.duckdb"
    with billing_audit.open(db) as store:
        store.ingest([FIXTURES / "scenarios"])
        store.tag()
        before = store.con.execute("SELECT count(*) FROM rule_hits").fetchone()
        start = time.monotonic()
        [error] = store.tag([rule]).failed
        assert isinstance(error, RuleError) and "ran longer than 2 s" in str(error)
        assert time.monotonic() - start < 30
        # the earlier hits are intact and the store still works
        assert store.con.execute("SELECT count(*) FROM rule_hits").fetchone() == before
        assert store.tag().hits == before[0]


@pytest.mark.parametrize("key", ["../escape.csv", "a/../../escape.csv", "/etc/passwd", "C:\\\\x.csv", "c:/x.csv",
                                 "a\\\\b.csv", "a\x00b.csv", "", "./a/../../b"])
def test_hostile_object_keys_cannot_leave_the_cache(tmp_path: Path, key: str) -> None:
    cache = PullCache(tmp_path / "cache", "s3://bucket")
    with pytest.raises(PullError):
        cache.path_for(key)
    with pytest.raises(BillingAuditError):
        safe_relpath(key)


def test_ordinary_keys_stay_inside(tmp_path: Path) -> None:
    cache = PullCache(tmp_path / "cache", "s3://bucket")
    p = cache.path_for("cur/report/20261001-20261101/a-b/report-1.csv.gz")
    assert p.is_relative_to((tmp_path / "cache").resolve())
    obj = RemoteObject("cur/x.csv", 3, "etag")
    assert not cache.unchanged(obj)
