"""Rule files: loading, refusals with file:line and a reason, the sandbox, and the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import billing_audit
from billing_audit.cli import main
from billing_audit.rules import CATEGORIES, RuleError, load_rules, parse_rule_file
from support import FIXTURES

PARQUET_DIR = FIXTURES / "aws/cur-legacy-parquet"

HEADER = """/*
id: {id}
name: custom.{name}
title: A team rule
category: {category}
severity: low
providers: [aws]
{extra}*/
"""


def write_rule(folder: Path, sql: str, *, id: str = "TM100", name: str = "big_gets", category: str = "custom",
               extra: str = "", filename: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (filename or f"{id}_{name}.sql")
    path.write_text(HEADER.format(id=id, name=name, category=category, extra=extra) + sql)
    return path


GOOD_SQL = "select x_LineItemId, 'GET over ' || $min_cost as reason\nfrom line_items\nwhere x_UsageType like '%Requests-Tier2' and BilledCost > $min_cost\n"
GOOD_PARAMS = "params:\n  min_cost: {default: 0.001, description: threshold}\n"


def test_builtin_pack_loads_with_documented_categories() -> None:
    rules = load_rules().rules
    assert {r.category for r in rules} >= {"spot_compute", "restart_fee", "storage_reread", "checkpoint_egress",
                                           "other_compute_charge", "interruption_signal", "on_demand_compute"}
    assert all(r.category in CATEGORIES for r in rules)
    assert len({r.id for r in rules}) == len(rules)


@pytest.mark.parametrize(
    ("sql", "extra", "line", "words"),
    [
        ("select x_LineItemId, 'x' as reason from line_items where (", "", 9, "syntax error"),
        ("drop table line_items", "", 9, "not DROP"),
        ("delete from line_items", "", 9, "not DELETE"),
        ("select * from read_csv('/etc/passwd')", "", 9, "read_csv"),
        ("select x_LineItemId, 'x' as reason from 'secrets.csv'", "", 9, "unknown table"),
        ("select x_LineItemId, 'x' as reason from line_items; select 1", "", 9, "exactly one"),
        ("pragma version", "", 9, "not PRAGMA"),
        ("attach '/tmp/other.duckdb'", "", 9, "not ATTACH"),
        ("copy line_items to '/tmp/out.csv'", "", 9, "not COPY"),
        ("install httpfs", "", 9, "not INSTALL"),
        ("set threads = 1", "", 9, "not SET"),
        ("select x_LineItemId from line_items", "", 9, "must return x_LineItemId and reason"),
        ("select x_LineItemId, 'x' as reason from line_items where BilledCost > $nope", "", 9, "$nope"),
        ("select x_LineItemId, 'x' as reason from line_itemz", "", 9, "did you mean 'line_items'"),
        ("select x_LineItemId, 'x' as reason from line_items", "colour: red\n", 8, "unknown key 'colour'"),
    ],
)
def test_bad_rules_are_refused_with_file_line_and_reason(tmp_path: Path, sql: str, extra: str, line: int,
                                                         words: str) -> None:
    path = write_rule(tmp_path, sql, extra=extra)
    with pytest.raises(RuleError) as e:
        parse_rule_file(path)
    assert e.value.file == str(path)
    assert e.value.line == line, str(e.value)
    assert words in str(e.value)
    assert str(e.value).startswith(f"{path}:{line}: ")


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"category": "spooky"}, "unknown category 'spooky'"),
        ({"filename": "wrong_name.sql"}, "file name must start with the rule id 'TM100'"),
        ({"id": "tm1"}, "header key 'id'"),
    ],
)
def test_bad_headers(tmp_path: Path, kwargs: dict[str, str], words: str) -> None:
    path = write_rule(tmp_path, GOOD_SQL, extra=GOOD_PARAMS, **kwargs)
    with pytest.raises(RuleError) as e:
        parse_rule_file(path)
    assert words in str(e.value)
    assert e.value.line is not None


def test_duplicate_id_is_refused(tmp_path: Path) -> None:
    write_rule(tmp_path / "a", GOOD_SQL, extra=GOOD_PARAMS)
    write_rule(tmp_path / "b", GOOD_SQL, extra=GOOD_PARAMS, name="other")
    with pytest.raises(RuleError) as e:
        load_rules([tmp_path])
    assert "duplicate rule id 'TM100'" in str(e.value)


def test_unknown_column_is_refused_at_bind_time_with_its_line(tmp_path: Path, db: Path) -> None:
    sql = "select x_LineItemId, 'x' as reason\nfrom line_items\nwhere NoSuchColumn > 1\n"
    path = write_rule(tmp_path, sql)
    rule = parse_rule_file(path)
    with billing_audit.open(db) as store:
        result = store.tag([rule])
    [e] = result.failed  # reported and skipped, never a run that stores nothing silently
    assert isinstance(e, RuleError)
    assert "NoSuchColumn" in str(e)
    assert e.line == 11  # the third line of the query


def test_sandbox_refuses_file_access_even_if_a_check_is_missed(db: Path) -> None:
    from billing_audit.tagging import sandbox

    with billing_audit.open(db):
        pass
    con = sandbox(str(db))
    try:
        for sql in ("select * from read_text('/etc/hostname')", "copy line_items to '/tmp/x.csv'",
                    "set enable_external_access = true"):
            with pytest.raises(Exception, match="disabled by configuration|locked"):
                con.execute(sql)
    finally:
        con.close()
    # and the store works normally afterwards
    with billing_audit.open(db) as store:
        assert store.ingest([PARQUET_DIR]).rows == 12


def test_custom_rules_from_a_folder_load_and_run(tmp_path: Path, db: Path) -> None:
    folder = tmp_path / "team-rules"
    write_rule(folder, GOOD_SQL, extra=GOOD_PARAMS)
    runner = CliRunner()
    assert runner.invoke(main, ["ingest", str(PARQUET_DIR), "--db", str(db)]).exit_code == 0
    r = runner.invoke(main, ["tag", "--db", str(db), "--rules", str(folder), "--select", "TM100"])
    assert r.exit_code == 0, r.output
    assert "TM100 custom.big_gets" in r.output
    with billing_audit.open(db) as store:
        hits = store.con.execute("SELECT rule_id, category, reason FROM rule_hits").fetchall()
    assert hits == [("TM100", "custom", "GET over 0.001")]
    # a parameter changes the result; re-tagging replaces, never duplicates
    r = runner.invoke(main, ["tag", "--db", str(db), "--rules", str(folder), "--select", "custom",
                             "--param", "min_cost=1"])
    assert r.exit_code == 0, r.output
    with billing_audit.open(db) as store:
        assert store.con.execute("SELECT count(*) FROM rule_hits").fetchone() == (0,)


def test_retagging_replaces_hits(db: Path) -> None:
    with billing_audit.open(db) as store:
        store.ingest([PARQUET_DIR])
        first = store.tag()
        second = store.tag()
        assert first.hits == second.hits > 0
        assert store.con.execute("SELECT count(*) FROM rule_hits").fetchone() == (second.hits,)
        assert store.con.execute("SELECT count(DISTINCT run_id) FROM rule_hits").fetchone() == (1,)


def test_all_builtin_rules_run_in_one_scan(db: Path) -> None:
    with billing_audit.open(db) as store:
        store.ingest([PARQUET_DIR])
        result = store.tag()
    assert result.scans == 1
    assert len(result.rules) == len(load_rules().rules)


def test_param_that_no_rule_has(db: Path) -> None:
    r = CliRunner().invoke(main, ["tag", "--db", str(db), "--param", "nonsense=1"])
    assert r.exit_code == 2
    assert "no selected rule has a parameter called 'nonsense'" in r.output


def test_unknown_rule_ids_answer_did_you_mean(db: Path) -> None:
    r = CliRunner().invoke(main, ["rules", "show", "BA01"])
    assert r.exit_code == 2
    assert "did you mean" in r.output and "BA010" in r.output
    r = CliRunner().invoke(main, ["tag", "--db", str(db), "--select", "restart_fees"])
    assert r.exit_code == 2
    assert "did you mean" in r.output and "restart_fee" in r.output


def test_rules_list_and_show() -> None:
    r = CliRunner().invoke(main, ["rules", "list", "--format", "csv"])
    assert r.exit_code == 0
    lines = r.output.strip().splitlines()
    assert lines[0] == "id,name,category,severity,providers,title,source"
    assert any(line.startswith("BA010,restart_fee.interrupted_spot,restart_fee,high,") for line in lines)
    r = CliRunner().invoke(main, ["rules", "show", "restart_fee.interrupted_spot"])
    assert r.exit_code == 0
    assert "min_cost = 0" in r.output and "from line_items" in r.output


def test_rules_test_passes_on_the_builtin_pack_and_fails_on_a_bad_case(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["rules", "test"])
    assert r.exit_code == 0, r.output
    assert r.output.count("ok   BA") == len(load_rules().rules)
    folder = tmp_path / "team"
    path = write_rule(folder, GOOD_SQL, extra=GOOD_PARAMS)
    path.with_name(path.stem + ".cases.yaml").write_text(
        "rule: TM100\nmatch:\n  - {x_UsageType: USE1-Requests-Tier2, BilledCost: 0.5}\n"
        "no_match:\n  - {x_UsageType: USE1-Requests-Tier1, BilledCost: 0.5}\n  - {x_UsageType: USE1-Requests-Tier2, BilledCost: 0}\n"
    )
    r = CliRunner().invoke(main, ["rules", "test", "--rules", str(folder)])
    assert r.exit_code == 0, r.output
    assert "ok   TM100 custom.big_gets: 1 match, 2 near misses" in r.output
    n = len(load_rules().rules)
    assert r.output.strip().splitlines()[-1].startswith(f"{n + 1} rules checked, {n + 1} case files, ")
    path.with_name(path.stem + ".cases.yaml").write_text(
        "rule: TM100\nmatch:\n  - {x_UsageType: USE1-Requests-Tier1, BilledCost: 0.5}\nno_match: []\n"
    )
    r = CliRunner().invoke(main, ["rules", "test", "--rules", str(folder)])
    assert r.exit_code == 1
    assert "FAIL TM100" in r.output and "missed ['match-1']" in r.output


def test_explain_shows_line_hits_and_source(db: Path) -> None:
    with billing_audit.open(db) as store:
        store.ingest([PARQUET_DIR])
        store.tag()
        line_id = store.con.execute(
            "SELECT x_LineItemId FROM line_items WHERE x_UsageType LIKE '%SpotInterruptionRecovery%'"
        ).fetchone()[0]
    r = CliRunner().invoke(main, ["explain", line_id, "--db", str(db)])
    assert r.exit_code == 0, r.output
    assert "gpu-cur-00002.snappy.parquet row 1" in r.output
    assert "matched BA010 [restart_fee]: restart fee: Spot interruption recovery charge" in r.output
    assert "matched BA050 [interruption_signal]" in r.output
    r = CliRunner().invoke(main, ["explain", line_id[:-1] + "9", "--db", str(db)])
    assert r.exit_code == 2
    assert "did you mean" in r.output


def test_line_categories_view_applies_precedence(db: Path) -> None:
    with billing_audit.open(db) as store:
        store.ingest([PARQUET_DIR])
        store.tag()
        rows = store.con.execute(
            "SELECT c.category, c.rule_ids FROM line_categories c JOIN line_items l USING (x_LineItemId) "
            "WHERE l.x_UsageType LIKE '%SpotInterruptionRecovery%'"
        ).fetchall()
    assert rows == [("restart_fee", ["BA010", "BA050"])]


def test_builtin_checkpoint_parameters_default_to_the_configs_checkpoint_defaults() -> None:
    """One list per fact: the rules' checkpoint parameter defaults are the config's defaults."""
    from billing_audit.config import CHECKPOINT_TAG_KEYS, CHECKPOINT_TAG_VALUES

    rules = [r for r in load_rules().rules if "checkpoint_tag_keys" in r.meta.params]
    assert {r.id for r in rules} == {"BA030", "BA040"}
    for r in rules:
        assert r.meta.params["checkpoint_tag_keys"].default == list(CHECKPOINT_TAG_KEYS), r.id
        assert r.meta.params["checkpoint_tag_values"].default == list(CHECKPOINT_TAG_VALUES), r.id


def test_rule_vocabularies_come_from_one_place() -> None:
    """Categories, severities and providers are each validated against one list (providers: the connectors')."""
    from billing_audit import registry
    from billing_audit.rules import CATEGORIES, SEVERITIES

    assert registry.providers() == ("aws", "azure", "gcp")
    assert "restart_fee" in CATEGORIES and "critical" in SEVERITIES
