"""Hostile rules: what fuses into the built-in scan, CTE scoping, failing rules, and the functions refused.

Issue #15 items 2 and 9a.  Only built-in rules fuse (they are trusted); a rule fuses only when its parsed tree
means a plain filter over line_items.  User rules run on their own, bounded (tests/test_rule_bounds.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlglot

import billing_audit
from billing_audit.rules import FORBIDDEN_FUNCTIONS, RuleError, load_rules, parse_rule_file
from billing_audit.tagging import _fusable
from support import FIXTURES

HEADER = """/*
id: {id}
name: custom.{name}
title: a hostile rule
category: custom
severity: low
providers: [aws]
*/
"""


def rule_file(folder: Path, sql: str, id: str = "TM800") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{id}_r.sql"
    path.write_text(HEADER.format(id=id, name=id.lower()) + sql + "\n")
    return path


FUSABLE = [
    "select x_LineItemId, 'x' as reason from line_items",
    "select x_LineItemId, 'fee ' || BilledCost as reason from line_items where BilledCost > $min and x_Provider = 'aws'",
    "select line_items.x_LineItemId, coalesce(x_UsageType, '?') as reason from line_items "
    "where x_UsageType in ('a', 'b') and regexp_matches(lower(x_UsageType), 'spot')",
    "select x_LineItemId, 'x' as reason from line_items where list_has_any(map_keys(Tags), ['job'])",
    # the one subquery that means the same in the fused scan: the documented checkpoint list (BA030, BA040)
    "select x_LineItemId, 'x' as reason from line_items where ResourceId in (select ResourceId from checkpoint_resources)",
]
NOT_FUSABLE = [
    # CTEs, in every place they can stand
    "with f as (select 'n' as path) select x_LineItemId, (select path from f) as reason from line_items",
    "with line_items as (select * from line_items where x_Provider = 'aws') select x_LineItemId, 'x' as reason "
    "from line_items",
    "with file_stats as (select 'n' as path) select x_LineItemId, 'x' as reason from line_items",
    "with recursive r(n) as (select 1 union all select n + 1 from r where n < 3) select x_LineItemId, 'x' as reason "
    "from line_items",
    # subqueries: scalar, nested, EXISTS, IN, derived table
    "select x_LineItemId, 'x' as reason from line_items where BilledCost > (select avg(BilledCost) from line_items)",
    "select x_LineItemId, (select max(x) from (select 1 as x) t) as reason from line_items",
    "select x_LineItemId, 'x' as reason from line_items where exists (select 1 from checkpoint_resources)",
    "select x_LineItemId, 'x' as reason from line_items where ResourceId in (select ResourceId from line_items)",
    "select x_LineItemId, 'x' as reason from line_items where ResourceId in "
    "(select ResourceId from checkpoint_resources where x_Provider = 'aws')",
    "select x_LineItemId, 'x' as reason from line_items where ResourceId in "
    "(with checkpoint_resources as (select 'r' as ResourceId) select ResourceId from checkpoint_resources)",
    "select x_LineItemId, 'x' as reason from line_items where ResourceId in (select c.ResourceId from "
    "checkpoint_resources c)",
    "select x_LineItemId, 'x' as reason from line_items where (select ResourceId from checkpoint_resources limit 1) "
    "= ResourceId",
    "select x_LineItemId, 'x' as reason from (select * from line_items) t",
    # set operations
    "select x_LineItemId, 'a' as reason from line_items union select x_LineItemId, 'b' as reason from line_items",
    "select x_LineItemId, 'a' as reason from line_items except select x_LineItemId, 'a' as reason from line_items",
    # joins, another table, an alias, a qualifier
    "select l.x_LineItemId, 'x' as reason from line_items l join checkpoint_resources c using (ResourceId)",
    "select x_LineItemId, 'x' as reason from line_items, checkpoint_resources",
    "select x_LineItemId, 'x' as reason from checkpoint_resources",
    "select l.x_LineItemId, 'x' as reason from line_items l",
    # windows, aggregates, qualify, distinct, grouping, ordering, limits
    "select x_LineItemId, (sum(BilledCost) over ())::varchar as reason from line_items",
    "select x_LineItemId, 'x' as reason from line_items qualify row_number() over (partition by ResourceId) = 1",
    "select x_LineItemId, 'x' as reason from line_items where BilledCost > 0 window w as (order by BilledCost)",
    "select x_LineItemId, count(*)::varchar as reason from line_items group by 1",
    "select x_LineItemId, 'x' as reason from line_items group by all having count(*) > 1",
    "select distinct x_LineItemId, 'x' as reason from line_items",
    "select x_LineItemId, 'x' as reason from line_items order by BilledCost limit 5",
    "select x_LineItemId, 'x' as reason from line_items offset 3",
    # lateral, unnest, table functions
    "select x_LineItemId, u as reason from line_items, unnest(['a', 'b']) t(u)",
    "select x_LineItemId, unnest(['a', 'b']) as reason from line_items",
    "select x_LineItemId, t.r as reason from line_items, lateral (select 'x' as r) t",
    "select x_LineItemId, 'x' as reason from line_items, range(3) t(i)",
    # the id is not the line's own
    "select 'forged' as x_LineItemId, 'x' as reason from line_items",
    "select ResourceId as x_LineItemId, 'x' as reason from line_items",
    "select *, 'x' as reason from line_items",
]


@pytest.mark.parametrize("sql", FUSABLE)
def test_plain_filters_fuse(sql: str) -> None:
    assert _fusable(sqlglot.parse_one(sql, read="duckdb")) is not None  # type: ignore[arg-type]


@pytest.mark.parametrize("sql", NOT_FUSABLE, ids=[s[:60] for s in NOT_FUSABLE])
def test_every_other_shape_runs_on_its_own(sql: str) -> None:
    assert _fusable(sqlglot.parse_one(sql, read="duckdb")) is None  # type: ignore[arg-type]


def test_every_builtin_rule_still_fuses() -> None:
    for r in load_rules().rules:
        assert _fusable(r.tree) is not None, r.id  # type: ignore[arg-type]


@pytest.fixture
def store(tmp_path: Path) -> Path:
    db = tmp_path / "s.duckdb"
    with billing_audit.open(db) as s:
        assert not s.ingest([FIXTURES]).errors
    return db


def _builtin_hits(db: Path) -> list[tuple[object, ...]]:
    with billing_audit.open(db) as s:
        return s.con.execute("SELECT rule_id, x_LineItemId, reason FROM rule_hits WHERE rule_id LIKE 'BA%' "
                             "ORDER BY ALL").fetchall()


def test_cte_rules_keep_their_meaning_and_cannot_reach_store_tables(store: Path, tmp_path: Path) -> None:
    folder = tmp_path / "rules"
    rule_file(folder, "with file_stats as (select 'nothing' as path), ingest_log as (select 'nothing' as file) "
              "select x_LineItemId, (select path from file_stats limit 1) || ' | ' || "
              "(select file from ingest_log limit 1) as reason from line_items where x_Provider = 'aws'", "TM801")
    rule_file(folder, "with line_items as (select * from line_items where x_Provider = 'aws') "
              "select x_LineItemId, 'aws only' as reason from line_items", "TM802")
    rule_file(folder, "with thr as (select avg(BilledCost) as a from line_items) "
              "select x_LineItemId, 'above average' as reason from line_items where BilledCost > (select a from thr)",
              "TM803")
    with billing_audit.open(store) as s:
        s.tag()
    builtin_alone = _builtin_hits(store)
    rules = load_rules([folder]).rules
    with billing_audit.open(store) as s:
        result = s.tag(rules)
        assert not result.failed
        assert result.scans == 1 + 3  # the built-ins in one scan, each user rule on its own
        paths = [r[0] for r in s.con.execute("SELECT path FROM file_stats").fetchall()]
        got = s.con.execute(
            "SELECT rule_id, reason, list(DISTINCT l.x_Provider ORDER BY l.x_Provider), count(*) FROM rule_hits h "
            "JOIN line_items l USING (x_LineItemId) WHERE rule_id LIKE 'TM%' GROUP BY ALL ORDER BY ALL").fetchall()
        above = s.con.execute("SELECT count(*) FROM line_items WHERE BilledCost > (SELECT avg(BilledCost) "
                              "FROM line_items)").fetchone()
        aws = s.con.execute("SELECT count(*) FROM line_items WHERE x_Provider = 'aws'").fetchone()
        reasons = [r[0] for r in s.con.execute("SELECT DISTINCT reason FROM rule_hits").fetchall()]
    assert paths and not any(p in (r or "") for p in paths for r in reasons), "a store file path leaked into a reason"
    assert got[0] == ("TM801", "nothing | nothing", ["aws"], aws[0])
    assert got[1] == ("TM802", "aws only", ["aws"], aws[0])
    assert got[2][0] == "TM803" and got[2][3] == above[0] and len(got[2][2]) == 3
    assert _builtin_hits(store) == builtin_alone  # the built-in rules' hits are exactly theirs


def test_a_cte_name_only_counts_inside_its_own_query(tmp_path: Path) -> None:
    # the CTE ingest_log lives in a derived table; the scalar subquery's ingest_log would be the store's table
    path = rule_file(tmp_path, "select x_LineItemId, (select file from ingest_log limit 1) as reason from line_items, "
                     "(with ingest_log as (select 1 as file) select * from ingest_log) t")
    with pytest.raises(RuleError, match="unknown table 'ingest_log'"):
        parse_rule_file(path)
    path = rule_file(tmp_path, "select x_LineItemId, 'x' as reason from line_items where exists "
                     "(with q as (select 1) select * from q, ingest_log)")
    with pytest.raises(RuleError, match="unknown table 'ingest_log'"):
        parse_rule_file(path)


def test_a_failing_user_rule_is_reported_and_skipped(store: Path, tmp_path: Path) -> None:
    folder = tmp_path / "rules"
    rule_file(folder, "select x_LineItemId, 'x' as reason from line_items where CAST(x_UsageType AS INTEGER) > 0",
              "TM804")
    rule_file(folder, "select x_LineItemId, 'ok' as reason from line_items where x_Provider = 'gcp'", "TM805")
    with billing_audit.open(store) as s:
        s.tag()
    builtin_alone = _builtin_hits(store)
    with billing_audit.open(store) as s:
        result = s.tag(load_rules([folder]).rules)
        assert [e.file for e in result.failed] == [str(folder / "TM804_r.sql")]
        assert "Could not convert" in str(result.failed[0]) or "Conversion" in str(result.failed[0])
        assert "TM804" not in result.rules and "TM805" in result.rules
        gcp = s.con.execute("SELECT count(*) FROM line_items WHERE x_Provider = 'gcp'").fetchone()
        assert s.con.execute("SELECT count(*) FROM rule_hits WHERE rule_id = 'TM805'").fetchone() == gcp
    assert _builtin_hits(store) == builtin_alone


# -- 9a: functions that read settings, files, the environment or the catalog ------------------------------------
FUNCTION_ATTACKS = [
    ("current_setting", "select x_LineItemId, current_setting('temp_directory') as reason from line_items"),
    ("current_setting", "select x_LineItemId, 'temp_directory'.current_setting() as reason from line_items"),
    ("current_setting", 'select x_LineItemId, "current_setting"(\'temp_directory\') as reason from line_items'),
    ("current_setting", "select x_LineItemId, CURRENT_SETTING('memory_limit') as reason from line_items"),
    ("current_setting", "select x_LineItemId, system.main.current_setting('temp_directory') as reason from line_items"),
    ("getenv", "select x_LineItemId, getenv('HOME') as reason from line_items"),
    ("getvariable", "select x_LineItemId, getvariable('x') as reason from line_items"),
    ("current_query", "select x_LineItemId, current_query() as reason from line_items"),
    ("current_database", "select x_LineItemId, current_database() as reason from line_items"),
    ("current_catalog", "select x_LineItemId, current_catalog() as reason from line_items"),
    ("current_schemas", "select x_LineItemId, current_schemas(true)::varchar as reason from line_items"),
    ("in_search_path", "select x_LineItemId, in_search_path('main', 'x')::varchar as reason from line_items"),
    ("write_log", "select x_LineItemId, write_log('x')::varchar as reason from line_items"),
    ("read_text", "select x_LineItemId, content as reason from read_text('/etc/hostname')"),
    ("read_blob", "select x_LineItemId, (select content from read_blob('/etc/hostname'))::varchar as reason "
                  "from line_items"),
    ("read_csv", "select x_LineItemId, (select count(*) from read_csv('/etc/passwd'))::varchar as reason from line_items"),
    ("read_duckdb", "select * from read_duckdb('/tmp/x.duckdb')"),
    ("glob", "select x_LineItemId, (select count(*) from glob('/etc/*'))::varchar as reason from line_items"),
    ("parquet_schema", "select * from parquet_schema('/tmp/x.parquet')"),
    ("duckdb_settings", "select x_LineItemId, (select value from duckdb_settings() limit 1) as reason from line_items"),
    ("duckdb_secrets", "select * from duckdb_secrets()"),
    ("duckdb_databases", "select * from duckdb_databases()"),
    ("duckdb_temporary_files", "select * from duckdb_temporary_files()"),
    ("duckdb_variables", "select * from duckdb_variables()"),
    ("duckdb_tables", "select * from duckdb_tables()"),
    ("pragma_storage_info", "select * from pragma_storage_info('ingest_log')"),
    ("pragma_database_size", "select * from pragma_database_size()"),
    ("which_secret", "select * from which_secret('s3://x', 's3')"),
    ("json_execute_serialized_sql", "select * from json_execute_serialized_sql('x')"),
    ("query_table", "select * from query_table('ingest_log')"),
    ("query", "select * from query('select * from ingest_log')"),
    ("checkpoint", "select * from checkpoint()"),
    ("enable_logging", "select * from enable_logging()"),
]


@pytest.mark.parametrize(("name", "sql"), FUNCTION_ATTACKS, ids=[f"{n}:{s[21:60]}" for n, s in FUNCTION_ATTACKS])
def test_functions_that_read_settings_files_or_the_environment_are_refused(tmp_path: Path, name: str,
                                                                            sql: str) -> None:
    assert FORBIDDEN_FUNCTIONS.match(name)
    with pytest.raises(RuleError) as e:
        parse_rule_file(rule_file(tmp_path, sql))
    assert name in str(e.value).lower() or "not allowed" in str(e.value)
    assert e.value.line is not None
